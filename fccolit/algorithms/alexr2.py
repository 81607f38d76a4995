"""ALEXR2 (Chen et al., NeurIPS 2025, Algorithm 2): a double loop for non-smooth FCCO with a convex outer function.

ALEXR2 minimizes the nested envelope ``F_{λ,ν}(w) = min_z F_λ(z) + ‖z − w‖²/(2ν)`` (eq. (5)), whose gradient is
``(w − prox_{νF_λ}(w))/ν``. The inner loop is the primal-dual method ALEXR run for K steps from ``z_0 = w_t`` to
approximate the prox point; the outer loop is a momentum / Adam-type step on ``G_t = (w_t − z_K)/ν``.

Lightning runs one batch per step, so the double loop is a state machine
(:class:`~fccolit.algorithms.double_loop.DoubleLoop`): **every batch is one inner step** and every K-th batch also
takes the outer step. The state (all in the state dict, so a checkpoint written anywhere in the loop resumes
exactly): the anchor ``w_t`` (``anchor``), the previous inner iterate ``z_{k−1}`` (``inner_previous``), the loop
position ``(t, k)`` (``outer_step``, ``inner_step``: 0-dim int64 entries) and the trackers ``u`` (``state``). The
live parameters of the model hold the inner iterate ``z_k``; evaluation uses the anchor ``w_t``
(``eval_params="anchor"``, the algorithm's output) unless told otherwise.

Inner step k (Algorithm 2's dual step written in its primal, MSVR form; the two are equal)::

    u_i ← (1 − γ̂) u_i + γ̂ ĝ_i(z_k; B) + γ̂θ (ĝ_i(z_k; B) − ĝ_i(z_{k−1}; B))      γ̂ = γ/(1 + γ); y_i = ∇f_λ(u_i)
    G_k = ∇ĝ_0(z_k; B̃) + mean_{i∈B_1} ∇ĝ_i(z_k; B̃) y_i                       (B̃ independent of B)
    z_{k+1} = (η w_t + ν z_k − η ν G_k)/(η + ν)     = argmin ⟨G_k, z⟩ + ‖z − w_t‖²/(2ν) + ‖z − z_k‖²/(2η)
                                                    (the shared ProximalStep of fccolit.algorithms.double_loop)

Outer step, after K inner steps: ``G_t = (w_t − z_K)/ν`` (step 13 printed ``(β/ν)(w_t − z_K)``: the proof has no
β, App. C), then the optimizer (Momentum: ``v ← (1 − β)v + βG_t, w ← w − αv``; or AdaptiveMomentum), then
``z_0 = z_{−1} = w_{t+1}``. The duals (trackers) are warm-started across outer steps (the paper leaves y_{t,0} open).

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn
from torch.func import functional_call

from fccolit.algorithms.double_loop import DoubleLoop, ParameterSnapshot
from fccolit.algorithms.sonex import NonsmoothFCCOModule
from fccolit.objectives.base import FCCOObjective

__all__ = ["ALEXR2"]


class ALEXR2(DoubleLoop, NonsmoothFCCOModule):
    r"""ALEXR2: inner ALEXR steps to the prox point of F_λ, outer steps (Chen et al., NeurIPS 2025, arXiv:2506.02504).

    Chen et al.'s Algorithm 2, with the constrained variant of their eq. (39); see the module docstring for the
    inner and outer steps. Every batch is one inner step; every ``inner_steps``-th batch also takes the outer step.

    Args:
        smoothing: λ > 0 (or 0 for a smooth outer), the outer smoothing; ``f̄ = f_λ``, ``y = ∇f_λ(u)``. Default 2e-3:
            the middle of the ROC-fairness grid {2e-2, 2e-3, 2e-4} (an assumption).
        envelope_smoothing: ν, the outer Moreau parameter (the smoothing of the envelope F_{λ,ν}), ``ν < 1/ρ_{F_λ}`` (default 0.1, grid {0.1, 0.01}).
        inner_lr: η, the inner primal step (default 0.1, an assumption inside the grid {1e-3, 1e-2, 0.1, 1}).
        inner_steps: K, inner steps per outer step (default 5, grid {5, 10}).
        ema_weight: the weight of the new estimate in u's moving average, as in every algorithm: here γ̂ = γ/(1 + γ)
            of the paper's dual step γ (:attr:`dual_step`), Algorithm 2's dual step in its MSVR form (default 0.8,
            the experiments' value).
        extrapolation: θ, so the MSVR correction weight is γ̂θ (default 0.125: γ̂θ = 0.1 as in F.2).
        independent_batches: split each per-device batch into a first half B (values, for u) and a second half B̃
            (gradients), the paper's two independent batches. The global batch must then be laid out as two
            independent halves, which holds for shuffled batches (``GroupBatchSampler`` with one group, or with
            ``paired=True``) when half the global batch is a multiple of the number of devices; it does *not*
            hold for ``DualSampler`` batches (positives first). False uses the whole batch for both
            (deterministic tests).
        eval_params: ``"anchor"`` (w_t, default) or ``"inner"`` (the live z_k) in validation / test / predict.
        constraints_per_step, sample_seed, outer_normalization: see
            :class:`~fccolit.algorithms.sonex.NonsmoothFCCOModule` (``"fixed"``: eq. (53)'s 1/m).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. The optimizer is the outer one (α = its
            ``lr``, β = its ``momentum_weight``); the scheduler drives it and steps once per outer step
            (``scheduler_interval="step"``) or per epoch. ``gradient_clip_val`` clips each inner ``G_k``.
        model, objective: see :class:`~fccolit.algorithms.sonex.NonsmoothFCCOModule`.

    Raises:
        ValueError: ``envelope_smoothing`` (ν) ≤ 0; ``inner_lr`` (η) ≤ 0; ``inner_steps`` (K) < 1; ``ema_weight`` (γ̂) outside
            (0, 1]; ``extrapolation`` (θ) < 0; ``eval_params`` not ``"anchor"`` / ``"inner"``; and
            :class:`~fccolit.algorithms.sonex.NonsmoothFCCOModule`'s; in a step with ``independent_batches``, a
            per-device batch of odd size; from ``configure_optimizers``, a model without trainable parameters.
        TypeError, RuntimeError: see :class:`~fccolit.algorithms.sonex.NonsmoothFCCOModule`.
        FloatingPointError: a non-finite inner estimate, gradient or loss in an inner step, or a non-finite outer
            gradient (the step is not taken).

    Example:
        One inner step's FCCO part by hand (``training_step`` adds the proximal z step and, every K-th batch, the
        outer step):

        >>> import torch
        >>> from fccolit.algorithms import ALEXR2
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import GroupDROCVaRLoss
        >>> batch = {"x": torch.randn(8, 3), "y": torch.tensor([1, 0, 1, 0, 1, 0, 1, 0]),
        ...          "group": torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])}  # the outer index: one u per group
        >>> sizes = {"num_groups": 3, "num_features": 3}
        >>> module = ALEXR2(LinearScorer(), GroupDROCVaRLoss(ratio=0.5), data_sizes=sizes)
        >>> round(module.dual_step, 6), module.loop  # γ = γ̂/(1 − γ̂); the loop position (t, k)
        (4.0, {'outer_step': 0, 'inner_step': 0})
        >>> value_batch, gradient_batch = module.split_batch(batch)  # B (groups 0, 1) and B̃ (groups 2, 0, 1)
        >>> with torch.no_grad():
        ...     scores = module(value_batch)
        >>> loss, f_u = module.compositional_loss(scores, value_batch, gradient_batch)
        >>> module.state.visited()  # the dual step moved the groups of B only
        tensor([ True,  True, False])

    ``trainer.global_step`` counts batches (inner steps): the inner step is the counted optimizer step and the
    outer step calls the wrapped optimizer directly. (So 16-bit mixed precision with a gradient scaler is not
    supported; use 32, 64 or bf16.)
    """

    loop_keys = ("outer_step", "inner_step")
    loop_layout = "tensors"  # a state dict of tensors only, as ALEXR2's checkpoints have always been

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        smoothing: float = 2e-3,
        envelope_smoothing: float = 0.1,
        inner_lr: float = 0.1,
        inner_steps: int = 5,
        ema_weight: float = 0.8,
        extrapolation: float = 0.125,
        independent_batches: bool = True,
        eval_params: Literal["anchor", "inner"] = "anchor",
        constraints_per_step: int | None = None,
        sample_seed: int = 0,
        outer_normalization: Literal["present", "fixed"] = "present",
        **kwargs,
    ) -> None:
        if not float(envelope_smoothing) > 0.0:
            raise ValueError(f"the Moreau parameter ν (envelope_smoothing) must be > 0, got {envelope_smoothing}")
        if not float(inner_lr) > 0.0:
            raise ValueError(f"the inner step size η (inner_lr) must be > 0, got {inner_lr}")
        if int(inner_steps) < 1:
            raise ValueError(f"inner_steps (K) must be >= 1, got {inner_steps}")
        if not 0.0 < ema_weight <= 1.0:
            raise ValueError(f"ema_weight (γ̂ = γ/(1 + γ)) must be in (0, 1], got {ema_weight}")
        if not extrapolation >= 0.0:
            raise ValueError(f"extrapolation (θ) must be >= 0, got {extrapolation}")
        if eval_params not in ("anchor", "inner"):
            raise ValueError(f"eval_params must be 'anchor' or 'inner', got {eval_params!r}")
        self.envelope_smoothing, self.inner_lr, self.inner_steps = float(envelope_smoothing), float(inner_lr), int(inner_steps)
        self.ema_weight, self.extrapolation = float(ema_weight), float(extrapolation)
        self.independent_batches, self.eval_params = bool(independent_batches), eval_params
        self.init_loop()
        super().__init__(
            model, objective, smoothing=smoothing, constraints_per_step=constraints_per_step, sample_seed=sample_seed,
            outer_normalization=outer_normalization, **kwargs
        )

    @property
    def dual_step(self) -> float:
        """γ, the dual (mirror-ascent) step of Algorithm 2: γ̂ = γ/(1 + γ) ⇔ γ = γ̂/(1 − γ̂) (inf for γ̂ = 1)."""
        return float("inf") if self.ema_weight == 1.0 else self.ema_weight / (1.0 - self.ema_weight)

    def configure_state(self) -> None:
        super().configure_state()
        self.anchor = self.snapshot()  # w_t
        self.inner_previous = self.snapshot()  # z_{k−1}

    def configure_optimizers(self) -> Any:
        inner = self.proximal_step(self.inner_lr, self.envelope_smoothing)  # the z step, towards the anchor w_t
        params = self.loop_parameters()
        outer = self.optimizer_factory(params) if self.optimizer_factory else self.default_optimizer(params)
        if self.scheduler_factory is None:
            return [inner, outer]
        return [inner, outer], [{"scheduler": self.scheduler_factory(outer)}]

    # ------------------------------------------------------------------ the double loop (DoubleLoop)
    def loop_parameters(self) -> list[nn.Parameter]:
        return [p for _, p in self.trainable()]

    def anchor_tensors(self) -> list[torch.Tensor]:
        return self.anchor.tensors()

    def anchor_is_set(self) -> bool:
        return bool(self.anchor.ready)

    @torch.no_grad()
    def set_anchor_(self) -> None:
        """w_t := the live parameters, and z_{−1} = z_0 = w_t."""
        params = self.loop_parameters()
        self.anchor.copy_from(params)
        self.inner_previous.copy_from(params)

    def inner_steps_at(self, outer: int) -> int:
        return self.inner_steps  # K, every outer step

    # ------------------------------------------------------------------ evaluation at the anchor
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.training or self.eval_params == "inner" or not self.anchor_is_set():
            return self.model(batch[self.input_key])
        params = self.anchor.as_dict("model.")
        return functional_call(self.model, params, (batch[self.input_key],), strict=False)

    # ------------------------------------------------------------------ the state machine
    def split_batch(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``(B, B̃)``: the first and second half of this device's batch (or the whole batch twice)."""
        if not self.independent_batches:
            return batch, batch
        n = batch[self.input_key].shape[0]
        if n % 2:
            raise ValueError(
                f"ALEXR2 splits each per-device batch into a value half and a gradient half, but this batch has {n} "
                "rows: use an even per-device batch size, or independent_batches=False"
            )
        half = n // 2

        def part(sl: slice) -> dict[str, torch.Tensor]:
            return {k: v[sl] if isinstance(v, torch.Tensor) and v.shape[:1] == (n,) else v for k, v in batch.items()}

        return part(slice(0, half)), part(slice(half, n))

    def previous_iterate(self) -> ParameterSnapshot | None:
        """z_{k−1} for the MSVR correction (none at k = 0, where z_{−1} = z_0, or without extrapolation)."""
        return self.inner_previous if self.extrapolation != 0.0 and self.loop["inner_step"] > 0 else None

    u_for_gradient = "fresh"  # y_i = ∇f_λ(u_i) of the dual step just taken

    @property
    def correction_weight(self) -> float:
        """γ̂θ, the MSVR correction's weight (follows a scheduled γ̂)."""
        return self.ema_weight * self.extrapolation

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        """One inner step: the base's step template with the value half B (no gradient: the dual step on u) and the
        gradient half B̃ (:meth:`split_batch`), the proximal z step, and every K-th batch the outer step."""
        inner_opt, outer_opt = self.optimizers()
        params = self.loop_parameters()
        self.ensure_anchor()  # z_0 = z_{−1} = w_0 at the first step
        value_batch, gradient_batch = self.split_batch(batch)
        with torch.no_grad():
            scores = self(value_batch)
        loss, estimate = self.compositional_loss(scores, value_batch, gradient_batch)
        self.inner_previous.copy_from(params)  # z_k becomes z_{k−1}
        # z_{k+1}: the counted step (global_step = batches); the scheduler drives the outer optimizer
        self.optimization_step(loss, optimizer=inner_opt, step_scheduler=False)
        if self.end_inner_step():
            self.outer_step(outer_opt.optimizer, params)
        self.log_objective_estimate(estimate)

    @torch.no_grad()
    def outer_step(self, optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
        """``G_t = (w_t − z_K)/ν`` into ``.grad``, the parameters back to ``w_t``, the optimizer's step, new anchor
        ``w_{t+1}`` (and ``z_0 = z_{−1} = w_{t+1}``)."""
        for p, w in zip(params, self.anchor.tensors(), strict=True):
            p.grad = (w - p) / self.envelope_smoothing
        self.check_finite_step(optimizer)  # before the parameters go back to w_t: a failed step changes nothing
        for p, w in zip(params, self.anchor.tensors(), strict=True):
            p.copy_(w)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.end_outer_step()
        scheduler = self.lr_schedulers()
        if scheduler is not None and self.scheduler_interval == "step":
            scheduler.step()
