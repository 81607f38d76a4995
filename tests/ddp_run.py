"""One training run of SOX on synthetic data, for the multi-process tests (run as a script, not collected).

    python tests/ddp_run.py --devices 2 --max-steps 30 --out DIR [--save-every K] [--resume CKPT]

Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights and per-index state) and the
optimizer state at the end. ``--save-every`` writes checkpoints ``DIR/step={k}.ckpt`` every K steps.
"""

import argparse
import os
import sys

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fccolit.algorithms import SOX  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives import AveragePrecision  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402


class BatchTrace(Callback):
    """Records the sample indices of every training batch, keyed by global step."""

    def __init__(self):
        self.trace = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.trace[trainer.global_step] = (trainer.current_epoch, batch_idx, batch["index"].tolist())


def build(args):
    seed_everything(0, workers=True)
    data = SyntheticBinaryDataModule(
        num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0, eval_batch_size=64
    )
    model = SOX(
        MLP(hidden=[8]),
        AveragePrecision(margin=0.5),
        optimizer=lambda p: Momentum(p, lr=0.5, momentum_weight=0.2),
        ema_weight=0.3,
        data_sizes=data.sizes,
        state_dtype="float64",
        metrics=["ap"],
    )
    # float64 from construction: Lightning restores checkpoints before the precision plugin converts the
    # module, so a float32-built module would round the restored float64 weights.
    return model.double(), data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--resume", default=None)
    args = ap.parse_args()
    model, data = build(args)
    callbacks = [BatchTrace()]
    if args.save_every:
        callbacks.append(
            ModelCheckpoint(dirpath=args.out, filename="{step}", every_n_train_steps=args.save_every, save_top_k=-1)
        )
    strategy = DDPStrategy(process_group_backend="gloo", broadcast_buffers=False) if args.devices > 1 else "auto"
    trainer = Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy,
        precision="64-true",
        max_steps=args.max_steps,
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=bool(args.save_every),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    torch.save(
        {"module": model.state_dict(), "optimizer": trainer.optimizers[0].state_dict(), "step": trainer.global_step,
         "trace": callbacks[0].trace},
        os.path.join(args.out, f"rank{trainer.global_rank}.pt"),
    )


if __name__ == "__main__":
    main()
