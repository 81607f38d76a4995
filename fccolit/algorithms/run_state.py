"""What a run carries beyond the state dicts, for an exact resume and honest logs: the per-step seeds of the random
generators and the epoch's running total of the training objective.

:class:`RunState` seeds torch's, numpy's and Python's generators at every training batch from (run seed, epoch,
batch, rank), keeps the run seed in every checkpoint, and sums the step's plug-in estimates into
``train/objective_epoch`` (the exact mean over every step and rank, carried across a resume).
"""

from __future__ import annotations

import os
import random
import secrets
from typing import Any

import numpy as np
import torch

from fccolit import distributed
from fccolit.checkpoints import RESUME_KEY
from fccolit.samplers.base import derived_seed

__all__ = ["RunState"]


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


class RunState:
    """Mixin of the fccolit LightningModules: per-step seeds of the generators and the epoch's objective total.

    See the module docstring; the host calls :meth:`init_run_state` in its constructor.

    Args:
        None: a mixin without a constructor (the host is a LightningModule).

    Raises:
        Nothing of its own (DDP collectives raise what ``torch.distributed`` raises).

    Example:
        >>> import torch
        >>> from fccolit.algorithms import Supervised
        >>> from fccolit.models import LinearScorer
        >>> module = Supervised(LinearScorer(), data_sizes={"num_features": 3})
        >>> module.on_fit_start()  # draws the run seed (seed_everything's seed when there is one)
        >>> module.seed_step_generators(batch_idx=3)
        >>> first = torch.rand(2)
        >>> module.seed_step_generators(batch_idx=3)  # the same batch of the same epoch draws the same numbers
        >>> torch.equal(first, torch.rand(2))
        True
    """

    training_estimate_name = "train/objective"  # what log_objective_estimate logs (and its "_epoch" mean)

    def init_run_state(self) -> None:
        """The epoch's running sum and count of the logged estimate (plain tensors, cheaper per step than a torchmetrics
        object; not in the state dict, whose values one process and W processes share: the checkpoint keeps the sums
        over every rank apart, see :meth:`on_save_checkpoint`), the run seed and the logging flag."""
        self.register_buffer("_objective_sum", torch.zeros((), dtype=torch.float64), persistent=False)
        self.register_buffer("_objective_count", torch.zeros((), dtype=torch.float64), persistent=False)
        self._random_draw_seed: int | None = None  # the run's seed of the per-step generators (on_fit_start)
        self._logs_this_step = True  # see logs_this_step

    def on_fit_start(self) -> None:
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
        ``self.log`` call costs about as much as a small step's state update on a CPU."""
        return self._logs_this_step

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        every = getattr(self.trainer, "log_every_n_steps", 1) or 1
        self._logs_this_step = (self.global_step + 1) % every == 0
        self.seed_step_generators(batch_idx)

    def log_objective_estimate(self, estimate: torch.Tensor | None) -> None:
        """Accumulate the epoch's running mean of ``estimate`` (this step's ``f_i(u_i)`` of the batch's rows, or
        a supervised module's loss) and log its mean as ``train/objective`` (``training_estimate_name``).

        The step value is handed to ``self.log`` only on the steps the logger writes (``log_every_n_steps``): a
        ``self.log`` call costs about as much as a small step's state update on a CPU. The epoch's value,
        ``train/objective_epoch``, is the exact mean over every step and rank (:meth:`on_train_epoch_end`).
        """
        if estimate is None:
            return
        self._objective_sum.add_(estimate.sum())  # in place: `+=` on a module attribute goes through __setattr__
        self._objective_count.add_(estimate.numel())
        if self.logs_this_step:
            self.log(self.training_estimate_name, estimate.mean(), on_step=True, on_epoch=False, prog_bar=True)

    def on_train_epoch_end(self) -> None:
        """Log ``train/objective_epoch``, the exact mean of the epoch's estimates over every step and rank, and restart
        the sums."""
        if self.objective is not None or self.tracks_training_estimate:
            totals = torch.stack([self._objective_sum, self._objective_count])
            if distributed.is_distributed():
                torch.distributed.all_reduce(totals)
            if totals[1] > 0:  # the exact mean over every rank's rows of the epoch
                self.log(f"{self.training_estimate_name}_epoch", totals[0] / totals[1], sync_dist=True)
            self._objective_sum.zero_()
            self._objective_count.zero_()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add what an exact resume needs beyond the state dicts: the run seed of the per-step generators, the
        epoch's running totals of ``train/objective_epoch`` summed over every rank (Lightning writes rank 0's
        checkpoint; this hook runs on every rank), and the optimizers' constructor settings (what a resumed run's
        configured optimizer is compared with)."""
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
