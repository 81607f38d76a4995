"""Binary classification metrics: exact average precision, AUROC and partial AUC on an FPR range [α, β].

All functions take raw scores (logits, probabilities, margins: only the order matters, so no sigmoid is
applied and any strictly increasing transform gives the same value) and binary targets in {0, 1}. They
are sort-based (O(N log N)), vectorized, run on CPU or CUDA, and count in float64.

The ROC curve used throughout has one vertex per distinct score threshold, ``(FP_t / N-, TP_t / N+)``,
starting at ``(0, 0)``, with straight segments between vertices. A group of tied scores containing both
classes gives a diagonal segment, which is the same as counting each tied (positive, negative) pair as
1/2; ties within one class change nothing. This is the convention of sklearn ``roc_curve`` /
``roc_auc_score`` and torchmetrics ``binary_roc`` / ``BinaryAUROC``.

Partial AUC. With ``A(a, b) = ∫_a^b TPR(FPR) dFPR`` (the ROC curve above, linearly interpolated at ``a``
and ``b``):

* ``"raw"``:         ``A(α, β)``, in ``[0, β − α]``;
* ``"normalized"``:  ``A(α, β) / (β − α)``, in ``[0, 1]`` (what the pAUC papers, e.g. Yao, Lin & Yang, report);
* ``"mcclish"``:     ``0.5 · (1 + (A(0, β) − β²/2) / (β − β²/2))`` (only for α = 0): McClish's
  standardization, what ``sklearn.metrics.roc_auc_score(max_fpr=β)`` and torchmetrics
  ``BinaryAUROC(max_fpr=β)`` return. 0.5 means chance level over the range, 1 a perfect ranking.

Yao, Lin & Yang's empirical definition (eq. (2)) is implemented separately by
:func:`partial_auc_sorted_negatives`; see there for the exact relation.

References:
    * Yao, Lin & Yang (NeurIPS 2022): Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial
      AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505.
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from fccolit._checks import check_choice
from fccolit.metrics.functional._inputs import check_no_nan_scores

__all__ = [
    "ap_score",
    "auroc_score",
    "partial_auc_score",
    "partial_auc_sorted_negatives",
    "ROCVertices",
    "Normalization",
]

#: how a partial AUC is scaled: the area divided by the range's width, the area itself, or McClish's standardization
Normalization = Literal["normalized", "raw", "mcclish"]

_NORMALIZATIONS = get_args(Normalization)


# ----------------------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------------------
def _flatten(x: Tensor, name: str) -> Tensor:
    if x.ndim == 0:
        return x.reshape(1)
    if x.ndim == 1:
        return x
    if x.ndim == 2 and x.shape[1] == 1:
        return x[:, 0]
    raise ValueError(f"{name} must have shape [N] or [N, 1] (or [N, T] for T tasks), got {tuple(x.shape)}")


def _validate_binary(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Return ``(preds float64 [N], target bool [N])`` on ``preds``' device, or raise ValueError."""
    if not isinstance(preds, Tensor) or not isinstance(target, Tensor):
        raise ValueError("preds and target must be torch tensors")
    preds = _flatten(preds, "preds")
    target = _flatten(target, "target").to(preds.device)
    if preds.shape != target.shape:
        raise ValueError(
            f"preds and target must hold the same number of samples, got {preds.shape[0]} and {target.shape[0]}"
        )
    if preds.is_complex():
        raise ValueError("preds must be real scores")
    check_no_nan_scores(preds, "preds")
    if target.dtype != torch.bool:
        bad = ~((target == 0) | (target == 1))
        n_bad = int(bad.sum())
        if n_bad:
            example = target[bad][0].item()
            raise ValueError(
                f"target must be binary with values in {{0, 1}} (bool, int or float); got {n_bad} value(s) "
                f"outside {{0, 1}}, e.g. {example!r}"
            )
        target = target == 1
    return preds.to(torch.float64), target


def _class_counts(target: Tensor) -> tuple[int, int]:
    n_pos = int(target.sum())
    return n_pos, int(target.numel()) - n_pos


def _require_both_classes(target: Tensor, what: str) -> tuple[int, int]:
    n_pos, n_neg = _class_counts(target)
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"{what} is undefined without both classes: got {n_pos} positives, {n_neg} negatives")
    return n_pos, n_neg


