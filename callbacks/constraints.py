"""Constraint values on full data, reduced exactly across ranks, logged to TensorBoard.

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504 (Prop. 5.2: the KKT multipliers of the penalty method).
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Sequence

import torch
import torchmetrics
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor
from torch.utils.data import DataLoader

from fccolit.data import identity_collate
from fccolit.metrics.figures import figure_writer, log_constraint_figure
from fccolit.samplers import SequentialShardSampler

__all__ = [
    "ConstraintViolationLogger", "ConstraintStatistics", "constraint_values", "constraint_means", "kkt_multipliers",
    "accumulate_constraint_statistics",
]


def _objective(pl_module: LightningModule):
    objective = getattr(pl_module, "objective", None)
    if objective is None or not hasattr(objective, "constraint_statistics"):
        raise TypeError(
            f"ConstraintViolationLogger needs a module whose objective has constraint_statistics() (a "
            f"ConstrainedObjective, e.g. ROCFairnessAUCObjective); {type(pl_module).__name__}.objective is "
            f"{type(objective).__name__}"
        )
    return objective


def accumulate_constraint_statistics(
    pl_module: LightningModule, batches: Iterable[dict[str, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum the objective's ``(sums [m, d'], counts [m, d'])`` over ``batches`` in float64 (this rank only)."""
    objective = _objective(pl_module)
    total_sums = total_counts = None
    with torch.no_grad():
        for batch in batches:
            batch = {k: v.to(pl_module.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            sums, counts = objective.constraint_statistics(pl_module(batch), batch)
            sums, counts = sums.detach().double(), counts.detach().double()
            total_sums = sums if total_sums is None else total_sums + sums
            total_counts = counts if total_counts is None else total_counts + counts
    return total_sums, total_counts


def constraint_values(
    pl_module: LightningModule, sums: torch.Tensor | None, counts: torch.Tensor | None
) -> torch.Tensor:
    """``h_i`` on the data whose statistics are ``sums`` / ``counts``, summed over every rank first (exact for any
    split of the data into shards). Every rank must call it (collective under DDP). NaN where a count is zero."""
    return _objective(pl_module).constraint_values(constraint_means(pl_module, sums, counts))


def kkt_multipliers(pl_module: LightningModule, means: torch.Tensor) -> torch.Tensor:
    """``ν_i = (1/m) ∇f_λ(g_i(w))`` at the exact (full-data) inner values ``means [m, d']`` of the evaluated
    parameters w: the multipliers of Chen et al. (NeurIPS 2025), Prop. 5.2 (its proof, eq. (33):
    ``ν_i = (1/(λm)) min{[h_i]_+, λρ}`` for the smoothed hinge), with ŵ taken as w. λ is the module's ``smoothing`` (0 when
    it has none: then ``∂p(h_i)/m``, the exact penalty's slope)."""
    return _objective(pl_module).multipliers(means, float(getattr(pl_module, "smoothing", 0.0) or 0.0))


class ConstraintStatistics(torchmetrics.Metric):
    """Running ``(Σ, count)`` ``[m, d']`` of a constrained objective's inner values over the data seen (float64 sum
    states: torchmetrics adds them up across processes, so the value is exact for any split of the data into shards).

    ``update(sums, counts)`` adds one batch's statistics (``objective.constraint_statistics(scores, batch)``, or
    their sum over several batches: :func:`accumulate_constraint_statistics`); ``compute()`` returns the full-data
    inner values ``g_i = Σ / count`` ``[m, d']`` (NaN where a count is 0: a constraint without data). A process
    without data still joins the reduction (collective under DDP: every process must call ``compute``).

    Args:
        num_constraints: m, the objective's ``num_constraints``.
        dim: d', its ``inner_dim``.
        kwargs: torchmetrics' ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        ValueError: ``update`` with ``sums`` or ``counts`` not of shape ``[m, d']``.

    Example:
        Two constraints with one inner value each; the second has seen no data:

        >>> import torch
        >>> statistics = ConstraintStatistics(num_constraints=2, dim=1)
        >>> statistics.update(torch.tensor([[3.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
        >>> statistics.update(torch.tensor([[1.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
        >>> statistics.compute()
        tensor([[1.],
                [nan]], dtype=torch.float64)
        >>> statistics.update(torch.zeros(3, 1), torch.ones(3, 1))
        Traceback (most recent call last):
            ...
        ValueError: constraint statistics must have shape (2, 1), got (3, 1) and (3, 1)
    """

    is_differentiable = False
    full_state_update = False

    sums: Tensor
    counts: Tensor

    def __init__(self, num_constraints: int, dim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        shape = (int(num_constraints), int(dim))
        self.add_state("sums", default=torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("counts", default=torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, sums: Tensor, counts: Tensor) -> None:  # type: ignore[override]
        if sums.shape != self.sums.shape or counts.shape != self.counts.shape:
            raise ValueError(
                f"constraint statistics must have shape {tuple(self.sums.shape)}, got {tuple(sums.shape)} and "
                f"{tuple(counts.shape)}"
            )
        # out of place: states reset under inference mode (trainer.validate) must not be changed in place later
        self.sums = self.sums + sums.detach().to(self.sums)
        self.counts = self.counts + counts.detach().to(self.counts)

    def compute(self) -> Tensor:
        return self.sums / self.counts  # 0/0 = NaN: a constraint without data

    def reduced(self) -> Tensor:
        """``compute()`` on a process that may have seen no data (without torchmetrics' warning about it)."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*was called before the ``update`` method.*")
            return self.compute()


def _statistics(pl_module: LightningModule) -> ConstraintStatistics:
    objective = _objective(pl_module)
    return ConstraintStatistics(objective.num_constraints, objective.inner_dim).to(pl_module.device)


def constraint_means(
    pl_module: LightningModule, sums: torch.Tensor | None, counts: torch.Tensor | None
) -> torch.Tensor:
    """The full-data inner values ``g_i = Σ / count`` ``[m, d']``, reduced over every rank first (collective;
    ``sums`` None: this rank saw no data)."""
    statistics = _statistics(pl_module)
    if sums is not None:
        statistics.update(sums, counts)
    return statistics.reduced()


class ConstraintViolationLogger(Callback):
    r"""Logs each constraint ``h_i ≤ 0`` of a constrained objective, its violations and the KKT multipliers.

    For a :class:`~fccolit.objectives.constrained.ConstrainedObjective`: each constraint on its full data, the worst
    one, how many are violated, the KKT multipliers at the evaluated parameters and the penalty's weight per
    constraint from the algorithm's tracked duals.

    What is logged, and how it stays exact under DDP, follows the Example.

    Args:
        every_n_epochs: log every N epochs (epoch e is logged when (e + 1) % N == 0).
        stages: any of ``"train"``, ``"val"``, ``"test"`` (``"test"`` is logged whenever ``trainer.test`` runs).
        log_each: log every constraint's value (False: only the max and the count).
        log_weights: log the penalty weights from the tracked duals (modules with ``penalty_weights()`` or the
            older ``constraint_weights()``).
        log_kkt_multipliers: log the Prop. 5.2 multipliers from the full-data constraint values.
        legacy_multiplier_tags: also log the penalty weights as ``{stage}/multiplier_<i>`` (the old tag name).
        figure: draw ``{stage}/figures/constraints`` (rank 0, TensorBoard loggers only; see
            :func:`fccolit.metrics.figures.log_constraint_figure`).

    Raises:
        ValueError: ``stages`` holds a name other than ``"train"``, ``"val"``, ``"test"``; ``every_n_epochs`` < 1.
        TypeError: when logging, the module's ``objective`` has no ``constraint_statistics()`` (not a
            :class:`~fccolit.objectives.constrained.ConstrainedObjective`).

    Example:
        >>> logger = ConstraintViolationLogger(every_n_epochs=2, stages=("val",))
        >>> logger.every_n_epochs, logger.stages, logger.log_kkt_multipliers
        (2, ('val',), True)
        >>> ConstraintViolationLogger(stages=("valid",))
        Traceback (most recent call last):
            ...
        ValueError: stages must be among 'train', 'val', 'test', got ['valid']

    Every ``every_n_epochs`` epochs, for each stage in ``stages`` (``"val"``, ``"test"``: the evaluation data,
    piggy-backing on the evaluation loop with one extra no-grad forward per batch; ``"train"``: one pass over the
    whole training split at the end of the training epoch), logs::

        {stage}/constraint_<i>     h_i on the stage's full data (i = state row; the objective's constraint_names()
                                   says which is which, e.g. tpr_gap@-3)
        {stage}/max_violation      max_i h_i (the paper's "worst constraint value"; ≤ 0 means feasible)
        {stage}/num_violated       #{i : h_i > 0}
        {stage}/kkt_multiplier_<i> ν_i = (1/m) ∇f_λ(g_i(w)) at the stage's full-data inner values of the evaluated
                                   parameters w: the multipliers of Chen et al.'s Prop. 5.2 with ŵ = w (λ: the
                                   module's ``smoothing``; for λ = 0 the exact penalty's slope ∂p(h_i)/m)
        {stage}/penalty_weight_<i> (1/m) ∂p_λ(h_i(u_i)) from the algorithm's *tracked* inner values u_i (the
                                   duals y_i = ∇f_λ(u_i) it used last, scaled by 1/m): what the estimator weighs
                                   constraint i with, not a KKT multiplier (u_i averages mini-batch estimates at
                                   past iterates: for ALEXR2 the inner iterates z, not the evaluated anchor w_t)
        {stage}/multiplier_<i>     the same values as penalty_weight_<i>, under the tag used before the two were
                                   told apart (``legacy_multiplier_tags``)
        {stage}/figures/constraints  (TensorBoard image, ``figure``) every h_i against the epoch so far, named by
                                   the objective's constraint_names(), with the line h = 0: all constraints in one
                                   picture (the history is kept in the callback's checkpoint state)

    Exact across DDP ranks: every rank sums ``(Σ, count)`` per constraint over its shard in a
    :class:`ConstraintStatistics` metric, torchmetrics adds the sums of every rank up and they are divided once, so
    unequal shards (the evaluation samplers never pad) give the single-process value. The module is evaluated as in
    validation (``pl_module(batch)`` in eval mode: ALEXR2's anchor).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        stages: Sequence[str] = ("train", "val", "test"),
        log_each: bool = True,
        log_weights: bool = True,
        log_kkt_multipliers: bool = True,
        legacy_multiplier_tags: bool = True,
        figure: bool = True,
    ) -> None:
        unknown = set(stages) - {"train", "val", "test"}
        if unknown:
            raise ValueError(f"stages must be among 'train', 'val', 'test', got {sorted(unknown)}")
        if int(every_n_epochs) < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.every_n_epochs, self.stages = int(every_n_epochs), tuple(stages)
        self.log_each, self.log_weights = log_each, log_weights
        self.log_kkt_multipliers, self.legacy_multiplier_tags = log_kkt_multipliers, legacy_multiplier_tags
        self._statistics: ConstraintStatistics | None = None  # the stage's running (Σ, count), made at first use
        self.last: dict[str, dict[str, float]] = {}  # the most recent values per stage (for scripts)
        self.figure = figure
        self.history: dict[str, list[tuple[int, list[float]]]] = {}  # per stage: (epoch, h) at each logging

    @property
    def state_key(self) -> str:
        """Unique per configuration, so that several loggers (e.g. one per stage) keep their histories apart in a
        checkpoint."""
        return self._generate_state_key(every_n_epochs=self.every_n_epochs, stages=self.stages, log_each=self.log_each,
                                        log_weights=self.log_weights, log_kkt_multipliers=self.log_kkt_multipliers,
                                        legacy_multiplier_tags=self.legacy_multiplier_tags, figure=self.figure)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = {stage: [(int(e), list(h)) for e, h in rows] for stage, rows in state_dict["history"].items()}

    # ------------------------------------------------------------------ when
    def _due(self, trainer: Trainer, stage: str) -> bool:
        if stage not in self.stages or trainer.sanity_checking:
            return False
        return stage == "test" or (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _reset(self) -> None:
        if self._statistics is not None:
            self._statistics.reset()

    def _statistics_of(self, pl_module: LightningModule) -> ConstraintStatistics:
        """The running statistics, on the module's device (made at first use: the objective sizes them)."""
        if self._statistics is None:
            self._statistics = _statistics(pl_module)
        elif self._statistics.device != pl_module.device:
            self._statistics = self._statistics.to(pl_module.device)
        return self._statistics

    def _add(self, pl_module: LightningModule, batches: Iterable[dict[str, torch.Tensor]]) -> None:
        sums, counts = accumulate_constraint_statistics(pl_module, batches)
        if sums is not None:  # None: no batch (an empty shard)
            self._statistics_of(pl_module).update(sums, counts)

    def _log(self, pl_module: LightningModule, stage: str) -> None:
        means = self._statistics_of(pl_module).reduced()  # collective: torchmetrics adds up every rank's sums
        h = _objective(pl_module).constraint_values(means)
        self._reset()
        values = {f"{stage}/max_violation": float(torch.nan_to_num(h, nan=-torch.inf).max()),
                  f"{stage}/num_violated": float((h > 0).sum())}
        if self.log_each:
            values.update({f"{stage}/constraint_{i}": float(v) for i, v in enumerate(h)})
        if self.log_kkt_multipliers and hasattr(_objective(pl_module), "multipliers"):
            values.update({f"{stage}/kkt_multiplier_{i}": float(v) for i, v in enumerate(kkt_multipliers(pl_module, means))})
        weights = getattr(pl_module, "penalty_weights", None) or getattr(pl_module, "constraint_weights", None)
        if self.log_weights and callable(weights):
            w = weights()
            if w is not None:
                values.update({f"{stage}/penalty_weight_{i}": float(v) for i, v in enumerate(w)})
                if self.legacy_multiplier_tags:
                    values.update({f"{stage}/multiplier_{i}": float(v) for i, v in enumerate(w)})
        for name, value in values.items():  # identical on every rank: no sync needed
            pl_module.log(name, value, on_step=False, on_epoch=True, sync_dist=False)
        self.last[stage] = values
        self._draw(pl_module, stage, h)

    def _draw(self, pl_module: LightningModule, stage: str, h: Tensor) -> None:
        """Append ``h`` to the stage's history and draw the history (:func:`log_constraint_figure`)."""
        history = self.history.setdefault(stage, [])
        history.append((pl_module.current_epoch, h.tolist()))
        writer = figure_writer(pl_module.trainer) if self.figure else None
        if writer is None:
            return
        objective = _objective(pl_module)
        names = objective.constraint_names() if hasattr(objective, "constraint_names") else [
            f"constraint_{i}" for i in range(len(h))]
        epochs, values = zip(*history)
        log_constraint_figure(writer, stage, epochs, torch.tensor(values), names, pl_module.global_step)

    # ------------------------------------------------------------------ evaluation stages
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reset()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._due(trainer, "val"):
            self._add(pl_module, [batch])

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._due(trainer, "val"):
            self._log(pl_module, "val")

    def on_test_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reset()

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._due(trainer, "test"):
            self._add(pl_module, [batch])

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._due(trainer, "test"):
            self._log(pl_module, "test")

    # ------------------------------------------------------------------ the training data
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._due(trainer, "train"):
            return
        dataset = getattr(trainer.datamodule, "train_dataset", None) if trainer.datamodule is not None else None
        if dataset is None:
            return
        batch_size = getattr(trainer.datamodule, "eval_batch_size", 1024)
        loader = DataLoader(dataset, batch_sampler=SequentialShardSampler(len(dataset), batch_size),
                            collate_fn=identity_collate)
        # the batches the training loop would see: on the module's device, in the trainer's precision
        batches = (trainer.precision_plugin.convert_input(trainer.strategy.batch_to_device(b)) for b in loader)
        was_training = pl_module.training
        pl_module.eval()
        self._reset()
        try:
            self._add(pl_module, batches)
        finally:
            pl_module.train(was_training)
        self._log(pl_module, "train")
