"""SONEX (Chen et al., NeurIPS 2025, Algorithm 1) and its baselines SONX and SOX on a penalty, for non-smooth FCCO.

SONEX solves the outer-smoothed problem ``min_w F_λ(w) = g_0(w) + (1/n) Σ_i f_{i,λ}(g_i(w))`` (f_λ the Moreau
envelope of a non-smooth f with a cheap prox, :mod:`fccolit.objectives.nonsmooth`) single-loop::

    u_i ← (1 − γ) u_i + γ ĝ_i(w_t; B_i) + γ' (ĝ_i(w_t; B_i) − ĝ_i(w_{t−1}; B_i))     i ∈ B_1  (MSVR, same batch at
                                                                                       w_t and w_{t−1})
    G_t = ∇ĝ_0(w_t; B_0) + (1/|B_1|) Σ_{i∈B_1} ∇ĝ_i(w_t; B_i) ∇f_λ(u_i)            (the fresh u, see below)
    v ← (1 − β) v + β G_t ;  w ← w − η v          (or the Adam-type step: the optimizer, :mod:`fccolit.optim`)

The pieces shared with ALEXR2 (:mod:`fccolit.algorithms.alexr2`) live in :class:`NonsmoothFCCOModule`: copies of
the parameters kept as buffers (:class:`ParameterSnapshot`), the inner values at such a copy
(``torch.func.functional_call``, no gradient), the direct term ``g_0``, the Moreau-envelope outer weight,
constraint sampling, the weighting of the outer indices (``outer_normalization``) and the penalty weights
read from the tracked duals.

The gradient uses the *fresh* ``u_{i,t+1}``: Algorithm 1's step 9 as printed reads ``∇f_{i,λ}(u_{t,i})``, but the
convergence proof (App. B) indexes the updated estimate.

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396 (SOX).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.func import functional_call

from fccolit import distributed
from fccolit.algorithms.base import FCCOModule, TrackedSum
from fccolit.algorithms.double_loop import ParameterSnapshot
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.nonsmooth import CompositeObjective

__all__ = [
    "ParameterSnapshot", "NonsmoothFCCOModule", "SONEX", "SONX", "PenaltySOX", "theoretical_correction_weight",
    "OUTER_NORMALIZATIONS",
]

#: Accepted ``outer_normalization`` values of :class:`NonsmoothFCCOModule`.
OUTER_NORMALIZATIONS = ("present", "fixed")


def theoretical_correction_weight(ema_weight: float, num_rows: int, rows_per_step: int) -> float:
    """SONEX's MSVR weight from Thm 4.7: ``γ' = 1 − γ + (n − B1)/(B1 (1 − γ))`` (> 1 when B1 < n).

    The paper's experiments tune γ' in {0.01, …, 0.2} instead. With full participation (B1 = n) it is ``1 − γ``,
    for which ``u`` tracks a deterministic ``g`` exactly: with ``u_t = g(w_{t−1})``,
    ``(1 − γ) g(w_{t−1}) + γ g(w_t) + (1 − γ)(g(w_t) − g(w_{t−1})) = g(w_t)``.

    Args:
        ema_weight: γ ∈ (0, 1).
        num_rows: n, the outer indices (state rows).
        rows_per_step: B1, the outer indices sampled per step.

    Raises:
        ValueError: ``ema_weight`` outside (0, 1).

    Example:
        >>> theoretical_correction_weight(0.5, num_rows=10, rows_per_step=10)  # full participation: 1 − γ
        0.5
        >>> theoretical_correction_weight(0.5, num_rows=10, rows_per_step=5)
        2.5
    """
    if not 0.0 < ema_weight < 1.0:
        raise ValueError(f"γ must be in (0, 1) for the theoretical γ', got {ema_weight}")
    return 1.0 - ema_weight + (num_rows - rows_per_step) / (rows_per_step * (1.0 - ema_weight))


class NonsmoothFCCOModule(FCCOModule):
    """What SONEX and ALEXR2 share (Chen et al., NeurIPS 2025, arXiv:2506.02504): MSVR inputs, f_λ, ``g_0``.

    The base of :class:`SONEX` and :class:`~fccolit.algorithms.alexr2.ALEXR2` (see the module docstring): the base
    step template with the MSVR correction ``ĝ_i`` at :meth:`previous_iterate` (none here), the weight ``∇f_λ(u_i)``,
    the objective's direct term ``g_0``, constraint sampling and the rows' weighting; it counts its steps
    (``steps_done``, in every checkpoint).

    Args:
        model: the backbone (scores ``[B]``; with the objective's parameters, e.g. the CVaR threshold, the
            variables w).
        objective: the FCCO problem; a :class:`~fccolit.objectives.nonsmooth.CompositeObjective` for ``smoothing`` > 0.
        smoothing: λ ≥ 0, the outer smoothing: the algorithm uses ``∇f_λ`` (Moreau envelope, needs a
            :class:`~fccolit.objectives.nonsmooth.CompositeObjective`); 0 uses ``∇f`` itself (a subgradient for
            a non-smooth f: SONX).
        constraints_per_step: B1 < m samples that many of the outer indices present in a batch each step (the
            "constraint sampling" of Table 2; the same rows on every rank); None uses all of them.
        sample_seed: seeds the constraint sampling (with the step count, so it resumes exactly).
        outer_normalization: how the rows' terms ``⟨∇f_λ(u_i), ĝ_i⟩`` of a batch are weighted in the estimator:

            * ``"present"`` (default): the mean over the outer indices present in the batch, ``1/|B_1|``. When a
              row is missing from a batch (a constraint whose (group × class) cell is empty, a group not drawn)
              the rows present get more weight.
            * ``"fixed"``: the fixed ``1/m`` of the objective (Chen et al. eq. (53):
              ``(1/2|Γ|) Σ_τ β[h_τ]_+``), i.e. the sum over the rows present divided by the number of rows due
              every step (m = the state's rows, or ``constraints_per_step`` when sampling constraints). Unbiased
              when every row is due in every batch (constrained problems); for group DRO with B1 < n groups per
              batch use ``"present"``.
              Under DDP with an objective that is not evaluated on the gathered batch (each rank holds its own
              rows) the sum is scaled by the world size, so DDP's average over ranks is the same estimator.
        **kwargs: :class:`~fccolit.algorithms.base.FCCOModule`'s arguments.

    Raises:
        ValueError: ``outer_normalization`` not ``"present"`` / ``"fixed"``; ``smoothing`` < 0; ``constraints_per_step``
            < 1; and :class:`~fccolit.algorithms.base.FCCOModule`'s.
        TypeError: ``smoothing`` > 0 with an objective that is not a ``CompositeObjective`` (no prox); in a step with a
            previous iterate, an objective with parameters but no ``forward``.
        RuntimeError: in a step, the objective's ``inner`` returns other outer indices at the previous parameters.

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> batch = {"x": torch.randn(8, 3), "y": torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),
        ...          "group": torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])}  # the outer index: one u per group
        >>> sizes = {"num_groups": 3, "num_features": 3}
        >>> from fccolit.algorithms.sonex import NonsmoothFCCOModule
        >>> module = NonsmoothFCCOModule(LinearScorer(), GroupDROCVaRLoss(), outer_normalization="fixed",
        ...                              data_sizes=sizes)
        >>> module.reduce_rows(torch.ones(2))  # two groups present, three due every step: (1/m) Σ_i
        tensor(0.6667)
        >>> NonsmoothFCCOModule(LinearScorer(), GroupDROCVaRLoss(), smoothing=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: the smoothing parameter λ (smoothing) must be >= 0, got -1.0
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        smoothing: float = 0.0,
        constraints_per_step: int | None = None,
        sample_seed: int = 0,
        outer_normalization: Literal["present", "fixed"] = "present",
        **kwargs,
    ) -> None:
        if outer_normalization not in OUTER_NORMALIZATIONS:
            raise ValueError(
                f"outer_normalization must be one of {', '.join(OUTER_NORMALIZATIONS)}, got {outer_normalization!r}"
            )
        if not float(smoothing) >= 0.0:
            raise ValueError(f"the smoothing parameter λ (smoothing) must be >= 0, got {smoothing}")
        if float(smoothing) > 0.0 and not isinstance(objective, CompositeObjective):
            raise TypeError(
                f"{type(self).__name__}(smoothing={smoothing}) smooths the outer function with its Moreau envelope, which needs "
                f"its prox: use a CompositeObjective (fccolit.objectives.nonsmooth), not {type(objective).__name__}; "
                "or pass smoothing=0 for the plain (sub)gradient"
            )
        if constraints_per_step is not None and int(constraints_per_step) < 1:
            raise ValueError(f"constraints_per_step must be >= 1 or None, got {constraints_per_step}")
        self.smoothing = float(smoothing)
        self.constraints_per_step = None if constraints_per_step is None else int(constraints_per_step)
        self.sample_seed = int(sample_seed)
        self.outer_normalization = outer_normalization
        super().__init__(model, objective, **kwargs)

    def configure_state(self) -> None:
        super().configure_state()
        self.register_buffer("steps_done", torch.zeros((), dtype=torch.long))
        self.adds_direct_term = getattr(self.objective, "direct", None) is not None
        self._previous: tuple[ParameterSnapshot, torch.Tensor] | None = None  # this step's (w_{t−1}, its scores)

    # ------------------------------------------------------------------ parameters and their copies
    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """The parameters the algorithm updates (model and objective, e.g. the CVaR threshold), in a fixed order."""
        return [(n, p) for n, p in self.named_parameters() if p.requires_grad]

    def snapshot(self) -> ParameterSnapshot:
        return ParameterSnapshot(self.trainable())

    def scores_at(self, snapshot: ParameterSnapshot, batch: dict[str, torch.Tensor], gather: bool) -> torch.Tensor:
        """The model's scores of ``batch`` at the parameters in ``snapshot`` (no gradient, the live ones untouched),
        all-gathered across ranks when ``gather`` (as the objective's global batch is gathered).

        The forward runs through ``torch.func.functional_call``; the model's buffers (e.g. BatchNorm statistics)
        are passed as copies so this extra pass does not update them.
        """
        with torch.no_grad():
            params = snapshot.as_dict()
            buffers = {f"model.{n}": b.clone() for n, b in self.model.named_buffers()}
            scores = functional_call(self, {**params, **buffers}, (batch,), strict=False)
            return distributed.all_gather_equal(scores) if gather else scores

    def inner_at(
        self, snapshot: ParameterSnapshot, scores: torch.Tensor, obj_batch: dict[str, torch.Tensor]
    ) -> InnerBatch:
        """The inner values of the objective's batch at the parameters in ``snapshot``, given the model's
        ``scores`` there (:meth:`scores_at`): the objective's own parameters (e.g. the CVaR threshold) are taken
        from the snapshot too."""
        with torch.no_grad():
            objective_params = snapshot.as_dict("objective.")
            if not objective_params:
                return self.objective.inner(scores, obj_batch)
            if not isinstance(self.objective, CompositeObjective):
                raise TypeError(
                    f"{type(self.objective).__name__} has parameters but no forward(); evaluating it at other "
                    "parameters needs forward(scores, batch) = inner(scores, batch) (CompositeObjective has it)"
                )
            return functional_call(self.objective, objective_params, (scores, obj_batch), strict=False)

    # ------------------------------------------------------------------ the FCCO step
    def previous_iterate(self) -> ParameterSnapshot | None:
        """The parameters whose inner values form the MSVR correction (SONEX: w_{t−1}; ALEXR2: z_{k−1}), or None
        when this step has no correction."""
        return None

    @property
    def tracked_sums(self) -> list[TrackedSum]:
        """The objective on ``state``, its rows' terms reduced as ``outer_normalization`` says."""
        return [TrackedSum(self.objective, self.state, self.reduce_rows)]

    def compositional_loss(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], gradient_batch: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The base's step template with the scores of ``batch`` at :meth:`previous_iterate` taken first (for the
        MSVR correction in :meth:`inner_estimates`), and the step counted once the loss is formed (the constraint
        sample of the next step)."""
        snapshot = self.previous_iterate()
        if snapshot is not None:
            gather = self.objective.needs_global_batch and distributed.is_distributed()
            self._previous = (snapshot, self.scores_at(snapshot, batch, gather))
        out = super().compositional_loss(scores, batch, gradient_batch)
        self._previous = None
        self.steps_done += 1
        return out

    def inner_estimates(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """``ĝ_i(w_t)`` with the MSVR correction ``ĝ_i(w_{t−1})`` of the same batch (when the step has a previous
        iterate) and, for the module's objective, this step's sample of the outer indices
        (:meth:`sample_constraints`)."""
        objective = self.tracked.objective
        inner = objective.inner(scores, batch)
        if self._previous is not None:
            snapshot, previous_scores = self._previous
            if objective is self.objective:
                previous = self.inner_at(snapshot, previous_scores, batch)
            else:
                with torch.no_grad():
                    previous = objective.inner(previous_scores, batch)
            if not torch.equal(previous.index, inner.index):
                raise RuntimeError(
                    f"{type(objective).__name__}.inner returned other outer indices at the previous parameters: "
                    "the MSVR correction needs the same rows for the same batch"
                )
            inner.correction = previous.value
        return self.sample_constraints(inner) if objective is self.objective else inner

    def outer_weight(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``∇f_λ(u)`` (λ > 0) or ``∇f(u)`` (λ = 0), detached: the weight of ``ĝ_i`` in the surrogate loss."""
        if self.smoothing > 0.0:
            weight = self.objective.smoothed_outer_grad(u, self.smoothing, context)
        else:
            weight = self.objective.outer_grad(u, context)
        return weight.detach()

    def estimator_weights(self, u: torch.Tensor, inner: InnerBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The module's objective: ``∇f_λ`` (:meth:`outer_weight`); a tracked direct term's f_0 is not smoothed."""
        if self.tracked.objective is self.objective:
            return self.outer_weight(u, inner.context), inner.value
        return super().estimator_weights(u, inner)

    def sample_constraints(self, inner: InnerBatch) -> InnerBatch:
        """Keep the rows whose index is in this step's random subset of ``constraints_per_step`` outer indices.

        The subset is drawn from the step count and ``sample_seed`` only, so it is the same on every rank and on
        resume. The MSVR correction is filtered with the same rows.
        """
        if self.constraints_per_step is None or self.constraints_per_step >= self.state.num_rows:
            return inner
        gen = torch.Generator().manual_seed(self.sample_seed * 1_000_003 + int(self.steps_done))
        chosen = torch.randperm(self.state.num_rows, generator=gen)[: self.constraints_per_step]
        return inner.select(torch.isin(inner.index, chosen.to(inner.index.device)).nonzero().flatten())

    def rows_due(self) -> int:
        """The m of ``outer_normalization="fixed"``: the outer indices due every step (``constraints_per_step``
        when sampling constraints, else every state row)."""
        if self.constraints_per_step is not None and self.constraints_per_step < self.state.num_rows:
            return self.constraints_per_step
        return self.state.num_rows

    def reduce_rows(self, terms: torch.Tensor) -> torch.Tensor:
        """``mean_i`` of the rows' terms ``[R]`` (``outer_normalization="present"``) or ``(1/m) Σ_i`` (``"fixed"``;
        the rows of a rank's own batch, not the global one, count W times: DDP averages over the W ranks)."""
        if self.outer_normalization == "fixed":
            ranks = 1 if self.synced else distributed.world_size()
            return terms.sum() * (ranks / self.rows_due())
        return terms.mean()

    def penalty_weights(self) -> torch.Tensor | None:
        """Per state row ``(1/m) ∂p_λ(h_i(u_i))``, read from the **tracked** inner values ``u_i`` (the duals
        ``y_i = ∇f_λ(u_i)`` scaled by 1/m): the weight the estimator puts on each constraint's gradient at the
        last visit. They are *not* the KKT multipliers of Chen et al.'s Prop. 5.2, which are ``(1/m) ∇f_λ(g_i(ŵ))``
        at the exact constraint values of a nearby point ŵ (the ``kkt_multiplier_<i>`` of
        :class:`~fccolit.callbacks.constraints.ConstraintViolationLogger`, from the full data): ``u_i`` is a
        moving average over past iterates (ALEXR2: over inner iterates z, not the output w_t) of mini-batch
        estimates. NaN for rows never visited. None without a prox."""
        if not isinstance(self.objective, CompositeObjective):
            return None
        return self.objective.multipliers(self.state.values(), self.smoothing)


class SONEX(NonsmoothFCCOModule):
    r"""SONEX: MSVR tracking, Moreau-envelope outer gradient, momentum (Chen et al., NeurIPS 2025, arXiv:2506.02504).

    Chen et al.'s Algorithm 1 (momentum or Adam-type step: the optimizer's).

    One training step, for the outer indices ``i`` of the batch (groups, constraints, ...; the others unchanged)::

        u_i ← (1 − γ) u_i + γ ĝ_i(w_t) + γ' (ĝ_i(w_t) − ĝ_i(w_{t−1}))        first visit: u_i ← ĝ_i(w_t)
        G   = ∇ĝ_0(w_t) + mean_i ∇ĝ_i(w_t) ∇f_λ(u_i)                       u: the fresh one (default)
        optimizer step on G            (Momentum(β): v ← (1 − β)v + βG, w ← w − ηv; or AdaptiveMomentum)

    i.e. the base's FCCO step (:meth:`~fccolit.algorithms.base.FCCOModule.compositional_loss`) with the MSVR
    correction weight γ', the smoothed ∇f_λ and the direct term. ``ĝ_i(w_{t−1})`` is the same batch evaluated at a
    copy of the previous parameters (``previous``, a buffer: in every checkpoint), through
    ``torch.func.functional_call`` without gradient. The constrained variant (eq. (40)) is this with a
    :class:`~fccolit.objectives.constrained.ConstrainedObjective` (``g_0`` = the objective, one row per constraint)
    and optionally ``constraints_per_step`` < m.

    Args:
        smoothing: λ, the outer smoothing (default 0.01: an assumption; the GDRO grid was {1, 0.1, 0.01}, the ROC-fairness
            grid {2e-2, 2e-3, 2e-4}; the theory takes λ = ε/C_f, and λ = ε/ρ for the smoothed-hinge penalty).
        ema_weight: γ ∈ (0, 1] (default 0.8: the continual-learning run and the ROC-fairness MSVR settings; the
            GDRO grid was {0.1, 0.2, 0.5, 0.8}).
        correction_weight: γ' ≥ 0, the MSVR correction (default 0.1, the experiments' value; grid {0.01, …, 0.2};
            the theory's value is :func:`theoretical_correction_weight`). 0 skips the previous-parameter pass.
        u_for_gradient: ``"fresh"`` (u after this step's update: the indexing of the proof, App. B) or
            ``"previous"`` (u before it, SOX's Algorithm 1).
        constraints_per_step, sample_seed, outer_normalization: see :class:`NonsmoothFCCOModule`.
        model, objective: see :class:`NonsmoothFCCOModule`.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. β and η belong to the optimizer; default
            ``Momentum(lr=1e-3, momentum_weight=0.1)`` (β = 0.1, Table 3's best).

    Raises:
        ValueError: ``ema_weight`` (γ) outside (0, 1]; ``correction_weight`` (γ') < 0; ``u_for_gradient`` other
            than ``"fresh"`` / ``"previous"``; and :class:`NonsmoothFCCOModule`'s.
        TypeError: a tracked direct term (``direct_objective``) of an objective with trainable parameters; and
            :class:`NonsmoothFCCOModule`'s.
        RuntimeError: see :class:`NonsmoothFCCOModule`.
        FloatingPointError: a non-finite inner estimate, gradient or loss in a training step (the step is not taken).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> batch = {"x": torch.randn(8, 3), "y": torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),
        ...          "group": torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])}  # the outer index: one u per group
        >>> sizes = {"num_groups": 3, "num_features": 3}
        >>> from fccolit.algorithms import SONEX
        >>> module = SONEX(LinearScorer(), GroupDROCVaRLoss(ratio=0.5), data_sizes=sizes)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)  # ĝ_i(w_{t−1}) from module.previous
        >>> module.state.visited(), int(module.steps_done)
        (tensor([True, True, True]), 1)

    When ``g_0`` is itself an FCCO (the objective's ``direct_objective``, e.g. the global contrastive loss of
    :class:`~fccolit.objectives.ContinualLearningObjective`), its inner values ``g_{0,a}`` are tracked by the same step in a
    second state, ``direct_state`` (u_0), and ``∇ĝ_0`` above becomes ``mean_a ∇ĝ_{0,a}(w_t) ∇f_0(u_{0,a})``: the
    paper's "modified SONEX" (Chen et al., App. F.3). ALEXR2 and the other modules use the plug-in ``ĝ_0`` instead.

    Under DDP: objectives that pool the batch (``needs_global_batch``) are evaluated on the gathered global batch;
    the others must see the same outer indices with equal sample counts on every rank (the group sampler lays its
    batches out so), so that the mean over a rank's rows, averaged by DDP, is the global mean.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        smoothing: float = 0.01,
        ema_weight: float = 0.8,
        correction_weight: float = 0.1,
        u_for_gradient: Literal["fresh", "previous"] = "fresh",
        constraints_per_step: int | None = None,
        sample_seed: int = 0,
        outer_normalization: Literal["present", "fixed"] = "present",
        **kwargs,
    ) -> None:
        if not 0.0 < ema_weight <= 1.0:
            raise ValueError(f"ema_weight (γ) must be in (0, 1], got {ema_weight}")
        if not correction_weight >= 0.0:
            raise ValueError(f"correction_weight (γ') must be >= 0, got {correction_weight}")
        if u_for_gradient not in ("fresh", "previous"):
            raise ValueError(f"u_for_gradient must be 'fresh' or 'previous', got {u_for_gradient!r}")
        self.ema_weight, self.correction_weight = float(ema_weight), float(correction_weight)
        self.u_for_gradient = u_for_gradient
        super().__init__(
            model, objective, smoothing=smoothing, constraints_per_step=constraints_per_step, sample_seed=sample_seed,
            outer_normalization=outer_normalization, **kwargs
        )

    def configure_state(self) -> None:
        super().configure_state()
        # w_{t−1}: only needed for the MSVR correction (PenaltySOX runs without it)
        self.previous = self.snapshot() if self.correction_weight != 0.0 else None
        # u_0: the direct term's own inner values, when g_0 is itself an FCCO (CompositeObjective.direct_objective)
        self.direct_state = None
        direct = getattr(self.objective, "direct_objective", None)
        if direct is not None:
            if any(n.startswith("objective.") for n, _ in self.trainable()):
                raise TypeError(
                    f"{type(self).__name__}: a tracked direct term (direct_objective) of an objective with "
                    f"trainable parameters is not supported ({type(self.objective).__name__})"
                )
            self.direct_state = self.make_state(direct.inner_dim, name="u_0", objective=direct)
            self.adds_direct_term = False  # tracked instead of its plug-in value

    def previous_iterate(self) -> ParameterSnapshot | None:
        if self.previous is not None and not bool(self.previous.ready):
            self.previous.copy_from(p for _, p in self.trainable())  # w_{−1} = w_0
        return self.previous

    @property
    def tracked_sums(self) -> list[TrackedSum]:
        """The objective on ``state`` and, when ``g_0`` is itself an FCCO, ``direct_objective`` on ``direct_state``
        (the same γ, γ' and u ordering; the mean over its rows)."""
        sums = super().tracked_sums
        if self.direct_state is not None:
            sums.append(TrackedSum(self.objective.direct_objective, self.direct_state))
        return sums

    def compositional_loss(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], gradient_batch: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`NonsmoothFCCOModule.compositional_loss`, after which w_t becomes the next step's w_{t−1}."""
        out = super().compositional_loss(scores, batch, gradient_batch)
        if self.previous is not None:
            self.previous.copy_from(p for _, p in self.trainable())
        return out


class SONX(SONEX):
    """SONX: SONEX without smoothing and without momentum (Hu, Zhu & Yang, NeurIPS 2023).

    Quanqi Hu, Dixian Zhu and Tianbao Yang, "Non-smooth Weakly-Convex Finite-sum Coupled Compositional
    Optimization", NeurIPS 2023; a baseline of Chen et al. (NeurIPS 2025, arXiv:2506.02504).

    MSVR tracking as SONEX, the **un-smoothed** (sub)gradient ``∂f(u_i)`` of the outer function (the hinge
    penalty of Yang et al. 2025, arXiv:2504.15243), and a plain SGD step: the default optimizer is
    ``Momentum(momentum_weight=1)``.
    ``SONX(...)`` equals ``SONEX(..., smoothing=0)`` with the same optimizer (a test checks it).

    Args:
        model, objective: see :class:`NonsmoothFCCOModule`.
        ema_weight: γ ∈ (0, 1] (default 0.8, as :class:`SONEX`).
        correction_weight: γ' ≥ 0, the MSVR correction (default 0.1, as :class:`SONEX`).
        **kwargs: :class:`SONEX`'s other arguments but ``smoothing`` (fixed at 0).

    Raises:
        ValueError, TypeError, RuntimeError: see :class:`SONEX`.

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> batch = {"x": torch.randn(8, 3), "y": torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),
        ...          "group": torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])}  # the outer index: one u per group
        >>> sizes = {"num_groups": 3, "num_features": 3}
        >>> from fccolit.algorithms import SONX
        >>> module = SONX(LinearScorer(), GroupDROCVaRLoss(ratio=0.5), data_sizes=sizes)
        >>> module.smoothing, module.configure_optimizers().param_groups[0]["momentum_weight"]  # no λ, β = 1
        (0.0, 1.0)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> f_u.shape  # f(u_g) of the three groups
        torch.Size([3])
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.8,
        correction_weight: float = 0.1,
        **kwargs,
    ) -> None:
        super().__init__(model, objective, smoothing=0.0, ema_weight=ema_weight, correction_weight=correction_weight, **kwargs)

    def default_optimizer(self, params) -> torch.optim.Optimizer:
        from fccolit.optim import Momentum

        return Momentum(params, lr=1e-3, momentum_weight=1.0)


class PenaltySOX(SONEX):
    """PenaltySOX: SOX plus a direct term, Chen et al.'s "SOX + squared-hinge penalty" baseline (arXiv:2506.02504).

    SOX is Wang & Yang's Algorithm 1 (ICML 2022, arXiv:2202.12396).

    Moving average without correction (γ' = 0), the previous ``u`` in the gradient, no smoothing, momentum β::

        u_i ← (1 − γ) u_i + γ ĝ_i(w_t) ;   G = ∇ĝ_0(w_t) + mean_i ∇ĝ_i(w_t) ∇f(u_i^{t−1}) ;   v, w as SOX

    i.e. :class:`fccolit.algorithms.SOX` plus the direct term ``g_0`` (the plain SOX module has no ``g_0``). Use it
    with ``penalty="squared_hinge"`` (Li et al. [7]); defaults are SOX's (γ = 0.1). A direct term that is itself an
    FCCO (e.g. :class:`~fccolit.objectives.ContinualLearningObjective`'s contrastive loss) is tracked by the same rule (see
    :class:`SONEX`): ``∇ĝ_0`` becomes ``mean_a ∇ĝ_{0,a} ∇f_0(u_{0,a}^{t−1})``.

    Args:
        model, objective: see :class:`NonsmoothFCCOModule`.
        ema_weight: γ ∈ (0, 1] (default 0.1, SOX's).
        u_for_gradient: ``"previous"`` (SOX's Algorithm 1, default) or ``"fresh"``.
        **kwargs: :class:`SONEX`'s other arguments but ``smoothing`` and ``correction_weight`` (fixed at 0).

    Raises:
        ValueError, TypeError: see :class:`SONEX`.

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> batch = {"x": torch.randn(8, 3), "y": torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),
        ...          "group": torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])}  # the outer index: one u per group
        >>> sizes = {"num_groups": 3, "num_features": 3}
        >>> from fccolit.algorithms import PenaltySOX
        >>> module = PenaltySOX(LinearScorer(), GroupDROCVaRLoss(ratio=0.5), data_sizes=sizes)
        >>> module.correction_weight, module.previous  # no MSVR correction: no copy of w_{t−1}
        (0.0, None)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.state.visited()
        tensor([True, True, True])
    """

    def __init__(
        self, model: nn.Module, objective: FCCOObjective, ema_weight: float = 0.1, u_for_gradient: Literal["previous", "fresh"] = "previous",
        **kwargs,
    ) -> None:
        super().__init__(
            model, objective, smoothing=0.0, ema_weight=ema_weight, correction_weight=0.0, u_for_gradient=u_for_gradient,
            **kwargs,
        )
