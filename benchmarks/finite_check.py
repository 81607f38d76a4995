"""Cost of the finite check before every optimizer step (``FiniteSteps.check_finite_step``) against the inf-norm
check it replaced, side by side on the same gradients.

    python benchmarks/finite_check.py [--repeats N]

The check runs once per training step in every algorithm. Before, it took each gradient's largest |value|
(``torch._foreach_norm(grads, inf)``) and summed those; now it sums each gradient (one vectorized pass). Both find a
NaN or an infinity. Gradients of the models of ``step_overhead.py`` (MLP 256-w-w-1, w = 128 … 2048, random values),
one torch thread; each side is timed in interleaved blocks, median microseconds per check. Writes
``benchmarks/results/finite_check.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.algorithms import Supervised  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from timing import machine, write_result  # noqa: E402

WIDTHS = (128, 512, 2048)


def inf_norm_check(grads: list[torch.Tensor], loss: torch.Tensor) -> bool:
    """The check as it was: the sum of the tensors' largest |value|."""
    peaks = torch._foreach_norm([*grads, loss.reshape(-1)], float("inf"))
    return math.isfinite(torch.stack(peaks).sum().item())


def run(repeats: int) -> list[dict]:
    rows = []
    for width in WIDTHS:
        module = Supervised(MLP(256, hidden=[width, width]), data_sizes={"num_features": 256})
        params = list(module.parameters())
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer = torch.optim.SGD(params, lr=0.1)
        loss = torch.tensor(1.0)
        grads = [p.grad for p in params]
        sides = {"inf-norm (before)": lambda: inf_norm_check(grads, loss),
                 "sum (now)": lambda: module.check_finite_step(optimizer, loss)}
        times = {k: [] for k in sides}
        for _ in range(repeats):
            for k, f in sides.items():
                f()  # warm
                start = time.perf_counter()
                for _ in range(20):
                    f()
                times[k].append((time.perf_counter() - start) / 20 * 1e6)
        rows.append({"width": width, "params": sum(p.numel() for p in params),
                     **{k: statistics.median(v) for k, v in times.items()}})
    return rows


def report(rows: list[dict], command: str) -> str:
    lines = ["## The finite check before each optimizer step: a sum against the inf-norm it replaced (CPU)", "",
             f"Command: `{command}`. Machine: {machine()}. Random gradients of MLP 256-w-w-1 and a scalar loss; "
             "median µs per check over interleaved blocks of 20.", "",
             "| width | parameters | inf-norm (before) µs | sum (now) µs | ratio |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        before, now = r["inf-norm (before)"], r["sum (now)"]
        lines.append(f"| {r['width']} | {r['params']:,} | {before:.0f} | {now:.0f} | {before / now:.1f}× |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    text = report(run(args.repeats), "python benchmarks/finite_check.py")
    print(text)
    write_result("finite_check", text)


if __name__ == "__main__":
    main()
