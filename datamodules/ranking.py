"""What the ranking DataModules share: CSR pair ids, ideal DCGs, the split protocols of recommendation data, and
the batched datasets that produce the ranking batch schema.

Ranking batch schema (shared with the NDCG algorithms; every tensor is CPU, first dimension the batch)
====================================================================================================

Training batch, per rank: B queries (users for recommendation), each with a list of L items:

=================  ===================  ==============================================================================
field              shape / dtype        meaning
=================  ===================  ==============================================================================
``query``          [B] long             query / user id in ``0..num_queries−1``
``items``          [B, L] long          item ids (recommendation only); padding holds item 0 (a valid id), mask
                                        False
``features``       [B, L, F] float32    document features (learning to rank only); padding rows are 0
``relevance``      [B, L] float32       graded relevance y (gain 2^y − 1); 0 for sampled non-relevant items and
                                        padding
``pair_index``     [B, L] long          flat id of the (query, relevant item) pair, the row of SONG's per-pair state
                                        ``u``: ``pair_offset[q] + position among q's relevant training items``; −1 on
                                        non-relevant items and padding
``mask``           [B, L] bool          True for real entries
``num_items``      [B] float32          N_q: recommendation: the number of items (every user ranks all items, seed
                                        000 §2.4.4, LibAUC's ``item_num``); learning to rank: the query's list length
``ideal_dcg``      [B] float32          Z_q: ideal DCG of the query's whole training relevance list, gain 2^y − 1,
                                        discount 1/log2(1 + rank), no cut-off
``ideal_dcg_at_k`` [B] float32          Z_q^K: the same truncated at K = the DataModule's ``top_k`` (only when set)
``num_relevant``   [B] long             N_q^+: number of relevant training items of the query
=================  ===================  ==============================================================================

Item layout of a training row:

* recommendation: columns ``0..P−1`` are relevant training items drawn without replacement from the user's
  relevant items (a user with fewer than P has them all and the rest of the P columns padded), columns ``P..L−1``
  are M items drawn uniformly *with replacement* from the items the user has **not rated in the training split**
  (in increasing item order: the draws are i.i.d., so the order carries no information)
  (held-out items are unknown at training time; rated items below a binary threshold are neither drawn as
  positives nor as negatives). The sampling is exact (no rejection loop): the k-th unrated item of a user is found
  by a binary search over the user's sorted CSR row, vectorized over the batch, never a dense users × items table.
* learning to rank: a slate of L documents of the query's list: P relevant documents drawn without replacement,
  then ``L − p`` more drawn uniformly without replacement from the rest of the list (any relevance; relevant ones
  get their pair id too); a list of at most L documents is taken whole. The real entries are shuffled within the
  row (so a position-aware model cannot learn "relevant first") and padding is at the end.

Every draw is a pure function of (sampler seed, epoch, batch number, position in the global batch): see
:mod:`fccolit.samplers.ranking`.

Evaluation batches:

* learning to rank (full lists, padded to the longest list of the batch): ``query`` [Q] (ids within the split),
  ``features`` [Q, Lmax, F], ``relevance`` [Q, Lmax], ``mask`` [Q, Lmax];
* recommendation, full ranking over all items: ``query`` [U] user ids, ``heldout_items`` [U, H] long (−1 padded),
  ``heldout_relevance`` [U, H] float32, ``exclude_items`` [U, E] long (−1 padded): the items the user rated before
  the split (training items; for the test split also the validation items), removed from the ranking;
* recommendation with sampled candidates (LibAUC's protocol): ``query`` [U], ``items`` [U, C] (held-out items
  first, then the fixed sampled negatives), ``relevance`` [U, C], ``mask`` [U, C].

Evaluation batches are consumed by :class:`fccolit.metrics.NDCG` (``ndcg_at_k(scores, relevance, k, mask)``) and
:class:`fccolit.metrics.FullRankingNDCG` (``update(scores[U, I], heldout_items, heldout_relevance,
exclude_items)``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.ratings import Ratings
from fccolit.samplers import RankAwareBatchSampler
from fccolit.samplers.ranking import QueryBatchSampler, batch_integers, batch_uniforms, sample_distinct

from fccolit.datamodules.base import FCCODataModule

__all__ = [
    "ideal_dcg",
    "ragged_rows",
    "unrated_items",
    "build_recommendation_arrays",
    "RecommendationTrainDataset",
    "FullRankingEvalDataset",
    "SampledCandidatesEvalDataset",
    "ListwiseTrainDataset",
    "ListEvalDataset",
    "RankingDataModule",
    "RecommendationDataModule",
]

# draw streams of batch_uniforms
_POSITIVES, _OTHERS, _SHUFFLE = 0, 1, 2


# ================================================================================================ CSR helpers
def _row_positions(indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row, position within row)`` of every entry of a CSR structure (both ``[nnz]`` int64)."""
    counts = np.diff(indptr)
    row = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    return row, np.arange(indptr[-1], dtype=np.int64) - indptr[:-1][row]


