"""Tests of fccolit.metrics.functional.ranking: NDCG@k of padded lists against brute force over tie orders and
torchmetrics with the gain mapped; full-ranking NDCG@k against naive per-user loops and a reference that builds the
dense gain table (the previous implementation's rule, written out plainly: excluded items at -inf, held-out items
keeping their own score, one ``torch.topk`` over all items, the gains read from a dense ``[U, I]`` float64 table; it
shares the tie policy, ``topk``'s order, so values must agree bit for bit, ties included)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torchmetrics.retrieval import RetrievalNormalizedDCG

from fccolit.metrics import FullRankingNDCGScore
from fccolit.metrics.functional import full_ranking_ndcg, ndcg_at_k
from fccolit.metrics.functional.ranking import _full_ranking_ndcg_prefix, _heldout_gain_lookup, _lookup_gains

from ..helpers import dense_full_ranking_ndcg, full_ranking_problem, recsys_chunk

TOL = 1e-12


# ------------------------------------------------------------------------------------------------------
# NDCG@k of padded lists
# ------------------------------------------------------------------------------------------------------
def _brute_ndcg(p, y, k, gain, reducer):
    """Reduce NDCG@k over every tie-breaking order of the ranking by decreasing score."""
    L = len(p)
    g = [(2.0**v - 1.0) if gain == "exp2" else float(v) for v in y]
    kk = L if k is None else min(k, L)
    idcg = sum(v / math.log2(r + 2) for r, v in enumerate(sorted(g, reverse=True)[:kk]))
    values = []
    for perm in itertools.permutations(range(L)):
        if all(p[perm[i]] >= p[perm[i + 1]] for i in range(L - 1)):
            dcg = sum(g[perm[r]] / math.log2(r + 2) for r in range(kk))
            values.append(dcg / idcg)
    return reducer(values)


@pytest.mark.parametrize("gain", ["exp2", "linear"])
@pytest.mark.parametrize("k", [None, 1, 2, 3, 5])
def test_ndcg_brute_force_over_tie_orders(k, gain):
    g = torch.Generator().manual_seed(0 if k is None else k)
    reducers = {"average": lambda v: sum(v) / len(v), "pessimistic": min, "optimistic": max}
    for trial in range(12):
        L = 3 + trial % 4  # 3..6
        p = torch.randint(0, 3, (1, L), generator=g).double()  # heavy ties
        y = torch.randint(0, 4, (1, L), generator=g)
        if y.sum() == 0:
            y[0, 0] = 2
        for ties, red in reducers.items():
            got = float(ndcg_at_k(p, y, top_k=k, gain=gain, ties=ties)[0])
            exp = _brute_ndcg(p[0].tolist(), y[0].tolist(), k, gain, red)
            assert got == pytest.approx(exp, abs=TOL), (ties, p, y)


def test_ndcg_vectorized_batch_equals_rows_and_ideal_is_one():
    g = torch.Generator().manual_seed(1)
    p = torch.randint(0, 4, (20, 6), generator=g).double()
    y = torch.randint(0, 3, (20, 6), generator=g)
    y[:, 0] = 1
    for ties in ("average", "pessimistic", "optimistic"):
        batch = ndcg_at_k(p, y, top_k=3, ties=ties)
        rows = torch.cat([ndcg_at_k(p[i : i + 1], y[i : i + 1], top_k=3, ties=ties) for i in range(20)])
        assert torch.allclose(batch, rows, atol=0, rtol=0)
        # scores that order the items exactly by relevance (ties only among equal relevance) give 1
        assert torch.allclose(ndcg_at_k(y.double(), y, top_k=3, ties=ties), torch.ones(20, dtype=torch.float64))
        assert torch.allclose(ndcg_at_k(y.double(), y, ties=ties), torch.ones(20, dtype=torch.float64))
    # a tied group straddling k: constant scorer = expectation over random order
    got = ndcg_at_k(torch.zeros(1, 4), torch.tensor([[1, 0, 0, 0]]), top_k=2)
    assert float(got[0]) == pytest.approx((1 + 1 / math.log2(3)) / 4, abs=TOL)


def test_ndcg_empty_policies():
    p = torch.tensor([[0.3, 0.2, 0.1], [0.1, 0.2, 0.3], [0.5, 0.4, 0.0]])
    y = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, True], [False, False, False]])
    assert ndcg_at_k(p, y, empty_query="zero", mask=mask).tolist() == [1.0, 0.0, 0.0]
    assert ndcg_at_k(p, y, empty_query="one", mask=mask).tolist() == [1.0, 1.0, 1.0]
    out = ndcg_at_k(p, y, empty_query="skip", mask=mask)
    assert out[0] == 1.0 and torch.isnan(out[1:]).all()
    # the relevant item is padded out -> the query is empty
    y2 = torch.tensor([[0, 0, 2]])
    assert float(ndcg_at_k(p[:1], y2, mask=torch.tensor([[True, True, False]]), empty_query="one")[0]) == 1.0
    assert ndcg_at_k(torch.zeros(0, 5), torch.zeros(0, 5)).shape == (0,)


def test_ndcg_padding_does_not_change_value():
    g = torch.Generator().manual_seed(2)
    Q, L, P = 15, 5, 4
    p = torch.randint(0, 3, (Q, L), generator=g).double()
    p[0, 1] = float("-inf")  # a real -inf score must still rank above padding
    y = torch.randint(0, 3, (Q, L), generator=g)
    ref = {t: ndcg_at_k(p, y, top_k=k, ties=t) for t in ("average", "pessimistic", "optimistic") for k in (3,)}
    # pad with garbage (huge / NaN scores, large labels) at random positions
    pp = torch.cat([p, torch.full((Q, P), 1e9)], dim=1)
    pp[:, -1] = float("nan")
    yy = torch.cat([y, torch.full((Q, P), 7)], dim=1)
    mm = torch.cat([torch.ones(Q, L, dtype=torch.bool), torch.zeros(Q, P, dtype=torch.bool)], dim=1)
    perm = torch.randperm(L + P, generator=g)
    pp, yy, mm = pp[:, perm], yy[:, perm], mm[:, perm]
    for t, r in ref.items():
        assert torch.allclose(ndcg_at_k(pp, yy, top_k=3, mask=mm, ties=t), r, atol=1e-15, rtol=0)


@pytest.mark.parametrize("k", [None, 1, 3, 10])
def test_ndcg_matches_torchmetrics_with_mapped_gain(k):
    g = torch.Generator().manual_seed(3)
    Q, L = 30, 8
    p = (torch.randn(Q, L, generator=g, dtype=torch.float64) * 2).round()  # ties
    y = torch.randint(0, 4, (Q, L), generator=g)
    y[:3] = 0  # empty queries: torchmetrics' default "neg" = our "zero"
    indexes = torch.arange(Q).repeat_interleave(L)
    # aggregation=identity returns the per-query values (in query order); torchmetrics computes in float32
    for gain, mapped in (("exp2", 2.0 ** y.double() - 1.0), ("linear", y.double())):
        tm = RetrievalNormalizedDCG(top_k=k, aggregation=lambda x, dim: x)
        tm.update(p.flatten(), mapped.flatten(), indexes=indexes)
        ours = ndcg_at_k(p, y, top_k=k, gain=gain)
        assert torch.allclose(ours, tm.compute().double(), atol=1e-6, rtol=0)
        tm_mean = RetrievalNormalizedDCG(top_k=k)
        tm_mean.update(p.flatten(), mapped.flatten(), indexes=indexes)
        assert float(ours.mean()) == pytest.approx(float(tm_mean.compute()), abs=1e-6)


def test_ndcg_errors():
    p, y = torch.randn(2, 4), torch.ones(2, 4)
    bad = p.clone()
    bad[0, 1] = bad[1, 2] = bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"3 NaN value\(s\).*model produced NaN"):
        ndcg_at_k(bad, y)
    with pytest.raises(ValueError, match="same shape"):
        ndcg_at_k(p, torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"\[Q, L\]"):
        ndcg_at_k(torch.randn(4), torch.ones(4))
    with pytest.raises(ValueError, match="k must be >= 1"):
        ndcg_at_k(p, y, top_k=0)
    with pytest.raises(ValueError, match="ties"):
        ndcg_at_k(p, y, ties="random")
    with pytest.raises(ValueError, match=">= 0"):
        ndcg_at_k(p, -y)
    with pytest.raises(ValueError, match="mask"):
        ndcg_at_k(p, y, mask=torch.ones(2, 3, dtype=torch.bool))


# ------------------------------------------------------------------------------------------------------
# full-ranking NDCG@k
# ------------------------------------------------------------------------------------------------------
def _naive_full_ranking(scores, heldout, rel, exclude, k, gain):
    out = []
    for u in range(scores.shape[0]):
        held = {int(i): float(r) for i, r in zip(heldout[u], rel[u]) if i >= 0}
        excl = {int(i) for i in exclude[u] if i >= 0} - set(held) if exclude is not None else set()
        cand = [i for i in range(scores.shape[1]) if i not in excl]
        cand.sort(key=lambda i: -float(scores[u, i]))
        G = (lambda r: 2.0**r - 1.0) if gain == "exp2" else (lambda r: r)
        dcg = sum(G(held.get(i, 0.0)) / math.log2(r + 2) for r, i in enumerate(cand[:k]))
        ideal = sorted((G(r) for r in held.values()), reverse=True)[:k]
        idcg = sum(v / math.log2(r + 2) for r, v in enumerate(ideal))
        out.append(dcg / idcg if idcg > 0 else 0.0)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("gain", ["exp2", "linear"])
@pytest.mark.parametrize("k", [1, 5, 10, 100])
def test_full_ranking_ndcg_matches_naive_loop(k, gain):
    scores, heldout, rel, exclude = recsys_chunk(k)
    got = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=k, gain=gain)
    exp = _naive_full_ranking(scores, heldout, rel, exclude, k, gain)
    assert torch.allclose(got, exp, atol=1e-12, rtol=0)
    # without exclusion, every item competes
    got = full_ranking_ndcg(scores, heldout, rel, None, top_k=k, gain=gain)
    assert torch.allclose(got, _naive_full_ranking(scores, heldout, rel, None, k, gain), atol=1e-12, rtol=0)


def test_full_ranking_excluded_items_never_count_and_empty_users():
    scores = torch.tensor([[9.0, 8.0, 1.0, 0.5, 0.0], [0.0, 1.0, 2.0, 3.0, 4.0]])
    heldout = torch.tensor([[2, -1], [0, 1]])
    rel = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    exclude = torch.tensor([[0, 1, -1], [-1, -1, -1]])
    out = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=1)
    assert out.tolist() == [1.0, 0.0]  # items 0 and 1 removed: the held-out item 2 is ranked first
    out = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=1, empty_query="skip")
    assert out[0] == 1.0 and torch.isnan(out[1])
    # relevant training items are ignored even if their scores are highest
    assert float(full_ranking_ndcg(scores, heldout, rel, None, top_k=2)[0]) == 0.0


def test_full_ranking_errors():
    scores = torch.randn(2, 5)
    heldout = torch.tensor([[1, -1], [2, 3]])
    rel = torch.ones(2, 2)
    with pytest.raises(ValueError, match="item ids"):
        full_ranking_ndcg(scores, torch.tensor([[5, -1], [2, 3]]), rel)
    with pytest.raises(ValueError, match="shape"):
        full_ranking_ndcg(scores, heldout, torch.ones(2, 3))
    bad = scores.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"1 NaN value\(s\)"):
        full_ranking_ndcg(bad, heldout, rel)
    with pytest.raises(ValueError, match="k must be >= 1"):
        full_ranking_ndcg(scores, heldout, rel, top_k=0)


@pytest.mark.parametrize("tie_levels", [None, 3])
@pytest.mark.parametrize("k", [1, 2, 5, 17, 60, 100])
def test_equals_dense_reference_with_ties_exclusion_and_empty_users(k, tie_levels):
    for seed in range(3):
        scores, heldout, rel, exclude = full_ranking_problem(seed * 10 + k, tie_levels=tie_levels)
        for gain in ("exp2", "linear"):
            for empty in ("zero", "one", "skip"):
                for ex in (exclude, None):
                    got = full_ranking_ndcg(scores, heldout, rel, ex, top_k=k, gain=gain, empty_query=empty)
                    expected = dense_full_ranking_ndcg(scores, heldout, rel, ex, k, gain, empty)
                    assert torch.equal(torch.isnan(got), torch.isnan(expected))
                    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15, equal_nan=True)
    assert bool(torch.isnan(full_ranking_ndcg(scores, heldout, rel, exclude, top_k=k, empty_query="skip")).any())


def test_float32_scores_and_one_topk_for_several_cutoffs():
    scores, heldout, rel, exclude = full_ranking_problem(7, users=40, items=300, max_heldout=9, max_exclude=80,
                                            dtype=torch.float32)
    ks = (1, 3, 10, 50, 400)
    prefix, ideal = _full_ranking_ndcg_prefix(scores, heldout, rel, exclude, max(ks), "exp2")
    for k in ks:
        expected = dense_full_ranking_ndcg(scores, heldout, rel, exclude, k)
        torch.testing.assert_close(torch.where(ideal > 0, prefix[:, k - 1], torch.zeros_like(ideal)),
                                   expected, rtol=0, atol=1e-15)
    metric = FullRankingNDCGScore(ks)
    metric.update(scores[:17], heldout[:17], rel[:17], exclude[:17])
    metric.update(scores[17:], heldout[17:], rel[17:], exclude[17:])
    out = metric.compute()
    for k in ks:
        assert float(out[k]) == pytest.approx(float(dense_full_ranking_ndcg(scores, heldout, rel, exclude, k).mean()),
                                              abs=1e-14)


def test_gain_lookup_matches_a_dense_table_including_repeated_ids():
    g = torch.Generator().manual_seed(2)
    users, items, held = 50, 40, 7
    heldout = torch.randint(-1, items, (users, held), generator=g)  # padding anywhere, repeated ids allowed
    gains = torch.rand(users, held, generator=g, dtype=torch.float64)
    table = torch.zeros(users, items, dtype=torch.float64)
    table.scatter_reduce_(1, heldout.clamp_min(0), torch.where(heldout >= 0, gains, 0.0), reduce="amax")
    keys, values = _heldout_gain_lookup(heldout, gains)
    queries = torch.randint(0, items, (users, 25), generator=g)
    assert torch.equal(_lookup_gains(keys, values, queries), table.gather(1, queries))
    empty_keys = torch.zeros(users, 0, dtype=torch.long)
    assert not bool(_lookup_gains(empty_keys, torch.zeros(users, 0, dtype=torch.float64), queries).any())


def test_no_heldout_column_and_fewer_items_than_k():
    scores = torch.randn(4, 3, dtype=torch.float64)
    out = full_ranking_ndcg(scores, torch.zeros(4, 0, dtype=torch.long), torch.zeros(4, 0), top_k=5, empty_query="one")
    assert out.tolist() == [1.0] * 4
    heldout, rel = torch.tensor([[0], [1], [2], [-1]]), torch.tensor([[1.0], [2.0], [1.0], [0.0]])
    exclude = torch.tensor([[1, 2], [0, 2], [-1, -1], [0, 1]])  # every other item excluded
    assert full_ranking_ndcg(scores, heldout, rel, exclude, top_k=5).tolist()[:2] == [1.0, 1.0]


@pytest.mark.parametrize("nan", [math.nan, -math.nan])  # either sign bit
def test_nan_scores_are_found_anywhere_without_a_full_pass(nan):
    scores, heldout, rel, exclude = full_ranking_problem(4, users=6, items=30, max_exclude=10)
    positions = [(0, None), (2, "excluded"), (3, "heldout")]
    for user, where in positions:
        bad = scores.clone()
        if where == "excluded":
            item = int(exclude[user][(exclude[user] >= 0) & ~torch.isin(exclude[user], heldout[user])][0])
        elif where == "heldout":
            item = int(heldout[user][heldout[user] >= 0][0])
        else:
            item = int(torch.argmin(bad[user]))  # the lowest score: far from the top k
        bad[user, item] = nan
        with pytest.raises(ValueError, match=r"1 NaN value\(s\)"):
            full_ranking_ndcg(bad, heldout, rel, exclude, top_k=1)
        with pytest.raises(ValueError, match=r"1 NaN value\(s\)"):
            FullRankingNDCGScore((1, 3)).update(bad, heldout, rel, exclude)


# ------------------------------------------------------------------------------------------------------
# CUDA (only where a GPU is present)
# ------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    p = torch.randint(0, 3, (50, 9)).double()
    t = torch.randint(0, 3, (50, 9))
    mask = torch.rand(50, 9) > 0.2
    for ties in ("average", "pessimistic", "optimistic"):
        a = ndcg_at_k(p, t, top_k=4, mask=mask, ties=ties)
        b = ndcg_at_k(p.cuda(), t.cuda(), top_k=4, mask=mask.cuda(), ties=ties).cpu()
        assert torch.allclose(a, b, atol=1e-12)
    scores, heldout, rel, exclude = recsys_chunk(0)
    a = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=10)
    b = full_ranking_ndcg(scores.cuda(), heldout.cuda(), rel.cuda(), exclude.cuda(), top_k=10).cpu()
    assert torch.allclose(a, b, atol=1e-12)
