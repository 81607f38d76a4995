"""Functional forms of the metrics: one call on tensors, no state (as ``torchmetrics.functional``).

Binary classification (:mod:`fccolit.metrics.functional.classification`): average precision, AUROC, partial AUC on an
FPR range and the pAUC papers' sorted-negatives estimator, all from one sort (:class:`ROCVertices`). Ranking
(:mod:`fccolit.metrics.functional.ranking`): per-query NDCG@k of padded lists and per-user full-ranking NDCG@k.
"""

from fccolit.metrics.functional.classification import (
    ROCVertices,
    auroc,
    average_precision,
    partial_auc,
    partial_auc_sorted_negatives,
)
from fccolit.metrics.functional.ranking import full_ranking_ndcg, ndcg_at_k

__all__ = [
    "average_precision",
    "auroc",
    "partial_auc",
    "partial_auc_sorted_negatives",
    "ROCVertices",
    "ndcg_at_k",
    "full_ranking_ndcg",
]
