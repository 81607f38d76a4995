"""The step template's own cost: ``compositional_loss`` (forward, inner estimates, state update, estimator) of SOX on
AP and SONEX on GDRO-CVaR, and the objective's ``inner`` and the model's forward alone, in milliseconds (median).

Run it in two trees to compare two versions of the template side by side (the refactor of issue 27 against the
commit before it), alternating the runs so that both see the same machine load::

    git worktree add /tmp/old_tree 8a4e1c0
    for i in 1 2 3; do
      (cd /tmp/old_tree && PYTHONPATH=/tmp/old_tree python /path/to/benchmarks/template_step.py)
      python benchmarks/template_step.py
    done

It runs against whichever ``fccolit`` the interpreter imports first and accepts the names of both versions (the
objectives' and SONEX's smoothing argument were renamed in 0.2.0). One torch thread; MLP 64-[128]-1, B = 256.
"""

from __future__ import annotations

import json
import time

import torch

import fccolit.objectives as objectives
from fccolit.algorithms import SONEX, SOX
from fccolit.models import MLP

AP = getattr(objectives, "AveragePrecisionSurrogate", None) or getattr(objectives, "AveragePrecision")
GDRO = getattr(objectives, "GroupDROCVaRLoss", None) or getattr(objectives, "GroupDROCVaR")


def median_ms(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return round(sorted(times)[repeats // 2] * 1e3, 4)


def main() -> dict[str, float]:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    n, d = 256, 64
    x = torch.randn(n, d, generator=g)
    y = (torch.rand(n, generator=g) < 0.5).long()
    grouped = {"x": x, "y": y, "group": torch.arange(n) % 8, "index": torch.arange(n)}
    sizes = {"num_features": d, "num_groups": 8, "num_samples": 4096}
    try:
        sonex = SONEX(MLP(hidden=[128]), GDRO(ratio=0.25), data_sizes=sizes, smoothing=0.01)
    except TypeError:  # before 0.2.0
        sonex = SONEX(MLP(hidden=[128]), GDRO(ratio=0.25), data_sizes=sizes, lam=0.01)
    labels = torch.zeros(n, dtype=torch.long)
    labels[:64] = 1
    pos_index = torch.full_like(labels, -1)
    pos_index[:64] = torch.arange(64)
    binary = {"x": x, "y": labels, "index": torch.arange(n), "pos_index": pos_index}
    sox = SOX(MLP(hidden=[128]), AP(), data_sizes={"num_samples": 4096, "num_positives": 1024, "num_features": d})
    out = {}
    for name, module, batch in [("SONEX GDRO", sonex, grouped), ("SOX AP", sox, binary)]:
        scores = module(batch).detach().requires_grad_()
        for _ in range(50):
            module.compositional_loss(module(batch), batch)
        out[f"{name}: inner"] = median_ms(lambda: module.objective.inner(scores, batch), 500)
        out[f"{name}: compositional_loss"] = median_ms(lambda: module.compositional_loss(module(batch), batch), 300)
        out[f"{name}: forward"] = median_ms(lambda: module(batch), 300)
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
