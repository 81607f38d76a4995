r"""Ranked-range objectives: partial AUC on an FPR range [α, β] and the sum of ranked range (Yao, Lin & Yang,
NeurIPS 2022).

Both problems minimise, for one or more rows ``r`` of a loss matrix ``S ∈ R^{R×N}``, the mean of the entries ranked
``m+1 .. n`` (largest first) of each row:

.. math::

    F(w) = \frac{1}{R} \sum_{r=1}^{R} \frac{φ_n(S_r(w)) - φ_m(S_r(w))}{n - m}, \qquad
    φ_l(S) = \sum_{k=1}^{l} s_{[k]}, \qquad m = αN,\; n = βN

* pAUC in an FPR range (:class:`PartialAUCRangeSurrogate`, eq. (3)): one row per positive ``i``, one column per
  negative ``j``, ``s_ij = ℓ(h(x_i⁺) − h(x_j⁻))`` with ℓ non-increasing. Because ℓ is monotone, the entries ranked
  ``m+1..n`` of every row are the pairs with the negatives ranked ``m+1..n`` by score, so ``F`` is the surrogate of
  the normalised empirical pAUC of eq. (2) (FPR ∈ [α, β]).
* sum of ranked range (:class:`SumOfRankedRangeLoss`, eq. (7), "SoRR"): one row, one column per sample,
  ``s_j = ℓ(h(x_j), y_j)``; it ignores the ``m`` largest losses (outliers) and the easy ones below rank ``n``.

Because ``φ_n − φ_m`` is a difference of convex functions of the losses, ``F`` is the DC program of eqs. (5)–(6):
:meth:`RankedRangeObjective.dc_components` returns its two parts. The per-row thresholds λ of the algorithms come from
the threshold ("dual") form of the top-l sum, eq. (12), computed by :func:`threshold_value`;
:func:`threshold_interval` gives its minimisers (eq. (19), with the printed interval's endpoints swapped: the printed
``[s_[l], s_[l+1]]`` is empty).

Non-integer ``αN`` / ``βN``: ``φ_l`` for real ``l ∈ [0, N]`` is the value of the LP (11),
``max {Σ_j p_j s_j : Σ_j p_j = l, 0 ≤ p_j ≤ 1}``, i.e. the top-⌊l⌋ sum plus ``(l − ⌊l⌋)·s_[⌊l⌋+1]``; its dual is
still eq. (12). The boundary entries then count fractionally, exactly like the fractional boundary negatives of
:func:`fccolit.metrics.partial_auc_sorted_negatives`, so no rounding rule has to be chosen (the paper assumes
``αN₋``, ``βN₋`` integers).

Scale. Everything here is normalised by the number of entries (``f̃^l = f^l / (N₊N₋)`` for pAUC, ``f^l / N`` for
SoRR): the values do not grow with the data, and the algorithms' hyper-parameters are scale-free (the paper's
experiments scale μ and γ by 1/(N₊N₋), §6.1).

References:
    * Yao, Lin & Yang (NeurIPS 2022): Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial
      AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from fccolit._checks import check_choice
from fccolit.surrogates import SurrogateName, pairwise_surrogate, sigmoid_scores

__all__ = [
    "top_sum",
    "threshold_value",
    "threshold_interval",
    "ranked_range_mean",
    "RankedRangeBatch",
    "RankedRangeObjective",
    "PartialAUCRangeSurrogate",
    "SumOfRankedRangeLoss",
]


# ----------------------------------------------------------------------------------------------------------
# top-l sums, the threshold form and its minimisers (Yao, Lin & Yang, NeurIPS 2022, eqs. (4), (11), (12), (19))
# ----------------------------------------------------------------------------------------------------------
def _sorted_with_mass(values: torch.Tensor, weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entries sorted in decreasing order along the last dim, their weights and the cumulative weights.

    Returns ``(s, w, cum)`` of the shape of ``values``: ``s[..., k]`` is the (k+1)-th largest entry, ``w`` its weight
    (1 without weights) and ``cum[..., k] = w[..., 0] + ... + w[..., k]`` (``C_{k+1}`` in count units).
    """
    s, order = torch.sort(values, dim=-1, descending=True)
    if weights is None:
        n = values.shape[-1]
        w = torch.ones(n, dtype=values.dtype, device=values.device).expand_as(s)
        cum = torch.arange(1, n + 1, dtype=values.dtype, device=values.device).expand_as(s)
    else:
        w = weights.to(values.dtype).expand_as(values).gather(-1, order)
        cum = torch.cumsum(w, dim=-1)
    return s, w, cum


