r"""AGD-SBCD (Yao, Lin & Yang, NeurIPS 2022, Algorithms 1–2) for pAUC on an FPR range, and for the sum of ranked
range (Appendix A: Algorithm 2 with Algorithm 3 as the inner solver).

The problem (:mod:`fccolit.objectives.pauc`) is the DC program ``F = f^n − f^m`` with ``f^l = Σ_i φ_l(S_i)``.
AGD-SBCD smooths both parts by their Moreau envelopes and descends on ``F^μ = f^n_μ − f^m_μ`` with
``∇F^μ(w) = (v_{μf^m}(w) − v_{μf^n}(w))/μ``; each prox point ``v_{μf^l}(w)`` is approximated by stochastic block
coordinate descent (SBCD, :class:`~fccolit.algorithms.pauc.base.SBCDLoop`) on the joint (v, λ) problem (13) with
one threshold ``λ_i`` per positive from the threshold form (12). The v step is the closed form of the prox step
(14), ``argmin_x ⟨ĝ, x⟩ + ‖x − w‖²/(2μ') + ‖x − v‖²/(2c_k)``, in scale-free units.

The double loop is a state machine (:class:`~fccolit.algorithms.double_loop.DoubleLoop`): every training batch is
one SBCD step, the branch (m, then n) switches after ``T_k`` steps, and the outer update happens after both
branches. The loop position (k, t, branch) is part of the module's state dict (``_extra_state``), and the anchor
``w``, the running sums and the averaged prox points are persistent buffers, so checkpoints resume mid-branch
exactly.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from fccolit.algorithms.pauc.base import SBCDLoop
from fccolit.algorithms.pauc.thresholds import ThresholdTracker
from fccolit.objectives.pauc import RankedRangeObjective, SumOfRankedRangeLoss

__all__ = ["PAUCRange", "SoRR"]


class PAUCRange(SBCDLoop):
    r"""AGD-SBCD: minimise the pAUC surrogate on an FPR range [α, β] (Yao, Lin & Yang, NeurIPS 2022).

    Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive
    Rates", NeurIPS 2022, arXiv:2203.01505, Algorithms 1–2: gradient descent on the Moreau envelopes of the
    objective's DC program.

    Outer step k (Algorithm 2): ``v̄_m = SBCD(w, λ_m, T_k, μ, m)``, ``v̄_n = SBCD(w, λ_n, T_k, μ, n)``, then
    ``w ← w − (γ/μ)(v̄_m − v̄_n)``. Each SBCD call restarts v at the anchor w, takes ``T_k`` steps (one per training
    batch; see :class:`~fccolit.algorithms.pauc.base.SBCDLoop` for the step, here with ν = μ') and returns the
    averages ``v̄ = (1/T) Σ_{t<T} v^{(t)}`` (including ``v^{(0)} = w``, excluding the last iterate) and ``λ̄``, which
    is the next call's starting λ (warm start).

    α = 0: ``f^0 ≡ 0``, so ``v_{μf^0}(w) = w`` exactly; the m-branch is skipped and ``w ← w + (γ/μ)(v̄_n − w)``
    (with γ = μ, ``w ← v̄_n``: an inexact proximal-point step).

    State: the anchor ``w`` (buffer ``anchor``), the running sum ``v_sum``, ``v_bar_m`` (kept while the n-branch
    runs), ``prox_point`` (``v̄_n`` of the last completed outer step), and ``lambda_m`` / ``lambda_n``
    (:class:`~fccolit.algorithms.pauc.ThresholdTracker`, one row per positive, indexed by ``pos_index``); the live
    model parameters are the inner iterate ``v``. About four parameter copies and ``4 N₊`` floats in all.

    Evaluation. Algorithm 2 outputs ``v̄_n^{(k̄)}``; ``evaluate="prox"`` (the default) evaluates ``v̄_n`` of the last
    completed outer step as ``val/<metric>`` and the anchor ``w`` as ``val_anchor/<metric>``;
    ``evaluate="anchor"`` swaps them (``val_prox/<metric>`` for ``v̄_n``). Before the first outer step completes
    there is no ``v̄_n`` and both tags evaluate ``w^{(0)}``. (The paper selects "the best model across all
    iterations" on validation without saying which vector; this is an assumption.) Batch-norm statistics are the
    single set updated by the forward passes of v (an assumption; the paper is silent).

    Args:
        model: the scorer ``h_w`` (``LinearScorer``, an MLP, a vision backbone, ...).
        objective: a :class:`~fccolit.objectives.pauc.PartialAUCRangeSurrogate` (default: FPR [0.05, 0.5], logistic ℓ).
        envelope_smoothing: μ' = μ·N₊N₋, the parameter of the Moreau envelope F_μ that AGD descends (default 10³, the paper's deep-model value and one of its linear-model values).
        gamma: γ' = γ·N₊N₋ (default 2·10³: γ/μ = 2, the smallest ratio of the paper's Appendix E.2; an assumption:
            γ/μ = 2 was stable and γ/μ = 20 unstable in a CPU run on a9a).
        lr: c, the step on the mean masked pair-loss gradient (η_t = c/((k+1)N₊N₋)); the paper tunes it in
            {0.1, 1, 5, 10, 20, 30} (linear) or {10⁻⁵ … 1} (deep); default 1.0 is an assumption.
        lambda_lr: c of the threshold step θ_t = c/((k+1)N₋) (None: ``lr``, as in the paper).
        inner_steps: C in ``T_k = C(k+1)^p`` (default 50, the paper's).
        inner_growth: p (default 2, the paper's; 0 gives a constant T).
        max_inner_steps: an upper bound on ``T_k`` (None, the default: the paper's unbounded ``C(k+1)^p``). With
            the paper's schedule a budget of S batches reaches only about ``(3S/(2C))^{1/3}`` outer steps (3 in
            2,600 batches at C = 50), so the anchor w moves only a few times; a cap keeps outer steps coming at a
            fixed budget. An option, not the paper's schedule.
        step_decay: ``c_k = c/(k+1)`` (the paper's) or a constant c.
        lambda_init: ``"batch"`` or a number (see :class:`~fccolit.algorithms.pauc.ThresholdTracker`).
        inner_output: what an SBCD call returns as the prox point ``v̄`` and the next warm start ``λ̄``:
            ``"average"`` (the default, Algorithm 1's output ``(1/T) Σ_{t<T} (v^{(t)}, λ^{(t)})``) or ``"last"``
            (the last iterate ``(v^{(T)}, λ^{(T)})``, as DCA's Algorithm 4 outputs). The average starts at
            ``v^{(0)} = w``, so with few outer steps it lags the iterates by about T/2 steps; the last iterate does
            not, but carries the last steps' noise. An option, not the paper's method.
        evaluate: ``"prox"`` or ``"anchor"`` (see above).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. The v step is the paper's closed form (the
            module's only optimizer; it sets the learning rate, so no optimizer or scheduler is accepted). The
            thresholds are float64 unless ``state_dtype`` says otherwise.

    Logged: ``train/objective`` (the mini-batch ranked-range estimate of objective (3) at the live v, not the
    surrogate), ``train/outer_step``, ``train/grad_evals`` (samples whose gradient was computed so far) and, at
    every outer step, ``train/moreau_grad_norm`` = ‖v̄_m − v̄_n‖/μ' (the estimate of ‖∇F^μ(w)‖ in scale-free units).

    Raises:
        ValueError: ``envelope_smoothing`` or ``gamma`` not a finite number > 0; ``evaluate`` other than
            ``"prox"`` / ``"anchor"``; ``inner_output`` other than ``"average"`` / ``"last"``; ``max_inner_steps``
            < 1; :class:`~fccolit.algorithms.pauc.SBCDLoop`'s argument checks (``lr``, ``lambda_lr``,
            ``inner_steps``, ``inner_growth``, ``lambda_init``, an ``optimizer`` or ``scheduler`` given); no
            ``data_sizes`` (the thresholds cannot be sized); in a training step, a batch without positives or
            negatives (an empty loss matrix).
        TypeError: ``objective`` not a :class:`~fccolit.objectives.pauc.RankedRangeObjective`.

    Example:
        The module's state on a tiny DataModule's sizes (``Trainer.fit`` runs the steps, one per batch; see
        ``configs/libsvm/pauc_agd.yaml``):

        >>> from fccolit.algorithms.pauc import PAUCRange
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = PAUCRange(LinearScorer(), data_sizes=data.sizes, inner_steps=50, max_inner_steps=100)
        >>> module.loop  # the loop position: (k, t, branch m = 0), and the gradient evaluations so far
        {'grad_evals': 0, 'outer_step': 0, 'inner_step': 0, 'branch': 0}
        >>> module.lambda_m.values.shape, module.lambda_n.values.shape  # one threshold per training positive
        (torch.Size([7]), torch.Size([7]))
        >>> [module.inner_steps_at(k) for k in range(3)]  # T_k = 50 (k+1)², capped at 100
        [50, 100, 100]
        >>> PAUCRange(LinearScorer(), data_sizes=data.sizes, evaluate="best")
        Traceback (most recent call last):
        ...
        ValueError: evaluate must be 'prox' (v̄_n, Algorithm 2's output) or 'anchor' (w), got 'best'
    """

    loop_keys = ("grad_evals", "outer_step", "inner_step", "branch")
    M_BRANCH, N_BRANCH = 0, 1

    def __init__(
        self,
        model: nn.Module,
        objective: RankedRangeObjective | None = None,
        envelope_smoothing: float = 1e3,
        gamma: float = 2e3,
        lr: float = 1.0,
        lambda_lr: float | None = None,
        inner_steps: int = 50,
        inner_growth: float = 2.0,
        step_decay: bool = True,
        lambda_init: str | float = "batch",
        evaluate: str = "prox",
        max_inner_steps: int | None = None,
        inner_output: str = "average",
        **kwargs: Any,
    ) -> None:
        if not (math.isfinite(envelope_smoothing) and envelope_smoothing > 0.0):
            raise ValueError(
                f"envelope_smoothing (μ' = μ·N₊N₋) must be a finite number > 0, got {envelope_smoothing}"
            )
        if not (math.isfinite(gamma) and gamma > 0.0):
            raise ValueError(f"gamma (γ' = γ·N₊N₋) must be a finite number > 0, got {gamma}")
        if evaluate not in ("prox", "anchor"):
            raise ValueError(f"evaluate must be 'prox' (v̄_n, Algorithm 2's output) or 'anchor' (w), got {evaluate!r}")
        if max_inner_steps is not None and int(max_inner_steps) < 1:
            raise ValueError(f"max_inner_steps (the cap on T_k) must be >= 1 or None, got {max_inner_steps}")
        if inner_output not in ("average", "last"):
            raise ValueError(f"inner_output must be 'average' (Algorithm 1's output) or 'last', got {inner_output!r}")
        self.max_inner_steps = None if max_inner_steps is None else int(max_inner_steps)
        self.inner_output = inner_output
        self.envelope_smoothing, self.gamma, self.evaluate = float(envelope_smoothing), float(gamma), evaluate
        super().__init__(
            model, objective, lr=lr, lambda_lr=lambda_lr, inner_steps=inner_steps, inner_growth=inner_growth,
            step_decay=step_decay, lambda_init=lambda_init, **kwargs,
        )
        tag = self.alternative_evaluation()[0]  # the second evaluation's metrics, logged as {stage}_{tag}/...
        self.metrics.update({f"{stage}_{tag}": self.build_metrics() for stage in ("val", "test")})

    @property
    def proximal_nu(self) -> float:
        return self.envelope_smoothing

    @property
    def has_m_branch(self) -> bool:
        return self.objective.alpha > 0.0

    def configure_state(self) -> None:
        super().configure_state()
        rows = self.make_rows()
        if self.has_m_branch:
            self.lambda_m = ThresholdTracker(rows, self.state_dtype, name="lambda_m")
        self.lambda_n = ThresholdTracker(rows, self.state_dtype, name="lambda_n")
        self.flat_buffer("v_sum", 0.0)
        self.flat_buffer("v_bar_m", math.nan)
        self.flat_buffer("prox_point", math.nan)  # v̄_n of the last completed outer step
        self.loop["branch"] = self.M_BRANCH if self.has_m_branch else self.N_BRANCH

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.ensure_anchor()
        on_m = self.loop["branch"] == self.M_BRANCH
        tracker = self.lambda_m if on_m else self.lambda_n
        self.sbcd_step(batch, tracker, self.objective.alpha if on_m else self.objective.beta)
        if self.end_inner_step():
            self.finish_branch(self.loop["inner_step"])

    def running_sum_tensors(self) -> Callable[[], list[torch.Tensor]]:
        """``v_sum``: the v step adds ``v^{(t)}``, the iterate before it, in its own pass over the parameters."""
        return lambda: self.buffer_pieces("v_sum")

    def before_v_step(self, tracker: ThresholdTracker, index: torch.Tensor, lam: torch.Tensor) -> None:
        tracker.accumulate(index, lam, self.loop["inner_step"])  # λ^{(t)}, before this step's update

    @torch.no_grad()
    def finish_branch(self, steps: int) -> None:
        """End of an SBCD call of ``steps`` steps: average (or keep the last iterate, ``inner_output``), then switch
        branch or take the outer step; restart v at the anchor."""
        last = self.inner_output == "last"
        v_bar = self.flat() if last else self.v_sum / steps

        def finish(tracker: ThresholdTracker) -> None:
            if last:
                tracker.restart_sum_()
            else:
                tracker.average_(steps)

        self.v_sum.zero_()
        if self.loop["branch"] == self.M_BRANCH:
            finish(self.lambda_m)
            self.v_bar_m.copy_(v_bar)
            self.loop["branch"], self.loop["inner_step"] = self.N_BRANCH, 0
            self.assign_(self.anchor)
            return
        finish(self.lambda_n)
        v_m = self.v_bar_m if self.has_m_branch else self.anchor  # α = 0: v_{μf^0}(w) = w
        difference = v_m - v_bar
        self.log_loop(always=True, moreau_grad_norm=float(difference.norm()) / self.envelope_smoothing)
        self.prox_point.copy_(v_bar)
        self.assign_(self.anchor - (self.gamma / self.envelope_smoothing) * difference)  # w^{(k+1)}, where v restarts
        self.loop["branch"] = self.M_BRANCH if self.has_m_branch else self.N_BRANCH
        self.end_outer_step()  # the anchor becomes w^{(k+1)}

    # ------------------------------------------------------------------ evaluation
    def _vectors(self) -> dict[str, torch.Tensor | None]:
        anchor = self.anchor if self.anchor_is_set() else None
        prox = None if bool(torch.isnan(self.prox_point[:1]).any()) else self.prox_point
        return {"anchor": anchor, "prox": prox if prox is not None else anchor}

    def evaluation_parameters(self) -> dict[str, torch.Tensor] | None:
        vector = self._vectors()[self.evaluate]
        return None if vector is None else self.as_parameters(vector)

    def alternative_evaluation(self) -> tuple[str, dict[str, torch.Tensor] | None]:
        other = "anchor" if self.evaluate == "prox" else "prox"
        vector = self._vectors()[other]
        return other, (None if vector is None else self.as_parameters(vector))


class SoRR(PAUCRange):
    r"""AGD-SBCD for the sum of ranked range (SoRR) of the losses (Yao, Lin & Yang, NeurIPS 2022, Appendix A).

    Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive
    Rates", NeurIPS 2022, arXiv:2203.01505, Appendix A: Algorithm 2 with Algorithm 3 as the inner solver.

    The same machinery as :class:`PAUCRange` with one scalar threshold per branch (``N₊ = 1``, ``N₋ = N``):
    Algorithm 3 is Algorithm 1 with a single row. Scale-free units use ``N`` in place of ``N₊N₋`` and ``N₋``
    (E.1: μ ∈ {2·10², 10³}/N, γ ∈ {2·10², …, 2·10⁴}/N, η_t = θ_t = c/((k+1)N), T_k = C(k+1)², C ∈ {30, 50, 100}).
    Algorithm 3 prints ``λ_i`` and ``η_t`` in the threshold step; λ is a scalar and θ_t is meant (equal to η_t in
    E.1), which is what ``lambda_lr`` (default ``lr``) gives.

    Args: as :class:`PAUCRange`; ``objective`` must be a :class:`~fccolit.objectives.pauc.SumOfRankedRangeLoss`
    (default: the shares [0.05, 0.5] of the losses, BCE-with-logits loss, reweighted stratified batches).

    Raises:
        TypeError: ``objective`` given and not a :class:`~fccolit.objectives.pauc.SumOfRankedRangeLoss`.
        ValueError: as :class:`PAUCRange`.

    Example:
        >>> from fccolit.algorithms.pauc import SoRR
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import PartialAUCRangeSurrogate
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = SoRR(LinearScorer(), data_sizes=data.sizes)
        >>> module.objective, module.lambda_m.values, module.lambda_n.values  # one threshold per branch, unvisited
        (SumOfRankedRangeLoss(), tensor([nan], dtype=torch.float64), tensor([nan], dtype=torch.float64))
        >>> SoRR(LinearScorer(), PartialAUCRangeSurrogate())
        Traceback (most recent call last):
        ...
        TypeError: SoRR needs a SumOfRankedRangeLoss objective, got PartialAUCRangeSurrogate
    """

    default_objective = SumOfRankedRangeLoss

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, **kwargs: Any) -> None:
        if objective is not None and not isinstance(objective, SumOfRankedRangeLoss):
            raise TypeError(f"SoRR needs a SumOfRankedRangeLoss objective, got {type(objective).__name__}")
        super().__init__(model, objective, **kwargs)
