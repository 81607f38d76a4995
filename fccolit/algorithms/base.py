"""The LightningModule every FCCO algorithm derives from.

One training step of every algorithm in fccolit is::

    scores  = model(batch)                                  # forward
    inner   = objective.inner(scores, batch)                # ĝ_i(w) for the outer indices i of the batch
    u       = update_state(inner)                           # the algorithm's rule (EMA, MSVR, decay, ...)
    loss    = mean_i ⟨ stop_grad(∇f_i(u_i)), ĝ_i(w) ⟩       # its gradient is the compositional estimator
    manual_backward(loss); clip; optimizer.step(); scheduler.step()

Every step passes through :meth:`FCCOModule.check_finite_step` before the optimizer steps (no step on a non-finite
loss or gradient: a ``FloatingPointError`` naming the step and the likely cause) and starts from random generators
seeded by ``(run seed, epoch, batch, rank)`` (:meth:`FCCOModule.seed_step_generators`), so dropout draws the same
after a resume from a checkpoint as in the uninterrupted run.

What differs between papers is :meth:`FCCOModule.update_state` (and, for double-loop methods, what happens
every K steps). The scalar ``loss`` is a surrogate whose gradient is right; its value means nothing, so it is
never logged. The module logs ``train/objective``, the plug-in estimate ``mean_i f_i(u_i)`` of F, and the
validation / test metrics as ``{stage}/{metric}`` (``val/ap``, ``val/ndcg@10``, ``test/pauc_0.05_0.5``, ...).
"""

from __future__ import annotations

import functools
import math
import os
import random
import secrets
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn

from fccolit import distributed
from fccolit.checkpoints import RESUME_KEY
from fccolit.metrics import EvaluationMetrics, build_metric
from fccolit.metrics.figures import figure_writer, log_curve_figures
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.samplers.base import derived_seed
from fccolit.state import IndexedState, InitialState, StateUpdate

OptimizerFactory = OptimizerCallable
SchedulerFactory = LRSchedulerCallable


def _plain_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """An optimizer's constructor settings (``defaults``) as plain numbers, strings and lists, which a weights-only
    checkpoint load accepts: what the CLI compares with the configured optimizer when a run resumes."""
    plain = {}
    for key, value in settings.items():
        if isinstance(value, tuple):
            value = list(value)
        if torch.is_tensor(value) and value.numel() == 1:
            value = value.item()
        if value is None or isinstance(value, (bool, int, float, str)) or (
            isinstance(value, list) and all(isinstance(v, (bool, int, float)) for v in value)
        ):
            plain[key] = value
    return plain


def _packable(scores: torch.Tensor, fields: list[torch.Tensor]) -> bool:
    """Whether the scores and batch fields can travel as float64 columns of one tensor without changing a value:
    floating scores and fields with the scores' leading dimension B, floating, bool or integer (batch fields hold
    labels and row indices, far below the 2^53 up to which float64 holds every integer; no value is read here,
    so the check costs no host-device synchronization)."""
    if not scores.is_floating_point() or scores.dim() == 0 or scores.device.type == "mps":  # MPS: no float64
        return False
    return all(t.dim() > 0 and t.shape[0] == scores.shape[0] and not t.is_complex() for t in fields)


class _GatherForReplicatedLoss(torch.autograd.Function):
    """All-gather ``[B, C] → [W·B, C]`` (ordered by rank) for a loss that every rank computes identically from it.

    Backward: this rank's slice of the incoming gradient times W, with no communication. The generic all-gather
    backward (``all_gather_with_grad``) sums the W ranks' gradients into each slice (a reduce-scatter; gloo emulates
    it with W scatters); when every rank evaluates the same loss on the same gathered tensor, as the objectives of
    the global batch are evaluated (``needs_global_batch``), those W gradients are equal and their sum is W times
    this rank's own. Same result, without the collectives (and the wait for the slowest rank) in the backward.
    """

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor) -> torch.Tensor:
        ctx.world, ctx.start, ctx.rows = distributed.world_size(), distributed.rank() * local.shape[0], local.shape[0]
        return distributed.all_gather_equal(local)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad[ctx.start : ctx.start + ctx.rows] * ctx.world


