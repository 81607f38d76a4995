"""Recommendation data as ranking (schema in :mod:`fccolit.datasets.ranking`): the per-user time split of explicit
ratings into CSR arrays (:func:`build_recommendation_arrays`), and the training and evaluation datasets that read
them."""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit._checks import check_choice
from fccolit.datasets.ranking import OTHERS_STREAM, POSITIVES_STREAM, as_tensor, batch_keys, check_ids
from fccolit.io.csr import (
    compact_ids, csr_indptr, ideal_dcg, pack_left, ragged_rows, rank_from_end, sample_unrated_distinct,
    sort_desc_within_rows, unrated_items,
)
from fccolit.io.ratings import Ratings
from fccolit.samplers.ranking import batch_integers, batch_uniforms, sample_distinct

__all__ = [
    "FullRankingEvalDataset", "RecommendationTrainDataset", "SampledCandidatesEvalDataset",
    "build_recommendation_arrays",
]


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

    Steps (every choice documented in :class:`~fccolit.datamodules.RecommendationDataModule`):

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
    check_choice("short_users", short_users, ("partial", "drop", "train"))
    check_choice("relevance", relevance, ("graded", "binary"))
    if num_test < 0 or num_val < 0:
        raise ValueError(f"num_test and num_val must be >= 0, got {num_test} and {num_val}")
    n = len(ratings)
    if n == 0:
        raise ValueError("the ratings file holds no rating")
    # ids as int32 (fewer than 2^31 users / items): this function's memory is a few dozen bytes per rating
    user, user_raw = compact_ids(ratings.user)
    user = user.astype(np.int32)
    item, item_raw = compact_ids(ratings.item)
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
        user, kept_users = compact_ids(user)  # monotone renumbering: the (user, item) order of by_pair holds
        item, kept_items = compact_ids(item)
        user, item = user.astype(np.int32), item.astype(np.int32)
        user_raw, item_raw = user_raw[kept_users], item_raw[kept_items]
        num_users, num_items = user_raw.size, item_raw.size
    del keep
    n = user.size

    # the split
    user_start = csr_indptr(user, num_users)
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
    rest_from_end, rest_count = rank_from_end(user, ~is_test, num_users)
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
        arrays[f"{split}_indptr"] = csr_indptr(user[rows], num_users)
        arrays[f"{split}_items"] = item[rows]
        if split != "train":
            arrays[f"{split}_relevance"] = y[rows].astype(np.float32)
        else:
            relevant = rows[y[rows] > 0]
            pos_indptr = csr_indptr(user[relevant], num_users)
            order = sort_desc_within_rows(pos_indptr, y[relevant])
            relevant = relevant[order]
            arrays["pos_indptr"] = pos_indptr
            arrays["pos_items"] = item[relevant]
            arrays["pos_relevance"] = y[relevant].astype(np.float32)
            arrays["ideal_dcg"] = ideal_dcg(pos_indptr, arrays["pos_relevance"])

    if eval_negatives:
        all_indptr = csr_indptr(user[by_pair], num_users)
        all_items = item[by_pair]
        for s, split in enumerate(("val", "test")):
            users = np.flatnonzero(np.diff(arrays[f"{split}_indptr"]) > 0).astype(np.int64)
            rng = np.random.default_rng([int(eval_negatives_seed), s])
            arrays[f"{split}_users"] = users
            arrays[f"{split}_negatives"] = sample_unrated_distinct(
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

    Raises:
        KeyError: ``arrays`` lacks one of the arrays of :func:`build_recommendation_arrays`.
        IndexError: from ``__getitems__``, a user id outside ``[0, U)``.

    Example (two users with three ratings each; the last one is the test item, the one before it validation):
        >>> import numpy as np
        >>> from fccolit.io.ratings import Ratings
        >>> ratings = Ratings(user=np.array([1, 1, 1, 2, 2, 2]), item=np.array([10, 11, 12, 10, 12, 13]),
        ...                   rating=np.array([5, 4, 3, 4, 5, 2], dtype=np.float32), time=np.arange(6))
        >>> arrays = build_recommendation_arrays(ratings, num_test=1, num_val=1)
        >>> dataset = RecommendationTrainDataset(arrays, num_positives=1, num_negatives=2)
        >>> batch = dataset.__getitems__([0, 1])
        >>> len(dataset), tuple(batch["items"].shape), batch["mask"].all().item()
        (2, (2, 3), True)
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
        q, seed, positions = batch_keys(indices)
        check_ids(q, self.num_users, "RecommendationTrainDataset")
        a, P, M = self.a, self.num_positives, self.num_negatives
        pos_start = np.asarray(a["pos_indptr"][q], dtype=np.int64)
        num_relevant = np.asarray(a["pos_indptr"][q + 1], dtype=np.int64) - pos_start
        chosen, valid = sample_distinct(num_relevant, P, batch_uniforms(seed, positions, POSITIVES_STREAM, P))
        flat = pos_start[:, None] + chosen
        safe = np.where(valid, flat, 0)
        pos_items = np.where(valid, a["pos_items"][safe] if a["pos_items"].size else 0, 0)
        pos_rel = np.where(valid, a["pos_relevance"][safe] if a["pos_relevance"].size else 0, 0)

        rated = np.asarray(a["train_indptr"][q + 1], dtype=np.int64) - np.asarray(a["train_indptr"][q], dtype=np.int64)
        unrated = self.num_items - rated
        # i.i.d. draws: sorting a row's draws changes nothing but makes the binary searches ~3x faster
        k = np.sort(batch_integers(seed, positions, OTHERS_STREAM, M, np.maximum(unrated, 1)), axis=1)
        neg_valid = np.broadcast_to(unrated[:, None] > 0, k.shape)
        neg_items = unrated_items(a["train_indptr"], a["train_items"], q, k)
        if not neg_valid.all():
            neg_items = np.where(neg_valid, neg_items, 0)

        batch = {
            "query": as_tensor(q, torch.long),
            "items": as_tensor(np.concatenate([pos_items, neg_items], axis=1), torch.long),
            "relevance": as_tensor(np.concatenate([pos_rel, np.zeros(k.shape, np.float32)], axis=1), torch.float32),
            "pair_index": as_tensor(np.concatenate([np.where(valid, flat, -1), np.full(k.shape, -1)], axis=1), torch.long),
            "mask": as_tensor(np.concatenate([valid, neg_valid], axis=1), torch.bool),
            "num_items": torch.full((q.size,), float(self.num_items), dtype=torch.float32),
            "ideal_dcg": as_tensor(self.ideal[q], torch.float32),
            "num_relevant": as_tensor(num_relevant, torch.long),
        }
        if self.ideal_at_k is not None:
            batch["ideal_dcg_at_k"] = as_tensor(self.ideal_at_k[q], torch.float32)
        return batch


class _UserEvalDataset(Dataset):
    """An evaluation dataset with one item per evaluated user (``self.users``) that builds whole batches in
    ``__getitems__``."""

    users: np.ndarray

    def __len__(self) -> int:
        return int(self.users.size)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


class FullRankingEvalDataset(_UserEvalDataset):
    """Full-ranking evaluation batches of one held-out split: row ``i`` is the i-th user holding out an item.

    Args:
        arrays: the arrays of :func:`build_recommendation_arrays`.
        split: ``"val"`` or ``"test"``; the excluded items are the user's training items and the items the user
            holds out in the other split: the validation items for ``"test"`` (rated before), and the test items for
            ``"val"`` (so that a user's test item, a later true positive, is not ranked as a negative in the
            validation ranking that selects the checkpoint).

    Raises:
        KeyError: a ``split`` other than ``"val"`` / ``"test"`` (no ``{split}_indptr`` array).
        IndexError: from ``__getitems__``, a row outside ``[0, len(self))``.

    Example (user 0 holds out item 2 for test; its training item 0 and validation item 1 are excluded):
        >>> import numpy as np
        >>> from fccolit.io.ratings import Ratings
        >>> ratings = Ratings(user=np.array([1, 1, 1, 2, 2, 2]), item=np.array([10, 11, 12, 10, 12, 13]),
        ...                   rating=np.array([5, 4, 3, 4, 5, 2], dtype=np.float32), time=np.arange(6))
        >>> dataset = FullRankingEvalDataset(build_recommendation_arrays(ratings, num_test=1, num_val=1), "test")
        >>> batch = dataset.__getitems__([0])
        >>> len(dataset), batch["heldout_items"].tolist(), batch["exclude_items"].tolist()
        (2, [[2]], [[0, 1]])
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], split: Literal["val", "test"]):
        self.a, self.split = arrays, split
        self.users = np.flatnonzero(np.diff(arrays[f"{split}_indptr"]) > 0).astype(np.int64)
        self.known = ["train", "val" if split == "test" else "test"]

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(list(indices), dtype=np.int64)
        check_ids(rows, len(self), f"FullRankingEvalDataset({self.split})")
        users, a, s = self.users[rows], self.a, self.split
        known = [ragged_rows(a[f"{p}_indptr"], np.asarray(a[f"{p}_items"]), users, -1) for p in self.known]
        exclude = np.concatenate(known, axis=1)
        if len(known) > 1:  # −1 padding of the first part sits between real ids: pack them to the left
            exclude, _ = pack_left(exclude, exclude >= 0, max(int((exclude >= 0).sum(1).max(initial=0)), 0), -1)
        return {
            "query": as_tensor(users, torch.long),
            "heldout_items": as_tensor(ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_items"]), users, -1), torch.long),
            "heldout_relevance": as_tensor(
                ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_relevance"]), users, 0), torch.float32
            ),
            "exclude_items": as_tensor(exclude, torch.long),
        }


class SampledCandidatesEvalDataset(_UserEvalDataset):
    """LibAUC's evaluation batches: each user's held-out items followed by the split's sampled unrated negatives.

    The held-out items are padded to ``width`` columns; the negatives are fixed when the arrays are built.

    Args:
        arrays: the arrays of :func:`build_recommendation_arrays` built with ``eval_negatives``.
        split: ``"val"`` or ``"test"``.
        width: held-out columns (the most items a user holds out in the split, e.g. 5).

    Raises:
        KeyError: ``arrays`` built without ``eval_negatives``, or a ``split`` other than ``"val"`` / ``"test"``.
        IndexError: from ``__getitems__``, a row outside ``[0, len(self))``.

    Example (one held-out item and one sampled negative per user):
        >>> import numpy as np
        >>> from fccolit.io.ratings import Ratings
        >>> ratings = Ratings(user=np.array([1, 1, 1, 2, 2, 2]), item=np.array([10, 11, 12, 10, 12, 13]),
        ...                   rating=np.array([5, 4, 3, 4, 5, 2], dtype=np.float32), time=np.arange(6))
        >>> arrays = build_recommendation_arrays(ratings, num_test=1, num_val=1, eval_negatives=1)
        >>> batch = SampledCandidatesEvalDataset(arrays, "test", width=1).__getitems__([0, 1])
        >>> batch["items"].tolist(), batch["relevance"].tolist()
        ([[2, 3], [3, 1]], [[3.0, 0.0], [2.0, 0.0]])
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], split: Literal["val", "test"], width: int):
        self.a, self.split, self.width = arrays, split, int(width)
        self.users = np.asarray(arrays[f"{split}_users"], dtype=np.int64)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(list(indices), dtype=np.int64)
        check_ids(rows, len(self), f"SampledCandidatesEvalDataset({self.split})")
        users, a, s = self.users[rows], self.a, self.split
        held = ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_items"]), users, -1, self.width)
        rel = ragged_rows(a[f"{s}_indptr"], np.asarray(a[f"{s}_relevance"]), users, 0, self.width)
        negatives = np.asarray(a[f"{s}_negatives"][rows], dtype=np.int64)
        items = np.concatenate([held, negatives], axis=1)
        mask = items >= 0
        return {
            "query": as_tensor(users, torch.long),
            "items": as_tensor(np.where(mask, items, 0), torch.long),
            "relevance": as_tensor(np.concatenate([rel, np.zeros(negatives.shape, np.float32)], axis=1), torch.float32),
            "mask": as_tensor(mask, torch.bool),
        }
