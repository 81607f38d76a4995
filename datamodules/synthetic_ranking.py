"""Generated ranking data in the ranking batch schema (no files): recommendation (users × items, graded ratings)
and learning to rank (feature lists, graded relevance), for tests, configs and benchmarks.

Ranking batch schema (shared by every ranking DataModule and the NDCG / listwise algorithms)
==========================================================================================

Training batch (per rank: B queries, each a list of L = P relevant + M other entries, padded):

==================  ============  ===============================================================================
field               shape, dtype  meaning
==================  ============  ===============================================================================
``query``           [B] long      query / user id in ``0..num_queries−1``
``items``           [B, L] long   item ids (recommendation; −1 on padding)  — or —
``features``        [B, L, F] f32 feature vectors (learning to rank; 0 on padding)
``relevance``       [B, L] f32    graded relevance (0 for the other items and padding)
``pair_index``      [B, L] long   row of the per-pair state of a relevant entry (CSR: offset[q] + its position
                                  among q's relevant items), −1 elsewhere
``mask``            [B, L] bool   real entries
``num_items``       [B] f32       N_q, the number of items q ranks over (recommendation: all items; learning to
                                  rank: its list length)
``ideal_dcg``       [B] f32       Z_q, the ideal DCG (gain 2^y − 1) of the query's whole relevance list
``ideal_dcg_at_k``  [B] f32       Z_q^K, the ideal DCG@K, K = ``top_k`` (only when ``top_k`` is set)
``num_relevant``    [B] long      N_q^+, the number of relevant items of the query
==================  ============  ===============================================================================

Evaluation batch, learning to rank: ``query`` [Q], ``features`` [Q, Lmax, F], ``relevance`` [Q, Lmax], ``mask``
[Q, Lmax] (full lists). Recommendation (full ranking over all items): ``query`` [U], ``heldout_items`` [U, H]
(−1 padded), ``heldout_relevance`` [U, H], ``exclude_items`` [U, E] (the user's other known items, −1 padded: training items, and the test item in validation or
the validation item in test).

Sizes (``sizes``, right after ``__init__``): recommendation ``num_users``, ``num_items``, ``num_queries``,
``num_pairs``; learning to rank ``num_queries``, ``num_features``, ``num_pairs``; both ``top_k`` when set.

Training batches come from :class:`fccolit.samplers.ranking.QueryBatchSampler` (queries without replacement,
rank slices of one global batch, resumable); the items of every query are drawn in the dataset's batched
``__getitems__`` from the counter-based :func:`~fccolit.samplers.ranking.batch_uniforms`, so they depend only on
``(seed, epoch, batch, position in the global batch)``: one and W processes see the same lists.
"""

from __future__ import annotations

import math
from typing import Sequence, Literal

import numpy as np
import torch

from fccolit._checks import check_choice
from fccolit.data import TensorDictDataset
from fccolit.datasets.synthetic import SyntheticQueryLists
from fccolit.samplers import RankAwareBatchSampler
from fccolit.samplers.ranking import QueryBatchSampler

from fccolit.datamodules.base import FCCODataModule

TASKS = ("recommendation", "ltr")


def ideal_dcg(relevance: np.ndarray, offsets: np.ndarray, k: int | None = None) -> np.ndarray:
    """Per-query ideal DCG (gain ``2^y − 1``, discount ``1/log2(1 + rank)``) of CSR relevance lists, ``[Q]``."""
    out = np.zeros(len(offsets) - 1)
    for q in range(len(offsets) - 1):
        y = np.sort(relevance[offsets[q] : offsets[q + 1]])[::-1][:k]
        out[q] = np.sum((np.exp2(y) - 1.0) / np.log2(np.arange(2, len(y) + 2)))
    return out


def _pad(rows: Sequence[np.ndarray], fill, dtype) -> np.ndarray:
    width = max([len(r) for r in rows] + [1])
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