def _check_range(fpr_min: float, fpr_max: float) -> tuple[float, float]:
    try:
        lo, hi = float(fpr_min), float(fpr_max)
    except (TypeError, ValueError):
        raise ValueError(f"fpr_min and fpr_max must be numbers, got {fpr_min!r} and {fpr_max!r}") from None
    if not (0.0 <= lo < hi <= 1.0):
        raise ValueError(f"need 0 <= fpr_min < fpr_max <= 1, got fpr_min={fpr_min}, fpr_max={fpr_max}")
    return lo, hi


def _check_partial_auc_args(fpr_min: float, fpr_max: float, normalization: str) -> tuple[float, float]:
    """``(fpr_min, fpr_max)`` as floats, or ValueError on a bad range, an unknown normalization, or McClish's
    standardization on a range that does not start at 0."""
    check_choice("normalization", normalization, _NORMALIZATIONS)
    lo, hi = _check_range(fpr_min, fpr_max)
    if normalization == "mcclish" and lo != 0.0:
        raise ValueError(
            f"McClish standardization is defined for the range [0, fpr_max] only, got fpr_min={fpr_min}; "
            "use normalization='normalized' or 'raw'"
        )
    return lo, hi


def _snap(x: float, scale: int) -> float:
    """``x`` with float noise from ``fraction * n`` removed (e.g. ``0.05 * 200`` -> exactly ``10.0``)."""
    r = round(x)
    return float(r) if abs(x - r) <= 1e-9 * max(1, scale) else x


@dataclass(frozen=True)
class ROCVertices:
    """The ROC curve of one binary task in counts: one vertex per distinct score threshold, highest first.

    Every curve of the task follows from these: the ROC curve (:meth:`roc`), the precision-recall curve
    (:meth:`precision_recall`), AP, AUROC and pAUC. The binary metrics keep them from their last ``compute()``
    (:meth:`~fccolit.metrics.BatchMetric.named_curves`), so the curves cost no second pass over the scores.

    Args:
        fps: float64 ``[V]``, ``fps[0] = 0``: ``fps[v]`` negatives are scored at or above the v-th highest distinct
            score.
        tps: float64 ``[V]``, ``tps[0] = 0``: the positives, likewise.

    Raises:
        Nothing: the vertices are not checked (a class without samples gives NaN rates in :meth:`roc`).

    Example:
        >>> import torch
        >>> from fccolit.metrics import AUROCScore
        >>> metric = AUROCScore()
        >>> metric.update(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))
        >>> _ = metric.compute()
        >>> roc = metric.named_curves()["roc"]
        >>> roc.fps.tolist(), roc.tps.tolist()
        ([0.0, 0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 1.0, 2.0, 2.0])
        >>> [round(p, 4) for p in roc.precision_recall()[1].tolist()]  # precision at each threshold
        [1.0, 0.5, 0.6667, 0.5]
    """

    fps: Tensor
    tps: Tensor

    def __len__(self) -> int:
        return self.fps.numel()

    @property
    def num_positives(self) -> int:
        """The task's number of positives, ``tps[-1]``."""
        return int(self.tps[-1])

    @property
    def num_negatives(self) -> int:
        """The task's number of negatives, ``fps[-1]``."""
        return int(self.fps[-1])

    def roc(self) -> tuple[Tensor, Tensor]:
        """``(fpr [V], tpr [V])`` from ``(0, 0)`` to ``(1, 1)``; a class without samples gives NaN."""
        return self.fps / self.fps[-1], self.tps / self.tps[-1]

    def precision_recall(self) -> tuple[Tensor, Tensor]:
        """``(recall [V−1], precision [V−1])`` at every threshold (the vertex at ``(0, 0)``, where nothing is
        predicted positive and precision is undefined, is left out); AP is ``Σ Δrecall · precision``."""
        tps, fps = self.tps[1:], self.fps[1:]
        return tps / self.tps[-1], tps / (tps + fps)


