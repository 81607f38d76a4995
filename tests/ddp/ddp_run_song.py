"""One training run of SONG or K-SONG on synthetic recommendation data, for the multi-process tests (a script, not
collected).

    python tests/ddp/ddp_run_song.py --algorithm ksong --devices 2 --max-steps 20 --out DIR
                                     [--save-every K] [--resume CKPT]

Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights, per-pair u, per-query λ and s), the
optimizer state and the queries of every batch. ``--save-every`` writes checkpoints ``DIR/step={k}.ckpt``.
"""

import os
import sys

import torch
from lightning.pytorch import seed_everything

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import BatchTrace, arguments, fit_and_save  # noqa: E402

from fccolit.algorithms.song import KSONG, SONG  # noqa: E402
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate  # noqa: E402


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
        objective = TopKNDCGSurrogate(top_k=5, threshold_smoothing=0.1, threshold_regularization=0.01, normalization=args.normalization)
        module = KSONG(model, objective, ema_weight=0.3, estimator="theoretical", lambda_lr=0.05, **common)
    # float64 from construction: Lightning restores checkpoints before the precision plugin converts the module
    return module.double(), data


def main():
    def options(parser):
        parser.add_argument("--algorithm", choices=["song", "ksong"], default="song")
        parser.add_argument("--normalization", choices=["per_query", "pairs"], default="per_query")

    args = arguments(max_steps=20, add=options)
    model, data = build(args)
    fit_and_save(model, data, args, trace=BatchTrace(("query", "items")))


if __name__ == "__main__":
    main()
