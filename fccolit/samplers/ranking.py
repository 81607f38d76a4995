"""Query batches for ranking (NDCG / listwise objectives): which queries a step sees, and the random numbers
their items are drawn with.

API (the contract the ranking DataModules and the NDCG algorithms share)
=======================================================================

:class:`QueryBatchSampler` is a :class:`~fccolit.samplers.RankAwareBatchSampler`: every global batch is
``queries_per_batch`` distinct query ids drawn **without replacement** from the *eligible* queries (those with at
least one relevant training item), walking through a fresh random permutation of them per pass, from a
generator seeded by ``(seed, epoch)``; rank ``r`` of ``W`` gets the slice ``global[r::W]``. It yields
:class:`QueryBatch` objects: lists of query ids (so a DataLoader passes them unchanged to the dataset's
``__getitems__``) that also carry

* ``seed``: a 63-bit seed that is a pure function of ``(sampler seed, epoch, batch number)``;
* ``positions``: the position of each of this rank's queries in the *global* batch.

The per-query item sampling (P relevant items and M others per query) happens in the dataset's batched
``__getitems__`` (:mod:`fccolit.datasets.ranking`), vectorized over the batch, with random numbers from
:func:`batch_words` (:func:`batch_uniforms`, :func:`batch_integers`) keyed by ``(batch seed, global
position, stream, draw)``: a counter-based generator, so

* the items a query gets do not depend on how the global batch is split among ranks (one process and ``W``
  processes see the same global batch, item for item);
* resuming mid-epoch (:meth:`~RankAwareBatchSampler.state_dict` / ``load_state_dict``) reproduces the stream
  exactly, items included: no generator state has to be saved;
* DataLoader workers need no seeding.

:func:`sample_distinct` draws ``k`` distinct positions out of ``n`` per row (Robert Floyd's algorithm,
vectorized over rows), the building block of the datasets' positive and list sampling.

Typical use (what the ranking DataModules do)::

    sampler = QueryBatchSampler(num_relevant > 0, queries_per_batch=256, seed=0)
    loader = DataLoader(train_dataset, batch_sampler=sampler, collate_fn=identity_collate)
    for batch in loader:  # dicts of tensors, see fccolit.datasets.ranking for the fields
        ...
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np
import torch

from fccolit.samplers.base import GOLDEN, MIX_M1, MIX_M2, RankAwareBatchSampler, SampledBatch, mix64_int

__all__ = [
    "QueryBatch",
    "QueryBatchSampler",
    "batch_words",
    "batch_uniforms",
    "batch_integers",
    "sample_distinct",
    "mix64",
]

def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on a uint64 array (arithmetic wraps mod 2^64): a bijection whose
    outputs for consecutive inputs pass as independent uniform 64-bit words."""
    x = np.asarray(x, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(MIX_M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(MIX_M2)
    return x ^ (x >> np.uint64(31))


def batch_words(seed: int, positions: np.ndarray | Sequence[int], stream: int, count: int) -> np.ndarray:
    """``[R, count]`` uint64 random words for the rows of a batch, a pure function of the arguments.

    Args:
        seed: the batch seed (:attr:`QueryBatch.seed`).
        positions: ``[R]`` the rows' positions in the global batch (:attr:`QueryBatch.positions`).
        stream: separates independent uses within one batch (e.g. 0: positives, 1: negatives).
        count: words per row.

    Row ``r`` depends only on ``(seed, positions[r], stream)`` (splitmix64 of a per-row counter), so slicing the
    global batch among ranks does not change any row's numbers.
    """
    positions = np.asarray(positions, dtype=np.int64).astype(np.uint64)
    key = np.uint64(mix64_int(seed * 0x2545F4914F6CDD1D + stream * GOLDEN + 0x632BE59BD9B4E019))
    base = mix64(mix64(positions * np.uint64(GOLDEN) + key))  # [R], one independent word per row
    return mix64(base[:, None] + np.arange(count, dtype=np.uint64)[None, :] * np.uint64(GOLDEN))


def batch_uniforms(seed: int, positions: np.ndarray | Sequence[int], stream: int, count: int) -> np.ndarray:
    """``[R, count]`` float64 uniforms in ``[0, 1)`` (53 random bits each) from :func:`batch_words`."""
    words = batch_words(seed, positions, stream, count) >> np.uint64(11)
    return words.astype(np.float64) * (1.0 / 9007199254740992.0)


def batch_integers(
    seed: int, positions: np.ndarray | Sequence[int], stream: int, count: int, high: np.ndarray
) -> np.ndarray:
    """``[R, count]`` int64 uniform integers in ``[0, high_r)`` per row (``0 < high_r < 2^32``), from
    :func:`batch_words` by a multiply-shift (the upper 32 bits times ``high``; the bias is below
    ``high / 2^32``, e.g. 6e−6 relative for MovieLens-20M's 26,744 items)."""
    high = np.asarray(high, dtype=np.int64)
    if high.size and (high.min() < 1 or high.max() >= 2**32):
        raise ValueError(f"batch_integers: high must be in [1, 2^32), got values in [{high.min()}, {high.max()}]")
    words = batch_words(seed, positions, stream, count) >> np.uint64(32)
    words *= high.astype(np.uint64)[:, None]
    return (words >> np.uint64(32)).astype(np.int64)


def sample_distinct(
    n: np.ndarray, k: int, u: np.ndarray, k_rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``k_r`` distinct positions in ``[0, n_r)`` per row, uniformly (Floyd's algorithm, vectorized over rows).

    Args:
        n: ``[R]`` int64 population sizes (``>= 0``).
        k: the width of the output (positions wanted per row when ``k_rows`` is None).
        u: ``[R, k]`` uniforms in ``[0, 1)`` (e.g. from :func:`batch_uniforms`).
        k_rows: ``[R]`` positions wanted per row (each ``<= k``); None: ``k`` for every row.

    Returns:
        ``positions [R, k]`` int64 and ``valid [R, k]`` bool; row ``r``'s valid entries are its first
        ``min(n_r, k_r)`` columns. Rows with ``n_r <= k_r`` get every position ``0..n_r−1`` in order; the others a
        uniformly random ``k_r``-subset (every subset equally likely; the order within the row is not uniform,
        callers that care shuffle it). Invalid entries hold 0.
    """
    n = np.asarray(n, dtype=np.int64)
    rows = n.shape[0]
    want = np.full(rows, k, dtype=np.int64) if k_rows is None else np.minimum(np.asarray(k_rows, dtype=np.int64), k)
    t = np.arange(k, dtype=np.int64)
    valid = t[None, :] < np.minimum(n, want)[:, None]
    if k == 0 or rows == 0:
        return np.zeros((rows, k), dtype=np.int64), valid
    chosen = np.zeros((rows, k), dtype=np.int64)
    for step in range(k):
        j = n - want + step  # Floyd: j runs over n−k_r .. n−1 (rows with step >= k_r are not used)
        r = np.minimum((u[:, step] * (j + 1)).astype(np.int64), j)  # uniform in [0, j]
        clash = (chosen[:, :step] == r[:, None]).any(axis=1) if step else np.zeros(rows, dtype=bool)
        chosen[:, step] = np.where(clash, j, r)
    chosen = np.where((n <= want)[:, None], t[None, :], chosen)
    return np.where(valid, chosen, 0), valid


class QueryBatch(SampledBatch):
    """One rank's share of a global query batch: a list of query ids with the batch's random-number keys.

    The keys are those of :class:`~fccolit.samplers.base.SampledBatch`: ``seed``, ``positions``, ``epoch``,
    ``batch_index``.

    Args:
        ids, seed, positions, epoch, batch_index: as for :class:`~fccolit.samplers.base.SampledBatch`.

    Raises:
        ValueError: ``positions`` and ``ids`` differ in length.

    Example:
        >>> batch = QueryBatch([3, 0], seed=5, positions=[1, 3])
        >>> batch, batch.seed, batch.positions
        ([3, 0], 5, [1, 3])
    """


class QueryBatchSampler(RankAwareBatchSampler):
    """Global batches of ``queries_per_batch`` distinct eligible queries; rank ``r`` gets ``global[r::W]``.

    Each epoch walks through random permutations of the eligible queries (drawn from the ``(seed, epoch)``
    generator): batch ``b`` takes the next ``queries_per_batch`` of them. Every eligible query is visited once
    per pass before any is repeated; when a batch straddles two passes, the new pass is reordered so that the
    batch holds no query twice (the new pass still visits every query once). Yields :class:`QueryBatch`.

    Args:
        eligible: which queries may be drawn: a ``[Q]`` bool mask over query ids (e.g. ``num_relevant > 0``) or a
            1-D tensor / array / sequence of query ids.
        queries_per_batch: the global batch size B (a multiple of the number of processes).
        num_batches: batches per epoch (default: one pass over the eligible queries, ``⌈n_eligible / B⌉``).
        seed, rank, world_size: see :class:`~fccolit.samplers.RankAwareBatchSampler`.

    Raises:
        ValueError: no eligible query; repeated query ids; ``queries_per_batch`` outside ``[1, n_eligible]``;
            ``num_batches`` < 1; on iteration, ``queries_per_batch`` not a multiple of ``world_size``.

    Example (queries 0, 2 and 3 are eligible):
        >>> import torch
        >>> sampler = QueryBatchSampler(torch.tensor([True, False, True, True]), queries_per_batch=2,
        ...                             seed=0, rank=0, world_size=1)
        >>> len(sampler), list(iter(sampler))[:2], type(next(iter(sampler))).__name__
        (2, [[3, 0], [2, 3]], 'QueryBatch')
    """

    batch_type = QueryBatch

    def __init__(
        self,
        eligible: torch.Tensor | np.ndarray | Sequence[int],
        queries_per_batch: int,
        num_batches: int | None = None,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        eligible = torch.as_tensor(np.asarray(eligible))
        if eligible.dtype == torch.bool:
            eligible = torch.nonzero(eligible).flatten()
        self.eligible = eligible.to(torch.long).reshape(-1)
        n = self.eligible.numel()
        if n == 0:
            raise ValueError(
                "QueryBatchSampler: no eligible query (a query needs at least one relevant training item)"
            )
        if int(torch.unique(self.eligible).numel()) != n:
            raise ValueError("QueryBatchSampler: the eligible query ids must be distinct")
        if not 0 < int(queries_per_batch) <= n:
            raise ValueError(
                f"QueryBatchSampler: queries_per_batch must be between 1 and the number of eligible queries ({n}), "
                f"got {queries_per_batch}"
            )
        if num_batches is not None and int(num_batches) < 1:
            raise ValueError(f"QueryBatchSampler: num_batches must be positive or None, got {num_batches}")
        self.queries_per_batch = int(queries_per_batch)
        self._num_batches = int(num_batches) if num_batches is not None else math.ceil(n / self.queries_per_batch)

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.queries_per_batch

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        n, size = self.eligible.numel(), self.queries_per_batch
        perm = self.eligible[torch.randperm(n, generator=generator)]
        pos = 0
        for _ in range(self._num_batches):
            take = perm[pos : pos + size]
            if take.numel() < size:  # the batch straddles two passes
                fresh = self.eligible[torch.randperm(n, generator=generator)]
                seen = torch.isin(fresh, take)
                fresh = torch.cat([fresh[~seen], fresh[seen]])  # this batch's queries go to the end of the pass
                need = size - take.numel()
                take = torch.cat([take, fresh[:need]])
                perm, pos = fresh, need
            else:
                pos += size
            yield take

