"""QueryBatchSampler and the per-query item sampling: shapes, rank slices, uniformity, determinism, resume."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from fccolit.data import identity_collate
from fccolit.datasets.letor import ListwiseTrainDataset, ltr_pair_arrays
from fccolit.datasets.recommendation import RecommendationTrainDataset, build_recommendation_arrays
from fccolit.io.csr import unrated_items
from fccolit.io.ratings import Ratings
from fccolit.samplers.ranking import QueryBatch, QueryBatchSampler, batch_integers, batch_uniforms, sample_distinct

NUM_QUERIES = 50
ELIGIBLE = torch.ones(NUM_QUERIES, dtype=torch.bool)
ELIGIBLE[[3, 7, 11, 40]] = False  # queries without a relevant item


def epoch(sampler, e=0):
    sampler.set_epoch(e)
    return list(sampler)


# ---------------------------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("world", [1, 2, 4])
def test_global_batches_are_distinct_eligible_and_split_among_ranks(world):
    full = epoch(QueryBatchSampler(ELIGIBLE, 12, seed=4, rank=0, world_size=1))
    ranks = [epoch(QueryBatchSampler(ELIGIBLE, 12, seed=4, rank=r, world_size=world)) for r in range(world)]
    assert len(full) == math.ceil(46 / 12) == 4
    for b, global_batch in enumerate(full):
        assert isinstance(global_batch, QueryBatch) and len(global_batch) == 12
        assert len(set(global_batch)) == 12  # without replacement, also in the batch straddling two passes
        assert all(bool(ELIGIBLE[q]) for q in global_batch)
        slices = [ranks[r][b] for r in range(world)]
        assert all(len(s) == 12 // world for s in slices)
        assert sorted(itertools.chain(*slices)) == sorted(global_batch)  # disjoint and covering
        for r, s in enumerate(slices):
            assert s == global_batch[r::world]
            assert s.positions == list(range(r, 12, world))
            assert s.seed == global_batch.seed and s.batch_index == b
    seen = [q for b in full for q in b]
    assert set(seen) == set(torch.nonzero(ELIGIBLE).flatten().tolist())  # one pass visits every eligible query


def test_every_pass_visits_each_query_once_before_repeating():
    sampler = QueryBatchSampler(ELIGIBLE, 8, num_batches=23, seed=1)  # 184 draws = 4 passes of 46
    stream = [q for b in epoch(sampler) for q in b]
    for p in range(4):
        assert sorted(stream[46 * p : 46 * (p + 1)]) == sorted(torch.nonzero(ELIGIBLE).flatten().tolist())
    for b in epoch(sampler, 1):
        assert len(set(b)) == 8


def test_deterministic_per_seed_and_epoch_and_batch_seeds_differ():
    a, b = QueryBatchSampler(ELIGIBLE, 10, seed=5), QueryBatchSampler(ELIGIBLE, 10, seed=5)
    assert epoch(a, 0) == epoch(b, 0) and [x.seed for x in epoch(a, 0)] == [x.seed for x in epoch(b, 0)]
    assert epoch(a, 0) != epoch(a, 1)
    assert epoch(QueryBatchSampler(ELIGIBLE, 10, seed=6), 0) != epoch(a, 0)
    seeds = [x.seed for e in range(3) for x in epoch(a, e)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**63 for s in seeds)


def test_resume_mid_epoch_continues_the_same_stream():
    ref = epoch(QueryBatchSampler(ELIGIBLE, 6, seed=2), 3)
    s = QueryBatchSampler(ELIGIBLE, 6, seed=2)
    s.set_epoch(3)
    it = iter(s)
    head = [next(it) for _ in range(3)]
    resumed = QueryBatchSampler(ELIGIBLE, 6, seed=2)
    resumed.load_state_dict(s.state_dict(batches_consumed=3))
    resumed.set_epoch(3)
    tail = list(resumed)
    assert head + tail == ref
    assert [b.seed for b in head + tail] == [b.seed for b in ref]
    assert [b.batch_index for b in tail] == list(range(3, len(ref)))


def test_sampler_errors():
    with pytest.raises(ValueError, match="no eligible query"):
        QueryBatchSampler(torch.zeros(5, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="between 1 and the number of eligible"):
        QueryBatchSampler(ELIGIBLE, 47)
    with pytest.raises(ValueError, match="distinct"):
        QueryBatchSampler([1, 1, 2], 2)
    with pytest.raises(ValueError, match="must divide evenly"):
        list(QueryBatchSampler(ELIGIBLE, 9, rank=0, world_size=2))
    with pytest.raises(ValueError, match="seed"):
        QueryBatchSampler(ELIGIBLE, 8, seed=1).load_state_dict({"seed": 2, "epoch": 0, "batches_consumed": 0})


def test_query_batch_pickles_with_its_keys():
    import pickle

    b = QueryBatch([4, 9], seed=77, positions=[1, 3], epoch=2, batch_index=5)
    c = pickle.loads(pickle.dumps(b))
    assert c == [4, 9] and (c.seed, c.positions, c.epoch, c.batch_index) == (77, [1, 3], 2, 5)


# ---------------------------------------------------------------------------------------------- random numbers
def test_batch_uniforms_are_slice_invariant_and_uniform():
    full = batch_uniforms(123, np.arange(64), stream=1, count=500)
    assert full.shape == (64, 500) and full.min() >= 0.0 and full.max() < 1.0
    for world in (2, 4):
        for r in range(world):
            np.testing.assert_array_equal(batch_uniforms(123, np.arange(r, 64, world), 1, 500), full[r::world])
    assert abs(full.mean() - 0.5) < 0.005  # 32,000 draws: sd of the mean 0.0016
    counts = np.bincount((full * 10).astype(int).ravel(), minlength=10)
    chi2 = ((counts - 3200) ** 2 / 3200).sum()
    assert chi2 < 40  # 9 degrees of freedom: p < 1e-5 above 40
    assert not np.array_equal(batch_uniforms(123, np.arange(4), 2, 5), batch_uniforms(123, np.arange(4), 1, 5))
    assert not np.array_equal(batch_uniforms(124, np.arange(4), 1, 5), batch_uniforms(123, np.arange(4), 1, 5))


def test_batch_integers_are_uniform_per_row_and_slice_invariant():
    high = np.array([1, 7, 26_744, 2**31 + 5])
    x = batch_integers(5, np.arange(4), 1, 70_000, high)
    assert x.dtype == np.int64 and (x >= 0).all() and (x < high[:, None]).all()
    assert (x[0] == 0).all()
    counts = np.bincount(x[1], minlength=7)
    assert ((counts - 10_000) ** 2 / 10_000).sum() < 35  # 6 degrees of freedom
    for row in (2, 3):
        assert abs(x[row].mean() / (high[row] - 1) - 0.5) < 0.01
    np.testing.assert_array_equal(batch_integers(5, np.arange(1, 4, 2), 1, 70_000, high[1::2]), x[1::2])
    with pytest.raises(ValueError, match="high must be in"):
        batch_integers(5, np.arange(2), 1, 3, np.array([0, 4]))


def test_sample_distinct_is_uniform_over_subsets():
    rows = 30_000
    u = batch_uniforms(9, np.arange(rows), 0, 2)
    pos, valid = sample_distinct(np.full(rows, 5), 2, u)
    assert valid.all() and (pos[:, 0] != pos[:, 1]).all() and pos.min() >= 0 and pos.max() < 5
    subsets = np.sort(pos, axis=1) @ np.array([5, 1])
    counts = np.bincount(subsets, minlength=25)[[a * 5 + b for a in range(5) for b in range(a + 1, 5)]]
    expected = rows / 10
    assert ((counts - expected) ** 2 / expected).sum() < 40  # 9 degrees of freedom


def test_sample_distinct_short_rows_and_per_row_counts():
    n = np.array([0, 2, 7, 7, 100])
    u = batch_uniforms(1, np.arange(5), 0, 4)
    pos, valid = sample_distinct(n, 4, u)
    np.testing.assert_array_equal(valid.sum(1), [0, 2, 4, 4, 4])
    np.testing.assert_array_equal(pos[1, :2], [0, 1])
    pos, valid = sample_distinct(n, 4, u, k_rows=np.array([3, 3, 1, 4, 2]))
    np.testing.assert_array_equal(valid.sum(1), [0, 2, 1, 4, 2])
    for row in range(5):
        chosen = pos[row][valid[row]]
        assert len(set(chosen.tolist())) == chosen.size and (chosen < max(n[row], 1)).all()


def test_unrated_items_brute_force():
    rng = np.random.default_rng(0)
    num_items = 40
    rows = [np.sort(rng.choice(num_items, size=s, replace=False)) for s in (0, 5, 39, 17, 1)]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    items = np.concatenate(rows).astype(np.int32)
    users = np.array([0, 1, 2, 3, 4, 1])
    unrated = [np.setdiff1d(np.arange(num_items), rows[u]) for u in users]
    width = min(len(x) for x in unrated)
    k = np.stack([rng.integers(0, len(x), size=width) for x in unrated])
    mapped = unrated_items(indptr, items, users, k)
    expected = np.stack([x[kk] for x, kk in zip(unrated, k)])
    np.testing.assert_array_equal(mapped, expected)
    every = unrated_items(indptr, items, np.array([3]), np.arange(23)[None, :])
    np.testing.assert_array_equal(every[0], unrated[3])


# ---------------------------------------------------------------------------------------------- datasets
def _toy_recommendation(num_users=30, num_items=25, seed=0, relevance="graded"):
    rng = np.random.default_rng(seed)
    users, items = [], []
    for u in range(num_users):
        count = int(rng.integers(3, 20)) if u != 5 else 25  # user 5 rated every item
        chosen = rng.choice(num_items, size=count, replace=False)
        users += [u + 1000] * count
        items += (chosen * 3 + 7).tolist()  # sparse raw ids
    n = len(users)
    ratings = Ratings(
        np.asarray(users), np.asarray(items), rng.integers(1, 11, n).astype(np.float32) / 2, rng.integers(0, 50, n)
    )
    return build_recommendation_arrays(ratings, num_test=1, num_val=1, relevance=relevance)


def test_recommendation_batches_positives_relevant_negatives_unrated():
    a = _toy_recommendation(relevance="binary")
    ds = RecommendationTrainDataset(a, num_positives=4, num_negatives=30, top_k=3)
    sampler = QueryBatchSampler(np.diff(a["pos_indptr"]) > 0, 8, seed=3)
    num_items = a["item_raw"].size
    for qb in epoch(sampler):
        batch = ds.__getitems__(qb)
        assert batch["items"].shape == batch["relevance"].shape == batch["pair_index"].shape == (8, 34)
        assert batch["mask"].dtype == torch.bool and batch["num_items"].dtype == torch.float32
        for r, q in enumerate(qb):
            rated = set(a["train_items"][a["train_indptr"][q] : a["train_indptr"][q + 1]].tolist())
            positives = a["pos_items"][a["pos_indptr"][q] : a["pos_indptr"][q + 1]].tolist()
            m, items, pair = batch["mask"][r], batch["items"][r], batch["pair_index"][r]
            got_pos = items[:4][m[:4]].tolist()
            assert len(set(got_pos)) == len(got_pos) == min(4, len(positives)) and set(got_pos) <= set(positives)
            assert (batch["relevance"][r, :4][m[:4]] > 0).all()
            for t in range(4):  # the pair id points at the (user, item) pair of the CSR
                if m[t]:
                    assert a["pos_items"][pair[t]] == items[t]
                    assert a["pos_indptr"][q] <= pair[t] < a["pos_indptr"][q + 1]
                    assert batch["relevance"][r, t] == a["pos_relevance"][pair[t]]
            negatives = items[4:][m[4:]].tolist()
            assert not set(negatives) & rated and all(0 <= i < num_items for i in negatives)
            assert (pair[4:] == -1).all() and (batch["relevance"][r, 4:] == 0).all()
            assert batch["num_relevant"][r] == len(positives)
        assert (batch["num_items"] == num_items).all()


def test_user_who_rated_every_item_gets_masked_negatives():
    a = _toy_recommendation()
    ds = RecommendationTrainDataset(a, num_positives=3, num_negatives=6)
    user = int(np.flatnonzero(a["user_raw"] == 1005)[0])
    unrated = a["item_raw"].size - (a["train_indptr"][user + 1] - a["train_indptr"][user])
    batch = ds.__getitems__([user])
    assert bool(batch["mask"][0, 3:].any()) == (unrated > 0)
    assert batch["mask"][0, :3].all()


def test_negatives_are_uniform_over_unrated_items():
    a = _toy_recommendation(seed=2)
    ds = RecommendationTrainDataset(a, num_positives=1, num_negatives=400)
    q = 0
    rated = a["train_items"][a["train_indptr"][q] : a["train_indptr"][q + 1]]
    unrated = np.setdiff1d(np.arange(a["item_raw"].size), rated)
    batch = ds.__getitems__(QueryBatch([q] * 25, seed=4, positions=range(25)))  # 25 independent rows
    counts = np.bincount(batch["items"][:, 1:].flatten().numpy(), minlength=a["item_raw"].size).astype(float)
    assert counts[rated].sum() == 0
    expected = 10_000 / unrated.size
    chi2 = ((counts[unrated] - expected) ** 2 / expected).sum()
    dof = unrated.size - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof)


def test_item_draws_do_not_depend_on_the_split_among_ranks():
    a = _toy_recommendation()
    ds = RecommendationTrainDataset(a, num_positives=3, num_negatives=10)
    single = epoch(QueryBatchSampler(np.diff(a["pos_indptr"]) > 0, 8, seed=1))
    split = [epoch(QueryBatchSampler(np.diff(a["pos_indptr"]) > 0, 8, seed=1, rank=r, world_size=2)) for r in (0, 1)]
    for b, gb in enumerate(single):
        whole = ds.__getitems__(gb)
        for r in (0, 1):
            part = ds.__getitems__(split[r][b])
            for key in ("query", "items", "pair_index", "mask", "relevance"):
                assert torch.equal(part[key], whole[key][r::2])


def test_resumed_loader_reproduces_the_items():
    a = _toy_recommendation()
    ds = RecommendationTrainDataset(a, num_positives=3, num_negatives=10)
    eligible = np.diff(a["pos_indptr"]) > 0
    ref = [ds.__getitems__(b) for b in epoch(QueryBatchSampler(eligible, 4, seed=8), 1)]
    s = QueryBatchSampler(eligible, 4, seed=8)
    s.load_state_dict({"seed": 8, "epoch": 1, "batches_consumed": 2})
    s.set_epoch(1)
    tail = [ds.__getitems__(b) for b in s]
    assert len(tail) == len(ref) - 2
    for x, y in zip(tail, ref[2:]):
        assert all(torch.equal(x[k], y[k]) for k in x)


def test_dataloader_workers_see_the_batch_keys():
    a = _toy_recommendation()
    ds = RecommendationTrainDataset(a, num_positives=3, num_negatives=10)
    eligible = np.diff(a["pos_indptr"]) > 0
    inline = list(DataLoader(ds, batch_sampler=QueryBatchSampler(eligible, 4, seed=3), collate_fn=identity_collate))
    workers = list(
        DataLoader(ds, batch_sampler=QueryBatchSampler(eligible, 4, seed=3), collate_fn=identity_collate, num_workers=2)
    )
    assert len(inline) == len(workers)
    for x, y in zip(inline, workers):
        assert all(torch.equal(x[k], y[k]) for k in x)


def _toy_lists(seed=0):
    """Queries with lists of 1..40 documents; feature 0 holds the document's row (to identify it)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=20)
    lengths[4] = 3
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    n = int(indptr[-1])
    relevance = np.where(rng.random(n) < 0.3, rng.integers(1, 5, n), 0).astype(np.float32)
    relevance[indptr[2] : indptr[3]] = 0  # a query without a relevant document
    x = np.stack([np.arange(n), rng.normal(size=n)], axis=1).astype(np.float32)
    return x, relevance, indptr


