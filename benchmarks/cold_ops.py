"""What a small tensor operation costs inside a training step, against the same operation timed back to back.

    python benchmarks/cold_ops.py [--quick] [--root TREE] [--write]

The FCCO part of a small model's step is a few dozen small operations (``op_count.py``). Timed in a tight loop, one
costs a couple of microseconds; inside a step it follows the model's matrix products, which leave the CPU's caches
holding their operands, not the dispatcher's code and tables nor the state's rows. This script times the same calls
in both conditions, in one process, alternating call by call:

* ``warm``: the call right after the previous call of itself;
* ``after products``: right after two matrix products of the benchmarks' MLP size (``[256, 256] @ [256, 512]``, then
  ``@ [512, 512]``, as in ``fcco_overhead.py``'s MLP 256-512-512-1 at B = 256);
* ``after 3 ms idle``: right after ``time.sleep(0.003)`` (what a DataLoader wait or a synchronizing GPU step leaves).

The calls: one ``IndexedState.update`` of 64 rows (the thresholds' update of PAUCRange, ~10 operations), one
elementwise ``add`` of 64 numbers, and one batch of the synthetic binary DataModule's loader (256 rows: sampler,
``__getitems__``). ``--root`` imports fccolit from another checkout (an A/B of two trees: run it once per tree,
alternately). Medians over the rounds, microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def timed(call, before, rounds: int) -> float:
    """Median microseconds of ``call()`` run right after ``before()``, over ``rounds`` rounds."""
    times = []
    for _ in range(rounds):
        before()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def run(quick: bool) -> dict[str, dict[str, float]]:
    """call → condition → median µs."""
    from fccolit.datamodules import SyntheticBinaryDataModule
    from fccolit.state import IndexedState

    torch.manual_seed(0)
    state = IndexedState(1_000, 1, dtype=torch.float64, name="lambda")
    rows, values = torch.randperm(1_000)[:64], torch.rand(64, 1, dtype=torch.float64)
    small = torch.rand(64)
    data = SyntheticBinaryDataModule(num_samples=20_000, num_features=256, pos_fraction=0.05, batch_size=256,
                                     num_positives=64, seed=0)
    data.setup("fit")

    def endless():
        while True:
            yield from data.train_dataloader()

    loader = endless()
    a, b, c = torch.randn(256, 256), torch.randn(256, 512), torch.randn(512, 512)
    calls = {
        "IndexedState.update, 64 rows": lambda: state.update(rows, values, ema_weight=1.0, synced=True),
        "one add of 64 numbers": lambda: small + 1.0,
        "loader batch, 256 rows": lambda: next(loader),
    }
    before = {
        "warm": lambda: None,
        "after products": lambda: (a @ b) @ c,
        "after 3 ms idle": lambda: time.sleep(0.003),
    }
    rounds = 150 if quick else 600
    for call in calls.values():  # first visits, allocator
        for _ in range(20):
            call()
    result = {name: {cond: [] for cond in before} for name in calls}
    for _ in range(3):  # the conditions alternate in blocks, the blocks three times over: medians of the blocks' medians
        for name, call in calls.items():
            for cond, prepare in before.items():
                result[name][cond].append(timed(call, prepare, rounds // 3))
    return {name: {cond: statistics.median(v) for cond, v in conds.items()} for name, conds in result.items()}


def report(result: dict[str, dict[str, float]], command: str) -> str:
    from timing import machine

    conditions = list(next(iter(result.values())))
    lines = [
        "## A small operation inside a step against the same operation back to back (CPU)",
        "",
        f"Command: `{command}`. Machine: {machine()}. Median µs per call, the call timed right after the condition "
        "(`benchmarks/cold_ops.py`'s docstring).",
        "",
        "| call | " + " | ".join(conditions) + " | after products / warm |",
        "|---|" + "---:|" * (len(conditions) + 1),
    ]
    for name, conds in result.items():
        cells = " | ".join(f"{conds[c]:.1f}" for c in conditions)
        lines.append(f"| {name} | {cells} | {conds['after products'] / conds['warm']:.1f}× |")
    lines += [
        "",
        "Inside a training step every operation of the FCCO part runs once, after the model's products, so its cost "
        "is the middle column, not the first: a state update that takes tens of microseconds in a loop takes "
        "several times that in a step. This is why the step ratios of `fcco_overhead.py` follow the operation count "
        "(`op_count.py`), and why trimming an operation saves more inside a step than a micro-benchmark shows.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose fccolit is imported")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/cold_ops.md")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    sys.path.insert(1, str(HERE))
    torch.set_num_threads(1)
    result = run(args.quick)
    command = "python benchmarks/cold_ops.py" + (" --quick" if args.quick else "")
    text = report(result, command)
    print(text)
    if args.write:
        from timing import write_result

        write_result("cold_ops", text)
    return result


if __name__ == "__main__":
    main()
