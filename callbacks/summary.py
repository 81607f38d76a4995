"""Print the validation metrics when training ends, a line at every validation, or a file of them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only


class MetricsSummary(Callback):
    """At the end of ``fit``, print every logged ``val/*`` and ``train/objective`` value as a small table.

    It also prints where the TensorBoard logs are. It takes no arguments and raises nothing of its own; a fit
    without such values prints nothing.

    Example:
        The table for a trainer's logged values (a stand-in trainer: no fit needed):

        >>> from types import SimpleNamespace
        >>> import torch
        >>> trainer = SimpleNamespace(callback_metrics={"val/ap": torch.tensor(0.61), "train/loss": torch.tensor(1.0),
        ...                                             "train/objective_epoch": torch.tensor(-0.7)},
        ...                           progress_bar_callback=None, logger=None)
        >>> MetricsSummary().on_fit_end(trainer, None)
        <BLANKLINE>
        metric                 value
        ---------------------  ------
        train/objective_epoch  -0.7000
        val/ap                 0.6100
    """

    @rank_zero_only
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        rows = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/") or k == "train/objective_epoch"}
        if not rows:
            return
        if trainer.progress_bar_callback is not None:  # the bar's last frame goes out now, not after the table
            trainer.progress_bar_callback.teardown(trainer, pl_module, "fit")
        width = max(len(k) for k in rows)
        lines = ["", f"{'metric'.ljust(width)}  value", f"{'-' * width}  ------"]
        lines += [f"{k.ljust(width)}  {rows[k]:.4f}" for k in sorted(rows, key=_natural)]
        if trainer.logger is not None and getattr(trainer.logger, "log_dir", None):
            lines.append(f"TensorBoard logs: {trainer.logger.log_dir}  (tensorboard --logdir {trainer.logger.save_dir})")
        print("\n".join(lines))


def _natural(name: str) -> list:
    """Sort key putting ``constraint_2`` before ``constraint_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class ProgressLines(Callback):
    """A progress line at every validation and every training epoch's end, for output that is not a terminal.

    For output such as a log file or a batch job, where a progress bar writes a carriage-return frame per refresh:
    ``epoch 2, step 476/1428 (33%), 12.4 s: train/objective -0.7123, val/ap 0.6198``. The ``fccolit`` command uses it
    instead of the progress bar when its output is not a terminal and ``trainer.enable_progress_bar`` is not set.
    It takes no arguments and raises nothing of its own; a step already printed is not printed twice.

    Example:
        >>> from types import SimpleNamespace
        >>> import torch
        >>> trainer = SimpleNamespace(sanity_checking=False, global_step=476, estimated_stepping_batches=1428,
        ...                           current_epoch=2, callback_metrics={"val/ap": torch.tensor(0.6198)})
        >>> lines = ProgressLines()
        >>> lines.on_train_epoch_end(trainer, None)
        epoch 2, step 476/1428 (33%), ... s: val/ap 0.6198
        >>> lines.on_train_epoch_end(trainer, None)
    """

    def __init__(self) -> None:
        self._printed_step: int | None = None
        self._start = 0.0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        import time

        self._start = time.monotonic()

    @rank_zero_only
    def _line(self, trainer: Trainer) -> None:
        import time

        if trainer.sanity_checking or self._printed_step == trainer.global_step:
            return
        self._printed_step = trainer.global_step
        total = trainer.estimated_stepping_batches
        share = f" ({100 * trainer.global_step / total:.0f}%)" if total and total != float("inf") else ""
        of = f"/{int(total)}" if share else ""
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
                   if (k.startswith("val/") or k == "train/objective") and v.numel() == 1}
        values = ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items(), key=lambda kv: _natural(kv[0])))
        print(f"epoch {trainer.current_epoch}, step {trainer.global_step}{of}{share}, "
              f"{time.monotonic() - self._start:.1f} s" + (f": {values}" if values else ""), flush=True)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._line(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._line(trainer)


class MetricHistory(Callback):
    """After every validation during ``fit``, append the logged scalar metrics as one JSON line to ``path``.

    Each line is ``{"step": <global step>, "epoch": <epoch>, "metrics": {name: value, ...}}`` with every scalar of
    ``trainer.callback_metrics`` (the ``val/*`` values and the latest training values); the sanity check writes
    nothing. ``fccolit sweep`` (:mod:`fccolit.sweep`) adds it to each trial's run and reads the selection metric
    from the file, whatever loggers the config has. Written by rank 0 only, flushed line by line, so a killed run
    leaves every finished validation's line.

    Args:
        path: the JSON-lines file; its folder is created; lines are appended (a file that exists is extended).

    Raises:
        OSError: ``path`` cannot be written (at the first validation).

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from types import SimpleNamespace
        >>> import torch
        >>> path = Path(tempfile.mkdtemp()) / "history.jsonl"
        >>> trainer = SimpleNamespace(sanity_checking=False, global_step=100, current_epoch=0,
        ...                           state=SimpleNamespace(fn="fit"),
        ...                           callback_metrics={"val/ap": torch.tensor(0.5), "val/per_class": torch.ones(3)})
        >>> history = MetricHistory(path)
        >>> history.on_validation_end(trainer, None)
        >>> trainer.global_step, trainer.callback_metrics["val/ap"] = 200, torch.tensor(0.75)
        >>> history.on_validation_end(trainer, None)
        >>> [json.loads(line) for line in path.read_text().splitlines()]
        [{'step': 100, 'epoch': 0, 'metrics': {'val/ap': 0.5}}, {'step': 200, 'epoch': 0, 'metrics': {'val/ap': 0.75}}]
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @rank_zero_only
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        metrics = {name: float(value) for name, value in trainer.callback_metrics.items() if value.numel() == 1}
        line = json.dumps({"step": trainer.global_step, "epoch": trainer.current_epoch, "metrics": metrics})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as file:
            file.write(line + "\n")
