"""Tests of fccolit.metrics.accuracy: AccuracyScore's overall and per-class values, and the shared MetricTester."""

from __future__ import annotations

import pytest
import torch

from fccolit.metrics import AccuracyScore

from .testers import CHECKS, MetricTester, cases_of


def test_accuracy_names_its_values_per_class():
    accuracy = AccuracyScore(3)
    accuracy.update_from_batch(torch.eye(3)[[0, 1, 1]], {"y": torch.tensor([[0], [1], [2]])})
    values = accuracy.named_values("accuracy")
    assert list(values) == ["accuracy", "accuracy/0", "accuracy/1", "accuracy/2"]
    assert [float(v) for v in values.values()] == pytest.approx([2 / 3, 1.0, 1.0, 0.0])


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", cases_of(AccuracyScore), ids=str)
def test_accuracy_score_passes_the_metric_tester(case, check):
    MetricTester().check(check, case)
