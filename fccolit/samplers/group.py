"""Group batches for group DRO: B1 groups per batch, B2 samples of each (Chen et al., "Stochastic Momentum Methods
for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025, arXiv:2506.02504,
Appendix F.1).

One group for all the data gives plain shuffled batches (each sample once per pass), so the same sampler serves
the ROC-fairness DataModule. :class:`StratifiedBatchSampler` draws shuffled batches stratified by a cell label
(e.g. group × class), so that every cell is in every batch (or every half of a paired batch).
"""

from __future__ import annotations

import math
from typing import Iterator

import torch

from fccolit.samplers.base import RankAwareBatchSampler

__all__ = ["GroupBatchSampler", "StratifiedBatchSampler", "proportional_quotas"]


def members_by_label(labels: torch.Tensor, who: str, what: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The distinct labels ``[L]`` (ascending) and, for each, the sample ids holding it (ascending): the groups of
    :class:`GroupBatchSampler`, the cells of :class:`StratifiedBatchSampler`. ``labels`` ``[N]`` long, ≥ 0."""
    if labels.numel() == 0:
        raise ValueError(f"{who}: no training samples")
    if int(labels.min()) < 0:
        raise ValueError(f"{who}: {what} ids must be >= 0, found {int(labels.min())}")
    order = torch.argsort(labels, stable=True)
    ids, counts = torch.unique_consecutive(labels[order], return_counts=True)
    return ids, list(torch.split(order, counts.tolist()))


class _Stream:
    """Draws from ``pool`` walking through fresh random permutations: every element once per permutation, and no
    element twice in one draw of at most ``pool.numel()`` (a draw that crosses into a new permutation takes that
    permutation's elements not drawn yet first, leaving the repeated ones to its end)."""

    def __init__(self, pool: torch.Tensor, generator: torch.Generator) -> None:
        self.pool, self.generator = pool, generator
        self.order = pool[:0]
        self.position = 0

    def take(self, count: int) -> torch.Tensor:
        parts: list[torch.Tensor] = []
        while count > 0:
            if self.position >= self.order.numel():
                order = self.pool[torch.randperm(self.pool.numel(), generator=self.generator)]
                if parts:
                    repeated = torch.isin(order, torch.cat(parts))
                    order = torch.cat([order[~repeated], order[repeated]])
                self.order, self.position = order, 0
            part = self.order[self.position : self.position + count]
            self.position += part.numel()
            count -= part.numel()
            parts.append(part)
        return torch.cat(parts)


class GroupBatchSampler(RankAwareBatchSampler):
    """Batches of ``groups_per_batch`` (B1) distinct groups with ``samples_per_group`` (B2) samples each.

    Groups walk through random permutations of the non-empty groups (each group once per pass), samples through
    random permutations of their group's members (each sample once per pass); a batch never holds a group twice,
    nor a sample twice unless its group has fewer than B2 (2·B2 when paired) members.

    Layout of a global batch (the property the algorithms rely on under DDP)::

        position j·B1 + g  =  sample j of the g-th group of the batch       (j < B2, g < B1)

    so rank ``r`` of ``W`` (slice ``[r::W]``, B1 a multiple of W) gets **whole groups**: the groups
    ``g ≡ r (mod W)`` with all their B2 samples, in the same order as one process sees them (with B1 = 1, the
    shuffled-batch case, the ranks share the group's samples instead: B2 a multiple of W). With ``paired=True``
    the global batch is two such blocks ``[B | B̃]`` over the same groups with disjoint samples (ALEXR2's value and
    gradient batches); each rank's first half is then its share of ``B``.

    Args:
        groups: ``[N]`` group id of every training sample.
        groups_per_batch: B1 ≤ number of non-empty groups.
        samples_per_group: B2.
        num_batches: batches per epoch (default: one pass over the samples, ``⌈N / global batch⌉``).
        paired: two independent blocks per batch (see above).
        seed, rank, world_size: see :class:`~fccolit.samplers.base.RankAwareBatchSampler`.

    Raises:
        ValueError: no samples, or a negative group id; ``groups_per_batch`` outside ``[1, number of non-empty
            groups]``; ``samples_per_group`` < 1; on iteration, ``groups_per_batch`` (or, with one group per batch,
            ``samples_per_group``) not a multiple of ``world_size``.

    Example (three groups of two samples; two groups, one sample each, per batch):
        >>> import torch
        >>> sampler = GroupBatchSampler(torch.tensor([0, 0, 1, 1, 2, 2]), groups_per_batch=2, samples_per_group=1,
        ...                             seed=0, rank=0, world_size=1)
        >>> len(sampler), list(iter(sampler))[:2]
        (3, [[5, 0], [3, 4]])
    """

    def __init__(
        self,
        groups: torch.Tensor,
        groups_per_batch: int,
        samples_per_group: int,
        num_batches: int | None = None,
        paired: bool = False,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        groups = torch.as_tensor(groups).reshape(-1).long()
        ids, self.members = members_by_label(groups, "GroupBatchSampler", "group")
        self.group_ids = ids
        if not 1 <= int(groups_per_batch) <= ids.numel():
            raise ValueError(
                f"GroupBatchSampler: groups_per_batch (B1) must be between 1 and the {ids.numel()} non-empty groups, "
                f"got {groups_per_batch}"
            )
        if int(samples_per_group) < 1:
            raise ValueError(f"GroupBatchSampler: samples_per_group (B2) must be >= 1, got {samples_per_group}")
        self.groups_per_batch, self.samples_per_group = int(groups_per_batch), int(samples_per_group)
        self.paired = bool(paired)
        self._num_batches = int(num_batches) if num_batches else math.ceil(groups.numel() / self.global_batch_size())

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.groups_per_batch * self.samples_per_group * (2 if self.paired else 1)

    def __iter__(self) -> Iterator[list[int]]:
        world = self.world_size
        if self.groups_per_batch == 1:  # shuffled batches: the ranks share the one group's samples
            if self.samples_per_group % world:
                raise ValueError(
                    f"GroupBatchSampler: a batch of {self.samples_per_group} samples (per half) cannot be split evenly "
                    f"among {world} processes; choose a batch size that is a multiple of the devices"
                )
        elif self.groups_per_batch % world:
            raise ValueError(
                f"GroupBatchSampler: {self.groups_per_batch} groups per batch cannot be split evenly among {world} "
                "processes (each rank gets whole groups); choose groups_per_batch as a multiple of the devices"
            )
        return super().__iter__()

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        b1, b2 = self.groups_per_batch, self.samples_per_group
        blocks = 2 if self.paired else 1
        group_order = _Stream(torch.arange(self.group_ids.numel()), generator)
        streams: dict[int, _Stream] = {}
        for _ in range(self._num_batches):
            chosen = group_order.take(b1).tolist()  # B1 distinct groups
            samples = []
            for g in chosen:
                if g not in streams:
                    streams[g] = _Stream(self.members[g], generator)
                samples.append(streams[g].take(blocks * b2))
            block = torch.stack(samples)  # [B1, blocks · B2]
            yield torch.cat([block[:, k * b2 : (k + 1) * b2].t().reshape(-1) for k in range(blocks)])


def proportional_quotas(cell_sizes: list[int], batch_size: int) -> list[int]:
    """Rows per cell in a batch of ``batch_size``: proportional to the cell sizes (largest remainders), at least one
    row for every non-empty cell (taken from the largest quotas), at most a cell's size when that fits."""
    sizes = [int(n) for n in cell_sizes]
    total = sum(sizes)
    nonempty = [c for c, n in enumerate(sizes) if n > 0]
    if batch_size < len(nonempty):
        raise ValueError(
            f"StratifiedBatchSampler: a batch of {batch_size} rows cannot hold one row of each of the "
            f"{len(nonempty)} non-empty cells"
        )
    exact = [batch_size * n / total for n in sizes]
    quotas = [int(math.floor(e)) for e in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda c: (-(exact[c] - quotas[c]), c))
    for c in by_remainder[: batch_size - sum(quotas)]:
        quotas[c] += 1
    for c in nonempty:  # every cell present: take the row from the largest quota
        if quotas[c] == 0:
            donor = max(range(len(sizes)), key=lambda k: (quotas[k], -k))
            quotas[donor] -= 1
            quotas[c] = 1
    return quotas


class StratifiedBatchSampler(RankAwareBatchSampler):
    """Shuffled batches of ``batch_size`` rows stratified by a cell label, so that every cell is in every batch.

    Each cell contributes a fixed quota (:func:`proportional_quotas`: proportional to its size, at least one row).

    For AUC under ROC-fairness constraints the cells are (group × class): a constraint's group means need both
    groups of its class in the batch, and plain shuffled batches of 64 rows miss Adult's rarest cell (women with
    income > 50K, 3.6% of the rows) in about 10% of them. Each cell walks through random permutations of its members
    (each sample once per pass of its cell; with proportional quotas a pass over the data sees every sample about
    once), and the batch's rows are shuffled. With ``paired=True`` a batch is two such independently drawn blocks
    ``[B | B̃]`` with disjoint samples (ALEXR2's value and gradient batches), each stratified on its own.

    Under DDP rank ``r`` of ``W`` gets the slice ``[r::W]`` of each block (``batch_size`` a multiple of W): the
    ranks share a block's rows, so use it with objectives evaluated on the gathered global batch
    (``needs_global_batch``, e.g. :class:`~fccolit.objectives.constrained.ROCFairnessAUCObjective`).

    Args:
        cells: ``[N]`` cell id (>= 0) of every training sample.
        batch_size: rows per block (per half when paired).
        num_batches: batches per epoch (default: one pass, ``⌈N / global batch⌉``).
        paired: two independent stratified blocks per batch.
        seed, rank, world_size: see :class:`~fccolit.samplers.base.RankAwareBatchSampler`.

    Raises:
        ValueError: ``batch_size`` < 1; no samples, or a negative cell id; a batch too small to hold one row of each
            non-empty cell; on iteration, ``batch_size`` not a multiple of ``world_size``.

    Example (cell 0 holds four samples, cell 1 two: a batch of 3 takes two rows of cell 0 and one of cell 1):
        >>> import torch
        >>> sampler = StratifiedBatchSampler(torch.tensor([0, 0, 0, 0, 1, 1]), batch_size=3,
        ...                                  seed=0, rank=0, world_size=1)
        >>> sampler.quotas, len(sampler), list(iter(sampler))[:2]
        ([2, 1], 2, [[1, 4, 0], [2, 5, 3]])
    """

    def __init__(
        self,
        cells: torch.Tensor,
        batch_size: int,
        num_batches: int | None = None,
        paired: bool = False,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        cells = torch.as_tensor(cells).reshape(-1).long()
        if int(batch_size) < 1:
            raise ValueError(f"StratifiedBatchSampler: batch_size must be >= 1, got {batch_size}")
        self.cell_ids, self.members = members_by_label(cells, "StratifiedBatchSampler", "cell")
        self.batch_size, self.paired = int(batch_size), bool(paired)
        self.quotas = proportional_quotas([m.numel() for m in self.members], self.batch_size)
        self._num_batches = int(num_batches) if num_batches else math.ceil(cells.numel() / self.global_batch_size())

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.batch_size * (2 if self.paired else 1)

    def __iter__(self) -> Iterator[list[int]]:
        if self.batch_size % self.world_size:
            raise ValueError(
                f"StratifiedBatchSampler: a block of {self.batch_size} rows cannot be split evenly among "
                f"{self.world_size} processes; choose a batch size that is a multiple of the devices"
            )
        return super().__iter__()

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        streams = [_Stream(m, generator) for m in self.members]
        blocks = 2 if self.paired else 1
        for _ in range(self._num_batches):
            drawn = [stream.take(blocks * q) for stream, q in zip(streams, self.quotas)]
            parts = []
            for k in range(blocks):
                block = torch.cat([d[k * q : (k + 1) * q] for d, q in zip(drawn, self.quotas)])
                parts.append(block[torch.randperm(block.numel(), generator=generator)])
            yield torch.cat(parts)