class SyntheticRankingDataModule(FCCODataModule):
    """Generated ranking data in the ranking batch schema (module docstring), no download.

    ``task="recommendation"``: ``num_queries`` users and ``num_items`` items with low-rank preferences; each user
    rates ``ratings_per_query`` items drawn (without replacement) with probability increasing in the preference,
    and the rating (1..5) is the quantized, noisy preference. Leave-one-out by a random "time" order: the last
    item is the test item, the one before it the validation item, the rest are training items. Training lists:
    ``num_positives`` of the user's training items and ``num_negatives`` items the user has not rated in
    training (uniform, with replacement). Evaluation ranks every item, the user's training items and other held-out item excluded.
    The generation draws a dense users × items preference table: it is meant for small sizes (tests, demos,
    benchmarks of the step); the real DataModules never build one.

    ``task="ltr"``: ``num_queries`` training queries (plus ``val_queries`` and ``test_queries``), each a list of
    ``list_size`` documents with Gaussian features; relevance 0..4 is a quantized noisy teacher MLP score
    (about 40% of the documents relevant). Training lists: the whole list (``num_positives=None``) or
    ``num_positives`` relevant and ``num_negatives`` non-relevant documents without replacement.

    Args:
        task: ``"recommendation"`` or ``"ltr"``.
        num_queries: users (recommendation) or training queries (learning to rank).
        num_items: items (recommendation).
        num_features: F (learning to rank).
        ratings_per_query: (min, max) ratings per user (recommendation, min ≥ 3).
        list_size: (min, max) documents per query (learning to rank).
        val_queries, test_queries: queries of the evaluation splits (learning to rank).
        latent_dim: rank of the preferences (recommendation).
        noise: noise of the ratings / relevance (larger: harder).
        num_positives: P, relevant entries per training list (None: every relevant item, learning to rank only).
        num_negatives: M, other entries per training list (None with ``num_positives=None``: every other item).
        queries_per_batch: global batch size B (queries).
        num_batches: training batches per epoch (None: one pass over the queries with a relevant item).
        top_k: K of ``ideal_dcg_at_k`` (for K-SONG; None: the field is absent).
        seed: seeds the data and the training stream.

    Raises:
        ValueError: an unknown ``task``; ``num_positives`` / ``num_negatives`` not both set (recommendation) or
            both None / both set (learning to rank), below 1; ``top_k`` < 1; ``ratings_per_query`` outside
            [3, ``num_items``).

    Example:
        >>> from fccolit.datamodules import SyntheticRankingDataModule
        >>> data = SyntheticRankingDataModule(num_queries=20, num_items=50)
        >>> data.sizes  # SONG's state has a row per (user, relevant item) pair
        {'num_users': 20, 'num_items': 50, 'num_queries': 20, 'num_pairs': 357}
    """

    summary_unit = "queries"

    def __init__(
        self,
        task: Literal["recommendation", "ltr"] = "recommendation",
        num_queries: int = 300,
        num_items: int = 400,
        num_features: int = 16,
        ratings_per_query: tuple[int, int] = (8, 30),
        list_size: tuple[int, int] = (20, 60),
        val_queries: int = 100,
        test_queries: int = 100,
        latent_dim: int = 8,
        noise: float = 0.5,
        num_positives: int | None = 5,
        num_negatives: int | None = 50,
        queries_per_batch: int = 32,
        top_k: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 256,
        num_batches: int | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        self.num_batches = num_batches
        check_choice("task", task, TASKS)
        if (num_positives is None) != (num_negatives is None):
            raise ValueError("num_positives and num_negatives are both None (full lists) or both set")
        if num_positives is None and task == "recommendation":
            raise ValueError("recommendation lists are sampled: set num_positives and num_negatives")
        if num_positives is not None and (num_positives < 1 or num_negatives < 1):
            raise ValueError(f"num_positives and num_negatives must be >= 1, got {num_positives}, {num_negatives}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
        self.task, self.num_items, self.num_positives, self.num_negatives = task, num_items, num_positives, num_negatives
        self.queries_per_batch, self.top_k, self.seed = queries_per_batch, top_k, seed
        rng = np.random.default_rng(seed)
        if task == "recommendation":
            if ratings_per_query[0] < 3 or ratings_per_query[1] >= num_items:
                raise ValueError(f"ratings_per_query must lie in [3, num_items), got {ratings_per_query}")
            self._make_recommendation(rng, num_queries, num_items, ratings_per_query, latent_dim, noise)
            self.sizes = {"num_users": num_queries, "num_items": num_items, "num_queries": num_queries,
                          "num_pairs": int(self._rel_offsets[-1])}
        else:
            self._make_ltr(rng, num_queries, val_queries, test_queries, num_features, list_size, noise)
            self.sizes = {"num_queries": num_queries, "num_features": num_features, "num_pairs": int(self._rel_offsets[-1])}
        if top_k is not None:
            self.sizes["top_k"] = int(top_k)
        self._ideal = ideal_dcg(self._rel_relevance, self._rel_offsets)
        self._ideal_k = ideal_dcg(self._rel_relevance, self._rel_offsets, top_k) if top_k else None

    # ------------------------------------------------------------------ generation
    def _make_recommendation(self, rng, users, items, per_user, dim, noise) -> None:
        pref = rng.standard_normal((users, dim)) @ rng.standard_normal((dim, items)) / math.sqrt(dim)
        pref += 0.5 * rng.standard_normal(items)  # item popularity
        counts = rng.integers(per_user[0], per_user[1] + 1, size=users)
        gumbel = -np.log(-np.log(rng.random((users, items))))
        order = np.argsort(-(pref + gumbel), axis=1)  # Gumbel top-k: drawn without replacement ∝ exp(pref)
        rated = [order[u, : counts[u]] for u in range(users)]
        values = np.concatenate([pref[u, r] for u, r in enumerate(rated)])
        values = values + noise * rng.standard_normal(values.shape)
        cuts = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
        ratings = np.split(1.0 + np.searchsorted(cuts, values), np.cumsum(counts)[:-1])
        train, val, test = [], [], []
        for u in range(users):
            perm = rng.permutation(counts[u])  # the "time" order
            its, rts = rated[u][perm], ratings[u][perm]
            train.append((its[:-2], rts[:-2]))
            val.append((its[-2:-1], rts[-2:-1]))
            test.append((its[-1:], rts[-1:]))
        sort = [np.argsort(i) for i, _ in train]
        self._rel_items = np.concatenate([i[s] for (i, _), s in zip(train, sort)]).astype(np.int64)
        self._rel_relevance = np.concatenate([r[s] for (_, r), s in zip(train, sort)])
        self._rel_offsets = np.concatenate([[0], np.cumsum([len(i) for i, _ in train])]).astype(np.int64)
        user_of = np.repeat(np.arange(users), np.diff(self._rel_offsets))
        self._rated_keys = np.sort(user_of * items + self._rel_items)  # membership of (user, training item)
        query = torch.arange(users)
        train_items = [i for i, _ in train]
        self._eval = {
            "val": {
                "query": query,
                "heldout_items": torch.from_numpy(_pad([i for i, _ in val], -1, np.int64)),
                "heldout_relevance": torch.from_numpy(_pad([r for _, r in val], 0.0, np.float32)),
                "exclude_items": torch.from_numpy(_pad([np.concatenate([t, e[0]]) for t, e in zip(train_items, test)], -1, np.int64)),
            },
            "test": {
                "query": query,
                "heldout_items": torch.from_numpy(_pad([i for i, _ in test], -1, np.int64)),
                "heldout_relevance": torch.from_numpy(_pad([r for _, r in test], 0.0, np.float32)),
                "exclude_items": torch.from_numpy(_pad([np.concatenate([t, v[0]]) for t, v in zip(train_items, val)], -1, np.int64)),
            },
        }

    def _make_ltr(self, rng, train_q, val_q, test_q, features, list_size, noise) -> None:
        total = train_q + val_q + test_q
        sizes = rng.integers(list_size[0], list_size[1] + 1, size=total)
        x = rng.standard_normal((int(sizes.sum()), features))
        w1 = rng.standard_normal((features, 32)) / math.sqrt(features)
        w2 = rng.standard_normal(32) / math.sqrt(32)
        teacher = np.tanh(x @ w1) @ w2 + 0.5 * x[:, 0]
        teacher = teacher + noise * teacher.std() * rng.standard_normal(teacher.shape)
        relevance = np.searchsorted(np.quantile(teacher, [0.6, 0.8, 0.9, 0.97]), teacher).astype(np.float64)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        lists = [(x[bounds[i] : bounds[i + 1]], relevance[bounds[i] : bounds[i + 1]]) for i in range(total)]
        train = lists[:train_q]
        rel_f, rel_y, oth_f = [], [], []
        for xf, y in train:
            rel_f.append(xf[y > 0])
            rel_y.append(y[y > 0])
            oth_f.append(xf[y == 0])
        self._rel_features = np.concatenate(rel_f).astype(np.float32)
        self._rel_relevance = np.concatenate(rel_y)
        self._rel_offsets = np.concatenate([[0], np.cumsum([len(y) for y in rel_y])]).astype(np.int64)
        self._other_features = np.concatenate(oth_f).astype(np.float32)
        self._other_offsets = np.concatenate([[0], np.cumsum([len(f) for f in oth_f])]).astype(np.int64)
        self._eval = {}
        for name, part, start in (("val", lists[train_q : train_q + val_q], train_q), ("test", lists[train_q + val_q :], train_q + val_q)):
            width = max(len(y) for _, y in part)
            feats = np.zeros((len(part), width, features), dtype=np.float32)
            rel = np.zeros((len(part), width), dtype=np.float32)
            mask = np.zeros((len(part), width), dtype=bool)
            for i, (xf, y) in enumerate(part):
                feats[i, : len(y)], rel[i, : len(y)], mask[i, : len(y)] = xf, y, True
            self._eval[name] = {"query": torch.arange(start, start + len(part)), "features": torch.from_numpy(feats),
                                "relevance": torch.from_numpy(rel), "mask": torch.from_numpy(mask)}

    # ------------------------------------------------------------------ LightningDataModule
    def _query_lists(self) -> SyntheticQueryLists:
        if self.task == "recommendation":
            lists = {"rel_items": self._rel_items, "rated_keys": self._rated_keys, "num_items": self.num_items}
        else:
            lists = {"rel_features": self._rel_features, "other_offsets": self._other_offsets,
                     "other_features": self._other_features}
        return SyntheticQueryLists(self.task, self._rel_offsets, self._rel_relevance, self._ideal, self._ideal_k,
                                   self.num_positives, self.num_negatives, **lists)

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self._query_lists()
        self.val_dataset = TensorDictDataset(**self._eval["val"])
        self.test_dataset = TensorDictDataset(**self._eval["test"])

    def build_train_sampler(self) -> RankAwareBatchSampler:
        eligible = np.diff(self._rel_offsets) > 0
        return QueryBatchSampler(eligible, self.queries_per_batch, self.num_batches, seed=self.seed)

    def full_batch(self) -> dict[str, torch.Tensor]:
        """Every training query with its whole list in one batch (learning to rank with ``num_positives=None``):
        the data on which the objectives' inner values are exact (tests)."""
        if self.num_positives is not None:
            raise ValueError("full_batch needs full lists (num_positives=None, learning to rank)")
        eligible = np.nonzero(np.diff(self._rel_offsets) > 0)[0]
        return self._query_lists().__getitems__(list(eligible))
