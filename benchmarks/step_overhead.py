"""Cost of one FCCO training step against a plain supervised step with the same model, batch and optimizer.

    python benchmarks/step_overhead.py [--quick] [--write]

A *plain step* is forward → binary cross-entropy → backward → optimizer step. A *SOX step* is forward → AP inner
estimates (every positive of the batch against every sample) → per-index state update → compositional loss →
backward → the same optimizer step. Two levels are measured:

* raw: the step alone in a Python loop (no Lightning): the arithmetic and the state update;
* Lightning: ``training_step`` as a Trainer runs it (``Supervised`` versus ``SOX`` modules, same DataModule),
  timed by a callback from batch start to batch end (logging included, data loading excluded).

Both sides are timed in the same process, interleaved call by call (:func:`timing.interleaved_medians` raw,
:class:`timing.PairedSteps` in Lightning) so machine noise hits both alike; the table reports medians and their
ratio. ``--write`` writes ``benchmarks/results/step_overhead.md`` (``benchmarks/collect.py`` assembles RESULTS.md).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning.pytorch import Trainer  # noqa: E402

from fccolit.algorithms import SOX, Supervised  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives import AveragePrecision  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402
from timing import PairedSteps, interleaved_medians, machine, write_result  # noqa: E402

CASES = [
    # name, features, hidden, batch, positives per batch, training positives (state rows)
    ("quickstart MLP 20-64-32-1, B=64", 20, [64, 32], 64, 16, 600),
    ("MLP 128-256-256-1, B=256", 128, [256, 256], 256, 64, 50_000),
    ("MLP 512-1024-1024-1, B=512", 512, [1024, 1024], 512, 128, 1_000_000),
]


def make_batch(features: int, batch: int, positives: int, rows: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    y = torch.zeros(batch, dtype=torch.long)
    y[:positives] = 1
    pos_index = torch.full((batch,), -1, dtype=torch.long)
    pos_index[:positives] = torch.randperm(rows, generator=g)[:positives]
    return {"x": torch.randn(batch, features, generator=g), "y": y, "pos_index": pos_index}


def time_case(features, hidden, batch, positives, rows, repeats, inner_loops):
    g = torch.Generator().manual_seed(0)
    sizes = {"num_samples": rows * 10, "num_positives": rows, "num_features": features}
    torch.manual_seed(0)
    module = SOX(MLP(hidden=hidden), AveragePrecision(), data_sizes=sizes, ema_weight=0.1)
    torch.manual_seed(0)
    plain_model = MLP(features, hidden=hidden)
    sox_opt = Momentum(module.parameters(), lr=1e-3, momentum_weight=0.1)
    plain_opt = Momentum(plain_model.parameters(), lr=1e-3, momentum_weight=0.1)
    batches = [make_batch(features, batch, positives, rows, g) for _ in range(inner_loops)]

    def plain_step(b):
        plain_opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(plain_model(b["x"]), b["y"].float())
        loss.backward()
        plain_opt.step()

    def plugin_step(b):  # the same AP surrogate, no state: ∇f evaluated at the batch's own estimate (BSGD)
        sox_opt.zero_grad(set_to_none=True)
        inner = module.objective.inner(module(b), b)
        weight = module.objective.outer_grad(inner.value.detach(), inner.context)
        (weight * inner.value).sum(-1).mean().backward()
        sox_opt.step()

    def sox_step(b):
        sox_opt.zero_grad(set_to_none=True)
        loss, _ = module.compositional_loss(module(b), b)
        loss.backward()
        sox_opt.step()

    ms = interleaved_medians({"plain": plain_step, "plug-in": plugin_step, "sox": sox_step}, batches, repeats, warmup=3)
    p, q, s = ms["plain"] / 1e3, ms["plug-in"] / 1e3, ms["sox"] / 1e3
    return p, s, s / p, s / q


def time_lightning(features, hidden, batch, positives, steps):
    data = SyntheticBinaryDataModule(
        num_samples=20_000, num_features=features, pos_fraction=0.05, batch_size=batch, num_positives=positives
    )

    def optimizer(p):
        return Momentum(p, lr=1e-3, momentum_weight=0.1)

    torch.manual_seed(0)
    pair = PairedSteps(Supervised(MLP(hidden=hidden), optimizer=optimizer, data_sizes=data.sizes),
                       SOX(MLP(hidden=hidden), AveragePrecision(), optimizer=optimizer, data_sizes=data.sizes),
                       names=("plain", "sox"), warmup=10)
    trainer = Trainer(
        accelerator="cpu", max_steps=2 * steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, use_distributed_sampler=False,
    )
    trainer.fit(pair, datamodule=data)  # two optimizer steps per batch
    p, s = statistics.median(pair.times["plain"]), statistics.median(pair.times["sox"])
    return p, s, s / p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/step_overhead.md")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see fcco_overhead.py)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    repeats, inner = (7, 10) if args.quick else (21, 20)
    steps = 60 if args.quick else 300
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    rows = []
    for name, features, hidden, batch, positives, state_rows in CASES:
        p, s, r, rs = time_case(features, hidden, batch, positives, state_rows, repeats, inner)
        lp, ls, lr = time_lightning(features, hidden, batch, positives, steps)
        rows.append((name, rs, p * 1e3, s * 1e3, r, lp * 1e3, ls * 1e3, lr))
        print(
            f"{name:36s} raw: plain {p * 1e3:7.3f} ms SOX {s * 1e3:7.3f} ms ratio {r:5.3f} (vs plug-in {rs:5.3f}) | "
            f"Lightning: plain {lp * 1e3:7.3f} ms SOX {ls * 1e3:7.3f} ms ratio {lr:5.3f}"
        )
    print(f"summary: sox_step_overhead_max={max(row[7] for row in rows):.3f} raw_max={max(row[4] for row in rows):.3f}")
    if args.write:
        table = [
            "## SOX step versus a plain supervised step (CPU)",
            "",
            f"Command: `python benchmarks/step_overhead.py{''.join(' ' + a for a in sys.argv[1:])}`. "
            f"Machine: {machine()}.",
            "Same model, batch and optimizer (`fccolit.optim.Momentum`); plain = BCE with logits; SOX = AP objective",
            f"with its per-index state. Raw: medians over {repeats} rounds × {inner} batches, no Lightning, the steps",
            "interleaved call by call (`timing.interleaved_medians`). Lightning: one fit of `timing.PairedSteps` running",
            f"`Supervised` and `SOX` `training_step`s alternately on the same {steps} batches (first 10 dropped).",
            "Target: ratio ≤ 1.05. The last column isolates the cost of the FCCO machinery: SOX against a plug-in",
            "step with the same AP surrogate and no state (BSGD's estimator).",
            "",
            "| case | raw plain (ms) | raw SOX (ms) | raw ratio | Lightning plain (ms) | Lightning SOX (ms) | Lightning ratio | raw SOX / plug-in AP |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        table += [
            f"| {n} | {p:.3f} | {s:.3f} | {r:.3f} | {lp:.3f} | {ls:.3f} | {lr:.3f} | {rs:.3f} |"
            for n, rs, p, s, r, lp, ls, lr in rows
        ]
        print(f"wrote {write_result('step_overhead', chr(10).join(table))}")


if __name__ == "__main__":
    main()
