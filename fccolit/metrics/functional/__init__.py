"""Functional forms of the metrics: one call on tensors, no state (as ``torchmetrics.functional``).

Binary classification (:mod:`fccolit.metrics.functional.classification`): :func:`ap_score`, :func:`auroc_score`,
:func:`partial_auc_score` on an FPR range and the pAUC papers' :func:`partial_auc_sorted_negatives`, all from one sort
(:class:`ROCVertices`). Ranking (:mod:`fccolit.metrics.functional.ranking`): per-query :func:`ndcg_at_k` of padded
lists and per-user :func:`full_ranking_ndcg`. The Metric classes of :mod:`fccolit.metrics` accumulate the same values
over batches and processes.
"""

from fccolit.metrics.functional.classification import (
    ROCVertices,
    ap_score,
    auroc_score,
    partial_auc_score,
    partial_auc_sorted_negatives,
)
from fccolit.metrics.functional.ranking import full_ranking_ndcg, ndcg_at_k

__all__ = [
    "ap_score",
    "auroc_score",
    "partial_auc_score",
    "partial_auc_sorted_negatives",
    "ROCVertices",
    "ndcg_at_k",
    "full_ranking_ndcg",
]
