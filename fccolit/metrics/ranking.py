"""Ranking metrics as torchmetrics Metrics: mean NDCG@k of padded query lists and mean full-ranking NDCG@k of users,
exact under DDP (sum states).

The definitions (gain, discount, ties, empty queries) and the reference are those of the functional kernels in
:mod:`fccolit.metrics.functional.ranking`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fccolit.metrics.base import BatchMetric
from fccolit._checks import check_choice
from fccolit.metrics.functional.ranking import (
    _EMPTY,
    _GAINS,
    _TIES,
    EmptyQuery,
    Gain,
    Ties,
    _apply_empty,
    _check_top_k,
    _full_ranking_ndcg_prefix,
    _ndcg_lists,
)

__all__ = [
    "NDCGScore",
    "FullRankingNDCGScore",
]


class NDCGScore(BatchMetric):
    """Mean per-query NDCG@k of padded score lists over all queries seen, exact under DDP.

    ``update(preds, target, mask=None)`` takes ``[Q, L]`` tensors as :func:`~fccolit.metrics.functional.ndcg_at_k`
    does (from an evaluation batch: ``update(scores, batch["relevance"], batch.get("mask"))``); ``compute()``
    returns the mean of the per-query values, a 0-d float64 tensor (NaN when no query was counted). States:
    ``total`` (sum of per-query NDCG) and ``count`` (counted queries), summed across processes, so the value is the
    global per-query mean whatever the shard sizes; queries skipped by ``empty_query="skip"`` add to neither. With a
    cut-off, ``total_at`` ``[top_k]`` sums NDCG@j for ``j = 1..top_k`` from the same sort, so ``compute()`` also keeps
    the curve NDCG@j against j (:meth:`named_curves`). Logged as ``ndcg@K`` or ``ndcg`` (:func:`build_metric`).

    Args:
        top_k: the cut-off k (``>= 1``); ``None`` ranks the full list.
        gain: ``"exp2"`` (``2**y - 1``, the papers') or ``"linear"`` (``y``, torchmetrics').
        empty_query: what a query without relevant items counts: ``"zero"``, ``"one"`` (allRank's) or ``"skip"``
            (not counted).
        ties: ``"average"`` (expected NDCG over random tie-breaking), ``"pessimistic"`` or ``"optimistic"``.

    Raises:
        ValueError: at construction, ``top_k`` is not a positive int or None, or a choice is unknown; at ``update``,
            as :func:`~fccolit.metrics.functional.ndcg_at_k` (shapes, NaN scores, negative relevance).

    Example:
        >>> import torch
        >>> from fccolit.metrics import NDCGScore
        >>> metric = NDCGScore(top_k=2)
        >>> preds = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]])  # two queries of three items
        >>> target = torch.tensor([[1, 0, 0], [0, 0, 2]])
        >>> metric.update(preds, target)  # query 1: relevant item ranked 1st (1.0); query 2: 2nd (1/log2(3))
        >>> round(float(metric.compute()), 4)
        0.8155
    """

    inputs = ("relevance",)
    optional_inputs = ("mask",)
    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    total: Tensor
    count: Tensor

    def __init__(
        self,
        top_k: int | None = None,
        gain: Gain = "exp2",
        empty_query: EmptyQuery = "zero",
        ties: Ties = "average",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        _check_top_k(top_k)
        check_choice("gain", gain, _GAINS)
        check_choice("empty_query", empty_query, _EMPTY)
        check_choice("ties", ties, _TIES)
        self.top_k = top_k
        self.gain = gain
        self.empty_query = empty_query
        self.ties = ties
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_at", default=torch.zeros(top_k or 0, dtype=torch.float64), dist_reduce_fx="sum")
        self._curve: Tensor | None = None  # NDCG@1..top_k from the last compute()

    def update(self, preds: Tensor, target: Tensor, mask: Tensor | None = None) -> None:  # type: ignore[override]
        """Add the per-query NDCG of a batch of ``[Q, L]`` lists (see :func:`~fccolit.metrics.functional.ndcg_at_k`)."""
        values, prefix = _ndcg_lists(
            preds, target, self.top_k, mask, self.gain, self.empty_query, self.ties, self.top_k or 0
        )
        keep = ~torch.isnan(values)
        # out of place: states created under inference mode (trainer.validate) must not be updated in place later
        self.total = self.total + torch.where(keep, values, torch.zeros_like(values)).sum().to(self.total.dtype)
        self.count = self.count + keep.sum().to(self.count.dtype)
        self.total_at = self.total_at + torch.where(keep[:, None], prefix, torch.zeros_like(prefix)).sum(0)

    def compute(self) -> Tensor:
        """The mean NDCG@k of the counted queries (NaN without one); keeps the curve NDCG@1..top_k."""
        self._curve = self.total_at / self.count if self.top_k else None  # NaN without a counted query
        if self.count == 0:
            return torch.tensor(float("nan"), dtype=torch.float64, device=self.total.device)
        return self.total / self.count

    def reset(self) -> None:
        """Zero the sums and drop the kept curve."""
        self._curve = None
        super().reset()

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{"ndcg@k": NDCG@j for j = 1..top_k}`` ``[top_k]`` from the last ``compute()`` (none for the full list)."""
        return {} if self._curve is None else {"ndcg@k": self._curve}


