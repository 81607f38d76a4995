"""Rank-aware, resumable batch samplers.

Every sampler here builds the *global* batch (the batch all ranks together process in one step) from a
generator seeded by ``(seed, epoch)`` and gives rank ``r`` of ``W`` the slice ``global[r::W]``. So:

* one process and ``W`` processes see the same global batches (the property the DDP tests check);
* the slices of the ranks are disjoint and cover the global batch;
* the stream is a pure function of ``(seed, epoch, position)``: :meth:`RankAwareBatchSampler.state_dict` and
  :meth:`~RankAwareBatchSampler.load_state_dict` resume it mid-epoch;
* every batch a rank receives is a :class:`SampledBatch`, a list of dataset indices that also carries the keys of
  the random numbers its samples are drawn with (a seed that is a pure function of ``(seed, epoch, batch)`` and
  each sample's position in the global batch). A dataset that augments (random crops, flips, affine transforms)
  draws from these keys instead of a global generator, so augmentation is the same after a mid-epoch resume, in
  any DataLoader worker and however the global batch is split among ranks.

Lightning must not wrap these samplers: the trainer runs with ``use_distributed_sampler: false`` (the fccolit
CLI's default), which otherwise reshuffles custom samplers under DDP.

Why not ``torch.utils.data``'s ``DistributedSampler`` + ``BatchSampler``: for the plain shuffle they give the same
batches (:class:`~fccolit.samplers.uniform.UniformBatchSampler` with seed 0 equals ``BatchSampler(DistributedSampler(
seed=0, drop_last=True))`` on every rank, ``tests/data/test_samplers_vs_torch.py``), but they keep no position to
resume an epoch from, carry no random-number keys for augmentation, and without ``drop_last`` pad the last rank by
repeating samples, which would update a per-index state row twice or count an evaluation sample twice (the same
test; :class:`SequentialShardSampler` pads nothing). The class-structured batches (fixed positives per batch, whole
groups per rank, tasks × classes, queries) have no torch counterpart. The cost is small: one epoch of 1,000,000
indices in batches of 512 (rank 0 of 2) takes 1.47–1.56× the time of ``DistributedSampler`` + ``BatchSampler`` (92 ms
against 60 ms), and :class:`SequentialShardSampler` 0.82–0.84× (``benchmarks/handwritten.py``).
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from fccolit import distributed


_MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / φ: the splitmix64 increment
MIX_M1, MIX_M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix64_int(x: int) -> int:
    """splitmix64's finaliser on a Python int (mod 2^64)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * MIX_M1) & _MASK64
    x = ((x ^ (x >> 27)) * MIX_M2) & _MASK64
    return x ^ (x >> 31)


def _batch_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of global batch ``index`` of ``epoch``: 63 bits, a pure function of the three."""
    x = mix64_int(mix64_int(seed * GOLDEN + 0x5851F42D4C957F2D) + epoch * 0x9E6C63D0676A9A99)
    return mix64_int(x + index * GOLDEN) >> 1


def derived_seed(*parts: int) -> int:
    """A 63-bit seed that is a pure function of the integers ``parts`` (splitmix64 chained over them): e.g. the
    seed of a training step's random draws from ``(run seed, epoch, batch, rank)``."""
    x = 0x2545F4914F6CDD1D
    for part in parts:
        x = mix64_int(x + (int(part) & _MASK64) * GOLDEN + 0x632BE59BD9B4E019)
    return x >> 1


