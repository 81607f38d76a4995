"""NeuralNDCG's loss step (forward and backward) against the plain autograd of the same Sinkhorn loop, side by side.

    python benchmarks/neuralndcg_step.py [--quick] [--repeats N]

NeuralNDCG (Pobrotyn & Białobrzeski, arXiv:2102.07831) sorts each slate softly: NeuralSort's ``[B, L, L]`` matrix
scaled by up to 50 Sinkhorn iterations. fccolit's :func:`fccolit.objectives.ranking_losses.sinkhorn_scaling` keeps
scaling vectors and runs its backward on vectors (two matrix-vector products an iteration, one batched product at
the end); the reference is the loop as allRank writes it (divide by the column sums, then the row sums, autograd
through every iterate), on the same scores, with every slate taking the same number of iterations (tolerance 0, so
both do the same work). Reported per shape: milliseconds of the whole loss (NeuralSort, Sinkhorn, the NDCG sum)
forward and backward, median of ``--repeats``, and the memory of the iterates the reference keeps for its backward
(counted from their shapes). The gradients of the two agree (checked, float32, relative 1e-4).

Shapes: the learning-to-rank configs' slates (64 queries × 100 documents, ``configs/mslr``) and a slice of the
recommendation configs' batches (32 users × 310 items; the configs take 256 users: fccolit's side is also timed at
256 × 310, where the reference would keep about 10 GB). Writes ``benchmarks/results/neuralndcg_step.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.objectives import NeuralNDCGLoss  # noqa: E402
from fccolit.objectives.ranking_losses import neural_sort  # noqa: E402
from timing import machine, write_result  # noqa: E402

ITERATIONS = 50


class PlainSinkhornNeuralNDCG(NeuralNDCGLoss):
    """The reference: the same loss with the Sinkhorn loop under plain autograd (allRank's ``sinkhorn_scaling``:
    columns then rows, sums clamped at 1e-10), every slate taking every iteration."""

    def relaxed_permutation(self, slates):
        p = neural_sort(slates.scores, slates.mask, self.temperature)
        for _ in range(self.sinkhorn_iterations):
            p = p / p.sum(1, keepdim=True).clamp_min(1e-10)
            p = p / p.sum(2, keepdim=True).clamp_min(1e-10)
        return p


def slates(num: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(num, length, generator=g)
    relevance = torch.zeros(num, length)
    relevance[:, :10] = torch.randint(1, 5, (num, 10), generator=g).float()  # 10 relevant items a slate
    return scores, relevance


def step_ms(loss, scores, relevance, repeats: int) -> tuple[float, torch.Tensor]:
    times, grad = [], None
    for _ in range(repeats + 1):
        s = scores.clone().requires_grad_(True)
        start = time.perf_counter()
        loss(s, relevance).backward()
        times.append((time.perf_counter() - start) * 1e3)
        grad = s.grad
    return statistics.median(times[1:]), grad


def run(quick: bool, repeats: int) -> list[dict]:
    ours = NeuralNDCGLoss(sinkhorn_iterations=ITERATIONS, sinkhorn_tolerance=0.0)
    plain = PlainSinkhornNeuralNDCG(sinkhorn_iterations=ITERATIONS, sinkhorn_tolerance=0.0)
    shapes = [(64, 100), (32, 310)] if not quick else [(16, 100), (8, 310)]
    rows = []
    for num, length in shapes:
        scores, relevance = slates(num, length)
        ms_plain, g_plain = step_ms(plain, scores, relevance, repeats)
        ms_ours, g_ours = step_ms(ours, scores, relevance, repeats)
        torch.testing.assert_close(g_ours, g_plain, rtol=1e-4, atol=1e-7)
        kept = 2 * ITERATIONS * num * length * length * 4 / 2**20  # the reference's saved iterates, MiB
        rows.append({"shape": f"{num} × {length}", "plain": ms_plain, "ours": ms_ours, "kept_mib": kept})
    if not quick:
        scores, relevance = slates(256, 310)
        rows.append({"shape": "256 × 310", "plain": None, "ours": step_ms(ours, scores, relevance, 1)[0],
                     "kept_mib": 2 * ITERATIONS * 256 * 310 * 310 * 4 / 2**20})
    return rows


def report(rows: list[dict], command: str) -> str:
    lines = ["## NeuralNDCG's loss step: vector-form Sinkhorn against plain autograd of the loop (CPU)", "",
             f"Command: `{command}`. Machine: {machine()}. {ITERATIONS} Sinkhorn iterations (tolerance 0: both sides "
             "run every iteration), float32, NeuralSort τ = 1; the whole loss forward and backward, median.", "",
             "| slates × length | plain autograd ms | fccolit ms | speed-up | iterates plain autograd keeps (MiB) |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        plain = "—" if r["plain"] is None else f"{r['plain']:.0f}"
        speed = "—" if r["plain"] is None else f"{r['plain'] / r['ours']:.2f}×"
        lines.append(f"| {r['shape']} | {plain} | {r['ours']:.0f} | {speed} | {r['kept_mib']:,.0f} |")
    lines += ["", "fccolit's side keeps its input, its output and vectors ``[T, B, L]``; the reference keeps every "
              "iterate (the last column). The gradients agree (checked each run)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes (seconds)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    command = "python benchmarks/neuralndcg_step.py" + (" --quick" if args.quick else "")
    text = report(run(args.quick, args.repeats), command)
    print(text)
    write_result("neuralndcg_step", text)


if __name__ == "__main__":
    main()