class FullRankingNDCGScore(BatchMetric):
    """Mean per-user NDCG@k of a full ranking over all items, for several cut-offs at once, exact under DDP.

    Call ``update(scores, heldout_items, heldout_relevance, exclude_items=None)`` once per chunk of users, with the
    arguments of :func:`~fccolit.metrics.functional.full_ranking_ndcg` (``scores`` ``[U_chunk, I]``: every item for
    the users of the chunk); from an evaluation batch: ``update(scores, batch["heldout_items"],
    batch["heldout_relevance"], batch.get("exclude_items"))``. One ``topk`` with the largest cut-off serves every
    cut-off. ``compute()`` returns ``{k: value}`` (every value NaN when no user was counted); :meth:`named_values`
    returns ``{names[i]: value of top_ks[i]}`` and :meth:`named_curves` the curve NDCG@j against j. States: ``total``
    (``[len(top_ks)]`` sums of per-user NDCG), ``total_at`` (``[max(top_ks)]`` sums of NDCG@j, ``j = 1..max(top_ks)``)
    and ``count`` (counted users), all summed across processes.

    Args:
        top_ks: the cut-offs, e.g. ``(10, 20, 50)`` (an int is one cut-off).
        gain: ``"exp2"`` (``2**rel - 1``) or ``"linear"`` (``rel``).
        empty_query: what a user without held-out relevance counts: ``"zero"`` (default), ``"one"`` or ``"skip"``
            (not counted).
        names: the logged name of each cut-off (default ``"ndcg@k"``).

    Raises:
        ValueError: at construction, ``top_ks`` is empty or holds a cut-off below 1, a choice is unknown, or
            ``names`` does not give one name per cut-off; at ``update``, as
            :func:`~fccolit.metrics.functional.full_ranking_ndcg` (shapes, item ids, NaN scores).

    Example:
        >>> import torch
        >>> from fccolit.metrics import FullRankingNDCGScore
        >>> metric = FullRankingNDCGScore(top_ks=(1, 2))
        >>> scores = torch.tensor([[0.1, 0.9, 0.5, 0.3]])  # one user, four items: ranked 1, 2, 3, 0
        >>> metric.update(scores, heldout_items=torch.tensor([[2]]), heldout_relevance=torch.tensor([[1.0]]))
        >>> {name: round(float(value), 4) for name, value in metric.named_values("ndcg").items()}
        {'ndcg@1': 0.0, 'ndcg@2': 0.6309}
    """

    inputs = ("heldout_items", "heldout_relevance")
    optional_inputs = ("exclude_items",)
    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    total: Tensor
    count: Tensor

    def __init__(
        self,
        top_ks: Sequence[int] = (10,),
        gain: Gain = "exp2",
        empty_query: EmptyQuery = "zero",
        names: Sequence[str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(top_ks, int):
            top_ks = (top_ks,)
        top_ks = tuple(top_ks)
        if not top_ks:
            raise ValueError("top_ks must contain at least one cut-off")
        for top_k in top_ks:
            _check_top_k(top_k)
        check_choice("gain", gain, _GAINS)
        check_choice("empty_query", empty_query, _EMPTY)
        names = tuple(f"ndcg@{k}" for k in top_ks) if names is None else tuple(names)
        if len(names) != len(top_ks):
            raise ValueError(f"names must give one logged name per cut-off ({len(top_ks)}), got {len(names)}")
        self.top_ks = top_ks
        self.names = names
        self.gain = gain
        self.empty_query = empty_query
        self.add_state("total", default=torch.zeros(len(top_ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_at", default=torch.zeros(max(top_ks), dtype=torch.float64), dist_reduce_fx="sum")
        self._curve: Tensor | None = None  # NDCG@1..max(top_ks) from the last compute()
        self._scratch: Tensor | None = None  # reused [U·I] buffer for the masked scores (not a state)

    def _workspace(self, scores: Tensor) -> Tensor:
        """A 1-D scratch tensor of ``scores``' dtype and device with room for ``scores``, reused across updates
        (one chunk's worth of memory, released by ``reset``)."""
        scratch = self._scratch
        if (
            scratch is None
            or scratch.dtype != scores.dtype
            or scratch.device != scores.device
            or scratch.numel() < scores.numel()
            or (scratch.is_inference() and not torch.is_inference_mode_enabled())  # read-only outside it
        ):
            scratch = self._scratch = torch.empty(scores.numel(), dtype=scores.dtype, device=scores.device)
        return scratch

    def update(  # type: ignore[override]
        self,
        scores: Tensor,
        heldout_items: Tensor,
        heldout_relevance: Tensor,
        exclude_items: Tensor | None = None,
    ) -> None:
        """Add the per-user NDCG@k of a chunk of users for every cut-off (see
        :func:`~fccolit.metrics.functional.full_ranking_ndcg`)."""
        workspace = self._workspace(scores) if exclude_items is not None and exclude_items.numel() else None
        prefix, ideal = _full_ranking_ndcg_prefix(
            scores, heldout_items, heldout_relevance, exclude_items, len(self.total_at), self.gain, workspace
        )
        prefix = _apply_empty(prefix, ideal[:, None], self.empty_query)  # [U, max(top_ks)]
        values = prefix[:, [k - 1 for k in self.top_ks]].T.contiguous()  # [K, U]
        keep = ~torch.isnan(values[0])
        # out of place: states created under inference mode (trainer.validate) must not be updated in place later
        self.total = self.total + torch.where(keep, values, torch.zeros_like(values)).sum(dim=1).to(self.total.dtype)
        self.count = self.count + keep.sum().to(self.count.dtype)
        self.total_at = self.total_at + torch.where(keep[:, None], prefix, torch.zeros_like(prefix)).sum(0)

    def reset(self) -> None:
        """Zero the sums, drop the kept curve and release the scratch buffer."""
        self._scratch = None
        self._curve = None
        super().reset()

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{"full_ranking_ndcg@k": NDCG@j for j = 1..max(top_ks)}`` from the last ``compute()``."""
        return {} if self._curve is None else {"full_ranking_ndcg@k": self._curve}

    def compute(self) -> dict[int, Tensor]:
        """``{cut-off: mean NDCG@k of the counted users}`` (NaN without one); keeps the curve NDCG@1..max(top_ks)."""
        self._curve = self.total_at / self.count  # NaN without a counted user
        if self.count == 0:
            nan = torch.tensor(float("nan"), dtype=torch.float64, device=self.total.device)
            return {k: nan.clone() for k in self.top_ks}
        return {k: self.total[i] / self.count for i, k in enumerate(self.top_ks)}

    def named_values(self, name: str, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{names[i]: NDCG@top_ks[i]}``: each cut-off under its own logged name (``name`` is not used)."""
        values = self.compute()
        return {logged: values[k] for logged, k in zip(self.names, self.top_ks)}
