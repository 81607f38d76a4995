"""One training run of SONG or K-SONG on synthetic recommendation data, for the multi-process tests (a script, not
collected).

    python tests/ddp_run_song.py --algorithm ksong --devices 2 --max-steps 20 --out DIR [--save-every K] [--resume CKPT]

Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights, per-pair u, per-query λ and s), the
optimizer state and the queries of every batch. ``--save-every`` writes checkpoints ``DIR/step={k}.ckpt``.
"""

import argparse
import os
import sys

import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fccolit.algorithms.song import KSONG, SONG  # noqa: E402
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate  # noqa: E402


class BatchTrace(Callback):
    """Records the queries of every training batch, keyed by global step."""

    def __init__(self):
        self.trace = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.trace[trainer.global_step] = (trainer.current_epoch, batch_idx, batch["query"].tolist(),
                                           batch["items"].tolist())


def build(args):
    seed_everything(0, workers=True)
    data = SyntheticRankingDataModule(num_queries=64, num_items=80, ratings_per_query=(5, 12), num_positives=3,
                                      num_negatives=10, queries_per_batch=8, top_k=5, seed=0)
    model = NeuMF(embedding_dim=6, layers=[6], dropout=0.0, init_std=0.1)  # no dropout: the same math on any split
    common = dict(optimizer=lambda p: torch.optim.Adam(p, lr=0.01), data_sizes=data.sizes, state_dtype="float64",
                  metrics=["ndcg@10"])
    if args.algorithm == "song":
        module = SONG(model, NDCGSurrogate(normalization=args.normalization), ema_weight=0.3, **common)
    else:
        objective = TopKNDCGSurrogate(top_k=5, tau1=0.1, tau2=0.01, normalization=args.normalization)
        module = KSONG(model, objective, ema_weight=0.3, estimator="theoretical", lambda_lr=0.05, **common)
    # float64 from construction: Lightning restores checkpoints before the precision plugin converts the module
    return module.double(), data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", choices=["song", "ksong"], default="song")
    ap.add_argument("--normalization", choices=["per_query", "pairs"], default="per_query")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=20)
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
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    torch.save(
        {"module": model.state_dict(), "optimizer": trainer.optimizers[0].state_dict(), "step": trainer.global_step,
         "trace": callbacks[0].trace},
        os.path.join(args.out, f"rank{trainer.global_rank}.pt"),
    )


if __name__ == "__main__":
    main()
