"""Vectorized kernels on CSR (compressed sparse row) arrays: per-row offsets ``indptr [R + 1]`` into flat values.

The ranking data keep every per-user / per-query list this way (never a dense users × items table): ideal DCGs,
padded rows of a batch, the k-th item a user has not rated (a binary search, no rejection loop), id compaction and
the per-user counting of the time split. Sparse LIBSVM features use :func:`take_rows` to cut batches and splits.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "compact_ids", "csr_indptr", "ideal_dcg", "pack_left", "ragged_rows", "rank_from_end", "row_positions",
    "sample_unrated_distinct", "segment_sum", "sort_desc_within_rows", "take_rows", "unrated_items",
]


def row_positions(indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row, position within row)`` of every entry of a CSR structure (both ``[nnz]`` int64)."""
    counts = np.diff(indptr)
    row = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    return row, np.arange(indptr[-1], dtype=np.int64) - indptr[:-1][row]


def take_rows(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR structure of the rows ``rows`` (in that order, repeats allowed) of a CSR matrix, in O(R + their nnz).

    Args:
        indptr: ``[N + 1]`` row offsets of the matrix.
        rows: ``[R]`` row numbers in ``[0, N)``.

    Returns:
        ``(indptr [R + 1] int64, positions [nnz] int64)``: the new row offsets, and for each entry of the new matrix
        its position in the old flat ``indices`` / ``values`` (so ``values[positions]`` are the new values).
    """
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.asarray(indptr, dtype=np.int64)[rows]
    lengths = np.asarray(indptr, dtype=np.int64)[rows + 1] - starts
    out = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    positions = np.arange(out[-1], dtype=np.int64) + np.repeat(starts - out[:-1], lengths)
    return out, positions


def segment_sum(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over each CSR row (0 for empty rows), float64."""
    out = np.zeros(indptr.size - 1, dtype=np.float64)
    counts = np.diff(indptr)
    nonempty = counts > 0
    if values.size:
        out[nonempty] = np.add.reduceat(values.astype(np.float64), indptr[:-1][nonempty])
    return out


def ideal_dcg(indptr: np.ndarray, relevance_desc: np.ndarray, k: int | None = None) -> np.ndarray:
    """Ideal DCG of every row: ``Σ_{r ≤ K} (2^{y_(r)} − 1) / log2(1 + r)`` over the row's relevances sorted in
    decreasing order (ranks ``r`` 1-based; all of them when ``k`` is None).

    Args:
        indptr: ``[Q + 1]`` CSR row offsets.
        relevance_desc: ``[nnz]`` relevances, **sorted in decreasing order within each row**.
        k: cut-off K (None: the whole row).

    Returns:
        ``[Q]`` float64; 0 for rows without positive relevance.
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    rel = np.asarray(relevance_desc, dtype=np.float64)
    _, pos = row_positions(indptr)
    gain = np.exp2(rel) - 1.0
    discount = 1.0 / np.log2(pos + 2.0)
    if k is not None:
        discount[pos >= int(k)] = 0.0
    return segment_sum(gain * discount, indptr)


def sort_desc_within_rows(indptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Permutation of ``[nnz]`` that sorts each CSR row's ``values`` in decreasing order (stable)."""
    row, _ = row_positions(indptr)
    return np.lexsort((-np.asarray(values, dtype=np.float64), row))


def ragged_rows(indptr: np.ndarray, values: np.ndarray, rows: np.ndarray, pad, width: int | None = None) -> np.ndarray:
    """Rows ``rows`` of a CSR array, left-aligned and padded: ``[R, width]`` (width: the longest row)."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.asarray(indptr[rows], dtype=np.int64)
    lengths = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    if width is None:
        width = int(lengths.max()) if lengths.size else 0
    col = np.arange(width, dtype=np.int64)
    valid = col[None, :] < lengths[:, None]
    out = np.full((rows.size, width), pad, dtype=values.dtype)
    if values.size and valid.any():
        out[valid] = values[(starts[:, None] + col[None, :])[valid]]
    return out


def unrated_items(indptr: np.ndarray, items: np.ndarray, rows: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The ``k``-th (0-based) item **not** in each row's sorted item list: ``[R, C]`` from ``k [R, C]``.

    With the row's rated items ``r_0 < r_1 < …`` and ``c_j = r_j − j`` (unrated items before ``r_j``), the k-th
    unrated item is ``k + #{j : c_j ≤ k}``. One binary search per draw over the concatenated rows of the batch
    (keys ``row · (I + 1) + c_j`` are globally sorted), so the cost is O(nnz of the batch rows + draws · log).
    Requires ``0 ≤ k < I − len(row)``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    starts = np.asarray(indptr[rows], dtype=np.int64)
    lengths = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    total = int(lengths.sum())
    if total == 0:
        return k.copy()
    offsets = np.zeros(rows.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    seg = np.repeat(np.arange(rows.size, dtype=np.int64), lengths)
    j = np.arange(total, dtype=np.int64) - offsets[seg]
    rated = np.asarray(items[np.repeat(starts, lengths) + j], dtype=np.int64)
    span = int(rated.max()) + 2 if rated.size else 1
    span = max(span, int(k.max()) + 2 if k.size else 1)
    keys = seg * span + (rated - j)
    query = np.arange(rows.size, dtype=np.int64)[:, None] * span + k
    counts = np.searchsorted(keys, query, side="right") - offsets[:, None]
    return k + counts


def pack_left(values: np.ndarray, valid: np.ndarray, width: int, pad) -> tuple[np.ndarray, np.ndarray]:
    """Move each row's valid entries to the left (stable), keep ``width`` columns; returns (values, valid)."""
    order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    return np.where(np.take_along_axis(valid, order, 1), np.take_along_axis(values, order, 1), pad), np.take_along_axis(
        valid, order, 1
    )


def compact_ids(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(index [N] int64 in 0..n−1 in increasing raw-id order, the n distinct raw ids)``."""
    raw = np.asarray(raw, dtype=np.int64)
    if raw.size == 0:
        return raw.copy(), raw.copy()
    low, high = int(raw.min()), int(raw.max())
    if low >= 0 and high < max(4 * raw.size, 1 << 22):  # ids are small integers: a lookup table, no sort
        present = np.zeros(high + 1, dtype=bool)
        present[raw] = True
        lut = np.cumsum(present, dtype=np.int64) - 1
        return lut[raw], np.flatnonzero(present).astype(np.int64)
    uniq, inverse = np.unique(raw, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), uniq.astype(np.int64)


def csr_indptr(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """``[num_rows + 1]`` int64 CSR row offsets of entries sorted by ``rows`` (each entry's row id)."""
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


def rank_from_end(user: np.ndarray, selected: np.ndarray, num_users: int) -> tuple[np.ndarray, np.ndarray]:
    """For entries sorted by (user, time): among the ``selected`` ones, how many selected entries of the same
    user come later (``[N]``, meaningful where selected), and the per-user count of selected entries."""
    count = np.bincount(user[selected], minlength=num_users).astype(np.int64)
    before_user = np.zeros(num_users + 1, dtype=np.int64)
    np.cumsum(count, out=before_user[1:])
    sel = selected.astype(np.int64)
    rank_in_user = np.cumsum(sel)
    rank_in_user -= sel  # selected entries before this one, overall
    del sel
    rank_in_user -= before_user[user]
    from_end = count[user]
    from_end -= 1
    from_end -= rank_in_user
    return from_end, count


def sample_unrated_distinct(
    indptr: np.ndarray, items: np.ndarray, users: np.ndarray, count: int, num_items: int, rng: np.random.Generator
) -> np.ndarray:
    """``[len(users), count]`` int32 distinct items each user never rated (uniform without replacement), −1 padded
    when a user has fewer unrated items than ``count``. Built in chunks; duplicates are redrawn until none is left
    (rows with few unrated items take a permutation instead)."""
    out = np.full((users.size, count), -1, dtype=np.int32)
    chunk = max(1, (8 << 20) // max(count, 1))
    for lo in range(0, users.size, chunk):
        rows = users[lo : lo + chunk]
        unrated = num_items - (indptr[rows + 1] - indptr[rows])
        k = np.zeros((rows.size, count), dtype=np.int64)
        valid = np.arange(count)[None, :] < np.minimum(unrated, count)[:, None]
        few = unrated <= 4 * count
        for r in np.flatnonzero(few):  # the whole unrated set, or a random part of a small one
            n = int(unrated[r])
            k[r, : min(n, count)] = np.arange(n) if n <= count else rng.permutation(n)[:count]
        many = np.flatnonzero(~few)
        if many.size:
            draws = np.floor(rng.random((many.size, count)) * unrated[many, None]).astype(np.int64)
            while True:
                order = np.argsort(draws, axis=1, kind="stable")
                sorted_draws = np.take_along_axis(draws, order, 1)
                dup = np.zeros_like(draws, dtype=bool)
                np.put_along_axis(dup, order[:, 1:], sorted_draws[:, 1:] == sorted_draws[:, :-1], 1)
                if not dup.any():
                    break
                redraw = np.floor(rng.random(int(dup.sum())) * np.broadcast_to(unrated[many, None], dup.shape)[dup])
                draws[dup] = redraw.astype(np.int64)
            k[many] = draws
        mapped = unrated_items(indptr, items, rows, np.where(valid, k, 0))
        out[lo : lo + chunk] = np.where(valid, mapped, -1)
    return out
