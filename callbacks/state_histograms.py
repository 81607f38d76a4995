"""TensorBoard histograms of the per-index state (u, λ, s, ...) of any fccolit module."""

from __future__ import annotations

import math

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from fccolit.state import IndexedState


class StateHistograms(Callback):
    """Log histograms and visit statistics of the module's indexed states every ``every_n_epochs`` training epochs.

    Every ``every_n_epochs`` training epochs, log for each :class:`~fccolit.state.IndexedState` of the module:

    * ``state/<name>/<component>``: a histogram of the visited rows' values (one per component; e.g. for AP's
      ``u`` component 0 is the surrogate positive rank, 1 the surrogate overall rank);
    * ``state/<name>/visited``: the fraction of rows visited so far (how much of the data the state has seen);
    * ``state/<name>/at_lower/<component>``, ``state/<name>/at_upper/<component>``: for a state projected onto a
      box Ω, the share of visited rows sitting at each finite bound (:meth:`IndexedState.share_at_bounds`).

    ``<name>`` is the state's own name (``u``, ``lambda``, ...; its attribute path if two states share a name). The state is
    identical on every rank, so rank 0 logs it. Only TensorBoard loggers receive histograms; other loggers get the
    scalars.

    Args:
        every_n_epochs: log after every this many training epochs (≥ 1).
        max_rows: at most this many visited rows go into a histogram (a uniform subsample of a larger table).

    Raises:
        ValueError: ``every_n_epochs`` < 1.

    Example:
        >>> histograms = StateHistograms(every_n_epochs=5)
        >>> histograms.every_n_epochs, histograms.max_rows
        (5, 1000000)
        >>> StateHistograms(every_n_epochs=0)
        Traceback (most recent call last):
            ...
        ValueError: every_n_epochs must be ≥ 1, got 0
    """

    def __init__(self, every_n_epochs: int = 1, max_rows: int = 1_000_000) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be ≥ 1, got {every_n_epochs}")
        self.every_n_epochs = every_n_epochs
        self.max_rows = max_rows

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs or trainer.logger is None:
            return
        step = trainer.global_step
        states = [(path, m) for path, m in pl_module.named_modules() if isinstance(m, IndexedState)]
        names = [m.name for _, m in states]
        for path, state in states:
            tag = state.name if names.count(state.name) == 1 else path
            visited = state.visited()
            shares = {f"state/{tag}/visited": float(visited.float().mean())}
            if state.has_bounds:  # the share of visited rows the projection onto Ω holds at a cap, per component
                at_lower, at_upper = state.share_at_bounds()
                for c in range(state.dim):
                    if math.isfinite(float(state.lower[c])):
                        shares[f"state/{tag}/at_lower/{c}"] = float(at_lower[c])
                    if math.isfinite(float(state.upper[c])):
                        shares[f"state/{tag}/at_upper/{c}"] = float(at_upper[c])
            trainer.logger.log_metrics(shares, step=step)
            if not isinstance(trainer.logger, TensorBoardLogger) or not bool(visited.any()):
                continue
            rows = torch.nonzero(visited).flatten()
            if rows.numel() > self.max_rows:  # a uniform subsample keeps the histogram cheap for huge tables
                rows = rows[torch.randperm(rows.numel(), generator=torch.Generator().manual_seed(step))[: self.max_rows]]
            values = state.read(rows.to(state.value.device)).float().cpu()
            for c in range(state.dim):
                trainer.logger.experiment.add_histogram(f"state/{tag}/{c}", values[:, c], global_step=step)
