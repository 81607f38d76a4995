"""The training dataset of the generated ranking data (:class:`~fccolit.datamodules.SyntheticRankingDataModule`)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit.samplers.ranking import batch_uniforms, sample_distinct

__all__ = ["SyntheticQueryLists"]


class SyntheticQueryLists(Dataset):
    """Training queries of the generated ranking data: ``__getitems__`` builds a whole batch of lists at once.

    The queries of :class:`~fccolit.datamodules.SyntheticRankingDataModule`; the batch follows the schema of
    :mod:`fccolit.datamodules.synthetic_ranking`.

    CSR layout: query q's relevant training items are ``rel_*[rel_offsets[q]:rel_offsets[q+1]]`` (their pair ids
    are those positions), its other items (learning to rank) ``other_*[other_offsets[q]:...]``.

    Args:
        task: ``"recommendation"`` or ``"ltr"``.
        rel_offsets, rel_relevance: ``[Q + 1]`` offsets and ``[R]`` relevance of the relevant training items.
        ideal_dcg, ideal_dcg_at_k: ``[Q]`` Z_q and Z_q^K (None: no ``ideal_dcg_at_k`` field).
        num_positives, num_negatives: P and M per list (None, learning to rank: every relevant / other document).
        rel_items, rated_keys, num_items: recommendation: ``[R]`` item of each relevant entry, the sorted
            ``user · num_items + item`` of every training rating, the number of items.
        rel_features, other_offsets, other_features: learning to rank: ``[R, F]`` features of the relevant
            documents, ``[Q + 1]`` offsets and ``[O, F]`` features of the others.

    Raises:
        RuntimeError: recommendation, from ``__getitems__``: 64 rounds of rejection sampling found no unrated item
            for some list position (a user rated almost every item).

    Example (learning to rank, two queries with full lists: query 0 has one relevant and two other documents,
    query 1 two relevant and one other; ``F = 2``):
        >>> import numpy as np
        >>> dataset = SyntheticQueryLists(
        ...     "ltr", np.array([0, 1, 3]), np.array([1.0, 2.0, 1.0]), np.array([1.0, 2.5]), None, None, None,
        ...     rel_features=np.zeros((3, 2)), other_offsets=np.array([0, 2, 3]), other_features=np.ones((3, 2)))
        >>> batch = dataset.__getitems__([0, 1])
        >>> len(dataset), tuple(batch["features"].shape), batch["mask"].tolist()
        (2, (2, 4, 2), [[True, False, True, True], [True, True, True, False]])
        >>> batch["relevance"].tolist()
        [[1.0, 0.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0]]
    """

    def __init__(
        self,
        task: Literal["recommendation", "ltr"],
        rel_offsets: np.ndarray,
        rel_relevance: np.ndarray,
        ideal_dcg: np.ndarray,
        ideal_dcg_at_k: np.ndarray | None,
        num_positives: int | None,
        num_negatives: int | None,
        *,
        rel_items: np.ndarray | None = None,
        rated_keys: np.ndarray | None = None,
        num_items: int | None = None,
        rel_features: np.ndarray | None = None,
        other_offsets: np.ndarray | None = None,
        other_features: np.ndarray | None = None,
    ) -> None:
        self.task, self.num_positives, self.num_negatives = task, num_positives, num_negatives
        self.rel_offsets, self.rel_relevance = rel_offsets, rel_relevance
        self.ideal, self.ideal_at_k = ideal_dcg, ideal_dcg_at_k
        self.rel_items, self.rated_keys, self.num_items = rel_items, rated_keys, num_items
        self.rel_features, self.other_offsets, self.other_features = rel_features, other_offsets, other_features

    def __len__(self) -> int:
        return int(len(self.rel_offsets) - 1)

    def __getitems__(self, indices) -> dict[str, torch.Tensor]:
        q = np.asarray(list(indices), dtype=np.int64)
        seed = getattr(indices, "seed", 0)
        positions = np.asarray(getattr(indices, "positions", range(len(q))), dtype=np.int64)
        off = self.rel_offsets
        n_rel = off[q + 1] - off[q]
        full = self.num_positives is None
        p = int(n_rel.max()) if full else self.num_positives
        u = batch_uniforms(seed, positions, 0, p)
        pos, valid = sample_distinct(n_rel, p, u)  # full lists: every relevant item, in order
        pair = np.where(valid, off[q][:, None] + pos, -1)
        rel = np.where(valid, self.rel_relevance[np.maximum(pair, 0)], 0.0)
        if self.task == "recommendation":
            items_pos = np.where(valid, self.rel_items[np.maximum(pair, 0)], -1)
            items_other = self._unrated(q, seed, positions)
            m = items_other.shape[1]
            items = np.concatenate([items_pos, items_other], axis=1)
            mask = np.concatenate([valid, np.ones((len(q), m), dtype=bool)], axis=1)
            fields = {"items": torch.from_numpy(items)}
            num_items = np.full(len(q), self.num_items, dtype=np.float32)
        else:
            ooff = self.other_offsets
            n_other = ooff[q + 1] - ooff[q]
            m = int(n_other.max()) if full else self.num_negatives
            pos_o, valid_o = sample_distinct(n_other, m, batch_uniforms(seed, positions, 1, m))
            rows_o = np.where(valid_o, ooff[q][:, None] + pos_o, 0)
            feats = np.concatenate(
                [self.rel_features[np.maximum(pair, 0)], self.other_features[rows_o]], axis=1
            )
            mask = np.concatenate([valid, valid_o], axis=1)
            feats[~mask] = 0.0
            fields = {"features": torch.from_numpy(feats.astype(np.float32))}
            num_items = (n_rel + n_other).astype(np.float32)
        rel = np.concatenate([rel, np.zeros((len(q), mask.shape[1] - p))], axis=1)
        pair = np.concatenate([pair, np.full((len(q), mask.shape[1] - p), -1)], axis=1)
        batch = {
            "query": torch.from_numpy(q),
            **fields,
            "relevance": torch.from_numpy(rel.astype(np.float32)),
            "pair_index": torch.from_numpy(pair.astype(np.int64)),
            "mask": torch.from_numpy(mask),
            "num_items": torch.from_numpy(num_items),
            "ideal_dcg": torch.from_numpy(self.ideal[q].astype(np.float32)),
            "num_relevant": torch.from_numpy(n_rel.astype(np.int64)),
        }
        if self.ideal_at_k is not None:
            batch["ideal_dcg_at_k"] = torch.from_numpy(self.ideal_at_k[q].astype(np.float32))
        return batch

    def _unrated(self, q: np.ndarray, seed: int, positions: np.ndarray) -> np.ndarray:
        """``[B, M]`` items drawn uniformly (with replacement) among the items q has not rated in training:
        rejection sampling with fresh counter-based uniforms per round."""
        m = self.num_negatives
        out = np.full((len(q), m), -1, dtype=np.int64)
        todo = np.ones((len(q), m), dtype=bool)
        for attempt in range(64):
            cand = np.minimum((batch_uniforms(seed, positions, 2 + attempt, m) * self.num_items).astype(np.int64), self.num_items - 1)
            keys = q[:, None] * self.num_items + cand
            hit = np.searchsorted(self.rated_keys, keys)
            rated = self.rated_keys[np.minimum(hit, len(self.rated_keys) - 1)] == keys
            take = todo & ~rated
            out[take] = cand[take]
            todo &= ~take
            if not todo.any():
                return out
        raise RuntimeError("SyntheticQueryLists: could not draw unrated items (a user rated almost every item)")
