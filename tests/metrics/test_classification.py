"""Tests of fccolit.metrics.classification: APScore, AUROCScore and PartialAUCScore accumulate batches into the
functional values, name their per-task values, keep the ROC and PR curves of sklearn, raise on bad input, and pass the
shared MetricTester."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import precision_recall_curve, roc_curve

from fccolit.metrics import APScore, AUROCScore, PartialAUCScore
from fccolit.metrics.functional import ap_score, auroc_score, partial_auc_score

from .helpers import binary_data, tied_binary
from .testers import CHECKS, MetricTester, cases_of


def test_binary_metric_classes_accumulate_batches():
    s, y = binary_data(9, n=257, ties=True)
    pairs = [
        (APScore(), lambda a, b: ap_score(a, b)),
        (AUROCScore(), lambda a, b: auroc_score(a, b)),
        (PartialAUCScore(0.05, 0.5), lambda a, b: partial_auc_score(a, b, 0.05, 0.5)),
        (PartialAUCScore(0.0, 0.3, "mcclish"), lambda a, b: partial_auc_score(a, b, 0.0, 0.3, "mcclish")),
        (PartialAUCScore(0.05, 0.5, "raw"), lambda a, b: partial_auc_score(a, b, 0.05, 0.5, "raw")),
    ]
    for metric, fn in pairs:
        for lo, hi in [(0, 100), (100, 101), (101, 257)]:
            metric.update(s[lo:hi, None].float() if lo == 0 else s[lo:hi], y[lo:hi].bool() if lo else y[lo:hi])
        assert float(metric.compute()) == pytest.approx(float(fn(s, y)), abs=1e-12)
        metric.reset()
        with warnings.catch_warnings():  # torchmetrics warns about compute() before update()
            warnings.simplefilter("ignore", UserWarning)
            with pytest.raises(ValueError, match="got 0 positives, 0 negatives"):
                metric.compute()


def test_binary_metric_errors():
    metric = AUROCScore()
    with pytest.raises(ValueError, match=r"2 NaN value\(s\).*model produced NaN"):
        metric.update(torch.tensor([0.1, float("nan"), float("nan")]), torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match=r"outside \{0, 1\}"):
        metric.update(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 2, 0]))
    with pytest.raises(ValueError, match=r"outside \{0, 1\}"):
        metric.update(torch.tensor([0.1, 0.2]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="same number of samples"):
        metric.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match=r"shape \[N\] or \[N, 1\]"):
        metric.update(torch.zeros(3, 2, 2), torch.zeros(3, 2, 2))
    with pytest.raises(ValueError, match=r"target of the same shape \[N, T\]"):
        metric.update(torch.zeros(3, 2), torch.zeros(3))
    metric.update(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match="AUROC is undefined without both classes: got 3 positives, 0 negatives"):
        metric.compute()
    pauc = PartialAUCScore(0.0, 0.5)
    pauc.update(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="got 0 positives, 2 negatives"):
        pauc.compute()
    ap = APScore()
    ap.update(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="without positives: got 0 positives, 2 negatives"):
        ap.compute()
    assert float(ap_score(torch.tensor([0.3, 0.1]), torch.tensor([1, 1]))) == 1.0


def test_partial_auc_score_argument_errors():
    with pytest.raises(ValueError, match="McClish"):
        PartialAUCScore(0.1, 0.5, "mcclish")
    with pytest.raises(ValueError, match="fpr_min < fpr_max"):
        PartialAUCScore(-0.1, 0.5)


def test_binary_metrics_name_their_values_per_task():
    tasks = APScore()
    scores = torch.tensor([[0.9, 0.2], [0.1, 0.8], [0.5, 0.1]])
    tasks.update_from_batch(scores, {"y": torch.tensor([[1, 0], [0, 1], [0, -1]])})
    values = tasks.named_values("ap", labels=["No Finding", "edema"])
    assert list(values) == ["ap", "ap/No_Finding", "ap/edema"]
    assert float(values["ap"]) == pytest.approx(1.0) and float(values["ap/edema"]) == pytest.approx(1.0)
    single = AUROCScore()
    single.update_from_batch(scores[:, 0], {"y": torch.tensor([[1], [0], [0]])})  # [N, 1] labels
    assert list(single.named_values("auroc")) == ["auroc"]


@pytest.mark.parametrize("metric_class", [APScore, AUROCScore, lambda: PartialAUCScore(0.05, 0.5)])
def test_binary_metrics_keep_the_roc_and_pr_curves_of_sklearn(metric_class):
    s, y = tied_binary(0)
    metric = metric_class()
    metric.update(s[:150], y[:150])
    metric.update(s[150:], y[150:])
    value = metric.compute()
    roc = metric.named_curves()["roc"]
    fpr, tpr, _ = roc_curve(y.numpy(), s.numpy(), drop_intermediate=False)
    np.testing.assert_allclose(torch.stack(roc.roc()).numpy(), np.stack([fpr, tpr]), rtol=0, atol=1e-15)
    precision, recall, _ = precision_recall_curve(y.numpy(), s.numpy())
    # sklearn lists thresholds in increasing order and appends the point (recall 0, precision 1)
    ours_recall, ours_precision = roc.precision_recall()
    np.testing.assert_allclose(ours_recall.numpy(), recall[:-1][::-1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(ours_precision.numpy(), precision[:-1][::-1], rtol=0, atol=1e-15)
    assert (roc.num_positives, roc.num_negatives) == (int(y.sum()), int((1 - y).sum()))
    assert torch.isfinite(value)
    metric.reset()
    assert metric.named_curves() == {}


def test_multi_task_curves_are_named_per_task_and_skip_a_task_without_both_classes():
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(60, 3, generator=g, dtype=torch.float64)
    labels = (torch.rand(60, 3, generator=g) < 0.4).long()
    labels[:, 2] = 1  # task 2: positives only
    labels[:5, 0] = -1  # unlabeled entries are left out of task 0
    metric = APScore()
    metric.update(scores, labels)
    metric.compute()
    curves = metric.named_curves(labels=["No Finding", "edema", "all positive"])
    assert list(curves) == ["roc/No_Finding", "roc/edema"]
    fpr, tpr, _ = roc_curve(labels[5:, 0].numpy(), scores[5:, 0].numpy(), drop_intermediate=False)
    np.testing.assert_allclose(torch.stack(curves["roc/No_Finding"].roc()).numpy(), np.stack([fpr, tpr]), atol=1e-15)


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", cases_of(APScore, AUROCScore, PartialAUCScore), ids=str)
def test_binary_metrics_pass_the_metric_tester(case, check):
    MetricTester().check(check, case)