def _segment_sum(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
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
    _, pos = _row_positions(indptr)
    gain = np.exp2(rel) - 1.0
    discount = 1.0 / np.log2(pos + 2.0)
    if k is not None:
        discount[pos >= int(k)] = 0.0
    return _segment_sum(gain * discount, indptr)


def _sort_desc_within_rows(indptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Permutation of ``[nnz]`` that sorts each CSR row's ``values`` in decreasing order (stable)."""
    row, _ = _row_positions(indptr)
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


def _batch_keys(indices) -> tuple[np.ndarray, int, np.ndarray]:
    """``(query ids, batch seed, global positions)`` of a ``__getitems__`` call.

    A :class:`~fccolit.samplers.ranking.QueryBatch` carries its seed and positions; any other sequence (a plain
    list, ``dataset[i]``) gets seed 0 and positions ``0..n−1``: a fixed draw, the same at every call.
    """
    ids = np.asarray(list(indices), dtype=np.int64)
    seed = getattr(indices, "seed", 0)
    positions = getattr(indices, "positions", None)
    positions = np.arange(ids.size, dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    return ids, int(seed), positions


def _check_ids(ids: np.ndarray, size: int, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= size):
        raise IndexError(f"{what}: index out of range [0, {size}): got values in [{ids.min()}, {ids.max()}]")


def _pack_left(values: np.ndarray, valid: np.ndarray, width: int, pad) -> tuple[np.ndarray, np.ndarray]:
    """Move each row's valid entries to the left (stable), keep ``width`` columns; returns (values, valid)."""
    order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    return np.where(np.take_along_axis(valid, order, 1), np.take_along_axis(values, order, 1), pad), np.take_along_axis(
        valid, order, 1
    )


def _t(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype)


# ================================================================================================ recommendation
def _compact_ids(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _csr_indptr(rows: np.ndarray, num_rows: int) -> np.ndarray:
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


def _rank_from_end(user: np.ndarray, selected: np.ndarray, num_users: int) -> tuple[np.ndarray, np.ndarray]:
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


def _sample_unrated_distinct(
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


def build_recommendation_arrays(
    ratings: Ratings,
    *,
    num_test: int,
    num_val: int,
    short_users: Literal["partial", "drop", "train"] = "partial",
    relevance: Literal["graded", "binary"] = "graded",
    relevance_threshold: float = 4.0,
    min_ratings: int = 1,
    eval_negatives: int | None = None,
    eval_negatives_seed: int = 123,
    test_mask: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Split explicit ratings per user by time and build the CSR arrays the recommendation datasets read.

    Steps (every choice documented in :class:`RecommendationDataModule`):

    1. ids: users and items are renumbered ``0..n−1`` in increasing raw-id order (LibAUC's reindexing);
    2. duplicates: a (user, item) rated more than once keeps its latest rating (time, then file order);
    3. users with fewer than ``min_ratings`` ratings are dropped (and with ``short_users="drop"`` those with fewer
       than ``num_test + num_val + 1``); ids are renumbered over what is left (items nobody kept rating vanish);
    4. each user's ratings are ordered by time, ties by file order (stable); the last ``num_test`` are the test
       items and the ``num_val`` before them the validation items (with ``test_mask``, e.g. Netflix's probe set,
       the test items are the masked ones instead, never a user's first rating); a user always keeps at least
       one training rating (``short_users="partial"``: the held-out sets shrink, test first, which is LibAUC's
       "first interaction to train"; ``"train"``: a user too short for both sets holds out nothing);
    5. relevance ``y``: the rating (``"graded"``) or ``1[rating ≥ relevance_threshold]`` (``"binary"``);
    6. ``eval_negatives``: for every user of a held-out split, that many distinct items the user never rated in
       any split, drawn once with ``numpy.random.default_rng([eval_negatives_seed, split])`` (LibAUC's sampled
       evaluation candidates).

    Returns:
        ``{name: array}``: ``user_raw [U]``, ``item_raw [I]``; ``train_indptr [U+1]`` / ``train_items`` (int32,
        every training rating, sorted by item within a user); ``pos_indptr [U+1]`` / ``pos_items`` (int32) /
        ``pos_relevance`` (float32): the relevant training items sorted by decreasing relevance then item, whose
        flat positions are the pair ids; ``ideal_dcg [U]`` (float64); ``{val,test}_indptr`` / ``_items`` /
        ``_relevance`` (sorted by item); with ``eval_negatives``, ``{val,test}_users [U_s]`` and
        ``{val,test}_negatives [U_s, C]`` (int32, −1 padded); ``info_*`` scalars (duplicates and users dropped).
    """
    if short_users not in ("partial", "drop", "train"):
        raise ValueError(f"short_users must be 'partial', 'drop' or 'train', got {short_users!r}")
    if relevance not in ("graded", "binary"):
        raise ValueError(f"relevance must be 'graded' or 'binary', got {relevance!r}")
    if num_test < 0 or num_val < 0:
        raise ValueError(f"num_test and num_val must be >= 0, got {num_test} and {num_val}")
    n = len(ratings)
    if n == 0:
        raise ValueError("the ratings file holds no rating")
    # ids as int32 (fewer than 2^31 users / items): this function's memory is a few dozen bytes per rating
    user, user_raw = _compact_ids(ratings.user)
    user = user.astype(np.int32)
    item, item_raw = _compact_ids(ratings.item)
    item = item.astype(np.int32)
    num_users, num_items = user_raw.size, item_raw.size

    # chronological order within each user; ties keep the file order
    time = np.asarray(ratings.time, dtype=np.int64)
    t0, span = int(time.min()), int(time.max()) - int(time.min()) + 1
    if num_users * span < 2**62:
        key = user.astype(np.int64)
        key *= span
        key += time
        key -= t0
        order = np.argsort(key, kind="stable")
        del key
    else:
        order = np.lexsort((np.arange(n), time, user))
    user, item = user[order], item[order]
    rating = np.asarray(ratings.rating, dtype=np.float32)[order]
    mask = None if test_mask is None else np.asarray(test_mask, dtype=bool)[order]
    del order, time

    # duplicates keep the latest; sorting by (user, item) keeps them in chronological order
    key = user.astype(np.int64)
    key *= num_items
    key += item
    by_pair = np.argsort(key, kind="stable")
    key = key[by_pair]
    earlier = by_pair[:-1][key[1:] == key[:-1]]
    del key
    keep = np.ones(n, dtype=bool)
    keep[earlier] = False
    num_duplicates = int(earlier.size)
    del earlier

    per_user = np.bincount(user[keep], minlength=num_users)
    needed = max(int(min_ratings), 1, num_test + num_val + 1 if short_users == "drop" else 1)
    keep &= per_user[user] >= needed
    num_dropped_users = int(((per_user > 0) & (per_user < needed)).sum())
    if not keep.any():
        raise ValueError(
            f"no user has at least {needed} ratings (min_ratings={min_ratings}, short_users={short_users!r})"
        )
    if not keep.all():
        new_position = np.cumsum(keep) - 1
        by_pair = new_position[by_pair[keep[by_pair]]]
        del new_position
        user, item, rating = user[keep], item[keep], rating[keep]
        mask = None if mask is None else mask[keep]
        user, kept_users = _compact_ids(user)  # monotone renumbering: the (user, item) order of by_pair holds
        item, kept_items = _compact_ids(item)
        user, item = user.astype(np.int32), item.astype(np.int32)
        user_raw, item_raw = user_raw[kept_users], item_raw[kept_items]
        num_users, num_items = user_raw.size, item_raw.size
    del keep
    n = user.size

    # the split
    user_start = _csr_indptr(user, num_users)
    position = np.arange(n, dtype=np.int64)
    position -= user_start[user]
    count = np.diff(user_start)
    if mask is None:
        tests = np.minimum(num_test, count - 1)
        if short_users == "train":
            tests = np.where(count >= num_test + num_val + 1, tests, 0)
        is_test = (count[user] - 1 - position) < tests[user]
    else:
        is_test = mask & (position > 0)
    rest_from_end, rest_count = _rank_from_end(user, ~is_test, num_users)
    vals = np.minimum(num_val, rest_count - 1)
    if short_users == "train" and mask is None:
        vals = np.where(count >= num_test + num_val + 1, vals, 0)
    is_val = ~is_test & (rest_from_end < vals[user])
    is_train = ~is_test & ~is_val
    del position, rest_from_end

    y = rating if relevance == "graded" else (rating >= relevance_threshold).astype(np.float32)
    arrays: dict[str, np.ndarray] = {"user_raw": user_raw, "item_raw": item_raw}
    part_of = {"train": is_train, "val": is_val, "test": is_test}
    for split, selected in part_of.items():
        rows = by_pair[selected[by_pair]]  # this split's entries sorted by (user, item)
        arrays[f"{split}_indptr"] = _csr_indptr(user[rows], num_users)
        arrays[f"{split}_items"] = item[rows]
        if split != "train":
            arrays[f"{split}_relevance"] = y[rows].astype(np.float32)
        else:
            relevant = rows[y[rows] > 0]
            pos_indptr = _csr_indptr(user[relevant], num_users)
            order = _sort_desc_within_rows(pos_indptr, y[relevant])
            relevant = relevant[order]
            arrays["pos_indptr"] = pos_indptr
            arrays["pos_items"] = item[relevant]
            arrays["pos_relevance"] = y[relevant].astype(np.float32)
            arrays["ideal_dcg"] = ideal_dcg(pos_indptr, arrays["pos_relevance"])

    if eval_negatives:
        all_indptr = _csr_indptr(user[by_pair], num_users)
        all_items = item[by_pair]
        for s, split in enumerate(("val", "test")):
            users = np.flatnonzero(np.diff(arrays[f"{split}_indptr"]) > 0).astype(np.int64)
            rng = np.random.default_rng([int(eval_negatives_seed), s])
            arrays[f"{split}_users"] = users
            arrays[f"{split}_negatives"] = _sample_unrated_distinct(
                all_indptr, all_items, users, int(eval_negatives), num_items, rng
            )
    arrays["info_duplicates"] = np.asarray(num_duplicates, dtype=np.int64)
    arrays["info_dropped_users"] = np.asarray(num_dropped_users, dtype=np.int64)
    return arrays


class RecommendationTrainDataset(Dataset):
    """Training batches of recommendation data (schema in the module docstring), indexed by user id.

    Args:
        arrays: the arrays of :func:`build_recommendation_arrays` (numpy, memory-mapped is fine).
        num_positives: P, relevant items per user.
        num_negatives: M, unrated items per user.
        top_k: K of ``ideal_dcg_at_k`` (None: no such field).
    """

    def __init__(
        self, arrays: Mapping[str, np.ndarray], num_positives: int, num_negatives: int, top_k: int | None = None
    ):
        self.a = arrays
        self.num_users = int(arrays["user_raw"].shape[0])
        self.num_items = int(arrays["item_raw"].shape[0])
        self.num_positives, self.num_negatives = int(num_positives), int(num_negatives)
        self.ideal = np.asarray(arrays["ideal_dcg"], dtype=np.float64)
        self.ideal_at_k = None
        if top_k is not None:
            self.ideal_at_k = ideal_dcg(arrays["pos_indptr"], arrays["pos_relevance"], int(top_k))

    def __len__(self) -> int:
        return self.num_users

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        q, seed, positions = _batch_keys(indices)
        _check_ids(q, self.num_users, "RecommendationTrainDataset")
        a, P, M = self.a, self.num_positives, self.num_negatives
        pos_start = np.asarray(a["pos_indptr"][q], dtype=np.int64)
        num_relevant = np.asarray(a["pos_indptr"][q + 1], dtype=np.int64) - pos_start
        chosen, valid = sample_distinct(num_relevant, P, batch_uniforms(seed, positions, _POSITIVES, P))
        flat = pos_start[:, None] + chosen
        safe = np.where(valid, flat, 0)
        pos_items = np.where(valid, a["pos_items"][safe] if a["pos_items"].size else 0, 0)
        pos_rel = np.where(valid, a["pos_relevance"][safe] if a["pos_relevance"].size else 0, 0)

        rated = np.asarray(a["train_indptr"][q + 1], dtype=np.int64) - np.asarray(a["train_indptr"][q], dtype=np.int64)
        unrated = self.num_items - rated
        # i.i.d. draws: sorting a row's draws changes nothing but makes the binary searches ~3x faster
        k = np.sort(batch_integers(seed, positions, _OTHERS, M, np.maximum(unrated, 1)), axis=1)
        neg_valid = np.broadcast_to(unrated[:, None] > 0, k.shape)
        neg_items = unrated_items(a["train_indptr"], a["train_items"], q, k)
        if not neg_valid.all():
            neg_items = np.where(neg_valid, neg_items, 0)

        batch = {
            "query": _t(q, torch.long),
            "items": _t(np.concatenate([pos_items, neg_items], axis=1), torch.long),
            "relevance": _t(np.concatenate([pos_rel, np.zeros(k.shape, np.float32)], axis=1), torch.float32),
            "pair_index": _t(np.concatenate([np.where(valid, flat, -1), np.full(k.shape, -1)], axis=1), torch.long),
            "mask": _t(np.concatenate([valid, neg_valid], axis=1), torch.bool),
            "num_items": torch.full((q.size,), float(self.num_items), dtype=torch.float32),
            "ideal_dcg": _t(self.ideal[q], torch.float32),
            "num_relevant": _t(num_relevant, torch.long),
        }
        if self.ideal_at_k is not None:
            batch["ideal_dcg_at_k"] = _t(self.ideal_at_k[q], torch.float32)
        return batch


class FullRankingEvalDataset(Dataset):
    """Full-ranking evaluation batches of one held-out split: row ``i`` is the i-th user holding out an item.

    Args:
        arrays: the arrays of :func:`build_recommendation_arrays`.
        split: ``"val"`` or ``"test"``; the excluded items are the user's training items and the items the user
            holds out in the other split: the validation items for ``"test"`` (rated before), and the test items for
            ``"val"`` (so that a user's test item, a later true positive, is not ranked as a negative in the
            validation ranking that selects the checkpoint).
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], split: Literal["val", "test"]):
        self.a, self.split = arrays, split
        self.users = np.flatnonzero(np.diff(arrays[f"{split}_indptr"]) > 0).astype(np.int64)
        self.known = ["train", "val" if split == "test" else "test"]

    def __len__(self) -> int:
        return int(self.users.size)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(list(indices), dtype=np.int64)
        _check_ids(rows, len(self), f"FullRankingEvalDataset({self.split})")
        users, a, s = self.users[rows], self.a, self.split
        known = [ragged_rows(a[f"{p}_indptr"], np.asarray(a[f"{p}_items"]), users, -1) for p in self.known]
        exclude = np.concatenate(known, axis=1)
        if len(known) > 1:  # −1 padding of the first part sits between real ids: pack them to the left
            exclude, _ = _pack_left(exclude, exclude >= 0, max(int((exclude >= 0).sum(1).max(initial=0)), 0), -1)
        return {
            "query": _t(users, torch.long),
            "heldout_items": _t(ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_items"]), users, -1), torch.long),
            "heldout_relevance": _t(
                ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_relevance"]), users, 0), torch.float32
            ),
            "exclude_items": _t(exclude, torch.long),
        }


class SampledCandidatesEvalDataset(Dataset):
    """LibAUC's evaluation batches: each user's held-out items (padded to ``width`` columns) followed by the
    fixed sampled unrated negatives of the split.

    Args:
        arrays: the arrays of :func:`build_recommendation_arrays` built with ``eval_negatives``.
        split: ``"val"`` or ``"test"``.
        width: held-out columns (the most items a user holds out in the split, e.g. 5).
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], split: Literal["val", "test"], width: int):
        self.a, self.split, self.width = arrays, split, int(width)
        self.users = np.asarray(arrays[f"{split}_users"], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.users.size)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(list(indices), dtype=np.int64)
        _check_ids(rows, len(self), f"SampledCandidatesEvalDataset({self.split})")
        users, a, s = self.users[rows], self.a, self.split
        held = ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_items"]), users, -1, self.width)
        rel = ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_relevance"]), users, 0, self.width)
        negatives = np.asarray(a[f"{s}_negatives"][rows], dtype=np.int64)
        items = np.concatenate([held, negatives], axis=1)
        mask = items >= 0
        return {
            "query": _t(users, torch.long),
            "items": _t(np.where(mask, items, 0), torch.long),
            "relevance": _t(np.concatenate([rel, np.zeros(negatives.shape, np.float32)], axis=1), torch.float32),
            "mask": _t(mask, torch.bool),
        }


# ================================================================================================ learning to rank
def ltr_pair_arrays(indptr: np.ndarray, relevance: np.ndarray) -> dict[str, np.ndarray]:
    """Pair ids of a learning-to-rank training split: the relevant documents (``y > 0``) of each query in list
    order. Returns ``pos_indptr [Q+1]``, ``pos_docs [P]`` (document rows), ``pair_of_doc [N]`` (pair id or −1) and
    ``ideal_dcg [Q]``."""
    indptr = np.asarray(indptr, dtype=np.int64)
    relevance = np.asarray(relevance, dtype=np.float32)
    row, _ = _row_positions(indptr)
    relevant = np.flatnonzero(relevance > 0)
    pos_indptr = _csr_indptr(row[relevant], indptr.size - 1)
    pair_of_doc = np.full(relevance.size, -1, dtype=np.int64)
    pair_of_doc[relevant] = np.arange(relevant.size, dtype=np.int64)
    desc = relevance[_sort_desc_within_rows(indptr, relevance)]
    return {
        "pos_indptr": pos_indptr,
        "pos_docs": relevant.astype(np.int64),
        "pair_of_doc": pair_of_doc,
        "ideal_dcg": ideal_dcg(indptr, desc),
    }


class ListwiseTrainDataset(Dataset):
    """Training slates of learning-to-rank data (schema in the module docstring), indexed by query id.

    Args:
        features: ``[N, F]`` float32 documents of the training split, grouped by query.
        relevance: ``[N]`` float32 labels.
        indptr: ``[Q + 1]`` query offsets.
        pairs: :func:`ltr_pair_arrays` of the split.
        slate_length: L.
        num_positives: P, relevant documents drawn first (at most L).
        top_k: K of ``ideal_dcg_at_k`` (None: no such field).
    """

    def __init__(
        self,
        features: np.ndarray,
        relevance: np.ndarray,
        indptr: np.ndarray,
        pairs: Mapping[str, np.ndarray],
        slate_length: int,
        num_positives: int,
        top_k: int | None = None,
    ):
        self.x, self.y = features, np.asarray(relevance, dtype=np.float32)
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.pairs = pairs
        self.slate_length, self.num_positives = int(slate_length), min(int(num_positives), int(slate_length))
        self.ideal = np.asarray(pairs["ideal_dcg"], dtype=np.float64)
        self.ideal_at_k = None
        if top_k is not None:
            desc = self.y[_sort_desc_within_rows(self.indptr, self.y)]
            self.ideal_at_k = ideal_dcg(self.indptr, desc, int(top_k))

    def __len__(self) -> int:
        return int(self.indptr.size - 1)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        q, seed, positions = _batch_keys(indices)
        _check_ids(q, len(self), "ListwiseTrainDataset")
        L, P = self.slate_length, self.num_positives
        start = self.indptr[q]
        length = self.indptr[q + 1] - start
        pos_start = np.asarray(self.pairs["pos_indptr"][q], dtype=np.int64)
        num_relevant = np.asarray(self.pairs["pos_indptr"][q + 1], dtype=np.int64) - pos_start
        chosen, valid = sample_distinct(num_relevant, P, batch_uniforms(seed, positions, _POSITIVES, P))
        pos_docs = np.asarray(self.pairs["pos_docs"])
        docs_p = np.where(valid, pos_docs[np.where(valid, pos_start[:, None] + chosen, 0)] if pos_docs.size else 0, 0)
        taken = valid.sum(axis=1)

        # the rest of the slate: uniformly from the list minus the chosen relevant documents
        others = L - taken  # per row
        width = int(others.max()) if others.size else 0
        rank, valid_o = sample_distinct(length - taken, width, batch_uniforms(seed, positions, _OTHERS, width), others)
        excluded = np.sort(np.where(valid, docs_p - start[:, None], np.iinfo(np.int64).max), axis=1)
        gaps = excluded - np.arange(P)[None, :]  # c_j = e_j − j; sentinel entries stay huge
        in_list = rank + (gaps[:, None, :] <= rank[:, :, None]).sum(axis=2)
        docs_o = np.where(valid_o, start[:, None] + in_list, 0)

        docs = np.concatenate([docs_p, docs_o], axis=1)
        real = np.concatenate([valid, valid_o], axis=1)
        # shuffle the real entries of each row (padding last): sort by random keys, padding keys = 2
        keys = np.where(real, batch_uniforms(seed, positions, _SHUFFLE, docs.shape[1]), 2.0)
        order = np.argsort(keys, axis=1, kind="stable")[:, :L]
        docs, real = np.take_along_axis(docs, order, 1), np.take_along_axis(real, order, 1)
        if docs.shape[1] < L:  # every list in the batch is shorter than L
            pad = L - docs.shape[1]
            docs = np.pad(docs, ((0, 0), (0, pad)))
            real = np.pad(real, ((0, 0), (0, pad)))

        features = np.zeros(docs.shape + (self.x.shape[1],), dtype=np.float32)
        if real.any():
            features[real] = self.x[docs[real]]
        relevance = np.where(real, self.y[docs], 0).astype(np.float32)
        pair = np.where(real, np.asarray(self.pairs["pair_of_doc"])[docs], -1)
        batch = {
            "query": _t(q, torch.long),
            "features": torch.from_numpy(features),
            "relevance": _t(relevance, torch.float32),
            "pair_index": _t(pair, torch.long),
            "mask": _t(real, torch.bool),
            "num_items": _t(length.astype(np.float32), torch.float32),
            "ideal_dcg": _t(self.ideal[q], torch.float32),
            "num_relevant": _t(num_relevant, torch.long),
        }
        if self.ideal_at_k is not None:
            batch["ideal_dcg_at_k"] = _t(self.ideal_at_k[q], torch.float32)
        return batch


class ListEvalDataset(Dataset):
    """Full-list evaluation batches of a learning-to-rank split, padded to the longest list of the batch.

    Row ``i`` is query ``order[i]``; the queries are ordered by list length (ties by id) so that a batch holds
    lists of similar length and pads little. ``query`` holds the ids within the split.

    Args:
        features, relevance, indptr: the split (as :class:`ListwiseTrainDataset`).
        queries: the query ids to evaluate (default: all; e.g. without the queries that have no relevant document).
    """

    def __init__(
        self, features: np.ndarray, relevance: np.ndarray, indptr: np.ndarray, queries: np.ndarray | None = None
    ):
        self.x, self.y = features, np.asarray(relevance, dtype=np.float32)
        self.indptr = np.asarray(indptr, dtype=np.int64)
        queries = np.arange(self.indptr.size - 1) if queries is None else np.asarray(queries, dtype=np.int64)
        length = np.diff(self.indptr)[queries]
        self.queries = queries[np.lexsort((queries, length))]

    def __len__(self) -> int:
        return int(self.queries.size)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(list(indices), dtype=np.int64)
        _check_ids(rows, len(self), "ListEvalDataset")
        q = self.queries[rows]
        docs = ragged_rows(self.indptr, np.arange(self.indptr[-1], dtype=np.int64), q, -1)
        mask = docs >= 0
        features = np.zeros(docs.shape + (self.x.shape[1],), dtype=np.float32)
        if mask.any():
            features[mask] = self.x[docs[mask]]  # docs[mask] is increasing: one sequential read
        return {
            "query": _t(q, torch.long),
            "features": torch.from_numpy(features),
            "relevance": _t(np.where(mask, self.y[np.maximum(docs, 0)], 0), torch.float32),
            "mask": _t(mask, torch.bool),
        }


# ================================================================================================ DataModules
class RankingDataModule(FCCODataModule):
    """Base of the ranking DataModules: the query batch sampler, the cache, and the sizes as attributes.

    Subclasses fill :attr:`sizes`, set :attr:`train_num_relevant` (``[num_queries]``, to pick the eligible
    queries) and build the datasets in ``setup``.

    Args:
        queries_per_batch: global number of queries per training batch (a multiple of the number of devices).
        num_positives: P, relevant items per query in a training batch.
        num_batches: training batches per epoch (None: one pass over the eligible queries).
        top_k: K of the ``ideal_dcg_at_k`` field (None: the field is absent).
        seed: seeds the training stream (queries and items).
        num_workers, eval_batch_size: DataLoader workers and queries per evaluation batch.
        cache_dir: where the parsed arrays are cached (None: ``root/.fccolit-cache``, or ``~/.cache/fccolit`` when
            the data folder is read-only).
    """

    def __init__(
        self,
        queries_per_batch: int,
        num_positives: int,
        num_batches: int | None,
        top_k: int | None,
        seed: int,
        num_workers: int,
        eval_batch_size: int,
        cache_dir: str | os.PathLike | None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        if int(queries_per_batch) < 1:
            raise ValueError(f"queries_per_batch must be positive, got {queries_per_batch}")
        if int(num_positives) < 1:
            raise ValueError(f"num_positives must be positive, got {num_positives}")
        if top_k is not None and int(top_k) < 1:
            raise ValueError(f"top_k must be positive or None, got {top_k}")
        self.queries_per_batch, self.num_positives = int(queries_per_batch), int(num_positives)
        self.num_batches, self.top_k, self.seed = num_batches, top_k, int(seed)
        self._cache_dir = cache_dir
        self.train_num_relevant: np.ndarray | None = None

    def _cached(self, root: Path, files: Sequence[Path], options: Mapping[str, Any], prefix: str,
                build: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The arrays of ``build`` through the atomic cache, keyed by ``files`` and ``options``."""
        self.cache_dir = Path(self._cache_dir) if self._cache_dir is not None else default_cache_dir(root)
        self.cache_key = cache_key(files, options, prefix=prefix)
        return cached_arrays(self.cache_dir, self.cache_key, build)

    def _set_sizes(self, sizes: Mapping[str, int]) -> None:
        """:attr:`sizes` (and one attribute per size); ``top_k`` joins them when set, so an algorithm can check
        that its K is the K of the batches' ``ideal_dcg_at_k``."""
        self.sizes = {k: int(v) for k, v in sizes.items()}
        if self.top_k is not None:
            self.sizes["top_k"] = int(self.top_k)
        for name, value in self.sizes.items():
            setattr(self, name, value)

    @property
    def eligible_queries(self) -> np.ndarray:
        """Query ids with at least one relevant training item (those the training sampler draws)."""
        return np.flatnonzero(np.asarray(self.train_num_relevant) > 0)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        return QueryBatchSampler(
            self.eligible_queries, self.queries_per_batch, num_batches=self.num_batches, seed=self.seed
        )

    def prepare_data(self) -> None:
        """Nothing left to do: the cache entry was written (or found) in ``__init__``."""


_PROTOCOLS = {
    # protocol: (num_test, num_val, eval_negatives)
    "paper": (1, 1, None),
    "libauc": (5, 5, 1000),
}


class RecommendationDataModule(RankingDataModule):
    """Explicit-feedback recommendation as ranking: every user is a query over all items.

    Subclasses (:class:`~fccolit.datamodules.movielens.MovieLensDataModule`,
    :class:`~fccolit.datamodules.netflix.NetflixDataModule`) find and parse the files and call
    :meth:`_load` from their ``__init__``.

    Protocols (``protocol``; ``num_test``, ``num_val`` and ``eval_negatives`` override its numbers):

    * ``"paper"`` (seed 000 §4.3): leave-one-out by time: each user's latest rating is the test item, the one
      before it the validation item, the rest train; evaluation ranks **all** items the user did not rate before
      (full ranking, training items excluded), NDCG@{10, 20, 50}.
    * ``"libauc"`` (LibAUC's MovieLens pipeline, anchor-ecosystem §2.2): the last 5 ratings are the test items,
      the 5 before them the validation items, and a user's first rating always stays in training; evaluation
      ranks the held-out items among 1000 items the user never rated, drawn once with ``eval_negatives_seed``
      (fixed in the cache).

    Users with fewer ratings than ``num_test + num_val + 1`` follow ``short_users`` (default ``"partial"``: they
    keep one training rating and hold out what is left, test first; ``"drop"``: removed; ``"train"``: all their
    ratings train). Relevance: ``"graded"`` (y = rating, gain 2^y − 1, the papers' and LibAUC's choice) or
    ``"binary"`` (y = 1 for a rating ≥ ``relevance_threshold``, else 0; an assumption of this library, for
    ReChorus-style evaluation). Training draws P relevant items and M items the user has not rated in training
    (paper: "1000 sampled unrated items"; the paper code uses 10 positives and 300 negatives).

    Sizes (:attr:`sizes`, also attributes): ``num_users``, ``num_items``, ``num_queries`` (= ``num_users``),
    ``num_pairs`` (relevant training (user, item) pairs: the rows of SONG's state), and ``top_k`` when set.
    """

    def _load(
        self,
        root: Path,
        files: Sequence[Path],
        read: Callable[[], Ratings],
        prefix: str,
        *,
        protocol: str,
        num_test: int | None,
        num_val: int | None,
        short_users: str,
        relevance: str,
        relevance_threshold: float,
        min_ratings: int,
        eval_negatives: int | None,
        eval_negatives_seed: int,
        num_negatives: int,
        extra_options: Mapping[str, Any] | None = None,
        test_mask: Callable[[Ratings], np.ndarray] | None = None,
    ) -> None:
        if protocol not in _PROTOCOLS:
            raise ValueError(f"protocol must be one of {sorted(_PROTOCOLS)}, got {protocol!r}")
        default_test, default_val, default_negatives = _PROTOCOLS[protocol]
        self.protocol = protocol
        self.num_test = default_test if num_test is None else int(num_test)
        self.num_val = default_val if num_val is None else int(num_val)
        self.eval_negatives = default_negatives if eval_negatives is None else (int(eval_negatives) or None)
        if int(num_negatives) < 0:
            raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
        self.num_negatives = int(num_negatives)
        options = {
            "reader": prefix,
            "num_test": self.num_test,
            "num_val": self.num_val,
            "short_users": short_users,
            "relevance": relevance,
            "relevance_threshold": float(relevance_threshold) if relevance == "binary" else None,
            "min_ratings": int(min_ratings),
            "eval_negatives": self.eval_negatives,
            "eval_negatives_seed": int(eval_negatives_seed) if self.eval_negatives else None,
            **dict(extra_options or {}),
        }

        def build() -> dict[str, np.ndarray]:
            ratings = read()
            return build_recommendation_arrays(
                ratings,
                num_test=self.num_test,
                num_val=self.num_val,
                short_users=short_users,  # type: ignore[arg-type]
                relevance=relevance,  # type: ignore[arg-type]
                relevance_threshold=relevance_threshold,
                min_ratings=min_ratings,
                eval_negatives=self.eval_negatives,
                eval_negatives_seed=eval_negatives_seed,
                test_mask=None if test_mask is None else test_mask(ratings),
            )

        self._arrays = self._cached(root, files, options, prefix, build)
        a = self._arrays
        self.train_num_relevant = np.diff(np.asarray(a["pos_indptr"]))
        num_users = int(a["user_raw"].shape[0])
        self._set_sizes(
            {
                "num_users": num_users,
                "num_items": int(a["item_raw"].shape[0]),
                "num_queries": num_users,
                "num_pairs": int(a["pos_items"].shape[0]),
            }
        )
        self.num_ratings = {s: int(a[f"{s}_items"].shape[0]) for s in ("train", "val", "test")}
        self.num_duplicates = int(a["info_duplicates"])
        self.num_dropped_users = int(a["info_dropped_users"])

    @property
    def user_ids(self) -> np.ndarray:
        """``[num_users]`` raw user id of each user index."""
        return np.asarray(self._arrays["user_raw"])

    @property
    def item_ids(self) -> np.ndarray:
        """``[num_items]`` raw item id of each item index."""
        return np.asarray(self._arrays["item_raw"])

    def setup(self, stage: str | None = None) -> None:
        a = self._arrays
        if self.train_dataset is None:
            self.train_dataset = RecommendationTrainDataset(a, self.num_positives, self.num_negatives, self.top_k)
        if self.eval_negatives:
            width = {s: int(np.diff(np.asarray(a[f"{s}_indptr"])).max(initial=0)) for s in ("val", "test")}
            self.val_dataset = SampledCandidatesEvalDataset(a, "val", width["val"])
            self.test_dataset = SampledCandidatesEvalDataset(a, "test", width["test"])
        else:
            self.val_dataset = FullRankingEvalDataset(a, "val")
            self.test_dataset = FullRankingEvalDataset(a, "test")

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if self.train_dataset is None:
            self.setup("fit")
        return super().build_train_sampler()
