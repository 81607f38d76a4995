"""Average precision (AUPRC) as an FCCO problem (Wang & Yang, ICML 2022, §4.1, eq. (7); Wang et al., AISTATS 2022,
eqs. (2)–(4) and the inner estimators, Assumption 1 and Ω of its §3).

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from fccolit._checks import check_choice
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.surrogates import (
    SurrogateName, pairwise_surrogate, pairwise_surrogate_with_slope, pairwise_weighted_sum, sigmoid_scores,
    surrogate_range,
)


class AveragePrecisionSurrogate(FCCOObjective):
    r"""Smoothed average precision (AUPRC) as an FCCO objective, minimised as ``F = −ÂP``.

    .. math::

        F(w) = \frac{1}{m} \sum_{i \in D_+} f(g_i(w)), \qquad f(u) = -\frac{u_1}{u_2},
        \qquad g_i(w) = \frac{1}{n} \sum_{j=1}^{n} \big[\, \mathbb{1}(y_j = 1)\, ℓ(s_j - s_i),\; ℓ(s_j - s_i) \,\big]

    One state row per positive (``num_positives`` rows, d' = 2): ``u_1`` tracks the surrogate count of positives
    ranked above positive ``i``, ``u_2`` that of all examples (the self pair ``j = i`` is kept: ``u_2 ≥ ℓ(0)/n > 0``).
    Batch fields: ``y`` ``[B]`` (1 positive, 0 negative), ``pos_index`` ``[B]`` (state row of each positive, −1 for
    negatives) and, for multi-task batches, ``task`` ``[B]``. Every sample of the batch is in the inner set of every
    positive, so under DDP the scores are gathered with gradient (``needs_global_batch``).

    Args:
        surrogate: ℓ, ``"squared_hinge"`` (the papers') or ``"sigmoid"`` (Wang et al.'s logistic), or any name of
            :mod:`fccolit.surrogates`.
        margin: ``γ`` of the squared hinge ``max(0, s_j − s_i + γ)²`` (LibAUC uses 1.0).
        scale: slope of the sigmoid / logistic surrogates.
        score_transform: ``"sigmoid"`` maps logits to (0, 1) as the papers do; ``"identity"`` uses raw scores.
        project: project the state onto the box Ω (Projection, below); needs ``num_samples`` and ``num_positives``.
        inner_estimator: ``"batch_mean"`` (default: the batch mean, as SOAP and LibAUC) or ``"reweighted"`` (unbiased
            under class-stratified batches; needs ``num_samples`` and ``num_positives``). See Inner estimators.
        inner_scale: ``"mean"`` (the formula above) or ``"sum"`` (Wang et al.'s ``g_i = Σ_j``, n times larger; needs
            ``num_samples``). ``f`` is scale-invariant and ``∇f(c·u) = ∇f(u)/c``: both give the same objective and the
            same updates of every algorithm (tested); only Ω changes.
        score_range: r, the width of the interval holding the (transformed) scores, for Ω. None: 1 for sigmoid
            scores; required with ``project=True`` and ``score_transform="identity"``.
        omega_bounds: ``"estimator"`` (default: the box every estimate of ``inner_estimator`` lies in) or ``"paper"``
            (Wang et al.'s Ω as printed, for either estimator).

    Raises:
        ValueError: a choice that is not one of the listed values; ``project=True`` on raw scores without
            ``score_range``; ``score_range ≤ 0``; in :meth:`inner`, an option that needs the data sizes before they are
            bound (:meth:`bind_sizes`), or a multi-task batch with ``inner_estimator="reweighted"``.

    Example:
        >>> import torch
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> objective = AveragePrecisionSurrogate()
        >>> batch = {"y": torch.tensor([1, 0, 1, 0]), "pos_index": torch.tensor([0, -1, 1, -1])}
        >>> scores = torch.tensor([2.0, -1.0, 0.5, 0.0])
        >>> inner = objective.inner(scores, batch)  # one row per positive, (u_1, u_2)
        >>> inner.index.tolist(), tuple(inner.value.shape)
        ([0, 1], (2, 2))
        >>> round(float(objective.exact_value(scores, batch)), 4)  # −(smoothed AP)
        -0.7144

    Inner estimators (Wang et al., AISTATS 2022). ``"batch_mean"``: ``ĝ_i = (1/|B|) Σ_{j∈B} [1(y_j=1) ℓ_ij, ℓ_ij]``,
    unbiased only for a uniform batch; a class-stratified batch (:class:`~fccolit.samplers.DualSampler`, P positives
    and Q negatives) estimates the inner value of data whose positive share is P/|B|. ``"reweighted"``, with m
    positives and n samples in the training data::

        ĝ_i1 = ( ℓ_ii + ((m − 1)/(P − 1)) Σ_{j∈B+, j≠i} ℓ_ij ) / n,     ĝ_i2 = ĝ_i1 + ((n − m)/Q) Σ_{j∈B−} ℓ_ij / n

    (times n on the sum scale). The anchor is always in its own batch, so its self pair counts once and the other
    P − 1 positives are a uniform sample of the other m − 1 (tested by enumerating every batch); with P = 1 the other
    positives are not estimated (0), with Q = 0 the negatives are not.

    Projection. With ``C = ℓ(0)`` (Assumption 1(i)) and ``M = ℓ(r)`` (every surrogate here is non-decreasing;
    squared hinge ``C = γ²``, ``M = (r + γ)²``; sigmoid ``C = 1/2``, ``M = sigmoid(scale·r)``), Wang et al.'s Ω is
    ``u_1 ≤ M·m``, ``C ≤ u_2 ≤ M·n`` (sum scale; mean scale: divided by n); every reweighted estimate lies in it.
    A batch mean may hold more positives than their share m/n, so with ``omega_bounds="estimator"`` its box keeps
    only ``u_1 ≤ M·n``, ``C ≤ u_2 ≤ M·n`` (sum scale); ``"paper"`` caps it at the printed Ω.
    :meth:`fccolit.state.IndexedState.share_at_bounds` reports the rows at each cap. With MOAP-V2 / ADAP's randomized
    coordinate update the estimate is scaled by ``m/B``: unless ``β0·m/B ≤ 1`` the update overshoots ĝ and the cap
    clips it.

    Multi-task (multi-label) batches, mean AP over tasks (LibAUC's mAP): with a ``task`` field (from
    :class:`~fccolit.samplers.MultiLabelSampler`) an anchor's inner set is its own task's batch positions, the state has
    one row per (task, positive) pair, and :meth:`exact_value` averages over each task's positives, then over tasks.
    Only the batch-mean estimator takes them.
    """

    inner_dim: ClassVar[int] = 2
    task: ClassVar[str] = "binary"
    state_rows: ClassVar[str] = "num_positives"
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "pos_index")
    default_metrics: ClassVar[tuple[str, ...]] = ("ap", "auroc", "pauc_0.05_0.5")
    multi_task: ClassVar[bool] = True

    def __init__(
        self,
        surrogate: SurrogateName = "squared_hinge",
        margin: float = 1.0,
        scale: float = 1.0,
        score_transform: Literal["sigmoid", "identity"] = "sigmoid",
        project: bool = False,
        inner_estimator: Literal["batch_mean", "reweighted"] = "batch_mean",
        inner_scale: Literal["mean", "sum"] = "mean",
        score_range: float | None = None,
        omega_bounds: Literal["estimator", "paper"] = "estimator",
    ) -> None:
        super().__init__()
        check_choice("omega_bounds", omega_bounds, ("estimator", "paper"))
        check_choice("score_transform", score_transform, ("sigmoid", "identity"))
        check_choice("inner_estimator", inner_estimator, ("batch_mean", "reweighted"))
        check_choice("inner_scale", inner_scale, ("mean", "sum"))
        self.omega_bounds = omega_bounds
        if score_range is None and score_transform == "sigmoid":
            score_range = 1.0
        if project and score_range is None:
            raise ValueError(
                "project=True derives Ω from the range of the scores: raw scores (score_transform='identity') are "
                "unbounded, so give score_range (the width of the interval holding them) or use sigmoid scores"
            )
        if score_range is not None and not score_range > 0:
            raise ValueError(f"score_range must be positive, got {score_range}")
        self.surrogate, self.margin, self.scale = surrogate, margin, scale
        self.score_transform, self.project = score_transform, project
        self.inner_estimator, self.inner_scale, self.score_range = inner_estimator, inner_scale, score_range
        self.loss = pairwise_surrogate(surrogate, margin, scale)
        self.loss_with_slope = pairwise_surrogate_with_slope(surrogate, margin, scale)

    # ------------------------------------------------------------------ the inner values
    def _scores(self, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.reshape(-1)
        return sigmoid_scores(scores) if self.score_transform == "sigmoid" else scores

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        s = self._scores(scores)
        y = batch["y"].reshape(-1).to(s.dtype)
        anchors = (batch["pos_index"].reshape(-1) >= 0).nonzero().flatten()
        per_sample = F.pad(y.unsqueeze(-1), (0, 1), value=1.0)  # [B, 2]: (1[y_j = 1], 1)
        if "task" not in batch and self.inner_estimator == "batch_mean":
            # ℓ(s_j − s_i) @ per_sample / B as one autograd node with a closed-form backward (the hot path)
            value = pairwise_weighted_sum(s, anchors, per_sample / s.shape[0], self.loss_with_slope)  # [P, 2]
        else:
            ell = self.loss(s.unsqueeze(0) - s.index_select(0, anchors).unsqueeze(1))  # [P, B]: ℓ(s_j − s_i)
            if "task" in batch:  # multi-task: an anchor's inner set is its own task's positions
                if self.inner_estimator != "batch_mean":
                    raise ValueError("AveragePrecisionSurrogate: multi-task batches take inner_estimator='batch_mean' only")
                task = batch["task"].reshape(-1)
                same = (task.index_select(0, anchors).unsqueeze(1) == task.unsqueeze(0)).to(ell.dtype)  # [P, B]
                value = (ell * (same / same.sum(1, keepdim=True))) @ per_sample  # [P, 2]
            else:
                value = self._reweighted(ell, y, anchors)
        if self.inner_scale == "sum" and self.inner_estimator == "batch_mean":
            value = value * self.data_size("num_samples", "inner_scale='sum'")
        return InnerBatch(index=batch["pos_index"].reshape(-1).index_select(0, anchors), value=value)

    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """True ``F`` when ``batch`` holds the whole data (every labeled (task, sample) pair once when it has a
        ``task`` field): ``−AP`` surrogate, averaged over each task's positives, then over tasks."""
        inner = self.inner(scores, batch)
        values = self.outer(inner.value, inner.context)
        if "task" not in batch:
            return values.mean()
        task = batch["task"].reshape(-1)[batch["pos_index"].reshape(-1) >= 0]
        tasks, of_anchor = torch.unique(task, return_inverse=True)
        per_task = torch.zeros(len(tasks), dtype=values.dtype, device=values.device).index_add(0, of_anchor, values)
        return (per_task / torch.bincount(of_anchor, minlength=len(tasks)).to(values.dtype)).mean()

    def _reweighted(self, ell: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """The class-stratified unbiased estimate (class docstring), ``[P, 2]``."""
        n = self.data_size("num_samples", "inner_estimator='reweighted'")
        m = self.data_size("num_positives", "inner_estimator='reweighted'")
        p, q = y.sum(), (1.0 - y).sum()  # positives and negatives of the batch (tensors: no host sync)
        other_pos = torch.where(p > 1, (m - 1) / (p - 1).clamp_min(1.0), torch.zeros_like(p))
        neg = torch.where(q > 0, (n - m) / q.clamp_min(1.0), torch.zeros_like(q))
        self_pair = torch.zeros_like(ell).index_put_(
            (torch.arange(anchors.numel(), device=ell.device), anchors), torch.ones_like(anchors, dtype=ell.dtype)
        )  # [P, B]: 1 at each anchor's own batch position
        weight_pos = self_pair + (1.0 - self_pair) * other_pos * y  # [P, B]: 1 (self), (m−1)/(P−1), 0 (negatives)
        first = (ell * weight_pos).sum(1)
        second = first + (ell * (1.0 - y)).sum(1) * neg
        value = torch.stack([first, second], dim=-1)
        return value if self.inner_scale == "sum" else value / n

    # ------------------------------------------------------------------ the outer function and Ω
    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return -u[:, 0] / u[:, 1]

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        u_all = u[:, 1]
        return torch.stack([-1.0 / u_all, u[:, 0] / u_all.square()], dim=-1)

    def omega(self, sizes: dict[str, int]) -> tuple[tuple[float | None, float], tuple[float, float]]:
        """Ω as ``((lower_1, lower_2), (upper_1, upper_2))`` for the estimator and scale (class docstring)."""
        if self.score_range is None:
            raise ValueError("AveragePrecisionSurrogate: Ω needs score_range for raw scores (score_transform='identity')")
        c, big_m = surrogate_range(self.surrogate, self.margin, self.scale, score_range=self.score_range)
        for key in ("num_samples", "num_positives"):
            if key not in sizes:
                raise KeyError(f"AveragePrecisionSurrogate(project=True) derives Ω from the data sizes, which lack '{key}'")
        n, m = sizes["num_samples"], sizes["num_positives"]
        if self.inner_estimator == "reweighted" or self.omega_bounds == "paper":
            lower, upper = (None, c), (big_m * m, big_m * n)  # Wang et al. 2022 §3 (Ω), sum scale
        else:
            lower, upper = (None, c * 1.0), (big_m * n, big_m * n)
        if self.inner_scale == "mean":
            lower, upper = (None, lower[1] / n), (upper[0] / n, upper[1] / n)
        return lower, upper

    def state_bounds(self, sizes: dict[str, int]) -> tuple[object, object]:
        if not self.project:
            return None, None
        return self.omega(sizes)