def _gather_packed(
    scores: torch.Tensor, fields: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The global batch's scores (with gradient) and fields in one all-gather instead of one per tensor.

    The scores ``[B, ...]`` and each field ``[B, ...]`` become float64 columns of one ``[B, C]`` tensor (exact for
    float32 / float64 values, bools and integers below 2^53), gathered with gradient, then split and cast back to
    ``[W·B, ...]`` each (the fields detached), ordered by rank as ``all_gather_with_grad`` / ``all_gather_equal``
    give them; the backward needs no collective (:class:`_GatherForReplicatedLoss`). Each collective is a rendezvous
    of the ranks: their number, not their bytes, is what a small step pays.
    """
    parts = [scores] + list(fields.values())
    columns = [t.reshape(t.shape[0], -1).to(torch.float64) for t in parts]
    columns[1:] = [c.detach() for c in columns[1:]]
    gathered = _GatherForReplicatedLoss.apply(torch.cat(columns, 1))
    out, start = [], 0
    for t, c in zip(parts, columns):
        piece = gathered[:, start : start + c.shape[1]]
        piece = piece.to(t.dtype).reshape(gathered.shape[0], *t.shape[1:])
        out.append(piece if t is scores else piece.detach())
        start += c.shape[1]
    return out[0], dict(zip(fields, out[1:]))


def _naming_the_step(training_step: Callable[..., Any]) -> Callable[..., Any]:
    """``training_step`` re-raising a ``FloatingPointError`` that does not say where with the global step and epoch."""

    @functools.wraps(training_step)
    def wrapped(self: "FCCOModule", *args: Any, **kwargs: Any) -> Any:
        try:
            return training_step(self, *args, **kwargs)
        except FloatingPointError as err:
            if "global step" in str(err):
                raise
            raise FloatingPointError(
                f"{type(self).__name__} at global step {self.global_step} (epoch {self.current_epoch}): {err}"
            ) from err

    wrapped.names_the_step = True
    return wrapped


class FCCOModule(LightningModule):
    """Base LightningModule of the FCCO algorithms (manual optimization).

    Args:
        model: the backbone, any ``nn.Module`` mapping ``batch[input_key]`` to scores ``[B]``.
        objective: the problem (an :class:`~fccolit.objectives.FCCOObjective`); None only for modules that keep no
            per-index state (e.g. :class:`~fccolit.algorithms.Supervised`).
        optimizer: a callable ``params -> Optimizer`` (in YAML: ``class_path`` / ``init_args`` of any torch or
            fccolit optimizer). None: the algorithm's paper default (:meth:`default_optimizer`).
        scheduler: a callable ``optimizer -> LR scheduler``, stepped explicitly every ``scheduler_interval``.
        scheduler_interval: ``"step"`` or ``"epoch"``.
        data_sizes: the DataModule's ``sizes`` (linked by the CLI): state rows and model input widths.
        metrics: names logged at validation and test (default: the objective's ``default_metrics``).
        gradient_clip_val: clip gradients to this value (None: no clipping).
        gradient_clip_algorithm: ``"norm"`` or ``"value"``.
        state_dtype: dtype of the per-index state (``"float32"``; ``"float64"`` for exactness checks).
        initial_state: how the per-index state ``u`` starts (U₁ of the papers): ``"first_estimate"`` (default: the
            first visit sets ``u_i := ĝ_i``), ``"zero"`` (U₁ = 0), ``"projected_zero"`` (U₁ = Π_Ω[0], the papers'
            algorithms as printed: Wang & Yang, ICML 2022, Alg. 1; Wang et al., AISTATS 2022, Alg. 1–3) or a value
            per component; see :class:`~fccolit.state.IndexedState`. With a U₁ the first visit applies the ordinary
            update, so the first ∇f is taken at ``(1 − γ) U₁ + γ s ĝ_i``. Algorithms whose state has its own rule
            (SOLC's log-domain state, the pAUC thresholds) take only ``"first_estimate"``.
        evaluation_figures: at every validation and test, also write the curves the metrics hold (precision-recall
            and ROC, NDCG@k against k) as TensorBoard figures (:mod:`fccolit.metrics.figures`; rank 0, TensorBoard
            loggers only; about 0.05 s per figure on a 2-core CPU: ``benchmarks/results/metrics_compare.md``).
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    input_key = "x"
    default_metrics: tuple[str, ...] = ()  # used when there is no objective to ask
    training_estimate_name = "train/objective"  # what log_objective_estimate logs (and its "_epoch" mean)
    tracks_training_estimate = False  # log the epoch mean even without an objective (Supervised's loss)

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective | None = None,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "step",
        data_sizes: dict[str, int] | None = None,
        metrics: Sequence[str] | None = None,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        state_dtype: str = "float32",
        initial_state: InitialState = "first_estimate",
        evaluation_figures: bool = True,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        if scheduler_interval not in ("step", "epoch"):
            raise ValueError(f"scheduler_interval must be 'step' or 'epoch', got {scheduler_interval!r}")
        self.model = model
        self.objective = objective
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.data_sizes = {k: int(v) for k, v in (data_sizes or {}).items()}
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.state_dtype = getattr(torch, state_dtype)
        self.initial_state = initial_state
        self.evaluation_figures = evaluation_figures
        if self.data_sizes and hasattr(model, "bind_sizes"):
            model.bind_sizes(self.data_sizes)
        if self.data_sizes and objective is not None:
            objective.bind_sizes(self.data_sizes)
        if objective is not None:
            objective.bind_model(model)
        default_metrics = objective.default_metrics if objective is not None else self.default_metrics
        self.metric_names = list(metrics) if metrics is not None else list(default_metrics)
        self.metrics = nn.ModuleDict({stage: self.build_metrics() for stage in ("val", "test")})
        # running sum and count of f_i(u_i) over the epoch (plain tensors: a torchmetrics object costs ~1 ms a step)
        # (not in the state dict, whose values one process and W processes share: the checkpoint keeps the sums
        # over every rank apart, see on_save_checkpoint)
        self.register_buffer("_objective_sum", torch.zeros((), dtype=torch.float64), persistent=False)
        self.register_buffer("_objective_count", torch.zeros((), dtype=torch.float64), persistent=False)
        self._random_draw_seed: int | None = None  # the run's seed of the per-step generators (on_fit_start)
        self._logs_this_step = True  # see logs_this_step
        self._step_delegate: tuple[FCCOModule, str] | None = None  # see delegate_step
        self.configure_state()
        state = getattr(self, "state", None)
        if initial_state != "first_estimate" and (not isinstance(state, IndexedState) or state.initial_value is None):
            raise ValueError(
                f"{type(self).__name__} does not take initial_state={initial_state!r}: its state has its own first-visit "
                "rule (only 'first_estimate' applies)"
            )
        self.save_hyperparameters(ignore=["model", "objective", "optimizer", "scheduler"])

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every algorithm's ``training_step`` names the step in the ``FloatingPointError`` it raises (a state's
        or an objective's check of non-finite values, which knows the rows but not the step)."""
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("training_step")
        if step is not None and not getattr(step, "names_the_step", False):
            cls.training_step = _naming_the_step(step)

    # ------------------------------------------------------------------ hooks for algorithms
    def configure_state(self) -> None:
        """Create the per-index state. Default: one :class:`IndexedState` sized by the objective, started as
        ``initial_state`` says."""
        if self.objective is not None:
            self.state = self.make_state(self.objective.inner_dim, name="u", initial=self.initial_state)

    def make_state(
        self, dim: int, name: str, rows_key: str | None = None, objective: FCCOObjective | None = None, **kwargs: Any
    ) -> IndexedState:
        """An :class:`IndexedState` with the rows and Ω of ``objective`` (default: the module's) or
        ``data_sizes[rows_key]`` rows (``kwargs``: the state's other options, e.g. ``initial``, ``decay_unsampled``)."""
        objective = objective if objective is not None else self.objective
        if not self.data_sizes:
            raise ValueError(
                f"{type(self).__name__} needs data_sizes to size its per-index state: run it through the fccolit CLI "
                "(which links them from the DataModule) or pass data_sizes=datamodule.sizes."
            )
        rows = self.data_sizes[rows_key] if rows_key else objective.num_rows(self.data_sizes)
        lower, upper = objective.state_bounds(self.data_sizes)
        return IndexedState(rows, dim, lower=lower, upper=upper, dtype=self.state_dtype, name=name, **kwargs)

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """The paper's optimizer when none is configured."""
        from fccolit.optim import Momentum

        return Momentum(params, lr=1e-3, momentum_weight=0.1)

    # ------------------------------------------------------------------ forward and the shared step
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores of a batch: ``[B]``, or ``[B, T]`` for a model with one output per task.

        A multi-task training batch (a ``task`` field ``[B]``, see :class:`~fccolit.samplers.MultiLabelSampler`)
        gets each position's score for its own task, ``[B]``, which objectives with ``multi_task = True`` take.
        """
        scores = self.model(batch[self.input_key])
        task = batch.get("task")
        if task is None or self.objective is None:
            return scores
        if not self.objective.multi_task:
            raise ValueError(
                f"{type(self.objective).__name__} does not take multi-task batches (the batch has a 'task' field): "
                "train one task at a time (e.g. the DataModule's task=<label>) or use a multi-task objective "
                "such as AveragePrecision"
            )
        if scores.dim() != 2 or scores.shape[1] <= int(task.max()):
            raise ValueError(
                f"multi-task batch with tasks up to {int(task.max())} but the model returns scores of shape "
                f"{tuple(scores.shape)}: give the model one output per task (num_outputs = data sizes['num_tasks'])"
            )
        return scores.gather(1, task.unsqueeze(1)).squeeze(1)

    def objective_inputs(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
        """Scores and batch the objective sees: the global batch (gathered with gradient) when it needs one."""
        if self.objective.needs_global_batch and distributed.is_distributed():
            batch = self.objective.local_fields(batch)
            fields = tuple(k for k in self.objective.batch_fields + ("task",) if k in batch)
            if _packable(scores, [batch[k] for k in fields]):
                return (*_gather_packed(scores, {k: batch[k] for k in fields}), True)
            gathered = {k: distributed.all_gather_equal(batch[k]) for k in fields}
            return distributed.all_gather_with_grad(scores), gathered, True
        return scores, batch, False

    # ------------------------------------------------------------------ the FCCO step
    def compositional_loss(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The FCCO step: the scalar whose gradient is the algorithm's estimator, and ``f_i(u_i)`` of the batch's
        rows (the plug-in estimate of F, for logging; None when the batch has no outer index). Updates the state.

        Every algorithm's step is this template; the papers differ only in its hooks::

            previous = self.scores_at_previous(batch, synced)              # SONEX's w_{t−1} (MSVR), else None
            inner    = self.inner_estimates(objective, scores, batch, synced, previous)   # ĝ_i (+ correction)
            terms    = self.estimator_terms_of(objective, state, inner, synced)   # update u, ⟨∇f_i(u_i), ĝ_i⟩
            direct   = self.direct_term(scores, batch, synced, previous)     # g_0 (SONEX / PenaltySOX), or none
            loss     = direct + self.reduce_rows(terms, synced)              # assemble_loss
        """
        scores, obj_batch, synced = self.objective_inputs(scores, batch)
        previous = self.scores_at_previous(batch, synced)
        inner = self.inner_estimates(self.objective, scores, obj_batch, synced, previous)
        terms, estimate = self.estimator_terms_of(self.objective, self.state, inner, synced)
        direct = self.direct_term(scores, obj_batch, synced, previous)
        self.on_estimate_end()
        return self.assemble_loss(scores, terms, estimate, direct, synced)

    def estimator_terms_of(
        self, objective: FCCOObjective, state: IndexedState, inner: InnerBatch, synced: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One tracked FCCO sum's share of the step: update ``state`` with the batch's estimates, select the u that
        enters ∇f, and return per row ``⟨stop_grad(w_i), v_i⟩`` ``[R]`` (:meth:`estimator_weights`: w_i = ∇f_i(u_i),
        v_i = ĝ_i(w)) and the plug-in ``f_i(u_i)`` ``[R]`` at the updated u; ``(None, None)`` without rows.

        The empty-batch rule: the state is updated unless the *global* batch is known to hold no row (one process,
        or an objective evaluated on the gathered batch). Under DDP a rank without rows still takes part in the
        state's all-gather, which brings the other ranks' rows, so every rank's state stays identical.
        """
        if inner.index.numel() == 0 and (synced or not distributed.is_distributed()):
            return None, None
        record = self.update_state(state, inner, synced)
        if inner.index.numel() == 0:
            return None, None
        self.log_rows_at_bounds(state, record.current)
        u = record.current if self.u_for_gradient == "fresh" else record.previous
        terms = self.surrogate_terms(*self.estimator_weights(objective, u, inner))
        with torch.no_grad():
            estimate = self.plug_in_estimate(objective, record.current, inner)
        return terms, estimate

    @staticmethod
    def surrogate_terms(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Per row ``Σ_k stop_grad(w_ik) · v_ik`` ``[R]`` from weights and differentiable values ``[R, k]``: the terms
        whose gradient is the compositional estimator ``∇ĝ_i(w) ∇f_i(u_i)`` (with w = ∇f_i(u_i), v = ĝ_i(w)); their
        value means nothing. Every algorithm's loss is formed here."""
        return (weights.detach().to(values.dtype) * values).sum(-1)

    def assemble_loss(
        self, scores: torch.Tensor, terms: torch.Tensor | None, estimate: torch.Tensor | None,
        direct: tuple[torch.Tensor | None, torch.Tensor | None], synced: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The step's loss ``ĝ_0 + reduce_rows(terms)`` (0 with the graph when there is neither) and the per-row
        plug-in estimate plus ``g_0``'s value (None without rows)."""
        loss = scores.sum() * 0.0 if terms is None else self.reduce_rows(terms, synced)
        direct_loss, direct_value = direct
        if direct_loss is not None:
            loss = direct_loss + loss
        if estimate is not None and direct_value is not None:
            estimate = estimate + direct_value
        return loss, estimate

    # ------------------------------------------------------------------ hooks of the FCCO step
    #: γ, the weight of the new inner estimate in the moving average (1: the plug-in estimate, no memory)
    ema_weight: float = 1.0
    #: γ', the weight of the MSVR correction ``ĝ_i(w_t) − ĝ_i(w_{t−1})`` (0: none; SONEX / ALEXR2 set it)
    correction_weight: float = 0.0
    #: which u enters ∇f: ``"previous"`` (u^{t−1}, as SOX is analysed) or ``"fresh"`` (u^t, after this step's update)
    u_for_gradient: str = "previous"

    def scores_at_previous(self, batch: dict[str, torch.Tensor], synced: bool) -> torch.Tensor | None:
        """The batch's scores at the previous iterate w_{t−1} when the state rule has an MSVR correction (SONEX),
        else None (the default)."""
        return None

    def inner_estimates(
        self, objective: FCCOObjective, scores: torch.Tensor, batch: dict[str, torch.Tensor], synced: bool,
        previous_scores: torch.Tensor | None = None,
    ) -> InnerBatch:
        """The outer indices of the batch and their estimates ``ĝ_i(w)`` (default: ``objective.inner``)."""
        return objective.inner(scores, batch)

    def update_state(self, state: IndexedState, inner: InnerBatch, synced: bool) -> StateUpdate:
        """The algorithm's state rule on the batch's rows. Default: the moving average with the MSVR correction
        ``u_i ← Π_Ω[(1 − γ) u_i + γ s ĝ_i + γ' (ĝ_i − ĝ_i(w_{t−1}))]`` (:meth:`IndexedState.update`) with
        γ = ``ema_weight``, s = :meth:`sample_scale`, γ' = ``correction_weight``."""
        return state.update(
            inner.index, inner.value, ema_weight=self.ema_weight, sample_scale=self.sample_scale(state, inner, synced),
            correction=inner.correction, correction_weight=self.correction_weight, synced=synced,
        )

    def sample_scale(self, state: IndexedState, inner: InnerBatch, synced: bool) -> float:
        """s, the factor of the new estimate in :meth:`update_state` (default 1; MOAP: n/B1)."""
        return 1.0

    def estimator_weights(
        self, objective: FCCOObjective, u: torch.Tensor, inner: InnerBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row ``(w_i, v_i)`` ``[R, k]`` each: the step's loss holds ``Σ_k stop_grad(w_ik) v_ik``. Default
        ``(∇f_i(u_i), ĝ_i(w))``; K-SONG scales w by ψ and adds its implicit-threshold column, SOLC writes
        ``ĝ/u`` in the log domain, SONEX smooths ∇f."""
        return objective.outer_grad(u, inner.context), inner.value

    def plug_in_estimate(self, objective: FCCOObjective, u: torch.Tensor, inner: InnerBatch) -> torch.Tensor:
        """``f_i(u_i)`` per row at the updated state (``train/objective``)."""
        return objective.outer(u, inner.context)

    def reduce_rows(self, terms: torch.Tensor, synced: bool) -> torch.Tensor:
        """The step's loss from the per-row terms ``[R]``: their mean (SONEX: optionally a fixed 1/m)."""
        return terms.mean()

    def direct_term(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], synced: bool, previous_scores: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``g_0``'s share of the step's loss and its value (detached) when ``F = g_0 + (1/n) Σ f_i(g_i)`` has a
        direct term; default ``(None, None)``."""
        return None, None

    def on_estimate_end(self) -> None:
        """Called once the step's loss is formed, before the backward (SONEX: w_t becomes the previous iterate)."""

    def log_rows_at_bounds(self, state: IndexedState, rows: torch.Tensor) -> None:
        """On the steps the logger writes, for a state projected onto a box Ω: ``train/<state>_at_lower/<c>`` and
        ``train/<state>_at_upper/<c>``, the share of this step's updated rows (``[R, dim]``) that sit at each finite
        bound of component c, i.e. rows the projection rather than the estimate sets (this rank's rows)."""
        if not state.has_bounds or not self.logs_this_step or self._trainer is None:
            return
        at_lower, at_upper = state.share_at_bounds(rows)
        for c in range(state.dim):
            if torch.isfinite(state.lower[c]):
                self.log(f"train/{state.name}_at_lower/{c}", at_lower[c].item(), on_step=True, on_epoch=False)
            if torch.isfinite(state.upper[c]):
                self.log(f"train/{state.name}_at_upper/{c}", at_upper[c].item(), on_step=True, on_epoch=False)

    def delegate_step(self, algorithm: "FCCOModule | None", log_name: str = "warmup/objective") -> None:
        """Take the training steps with ``algorithm``'s FCCO step (its objective, state and hooks; this module's model,
        optimizer and schedule) until called with None. Its plug-in estimate is logged as ``log_name`` on the
        logger's steps; ``train/objective`` stays this module's. Used by :class:`~fccolit.callbacks.WarmUp`."""
        self._step_delegate = (algorithm, log_name) if algorithm is not None else None

    @property
    def step_delegate(self) -> "FCCOModule | None":
        """The algorithm whose step is taken instead of this module's (:meth:`delegate_step`), or None."""
        return None if self._step_delegate is None else self._step_delegate[0]

    @_naming_the_step
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if self._step_delegate is None:
            loss, estimate = self.compositional_loss(self(batch), batch)
            self.optimization_step(loss)
            self.log_objective_estimate(estimate)
            return
        algorithm, log_name = self._step_delegate
        loss, estimate = algorithm.compositional_loss(self(batch), batch)
        self.optimization_step(loss)
        if estimate is not None and self.logs_this_step:
            self.log(log_name, estimate.mean(), on_step=True, on_epoch=False, prog_bar=True)

    def on_fit_start(self) -> None:
        distributed.reset_row_capacity()  # every rank pads the state's all-gather alike from here on
        if self._random_draw_seed is None:  # a fresh run (a resumed one restored it in on_load_checkpoint)
            self._random_draw_seed = self._new_random_draw_seed()

    def _new_random_draw_seed(self) -> int:
        """The run's seed of the per-step generators: ``seed_everything``'s seed when there is one, else a fresh
        random one (not drawn from torch's generator, whose stream it must not shift); rank 0's on every rank."""
        global_seed = os.environ.get("PL_GLOBAL_SEED")
        seed = int(global_seed) if global_seed is not None else secrets.randbits(63)
        if self._trainer is not None and distributed.is_distributed():
            seed = int(self.trainer.strategy.broadcast(seed, src=0))
        return seed

    def seed_step_generators(self, batch_idx: int) -> None:
        """Seed torch's generators (CPU, and the module's CUDA device), numpy's and Python's global generators from
        ``(run seed, epoch, batch_idx, rank)`` at the start of every training batch.

        Whatever a step draws from them (dropout, noise, a model's own sampling) is then a pure function of where
        the step is, not of how much the process drew before: a run resumed from a checkpoint written mid-epoch
        draws exactly what the uninterrupted run drew, with no generator state in the checkpoint beyond the run
        seed. Each rank draws its own numbers. The data's own
        randomness (sampling, augmentation) is keyed by the batch instead (:class:`~fccolit.samplers.base.SampledBatch`).
        """
        seed = derived_seed(self._random_draw_seed or 0, self.current_epoch, batch_idx, self.global_rank)
        torch.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)
        random.seed(seed)

    @property
    def logs_this_step(self) -> bool:
        """Whether the logger writes this training batch's values: Lightning writes when ``(batches so far + 1)`` is
        a multiple of ``log_every_n_steps``. Fixed at the start of each batch (these modules take one optimizer step
        per batch, so the batches so far are the global step until this batch's step is taken); True outside
        training. Algorithms and callbacks compute values that exist only to be logged under this flag: a
        ``self.log`` call costs about 0.3 ms on a CPU, as much as a state update."""
        return self._logs_this_step

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        every = getattr(self.trainer, "log_every_n_steps", 1) or 1
        self._logs_this_step = (self.global_step + 1) % every == 0
        self.seed_step_generators(batch_idx)

    def log_objective_estimate(self, estimate: torch.Tensor | None) -> None:
        """Accumulate the epoch's running mean of ``estimate`` (this step's ``f_i(u_i)`` of the batch's rows, or
        a supervised module's loss) and log its mean as ``train/objective`` (``training_estimate_name``).

        The step value is handed to ``self.log`` only on the steps the logger writes (``log_every_n_steps``): a
        ``self.log`` call costs about 0.3 ms on a CPU, as much as the whole state update. The epoch's value,
        ``train/objective_epoch``, is the exact mean over every step and rank (:meth:`on_train_epoch_end`).
        """
        if estimate is None:
            return
        self._objective_sum.add_(estimate.sum())  # in place: `+=` on a module attribute goes through __setattr__
        self._objective_count.add_(estimate.numel())
        if self.logs_this_step:
            self.log(self.training_estimate_name, estimate.mean(), on_step=True, on_epoch=False, prog_bar=True)

    def optimization_step(self, loss: torch.Tensor, add_to_gradient: Callable[[], None] | None = None) -> None:
        """zero_grad → manual_backward → (``add_to_gradient()``) → clip → step → (scheduler).

        ``add_to_gradient`` adds a term known in closed form to the parameters' ``.grad`` in place (e.g. a proximal
        term's ``(w − a)/μ``), cheaper than differentiating it through the graph; it runs after the backward (and
        DDP's gradient averaging: the term must be the same on every rank) and before clipping.
        The learning rate is logged by Lightning's ``LearningRateMonitor`` (in the default trainer config).
        """
        opt = self.optimizers()
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        if add_to_gradient is not None:
            add_to_gradient()
        self.check_finite_step(opt, loss)
        if self.gradient_clip_val:
            self.clip_gradients(
                opt, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm=self.gradient_clip_algorithm
            )
        opt.step()
        scheduler = self.lr_schedulers()
        if scheduler is not None and self.scheduler_interval == "step":
            scheduler.step()

    def check_finite_step(self, optimizer: Any, loss: torch.Tensor | None = None) -> None:
        """Raise ``FloatingPointError`` before ``optimizer`` steps on a non-finite gradient (or ``loss``): the step
        is not taken, so the parameters, the optimizer's state and every checkpoint written so far stay finite.

        Every algorithm passes through here (:meth:`optimization_step`, and the manual steps of double-loop methods)
        right before its optimizer steps. Under DDP the gradients are the all-reduced ones, the same on every rank,
        so every rank stops at the same step; the loss is checked in a single process only (a rank's non-finite loss
        shows in the all-reduced gradient). Under float16 loss scaling (``precision="16-mixed"``) only the loss is
        checked: the scaler skips the steps whose scaled gradient overflows. Costs one host-device synchronization
        per step.
        """
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None) is not None:
            grads = []  # float16 loss scaling: scaled gradients overflow by design and the scaler skips those steps
        checked = grads + ([loss.detach().reshape(-1)] if loss is not None and not distributed.is_distributed() else [])
        if not checked:
            return
        # one number: the sum of the largest |value| of each tensor (NaN or inf when any value is; a sum that
        # overflows means values near the float range, a divergence too)
        peaks = torch._foreach_norm(checked, float("inf"))
        if math.isfinite(torch.stack([p.to(peaks[0].dtype) for p in peaks]).sum().item()):
            return
        what = "gradient" if not all(math.isfinite(p.item()) for p in peaks[: len(grads)]) else "loss"
        lrs = sorted({float(g["lr"]) for g in optimizer.param_groups if "lr" in g})
        finite_params = all(bool(torch.isfinite(p).all()) for p in self.parameters())
        raise FloatingPointError(
            f"{type(self).__name__}: non-finite {what} at global step {self.global_step} (epoch {self.current_epoch}): "
            "the optimizer step was not taken and training stops here (the checkpoints written so far are finite). "
            + (
                f"Likely cause: the learning rate ({', '.join(f'{lr:g}' for lr in lrs) or '?'}) is too large and the "
                "iterates diverged; lower it (or the algorithm's step sizes), or clip gradients (gradient_clip_val)."
                if finite_params else
                "The parameters themselves are non-finite: the model was loaded or initialized with NaN / inf."
            )
            + " Non-finite inputs in the data give the same error."
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse to write a non-finite checkpoint, and add what an exact resume needs beyond the state dicts:
        the run seed of the per-step generators and the epoch's running totals of ``train/objective_epoch`` summed
        over every rank (Lightning writes rank 0's checkpoint; this hook runs on every rank)."""
        for name, value in self._non_finite_entries(checkpoint):
            raise FloatingPointError(
                f"{type(self).__name__}: the checkpoint at global step {self.global_step} would hold non-finite values "
                f"({name}); it is not written (the previous checkpoints are kept). Likely cause: a learning rate too "
                "large for this model and data."
            )
        totals = torch.stack([self._objective_sum, self._objective_count]).detach().clone()
        if distributed.is_distributed():
            torch.distributed.all_reduce(totals)
        checkpoint[RESUME_KEY] = {
            "random_draw_seed": self._random_draw_seed,
            "objective_sum": float(totals[0]),
            "objective_count": float(totals[1]),
            "optimizer_defaults": [_plain_settings(opt.defaults) for opt in self._optimizers_or_none()],
        }

    def _optimizers_or_none(self) -> list[torch.optim.Optimizer]:
        """The trainer's optimizers (none outside a trainer)."""
        return list(getattr(self._trainer, "optimizers", None) or [])

    def _non_finite_entries(self, checkpoint: dict[str, Any]) -> Iterable[tuple[str, torch.Tensor]]:
        """The parameters and optimizer-state tensors of ``checkpoint`` holding NaN or ±inf (buffers may hold NaN
        on purpose: an unvisited row of a per-index state, an anchor not yet set)."""
        state = checkpoint.get("state_dict", {})
        for name, _ in self.named_parameters():
            value = state.get(name)
            if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                yield f"parameter {name}", value
        for k, opt_state in enumerate(checkpoint.get("optimizer_states", [])):
            for param_id, entries in opt_state.get("state", {}).items():
                for key, value in entries.items():
                    if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                        yield f"optimizer {k} state {key!r} of parameter {param_id}", value

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the run seed of the per-step generators and the epoch's running totals (rank 0 holds every rank's
        sums, the other ranks start from zero: the epoch-end all-reduce adds them up)."""
        resume = checkpoint.get(RESUME_KEY)
        if not resume:
            return
        if resume.get("random_draw_seed") is not None:
            self._random_draw_seed = int(resume["random_draw_seed"])
        first = self._trainer is None or self.global_rank == 0
        self._objective_sum.fill_(resume.get("objective_sum", 0.0) if first else 0.0)
        self._objective_count.fill_(resume.get("objective_count", 0.0) if first else 0.0)

    def on_train_epoch_end(self) -> None:
        if self.objective is not None or self.tracks_training_estimate:
            totals = torch.stack([self._objective_sum, self._objective_count])
            if distributed.is_distributed():
                torch.distributed.all_reduce(totals)
            if totals[1] > 0:  # the exact mean over every rank's rows of the epoch
                self.log(f"{self.training_estimate_name}_epoch", totals[0] / totals[1], sync_dist=True)
            self._objective_sum.zero_()
            self._objective_count.zero_()
        scheduler = self.lr_schedulers()
        if scheduler is not None and self.scheduler_interval == "epoch":
            scheduler.step()

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"{type(self).__name__}: the model has no trainable parameters")
        opt = self.optimizer_factory(params) if self.optimizer_factory else self.default_optimizer(params)
        if self.scheduler_factory is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.scheduler_factory(opt)}}

    # ------------------------------------------------------------------ evaluation (never touches the state)
    def build_metrics(self) -> EvaluationMetrics:
        """A fresh set of the module's evaluation metrics, one set per stage in ``self.metrics`` (``"val"``,
        ``"test"``; modules with a second evaluation add groups such as ``"val_anchor"``): the metric of each name of
        :attr:`metric_names` (:func:`~fccolit.metrics.build_metric`). A module with metrics of its own (full-ranking
        NDCG for recommendation) extends it."""
        num_classes = self.data_sizes.get("num_classes")
        return EvaluationMetrics({name: build_metric(name, num_classes) for name in self.metric_names})

    def evaluation_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scores validation, test and predict take of ``batch`` (default: ``self(batch)``)."""
        return self(batch)

    def _eval_step(self, stage: str, batch: dict[str, torch.Tensor]) -> None:
        self.metrics[stage].update_from_batch(self.evaluation_scores(batch), batch)

    def _eval_epoch_end(self, stage: str) -> None:
        self.log_evaluation_metrics(stage)

    def log_evaluation_metrics(self, group: str) -> None:
        """Log the values of ``self.metrics[group]`` as ``{group}/{name}`` (``val/ap``, ``val/ap/<task>``,
        ``val/accuracy/<class>``, ``val/ndcg@10``, ...; each metric says what it logs) and reset them. Collective
        under DDP (the metrics synchronize their states). In the sanity check the metrics are reset unlogged: two
        sanity batches need not hold both classes. With ``evaluation_figures``, rank 0 also draws the curves the
        metrics kept at that computation to TensorBoard (:func:`fccolit.metrics.figures.log_curve_figures`)."""
        metrics = self.metrics[group]
        if not (self._trainer is not None and self._trainer.sanity_checking):
            labels = getattr(getattr(self._trainer, "datamodule", None), "task_names", None)
            # the values are the same on every rank (synchronized by compute): no sync_dist
            for name, value in metrics.named_values(labels).items():
                self.log(f"{group}/{name}", value, prog_bar=group == "val" and name in self.metric_names)
            writer = figure_writer(self._trainer) if self.evaluation_figures else None
            if writer is not None:
                log_curve_figures(writer, group, metrics.named_curves(labels), self.global_step)
        metrics.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.evaluation_scores(batch)
