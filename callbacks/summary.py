"""Print the validation metrics when training ends."""

from __future__ import annotations

import re

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only


class MetricsSummary(Callback):
    """At the end of ``fit``, print every logged ``val/*`` and ``train/objective`` value as a small table,
    and where the TensorBoard logs are."""

    @rank_zero_only
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        rows = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/") or k == "train/objective_epoch"}
        if not rows:
            return
        width = max(len(k) for k in rows)
        lines = ["", f"{'metric'.ljust(width)}  value", f"{'-' * width}  ------"]
        lines += [f"{k.ljust(width)}  {rows[k]:.4f}" for k in sorted(rows, key=_natural)]
        if trainer.logger is not None and getattr(trainer.logger, "log_dir", None):
            lines.append(f"TensorBoard logs: {trainer.logger.log_dir}  (tensorboard --logdir {trainer.logger.save_dir})")
        print("\n".join(lines))


def _natural(name: str) -> list:
    """Sort key putting ``constraint_2`` before ``constraint_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