def _roc_counts(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """ROC vertices in counts: ``(fps, tps)``, float64 ``[T + 1]``, starting at ``(0, 0)``.

    One vertex per distinct score threshold (scores sorted in decreasing order; the vertex after a tied
    group counts the whole group).
    """
    order = torch.argsort(preds, descending=True)
    s = preds[order]
    t = target[order].to(torch.float64)
    tps = torch.cumsum(t, 0)
    fps = torch.cumsum(1.0 - t, 0)
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    zero = torch.zeros(1, dtype=torch.float64, device=preds.device)
    return torch.cat([zero, fps[last]]), torch.cat([zero, tps[last]])


# ----------------------------------------------------------------------------------------------------------
# functional metrics
# ----------------------------------------------------------------------------------------------------------
def ap_score(preds: Tensor, target: Tensor) -> Tensor:
    """Exact (non-interpolated) average precision of scores against binary labels.

    ``AP = Σ_t (R_t − R_{t−1}) · P_t``: ``t`` runs over the distinct score thresholds in decreasing order; ``P_t``
    and ``R_t`` are the precision and recall of predicting positive every sample scored ``>= t``. This is sklearn
    ``average_precision_score`` and torchmetrics ``BinaryAveragePrecision(thresholds=None)``, ties included (a tied
    group enters as one threshold). Without ties it equals the mean over positives of the precision at that
    positive's rank, SOAP's AP (Wang & Yang, ICML 2022; Wang et al., AISTATS 2022).

    Args:
        preds: ``[N]`` or ``[N, 1]`` scores (any monotone scale: only the order matters).
        target: ``[N]`` or ``[N, 1]`` labels in {0, 1} (bool, int or float).

    Returns:
        0-d float64 tensor in [0, 1].

    Raises:
        ValueError: ``preds`` or ``target`` is not a tensor of shape ``[N]`` or ``[N, 1]``, their lengths differ,
            ``preds`` holds NaN or ``target`` a value outside {0, 1}; or there is no positive (AP is 1 without
            negatives).

    Example:
        >>> import torch
        >>> round(float(ap_score(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))), 4)
        0.8333
    """
    preds, target = _validate_binary(preds, target)
    n_pos, n_neg = _class_counts(target)
    if n_pos == 0:
        raise ValueError(f"average precision is undefined without positives: got 0 positives, {n_neg} negatives")
    return _average_precision_of(ROCVertices(*_roc_counts(preds, target)))


def auroc_score(preds: Tensor, target: Tensor) -> Tensor:
    """Area under the ROC curve of scores against binary labels, ties counted 1/2.

    ``(1/(N+ N−)) Σ_{i∈+} Σ_{j∈−} (1[s_i > s_j] + ½·1[s_i = s_j])``, computed as the trapezoidal area under
    the ROC curve (see the module docstring), which is that Mann–Whitney statistic; equal to sklearn
    ``roc_auc_score``.

    Args:
        preds: ``[N]`` or ``[N, 1]`` scores (any monotone scale: only the order matters).
        target: ``[N]`` or ``[N, 1]`` labels in {0, 1} (bool, int or float).

    Returns:
        0-d float64 tensor in [0, 1].

    Raises:
        ValueError: ``preds`` or ``target`` is not a tensor of shape ``[N]`` or ``[N, 1]``, their lengths differ,
            ``preds`` holds NaN or ``target`` a value outside {0, 1}; or one class is absent.

    Example:
        >>> import torch
        >>> float(auroc_score(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0])))  # 3 of 4 pairs
        0.75
    """
    preds, target = _validate_binary(preds, target)
    _require_both_classes(target, "AUROC")
    return _auroc_of(ROCVertices(*_roc_counts(preds, target)))


def _roc_area_between(fps: Tensor, tps: Tensor, lo: float, hi: float) -> Tensor:
    """``∫_lo^hi TP(FP) dFP`` over the piecewise-linear ROC curve, in count units (FP in [0, N−])."""
    x0, x1, y0, y1 = fps[:-1], fps[1:], tps[:-1], tps[1:]
    a = x0.clamp(lo, hi)
    b = x1.clamp(lo, hi)
    width = b - a
    dx = x1 - x0
    slope = torch.where(dx > 0, (y1 - y0) / torch.where(dx > 0, dx, torch.ones_like(dx)), torch.zeros_like(dx))
    ya = y0 + slope * (a - x0)
    yb = y0 + slope * (b - x0)
    return (width * (ya + yb)).sum() / 2.0


def partial_auc_score(
    preds: Tensor,
    target: Tensor,
    fpr_min: float,
    fpr_max: float,
    normalization: Normalization = "normalized",
) -> Tensor:
    """Partial area under the ROC curve of scores against binary labels for FPR in ``[fpr_min, fpr_max]``.

    The ROC curve (module docstring) is integrated exactly between the two FPR values, interpolating it
    linearly where an end falls inside a segment. Ties between the classes appear as diagonal segments, so
    ``partial_auc_score(p, y, 0, 1, "raw") == auroc_score(p, y)`` with ties, and raw areas are additive over
    adjacent ranges.

    Args:
        preds: ``[N]`` or ``[N, 1]`` scores (any monotone scale: only the order matters).
        target: ``[N]`` or ``[N, 1]`` labels in {0, 1} (bool, int or float).
        fpr_min: the range's lower end α, ``0 <= α < β``.
        fpr_max: the range's upper end β, ``β <= 1``.
        normalization:

            * ``"normalized"`` (default): ``A / (β − α)``, in [0, 1] (the papers' "normalized pAUC").
            * ``"raw"``: the area ``A`` itself, in ``[0, β − α]``.
            * ``"mcclish"``: ``0.5 · (1 + (A − β²/2) / (β − β²/2))``, only with ``fpr_min == 0``; equals
              ``sklearn.metrics.roc_auc_score(max_fpr=β)``. Undo it with ``A = β²/2 + (2·m − 1)(β − β²/2)``.

    Returns:
        0-d float64 tensor.

    Raises:
        ValueError: the range is not ``0 <= fpr_min < fpr_max <= 1``, the normalization is unknown or
            ``"mcclish"`` with ``fpr_min > 0``; ``preds`` or ``target`` is not a tensor of shape ``[N]`` or
            ``[N, 1]``, their lengths differ, ``preds`` holds NaN or ``target`` a value outside {0, 1}; or one class
            is absent.

    Example:
        >>> import torch
        >>> preds, target = torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0])
        >>> float(partial_auc_score(preds, target, 0.0, 0.5)), float(partial_auc_score(preds, target, 0.0, 0.5, "raw"))
        (0.5, 0.25)
    """
    lo, hi = _check_partial_auc_args(fpr_min, fpr_max, normalization)
    preds, target = _validate_binary(preds, target)
    _require_both_classes(target, "partial AUC")
    return _partial_auc_of(ROCVertices(*_roc_counts(preds, target)), lo, hi, normalization)


def _average_precision_of(roc: ROCVertices) -> Tensor:
    """:func:`ap_score` from the ROC vertices (at least one positive)."""
    fps, tps = roc.fps, roc.tps
    precision = tps[1:] / (tps[1:] + fps[1:])
    return ((tps[1:] - tps[:-1]) * precision).sum() / roc.num_positives


def _auroc_of(roc: ROCVertices) -> Tensor:
    """:func:`auroc_score` from the ROC vertices (both classes present)."""
    fps, tps = roc.fps, roc.tps
    return ((fps[1:] - fps[:-1]) * (tps[1:] + tps[:-1])).sum() / (2.0 * roc.num_positives * roc.num_negatives)


def _partial_auc_of(roc: ROCVertices, lo: float, hi: float, normalization: Normalization) -> Tensor:
    """:func:`partial_auc_score` from the ROC vertices (both classes present; range and normalization checked)."""
    n_pos, n_neg = roc.num_positives, roc.num_negatives
    area = _roc_area_between(roc.fps, roc.tps, _snap(lo * n_neg, n_neg), _snap(hi * n_neg, n_neg)) / (n_pos * n_neg)
    if normalization == "raw":
        return area
    if normalization == "normalized":
        return area / (hi - lo)
    min_area = 0.5 * hi * hi
    return 0.5 * (1.0 + (area - min_area) / (hi - min_area))


def partial_auc_sorted_negatives(preds: Tensor, target: Tensor, fpr_min: float, fpr_max: float) -> Tensor:
    """The pAUC papers' normalized pAUC on the FPR range [α, β], from the sorted negatives (strict comparisons).

    Yao, Lin & Yang (NeurIPS 2022), eq. (2); the definition and its relation to :func:`partial_auc_score` follow the
    example.

    Args:
        preds: ``[N]`` or ``[N, 1]`` scores (any monotone scale: only the order matters).
        target: ``[N]`` or ``[N, 1]`` labels in {0, 1} (bool, int or float).
        fpr_min: α, ``0 <= α < β``.
        fpr_max: β, ``β <= 1``.

    Returns:
        0-d float64 tensor in [0, 1].

    Raises:
        ValueError: the range is not ``0 <= fpr_min < fpr_max <= 1``; ``preds`` or ``target`` is not a tensor of
            shape ``[N]`` or ``[N, 1]``, their lengths differ, ``preds`` holds NaN or ``target`` a value outside
            {0, 1}; or one class is absent.

    Example:
        >>> import torch
        >>> preds, target = torch.tensor([0.9, 0.5, 0.5, 0.1]), torch.tensor([1, 1, 0, 0])
        >>> float(partial_auc_sorted_negatives(preds, target, 0.0, 0.5))  # the tie at 0.5 counts 0
        0.5
        >>> float(partial_auc_score(preds, target, 0.0, 0.5))  # and 1/2 there
        0.75

    Definition. With the negatives sorted by decreasing score, ``s_[1] >= s_[2] >= ... >= s_[N−]``,
    ``m = N−·α`` and ``n = N−·β`` (eq. (2) assumes both integers)::

        pAUC(α, β) = 1/(N+ (n − m)) · Σ_{i∈+} Σ_{j=m+1}^{n} 1[s_i > s_[j]]

    i.e. among the negatives ranked ``m+1..n`` (1-based, highest score first) the fraction of
    (positive, negative) pairs ordered correctly. The comparison is **strict** (a tie counts 0, eq. (1) of
    the paper); which of several tied negatives gets which rank does not matter because the count only
    depends on the value ``s_[j]``.

    Non-integer ``m`` or ``n``: negative ``j`` gets the weight ``|[j−1, j] ∩ [m, n]|`` (the boundary
    negatives count fractionally); this is eq. (2) when ``m, n`` are integers. (Float noise such as
    ``0.05 · 200 = 10.000000000000002`` is snapped to the integer.)

    Relation to :func:`partial_auc_score`: without ties between a positive and a negative the ROC curve is a
    staircase whose height over ``[(j−1)/N−, j/N−]`` is ``#{i∈+ : s_i > s_[j]}/N+``, so the ROC area
    ``A(α, β) = (1/(N+ N−)) Σ_j w_j #{i : s_i > s_[j]}`` and

        ``partial_auc_sorted_negatives(p, y, α, β) == partial_auc_score(p, y, α, β, "normalized")
        == partial_auc_score(p, y, α, β, "raw") / (β − α)``

    (exactly for integer ``N−α``, ``N−β`` as eq. (2) states, and with the fractional weights also for
    non-integer ones). With positive/negative ties this value is lower: ties count 0 here and 1/2 there.
    """
    lo, hi = _check_range(fpr_min, fpr_max)
    preds, target = _validate_binary(preds, target)
    n_pos, n_neg = _require_both_classes(target, "partial AUC")
    m = _snap(lo * n_neg, n_neg)
    n = _snap(hi * n_neg, n_neg)
    neg = torch.sort(preds[~target], descending=True).values  # s_[1] >= ... >= s_[N-]
    pos = torch.sort(preds[target]).values
    # number of positives scored strictly above each negative
    above = n_pos - torch.searchsorted(pos, neg, right=True)
    j = torch.arange(1, n_neg + 1, dtype=torch.float64, device=preds.device)
    weight = (torch.clamp(j, max=n) - torch.clamp(j - 1.0, min=m)).clamp_min(0.0)
    return (weight * above.to(torch.float64)).sum() / (n_pos * (n - m))


def _validate_multitask(preds: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Return ``(preds float64 [N, T], target long [N, T] in {-1, 0, 1})``, or raise ValueError."""
    if not isinstance(target, Tensor) or target.shape != preds.shape:
        shape = tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__
        raise ValueError(f"multi-task preds {tuple(preds.shape)} need a target of the same shape [N, T], got {shape}")
    if preds.is_floating_point() and bool(torch.isnan(preds).any()):
        raise ValueError("preds contains NaN values: the model produced NaN scores; the metric is undefined")
    target = target.to(preds.device)
    bad = ~((target == 0) | (target == 1) | (target == -1))
    if bool(bad.any()):
        raise ValueError(f"multi-task target values must be 1, 0 or -1 (unlabeled), got e.g. {target[bad][0].item()!r}")
    return preds.to(torch.float64), target.to(torch.long)
