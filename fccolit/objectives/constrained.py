"""Non-smooth FCCO tasks of Chen et al. (NeurIPS 2025): group DRO with CVaR, and ``min g_0 s.t. h_i ≤ 0`` problems
(ROC fairness).

Each is a :class:`~fccolit.objectives.nonsmooth.CompositeObjective`: ``F(w) = g_0(w) + (1/n) Σ_i f(g_i(w))``.

* :class:`GroupDROCVaRLoss` (eq. (10)): ``min_{θ,s} s + (1/n) Σ_g (1/r)[L_g(θ) − s]_+``, one outer index per
  group, ``f = (1/r)[·]_+`` (:class:`~fccolit.objectives.nonsmooth.Hinge` with ρ = 1/r), ``g_0 = s``.
* :class:`ConstrainedObjective`: the penalty form ``Φ(w) = g_0(w) + (1/m) Σ_i p(h_i(w))`` of
  ``min g_0(w) s.t. h_i(w) ≤ 0, i = 1..m`` (eqs. (8), (9)), one outer index per constraint, ``p`` the hinge
  (exact penalty), its smoothed (Huber) form, or the squared hinge. Constraints whose inner value is a ratio of
  sums (a mean over the constraint's data) only implement :meth:`ConstrainedObjective.constraint_statistics`; the
  same sums give the mini-batch inner values and the exact full-data values that
  :class:`~fccolit.callbacks.constraints.ConstraintViolationLogger` reduces across ranks.
* :class:`ROCFairnessAUCObjective` (§6 and Appendix F.2): pairwise sigmoid AUC loss subject to TPR and FPR gaps between two
  groups ``≤ κ`` at thresholds Γ.

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
    * Vogel, Bellet & Clémençon, "Learning Fair Scoring Functions: Bipartite Ranking under ROC-based Fairness
      Constraints", AISTATS 2021 (the ROC-fairness constraints).
"""

from __future__ import annotations

from typing import ClassVar, Literal, Sequence, get_args

import torch
import torch.nn.functional as F
from torch import nn

from fccolit.objectives.base import InnerBatch
from fccolit._checks import check_choice
from fccolit.objectives.nonsmooth import CompositeObjective, GapPenalty, Hinge, PenaltyName, make_penalty

__all__ = ["GroupDROCVaRLoss", "ConstrainedObjective", "ROCFairnessAUCObjective", "GDRO_LOSSES"]

#: Accepted per-sample losses of :class:`GroupDROCVaRLoss`.
GDROSampleLoss = Literal["logistic", "cross_entropy"]
GDRO_LOSSES: tuple[str, ...] = get_args(GDROSampleLoss)


def _zero(scores: torch.Tensor) -> torch.Tensor:
    """A zero that keeps the autograd graph (DDP needs every parameter in the backward pass)."""
    return scores.sum() * 0.0


