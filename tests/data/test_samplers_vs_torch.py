"""fccolit's samplers against torch.utils.data's DistributedSampler + BatchSampler: where they give the same batches,
and the two things torch's do not (no padding; a position to resume from), which justify keeping them."""

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler

from fccolit.samplers import SequentialShardSampler, UniformBatchSampler


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("num_samples", [96, 103])
def test_uniform_batches_are_distributed_sampler_batches_for_seed_zero(world, num_samples):
    # DistributedSampler permutes with a generator seeded by seed + epoch, UniformBatchSampler by seed·100003 + epoch:
    # with seed 0 both draw the same permutation, and rank r's batches are the same index lists (drop_last on both).
    batch = 8
    for epoch in range(3):
        for rank in range(world):
            ours = UniformBatchSampler(num_samples, batch, seed=0, rank=rank, world_size=world)
            ours.set_epoch(epoch)
            theirs = DistributedSampler(range(num_samples), num_replicas=world, rank=rank, shuffle=True, seed=0,
                                        drop_last=True)
            theirs.set_epoch(epoch)
            expected = list(BatchSampler(theirs, batch // world, drop_last=True))
            assert [list(b) for b in ours] == expected
    # what torch's lacks: a position to resume an epoch from (fccolit's restores it from the checkpoint)
    assert not hasattr(theirs, "state_dict")


def test_distributed_sampler_pads_by_repeating_samples_and_double_counts():
    # 10 evaluation samples on 4 processes: DistributedSampler (drop_last=False, what Lightning injects) gives every
    # rank 3 indices, so 2 samples are seen twice and a metric summed over the gathered batches counts them twice.
    values = torch.arange(1.0, 11.0)
    world = 4
    theirs = [i for r in range(world) for i in DistributedSampler(range(10), num_replicas=world, rank=r, shuffle=False)]
    assert len(theirs) == 12 and len(set(theirs)) == 10
    assert values[theirs].sum() != values.sum()
    ours = [i for r in range(world) for b in SequentialShardSampler(10, 4, rank=r, world_size=world) for i in b]
    assert sorted(ours) == list(range(10))
    assert values[ours].sum() == values.sum()


def test_training_epoch_visits_no_index_twice_across_ranks():
    # The per-index state is updated once per visit: within an epoch the ranks' batches never share an index
    # (DistributedSampler with drop_last=False repeats the first samples of the permutation to pad the last rank).
    world, num_samples = 3, 50
    ours = [i for r in range(world) for b in UniformBatchSampler(num_samples, 6, seed=4, rank=r, world_size=world)
            for i in b]
    assert len(ours) == len(set(ours)) == (num_samples // 6) * 6
    theirs = [i for r in range(world) for i in DistributedSampler(range(num_samples), num_replicas=world, rank=r, seed=4)]
    assert len(theirs) > len(set(theirs))
