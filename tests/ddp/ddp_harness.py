"""The shared part of the multi-process test scripts (tests/ddp/ddp_run*.py; not collected).

Each script builds its module and DataModule and calls :func:`fit_and_save`, which trains in float64 on CPU
(gloo DDP with ``--devices 2``), optionally writes checkpoints ``DIR/step={k}.ckpt`` every ``--save-every`` steps
or resumes from ``--resume``, and writes ``DIR/rank{r}.pt`` per rank: the module's state dict, every optimizer's
state dict (``optimizers``; ``optimizer`` is the first), the global step, the batch trace and the script's extras.
The tests compare one process with two on the same global batches.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class BatchTrace(Callback):
    """Records what every training batch held, keyed by global step: ``(epoch, batch_idx, *fields)`` where each
    field is ``batch[name].tolist()`` for the names given (default: the sample ``index``)."""

    def __init__(self, fields: tuple[str, ...] = ("index",)):
        self.fields = fields
        self.trace: dict[int, tuple] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.trace[trainer.global_step] = (trainer.current_epoch, batch_idx, *(batch[f].tolist() for f in self.fields))


def arguments(max_steps: int, add: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """``--devices --max-steps --out --save-every --resume`` plus the script's own options (``add``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=max_steps)
    parser.add_argument("--out", required=True)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--resume", default=None)
    if add is not None:
        add(parser)
    return parser.parse_args()


def fit_and_save(
    model: LightningModule,
    data: LightningDataModule,
    args: argparse.Namespace,
    trace: BatchTrace | None = None,
    callbacks: list[Callback] = (),
    validate: bool = False,
    extras: Callable[[Trainer], dict[str, Any]] | None = None,
) -> Trainer:
    """Fit ``model`` (built in float64: Lightning restores a checkpoint before the precision plugin converts the
    module, so a float32-built module would round restored float64 weights) and write ``args.out/rank{r}.pt``."""
    trace = trace or BatchTrace()
    callbacks = [trace, *callbacks]
    if args.save_every:
        callbacks.append(
            ModelCheckpoint(dirpath=args.out, filename="{step}", every_n_train_steps=args.save_every, save_top_k=-1)
        )
    strategy = DDPStrategy(process_group_backend="gloo", broadcast_buffers=False) if args.devices > 1 else "auto"
    trainer = Trainer(
        accelerator="cpu", devices=args.devices, strategy=strategy, precision="64-true", max_steps=args.max_steps,
        use_distributed_sampler=False, logger=False, enable_checkpointing=bool(args.save_every),
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks, num_sanity_val_steps=0,
        limit_val_batches=None if validate else 0,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    optimizers = [opt.state_dict() for opt in trainer.optimizers]
    result = {"module": model.state_dict(), "optimizers": optimizers, "optimizer": optimizers[0] if optimizers else None,
              "step": trainer.global_step, "trace": trace.trace, **(extras(trainer) if extras else {})}
    torch.save(result, os.path.join(args.out, f"rank{trainer.global_rank}.pt"))
    if torch.distributed.is_initialized():  # a clean teardown: a gloo group left to the interpreter's exit can abort
        torch.distributed.barrier()         # the process ("terminate called without an active exception")
        torch.distributed.destroy_process_group()
    return trainer
