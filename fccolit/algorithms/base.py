"""The LightningModule every FCCO algorithm derives from, and its step template.

One training step of every algorithm in fccolit is (:meth:`FCCOModule.compositional_loss`)::

    scores = model(batch)                                    # forward
    inner  = inner_estimates(scores, batch)                  # ĝ_i(w) for the outer indices i of the batch
    record = update_state(inner)                             # the algorithm's rule: u_i ← ... (EMA, MSVR, log domain)
    w, v   = estimator_weights(u, inner)                     # per row: weights ∇f_i(u_i) on values ĝ_i(w)
    loss   = mean_i Σ_k stop_grad(w_ik) v_ik                 # its gradient is the compositional estimator
    manual_backward(loss); clip; optimizer.step(); scheduler.step()

and ``plug_in_estimate(u, inner)`` gives ``f_i(u_i)``, logged as ``train/objective`` (the loss's value means nothing).
Those four hooks are the whole extension contract: a new algorithm overrides the ones its paper changes (see
``examples/new_algorithm.py``). Inside a hook, :attr:`FCCOModule.tracked` is the FCCO sum being stepped (its objective
and state) and :attr:`FCCOModule.synced` says whether the batch is the global one (DDP).

The other concerns live in their own modules: DDP gathering of the global batch (:mod:`~fccolit.algorithms.gather`),
the non-finite guards (:mod:`~fccolit.algorithms.guards`), per-step seeding and the resume entries
(:mod:`~fccolit.algorithms.run_state`) and evaluation (:mod:`~fccolit.algorithms.evaluation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Sequence

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn

from fccolit import distributed
from fccolit.algorithms.evaluation import Evaluation
from fccolit.algorithms.gather import global_batch
from fccolit.algorithms.guards import FiniteSteps, naming_the_step
from fccolit.algorithms.run_state import RunState
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.state import IndexedState, InitialState, StateUpdate

__all__ = ["FCCOModule", "TrackedSum", "OptimizerFactory", "SchedulerFactory"]

OptimizerFactory = OptimizerCallable
SchedulerFactory = LRSchedulerCallable


@dataclass
class TrackedSum:
    """One FCCO sum ``(1/n) Σ_i f_i(g_i(w))`` of a step: its objective, its per-index state, how its rows reduce.

    The objective gives ``ĝ_i`` and ``f_i``, the state tracks ``u_i ≈ g_i(w)``, and ``reduce`` makes the batch's
    per-row terms ``[R]`` its share of the loss.

    Args:
        objective: the sum's objective.
        state: its per-index state (rows: the objective's outer indices).
        reduce: ``terms [R] → scalar`` (default: the mean over the batch's rows; SONEX's ``outer_normalization``
            ``"fixed"`` divides the sum by a fixed m instead).

    Example:
        >>> import torch
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> from fccolit.state import IndexedState
        >>> tracked = TrackedSum(AveragePrecisionSurrogate(), IndexedState(2, 2, name="u"))
        >>> tracked.reduce(torch.tensor([1.0, 3.0]))  # the batch's share of the loss: the mean of its rows' terms
        tensor(2.)
    """

    objective: FCCOObjective
    state: IndexedState
    reduce: Callable[[torch.Tensor], torch.Tensor] = torch.mean


class FCCOModule(FiniteSteps, RunState, Evaluation, LightningModule):
    """Base LightningModule of the FCCO algorithms (manual optimization): the step template and its four hooks.

    Hooks (override the ones your algorithm changes; each runs once per tracked sum and step, in this order):

    * :meth:`inner_estimates` ``(scores, batch) → InnerBatch``: the batch's outer indices and ``ĝ_i(w)``.
    * :meth:`update_state` ``(inner) → StateUpdate``: the state rule on the batch's rows.
    * :meth:`estimator_weights` ``(u, inner) → (w, v)``: per row ``[R, k]`` each; the loss holds
      ``Σ_k stop_grad(w_ik) v_ik``, so its gradient is the estimator.
    * :meth:`plug_in_estimate` ``(u, inner) → [R]``: ``f_i(u_i)`` at the updated state, for ``train/objective``.

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
            loggers only).

    Raises:
        ValueError: ``scheduler_interval`` other than ``"step"`` / ``"epoch"``; ``initial_state`` other than
            ``"first_estimate"`` for a state with its own first-visit rule (or no state); a state to size without
            ``data_sizes``; in a step, a multi-task batch (a ``task`` field) for an objective without
            ``multi_task`` or a model without one output per task; from ``configure_optimizers``, a model without
            trainable parameters.
        IndexError: a batch's outer index beyond the state's rows (``data_sizes`` of other data).
        FloatingPointError: a non-finite inner estimate, gradient or loss in a training step (the step is not taken).

    Attributes read by the default state rule (set by each algorithm's constructor, not hooks):
        ema_weight: γ, the weight of the new inner estimate in the moving average (1: no memory).
        correction_weight: γ', the weight of the MSVR correction ``ĝ_i(w_t) − ĝ_i(w_{t−1})`` (0: none).
        u_for_gradient: which u enters ∇f: ``"previous"`` (u before this step's update, as SOX is analysed) or
            ``"fresh"`` (after it).

    Example:
        A new algorithm overrides the hooks its paper changes; here ``update_state``, with the plug-in rule
        ``u_i := ĝ_i`` (no memory), on an AP problem:

        >>> import torch
        >>> from fccolit.algorithms import SOX
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> class PlugIn(SOX):
        ...     def update_state(self, inner):
        ...         return self.tracked.state.update(inner.index, inner.value, ema_weight=1.0, synced=self.synced)
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> module = PlugIn(LinearScorer(), AveragePrecisionSurrogate(),
        ...                 data_sizes={"num_samples": 6, "num_positives": 2, "num_features": 3})
        >>> [t.state.name for t in module.tracked_sums]
        ['u']
        >>> loss, f_u = module.compositional_loss(module(batch), batch)  # the template calls the four hooks
        >>> loss.shape, f_u.shape  # the surrogate scalar (its gradient is the estimator), f_i(u_i) per row
        (torch.Size([]), torch.Size([2]))
        >>> torch.equal(module.state.values(), AveragePrecisionSurrogate().inner(module(batch), batch).value.detach())
        True
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    input_key = "x"
    default_metrics: tuple[str, ...] = ()  # used when there is no objective to ask
    tracks_training_estimate = False  # log the epoch mean even without an objective (Supervised's loss)

    ema_weight: float = 1.0
    correction_weight: float = 0.0
    u_for_gradient: Literal["previous", "fresh"] = "previous"

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective | None = None,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: Literal["step", "epoch"] = "step",
        data_sizes: dict[str, int] | None = None,
        metrics: Sequence[str] | None = None,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
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
        self.init_run_state()
        self._step_delegate: tuple[FCCOModule, str] | None = None  # see delegate_step
        self._synced = False  # see synced
        self._tracked: TrackedSum | None = None  # see tracked
        self.adds_direct_term = False  # F = g_0 + (1/n) Σ f_i(g_i): add the objective's direct(scores, batch)
        self.configure_state()
        state = getattr(self, "state", None)
        if initial_state != "first_estimate" and (not isinstance(state, IndexedState) or state.initial_value is None):
            raise ValueError(
                f"{type(self).__name__} does not take initial_state={initial_state!r}: its state has its own first-visit "
                "rule (only 'first_estimate' applies)"
            )
        self.save_hyperparameters(ignore=["model", "objective", "loss", "optimizer", "scheduler"])

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every algorithm's ``training_step`` names the step in the ``FloatingPointError`` it raises (a state's
        or an objective's check of non-finite values, which knows the rows but not the step)."""
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("training_step")
        if step is not None and not getattr(step, "names_the_step", False):
            cls.training_step = naming_the_step(step)

    # ------------------------------------------------------------------ configuration
    def configure_state(self) -> None:
        """Create the per-index state. Default: one :class:`IndexedState` ``state`` sized by the objective, started
        as ``initial_state`` says. A module with per-index state sets ``state``; the sums the step tracks are
        :attr:`tracked_sums` (default: the objective on ``state``)."""
        if self.objective is not None:
            self.state = self.make_state(self.objective.inner_dim, name="u", initial=self.initial_state)

    @property
    def tracked_sums(self) -> list[TrackedSum]:
        """The FCCO sums the step updates and differentiates, in order: the objective on ``state`` (and, for SONEX
        with a tracked direct term, that term on its own state)."""
        state = getattr(self, "state", None)
        return [TrackedSum(self.objective, state)] if isinstance(state, IndexedState) else []

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

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"{type(self).__name__}: the model has no trainable parameters")
        opt = self.optimizer_factory(params) if self.optimizer_factory else self.default_optimizer(params)
        if self.scheduler_factory is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self.scheduler_factory(opt)}}

    # ------------------------------------------------------------------ forward
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
                "such as AveragePrecisionSurrogate"
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
        """``(scores, batch, synced)`` as the objective sees them: the global batch under DDP when it pools the
        batch (:func:`~fccolit.algorithms.gather.global_batch`)."""
        return global_batch(self.objective, scores, batch)

    # ------------------------------------------------------------------ the step template
    @property
    def tracked(self) -> TrackedSum:
        """The FCCO sum the hooks are working on (its ``objective`` and ``state``): set by the step template around
        each hook call; outside a step, the first of :attr:`tracked_sums`."""
        return self._tracked if self._tracked is not None else self.tracked_sums[0]

    @property
    def synced(self) -> bool:
        """Whether this step's batch is the global batch, identical on every rank (an objective that pools the batch,
        gathered under DDP), so a state update needs no all-gather; False for a rank's own batch."""
        return self._synced

    def compositional_loss(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], gradient_batch: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The FCCO step: the scalar whose gradient is the algorithm's estimator, and ``f_i(u_i)`` of the batch's rows
        ``[R]`` (the plug-in estimate of F, for logging; None when the batch has no outer index). Updates the state.

        For each tracked sum (:attr:`tracked_sums`): :meth:`inner_estimates` → :meth:`update_state` →
        :meth:`estimator_weights` → :meth:`plug_in_estimate`. The first sum's rows give the estimate; a further
        sum (SONEX's tracked direct term) adds its mean, as a direct term ``g_0``  adds its
        mini-batch value (``adds_direct_term``: the objective's ``direct(scores, batch)``, e.g. a constrained problem's
        objective).

        Args:
            scores: the model's scores of ``batch`` ``[B]`` (with gradient, unless ``gradient_batch`` is given).
            batch: the batch whose estimates update the state.
            gradient_batch: an independent batch for the gradient (ALEXR2's ``B̃``): its scores are taken after the
                state update, and ``v_i = ĝ_i(w; B̃)`` of the rows the state batch updated enters the loss with the
                updated ``u_i``. None: the gradient uses ``batch`` itself.

        Raises:
            FloatingPointError: a non-finite estimate (the state's check names the rows).
        """
        scores, batch, self._synced = global_batch(self.objective, scores, batch)
        updates = []
        for tracked in self.tracked_sums:
            self._tracked = tracked
            with torch.set_grad_enabled(torch.is_grad_enabled() and gradient_batch is None):
                inner = self.inner_estimates(scores, batch)
            empty = inner.index.numel() == 0
            # a rank without rows still joins the state's all-gather under DDP, which brings the other ranks' rows
            record = None if empty and (self._synced or not distributed.is_distributed()) else self.update_state(inner)
            updates.append((tracked, inner, record))
        if gradient_batch is not None:
            scores, batch, _ = global_batch(self.objective, self(gradient_batch), gradient_batch)
        loss = estimate = None
        for k, (tracked, inner, record) in enumerate(updates):
            self._tracked = tracked
            terms, values = self._terms_and_estimate(inner, record, None if gradient_batch is None else (scores, batch))
            if terms is not None:
                share = tracked.reduce(terms)
                loss = share if loss is None else loss + share
            if k == 0:
                estimate = values
            elif values is not None and estimate is not None:
                estimate = estimate + values.mean()
        self._tracked = None
        if loss is None:
            loss = scores.sum() * 0.0  # no row: a zero with the graph, so every rank's backward matches
        if self.adds_direct_term:
            direct = self.objective.direct(scores, batch)
            if direct is not None:
                loss = direct + loss
                estimate = None if estimate is None else estimate + direct.detach()
        return loss, estimate

    def _terms_and_estimate(
        self, inner: InnerBatch, record: StateUpdate | None,
        gradient: tuple[torch.Tensor, dict[str, torch.Tensor]] | None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One tracked sum's per-row terms ``⟨stop_grad(w_i), v_i⟩`` ``[R]`` and plug-in ``f_i(u_i)`` ``[R]`` at the
        updated u; None for either without rows."""
        if record is None or inner.index.numel() == 0:
            return None, None
        state = self.tracked.state
        self.log_rows_at_bounds(state, record.current)
        if gradient is None:
            differentiable = inner
            u = record.current if self.u_for_gradient == "fresh" else record.previous
        else:  # ĝ_i(w; B̃) of the rows the state batch updated, with their updated u
            differentiable = self.tracked.objective.inner(*gradient)
            differentiable = differentiable.select(torch.isin(differentiable.index, inner.index).nonzero().flatten())
            u = state.read(differentiable.index)
        terms = None
        if differentiable.index.numel() > 0:
            terms = self.surrogate_terms(*self.estimator_weights(u, differentiable))
        with torch.no_grad():
            estimate = self.plug_in_estimate(record.current, inner)
        return terms, estimate

    @staticmethod
    def surrogate_terms(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Per row ``Σ_k stop_grad(w_ik) · v_ik`` ``[R]`` from weights and differentiable values ``[R, k]``: the terms
        whose gradient is the compositional estimator ``∇ĝ_i(w) ∇f_i(u_i)`` (with w = ∇f_i(u_i), v = ĝ_i(w)); their
        value means nothing. Every algorithm's loss is formed here."""
        return (weights.detach().to(values.dtype) * values).sum(-1)

    # ------------------------------------------------------------------ the four hooks
    def inner_estimates(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """Hook, first of the step: the outer indices of the batch and their estimates ``ĝ_i(w)`` (``value``
        ``[R, d']``, differentiable in the scores) with the per-row context ``f_i`` needs. Runs once per tracked sum
        and step, before the state update. Default: ``self.tracked.objective.inner(scores, batch)``."""
        return self.tracked.objective.inner(scores, batch)

    def update_state(self, inner: InnerBatch) -> StateUpdate:
        """Hook, second: the state rule on the batch's rows; returns u before and after (``[R, d']`` each). Default:
        the moving average with the MSVR correction ``u_i ← Π_Ω[(1 − γ) u_i + γ ĝ_i + γ' (ĝ_i − ĝ_i(w_{t−1}))]``
        (:meth:`IndexedState.update`; γ = ``ema_weight``, γ' = ``correction_weight``)."""
        return self.tracked.state.update(
            inner.index, inner.value, ema_weight=self.ema_weight, correction=inner.correction,
            correction_weight=self.correction_weight, synced=self.synced,
        )

    def estimator_weights(self, u: torch.Tensor, inner: InnerBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook, third: per row ``(w_i, v_i)`` ``[R, k]`` each; the step's loss holds ``Σ_k stop_grad(w_ik) v_ik``.
        Runs after the update, with ``u`` as ``u_for_gradient`` says. Default ``(∇f_i(u_i), ĝ_i(w))``."""
        return self.tracked.objective.outer_grad(u, inner.context), inner.value

    def plug_in_estimate(self, u: torch.Tensor, inner: InnerBatch) -> torch.Tensor:
        """Hook, fourth: ``f_i(u_i)`` per row ``[R]`` at the updated state (``train/objective``; no gradient)."""
        return self.tracked.objective.outer(u, inner.context)

    # ------------------------------------------------------------------ the optimizer step
    def optimization_step(
        self, loss: torch.Tensor, optimizer: Any = None, add_to_gradient: Callable[[], None] | None = None,
        step_scheduler: bool = True,
    ) -> None:
        """zero_grad → manual_backward → (``add_to_gradient()``) → non-finite check → clip → step → (scheduler).

        Args:
            loss: the step's loss.
            optimizer: the (Lightning-wrapped) optimizer to step (default: the module's only one).
            add_to_gradient: adds a term known in closed form to the parameters' ``.grad`` in place (e.g. a proximal
                term's ``(w − a)/μ``), after the backward (and DDP's averaging: the term must be the same on every
                rank) and before clipping.
            step_scheduler: step the ``"step"``-interval scheduler after the optimizer (ALEXR2 steps it on its outer
                steps instead).

        Raises:
            FloatingPointError: a non-finite gradient or loss (:meth:`check_finite_step`); the step is not taken.
        """
        opt = optimizer if optimizer is not None else self.optimizers()
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
        if step_scheduler and scheduler is not None and self.scheduler_interval == "step":
            scheduler.step()

    @naming_the_step
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        algorithm, log_name = self._step_delegate or (self, None)
        loss, estimate = algorithm.compositional_loss(self(batch), batch)
        self.optimization_step(loss)
        if log_name is None:
            self.log_objective_estimate(estimate)
        elif estimate is not None and self.logs_this_step:
            self.log(log_name, estimate.mean(), on_step=True, on_epoch=False, prog_bar=True)

    def delegate_step(self, algorithm: "FCCOModule | None", log_name: str = "warmup/objective") -> None:
        """Take the training steps with ``algorithm``'s FCCO step (its objective, state and hooks; this module's model,
        optimizer and schedule) until called with None. Its plug-in estimate is logged as ``log_name`` on the
        logger's steps; ``train/objective`` stays this module's. Used by :class:`~fccolit.callbacks.WarmUp`."""
        self._step_delegate = (algorithm, log_name) if algorithm is not None else None

    @property
    def step_delegate(self) -> "FCCOModule | None":
        """The algorithm whose step is taken instead of this module's (:meth:`delegate_step`), or None."""
        return None if self._step_delegate is None else self._step_delegate[0]

    # ------------------------------------------------------------------ logging and epochs
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

    def on_fit_start(self) -> None:
        distributed.reset_row_capacity()  # every rank pads the state's all-gather alike from here on
        super().on_fit_start()

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        scheduler = self.lr_schedulers()
        if scheduler is not None and self.scheduler_interval == "epoch":
            scheduler.step()