class SampledBatch(list):
    """One rank's share of a global training batch: a list of dataset indices with the batch's random-number keys.

    Attributes:
        seed: the batch seed, a pure function of ``(sampler seed, epoch, batch_index)``.
        positions: position of each index of this list in the global batch (``rank, rank + W, ...``).
        epoch, batch_index: where the batch sits in the stream.

    A dataset draws a sample's random numbers (augmentation) from ``(seed, position)``, e.g. with
    :func:`fccolit.samplers.ranking.batch_words`: they do not depend on generator state, on the DataLoader worker or
    on how the global batch is split among ranks. A plain list pickles and passes through DataLoader workers
    unchanged; so does this subclass.

    Args:
        ids: this rank's dataset indices: a sequence of ints, or a 1-D integer tensor, which the batch also keeps
            (:func:`index_tensor` hands it to a dataset's ``__getitems__`` without a list-to-tensor conversion).
        seed: the batch seed.
        positions: the global-batch position of each of ``ids`` (as many as ``ids``).
        epoch, batch_index: the batch's epoch and number within it (default 0).

    Raises:
        ValueError: ``positions`` and ``ids`` differ in length.

    Example:
        >>> import pickle
        >>> batch = SampledBatch([4, 7], seed=11, positions=[0, 2], epoch=1, batch_index=3)
        >>> batch, batch.seed, batch.positions, (batch.epoch, batch.batch_index)
        ([4, 7], 11, [0, 2], (1, 3))
        >>> pickle.loads(pickle.dumps(batch)).positions
        [0, 2]
        >>> SampledBatch([4, 7], seed=11, positions=[0])
        Traceback (most recent call last):
            ...
        ValueError: SampledBatch: 2 ids but 1 positions
    """

    def __init__(
        self, ids: Sequence[int] | torch.Tensor, seed: int, positions: Sequence[int], epoch: int = 0, batch_index: int = 0
    ):
        self.ids_tensor = ids.long() if isinstance(ids, torch.Tensor) else None
        super().__init__(ids.tolist() if isinstance(ids, torch.Tensor) else ids)
        self.seed = int(seed)
        # a range (the samplers' positions) holds ints already; int() of each costs ~20 µs a batch of 256
        self.positions = list(positions) if isinstance(positions, range) else [int(p) for p in positions]
        self.epoch, self.batch_index = int(epoch), int(batch_index)
        if len(self.positions) != len(self):
            raise ValueError(f"{type(self).__name__}: {len(self)} ids but {len(self.positions)} positions")

    def __reduce__(self):
        return (type(self), (list(self), self.seed, self.positions, self.epoch, self.batch_index))


def index_tensor(indices: Sequence[int]) -> torch.Tensor:
    """``indices`` as a 1-D long tensor: a :class:`SampledBatch`'s own tensor when it keeps one (no conversion: the
    batch samplers build their batches as tensors), else ``torch.as_tensor`` of the list.

    Example:
        >>> index_tensor(SampledBatch(torch.tensor([4, 7]), seed=0, positions=range(2))).tolist(), index_tensor([3])
        ([4, 7], tensor([3]))
    """
    kept = getattr(indices, "ids_tensor", None)
    if kept is not None and kept.shape[0] == len(indices):
        return kept
    return torch.as_tensor(list(indices), dtype=torch.long)


