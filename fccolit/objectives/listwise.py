"""Listwise cross-entropy (ListNet top-one) as an FCCO problem (Wang & Yang, ICML 2022, §5), and SOLC's form of it
(Qiu et al., ICML 2022, §6 and App. B), the warm-up objective of SONG / K-SONG.

Both read the ranking batch (:mod:`fccolit.objectives.ranking_batch`).

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, get_args

import torch

from fccolit._checks import check_choice
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.ranking_batch import (
    INNER_ESTIMATORS, NORMALIZATIONS, InnerEstimator, Normalization, anchor_item_weights, anchors, field, list_mask,
    row_weights,
)

#: the target top-one probabilities P_q(y_i) of :class:`ListwiseCELoss` (``relevance_weight``)
RelevanceWeight = Literal["linear", "uniform", "none"]
WEIGHTS: tuple[str, ...] = get_args(RelevanceWeight)


class ListwiseCELoss(FCCOObjective):
    r"""ListNet's top-one cross-entropy as an FCCO objective, one term per relevant (query, item) pair.

    .. math::

        F(w) = \frac{1}{|D|} \sum_{(q,i) \in D} f_{q,i}(g_{q,i}(w)), \qquad
        g_{q,i}(w) = \frac{1}{N_q} \sum_{x \in S_q} \exp(h(x) - h(x_i)), \qquad
        f_{q,i}(u) = P_q(y_i)\,(\log u + \log N_q)

    with D the relevant pairs, S_q the N_q items of query q and ``P_q(y_i)`` the target top-one probability of item i.
    Since ``log g_{q,i} + log N_q = −log softmax_i``, ``|D| · F = Σ_q ListNet_q`` exactly (Wang & Yang's ``f = log u``,
    §5, drops the weight and the constant ``log N_q``; both are kept). ``∇f = P/u``. It reads the ranking batch
    (:mod:`fccolit.objectives.ranking_batch`): scores ``[B, L]``, ``relevance``, ``pair_index`` (state row of each
    relevant entry, −1 elsewhere), optional ``mask``, ``num_items`` (N_q), ``num_relevant`` (N_q^+) and optional
    ``relevance_sum``; state rows ``num_pairs``, d' = 1.

    Args:
        relevance_weight: the target ``P_q(y_i)``: ``"linear"`` (default, ``y_i / Σ_{j∈S_q^+} y_j``), ``"uniform"``
            (``1/N_q^+``; equals ``"linear"`` for binary relevance) or ``"none"`` (1: one cross-entropy term per
            relevant pair, SOLC's shape). The per-query normalizers come from ``relevance_sum`` / ``num_relevant``
            when present, else from the list, which must then hold every relevant item of its query.
        inner_estimator: ``"list_mean"`` (default: the mean over the list; exact when the list is the whole S_q, unbiased
            for a uniform sample of it) or ``"stratified"`` (unbiased when the list's relevant and other items are
            uniform samples of the query's; needs ``num_items`` and ``num_relevant``); see
            :func:`~fccolit.objectives.ranking_batch.anchor_item_weights`.

    Raises:
        ValueError: a choice that is not one of the listed values; in :meth:`inner`, scores that are not ``[B, L]``, or
            a ``"linear"`` normalizer taken from a list that lacks some of its query's relevant items.
        KeyError: in :meth:`inner`, a batch without a field the options need (``num_items``, ``num_relevant``).

    Example:
        >>> import torch
        >>> batch = {"relevance": torch.tensor([[2, 0, 1]]), "pair_index": torch.tensor([[0, -1, 1]]),
        ...          "num_items": torch.tensor([3]), "num_relevant": torch.tensor([2])}
        >>> scores = torch.tensor([[1.0, 0.0, 0.5]])  # one query, a list of 3 items, 2 of them relevant
        >>> from fccolit.objectives import ListwiseCELoss
        >>> objective = ListwiseCELoss()
        >>> inner = objective.inner(scores, batch)  # one row per relevant item
        >>> inner.index.tolist(), [round(v, 4) for v in inner.value[:, 0].tolist()]
        ([0, 1], [0.6581, 1.0851])
        >>> round(float(objective.exact_value(scores, batch)), 4)
        0.4235

    The step estimates ∇F when the batch's pairs are a uniform sample of D; a query-level sampler with a fixed number
    of relevant items per query weights queries equally instead (as Qiu et al., §7, sample "a few (e.g., 10) relevant
    items" per query). ``exp(h(x) − h(x_i))`` overflows for score gaps above ~88 (float32) and the state is linear,
    not log-domain (a per-batch shift cannot be used: the state must stay on one scale), so keep the scores bounded.
    """

    inner_dim: ClassVar[int] = 1
    task: ClassVar[str] = "ranking"
    state_rows: ClassVar[str] = "num_pairs"
    needs_global_batch: ClassVar[bool] = False  # a query's list is one row of the batch: no coupling across rows
    batch_fields: ClassVar[tuple[str, ...]] = ("relevance", "pair_index", "mask", "num_items", "num_relevant")
    default_metrics: ClassVar[tuple[str, ...]] = ("ndcg@10", "ndcg")

    def __init__(self, relevance_weight: RelevanceWeight = "linear", inner_estimator: InnerEstimator = "list_mean") -> None:
        super().__init__()
        check_choice("relevance_weight", relevance_weight, WEIGHTS)
        check_choice("inner_estimator", inner_estimator, INNER_ESTIMATORS)
        self.relevance_weight, self.inner_estimator = relevance_weight, inner_estimator

    # ------------------------------------------------------------------ per-row quantities
    def _check_full_relevant(self, relevant: torch.Tensor, batch: dict[str, torch.Tensor], why: str) -> None:
        """The list must hold every relevant item of its query when a normalizer is computed from the list."""
        if "num_relevant" in batch and relevant.device.type == "cpu":
            in_list = relevant.sum(1)
            bad = torch.nonzero(in_list != batch["num_relevant"].to(in_list.dtype)).flatten()
            if bad.numel():
                r = int(bad[0])
                raise ValueError(
                    f"{type(self).__name__}({why}): batch row {r} holds {int(in_list[r])} of its query's "
                    f"{int(batch['num_relevant'][r])} relevant items, so the weight's normalizer cannot be taken from "
                    "the list: add the batch field 'relevance_sum' (Σ of the query's relevance) or use full lists"
                )

    def pair_weight(self, batch: dict[str, torch.Tensor], relevant: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` target probability ``P_q(y_i)`` of every entry (only relevant entries are read)."""
        rel = batch["relevance"].to(torch.float64)
        if self.relevance_weight == "none":
            return torch.ones_like(rel)
        if self.relevance_weight == "uniform":
            if "num_relevant" in batch:
                count = batch["num_relevant"].to(rel.dtype)
            else:
                count = relevant.sum(1).to(rel.dtype)
            return torch.ones_like(rel) / count.clamp_min(1.0).unsqueeze(1)
        if "relevance_sum" in batch:
            total = batch["relevance_sum"].to(rel.dtype)
        else:
            self._check_full_relevant(relevant, batch, "relevance_weight='linear'")
            total = (rel * relevant).sum(1)
        return rel / total.clamp_min(torch.finfo(rel.dtype).tiny).unsqueeze(1)

    # ------------------------------------------------------------------ FCCO interface
    def _check_scores_2d(self, scores: torch.Tensor) -> None:
        if scores.dim() != 2:
            raise ValueError(
                f"{type(self).__name__} expects scores [B, L] (one score per list entry), got {tuple(scores.shape)}"
            )

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        who = type(self).__name__
        self._check_scores_2d(scores)
        mask = list_mask(batch, batch["pair_index"])
        relevant = mask & (batch["relevance"] > 0)
        q, a = anchors(batch)  # (list, position) of each anchor
        s = scores.index_select(0, q)  # [R, L]
        real = mask.index_select(0, q)
        # e_x = exp(h(x) − h(x_i)), exactly 0 on padding (whose scores may be anything: never exponentiated)
        e = torch.exp(torch.where(real, s - s.gather(1, a.unsqueeze(1)), torch.zeros_like(s))) * real
        num_items = field(batch, "num_items", who).to(scores.dtype).index_select(0, q)
        if self.inner_estimator == "list_mean":
            value = e.sum(1) / real.sum(1).to(scores.dtype)
        else:
            value = (e * anchor_item_weights(batch, q, a, self.inner_estimator, scores.dtype, who)).sum(1)
        context = {
            "weight": self.pair_weight(batch, relevant)[q, a].to(scores.dtype),
            "log_num_items": torch.log(num_items),
        }
        return InnerBatch(index=batch["pair_index"][q, a], value=value.unsqueeze(-1), context=context)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return context["weight"] * (torch.log(u[:, 0]) + context["log_num_items"])

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return (context["weight"] / u[:, 0]).unsqueeze(-1)


class SOLCListwiseCELoss(ListwiseCELoss):
    r"""Listwise cross-entropy as SOLC optimizes it (Qiu et al., ICML 2022, App. B), the warm-up of SONG / K-SONG.

    .. math::

        F(w) = \frac{1}{N} \sum_q \frac{1}{N_q} \sum_{x_i \in S_q^+} -\ln \frac{e^{h_q(x_i)}}{\sum_{x_j \in S_q} e^{h_q(x_j)}},
        \qquad g_{q,i} = \frac{1}{N_q}\sum_{j \in S_q} e^{h_j - h_i}, \quad f_{q,i}(u) = \frac{\ln u + \ln N_q}{N_q}

    It is :class:`ListwiseCELoss` (inner value, f and ∇f = weight/u) with the pair weight ``P = 1``, times ``1/N_q``
    (``list_size_weight``), times the row weight of ``normalization``. For SOLC's log-domain state, :meth:`log_inner`
    gives ``ln ĝ`` by a log-sum-exp (no overflow for large score gaps) and :meth:`outer_log` takes ``ln u``.

    Args:
        relevance_weight: ``"none"`` (default: P = 1 per relevant item, as printed), or ``"uniform"`` / ``"linear"``
            (ListNet's normalized targets, see :class:`ListwiseCELoss`).
        inner_estimator: ``"list_mean"`` or ``"stratified"`` (see :class:`ListwiseCELoss`).
        normalization: ``"per_query"`` (the formula's 1/N over queries, a user weighted by their number of relevant
            items), ``"query_mean"`` (every user weighted equally, Algorithm 3's average, which the SOLC warm-up configs
            use) or ``"pairs"`` (a mean over pairs); see :func:`~fccolit.objectives.ranking_batch.row_weights`.
        list_size_weight: keep the ``1/N_q`` of App. B and §6 (True, as printed); False drops it, as LibAUC's
            ``ListwiseCELoss`` does.

    Raises:
        ValueError: a choice that is not one of the listed values; in :meth:`inner` / :meth:`log_inner`, scores that
            are not ``[B, L]``.
        KeyError: in :meth:`inner` / :meth:`log_inner`, a batch without ``num_items`` (or another field the options
            need).

    Example:
        >>> import torch
        >>> batch = {"relevance": torch.tensor([[2, 0, 1]]), "pair_index": torch.tensor([[0, -1, 1]]),
        ...          "num_items": torch.tensor([3]), "num_relevant": torch.tensor([2])}
        >>> scores = torch.tensor([[1.0, 0.0, 0.5]])  # one query, a list of 3 items, 2 of them relevant
        >>> from fccolit.objectives import SOLCListwiseCELoss
        >>> objective = SOLCListwiseCELoss()
        >>> [round(v, 4) for v in objective.log_inner(scores, batch).value[:, 0].tolist()]  # ln ĝ
        [-0.4183, 0.0817]
        >>> round(float(objective.exact_value(scores, batch)), 4)
        0.6202

    The printed Algorithm 3 omits the factor ``exp(h_j − h_i)`` in its gradient; the estimator of
    :class:`~fccolit.algorithms.song.SOLC` is ``∇f(u)·∇ĝ``, which has it.
    """

    def __init__(
        self,
        relevance_weight: RelevanceWeight = "none",
        inner_estimator: InnerEstimator = "list_mean",
        normalization: Normalization = "per_query",
        list_size_weight: bool = True,
    ) -> None:
        super().__init__(relevance_weight=relevance_weight, inner_estimator=inner_estimator)
        check_choice("normalization", normalization, NORMALIZATIONS)
        self.normalization, self.list_size_weight = normalization, bool(list_size_weight)

    default_metrics: ClassVar[tuple[str, ...]] = ("ndcg@1", "ndcg@3", "ndcg@5")

    def pair_weight(self, batch: dict[str, torch.Tensor], relevant: torch.Tensor) -> torch.Tensor:
        weight = super().pair_weight(batch, relevant)  # [B, L] float64
        if self.list_size_weight:
            n = field(batch, "num_items", type(self).__name__).to(weight.dtype)
            weight = weight / n.unsqueeze(1)
        pair_index = batch["pair_index"]
        q, _ = anchors(batch)
        per_row = torch.zeros(pair_index.shape[0], dtype=weight.dtype, device=weight.device)
        per_row.index_copy_(0, q, row_weights(batch, q, self.normalization, weight.dtype))  # equal within a row
        return weight * per_row.unsqueeze(1)

    def log_inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """Like :meth:`inner` with ``value = ln ĝ`` ``[R, 1]`` (differentiable), computed as a log-sum-exp."""
        self._check_scores_2d(scores)
        q, a = anchors(batch)
        mask = list_mask(batch, batch["pair_index"])
        if self.inner_estimator == "list_mean":  # ln ĝ = logsumexp_{real j}(h_j) − h_i − ln |B_q|
            real = torch.where(mask, scores, torch.full_like(scores, -math.inf))
            log_count = torch.log(mask.sum(1).to(scores.dtype))
            value = (torch.logsumexp(real, dim=1) - log_count).index_select(0, q) - scores[q, a]
            value = value.unsqueeze(1)
        else:
            s = scores.index_select(0, q)
            c = anchor_item_weights(batch, q, a, self.inner_estimator, scores.dtype, type(self).__name__)
            log_c = torch.where(c > 0, torch.log(c.clamp_min(torch.finfo(c.dtype).tiny)), torch.full_like(c, -math.inf))
            value = torch.logsumexp(s - s.gather(1, a.unsqueeze(1)) + log_c, dim=1, keepdim=True)
        relevant = mask & (batch["relevance"] > 0)
        num_items = field(batch, "num_items", type(self).__name__).to(scores.dtype).index_select(0, q)
        context = {"weight": self.pair_weight(batch, relevant)[q, a].to(scores.dtype), "log_num_items": torch.log(num_items)}
        return InnerBatch(index=batch["pair_index"][q, a], value=value, context=context)

    def outer_log(self, log_u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``f(u)`` from ``ln u`` ``[R, 1]``: ``weight · (ln u + ln N_q)``."""
        return context["weight"] * (log_u[:, 0] + context["log_num_items"])
