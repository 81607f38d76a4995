"""Learning-to-rank data as ranking (schema in :mod:`fccolit.datasets.ranking`): the pair ids of a training split
(:func:`ltr_pair_arrays`), training slates and full-list evaluation batches."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit.datasets.ranking import OTHERS_STREAM, POSITIVES_STREAM, SHUFFLE_STREAM, as_tensor, batch_keys, check_ids
from fccolit.io.csr import csr_indptr, ideal_dcg, ragged_rows, row_positions, sort_desc_within_rows
from fccolit.samplers.ranking import batch_uniforms, sample_distinct

__all__ = ["ListEvalDataset", "ListwiseTrainDataset", "ltr_pair_arrays"]


def ltr_pair_arrays(indptr: np.ndarray, relevance: np.ndarray) -> dict[str, np.ndarray]:
    """Pair ids of a learning-to-rank training split: the relevant documents (``y > 0``) of each query in list
    order. Returns ``pos_indptr [Q+1]``, ``pos_docs [P]`` (document rows), ``pair_of_doc [N]`` (pair id or −1) and
    ``ideal_dcg [Q]``."""
    indptr = np.asarray(indptr, dtype=np.int64)
    relevance = np.asarray(relevance, dtype=np.float32)
    row, _ = row_positions(indptr)
    relevant = np.flatnonzero(relevance > 0)
    pos_indptr = csr_indptr(row[relevant], indptr.size - 1)
    pair_of_doc = np.full(relevance.size, -1, dtype=np.int64)
    pair_of_doc[relevant] = np.arange(relevant.size, dtype=np.int64)
    desc = relevance[sort_desc_within_rows(indptr, relevance)]
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

    Raises:
        IndexError: from ``__getitems__``, a query id outside ``[0, Q)``.

    Example (two queries of three and two documents, ``F = 2``; slates of two with one relevant document first):
        >>> import numpy as np
        >>> indptr, relevance = np.array([0, 3, 5]), np.array([2, 0, 1, 0, 1], dtype=np.float32)
        >>> features = np.zeros((5, 2), dtype=np.float32)
        >>> dataset = ListwiseTrainDataset(features, relevance, indptr, ltr_pair_arrays(indptr, relevance),
        ...                                slate_length=2, num_positives=1)
        >>> batch = dataset.__getitems__([0, 1])
        >>> len(dataset), tuple(batch["features"].shape), batch["mask"].tolist(), batch["num_relevant"].tolist()
        (2, (2, 2, 2), [[True, True], [True, True]], [2, 1])
        >>> sorted(dataset[0])
        ['features', 'ideal_dcg', 'mask', 'num_items', 'num_relevant', 'pair_index', 'query', 'relevance']
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
            desc = self.y[sort_desc_within_rows(self.indptr, self.y)]
            self.ideal_at_k = ideal_dcg(self.indptr, desc, int(top_k))

    def __len__(self) -> int:
        return int(self.indptr.size - 1)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        q, seed, positions = batch_keys(indices)
        check_ids(q, len(self), "ListwiseTrainDataset")
        L, P = self.slate_length, self.num_positives
        start = self.indptr[q]
        length = self.indptr[q + 1] - start
        pos_start = np.asarray(self.pairs["pos_indptr"][q], dtype=np.int64)
        num_relevant = np.asarray(self.pairs["pos_indptr"][q + 1], dtype=np.int64) - pos_start
        chosen, valid = sample_distinct(num_relevant, P, batch_uniforms(seed, positions, POSITIVES_STREAM, P))
        pos_docs = np.asarray(self.pairs["pos_docs"])
        docs_p = np.where(valid, pos_docs[np.where(valid, pos_start[:, None] + chosen, 0)] if pos_docs.size else 0, 0)
        taken = valid.sum(axis=1)

        # the rest of the slate: uniformly from the list minus the chosen relevant documents
        others = L - taken  # per row
        width = int(others.max()) if others.size else 0
        rank, valid_o = sample_distinct(length - taken, width, batch_uniforms(seed, positions, OTHERS_STREAM, width), others)
        excluded = np.sort(np.where(valid, docs_p - start[:, None], np.iinfo(np.int64).max), axis=1)
        gaps = excluded - np.arange(P)[None, :]  # c_j = e_j − j; sentinel entries stay huge
        in_list = rank + (gaps[:, None, :] <= rank[:, :, None]).sum(axis=2)
        docs_o = np.where(valid_o, start[:, None] + in_list, 0)

        docs = np.concatenate([docs_p, docs_o], axis=1)
        real = np.concatenate([valid, valid_o], axis=1)
        # shuffle the real entries of each row (padding last): sort by random keys, padding keys = 2
        keys = np.where(real, batch_uniforms(seed, positions, SHUFFLE_STREAM, docs.shape[1]), 2.0)
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
            "query": as_tensor(q, torch.long),
            "features": torch.from_numpy(features),
            "relevance": as_tensor(relevance, torch.float32),
            "pair_index": as_tensor(pair, torch.long),
            "mask": as_tensor(real, torch.bool),
            "num_items": as_tensor(length.astype(np.float32), torch.float32),
            "ideal_dcg": as_tensor(self.ideal[q], torch.float32),
            "num_relevant": as_tensor(num_relevant, torch.long),
        }
        if self.ideal_at_k is not None:
            batch["ideal_dcg_at_k"] = as_tensor(self.ideal_at_k[q], torch.float32)
        return batch


class ListEvalDataset(Dataset):
    """Full-list evaluation batches of a learning-to-rank split, padded to the longest list of the batch.

    Row ``i`` is query ``order[i]``; the queries are ordered by list length (ties by id) so that a batch holds
    lists of similar length and pads little. ``query`` holds the ids within the split.

    Args:
        features, relevance, indptr: the split (as :class:`ListwiseTrainDataset`).
        queries: the query ids to evaluate (default: all; e.g. without the queries that have no relevant document).

    Raises:
        IndexError: from ``__getitems__``, a row outside ``[0, len(self))``.

    Example (the two-document query comes first, its row padded to the three of the other):
        >>> import numpy as np
        >>> indptr, relevance = np.array([0, 3, 5]), np.array([2, 0, 1, 0, 1], dtype=np.float32)
        >>> dataset = ListEvalDataset(np.zeros((5, 2), dtype=np.float32), relevance, indptr)
        >>> batch = dataset.__getitems__([0, 1])
        >>> batch["query"].tolist(), tuple(batch["features"].shape), batch["mask"].tolist()
        ([1, 0], (2, 3, 2), [[True, True, False], [True, True, True]])
        >>> batch["relevance"].tolist()
        [[0.0, 1.0, 0.0], [2.0, 0.0, 1.0]]
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
        check_ids(rows, len(self), "ListEvalDataset")
        q = self.queries[rows]
        docs = ragged_rows(self.indptr, np.arange(self.indptr[-1], dtype=np.int64), q, -1)
        mask = docs >= 0
        features = np.zeros(docs.shape + (self.x.shape[1],), dtype=np.float32)
        if mask.any():
            features[mask] = self.x[docs[mask]]  # docs[mask] is increasing: one sequential read
        return {
            "query": as_tensor(q, torch.long),
            "features": torch.from_numpy(features),
            "relevance": as_tensor(np.where(mask, self.y[np.maximum(docs, 0)], 0), torch.float32),
            "mask": as_tensor(mask, torch.bool),
        }
