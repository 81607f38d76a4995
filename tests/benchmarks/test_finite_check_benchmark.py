"""benchmarks/finite_check.py runs (so the script cannot rot) and times both checks on finite gradients."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_benchmark_runs_and_reports_every_width():
    sys.path.insert(0, str(BENCHMARKS))
    import finite_check

    rows = finite_check.run(repeats=1)
    assert [r["width"] for r in rows] == list(finite_check.WIDTHS)
    assert all(r["inf-norm (before)"] > 0 and r["sum (now)"] > 0 for r in rows)
    assert "| 512 | 394,753 |" in finite_check.report(rows, "python benchmarks/finite_check.py")
