"""Tests of fccolit/metrics/__init__.py: build_metric and metric_kind parse the logged metric names; every metric
class the package exports has a MetricTester case."""

from __future__ import annotations

import inspect

import pytest

import fccolit.metrics
from fccolit.metrics import APScore, AUROCScore, BatchMetric, NDCGScore, PartialAUCScore, build_metric, metric_kind

from .testers import METRIC_CASES


def test_build_metric_parsing():
    m = build_metric("ndcg@10")
    assert isinstance(m, NDCGScore) and m.top_k == 10 and m.gain == "exp2"
    assert build_metric("ndcg").top_k is None
    assert build_metric("val/NDCG@3").top_k == 3
    assert isinstance(build_metric("ap"), APScore)
    assert isinstance(build_metric("auroc"), AUROCScore)
    m = build_metric("pauc_0.05_0.5")
    assert isinstance(m, PartialAUCScore) and (m.fpr_min, m.fpr_max, m.normalization) == (0.05, 0.5, "normalized")
    m = build_metric("pauc_0_0.3_mcclish")
    assert (m.fpr_min, m.fpr_max, m.normalization) == (0.0, 0.3, "mcclish")
    m = build_metric("pauc_0.05_0.5_raw")
    assert (m.fpr_min, m.fpr_max, m.normalization) == (0.05, 0.5, "raw")
    assert build_metric("pauc_.1_1").fpr_max == 1.0
    assert metric_kind("ndcg@5") == "ranking" and metric_kind("ndcg") == "ranking"
    assert {metric_kind(n) for n in ("ap", "auroc", "pauc_0_0.3", "pauc_0.1_0.2_raw")} == {"binary"}
    # fresh instances each time
    assert build_metric("ap") is not build_metric("ap")


@pytest.mark.parametrize(
    "name", ["ndcg@0", "ndcg@", "ndcg@x", "map", "pauc_0.5_0.1", "pauc_0.1_0.5_mcclish", "pauc_0_1.5", "auc", ""]
)
def test_build_metric_errors(name):
    with pytest.raises(ValueError, match="accepted metric names"):
        build_metric(name)
    with pytest.raises(ValueError, match="accepted metric names"):
        metric_kind(name)


def test_every_exported_metric_class_has_a_tester_case():
    exported = {getattr(fccolit.metrics, name) for name in fccolit.metrics.__all__}
    classes = {c for c in exported if inspect.isclass(c) and issubclass(c, BatchMetric) and c is not BatchMetric}
    assert classes == {type(case.make()) for case in METRIC_CASES}


def test_the_top_level_package_exports_no_metric():
    import fccolit

    assert not set(fccolit.metrics.__all__) & set(fccolit.__all__)