class RankAwareBatchSampler(Sampler[list[int]]):
    """Base class of the resumable samplers: rank ``r`` of ``W`` gets ``global[r::W]`` of each global batch.

    The stream is a pure function of ``(seed, epoch, position)``; subclasses implement :meth:`global_batches`,
    :meth:`num_batches` and :meth:`global_batch_size`.

    Args:
        seed: base seed; epoch ``e`` draws from ``torch.Generator().manual_seed(seed * 100_003 + e)``.
        rank, world_size: override the process group's values (tests; None reads ``torch.distributed``).

    Yields :class:`SampledBatch` (``batch_type``) lists: this rank's indices with the batch's random-number keys.

    Raises:
        ValueError: on iteration, when the global batch does not divide evenly among ``world_size`` processes;
            from :meth:`load_state_dict`, when the state was saved with another seed.
        NotImplementedError: a subclass left :meth:`global_batches`, :meth:`num_batches` or
            :meth:`global_batch_size` out.

    Example (a subclass, :class:`~fccolit.samplers.uniform.UniformBatchSampler`, resumed after one batch):
        >>> from fccolit.samplers.uniform import UniformBatchSampler
        >>> sampler = UniformBatchSampler(6, 2, seed=0, rank=0, world_size=1)
        >>> list(sampler)
        [[2, 5], [3, 0], [1, 4]]
        >>> resumed = UniformBatchSampler(6, 2, seed=0, rank=0, world_size=1)
        >>> resumed.load_state_dict(sampler.state_dict(batches_consumed=1))
        >>> list(resumed)
        [[3, 0], [1, 4]]
        >>> list(UniformBatchSampler(6, 3, rank=0, world_size=2))
        Traceback (most recent call last):
            ...
        ValueError: UniformBatchSampler: the global batch (3) must divide evenly among 2 processes; choose a batch size that is a multiple of the number of devices.
    """

    batch_type: type[SampledBatch] = SampledBatch

    def __init__(self, *, seed: int = 0, rank: int | None = None, world_size: int | None = None) -> None:
        self.seed = int(seed)
        self._rank, self._world = rank, world_size
        self.epoch = 0
        self._skip = 0  # batches of the current epoch already consumed before a resume

    # ------------------------------------------------------------------ to implement
    def num_batches(self) -> int:
        raise NotImplementedError

    def global_batch_size(self) -> int:
        raise NotImplementedError

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """Yield the epoch's global batches (long tensors of dataset indices), drawing only from ``generator``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the common machinery
    @property
    def rank(self) -> int:
        return distributed.rank() if self._rank is None else self._rank

    @property
    def world_size(self) -> int:
        return distributed.world_size() if self._world is None else self._world

    @property
    def sampler(self) -> "RankAwareBatchSampler":
        """Lightning calls ``set_epoch`` on ``dataloader.batch_sampler.sampler``: point it here."""
        return self

    def generator(self, epoch: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 100_003 + int(epoch))

    def batch_seed(self, epoch: int, index: int) -> int:
        """The seed carried by global batch ``index`` of ``epoch`` (see :class:`SampledBatch`)."""
        return _batch_seed(self.seed, epoch, index)

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        if int(epoch) != self.epoch:
            self._skip = 0
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Batches in a whole epoch, also when resuming mid-epoch (Lightning counts the resumed epoch's
        batches from the restored position, so the iterator then yields ``len − consumed`` batches)."""
        return self.num_batches()

    def __iter__(self) -> Iterator[list[int]]:
        world, rank = self.world_size, self.rank
        size = self.global_batch_size()
        if size % world:
            raise ValueError(
                f"{type(self).__name__}: the global batch ({size}) must divide evenly among {world} processes; "
                "choose a batch size that is a multiple of the number of devices."
            )
        skip, self._skip = self._skip, 0
        epoch = self.epoch
        for b, batch in enumerate(self.global_batches(self.generator(epoch))):
            if b >= skip:
                positions = range(rank, batch.shape[0], world)
                yield self.batch_type(batch[rank::world], self.batch_seed(epoch, b), positions, epoch, b)

    def state_dict(self, batches_consumed: int = 0) -> dict[str, int]:
        """Position of the stream: the epoch and how many of its batches training has consumed."""
        return {"seed": self.seed, "epoch": self.epoch, "batches_consumed": int(batches_consumed)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iteration continues epoch ``state['epoch']`` after its consumed batches."""
        if int(state.get("seed", self.seed)) != self.seed:
            raise ValueError(f"sampler state was saved with seed {state['seed']}, this sampler has seed {self.seed}")
        self.epoch = int(state["epoch"])
        self._skip = int(state["batches_consumed"])


class SequentialShardSampler(Sampler[list[int]]):
    """Evaluation batches: the data in order, each global batch split into contiguous per-rank shards.

    Nothing is repeated or padded (unlike ``DistributedSampler``), so metrics gathered across ranks are exact: the
    last batch may be short, and a rank's shard of it empty.

    Args:
        num_samples: size n of the split (indices 0..n−1).
        batch_size: global batch size B; an epoch has ``⌈n / B⌉`` batches.
        rank, world_size: override the process group's values (tests; None reads ``torch.distributed``).

    Example (5 samples, batches of 4, two ranks):
        >>> list(SequentialShardSampler(5, 4, rank=0, world_size=2))
        [[0, 1], []]
        >>> list(SequentialShardSampler(5, 4, rank=1, world_size=2))
        [[2, 3], [4]]
    """

    def __init__(self, num_samples: int, batch_size: int, *, rank: int | None = None, world_size: int | None = None):
        self.num_samples, self.batch_size = int(num_samples), int(batch_size)
        self._rank, self._world = rank, world_size

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        world = distributed.world_size() if self._world is None else self._world
        rank = distributed.rank() if self._rank is None else self._rank
        for start in range(0, self.num_samples, self.batch_size):
            stop = min(start + self.batch_size, self.num_samples)
            bounds = torch.linspace(start, stop, world + 1).round().long()
            yield list(range(int(bounds[rank]), int(bounds[rank + 1])))
