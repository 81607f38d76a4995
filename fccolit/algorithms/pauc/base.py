r"""What the ranked-range modules share (:class:`RankedRangeModule`), and the double loop of the SBCD-based methods
AGD-SBCD and DCA (:class:`SBCDLoop`)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from fccolit.algorithms.base import FCCOModule
from fccolit.algorithms.double_loop import DoubleLoop, LoopPosition
from fccolit.algorithms.pauc.thresholds import ThresholdTracker
from fccolit.objectives.pauc import PartialAUCRangeSurrogate, RankedRangeBatch, RankedRangeObjective, ranked_range_mean

__all__ = ["RankedRangeModule", "SBCDLoop"]


class RankedRangeModule(LoopPosition, FCCOModule):
    """The base of the ranked-range modules (pAUC on an FPR range, SoRR; Yao, Lin & Yang, NeurIPS 2022).

    What they share: a ranked-range objective (:class:`~fccolit.objectives.pauc.RankedRangeObjective`), the trainable
    parameters as flat vectors, the count of gradient evaluations (``train/grad_evals``; a loop counter,
    :class:`~fccolit.algorithms.double_loop.LoopPosition`, so it resumes), and the evaluation of chosen parameters
    (:meth:`evaluation_parameters`, a second set :meth:`alternative_evaluation`). The problems are those of Yao Yao,
    Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates",
    NeurIPS 2022, arXiv:2203.01505.

    Args:
        model: the scorer ``h_w``; its trainable parameters must share one dtype.
        objective: a :class:`~fccolit.objectives.pauc.RankedRangeObjective` (default: :attr:`default_objective`,
            :class:`~fccolit.objectives.pauc.PartialAUCRangeSurrogate` on FPR [0.05, 0.5]).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`; ``state_dtype`` defaults to float64.

    Raises:
        TypeError: ``objective`` not a :class:`~fccolit.objectives.pauc.RankedRangeObjective`; trainable parameters
            of more than one dtype.
        ValueError: a model without trainable parameters (e.g. a lazily sized one without ``data_sizes``);
            :meth:`make_rows` without ``data_sizes``; in a training step, a batch whose loss matrix is empty (no
            positive or no negative: use a DualSampler-based DataModule).
        KeyError: :meth:`make_rows` with ``data_sizes`` that lack the objective's row count (``num_positives``).

    Example:
        >>> from fccolit.algorithms.pauc import RankedRangeModule
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import SumOfRankedRangeLoss
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = RankedRangeModule(LinearScorer(), data_sizes=data.sizes)
        >>> module.loop, module.num_parameters, module.flat().shape  # 3 weights and a bias, as one vector
        ({'grad_evals': 0}, 4, torch.Size([4]))
        >>> sorr = RankedRangeModule(LinearScorer(), SumOfRankedRangeLoss(), data_sizes=data.sizes)
        >>> module.make_rows(), sorr.make_rows()  # threshold rows: one per training positive; one for SoRR
        (7, 1)
        >>> from torch import nn
        >>> RankedRangeModule(LinearScorer(), objective=nn.MSELoss())
        Traceback (most recent call last):
        ...
        TypeError: RankedRangeModule solves ranked-range problems: ... got MSELoss
    """

    #: the objective used when none is given
    default_objective: type[RankedRangeObjective] = PartialAUCRangeSurrogate
    loop_keys: tuple[str, ...] = ("grad_evals",)

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, **kwargs: Any) -> None:
        objective = objective if objective is not None else self.default_objective()
        if not isinstance(objective, RankedRangeObjective):
            raise TypeError(
                f"{type(self).__name__} solves ranked-range problems: pass a fccolit.objectives.pauc objective "
                f"(PartialAUCRangeSurrogate, SumOfRankedRangeLoss), got {type(objective).__name__}"
            )
        kwargs.setdefault("state_dtype", "float64")
        self.init_loop()
        super().__init__(model, objective, **kwargs)

    # ------------------------------------------------------------------ state
    def configure_state(self) -> None:
        self.objective.bind_sizes(self.data_sizes)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError(f"{type(self).__name__}: the model has no trainable parameters")
        dtypes = {p.dtype for _, p in named}
        if len(dtypes) != 1:
            raise TypeError(f"{type(self).__name__} keeps flat copies of the parameters and needs one dtype, got {dtypes}")
        self._param_names = [n for n, _ in named]
        self._param_shapes = [p.shape for _, p in named]
        self._param_numels = [p.numel() for _, p in named]
        self.num_parameters = sum(self._param_numels)

    def make_rows(self) -> int:
        if not self.data_sizes:
            raise ValueError(
                f"{type(self).__name__} needs data_sizes to size its thresholds: run it through the fccolit CLI "
                "(which links them from the DataModule) or pass data_sizes=datamodule.sizes."
            )
        return self.objective.num_rows(self.data_sizes)

    def flat_buffer(self, name: str, fill: float) -> None:
        """Register a persistent ``[d]`` buffer (d = trainable parameters) in the parameters' dtype."""
        dtype = next(p for p in self.model.parameters() if p.requires_grad).dtype
        self.register_buffer(name, torch.full((self.num_parameters,), fill, dtype=dtype))

    # ------------------------------------------------------------------ the parameters as one vector
    def trainable(self) -> list[nn.Parameter]:
        params = dict(self.model.named_parameters())
        return [params[n] for n in self._param_names]

    def flat(self) -> torch.Tensor:
        """``[d]`` the current (live) trainable parameters."""
        return torch.cat([p.detach().reshape(-1) for p in self.trainable()])

    @torch.no_grad()
    def assign_(self, vector: torch.Tensor) -> None:
        """Set the live parameters to ``vector``."""
        for p, part in zip(self.trainable(), vector.split(self._param_numels)):
            p.copy_(part.view_as(p))

    def as_parameters(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """``vector`` as a ``{name: tensor}`` dict for :func:`torch.func.functional_call`."""
        return {n: part.view(s) for n, s, part in zip(self._param_names, self._param_shapes, vector.split(self._param_numels))}

    def pieces(self, vector: torch.Tensor) -> list[torch.Tensor]:
        """``vector`` split into views shaped like the trainable parameters."""
        return [part.view(s) for s, part in zip(self._param_shapes, vector.split(self._param_numels))]

    def buffer_pieces(self, name: str) -> list[torch.Tensor]:
        """:meth:`pieces` of the flat buffer ``name``, made once per buffer tensor (every step reads them; a buffer
        that ``.to()`` or ``load_state_dict(assign=True)`` replaced gets new views)."""
        buffer = getattr(self, name)
        cache = self.__dict__.setdefault("_buffer_pieces", {})
        cached = cache.get(name)
        if cached is None or cached[0] is not buffer or cached[1][0].data_ptr() != buffer.data_ptr():
            cached = cache[name] = (buffer, self.pieces(buffer))
        return cached[1]

    @torch.no_grad()
    def add_linear_gradient(self, vector: torch.Tensor, weight: float) -> None:
        """``.grad += weight · vector``: the gradient of ``weight · ⟨vector, v⟩`` w.r.t. the live parameters ``v``,
        added in closed form (fused per parameter, no graph); for :meth:`optimization_step`'s ``add_to_gradient``."""
        params = self.trainable()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        torch._foreach_add_([p.grad for p in params], self.pieces(vector), alpha=weight)

    # ------------------------------------------------------------------ the step pieces
    def set_learning_rate(self, lr: float) -> None:
        opt = self.optimizers()
        for group in getattr(opt, "optimizer", opt).param_groups:
            group["lr"] = lr

    def ranked_batch(self, batch: dict[str, torch.Tensor]) -> tuple[RankedRangeBatch, bool, int]:
        """The global batch's loss matrix, whether it is identical on every rank, and the global batch size."""
        scores, obj_batch, synced = self.objective_inputs(self(batch), batch)
        rr = self.objective.losses(scores, obj_batch)
        if rr.index.numel() == 0 or rr.losses.shape[-1] == 0:
            raise ValueError(
                f"{type(self).__name__}: a training batch gave an empty loss matrix ({tuple(rr.losses.shape)}): pAUC "
                "needs positives and negatives in every batch (use a DualSampler-based DataModule with num_positives "
                ">= the number of devices)."
            )
        return rr, synced, int(scores.shape[0])

    def masked_loss(
        self, tracker: ThresholdTracker, rr: RankedRangeBatch, share: float, init: str | float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L, p̂ [R], λ [R])``: ``∇L = ĝ``, the gradient of the mean over the batch's ``R × J`` entries of
        ``w_j s_rj 1(s_rj > λ_r)`` (Algorithm 1, step 5, divided by ``N₊N₋``), and ``p̂_r`` the (weighted) share of
        row r's entries above its threshold (step 7: ``G_λ = N₋(l/N₋ − p̂)``)."""
        lam, detached = tracker.read(rr, share, init)
        above = detached > lam.unsqueeze(-1)
        weight = above.to(rr.losses.dtype)
        exceed = above.to(lam.dtype)
        if rr.weights is not None:
            weight = weight * rr.weights.to(weight.dtype)
            exceed = exceed * rr.weights.to(lam.dtype)
        return (rr.losses * weight).mean(), exceed.mean(-1), lam

    def count(self, evaluations: int) -> None:
        self.loop["grad_evals"] += int(evaluations)

    def log_training_estimate(self, rr: RankedRangeBatch, **counters: float) -> None:
        """Log the batch's ranked-range mean (``train/objective``, the estimate of objective (3) at the live
        parameters, not the surrogate) and the loop counters (``train/<key>``)."""
        with torch.no_grad():
            estimate = ranked_range_mean(rr.losses.detach(), self.objective.alpha, self.objective.beta, rr.weights,
                                         rr.column_scores)
        self.log_objective_estimate(estimate)
        self.log_loop(**counters, grad_evals=self.loop["grad_evals"])

    # ------------------------------------------------------------------ evaluation
    def evaluation_parameters(self) -> dict[str, torch.Tensor] | None:
        """The parameters validation / test / predict evaluate (None: the live parameters)."""
        return None

    def alternative_evaluation(self) -> tuple[str, dict[str, torch.Tensor] | None] | None:
        """A second set of parameters also evaluated, as ``(tag, parameters)`` (logged as ``{stage}_{tag}/...``)."""
        return None

    def evaluation_scores(self, batch: dict[str, torch.Tensor], parameters: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Scores ``[B]`` of ``batch`` under ``parameters`` (default: :meth:`evaluation_parameters`)."""
        parameters = self.evaluation_parameters() if parameters is None else parameters
        if parameters is None:
            return self(batch)
        return torch.func.functional_call(self.model, parameters, (batch[self.input_key],))

    def _eval_step(self, stage: str, batch: dict[str, torch.Tensor]) -> None:
        super()._eval_step(stage, batch)
        alternative = self.alternative_evaluation()
        if alternative is not None:  # its metrics are the group {stage}_{tag} of self.metrics
            tag, parameters = alternative
            scores = self(batch) if parameters is None else self.evaluation_scores(batch, parameters)
            self.metrics[f"{stage}_{tag}"].update_from_batch(scores, batch)

    def _eval_epoch_end(self, stage: str) -> None:
        super()._eval_epoch_end(stage)
        alternative = self.alternative_evaluation()
        if alternative is not None:
            self.log_evaluation_metrics(f"{stage}_{alternative[0]}")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.evaluation_scores(batch)

    def log_loop(self, always: bool = False, **values: float) -> None:
        """Log loop counters as ``train/<key>`` on the steps the logger writes (``log_every_n_steps``): a
        ``self.log`` call costs about a millisecond, as much as a linear model's whole step."""
        if always or self.logs_this_step:
            for key, value in values.items():
                self.log(f"train/{key}", float(value), on_step=True, on_epoch=False)


class SBCDLoop(DoubleLoop, RankedRangeModule):
    r"""The double loop of SBCD steps around an anchor, shared by AGD-SBCD and DCA (Yao, Lin & Yang, NeurIPS 2022).

    The methods built on stochastic block coordinate descent (SBCD) of Yao Yao, Qihang Lin and Tianbao Yang,
    "Large-scale Optimization of Partial AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505:
    AGD-SBCD (:class:`~fccolit.algorithms.pauc.PAUCRange`, :class:`~fccolit.algorithms.pauc.SoRR`) and DCA
    (:class:`~fccolit.algorithms.pauc.DCA`). A base to build on (subclasses define :attr:`proximal_nu` and
    ``training_step``), not a module to train.

    Outer step k takes ``T_k = ⌈C (k+1)^p⌉`` SBCD steps, one per training batch (:meth:`sbcd_step`), on a
    subproblem around the anchor w (buffer ``anchor``, a flat vector; the live model parameters are the inner
    iterate v). One SBCD step, with ``ĝ`` the gradient of the mean over the batch's ``I × J`` entries of
    ``s_ij · 1(s_ij > λ_i)`` and ``p̂_i`` the share of the batch's negatives with ``s_ij > λ_i``::

        v   ← argmin_x ⟨ĝ + b, x⟩ + ‖x − w‖²/(2ν) + ‖x − v‖²/(2c_k)     (the closed form, ProximalStep)
        λ_i ← λ_i + θ'_k (p̂_i − l/N₋)                                  (a stochastic quantile tracker)

    with ``c_k = c/(k+1)`` and ``θ'_k`` likewise (``step_decay``), ν = :attr:`proximal_nu` and ``b`` what the
    method adds to the gradient (DCA: −ξ). The v step is the module's one optimizer,
    :class:`~fccolit.algorithms.double_loop.ProximalStep`, whose learning rate the module sets at every step: no
    other optimizer and no scheduler are accepted. The loop position (``outer_step``, ``inner_step``, and the
    gradient evaluations ``grad_evals``) is in the checkpoint's ``_extra_state``.

    Args:
        model, objective: see :class:`RankedRangeModule`.
        lr: c, the step on ``ĝ`` (scale-free: η_t = c/((k+1)N₊N₋)).
        lambda_lr: c of the threshold step θ_t = c/((k+1)N₋) (None: ``lr``, as in the paper).
        inner_steps: C in ``T_k = C(k+1)^p``.
        inner_growth: p (0 gives a constant T).
        step_decay: ``c_k = c/(k+1)`` (the paper's) or a constant c.
        lambda_init: ``"batch"`` or a number (see :class:`~fccolit.algorithms.pauc.ThresholdTracker`).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`.

    Raises:
        ValueError: ``lr`` not a finite number >= 0; ``lambda_lr`` neither None nor a finite number >= 0;
            ``inner_steps`` < 1; ``inner_growth`` < 0; ``lambda_init`` neither ``"batch"`` nor a number; an
            ``optimizer`` or a ``scheduler`` given (the module sets its own closed-form step and its learning rate);
            and :class:`RankedRangeModule`'s.
        TypeError: as :class:`RankedRangeModule`.
        NotImplementedError: :attr:`proximal_nu` (read by ``configure_optimizers``) of a subclass that does not
            define it.

    Example:
        The schedule and the argument checks, through its subclass :class:`~fccolit.algorithms.pauc.DCA`:

        >>> from fccolit.algorithms.pauc import DCA, SBCDLoop
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = DCA(LinearScorer(), data_sizes=data.sizes, lr=2.0, inner_steps=10)
        >>> isinstance(module, SBCDLoop), module.loop
        (True, {'grad_evals': 0, 'outer_step': 0, 'inner_step': 0})
        >>> [module.inner_steps_at(k) for k in range(3)], module.step_sizes(1)  # T_k = 10 (k+1)², (c_k, θ'_k)
        ([10, 40, 90], (1.0, 1.0))
        >>> type(module.configure_optimizers()).__name__  # the closed-form v step
        'ProximalStep'
        >>> DCA(LinearScorer(), data_sizes=data.sizes, inner_steps=0)
        Traceback (most recent call last):
        ...
        ValueError: inner_steps (C of T_k = C(k+1)^p) must be >= 1, got 0
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    loop_keys: tuple[str, ...] = ("grad_evals", "outer_step", "inner_step")
    #: an upper bound on T_k (None: the paper's unbounded ``C(k+1)^p``)
    max_inner_steps: int | None = None

    def __init__(
        self,
        model: nn.Module,
        objective: RankedRangeObjective | None,
        lr: float,
        lambda_lr: float | None,
        inner_steps: int,
        inner_growth: float,
        step_decay: bool,
        lambda_init: str | float,
        **kwargs: Any,
    ) -> None:
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(f"lr (c) must be a finite number >= 0, got {lr}")
        if lambda_lr is not None and not (math.isfinite(lambda_lr) and lambda_lr >= 0.0):
            raise ValueError(f"lambda_lr (c of θ) must be a finite number >= 0 or None, got {lambda_lr}")
        if int(inner_steps) < 1:
            raise ValueError(f"inner_steps (C of T_k = C(k+1)^p) must be >= 1, got {inner_steps}")
        if not inner_growth >= 0.0:
            raise ValueError(f"inner_growth (p of T_k = C(k+1)^p) must be >= 0, got {inner_growth}")
        if lambda_init != "batch" and not isinstance(lambda_init, (int, float)):
            raise ValueError(f"lambda_init must be 'batch' or a number, got {lambda_init!r}")
        if kwargs.get("scheduler") is not None:
            raise ValueError(
                f"{type(self).__name__} sets the learning rate of every step itself (from lr and the outer step); "
                "a scheduler would fight it: remove the scheduler and use step_decay / lr instead."
            )
        if kwargs.get("optimizer") is not None:
            raise ValueError(
                f"{type(self).__name__} takes its inner step in closed form (the proximal step of its subproblem, "
                "fccolit.algorithms.double_loop.ProximalStep): remove the optimizer and set lr instead."
            )
        self.lr = float(lr)
        self.lambda_lr = float(lr if lambda_lr is None else lambda_lr)
        self.inner_steps, self.inner_growth, self.step_decay = int(inner_steps), float(inner_growth), bool(step_decay)
        self.lambda_init = lambda_init
        super().__init__(model, objective, **kwargs)

    @property
    def proximal_nu(self) -> float:
        """ν of the v step's proximal term ``‖x − w‖²/(2ν)`` (``math.inf``: none)."""
        raise NotImplementedError

    def configure_state(self) -> None:
        super().configure_state()
        self.flat_buffer("anchor", math.nan)  # w; NaN until the first training step copies the model

    def configure_optimizers(self) -> Any:
        return self.proximal_step(self.lr, self.proximal_nu, running_sum=self.running_sum_tensors())

    def running_sum_tensors(self) -> Callable[[], list[torch.Tensor]] | None:
        """What the v step adds the iterate before it to (one tensor per parameter), inside the optimizer step:
        None (the default), or a callable returning them (AGD-SBCD: its running sum of the iterates)."""
        return None

    # ------------------------------------------------------------------ the anchor (DoubleLoop)
    def loop_parameters(self) -> list[nn.Parameter]:
        return self.trainable()

    def anchor_tensors(self) -> list[torch.Tensor]:
        return self.buffer_pieces("anchor")

    def anchor_is_set(self) -> bool:
        return not bool(torch.isnan(self.anchor[:1]).any())

    @torch.no_grad()
    def set_anchor_(self) -> None:
        self.anchor.copy_(self.flat())

    # ------------------------------------------------------------------ schedule
    def inner_steps_at(self, outer: int) -> int:
        """T_k (at most ``max_inner_steps`` when it is set)."""
        steps = max(1, math.ceil(self.inner_steps * (outer + 1) ** self.inner_growth))
        return steps if self.max_inner_steps is None else min(steps, self.max_inner_steps)

    def step_sizes(self, outer: int) -> tuple[float, float]:
        """``(c_k, θ'_k)``: the v and λ step sizes at outer step k (scale-free)."""
        decay = 1.0 / (outer + 1) if self.step_decay else 1.0
        return self.lr * decay, self.lambda_lr * decay

    # ------------------------------------------------------------------ one SBCD step
    def before_v_step(self, tracker: ThresholdTracker, index: torch.Tensor, lam: torch.Tensor) -> None:
        """Called with the batch's rows and their ``λ^{(t)}`` before the step changes ``(v, λ)`` (default: nothing;
        AGD-SBCD adds them to its running sums)."""

    def sbcd_step(
        self, batch: dict[str, torch.Tensor], tracker: ThresholdTracker, share: float,
        add_to_gradient: Callable[[], None] | None = None,
    ) -> None:
        """One SBCD step on ``batch`` with the thresholds ``tracker`` at level ``share`` (see the class docstring);
        ``add_to_gradient`` adds ``b`` to ``ĝ`` in place. Counts and logs; the caller advances the loop."""
        outer = self.loop["outer_step"]
        c_k, theta_k = self.step_sizes(outer)
        rr, synced, size = self.ranked_batch(batch)
        loss, exceed, lam = self.masked_loss(tracker, rr, share, self.lambda_init)
        self.before_v_step(tracker, rr.index, lam)
        self.set_learning_rate(c_k)
        self.optimization_step(loss, add_to_gradient=add_to_gradient)
        tracker.update(rr.index, lam, exceed, share, theta_k, synced)
        self.count(size)
        self.log_training_estimate(rr, outer_step=outer)