def test_listwise_slates():
    x, y, indptr = _toy_lists()
    pairs = ltr_pair_arrays(indptr, y)
    ds = ListwiseTrainDataset(x, y, indptr, pairs, slate_length=12, num_positives=3, top_k=2)
    sampler = QueryBatchSampler(np.diff(pairs["pos_indptr"]) > 0, 6, seed=0)
    assert 2 not in sampler.eligible.tolist()
    for qb in epoch(sampler):
        batch = ds.__getitems__(qb)
        assert batch["features"].shape == (6, 12, 2) and batch["features"].dtype == torch.float32
        for r, q in enumerate(qb):
            length = int(indptr[q + 1] - indptr[q])
            m = batch["mask"][r]
            docs = batch["features"][r, :, 0][m].long().tolist()
            assert int(m.sum()) == min(12, length) and m[: int(m.sum())].all()  # padding at the end
            assert len(set(docs)) == len(docs) and all(indptr[q] <= d < indptr[q + 1] for d in docs)
            relevant = [d for d in range(indptr[q], indptr[q + 1]) if y[d] > 0]
            assert len(set(docs) & set(relevant)) >= min(3, len(relevant))
            np.testing.assert_array_equal(batch["relevance"][r][m].numpy(), y[docs])
            pair = batch["pair_index"][r][m].numpy()
            np.testing.assert_array_equal(pair, pairs["pair_of_doc"][docs])
            assert (pair[y[docs] > 0] >= 0).all() and (pair[y[docs] == 0] == -1).all()
            assert (batch["features"][r][~m] == 0).all() and (batch["pair_index"][r][~m] == -1).all()
            assert batch["num_items"][r] == length and batch["num_relevant"][r] == len(relevant)


