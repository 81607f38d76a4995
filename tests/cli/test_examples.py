"""The extension guides in examples/ run as written and do what they say (each is executed from its file)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> dict:
    """The example's module namespace, executed from its file (``__name__`` is not ``"__main__"``: nothing runs)."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"example_{name}")


def test_every_example_is_tested():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == {"new_objective", "new_algorithm", "new_datamodule"}


def test_new_objective_is_trained_by_sox_and_improves_the_ap():
    result = load("new_objective")["main"](epochs=3)
    assert result["ap_before"] < 0.1  # 5% positives: an untrained model is at the base rate
    assert result["ap_after"] > result["ap_before"] + 0.2
    assert result["visited"] > 0.9  # SOX kept a state row per positive


def test_new_algorithm_estimator_equals_autograd_and_it_trains():
    example = load("new_algorithm")
    assert example["estimator_equals_autograd"]() < 1e-12  # float64, full batch: ĝ = g, so the estimator is ∇F
    result = example["main"](epochs=2)
    assert result["ap"] > 0.3


def test_new_datamodule_batches_hold_the_requested_positives(tmp_path):
    example = load("new_datamodule")
    result = example["main"](root=str(tmp_path), epochs=2)
    assert result["positives_per_batch"] == 16 and result["batch_size"] == 64  # the DualSampler's layout
    assert result["num_samples"] == 1800 and result["num_features"] == 8  # 60% of 3000 rows train
    assert result["ap"] > 0.5
    with pytest.raises(FileNotFoundError, match=r"CSV file not found: .*missing\.csv"):
        example["CSVBinaryDataModule"](tmp_path, "missing")