def top_sum(values: torch.Tensor, level: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``φ_l``: the sum of the ``l`` largest entries along the last dimension (Yao, Lin & Yang, NeurIPS 2022, eq. (4)).

    Args:
        values: ``[..., N]`` entries (differentiable: the gradient flows to the entries counted, as the
            subgradient of the convex function φ_l that fixes the ranks at the current point).
        level: ``l ∈ [0, N]`` (in weight units with ``weights``). A non-integer ``l`` counts the entry at rank
            ``⌈l⌉`` with weight ``l − ⌊l⌋``: the value of the LP (11).
        weights: ``[N]`` non-negative weights of the columns (an entry of weight ``w_j`` occupies ``w_j`` of the
            ``l`` units); None: all 1.

    Returns:
        ``[...]``: ``Σ_k s_[k] · |[C_{k−1}, C_k] ∩ [0, l]|`` with ``C_k`` the cumulative weights in decreasing order.
    """
    return _top_sum_sorted(*_sorted_with_mass(values, weights), level)


def _top_sum_sorted(s: torch.Tensor, w: torch.Tensor, cum: torch.Tensor, level: float | torch.Tensor) -> torch.Tensor:
    """:func:`top_sum` from :func:`_sorted_with_mass`'s output (sort once for several levels)."""
    share = (cum.clamp(max=level) - (cum - w).clamp(max=level)).clamp_min(0.0)
    return (s * share).sum(-1)


def threshold_value(
    values: torch.Tensor, lam: torch.Tensor | float, level: float, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """The threshold form ``g(λ) = l·λ + Σ_j w_j [s_j − λ]_+`` (Yao, Lin & Yang eq. (12) for one row).

    ``min_λ g(λ) = φ_l`` (:func:`top_sum`), attained on :func:`threshold_interval`; outside it ``g`` grows with
    slope at least ``min_j w_j`` (1 without weights: the linear error bound of Lemma 11).

    Args:
        values: ``[..., N]``; lam: ``[...]`` or a float; level: ``l``; weights: ``[N]`` or None.
    """
    lam = torch.as_tensor(lam, dtype=values.dtype, device=values.device)
    excess = torch.relu(values - lam.unsqueeze(-1))
    if weights is not None:
        excess = excess * weights.to(values.dtype)
    return level * lam + excess.sum(-1)


def threshold_interval(
    values: torch.Tensor, level: float, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The minimisers ``[lower, upper]`` of :func:`threshold_value` over λ, along the last dimension.

    ``λ`` is optimal iff ``Σ_{s_j > λ} w_j ≤ l ≤ Σ_{s_j ≥ λ} w_j``. Without weights and for an integer
    ``0 < l < N`` this is ``[s_[l+1], s_[l]]``, between the (l+1)-th and the l-th largest entries (Yao, Lin & Yang
    eq. (19); the paper prints the endpoints in the other order). Edge cases: ``l = 0`` gives ``[s_[1], +∞)``,
    ``l = N`` (all the weight) gives ``(−∞, s_[N]]``; a non-integer ``l`` gives the single point ``s_[⌈l⌉]``.

    Returns:
        ``(lower, upper)``, each ``[...]`` (±inf at the edges).
    """
    s, w, cum = _sorted_with_mass(values, weights)
    level_t = torch.as_tensor(level, dtype=cum.dtype, device=cum.device)
    n = s.shape[-1]
    eps = 1e-12 * cum[..., -1:].abs().clamp_min(1.0)
    # upper = s_(k1), k1 = min{k : C_k ≥ l}; lower = s_(k2), k2 = max{k : C_{k−1} ≤ l}
    k1 = (cum < level_t - eps).sum(-1, keepdim=True).clamp(max=n - 1)
    prev = torch.cat([torch.zeros_like(cum[..., :1]), cum], dim=-1)  # C_0 .. C_N
    k2 = (prev <= level_t + eps).sum(-1, keepdim=True) - 1  # 0-based; N means "below every entry"
    upper = s.gather(-1, k1).squeeze(-1)
    lower = s.gather(-1, k2.clamp(max=n - 1)).squeeze(-1)
    inf = torch.full_like(upper, float("inf"))
    upper = torch.where(level_t <= eps.squeeze(-1), inf, upper)
    lower = torch.where(k2.squeeze(-1) >= n, -inf, lower)
    return lower, upper


def _whole_and_fraction(level: float, n: int) -> tuple[int, float]:
    """``(⌊l⌋, l − ⌊l⌋)`` for ``0 ≤ l ≤ n`` (the fraction 0 at ``l = n``): the top-``l`` sum of ``n`` sorted entries
    is the first ``⌊l⌋`` of them plus the fraction of the next."""
    whole = min(int(math.floor(level)), n)
    return whole, (level - whole if whole < n else 0.0)


def ranked_range_mean(
    values: torch.Tensor, alpha: float, beta: float, weights: torch.Tensor | None = None,
    column_scores: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean of the entries ranked in the top ``(α, β]`` share along the last dimension.

    ``(φ_{βW}(S) − φ_{αW}(S)) / ((β − α)W)`` with ``W`` the total weight (``N`` without weights): with integer
    ``m = αN``, ``n = βN`` this is ``(1/(n − m)) Σ_{k=m+1}^{n} s_[k]``, Yao, Lin & Yang eq. (3) for one positive.

    ``column_scores`` (``[N]``): numbers that order the columns as every row's entries are ordered
    (:attr:`RankedRangeBatch.column_scores`), so one sort of ``N`` numbers replaces the sort of every row (read
    without ``weights``; the weighted form sorts each row with its weights).
    """
    if weights is None:  # entries ⌊αN⌋ … ⌊βN⌋ of the sorted row, the two end entries by their fractional shares
        n = values.shape[-1]
        if column_scores is None:
            s = torch.sort(values, dim=-1, descending=True).values
        else:
            s = values.index_select(-1, torch.argsort(column_scores, descending=True))
        (k_low, f_low), (k_high, f_high) = (_whole_and_fraction(level * n, n) for level in (alpha, beta))
        total = s[..., k_low:k_high].sum(-1)
        if f_high > 0.0:
            total = total + f_high * s[..., k_high]
        if f_low > 0.0:
            total = total - f_low * s[..., k_low]
        return total / ((beta - alpha) * n)
    total = weights.to(values.dtype).sum()
    ranked = _sorted_with_mass(values, weights)  # one sort for both levels
    return (_top_sum_sorted(*ranked, beta * total) - _top_sum_sorted(*ranked, alpha * total)) / ((beta - alpha) * total)


# ----------------------------------------------------------------------------------------------------------
# the objectives
# ----------------------------------------------------------------------------------------------------------
@dataclass
class RankedRangeBatch:
    """The loss matrix of one (global) batch.

    Attributes:
        index: ``[R]`` long, the rows' ids in the per-row threshold state (positive ids; 0 for SoRR's one row).
        losses: ``[R, J]`` the entries ``s_rj`` (differentiable w.r.t. the scores).
        weights: ``[J]`` importance weights of the columns, so that ``mean_j w_j x_j`` estimates the mean over the
            whole population of columns (None: the columns are a uniform sample, all weights 1).
        column_scores: ``[J]`` (detached) numbers that rank the columns as every row ranks its entries: a larger
            number, a larger entry in each row (pAUC: the negatives' scores, as ``ℓ(h_j − h_i)`` is non-decreasing in
            ``h_j``), so a ranking needs one sort of J numbers instead of one per row; None: no such order.

    The objectives' :meth:`RankedRangeObjective.losses` build it; a plain container, it checks nothing.

    Example:
        >>> import torch
        >>> batch = RankedRangeBatch(index=torch.tensor([1, 2]), losses=torch.zeros(2, 3))
        >>> tuple(batch.losses.shape), batch.weights is None
        ((2, 3), True)
    """

    index: torch.Tensor
    losses: torch.Tensor
    weights: torch.Tensor | None = None
    column_scores: torch.Tensor | None = None


#: the FCCO interface (:class:`~fccolit.objectives.FCCOObjective`) that ranked-range objectives do not have
FCCO_INTERFACE = frozenset({"inner", "outer", "outer_grad", "inner_dim", "state_bounds"})


class RankedRangeObjective(nn.Module):
    r"""Base of the ranked-range (difference-of-convex) objectives, and the protocol their algorithms read.

    The objectives are solved by :class:`~fccolit.algorithms.pauc.PAUCRange` (AGD-SBCD),
    :class:`~fccolit.algorithms.pauc.SoRR`, :class:`~fccolit.algorithms.pauc.DCA`,
    :class:`~fccolit.algorithms.pauc.ProximalDCA` and :class:`~fccolit.algorithms.pauc.MiniBatchPAUC`. They are not of
    the form ``f(g(w))`` with ``g`` an average, so they are not :class:`~fccolit.objectives.FCCOObjective` and have none
    of its ``inner`` / ``outer`` / ``outer_grad`` / ``inner_dim`` / ``state_bounds``. Subclasses implement
    :meth:`losses`; the algorithms read :meth:`losses`, :meth:`dc_components`, :meth:`component_score_gradient`,
    :meth:`exact_value`, :meth:`num_rows`, :meth:`bind_sizes`, :meth:`bind_model`, :meth:`local_fields`, the class
    attributes of an FCCOObjective (``task``, ``default_metrics``, ``batch_fields``, ``needs_global_batch``: a row
    needs every column of the batch, so under DDP the batch is gathered with gradient), and the attributes ``alpha``,
    ``beta``: the shares ``m/N`` and ``n/N`` of the column population (α, β).

    Args:
        share_min: α, the share of the largest entries of a row left out (subclasses name it, e.g. ``fpr_min``).
        share_max: β, the share up to which the entries are averaged.
        surrogate: the loss ℓ (:mod:`fccolit.surrogates`) as a function of the margin ``d`` (non-decreasing in ``d``).
        margin: the margin of the hinge-type surrogates.
        scale: the slope of the logistic / sigmoid / exp surrogates.

    Raises:
        ValueError: not ``0 ≤ share_min < share_max ≤ 1``, or an unknown surrogate.
        TypeError: on access to one of the FCCO attributes it lacks (a SOX-type algorithm given a ranked-range
            objective), naming the algorithms that solve it.

    Example:
        >>> from fccolit.objectives import PartialAUCRangeSurrogate
        >>> objective = PartialAUCRangeSurrogate(fpr_min=0.05, fpr_max=0.5)
        >>> objective.alpha, objective.beta  # what the algorithms read
        (0.05, 0.5)
        >>> objective.inner_dim  # not an FCCO objective
        Traceback (most recent call last):
        ...
        TypeError: PartialAUCRangeSurrogate is a difference-of-convex ranked-range objective, not f(g(w)) ...
    """

    task: ClassVar[str] = "binary"
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "pos_index")
    multi_task: ClassVar[bool] = False
    #: the DataModule size that counts the threshold rows (a key of ``datamodule.sizes``)
    state_rows: ClassVar[str] = "num_positives"
    default_metrics: tuple[str, ...] = ()

    #: the constructor's names of the range (α, β), for the error messages
    range_names: ClassVar[tuple[str, str]] = ("share_min", "share_max")

    def __init__(
        self, share_min: float, share_max: float, surrogate: SurrogateName = "logistic", margin: float = 1.0,
        scale: float = 1.0,
    ) -> None:
        super().__init__()
        alpha, beta = float(share_min), float(share_max)
        if not 0.0 <= alpha < beta <= 1.0:
            low, high = self.range_names
            raise ValueError(
                f"{type(self).__name__}: need 0 <= {low} < {high} <= 1 (the paper's α, β), got {low}={alpha}, {high}={beta}"
            )
        self.alpha, self.beta = alpha, beta
        self.surrogate, self.margin, self.scale = surrogate, margin, scale
        self.loss = pairwise_surrogate(surrogate, margin, scale)

    # ------------------------------------------------------------------ to implement
    def losses(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> RankedRangeBatch:
        raise NotImplementedError

    # ------------------------------------------------------------------ values
    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``F`` (Yao, Lin & Yang eq. (3) / SoRR normalised by ``n − m``) when ``batch`` holds the whole data set."""
        rr = self.losses(scores, batch)
        return ranked_range_mean(rr.losses, self.alpha, self.beta).mean()

    def dc_components(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f̃^m, f̃^n)``, the two convex parts of the DC program (5)–(6) on the given (whole) data, scale-free.

        ``f̃^l = (1/(R·N)) Σ_r φ_l(S_r)`` with ``l = αN`` or ``βN`` (``f^l/(N₊N₋)`` for pAUC, ``f^l/N`` for SoRR),
        so ``f̃^n − f̃^m = (β − α)·F``.
        """
        rr = self.losses(scores, batch)
        n = rr.losses.shape[-1]
        f_m = top_sum(rr.losses, self.alpha * n).mean() / n
        f_n = top_sum(rr.losses, self.beta * n).mean() / n
        return f_m, f_n

    def component_score_gradient(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], share: float
    ) -> torch.Tensor:
        """``∂f̃^l/∂h``, ``[B]``: the gradient of the scale-free DC component at level ``l = share·N`` with respect
        to the scores of the (whole) data set, with the ranks fixed at ``scores`` (a subgradient of the convex
        ``f̃^l``). DCA's ``ξ = ∇f̃^m(w)`` is this vector pulled back through the model (Yao, Lin & Yang,
        Algorithm 4)."""
        with torch.enable_grad():
            h = scores.detach().reshape(-1).requires_grad_(True)
            rr = self.losses(h, batch)
            n = rr.losses.shape[-1]
            value = top_sum(rr.losses, share * n).sum() / (rr.losses.shape[0] * n)
            (grad,) = torch.autograd.grad(value, h)
        return grad

    # ------------------------------------------------------------------ data
    def num_rows(self, sizes: dict[str, int]) -> int:
        """The number of per-row thresholds, read from the DataModule's sizes (``sizes[state_rows]``)."""
        if self.state_rows not in sizes:
            raise KeyError(
                f"{type(self).__name__} keeps one threshold per '{self.state_rows}', but the DataModule sizes only "
                f"have {sorted(sizes)}: use a DataModule that provides it, or pass data_sizes explicitly."
            )
        return int(sizes[self.state_rows])

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        """Receive the DataModule's sizes (called by the algorithm modules). Default: nothing to bind."""

    def bind_model(self, model: nn.Module) -> None:
        """Receive the backbone (called by the algorithm modules). Default: nothing to bind."""

    def local_fields(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fields computed from this rank's inputs before the global batch is gathered (none: ``batch``)."""
        return batch

    # ------------------------------------------------------------------ not an f(g) objective
    def __getattr__(self, name: str) -> Any:
        if name in FCCO_INTERFACE:
            raise TypeError(
                f"{type(self).__name__} is a difference-of-convex ranked-range objective, not f(g(w)) with an "
                f"averaged inner g (it has no {name!r}): train it with fccolit.algorithms.pauc.PAUCRange / SoRR / "
                "DCA / ProximalDCA / MiniBatchPAUC, not with SOX-type algorithms."
            )
        return super().__getattr__(name)


class PartialAUCRangeSurrogate(RankedRangeObjective):
    r"""Surrogate of the normalised partial AUC on the FPR range [α, β], minimised (Yao, Lin & Yang, NeurIPS 2022).

    Their eq. (3):

    .. math::

        F(w) = \frac{1}{N_+ (n - m)} \sum_{i=1}^{N_+} \sum_{j=m+1}^{n} ℓ\big(h_w(x_i^+) - h_w(x_{[j]}^-)\big),
        \qquad m = αN_-,\; n = βN_-

    with ``[j]`` the negative of rank ``j`` by score (highest first). One threshold row per positive
    (``num_positives``). Batch fields: ``y`` ``[B]`` (1 positive, 0 negative) and ``pos_index`` ``[B]`` (row of each
    positive, −1 for negatives). Default metrics: ``pauc_{α}_{β}`` (e.g. ``pauc_0.05_0.5``) and ``auroc``.
    ``fpr_min = 0, fpr_max = 1`` is the plain pairwise AUC surrogate.

    Args:
        fpr_min: α, the lower end of the FPR range (default 0.05, the paper's test range [0.05, 0.5]).
        fpr_max: β, the upper end of the FPR range (default 0.5).
        surrogate: ℓ of the pair margin ``h_j⁻ − h_i⁺`` (:mod:`fccolit.surrogates`); ``"logistic"`` (default) is the
            paper's ``log(1 + e^{−z})`` of ``z = h_i⁺ − h_j⁻``. Every surrogate here is monotone, as the DC form needs.
        margin: the margin of the hinge-type surrogates.
        scale: the slope of the logistic / sigmoid / exp surrogates.
        score_transform: ``"identity"`` (default, the paper's: margins of raw scores) or ``"sigmoid"`` (margins of
            ``σ(h)``, as LibAUC's pAUC losses are used; σ is increasing, so the ranking, the pAUC and the DC structure are
            unchanged, and the surrogate's values become bounded, which keeps a squared hinge from blowing up under the
            paper's large scale-free steps; an option, not the paper's setting).

    Raises:
        ValueError: not ``0 ≤ fpr_min < fpr_max ≤ 1``, an unknown surrogate or ``score_transform``.

    Example:
        >>> import torch
        >>> batch = {"y": torch.tensor([1, 0, 1, 0, 0, 0]), "pos_index": torch.tensor([0, -1, 1, -1, -1, -1])}
        >>> scores = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -2.0])
        >>> from fccolit.objectives import PartialAUCRangeSurrogate
        >>> objective = PartialAUCRangeSurrogate(fpr_min=0.0, fpr_max=0.5)
        >>> tuple(objective.losses(scores, batch).losses.shape)  # one row per positive, one column per negative
        (2, 4)
        >>> round(float(objective.exact_value(scores, batch)), 4)
        0.4721
        >>> objective.default_metrics
        ('pauc_0_0.5', 'auroc')
    """

    SCORE_TRANSFORMS: ClassVar[tuple[str, ...]] = ("identity", "sigmoid")
    range_names: ClassVar[tuple[str, str]] = ("fpr_min", "fpr_max")

    def __init__(
        self,
        fpr_min: float = 0.05,
        fpr_max: float = 0.5,
        surrogate: SurrogateName = "logistic",
        margin: float = 1.0,
        scale: float = 1.0,
        score_transform: Literal["identity", "sigmoid"] = "identity",
    ) -> None:
        super().__init__(fpr_min, fpr_max, surrogate, margin, scale)
        check_choice("score_transform", score_transform, self.SCORE_TRANSFORMS)
        self.score_transform = score_transform
        self.default_metrics = (f"pauc_{self.alpha:g}_{self.beta:g}", "auroc")

    def transform(self, scores: torch.Tensor) -> torch.Tensor:
        """The scores the pair margins are taken on: ``h`` or ``σ(h)`` (``score_transform``)."""
        return sigmoid_scores(scores) if self.score_transform == "sigmoid" else scores

    def losses(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> RankedRangeBatch:
        s = self.transform(scores.reshape(-1))
        y = batch["y"].reshape(-1)
        pos = (y == 1).nonzero().flatten()
        neg = (y != 1).nonzero().flatten()
        negatives = s.index_select(0, neg)
        margins = negatives.unsqueeze(0) - s.index_select(0, pos).unsqueeze(1)  # h_j⁻ − h_i⁺
        return RankedRangeBatch(index=batch["pos_index"].reshape(-1).index_select(0, pos), losses=self.loss(margins),
                                column_scores=negatives.detach())

    def component_score_gradient(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], share: float, chunk_rows: int = 1024
    ) -> torch.Tensor:
        """As the base method, without forming or sorting the pair matrix: ℓ is monotone, so the ``l`` largest
        losses of every positive are its pairs with the ``l`` highest-scored negatives (the boundary negative with
        weight ``l − ⌊l⌋``), one ranking for all rows. Only those columns are evaluated, ``chunk_rows`` positives
        at a time (a9a: about 6·10³ positives × 10³ top negatives at α = 0.05, instead of sorting 6·10³ rows of
        2·10⁴)."""
        with torch.enable_grad():
            h = scores.detach().reshape(-1).requires_grad_(True)
            y = batch["y"].reshape(-1)
            pos = (y == 1).nonzero().flatten()
            neg = (y != 1).nonzero().flatten()
            level, denominator = share * neg.numel(), float(pos.numel() * neg.numel())
            order = torch.argsort(h.detach().index_select(0, neg), descending=True)
            rank = torch.arange(1, neg.numel() + 1, dtype=h.dtype, device=h.device)
            weight = (rank.clamp(max=level) - (rank - 1).clamp(max=level)).clamp_min(0.0)
            top = weight > 0
            columns, weight = neg.index_select(0, order[top]), weight[top]
            grad = torch.zeros_like(h)
            if columns.numel() == 0:
                return grad
            for rows in pos.split(chunk_rows):
                t = self.transform(h)  # monotone: the ranking above is the same on h and σ(h)
                losses = self.loss(t.index_select(0, columns).unsqueeze(0) - t.index_select(0, rows).unsqueeze(1))
                (part,) = torch.autograd.grad((losses * weight).sum() / denominator, h)
                grad += part
        return grad


class SumOfRankedRangeLoss(RankedRangeObjective):
    r"""The sum-of-ranked-range loss normalised by ``n − m`` (SoRR; Yao, Lin & Yang, NeurIPS 2022, eq. (7)).

    After Hu et al. 2020:

    .. math::

        F(w) = \frac{1}{n - m} \sum_{k=m+1}^{n} s_{[k]}(w), \qquad s_j(w) = ℓ(−y^±_j\, h_w(x_j)),\; m = αN,\; n = βN

    with ``y± = 2y − 1``: it leaves out the ``m`` largest losses (outliers) and the easy ones below rank ``n``.
    ``"logistic"`` is the binary cross-entropy with logits (the paper writes ``−y log h − (1−y) log(1−h)`` with a
    linear ``h``, which is undefined; this sigmoid reading is an assumption). One threshold row in all
    (``num_rows = 1``).

    Args:
        share_min: α, the share of the N losses left out at the top (default 0.05; the paper's LIBSVM runs use
            m = 10³ of N ≈ 3–6·10⁴).
        share_max: β, the share up to which the losses are averaged (default 0.5; the paper: n = 2·10⁴).
        surrogate: ℓ as a function of ``−y±·h`` (:mod:`fccolit.surrogates`).
        margin: the margin of the hinge-type surrogates.
        scale: the slope of the logistic / sigmoid / exp surrogates.
        reweight: importance-weight the classes of a stratified batch: each column gets ``(N_c/N)/(B_c/B)`` for its
            class ``c`` (``N_c`` in the training data, from :meth:`bind_sizes`; ``B_c`` in the batch), so weighted batch
            means are unbiased for the data means (fccolit's binary DataModules draw a fixed number of positives per
            batch). A batch of one class is taken as uniform.

    Raises:
        ValueError: not ``0 ≤ share_min < share_max ≤ 1``, or an unknown surrogate.
        RuntimeError: in :meth:`losses`, ``reweight=True`` before the data sizes are bound.

    Example:
        >>> import torch
        >>> batch = {"y": torch.tensor([1, 0, 1, 0, 0, 0]), "pos_index": torch.tensor([0, -1, 1, -1, -1, -1])}
        >>> scores = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -2.0])
        >>> from fccolit.objectives import SumOfRankedRangeLoss
        >>> objective = SumOfRankedRangeLoss(share_min=0.25, share_max=0.75, reweight=False)
        >>> round(float(objective.exact_value(scores, batch)), 4)  # mean of the losses ranked 2..4 of 6
        0.3991
    """

    def __init__(
        self,
        share_min: float = 0.05,
        share_max: float = 0.5,
        surrogate: SurrogateName = "logistic",
        margin: float = 1.0,
        scale: float = 1.0,
        reweight: bool = True,
    ) -> None:
        super().__init__(share_min, share_max, surrogate, margin, scale)
        self.reweight = reweight
        self.positive_share: float | None = None
        self.default_metrics = ("auroc", "ap")

    def num_rows(self, sizes: dict[str, int]) -> int:
        return 1

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        if "num_positives" in sizes and "num_samples" in sizes and int(sizes["num_samples"]) > 0:
            self.positive_share = int(sizes["num_positives"]) / int(sizes["num_samples"])

    def column_weights(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """``[B]`` importance weights of a stratified batch, or None (uniform)."""
        if not self.reweight:
            return None
        if self.positive_share is None:
            raise RuntimeError(
                "SumOfRankedRangeLoss(reweight=True) needs the share of positives in the training data to undo the "
                "stratified sampling: build it through an fccolit algorithm module (which calls bind_sizes with the "
                "DataModule's sizes), call bind_sizes(datamodule.sizes), or pass reweight=False."
            )
        positive = y == 1
        batch_pos = int(positive.sum())
        if batch_pos == 0 or batch_pos == y.numel():
            return None
        batch_share = batch_pos / y.numel()
        w_pos = self.positive_share / batch_share
        w_neg = (1.0 - self.positive_share) / (1.0 - batch_share)
        weights = torch.full(y.shape, w_neg, dtype=dtype, device=y.device)
        return weights.masked_fill_(positive, w_pos)

    def losses(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> RankedRangeBatch:
        s = scores.reshape(-1)
        y = batch["y"].reshape(-1)
        sign = 2.0 * (y == 1).to(s.dtype) - 1.0
        values = self.loss(-sign * s).unsqueeze(0)  # [1, B]
        index = torch.zeros(1, dtype=torch.long, device=s.device)
        return RankedRangeBatch(index=index, losses=values, weights=self.column_weights(y, s.dtype))

    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        s = scores.reshape(-1)
        sign = 2.0 * (batch["y"].reshape(-1) == 1).to(s.dtype) - 1.0
        return ranked_range_mean(self.loss(-sign * s), self.alpha, self.beta)

    def dc_components(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        s = scores.reshape(-1)
        sign = 2.0 * (batch["y"].reshape(-1) == 1).to(s.dtype) - 1.0
        values = self.loss(-sign * s)
        n = values.shape[-1]
        return top_sum(values, self.alpha * n) / n, top_sum(values, self.beta * n) / n
