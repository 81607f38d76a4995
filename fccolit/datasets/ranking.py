"""The ranking batch schema, and what the ranking datasets (:mod:`fccolit.datasets.recommendation`,
:mod:`fccolit.datasets.letor`) share to produce it.

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

Evaluation batches are consumed by :class:`fccolit.metrics.NDCGScore` (``ndcg_at_k(scores, relevance, top_k, mask)``) and
:class:`fccolit.metrics.FullRankingNDCGScore` (``update(scores[U, I], heldout_items, heldout_relevance,
exclude_items)``).
"""

from __future__ import annotations

import numpy as np
import torch

from fccolit.samplers.base import index_tensor

__all__ = ["MAX_RELEVANCE", "OTHERS_STREAM", "POSITIVES_STREAM", "SHUFFLE_STREAM", "as_tensor", "batch_keys", "check_ids"]

#: The largest relevance grade a learning-to-rank table may hold (grades are integers 0..MAX_RELEVANCE). The gain
#: 2^y − 1 is computed in float32 (metrics and objectives), whose 24-bit significand holds 2^y − 1 exactly up to
#: y = 24 (16,777,215); from y = 25 on neighbouring gains round together, and from y = 128 on 2^y overflows to inf
#: and every NDCG, gradient and state of the query becomes NaN. Real grades are 0–4 (MSLR, Yahoo!) or 0–2 (LETOR
#: 4.0), so a larger one is almost always a wrong column (a score, an id, a click count).
MAX_RELEVANCE = 24

#: streams of :func:`~fccolit.samplers.ranking.batch_uniforms`: relevant items, other items, the shuffle of a slate
POSITIVES_STREAM, OTHERS_STREAM, SHUFFLE_STREAM = 0, 1, 2


def batch_keys(indices) -> tuple[np.ndarray, int, np.ndarray]:
    """``(query ids, batch seed, global positions)`` of a ``__getitems__`` call.

    A :class:`~fccolit.samplers.ranking.QueryBatch` carries its seed and positions; any other sequence (a plain
    list, ``dataset[i]``) gets seed 0 and positions ``0..n−1``: a fixed draw, the same at every call.
    """
    ids = index_tensor(indices).numpy()  # a sampler's batch hands over its tensor: no list conversion
    seed = getattr(indices, "seed", 0)
    positions = getattr(indices, "positions", None)
    positions = np.arange(ids.size, dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    return ids, int(seed), positions


def check_ids(ids: np.ndarray, size: int, what: str) -> None:
    """Raise ``IndexError`` (naming ``what``) when an id of ``ids`` is outside ``[0, size)``."""
    if ids.size and (ids.min() < 0 or ids.max() >= size):
        raise IndexError(f"{what}: index out of range [0, {size}): got values in [{ids.min()}, {ids.max()}]")


def as_tensor(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A batch field: ``array`` as a contiguous CPU tensor of ``dtype``."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype)
