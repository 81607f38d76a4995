"""Uniform batches without replacement: shuffled epochs (NCA, plain mini-batch training)."""

from __future__ import annotations

from typing import Iterator

import torch

from fccolit.samplers.base import RankAwareBatchSampler


class UniformBatchSampler(RankAwareBatchSampler):
    """Every epoch is a fresh random permutation of the data cut into global batches of ``batch_size``.

    Within an epoch no index repeats, so every batch is a uniform sample without replacement: the other
    members of a batch are a uniform sample of the rest of the data (what NCA's inner estimate needs to be
    unbiased). The last ``num_samples mod batch_size`` indices of each permutation are dropped (a different
    random subset every epoch), so every global batch has the same size and splits evenly among the ranks.
    Rank ``r`` of ``W`` gets ``global[r::W]``; the stream is a pure function of ``(seed, epoch, position)``
    and resumes mid-epoch (:class:`~fccolit.samplers.base.RankAwareBatchSampler`).

    Args:
        num_samples: size n of the data set (indices 0..n−1).
        batch_size: global batch size B (≤ n).
        num_batches: batches per epoch (default ``⌊n / B⌋``, one pass; at most ``⌊n / B⌋``).
        seed, rank, world_size: see :class:`~fccolit.samplers.base.RankAwareBatchSampler`.

    Raises:
        ValueError: ``batch_size`` < 1 or > ``num_samples``; ``num_batches`` outside ``[1, ⌊n / B⌋]``; on iteration,
            a global batch that does not divide among the ``world_size`` processes.

    Example:
        >>> sampler = UniformBatchSampler(6, 2, seed=0, rank=0, world_size=1)
        >>> len(sampler), list(iter(sampler))[:2]
        (3, [[2, 5], [3, 0]])
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        num_batches: int | None = None,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        self.num_samples, self.batch_size = int(num_samples), int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"UniformBatchSampler: batch_size must be positive, got {batch_size}")
        if self.batch_size > self.num_samples:
            raise ValueError(
                f"UniformBatchSampler: batch_size ({batch_size}) exceeds the number of samples ({num_samples})"
            )
        full = self.num_samples // self.batch_size
        if num_batches is not None and not 0 < int(num_batches) <= full:
            raise ValueError(f"UniformBatchSampler: num_batches must be in [1, {full}] (one pass), got {num_batches}")
        self._num_batches = full if num_batches is None else int(num_batches)

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.batch_size

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        perm = torch.randperm(self.num_samples, generator=generator)
        for b in range(self._num_batches):
            yield perm[b * self.batch_size : (b + 1) * self.batch_size]