def test_listwise_rest_of_slate_is_uniform():
    """A query of 8 documents (2 relevant) in slates of 4 with 1 positive: the 3 others are a uniform 3-subset of
    the 7 documents that are not the chosen positive."""
    y = np.array([1, 0, 0, 2, 0, 0, 0, 0], dtype=np.float32)
    x = np.arange(8, dtype=np.float32)[:, None]
    indptr = np.array([0, 8])
    ds = ListwiseTrainDataset(x, y, indptr, ltr_pair_arrays(indptr, y), slate_length=4, num_positives=1)
    # 4000 independent slates of the same query in one call: one row per global position
    batch = ds.__getitems__(QueryBatch([0] * 4000, seed=11, positions=range(4000)))
    counts = np.bincount(batch["features"][:, :, 0].long().flatten().numpy(), minlength=8).astype(float)
    assert (batch["mask"].sum(1) == 4).all()
    # docs 0 and 3 are the positive half of the time each, else one of the 3 of 7 others
    p_rel = 0.5 + 0.5 * 3 / 7
    p_other = 3 / 7
    np.testing.assert_allclose(counts[[0, 3]] / 4000, p_rel, atol=0.04)
    np.testing.assert_allclose(counts[[1, 2, 4, 5, 6, 7]] / 4000, p_other, atol=0.04)