class GroupDROCVaRLoss(CompositeObjective):
    r"""Group DRO with the CVaR divergence (Chen et al., NeurIPS 2025, eq. (10), App. F.1).

    The mean loss of the k worst groups::

        F(θ, s) = s + (1/n) Σ_{g=1}^{n} (1/r) [ L_g(θ) − s ]_+,     L_g(θ) = E_{(x,y)~D_g} ℓ(θ; x, y),   r = k/n

    the closed form of ``max_{p ∈ Δ, p_g ≤ 1/k} Σ_g p_g L_g`` (at the optimum ``s`` is a (1 − r)-quantile of the group
    losses). FCCO form: ``w = (θ, s)``, one outer index per group (``num_groups`` state rows), ``g_g(w) = L_g(θ) − s``
    (d' = 1), ``f(x) = (1/r)[x]_+`` (:class:`~fccolit.objectives.nonsmooth.Hinge` with ρ = 1/r), ``g_0 = s``. ``s`` is a
    parameter of this objective (``threshold``), so the optimizer updates it with the model. Batch fields: ``group``
    ``[B]`` long (``0 ≤ group < num_groups``) and ``y`` ``[B]`` (labels in {0, 1} for ``"logistic"``, class ids for
    ``"cross_entropy"``).

    Args:
        ratio: r ∈ (0, 1], the CVaR ratio k/n (the paper's "α = 0.15" in F.1, a symbol clash with the step size).
        loss: per-sample loss ℓ: ``"logistic"`` (scores ``[B]``, BCE with logits) or ``"cross_entropy"`` (scores
            ``[B, C]``).
        init_threshold: s_0 (0: an assumption, the paper does not say).

    Raises:
        ValueError: ``ratio`` outside (0, 1], or an unknown ``loss``.

    Example:
        >>> import torch
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> objective = GroupDROCVaRLoss(ratio=0.5)
        >>> batch = {"y": torch.tensor([1, 0, 1, 0]), "group": torch.tensor([0, 0, 1, 1])}
        >>> scores = torch.tensor([2.0, -1.0, -0.5, 0.5])
        >>> inner = objective.inner(scores, batch)  # L_g − s of the groups in the batch
        >>> inner.index.tolist(), [round(v, 4) for v in inner.value[:, 0].tolist()]
        ([0, 1], [0.2201, 0.9741])
        >>> round(float(objective.exact_value(scores, batch).detach()), 4)  # s + mean_g (1/r)[L_g − s]_+
        1.1942

    The state tracks ``L_g − s`` (the literal Algorithm 1; the paper leaves open whether to track ``L_g`` only and
    subtract the current ``s`` exactly; only the literal form is implemented).
    """

    inner_dim: ClassVar[int] = 1
    state_rows: ClassVar[str] = "num_groups"
    needs_global_batch: ClassVar[bool] = False
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "group")

    def __init__(self, ratio: float = 0.15, loss: GDROSampleLoss = "logistic", init_threshold: float = 0.0) -> None:
        super().__init__()
        if not 0.0 < float(ratio) <= 1.0:
            raise ValueError(f"the CVaR ratio r must be in (0, 1], got {ratio}")
        if loss not in GDRO_LOSSES:
            raise ValueError(f"unknown GDRO loss {loss!r}; choose one of {', '.join(GDRO_LOSSES)}")
        self.ratio, self.loss = float(ratio), loss
        self.outer_fn = Hinge(1.0 / self.ratio)
        self.threshold = nn.Parameter(torch.tensor(float(init_threshold)))
        self.default_metrics = ("auroc",) if loss == "logistic" else ()

    def sample_losses(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """ℓ(θ; x, y) of every sample, ``[B]``."""
        if self.loss == "logistic":  # log(1 + e^s) − y·s, the BCE with logits (written out: the fused kernel is
            scores = scores.reshape(-1)  # far slower on small CPU batches)
            return F.softplus(scores) - batch["y"].reshape(-1).to(scores.dtype) * scores
        return F.cross_entropy(scores, batch["y"].reshape(-1).long(), reduction="none")

    def group_means(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(groups [G], mean loss of each group in the batch [G])`` for the G groups present (sorted)."""
        losses = self.sample_losses(scores, batch)
        groups, inverse = torch.unique(batch["group"].reshape(-1), sorted=True, return_inverse=True)
        sums = losses.new_zeros(groups.shape[0]).index_add(0, inverse, losses)
        counts = losses.new_zeros(groups.shape[0]).index_add(0, inverse, torch.ones_like(losses))
        return groups, sums / counts

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        groups, means = self.group_means(scores, batch)
        return InnerBatch(index=groups, value=(means - self.threshold.to(means.dtype)).unsqueeze(-1))

    def direct(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.threshold.to(scores.dtype)

    def extra_repr(self) -> str:
        return f"ratio={self.ratio}, loss={self.loss!r}"


class ConstrainedObjective(CompositeObjective):
    r"""``min g_0(w) s.t. h_i(w) ≤ 0, i = 1..m`` solved through the penalty problem (Chen et al., NeurIPS 2025).

    The penalty problem of Chen et al.'s eqs. (8), (9)::

        Φ(w) = g_0(w) + (1/m) Σ_{i=1}^{m} p(h_i(w))

    with ``p`` the hinge ``ρ[·]_+`` (exact for ρ large enough: ρ > m(C_g + 1)/δ, Prop. 5.2), its Huber form
    (λ = ε/ρ gives a nearly ε-KKT point), or the squared hinge ``ρ[·]_+²`` (inexact: the violation decays like 1/ρ).
    One outer index (state row) per constraint. Subclasses set :attr:`num_constraints` and implement :meth:`direct`
    (``g_0``) and either :meth:`inner` or :meth:`constraint_statistics` (then the inner value of constraint ``i``
    is ``sums_i / counts_i`` over the batch, and rows whose counts are zero in a batch are left out of that step).

    Args:
        penalty: ``"hinge"``, ``"smoothed_hinge"`` or ``"squared_hinge"``.
        rho: ρ, the penalty weight (β in the paper's eq. (53)).
        smoothing: λ of ``"smoothed_hinge"`` only (to smooth a hinge with SONEX / ALEXR2, give λ to the algorithm).

    Raises:
        ValueError: an unknown penalty, ``rho ≤ 0``, or ``smoothing`` given with another penalty than
            ``"smoothed_hinge"`` (missing with it); in :meth:`num_rows`, a subclass without constraints.

    Example:
        >>> import torch
        >>> from fccolit.objectives import ConstrainedObjective
        >>> class MeanScoreAtMostZero(ConstrainedObjective):  # min mean(s²) s.t. mean(s) ≤ 0
        ...     num_constraints = 1
        ...     def direct(self, scores, batch):
        ...         return scores.square().mean()
        ...     def constraint_statistics(self, scores, batch):
        ...         return scores.sum().reshape(1, 1), torch.full((1, 1), float(scores.numel()))
        >>> objective = MeanScoreAtMostZero(penalty="hinge", rho=10.0)
        >>> scores = torch.tensor([0.5, 1.5])
        >>> objective.inner(scores, {}).value.tolist()  # h_1 = mean(s)
        [[1.0]]
        >>> float(objective.exact_value(scores, {}))  # g_0 + ρ[h_1]_+ = 1.25 + 10
        11.25
    """

    inner_dim: ClassVar[int] = 1
    num_constraints: int = 0

    def __init__(self, penalty: PenaltyName = "hinge", rho: float = 10.0, smoothing: float | None = None) -> None:
        super().__init__()
        self.penalty_name, self.rho, self.smoothing = penalty, float(rho), smoothing
        self.penalty = make_penalty(penalty, rho, smoothing)
        self.outer_fn = self.penalty

    def num_rows(self, sizes: dict[str, int]) -> int:
        if self.num_constraints <= 0:
            raise ValueError(f"{type(self).__name__} has no constraints (num_constraints = {self.num_constraints})")
        return self.num_constraints

    def constraint_names(self) -> list[str]:
        """A readable name per constraint (the TensorBoard tags use the index: ``val/constraint_<i>``)."""
        return [f"constraint_{i}" for i in range(self.num_constraints)]

    def constraint_values(self, u: torch.Tensor) -> torch.Tensor:
        """``h_i`` from the inner values ``u [m, d']``: ``[m]`` (feasible where ≤ 0)."""
        return self.outer_fn.constraint(u)

    def constraint_statistics(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sums [m, d'], counts [m, d'])`` over the batch, with ``g_i = sums_i / counts_i`` on the full data.

        Sums and counts (not means) so that the value on data split in shards is exact: add the shards' sums and
        counts, then divide. The sums are differentiable w.r.t. the scores.
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither inner() nor constraint_statistics(); the constraint logger "
            "and the default inner() need constraint_statistics()"
        )

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        sums, counts = self.constraint_statistics(scores, batch)
        present = (counts > 0).all(-1).nonzero().flatten()
        value = sums.index_select(0, present) / counts.index_select(0, present)
        return InnerBatch(index=present, value=value)

    def extra_repr(self) -> str:
        return f"num_constraints={self.num_constraints}, penalty={self.outer_fn!r}"


class ROCFairnessAUCObjective(ConstrainedObjective):
    r"""AUC maximization under ROC-fairness constraints, penalized (Chen et al., NeurIPS 2025, App. F.2).

    After Vogel et al.::

        min_w  F(w) = −1/(|D_+||D_−|) Σ_{i∈D_+} Σ_{j∈D_−} σ(s_w(x_i) − s_w(x_j))
        s.t.   h_τ^+(w) = | mean_{p, y=1} σ(s_w − τ) − mean_{u, y=1} σ(s_w − τ) | − κ ≤ 0      (TPR gap at τ)
               h_τ^−(w) = | mean_{p, y=0} σ(s_w − τ) − mean_{u, y=0} σ(s_w − τ) | − κ ≤ 0      (FPR gap at τ)
               for τ ∈ Γ

    penalized as ``F + (1/m) Σ_i p(h_i)``, m = 2|Γ| (with p = ρ[·]_+ this is eq. (53)). Each constraint is
    ``f(g) = p(|g_1 − g_2| − κ)`` of a 2-component inner value (the means over the protected and the other group's
    cell; :class:`~fccolit.objectives.nonsmooth.GapPenalty`: convex, not monotone, so case A2 of the paper: ALEXR2).
    Rows ``0 .. |Γ|−1`` are the TPR gaps at Γ in order, ``|Γ| .. 2|Γ|−1`` the FPR gaps. Batch fields: ``y`` ``[B]`` in
    {0, 1} and ``group`` ``[B]`` in {0, 1}. The AUC term and the group means pool the whole batch, so under DDP the scores
    are gathered; a constraint whose cells are empty in a batch is left out of that step.

    Args:
        thresholds: Γ, on the raw score scale (default {−3, …, 3}, the paper's).
        kappa: κ ≥ 0, the tolerance (default 0.005, the paper's).
        penalty: ``"hinge"``, ``"smoothed_hinge"`` or ``"squared_hinge"`` (:class:`ConstrainedObjective`).
        rho: ρ, the penalty weight. Default 10: an assumption inside the paper's grid {4, 6, 8, 10, 20, 40} for ALEXR2
            and SONX (the squared hinge of SOX used {10, …, 1000}).
        smoothing: λ of ``"smoothed_hinge"`` only (:class:`ConstrainedObjective`).
        protected_group: the value of ``group`` that is "p" (the other one is "u"); the gaps are symmetric.

    Raises:
        ValueError: no threshold, ``protected_group`` not 0 or 1, ``kappa < 0``, or what :class:`ConstrainedObjective`
            raises.

    Example:
        >>> import torch
        >>> from fccolit.objectives import ROCFairnessAUCObjective
        >>> objective = ROCFairnessAUCObjective(thresholds=(0.0,), kappa=0.01)
        >>> objective.constraint_names()
        ['tpr_gap@0', 'fpr_gap@0']
        >>> batch = {"y": torch.tensor([1, 0, 1, 0]), "group": torch.tensor([0, 0, 1, 1])}
        >>> scores = torch.tensor([2.0, -1.0, -0.5, 0.5])
        >>> tuple(objective.inner(scores, batch).value.shape)  # (protected, other) group means per constraint
        (2, 2)
        >>> round(float(objective.direct(scores, batch)), 4)  # the AUC term
        -0.6654
    """

    inner_dim: ClassVar[int] = 2
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "group")
    default_metrics: ClassVar[tuple[str, ...]] = ("auroc",)

    def __init__(
        self,
        thresholds: Sequence[float] = (-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0),
        kappa: float = 0.005,
        penalty: PenaltyName = "hinge",
        rho: float = 10.0,
        smoothing: float | None = None,
        protected_group: int = 1,
    ) -> None:
        super().__init__(penalty=penalty, rho=rho, smoothing=smoothing)
        if len(thresholds) == 0:
            raise ValueError("ROCFairnessAUCObjective needs at least one threshold τ")
        if protected_group not in (0, 1):
            raise ValueError(f"protected_group must be 0 or 1, got {protected_group}")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.kappa, self.protected_group = float(kappa), int(protected_group)
        self.num_constraints = 2 * len(self.thresholds)
        self.outer_fn = GapPenalty(self.penalty, self.kappa)

    def constraint_names(self) -> list[str]:
        return [f"tpr_gap@{t:g}" for t in self.thresholds] + [f"fpr_gap@{t:g}" for t in self.thresholds]

    def direct(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The pairwise sigmoid AUC loss of the batch, ``−mean_{i∈+, j∈−} σ(s_i − s_j)`` (0 without both classes)."""
        s = scores.reshape(-1)
        y = batch["y"].reshape(-1)
        pos, neg = s[y == 1], s[y != 1]
        if pos.numel() == 0 or neg.numel() == 0:
            return _zero(scores)
        return -torch.sigmoid(pos.unsqueeze(1) - neg.unsqueeze(0)).mean()

    def constraint_statistics(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        s = scores.reshape(-1)
        y, group = batch["y"].reshape(-1), batch["group"].reshape(-1)
        tau = torch.tensor(self.thresholds, dtype=s.dtype, device=s.device)
        sig = torch.sigmoid(s.unsqueeze(1) - tau.unsqueeze(0))  # [B, |Γ|]
        sums, counts = [], []
        for positive in (True, False):  # TPR rows, then FPR rows
            cls = (y == 1) if positive else (y != 1)
            cells = [cls & (group == self.protected_group), cls & (group == 1 - self.protected_group)]
            masks = torch.stack(cells, dim=1).to(s.dtype)  # [B, 2]
            sums.append(sig.transpose(0, 1) @ masks)  # [|Γ|, 2]
            counts.append(masks.sum(0).expand(len(self.thresholds), 2))
        return torch.cat(sums), torch.cat(counts)

    def extra_repr(self) -> str:
        return f"thresholds={self.thresholds}, kappa={self.kappa}, penalty={self.penalty!r}"
