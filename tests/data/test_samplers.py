"""Rank-aware samplers: shapes, per-rank slices, determinism, resume."""

import itertools

import pytest
import torch

from fccolit.samplers import DualSampler, SequentialShardSampler

LABELS = torch.tensor([1] * 7 + [0] * 93)


def batches(sampler, epoch=0):
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_dual_sampler_shapes_and_rank_slices(world):
    ranks = [DualSampler(LABELS, 16, 8, seed=3, rank=r, world_size=world) for r in range(world)]
    full = batches(DualSampler(LABELS, 16, 8, seed=3, rank=0, world_size=1))
    per_rank = [batches(s) for s in ranks]
    assert len(full) == len(ranks[0]) == -(-93 // 8)
    for b, global_batch in enumerate(full):
        assert len(global_batch) == 16
        assert sum(int(LABELS[i]) for i in global_batch) == 8
        slices = [per_rank[r][b] for r in range(world)]
        assert all(len(s) == 16 // world for s in slices)
        assert all(sum(int(LABELS[i]) for i in s) == 8 // world for s in slices)  # P/W positives each
        # disjoint positions that cover the global batch exactly
        assert sorted(itertools.chain(*slices)) == sorted(global_batch)


def test_dual_sampler_negatives_once_per_epoch_and_positives_oversampled():
    full = batches(DualSampler(LABELS, 16, 8, seed=0))
    negs = [i for b in full for i in b if LABELS[i] == 0]
    assert set(negs) == set(range(7, 100))
    assert len(negs) - len(set(negs)) < 8  # only the last batch wraps around
    pos = [i for b in full for i in b if LABELS[i] == 1]
    assert set(pos) == set(range(7))


def test_dual_sampler_is_deterministic_per_seed_and_epoch():
    a, b = DualSampler(LABELS, 16, 8, seed=5), DualSampler(LABELS, 16, 8, seed=5)
    assert batches(a, 0) == batches(b, 0)
    assert batches(a, 1) == batches(b, 1)
    assert batches(a, 0) != batches(a, 1)
    assert batches(DualSampler(LABELS, 16, 8, seed=6), 0) != batches(a, 0)


def test_resume_mid_epoch_continues_the_same_stream():
    ref = batches(DualSampler(LABELS, 16, 8, seed=1), epoch=2)
    s = DualSampler(LABELS, 16, 8, seed=1)
    s.set_epoch(2)
    it = iter(s)
    head = [next(it) for _ in range(5)]
    state = s.state_dict(batches_consumed=5)
    resumed = DualSampler(LABELS, 16, 8, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # Lightning calls set_epoch with the restored epoch
    assert len(resumed) == len(ref)  # the epoch's length; the iterator yields the rest
    tail = list(resumed)
    assert head + tail == ref
    assert batches(resumed, 3) == batches(DualSampler(LABELS, 16, 8, seed=1), 3)  # next epoch from the start


def test_anchors_with_replacement_are_uniform_independent_draws():
    """Each batch's positives are i.i.d. uniform over the positives (not a permutation walk): repeats occur within an
    epoch's first m draws, every positive's share approaches 1/m, ranks still split each global batch, resume works."""
    labels = torch.tensor([1] * 5 + [0] * 995)
    sampler = DualSampler(labels, 8, 4, anchor_sampling="with_replacement", seed=0)
    draws = [i for epoch in range(3) for b in batches(sampler, epoch) for i in b if labels[i] == 1]
    counts = torch.bincount(torch.tensor(draws), minlength=5).double()
    assert len(draws) == 3 * 249 * 4  # ⌈995 negatives / 4⌉ = 249 batches an epoch
    assert torch.allclose(counts / len(draws), torch.full((5,), 0.2, dtype=torch.float64), atol=0.03)
    first = [[i for i in b if labels[i] == 1] for b in batches(sampler, 0)[:5]]
    assert any(len(set(p)) < len(p) for p in first) or len({i for p in first[:2] for i in p}) < 5  # not a permutation
    walk = [[i for i in b if labels[i] == 1] for b in batches(DualSampler(labels, 8, 4, seed=0), 0)[:5]]
    assert len(set(walk[0] + walk[1][:1])) == 5  # the default walks a permutation: 5 distinct before any repeat
    full = batches(DualSampler(labels, 8, 4, anchor_sampling="with_replacement", seed=0))
    ranks = [batches(DualSampler(labels, 8, 4, anchor_sampling="with_replacement", seed=0, rank=r, world_size=2))
             for r in range(2)]
    assert all(sorted(ranks[0][b] + ranks[1][b]) == sorted(full[b]) for b in range(len(full)))
    resumed = DualSampler(labels, 8, 4, anchor_sampling="with_replacement", seed=0)
    resumed.load_state_dict({"seed": 0, "epoch": 0, "batches_consumed": 7})
    resumed.set_epoch(0)
    assert list(resumed) == full[7:]
    with pytest.raises(ValueError, match="anchor_sampling"):
        DualSampler(labels, 8, 4, anchor_sampling="uniform")


def test_dual_sampler_errors():
    with pytest.raises(ValueError, match="no positive"):
        DualSampler(torch.zeros(10), 4, 2)
    with pytest.raises(ValueError, match="between 1 and batch_size"):
        DualSampler(LABELS, 4, 4)
    with pytest.raises(ValueError, match="cannot be split evenly"):
        list(DualSampler(LABELS, 16, 3, rank=0, world_size=2))
    with pytest.raises(ValueError, match="must divide evenly"):
        list(DualSampler(LABELS, 15, 6, rank=0, world_size=2))
    with pytest.raises(ValueError, match="seed"):
        DualSampler(LABELS, 16, 8, seed=1).load_state_dict({"seed": 2, "epoch": 0, "batches_consumed": 0})


@pytest.mark.parametrize("world", [1, 2, 3])
def test_sequential_shards_cover_the_data_once(world):
    shards = [list(SequentialShardSampler(10, 4, rank=r, world_size=world)) for r in range(world)]
    seen = sorted(i for s in shards for b in s for i in b)
    assert seen == list(range(10))
    assert all(len(s) == 3 for s in shards)  # every rank runs the same number of batches


@pytest.mark.parametrize("world", [1, 2])
def test_batches_keep_their_index_tensor_for_the_dataset(world):
    """A sampler's batch keeps this rank's indices as a tensor too (``index_tensor`` hands it to ``__getitems__``
    without a list-to-tensor conversion); it equals the list, its positions are the rank's slots of the global
    batch, and a pickled batch (a DataLoader worker's copy) falls back to converting the list."""
    import pickle

    from fccolit.data import TensorDictDataset
    from fccolit.samplers.base import index_tensor

    sampler = DualSampler(LABELS, 16, 8, seed=3, rank=world - 1, world_size=world)
    dataset = TensorDictDataset(x=torch.arange(100.0).unsqueeze(1), y=LABELS)
    for batch in batches(sampler):
        kept = index_tensor(batch)
        assert kept is batch.ids_tensor and kept.dtype == torch.long and kept.tolist() == list(batch)
        assert batch.positions == list(range(world - 1, 16, world))
        assert dataset.__getitems__(batch)["x"][:, 0].tolist() == [float(i) for i in batch]
        copy = pickle.loads(pickle.dumps(batch))
        assert copy.ids_tensor is None and torch.equal(index_tensor(copy), kept) and copy.positions == batch.positions
