"""Tests of fccolit.metrics.figures: thinning a curve keeps its ends and its shape (the figures themselves are drawn
in tests/callbacks/test_figures.py)."""

import torch

from fccolit.metrics import APScore
from fccolit.metrics.figures import thin

from .helpers import tied_binary


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
