"""NDCG surrogates as FCCO problems (Qiu et al., ICML 2022): SONG's :class:`NDCGSurrogate` and K-SONG's
:class:`TopKNDCGSurrogate` with its lower-level threshold solver.

Both read the ranking batch (:mod:`fccolit.objectives.ranking_batch`: its fields, anchors, and the
``inner_estimator`` / ``normalization`` choices every ranking objective shares). SOLC's listwise cross-entropy, the
warm-up objective of SONG / K-SONG, is :class:`fccolit.objectives.listwise.SOLCListwiseCELoss`.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

import torch
import torch.nn.functional as F

from fccolit._checks import check_choice
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.ranking_batch import (
    INNER_ESTIMATORS, NORMALIZATIONS, InnerEstimator, Normalization, anchor_item_weights, anchors, field, list_mask,
    query_item_weights, row_weights,
)
from fccolit.surrogates import SurrogateName, pairwise_surrogate

#: the smooth selectors ψ of :class:`TopKNDCGSurrogate` (``selector``)
Selector = Literal["sigmoid", "squared_hinge"]
SELECTORS: tuple[str, ...] = get_args(Selector)
_LN2 = math.log(2.0)


class RankingObjective(FCCOObjective):
    r"""Base of the per-pair ranking objectives: one state row per relevant (query, item) pair (``num_pairs``).

    Args:
        normalization: ``"per_query"``, ``"query_mean"`` or ``"pairs"``: how F averages over queries and pairs
            (:func:`~fccolit.objectives.ranking_batch.row_weights`).
        inner_estimator: ``"list_mean"`` or ``"stratified"``: which average of the list the inner estimate is
            (:func:`~fccolit.objectives.ranking_batch.anchor_item_weights`).

    Raises:
        ValueError: ``normalization`` or ``inner_estimator`` is not one of the listed values.

    Example:
        >>> objective = RankingObjective()
        >>> objective.normalization, objective.inner_estimator, objective.state_rows
        ('per_query', 'list_mean', 'num_pairs')
        >>> RankingObjective(normalization="mean")
        Traceback (most recent call last):
        ...
        ValueError: normalization must be one of 'per_query', 'pairs', 'query_mean', got 'mean'
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    inner_dim: ClassVar[int] = 1
    task: ClassVar[str] = "ranking"
    state_rows: ClassVar[str] = "num_pairs"
    needs_global_batch: ClassVar[bool] = False  # a query's list is one batch row: no coupling across rows
    batch_fields: ClassVar[tuple[str, ...]] = ("query", "relevance", "pair_index", "mask", "num_items", "num_relevant")
    default_metrics: ClassVar[tuple[str, ...]] = ("ndcg@1", "ndcg@3", "ndcg@5")

    def __init__(self, normalization: Normalization = "per_query", inner_estimator: InnerEstimator = "list_mean") -> None:
        super().__init__()
        check_choice("normalization", normalization, NORMALIZATIONS)
        check_choice("inner_estimator", inner_estimator, INNER_ESTIMATORS)
        self.normalization, self.inner_estimator = normalization, inner_estimator

    @staticmethod
    def _check_scores(scores: torch.Tensor, batch: dict[str, torch.Tensor], who: str) -> None:
        if scores.dim() != 2 or scores.shape != batch["pair_index"].shape:
            raise ValueError(
                f"{who} expects scores [B, L] with the shape of the batch's lists {tuple(batch['pair_index'].shape)}, "
                f"got {tuple(scores.shape)}"
            )


