"""One training run of PAUCRange (AGD-SBCD) on synthetic data, for the multi-process test in test_pauc.py (run as
a script, not collected).

    python tests/ddp_run_pauc.py --devices 2 --out DIR [--max-steps 40] [--save-every K] [--resume CKPT]

T_k = 2(k+1)² per branch (4, 16, 36 steps per outer step), so 40 steps cross two outer steps and stop inside the
m-branch of the third. Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights, anchor, running
sums, averaged prox points, both λ tables and the loop position) and the indices of every training batch.
"""

import argparse
import os
import sys

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fccolit.algorithms.pauc import PAUCRange  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives.pauc import PartialAUCRange  # noqa: E402


class BatchTrace(Callback):
    def __init__(self):
        self.trace = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.trace[trainer.global_step] = batch["index"].tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--resume", default=None)
    args = ap.parse_args()
    seed_everything(0, workers=True)
    data = SyntheticBinaryDataModule(
        num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0, eval_batch_size=64
    )
    model = PAUCRange(
        MLP(hidden=[8]),
        PartialAUCRange(0.1, 0.5),
        mu=2.0,
        gamma=4.0,
        lr=0.5,
        inner_steps=2,
        data_sizes=data.sizes,
        metrics=["pauc_0.05_0.5"],
    ).double()  # float64 from construction (see tests/ddp_run.py)
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
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    torch.save(
        {"module": model.state_dict(), "step": trainer.global_step, "trace": callbacks[0].trace},
        os.path.join(args.out, f"rank{trainer.global_rank}.pt"),
    )


if __name__ == "__main__":
    main()
