"""``RunCheckpoint``: a ModelCheckpoint whose ``last.ckpt`` is always the run's newest state and resumes exactly."""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same arguments) with a ``last.ckpt`` that is always the run's newest state.

    ``last.ckpt`` is the run's newest state at every point where the run can stop, saved at a point from which
    ``--ckpt_path last`` continues bit for bit.

    When ``last.ckpt`` is written, and how a resumed run continues the selection, follows the Example.

    Args:
        dirpath, filename, monitor, verbose, save_last, save_top_k, save_on_exception, save_weights_only, mode,
            auto_insert_metric_name,
            every_n_train_steps, train_time_interval, every_n_epochs, save_on_train_epoch_end,
            enable_version_counter: those of Lightning's ``ModelCheckpoint``, unchanged; ``save_last`` must be on
            for ``last.ckpt`` to be written at all.

    Raises:
        lightning.fabric.utilities.exceptions.MisconfigurationException: as ``ModelCheckpoint``: ``save_top_k`` < -1,
            an unknown ``mode``, or more than one of ``every_n_train_steps``, ``every_n_epochs`` and
            ``train_time_interval`` set.

    Example:
        >>> checkpoint = RunCheckpoint(monitor="val/ap", mode="max", save_last=True, filename="best")
        >>> checkpoint.monitor, checkpoint.mode, checkpoint.save_last, checkpoint.save_top_k
        ('val/ap', 'max', True, 1)
        >>> RunCheckpoint(save_top_k=-2)
        Traceback (most recent call last):
            ...
        lightning.fabric.utilities.exceptions.MisconfigurationException: Invalid value for save_top_k=-2. Must be >= -1

    Lightning 2.6's ModelCheckpoint writes ``last.ckpt`` only at a step where it also writes a top-k file, so with a
    monitored metric ``last.ckpt`` stays at the last improvement; and the state it writes when training stops at
    ``max_steps`` (or on ``should_stop``) in the middle of an epoch records that epoch as finished, so a resumed run
    skips the rest of it. Here the top-k files (``best.ckpt`` by ``monitor``) are chosen as Lightning chooses them, and
    ``last.ckpt`` is written:

    * at the end of every validation, when it does not fall on an epoch's last batch (mid-epoch validation,
      ``val_check_interval``);
    * at the end of every training epoch (after the module's ``on_train_epoch_end``), when the epoch ran to its end;
    * after the training batch at which the run stops in the middle of an epoch: ``max_steps`` reached,
      ``trainer.should_stop`` set (a ``Timer``, ``EarlyStopping``), or SIGTERM received (the console then exits with
      status 143); the epoch's end is not recorded, so a resumed run finishes that epoch;
    * every ``every_n_train_steps`` training steps, when set (the points a ``kill -9`` falls back to);
    * when training ends, unless it is already there.

    Every one of these is a state the trainer resumes exactly from (the loop's progress, the sampler's position in the
    epoch, the per-index state and the optimizer agree). Without validation (``limit_val_batches: 0``) the top-k files
    are chosen at the end of each training epoch, as Lightning does.

    A resumed run writes to its own folder and continues the interrupted run's selection: the best score and the
    top-k files it recorded carry over (Lightning forgets them when the folder changes), so ``best`` stays the best of
    the whole trajectory, and files in an earlier run's folder are never removed.
    """

    #: the global step of the newest last.ckpt this run wrote
    _last_state_step: int | None = None

    def _saving(self, trainer: Trainer) -> bool:
        return not (bool(trainer.fast_dev_run) or trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking)

    def write_last(self, trainer: Trainer) -> None:
        """Write ``last.ckpt`` now (every rank calls it: saving is collective under DDP)."""
        if not self.save_last:
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_state_step = trainer.global_step

    @staticmethod
    def _epoch_ran_to_its_end(trainer: Trainer) -> bool:
        return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)

    @staticmethod
    def _stops_after_this_batch(trainer: Trainer) -> bool:
        max_steps = trainer.max_steps
        stopping = (max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps) or trainer.should_stop
        sigterm = bool(trainer.received_sigterm)
        if trainer.world_size > 1:  # a signal reaches the ranks at different times: save on all of them or none
            sigterm = trainer.strategy.reduce_boolean_decision(sigterm, all=False)
        return stopping or sigterm

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self._saving(trainer) or self._epoch_ran_to_its_end(trainer):
            return  # an epoch's last batch: the save at the epoch's end follows
        every = self._every_n_train_steps
        if self._stops_after_this_batch(trainer) or (every >= 1 and trainer.global_step % every == 0):
            self.write_last(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._saving(trainer):
            return
        self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))
        if not self._epoch_ran_to_its_end(trainer):
            self.write_last(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._saving(trainer):
            return
        if not self._epoch_ran_to_its_end(trainer):
            return  # stopped in the middle of the epoch: last.ckpt was written after its last batch
        batches = trainer.num_val_batches
        if (sum(batches) if isinstance(batches, list) else batches) == 0:  # no validation: top-k by a training metric
            self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))
        with _as_the_next_epochs_start(trainer):
            self.write_last(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._saving(trainer) and self._last_state_step != trainer.global_step:
            self.write_last(trainer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the selection (best score, best and k-th best paths, the top-k files) from a checkpoint written in
        any folder; ``last_model_path`` only when it was written in this one."""
        if state_dict.get("dirpath", self.dirpath) == self.dirpath:
            self.last_model_path = state_dict.get("last_model_path", self.last_model_path)
        self.best_model_score = state_dict["best_model_score"]
        self.best_model_path = state_dict["best_model_path"]
        self.kth_best_model_path = state_dict.get("kth_best_model_path", self.kth_best_model_path)
        self.kth_value = state_dict.get("kth_value", self.kth_value)
        self.best_k_models = state_dict.get("best_k_models", self.best_k_models)


@contextlib.contextmanager
def _as_the_next_epochs_start(trainer: Trainer) -> Iterator[None]:
    """While a checkpoint is written at the end of a finished epoch (after every ``on_train_epoch_end`` hook), the
    loop's progress reads as the start of the next epoch: the epoch counted as completed (the fit loop counts it right
    after these hooks) and the batch counter of the epoch reset (the epoch loop resets it when the next epoch starts).

    Saved as Lightning leaves it, the checkpoint resumes wrongly in step-based training (``max_steps``): Lightning
    re-enters the finished epoch and takes one batch too many (from the next epoch's data); a checkpoint written at the
    epoch's last batch instead skips the epoch-end hooks (the epoch's training objective, an epoch-interval scheduler)."""
    epochs = trainer.fit_loop.epoch_progress
    batches = trainer.fit_loop.epoch_loop.batch_progress
    saved_epochs, saved_batches = copy.deepcopy(epochs.state_dict()), copy.deepcopy(batches.state_dict())
    epochs.increment_completed()
    batches.reset_on_run()
    try:
        yield
    finally:
        epochs.load_state_dict(saved_epochs)
        batches.load_state_dict(saved_batches)