class NDCGSurrogate(RankingObjective):
    r"""NDCG surrogate of Qiu et al. (ICML 2022, eqs. (2)–(3)) as an FCCO objective, minimized as ``F = −surrogate``.

    .. math::

        g_{q,i}(w) = \frac{1}{N_q} \sum_{x' \in S_q} ℓ(h_q(x') - h_q(x_i)), \qquad
        f_{q,i}(u) = \frac{1}{Z_q} \frac{1 - 2^{y_i}}{\log_2(N_q u + 1)}

    ``N_q·g`` is a smooth upper bound of the rank of item i when the squared hinge's margin c ≥ 1 (Lemma 4.1: then the
    surrogate is a lower bound of NDCG); Z_q is the ideal DCG of the query (batch field ``ideal_dcg``) and y_i the
    item's relevance. ``∇f = (2^{y_i} − 1) N_q / (Z_q ln2 (N_q u + 1) log2²(N_q u + 1)) > 0`` (closed form). It reads the
    ranking batch (:mod:`fccolit.objectives.ranking_batch`); one state row per relevant pair (``num_pairs``), d' = 1.

    Args:
        surrogate: pairwise surrogate ℓ (:mod:`fccolit.surrogates`); ``"squared_hinge"`` is the paper's.
        margin: c of the squared hinge (not given in the paper; 1.0 as in the authors' code and LibAUC, the smallest
            margin for which Lemma 4.1's lower bound holds).
        scale: slope of the logistic / sigmoid / exp surrogates.
        normalization: ``"per_query"``, ``"query_mean"`` or ``"pairs"`` (:class:`RankingObjective`).
        inner_estimator: ``"list_mean"`` or ``"stratified"`` (:class:`RankingObjective`).

    Raises:
        ValueError: a choice that is not one of the listed values, or a surrogate with ``ℓ(0) ≤ 0`` (the self pair
            must make ``g > 0``, otherwise f is infinite); in :meth:`inner`, scores that are not the batch's ``[B, L]``,
            or a query with relevant items and ``ideal_dcg ≤ 0``.
        KeyError: in :meth:`inner`, a batch without a field it needs (``num_items``, ``ideal_dcg``, ...).

    Example:
        >>> import torch
        >>> batch = {"relevance": torch.tensor([[2, 0, 1]]), "pair_index": torch.tensor([[0, -1, 1]]),
        ...          "num_items": torch.tensor([3]), "num_relevant": torch.tensor([2]),
        ...          "ideal_dcg": torch.tensor([3.6309]), "ideal_dcg_at_k": torch.tensor([3.6309])}
        >>> scores = torch.tensor([[1.0, 0.0, 0.5]])  # one query, a list of 3 items, 2 of them relevant
        >>> from fccolit.objectives import NDCGSurrogate
        >>> objective = NDCGSurrogate()
        >>> inner = objective.inner(scores, batch)  # one row per relevant item
        >>> inner.index.tolist(), [round(v, 4) for v in inner.value[:, 0].tolist()]
        ([0, 1], [0.4167, 1.1667])
        >>> round(float(objective.exact_value(scores, batch)), 4)
        -0.8332

    The text of eq. (3) prints ``2^{u_i^q}``; App. E's ``2^{y}`` is used. The self pair ``x' = x_i`` is in the sum, so
    ``g ≥ ℓ(0)/N_q > 0`` and f and ∇f are finite at every estimate. ``inner`` returns per anchor row the context
    ``gain`` (2^y − 1), ``ideal`` (Z_q), ``num_items`` (N_q), ``weight`` (row weight), ``row`` (batch row of the query)
    and ``anchor_score`` (h_i, differentiable; used by K-SONG's selector).
    """

    ideal_key: ClassVar[str] = "ideal_dcg"

    def __init__(
        self,
        surrogate: SurrogateName = "squared_hinge",
        margin: float = 1.0,
        scale: float = 1.0,
        normalization: Normalization = "per_query",
        inner_estimator: InnerEstimator = "list_mean",
    ) -> None:
        super().__init__(normalization, inner_estimator)
        self.surrogate, self.margin, self.scale = surrogate, float(margin), float(scale)
        self.loss = pairwise_surrogate(surrogate, margin, scale)
        self_pair = float(self.loss(torch.zeros((), dtype=torch.float64)))
        if not self_pair > 0.0:
            raise ValueError(
                f"NDCGSurrogate: ℓ(0) = {self_pair} for surrogate={surrogate!r}, margin={margin}: the self pair must give "
                "a positive inner value, otherwise log2(N_q·g + 1) can be 0 and f is infinite (use margin > 0)"
            )

    def _pairwise(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``ℓ(s − h)`` broadcast (the squared hinge in one fused pass less)."""
        if self.surrogate == "squared_hinge":
            return torch.relu(s - (h - self.margin)).square()
        return self.loss(s - h)

    def _inner_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor], q: torch.Tensor, a: torch.Tensor,
                     who: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ĝ [R, 1], h_i [R])``. Padded scores are zeroed first (they may be anything), and the list mean is
        computed without a weight matrix; when the anchors fill the leading columns (the recommendation layout:
        P relevant items, then the others) the pairs are laid out as ``[B, P, L]`` without gathering rows."""
        mask = batch.get("mask")
        padded = mask is not None and not bool(mask.all())
        if padded:
            scores = torch.where(mask.to(torch.bool), scores, torch.zeros_like(scores))
        if self.inner_estimator == "stratified":
            s = scores.index_select(0, q)
            h_i = s.gather(1, a.unsqueeze(1))
            c = anchor_item_weights(batch, q, a, self.inner_estimator, scores.dtype, who)
            return (self._pairwise(s, h_i) * c).sum(1, keepdim=True), h_i.squeeze(1)
        b, length = scores.shape
        count = mask.sum(1).to(scores.dtype) if padded else None
        p = int(a.max()) + 1 if a.numel() else 0
        if b * p <= 1.25 * q.numel():  # dense block of leading anchor columns
            h = scores[:, :p]
            ell = self._pairwise(scores.unsqueeze(1), h.unsqueeze(2))  # [B, P, L]
            if padded:
                ell = ell * mask.unsqueeze(1)
            total = ell.sum(2)[q, a]
            h_i = h[q, a]
        else:
            s = scores.index_select(0, q)
            h_i = s.gather(1, a.unsqueeze(1)).squeeze(1)
            ell = self._pairwise(s, h_i.unsqueeze(1))
            if padded:
                ell = ell * mask.index_select(0, q)
            total = ell.sum(1)
        value = total / (count.index_select(0, q) if padded else float(length))
        return value.unsqueeze(1), h_i

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        who = type(self).__name__
        self._check_scores(scores, batch, who)
        q, a = anchors(batch)
        value, h_i = self._inner_value(scores, batch, q, a, who)
        ideal = field(batch, self.ideal_key, who).to(scores.dtype).index_select(0, q)
        if ideal.device.type == "cpu" and ideal.numel() and not bool((ideal > 0).all()):
            bad = int(q[torch.nonzero(~(ideal > 0)).flatten()[0]])
            raise ValueError(
                f"{who}: batch row {bad} has relevant entries but {self.ideal_key} = {float(batch[self.ideal_key][bad])}; "
                f"the DataModule must give the ideal DCG of every query with a relevant item (> 0)"
            )
        y = batch["relevance"].to(scores.dtype)[q, a]
        context = {
            "gain": torch.exp2(y) - 1.0,
            "ideal": ideal,
            "num_items": field(batch, "num_items", who).to(scores.dtype).index_select(0, q),
            "weight": row_weights(batch, q, self.normalization, scores.dtype),
            "row": q,
            "anchor_score": h_i,
        }
        return InnerBatch(index=batch["pair_index"][q, a], value=value, context=context)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        n = context["num_items"]
        return -context["weight"] * context["gain"] / (context["ideal"] * torch.log2(n * u[:, 0] + 1.0))

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        n = context["num_items"]
        nu1 = n * u[:, 0] + 1.0
        grad = context["weight"] * context["gain"] * n / (context["ideal"] * _LN2 * nu1 * torch.log2(nu1).square())
        return grad.unsqueeze(-1)


@dataclass
class LowerLevel:
    """The smoothed lower-level problem of one batch at the thresholds λ (all ``[B]``, detached).

    Attributes:
        grad: ``∂_λ L_q(λ; w; B_q)``.
        hess: ``∂²_λ L_q(λ; w; B_q) ≥ τ2``.
        weights: ``[B, L]`` ``c_j σ(z_j)(1 − σ(z_j))/τ1``: ``−∇_w ∂_λ L_q = Σ_j weights_j ∇h_j``.

    :meth:`TopKNDCGSurrogate.lower_level` builds it; a plain container, it checks nothing.

    Example:
        >>> import torch
        >>> lower = LowerLevel(grad=torch.zeros(2), hess=torch.ones(2), weights=torch.zeros(2, 3))
        >>> lower.hess, tuple(lower.weights.shape)
        (tensor([1., 1.]), (2, 3))
    """

    grad: torch.Tensor
    hess: torch.Tensor
    weights: torch.Tensor


class TopKNDCGSurrogate(NDCGSurrogate):
    r"""The top-K NDCG surrogate of Qiu et al. (ICML 2022, §5): a bilevel compositional objective (eq. (4)), minimized.

    .. math::

        F_K(w) = \text{mean}_{(q,i)}\ ψ(h_q(x_i) - \hat λ_q(w)) \, f^K_{q,i}(g_{q,i}(w)), \qquad
        \hat λ_q(w) = \arg\min_λ L_q(λ; w)

        L_q(λ; w) = \frac{K + ε}{N_q} λ + \frac{τ_2}{2} λ^2 + \frac{1}{N_q} \sum_{x_j \in S_q} τ_1 \ln(1 + e^{(h_q(x_j) - λ)/τ_1})

    f^K is :class:`NDCGSurrogate`'s f with ``Z_q^K`` (batch field ``ideal_dcg_at_k``; the DataModule's ``top_k`` must
    equal K) in place of Z_q; ψ is a smooth selector and ``λ̂_q`` estimates the threshold of the top K (Lemmas 5.1 and
    5.3): with well separated scores and small τ1, τ2 it sits between the (K+1)-th and the K-th largest score.
    :meth:`lower_level` gives ``∂_λ L_q``, ``∂²_λ L_q`` and the weights of the implicit gradient ``∇λ̂_q``;
    :meth:`solve_threshold` solves ``λ̂_q`` (bisection, then Newton).

    Args:
        top_k: K (Table 4: 10 for learning to rank, 300 for recommendation).
        epsilon: ε of Lemma 5.1 / eq. (4), added to K in L_q; eq. (6), the authors' code and LibAUC drop it (ε = 0,
            the default).
        threshold_smoothing: τ1, the temperature of the softplus ``τ1 ln(1 + e^{(h − λ)/τ1})`` that smooths
            ``[h − λ]_+`` in L_q (not given in the paper; LibAUC's 0.01).
        threshold_regularization: τ2, the weight of ``(τ2/2) λ²`` that makes L_q strongly convex (LibAUC's 1e-4).
        selector_slope: α of the sigmoid selector ``ψ(s) = σ(α s)`` (LibAUC's 2.0; the paper gives no value).
        selector: ψ: ``"sigmoid"`` (σ(α s), default: App. E's "logistic loss", the authors' code and LibAUC) or
            ``"squared_hinge"`` (``max(s, 0)²``, the remark after Lemma 5.2: items below λ get no weight at all).
        surrogate, margin, scale, normalization, inner_estimator: see :class:`NDCGSurrogate`; the lower level uses the
            same ``inner_estimator``.

    Raises:
        ValueError: ``top_k < 1``, ``epsilon`` outside [0, 1), ``threshold_smoothing`` or ``threshold_regularization``
            ≤ 0, or a choice that is not one of the listed values (and what :class:`NDCGSurrogate` raises).

    Example:
        >>> import torch
        >>> batch = {"relevance": torch.tensor([[2, 0, 1]]), "pair_index": torch.tensor([[0, -1, 1]]),
        ...          "num_items": torch.tensor([3]), "num_relevant": torch.tensor([2]),
        ...          "ideal_dcg": torch.tensor([3.6309]), "ideal_dcg_at_k": torch.tensor([3.6309])}
        >>> scores = torch.tensor([[1.0, 0.0, 0.5]])  # one query, a list of 3 items, 2 of them relevant
        >>> from fccolit.objectives import TopKNDCGSurrogate
        >>> objective = TopKNDCGSurrogate(top_k=2)
        >>> [round(v, 3) for v in objective.solve_threshold(scores, batch).tolist()]  # λ̂_q, between the 3rd and 2nd
        [0.104]
        >>> round(float(objective.exact_value(scores, batch)), 4)
        -0.6928

    Implicit gradient (App. E eq. (11); eq. (7) of the main text has the wrong sign, as finite differences confirm):
    ``∇ψ(h_i − λ̂) = ψ'·(∇h_i − ∇λ̂)`` with ``∇λ̂ = −∇²_{wλ}L / ∇²_λ L = Σ_j c_j σ'_j/τ1 ∇h_j / ∂²_λ L``. For ε ∈ (0, 1)
    the threshold sits at ``θ_{K+1} − τ1 logit(ε)``; for ε = 0 at the midpoint.
    """

    ideal_key: ClassVar[str] = "ideal_dcg_at_k"
    batch_fields: ClassVar[tuple[str, ...]] = RankingObjective.batch_fields + ("ideal_dcg_at_k",)

    def __init__(
        self,
        top_k: int = 10,
        epsilon: float = 0.0,
        threshold_smoothing: float = 0.01,
        threshold_regularization: float = 1e-4,
        selector_slope: float = 2.0,
        selector: Selector = "sigmoid",
        surrogate: SurrogateName = "squared_hinge",
        margin: float = 1.0,
        scale: float = 1.0,
        normalization: Normalization = "per_query",
        inner_estimator: InnerEstimator = "list_mean",
    ) -> None:
        super().__init__(surrogate, margin, scale, normalization, inner_estimator)
        if int(top_k) < 1:
            raise ValueError(f"top_k (K) must be >= 1, got {top_k}")
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"epsilon (ε) must be in [0, 1), got {epsilon}")
        if threshold_smoothing <= 0 or threshold_regularization <= 0:
            raise ValueError(
                "threshold_smoothing (τ1) and threshold_regularization (τ2) must be > 0 (L_q is then smooth and "
                f"τ2-strongly convex), got {threshold_smoothing}, {threshold_regularization}"
            )
        check_choice("selector", selector, SELECTORS)
        self.top_k, self.epsilon = int(top_k), float(epsilon)
        self.threshold_smoothing, self.threshold_regularization = float(threshold_smoothing), float(threshold_regularization)
        self.selector_slope = float(selector_slope)
        self.selector_kind = selector

    # ------------------------------------------------------------------ the selector ψ
    def selector(self, s: torch.Tensor) -> torch.Tensor:
        """``ψ(s) = σ(α s)`` (``selector="sigmoid"``) or ``max(s, 0)²`` (``"squared_hinge"``)."""
        if self.selector_kind == "squared_hinge":
            return torch.relu(s).square()
        return torch.sigmoid(self.selector_slope * s)

    def selector_grad(self, s: torch.Tensor) -> torch.Tensor:
        """``ψ'(s) = α σ(α s)(1 − σ(α s))`` (sigmoid) or ``2 max(s, 0)`` (squared hinge)."""
        if self.selector_kind == "squared_hinge":
            return 2.0 * torch.relu(s)
        p = torch.sigmoid(self.selector_slope * s)
        return self.selector_slope * p * (1.0 - p)

    # ------------------------------------------------------------------ the lower level
    def _lower_inputs(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        who = type(self).__name__
        c = query_item_weights(batch, self.inner_estimator, scores.dtype, who)
        n = field(batch, "num_items", who).to(scores.dtype)
        return c, (self.top_k + self.epsilon) / n

    def lower_objective(self, lam: torch.Tensor, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``L_q(λ; w; B_q)`` for each query row, ``[B]`` (eq. (6), with ε)."""
        c, slope = self._lower_inputs(scores, batch)
        soft = self.threshold_smoothing * F.softplus((scores - lam.unsqueeze(1)) / self.threshold_smoothing)
        return slope * lam + 0.5 * self.threshold_regularization * lam.square() + torch.where(c > 0, c * soft, torch.zeros_like(soft)).sum(1)

    @torch.no_grad()
    def lower_level(self, scores: torch.Tensor, batch: dict[str, torch.Tensor], lam: torch.Tensor) -> LowerLevel:
        """Closed-form ``∂_λ L_q``, ``∂²_λ L_q`` and the weights of ``∇_w λ̂`` at ``λ`` ``[B]`` (Qiu et al., §5)."""
        scores = scores.detach()
        c, slope = self._lower_inputs(scores, batch)
        sig = torch.sigmoid((scores - lam.to(scores.dtype).unsqueeze(1)) / self.threshold_smoothing)
        sig = torch.where(c > 0, sig, torch.zeros_like(sig))
        weights = c * sig * (1.0 - sig) / self.threshold_smoothing
        grad = slope + self.threshold_regularization * lam.to(scores.dtype) - (c * sig).sum(1)
        return LowerLevel(grad=grad, hess=self.threshold_regularization + weights.sum(1), weights=weights)

    @torch.no_grad()
    def share_above(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], lam: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Σ_j c_j 1(h_j > λ_q), K/N_q)`` per query row ``[B]``: the share of the query's list above λ_q as the
        lower level estimates it from the sampled list (item weights c), and the share above an exact top-K
        threshold."""
        c, slope = self._lower_inputs(scores.detach(), batch)
        above = (scores.detach() > lam.to(scores.dtype).unsqueeze(1)) & (c > 0)
        return torch.where(above, c, torch.zeros_like(c)).sum(1), slope.expand(scores.shape[0])

    @staticmethod
    def threshold_score(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``Σ_j weights_j h_j`` ``[B]`` (differentiable in the scores): its gradient divided by ``∂²_λ L`` is
        ``∇_w λ̂_q`` (implicit function theorem)."""
        return (weights.detach() * torch.where(weights > 0, scores, torch.zeros_like(scores))).sum(1)

    @torch.no_grad()
    def solve_threshold(self, scores: torch.Tensor, batch: dict[str, torch.Tensor], iterations: int = 200) -> torch.Tensor:
        """``λ̂_q = argmin_λ L_q(λ; w; B_q)`` for each query row (float64 bisection on the increasing ∂_λ L, then
        Newton polishing); ``[B]`` float64. Used by ``exact_value``, the tests and ``lambda_init="solve"``."""
        scores64 = scores.detach().to(torch.float64)
        mask = list_mask(batch, batch["pair_index"])
        big = torch.finfo(torch.float64).max
        lo = torch.where(mask, scores64, torch.full_like(scores64, big)).amin(1) - 1.0
        hi = torch.where(mask, scores64, torch.full_like(scores64, -big)).amax(1) + 1.0
        grad = lambda lam: self.lower_level(scores64, batch, lam).grad  # noqa: E731
        for _ in range(200):  # widen the brackets until ∂_λ L changes sign (it is increasing, → ±∞)
            below, above = grad(lo) > 0, grad(hi) < 0
            if not bool(below.any() or above.any()):
                break
            width = hi - lo
            lo = torch.where(below, lo - width, lo)
            hi = torch.where(above, hi + width, hi)
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            pos = grad(mid) > 0
            hi, lo = torch.where(pos, mid, hi), torch.where(pos, lo, mid)
        lam = 0.5 * (lo + hi)
        for _ in range(3):
            level = self.lower_level(scores64, batch, lam)
            lam = (lam - level.grad / level.hess).clamp(lo, hi)
        return lam

    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``F_K`` with λ̂ solved exactly (no gradient through λ̂: for finite differences)."""
        inner = self.inner(scores, batch)
        lam = self.solve_threshold(scores, batch).to(scores.dtype)
        psi = self.selector(inner.context["anchor_score"] - lam.index_select(0, inner.context["row"]))
        return (psi * self.outer(inner.value, inner.context)).mean()
