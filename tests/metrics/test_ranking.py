"""Tests of fccolit.metrics.ranking: NDCGScore and FullRankingNDCGScore sum per-query values over batches into the
functional means, keep NDCG@j for every cut-off j, take updates after inference mode, reuse their scratch buffer, and
pass the shared MetricTester."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from fccolit.metrics import FullRankingNDCGScore, NDCGScore
from fccolit.metrics.functional import full_ranking_ndcg, ndcg_at_k

from .helpers import dense_full_ranking_ndcg, full_ranking_problem, ranking_lists, recsys_chunk
from .testers import CHECKS, MetricTester, cases_of


# ------------------------------------------------------------------------------------------------------
# NDCGScore
# ------------------------------------------------------------------------------------------------------
def test_ndcg_metric_class_sum_count():
    g = torch.Generator().manual_seed(4)
    p = torch.randn(12, 7, generator=g)
    y = torch.randint(0, 3, (12, 7), generator=g)
    y[5] = 0
    mask = torch.rand(12, 7, generator=g) > 0.2
    for empty in ("zero", "one", "skip"):
        metric = NDCGScore(top_k=5, empty_query=empty)
        metric.update(p[:4], y[:4], mask[:4])
        metric.update(p[4:], y[4:], mask=mask[4:])
        per_q = ndcg_at_k(p, y, top_k=5, mask=mask, empty_query=empty)
        assert float(metric.compute()) == pytest.approx(float(torch.nanmean(per_q)), abs=1e-12)
    metric = NDCGScore(top_k=3, empty_query="skip")
    with warnings.catch_warnings():  # torchmetrics warns about compute() before update()
        warnings.simplefilter("ignore", UserWarning)
        assert torch.isnan(metric.compute())  # no queries: NaN, no crash
    metric.update(torch.randn(2, 3), torch.zeros(2, 3))
    assert torch.isnan(metric.compute())


def test_ndcg_score_errors():
    p, y = torch.randn(2, 4), torch.ones(2, 4)
    bad = p.clone()
    bad[0, 1] = bad[1, 2] = bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"3 NaN value\(s\)"):
        NDCGScore(top_k=2).update(bad, y)
    with pytest.raises(ValueError, match="k must be >= 1"):
        NDCGScore(top_k=-1)


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


# ------------------------------------------------------------------------------------------------------
# FullRankingNDCGScore
# ------------------------------------------------------------------------------------------------------
def test_full_ranking_metric_chunks():
    chunks = [recsys_chunk(s, U=5 + s) for s in range(3)]
    metric = FullRankingNDCGScore(top_ks=(1, 5, 20))
    for c in chunks:
        metric.update(*c)
    out = metric.compute()
    assert set(out) == {1, 5, 20}
    for k in (1, 5, 20):
        per_user = torch.cat([full_ranking_ndcg(*c, top_k=k) for c in chunks])
        assert float(out[k]) == pytest.approx(float(per_user.mean()), abs=1e-12)
    skip = FullRankingNDCGScore(top_ks=(5,), empty_query="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert math.isnan(float(skip.compute()[5]))
    for c in chunks:
        skip.update(*c)
    per_user = torch.cat([full_ranking_ndcg(*c, top_k=5, empty_query="skip") for c in chunks])
    assert float(skip.compute()[5]) == pytest.approx(float(torch.nanmean(per_user)), abs=1e-12)


def test_full_ranking_ndcg_names_each_cutoff():
    full = FullRankingNDCGScore(top_ks=(1, 3), names=("ndcg@1", "ndcg"))
    batch = {"heldout_items": torch.tensor([[2, -1]]), "heldout_relevance": torch.tensor([[1.0, 0.0]])}
    assert full.reads(batch) and not NDCGScore().reads(batch)
    full.update_from_batch(torch.tensor([[0.3, 0.2, 0.1]]), batch)  # the held-out item ranks third
    assert {k: float(v) for k, v in full.named_values("unused").items()} == pytest.approx({"ndcg@1": 0.0, "ndcg": 0.5})
    with pytest.raises(ValueError, match="one logged name per cut-off"):
        FullRankingNDCGScore(top_ks=(1, 3), names=("ndcg@1",))


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


def test_metric_reuses_its_scratch_buffer_across_chunks_dtypes_and_inference_mode():
    scores, heldout, rel, exclude = full_ranking_problem(11, users=30, items=50)
    expected = dense_full_ranking_ndcg(scores, heldout, rel, exclude, 5)
    metric = FullRankingNDCGScore((5,))
    with torch.inference_mode():  # trainer.validate: the scratch buffer is an inference tensor
        metric.update(scores[:20], heldout[:20], rel[:20], exclude[:20])
    scratch = metric._scratch
    metric.update(scores[20:25], heldout[20:25], rel[20:25], exclude[20:25])  # outside inference mode: new buffer
    assert metric._scratch is not scratch and not metric._scratch.is_inference()
    scratch = metric._scratch
    metric.update(scores[25:27], heldout[25:27], rel[25:27], exclude[25:27])  # smaller chunk: reused
    assert metric._scratch is scratch
    metric.update(scores[27:].float(), heldout[27:], rel[27:], exclude[27:])  # another dtype: new buffer
    assert metric._scratch.dtype == torch.float32
    assert float(metric.compute()[5]) == pytest.approx(float(expected.mean()), abs=1e-15)
    assert scores.equal(full_ranking_problem(11, users=30, items=50)[0])  # the caller's scores are never modified
    metric.reset()
    assert metric._scratch is None


# ------------------------------------------------------------------------------------------------------
# both metrics: updates after inference mode
# ------------------------------------------------------------------------------------------------------
def test_metric_states_survive_inference_mode_then_training_mode():
    """trainer.validate runs under inference mode; a later fit updates the same metric objects."""
    ndcg, full = NDCGScore(top_k=2), FullRankingNDCGScore(top_ks=(2,))
    preds, target = torch.tensor([[0.3, 0.1, 0.2]]), torch.tensor([[1.0, 0.0, 2.0]])
    items, rel = torch.tensor([[2]]), torch.tensor([[1.0]])
    with torch.inference_mode():  # what trainer.validate does: update, compute, reset under inference mode
        ndcg.update(preds, target)
        full.update(preds, items, rel)
        ndcg.compute(), full.compute()
        ndcg.reset(), full.reset()
    ndcg.update(preds, target)  # raised "Inplace update to inference tensor outside InferenceMode"
    full.update(preds, items, rel)
    assert 0 < float(ndcg.compute()) <= 1 and 0 < float(full.compute()[2]) <= 1


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", cases_of(NDCGScore, FullRankingNDCGScore), ids=str)
def test_ranking_metrics_pass_the_metric_tester(case, check):
    MetricTester().check(check, case)
