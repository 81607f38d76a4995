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
from fccolit.metrics.functional.ranking import (
    _EMPTY,
    _GAINS,
    _TIES,
    _apply_empty,
    _check_choice,
    _check_k,
    _full_ranking_ndcg_prefix,
    _ndcg_lists,
)

__all__ = [
    "NDCG",
    "FullRankingNDCG",
]


class NDCG(BatchMetric):
    """Mean per-query NDCG@k over all queries seen, exact under DDP.

    States: ``total`` (sum of per-query NDCG) and ``count`` (number of counted queries), both reduced with
    ``sum`` across processes, so ``compute() = total / count`` is the global per-query mean whatever the
    shard sizes. Queries skipped by ``empty="skip"`` add to neither. ``compute()`` with no counted query
    returns NaN (no error). With a cut-off ``k``, ``total_at`` ``[k]`` sums NDCG@j for ``j = 1..k`` from the same
    sort (one cumulative sum), so ``compute()`` also keeps the curve NDCG@j against j
    (:meth:`named_curves`: ``{"ndcg@k": [k]}``, whose last entry is the value up to rounding).

    Args:
        k, gain, empty, ties: see :func:`ndcg_at_k`.

    ``update(preds, target, mask=None)`` takes ``[Q, L]`` tensors as in :func:`ndcg_at_k`; from an evaluation
    batch, ``update(scores, batch["relevance"], batch.get("mask"))``.

    Example:
        >>> import torch
        >>> from fccolit.metrics import NDCG
        >>> metric = NDCG(k=2)
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
        k: int | None = None,
        gain: str = "exp2",
        empty: str = "zero",
        ties: str = "average",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        _check_k(k)
        _check_choice("gain", gain, _GAINS)
        _check_choice("empty", empty, _EMPTY)
        _check_choice("ties", ties, _TIES)
        self.k = k
        self.gain = gain
        self.empty = empty
        self.ties = ties
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_at", default=torch.zeros(k or 0, dtype=torch.float64), dist_reduce_fx="sum")
        self._curve: Tensor | None = None  # NDCG@1..k from the last compute()

    def update(self, preds: Tensor, target: Tensor, mask: Tensor | None = None) -> None:  # type: ignore[override]
        values, prefix = _ndcg_lists(preds, target, self.k, mask, self.gain, self.empty, self.ties, self.k or 0)
        keep = ~torch.isnan(values)
        # out of place: states created under inference mode (trainer.validate) must not be updated in place later
        self.total = self.total + torch.where(keep, values, torch.zeros_like(values)).sum().to(self.total.dtype)
        self.count = self.count + keep.sum().to(self.count.dtype)
        self.total_at = self.total_at + torch.where(keep[:, None], prefix, torch.zeros_like(prefix)).sum(0)

    def compute(self) -> Tensor:
        self._curve = self.total_at / self.count if self.k else None  # NaN without a counted query
        if self.count == 0:
            return torch.tensor(float("nan"), dtype=torch.float64, device=self.total.device)
        return self.total / self.count

    def reset(self) -> None:
        self._curve = None
        super().reset()

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{"ndcg@k": NDCG@j for j = 1..k}`` ``[k]`` from the last ``compute()`` (none for the full list)."""
        return {} if self._curve is None else {"ndcg@k": self._curve}


class FullRankingNDCG(BatchMetric):
    """Mean per-user full-ranking NDCG@k for several cut-offs at once, exact under DDP.

    Call ``update(scores, heldout_items, heldout_relevance, exclude_items=None)`` once per chunk of users
    (``scores`` is ``[U_chunk, I]``: all items for the users of the chunk; see :func:`full_ranking_ndcg`);
    one ``topk`` with the largest cut-off serves every ``k``. From an evaluation batch: ``update(scores,
    batch["heldout_items"], batch["heldout_relevance"], batch.get("exclude_items"))``. States: ``total``
    (``[len(ks)]`` sums of per-user NDCG), ``total_at`` (``[max(ks)]`` sums of NDCG@j for every ``j = 1..max(ks)``,
    read from the same ``topk``) and ``count`` (number of counted users), all summed across processes.
    ``compute()`` returns ``{k: value}``; with no counted user every value is NaN. :meth:`named_values` returns
    ``{names[i]: value of ks[i]}``, :meth:`named_curves` the curve NDCG@j against j.

    Args:
        ks: cut-offs, e.g. ``(10, 20, 50)``.
        gain: ``"exp2"`` or ``"linear"``.
        empty: users without held-out relevance count as 0 (``"zero"``, default), 1 (``"one"``) or are not
            counted (``"skip"``).
        names: the logged name of each cut-off (default ``"ndcg@k"``).
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
        ks: Sequence[int] = (10,),
        gain: str = "exp2",
        empty: str = "zero",
        names: Sequence[str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(ks, int):
            ks = (ks,)
        ks = tuple(ks)
        if not ks:
            raise ValueError("ks must contain at least one cut-off")
        for k in ks:
            _check_k(k)
        _check_choice("gain", gain, _GAINS)
        _check_choice("empty", empty, _EMPTY)
        names = tuple(f"ndcg@{k}" for k in ks) if names is None else tuple(names)
        if len(names) != len(ks):
            raise ValueError(f"names must give one logged name per cut-off ({len(ks)}), got {len(names)}")
        self.ks = ks
        self.names = names
        self.gain = gain
        self.empty = empty
        self.add_state("total", default=torch.zeros(len(ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_at", default=torch.zeros(max(ks), dtype=torch.float64), dist_reduce_fx="sum")
        self._curve: Tensor | None = None  # NDCG@1..max(ks) from the last compute()
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
        workspace = self._workspace(scores) if exclude_items is not None and exclude_items.numel() else None
        prefix, ideal = _full_ranking_ndcg_prefix(
            scores, heldout_items, heldout_relevance, exclude_items, len(self.total_at), self.gain, workspace
        )
        prefix = _apply_empty(prefix, ideal[:, None], self.empty)  # [U, max(ks)]
        values = prefix[:, [k - 1 for k in self.ks]].T.contiguous()  # [K, U]
        keep = ~torch.isnan(values[0])
        # out of place: states created under inference mode (trainer.validate) must not be updated in place later
        self.total = self.total + torch.where(keep, values, torch.zeros_like(values)).sum(dim=1).to(self.total.dtype)
        self.count = self.count + keep.sum().to(self.count.dtype)
        self.total_at = self.total_at + torch.where(keep[:, None], prefix, torch.zeros_like(prefix)).sum(0)

    def reset(self) -> None:
        self._scratch = None
        self._curve = None
        super().reset()

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{"full_ranking_ndcg@k": NDCG@j for j = 1..max(ks)}`` from the last ``compute()``."""
        return {} if self._curve is None else {"full_ranking_ndcg@k": self._curve}

    def compute(self) -> dict[int, Tensor]:
        self._curve = self.total_at / self.count  # NaN without a counted user
        if self.count == 0:
            nan = torch.tensor(float("nan"), dtype=torch.float64, device=self.total.device)
            return {k: nan.clone() for k in self.ks}
        return {k: self.total[i] / self.count for i, k in enumerate(self.ks)}

    def named_values(self, name: str, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{names[i]: NDCG@ks[i]}``: each cut-off under its own logged name (``name`` is not used)."""
        values = self.compute()
        return {logged: values[k] for logged, k in zip(self.names, self.ks)}
