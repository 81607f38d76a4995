"""The curves the metrics keep beside their values (no second pass over the scores): the binary metrics' ROC
vertices against scikit-learn's ``roc_curve`` / ``precision_recall_curve``, NDCG@j for every j <= k against
``ndcg_at_k(top_k=j)`` and ``full_ranking_ndcg(top_k=j)``, how a stage's metrics merge them, and how the figures thin them."""

import numpy as np
import pytest
import torch
from sklearn.metrics import precision_recall_curve, roc_curve

from fccolit.metrics import (
    AUROCScore,
    NDCGScore,
    APScore,
    EvaluationMetrics,
    FullRankingNDCGScore,
    PartialAUCScore,
)
from fccolit.metrics.functional import full_ranking_ndcg, ndcg_at_k
from fccolit.metrics.figures import thin


def tied_binary(seed, n=400):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < 0.2).long()
    s = torch.round(torch.randn(n, generator=g, dtype=torch.float64) * 2 + y) / 2  # many ties across classes
    return s, y


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


def ranking_lists(seed, queries=40, length=12):
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, 4, (queries, length), generator=g).double()  # ties
    y = torch.randint(0, 3, (queries, length), generator=g)
    y[3] = 0  # an empty query
    mask = torch.rand(queries, length, generator=g) > 0.3
    mask[7, 2:] = False  # a list shorter than the cut-off
    return p, y, mask


@pytest.mark.parametrize("ties", ["average", "pessimistic", "optimistic"])
@pytest.mark.parametrize("empty", ["zero", "one", "skip"])
def test_ndcg_keeps_ndcg_at_every_cutoff_up_to_k(ties, empty):
    p, y, mask = ranking_lists(2)
    metric = NDCGScore(top_k=8, ties=ties, empty_query=empty)
    metric.update(p[:15], y[:15], mask[:15])
    metric.update(p[15:], y[15:], mask[15:])
    value = metric.compute()
    curve = metric.named_curves()["ndcg@k"]
    assert curve.shape == (8,)
    for j in range(1, 9):
        per_query = ndcg_at_k(p, y, top_k=j, mask=mask, ties=ties, empty_query=empty)
        assert float(curve[j - 1]) == pytest.approx(float(torch.nanmean(per_query)), abs=1e-14), j
    assert float(curve[-1]) == pytest.approx(float(value), abs=1e-14)
    assert NDCGScore(top_k=None).named_curves() == {}  # the full list has no cut-offs to plot


def test_full_ranking_ndcg_keeps_ndcg_at_every_cutoff_up_to_the_largest():
    g = torch.Generator().manual_seed(3)
    users, items = 25, 40
    scores = torch.randn(users, items, generator=g)
    heldout = torch.stack([torch.randperm(items, generator=g)[:4] for _ in range(users)])
    heldout[:, 3] = -1
    heldout[2] = -1  # a user without held-out items
    relevance = torch.randint(1, 4, (users, 4), generator=g).double()
    exclude = torch.stack([torch.randperm(items, generator=g)[:10] for _ in range(users)])
    metric = FullRankingNDCGScore(top_ks=(3, 50))  # 50 > 40 items: the full list
    metric.update(scores[:11], heldout[:11], relevance[:11], exclude[:11])
    metric.update(scores[11:], heldout[11:], relevance[11:], exclude[11:])
    values = metric.compute()
    curve = metric.named_curves()["full_ranking_ndcg@k"]
    assert curve.shape == (50,)
    for j in list(range(1, 42)) + [50]:
        expected = full_ranking_ndcg(scores, heldout, relevance, exclude, top_k=j).mean()
        assert float(curve[j - 1]) == pytest.approx(float(expected), abs=1e-14), j
    assert float(curve[2]) == pytest.approx(float(values[3]), abs=1e-14)


def test_a_stage_merges_the_curves_that_describe_the_same_data():
    s, y = tied_binary(4)
    p, rel, mask = ranking_lists(5)
    metrics = EvaluationMetrics({"ap": APScore(), "auroc": AUROCScore(), "ndcg@3": NDCGScore(top_k=3),
                                 "ndcg@6": NDCGScore(top_k=6)})
    metrics.update_from_batch(s, {"y": y})
    metrics.update_from_batch(p, {"relevance": rel, "mask": mask})
    metrics.named_values()
    curves = metrics.named_curves()
    assert sorted(curves) == ["ndcg@k", "roc"]
    assert curves["ndcg@k"].shape == (6,)  # the longer of NDCG@1..3 and NDCG@1..6
    torch.testing.assert_close(curves["ndcg@k"][:3], metrics["ndcg_at_3"].named_curves()["ndcg@k"], rtol=0, atol=1e-15)
    metrics.reset()
    assert metrics.named_curves() == {}


def test_thinning_keeps_the_ends_and_the_shape():
    _, y = tied_binary(6, n=100_000)
    metric = APScore()
    metric.update(torch.randn(100_000, dtype=torch.float64) + y, y)
    metric.compute()
    recall, precision = metric.named_curves()["roc"].precision_recall()
    keep = thin(recall, precision, 1000)
    assert keep.numel() <= 1000 and int(keep[0]) == 0 and int(keep[-1]) == recall.numel() - 1
    assert bool((keep.diff() > 0).all())
    # between two kept vertices, the dropped ones span at most one step (the length / 998) of the curve's length
    # (|Δrecall| + |Δprecision|): a single long segment, e.g. the first positive's jump in precision, is kept exact
    length = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.float64),
                                     recall.diff().abs() + precision.diff().abs()]), 0)
    assert float((length[keep[1:] - 1] - length[keep[:-1]]).max()) <= float(length[-1]) / 998 * (1 + 1e-9)
    assert thin(recall[:10], precision[:10], 1000).tolist() == list(range(10))
