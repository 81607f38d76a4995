"""benchmarks/neuralndcg_step.py's quick mode runs (so the script cannot rot), and its reference, the plain
autograd of allRank's Sinkhorn loop, gives the gradient fccolit's vector-form backward gives (the script checks it
on every shape; here it must not raise)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_quick_mode_runs_and_both_sides_agree():
    sys.path.insert(0, str(BENCHMARKS))
    import neuralndcg_step

    rows = neuralndcg_step.run(quick=True, repeats=1)
    assert [r["shape"] for r in rows] == ["16 × 100", "8 × 310"]
    assert all(r["plain"] > 0 and r["ours"] > 0 for r in rows)
    assert "| 8 × 310 |" in neuralndcg_step.report(rows, "python benchmarks/neuralndcg_step.py --quick")
