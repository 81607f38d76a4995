"""Full-ranking NDCG@k (top-k + held-out lookup) against a naive reference that builds the dense gain table.

The reference is the previous implementation's rule, written out plainly: excluded items at -inf (held-out items
keep their own score), one ``torch.topk`` over all items, the gains read from a dense ``[U, I]`` float64 table. It
shares the tie policy (``topk``'s order) with the metric, so values must agree bit for bit, ties included.
"""

from __future__ import annotations

import math

import pytest
import torch

from fccolit.metrics import FullRankingNDCGScore
from fccolit.metrics.functional import full_ranking_ndcg
from fccolit.metrics.functional.ranking import _full_ranking_ndcg_prefix, _heldout_gain_lookup, _lookup_gains


def dense_reference(scores, heldout, rel, exclude, k, gain="exp2", empty="zero"):
    """``[U]`` NDCG@k with a dense gain table and a Python loop over users for the ideal DCG."""
    n_users, n_items = scores.shape
    g = (2.0 ** rel.double() - 1.0) if gain == "exp2" else rel.double()
    table = torch.zeros(n_users, n_items, dtype=torch.float64)
    ranked = scores.clone()
    for u in range(n_users):
        for i, v in zip(heldout[u].tolist(), g[u].tolist()):
            if i >= 0:
                table[u, i] = max(table[u, i].item(), v)
        if exclude is not None:
            for i in exclude[u].tolist():
                if i >= 0 and i not in heldout[u].tolist():
                    ranked[u, i] = -math.inf
    kk = min(k, n_items)
    top = torch.topk(ranked, kk, dim=1, largest=True, sorted=True).indices
    out = []
    for u in range(n_users):
        dcg = sum(table[u, top[u, r]].item() / math.log2(r + 2) for r in range(kk))
        gains = sorted((v for i, v in zip(heldout[u].tolist(), g[u].tolist()) if i >= 0), reverse=True)[:k]
        idcg = sum(v / math.log2(r + 2) for r, v in enumerate(gains))
        if idcg > 0:
            out.append(dcg / idcg)
        else:
            out.append({"zero": 0.0, "one": 1.0, "skip": math.nan}[empty])
    return torch.tensor(out, dtype=torch.float64)


def problem(seed, users=23, items=60, max_heldout=6, max_exclude=30, tie_levels=None, dtype=torch.float64):
    """Random chunk: uneven held-out / excluded counts (some users with none), graded relevance (zeros included),
    held-out items listed as excluded too, and, with ``tie_levels``, scores on a few levels (many ties)."""
    g = torch.Generator().manual_seed(seed)
    if tie_levels:
        scores = torch.randint(tie_levels, (users, items), generator=g).to(dtype)
    else:
        scores = torch.randn(users, items, generator=g, dtype=torch.float64).to(dtype)
    heldout = torch.full((users, max_heldout), -1, dtype=torch.long)
    rel = torch.zeros(users, max_heldout)
    exclude = torch.full((users, max_exclude), -1, dtype=torch.long)
    for u in range(users):
        perm = torch.randperm(items, generator=g)
        nh = int(torch.randint(max_heldout + 1, (), generator=g)) if u % 5 else 0
        ne = int(torch.randint(max_exclude + 1, (), generator=g))
        slots = torch.randperm(max_heldout, generator=g)[:nh]  # padding anywhere in the row
        heldout[u, slots] = perm[:nh]
        rel[u, slots] = torch.randint(0, 4, (nh,), generator=g).float()  # relevance 0 allowed
        exclude[u, torch.randperm(max_exclude, generator=g)[:ne]] = perm[nh : nh + ne]
        if nh and ne and u % 3 == 0:
            exclude[u, (exclude[u] >= 0).nonzero()[0]] = perm[0]  # a held-out item listed as excluded
        scores[u, perm[nh : nh + ne]] += 2  # training items score high: they must not count
    return scores, heldout, rel, exclude


@pytest.mark.parametrize("tie_levels", [None, 3])
@pytest.mark.parametrize("k", [1, 2, 5, 17, 60, 100])
def test_equals_dense_reference_with_ties_exclusion_and_empty_users(k, tie_levels):
    for seed in range(3):
        scores, heldout, rel, exclude = problem(seed * 10 + k, tie_levels=tie_levels)
        for gain in ("exp2", "linear"):
            for empty in ("zero", "one", "skip"):
                for ex in (exclude, None):
                    got = full_ranking_ndcg(scores, heldout, rel, ex, top_k=k, gain=gain, empty_query=empty)
                    expected = dense_reference(scores, heldout, rel, ex, k, gain, empty)
                    assert torch.equal(torch.isnan(got), torch.isnan(expected))
                    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15, equal_nan=True)
    assert bool(torch.isnan(full_ranking_ndcg(scores, heldout, rel, exclude, top_k=k, empty_query="skip")).any())


def test_float32_scores_and_one_topk_for_several_cutoffs():
    scores, heldout, rel, exclude = problem(7, users=40, items=300, max_heldout=9, max_exclude=80,
                                            dtype=torch.float32)
    ks = (1, 3, 10, 50, 400)
    prefix, ideal = _full_ranking_ndcg_prefix(scores, heldout, rel, exclude, max(ks), "exp2")
    for k in ks:
        expected = dense_reference(scores, heldout, rel, exclude, k)
        torch.testing.assert_close(torch.where(ideal > 0, prefix[:, k - 1], torch.zeros_like(ideal)),
                                   expected, rtol=0, atol=1e-15)
    metric = FullRankingNDCGScore(ks)
    metric.update(scores[:17], heldout[:17], rel[:17], exclude[:17])
    metric.update(scores[17:], heldout[17:], rel[17:], exclude[17:])
    out = metric.compute()
    for k in ks:
        assert float(out[k]) == pytest.approx(float(dense_reference(scores, heldout, rel, exclude, k).mean()),
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
    scores, heldout, rel, exclude = problem(4, users=6, items=30, max_exclude=10)
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


def test_metric_reuses_its_scratch_buffer_across_chunks_dtypes_and_inference_mode():
    scores, heldout, rel, exclude = problem(11, users=30, items=50)
    expected = dense_reference(scores, heldout, rel, exclude, 5)
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
    assert scores.equal(problem(11, users=30, items=50)[0])  # the caller's scores are never modified
    metric.reset()
    assert metric._scratch is None
