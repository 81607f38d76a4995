"""Evaluation metrics as torchmetrics Metrics, exact under DDP, and :func:`build_metric` for a logged metric name.

Ranking: :class:`NDCGScore` (NDCG@k of padded query lists), :class:`FullRankingNDCGScore` (NDCG@k of a full ranking
over all items, for recommendation). Binary classification: :class:`APScore`, :class:`AUROCScore`,
:class:`PartialAUCScore` (on an FPR range). Multi-class: :class:`AccuracyScore`. Their functional forms (one call on
tensors, no state) are in :mod:`fccolit.metrics.functional`. A metric class ends in ``Score``: it evaluates, it is not
a training objective (those are in :mod:`fccolit.objectives`), and no name is one torchmetrics uses for something
else.

Every metric is a :class:`BatchMetric`: it declares the evaluation-batch fields it reads (``y``; ``relevance`` and
``mask``; ``heldout_items``, ``heldout_relevance`` and ``exclude_items``) and what it logs, and the algorithm
modules hold each stage's metrics in one :class:`EvaluationMetrics` (see :mod:`fccolit.metrics.base`).

Metric names (case-insensitive; a leading ``"<split>/"`` such as ``"val/"`` is ignored):

======================  ===============================================  =========
name                    metric                                           kind
======================  ===============================================  =========
``ndcg``                ``NDCGScore(top_k=None)`` (full list)            ranking
``ndcg@K``              ``NDCGScore(top_k=K)``, e.g. ``ndcg@10``         ranking
``ap``                  ``APScore()``                                    binary
``auroc``               ``AUROCScore()``                                 binary
``pauc_A_B``            ``PartialAUCScore(A, B, "normalized")``          binary
``pauc_A_B_raw``        ``PartialAUCScore(A, B, "raw")``                 binary
``pauc_0_B_mcclish``    ``PartialAUCScore(0, B, "mcclish")``             binary
``accuracy``            ``AccuracyScore()`` (top-1, per class too)       multiclass
======================  ===============================================  =========

``A`` and ``B`` are decimal numbers, e.g. ``pauc_0.05_0.5``; ``pauc_A_B_normalized`` is also accepted.

Besides its value, each metric keeps the curve its states already hold (:meth:`BatchMetric.named_curves`): the
binary metrics the ROC vertices of their sort (PR and ROC curves), NDCG@k the sums of NDCG@j for j = 1..k; the
modules draw them to TensorBoard (:mod:`fccolit.metrics.figures`).

Why these and not torchmetrics' (measured by ``python benchmarks/metrics_compare.py``; times and ratios in
``benchmarks/results/metrics_compare.md``):

* AP, AUROC, McClish pAUC: torchmetrics is about as fast but counts in float32 (values about 1e-7 off sklearn; ours
  within 1e-15, which the DDP tests' 1e-12 equality needs). What it lacks: pAUC on an FPR range [α, β] (raw and
  normalized) and Yao, Lin & Yang's sorted-negatives estimator, which share the one sort-based kernel of AP and
  AUROC; the kernel's ROC vertices are the pictures' curves (no second sort).
* NDCG@k on padded lists: several times faster than ``RetrievalNormalizedDCG``, which also keeps every score, label
  and query index in ``cat`` states (O(N) memory, all gathered under DDP; ours: two sums, plus k for the curve);
  explicit tie and empty-query policies and the exp2 gain of the papers.
* Full-ranking NDCG: no counterpart (torchmetrics takes a dense target per item; here held-out ids are looked up in
  the top k, without a users × items table).
* Accuracy: faster than torchmetrics' two metrics for the overall and per-class values (one pair of sum states),
  NaN (not 0) for a class without validation samples, sized from the first batch when the data does not say.
"""

from __future__ import annotations

import re

from fccolit.metrics.accuracy import AccuracyScore
from fccolit.metrics.base import BatchMetric, EvaluationMetrics
from fccolit.metrics.classification import APScore, AUROCScore, PartialAUCScore
from fccolit.metrics.ranking import FullRankingNDCGScore, NDCGScore

__all__ = [
    "BatchMetric",
    "EvaluationMetrics",
    "NDCGScore",
    "FullRankingNDCGScore",
    "APScore",
    "AUROCScore",
    "PartialAUCScore",
    "AccuracyScore",
    "build_metric",
    "metric_kind",
]

_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
_NDCG_RE = re.compile(r"ndcg(?:@(\d+))?")
_PAUC_RE = re.compile(rf"pauc_{_NUM}_{_NUM}(?:_(normalized|raw|mcclish))?")

_ACCEPTED = (
    "accepted metric names: 'ndcg' (full list), 'ndcg@K' (K >= 1, e.g. 'ndcg@10'), 'ap', 'auroc', "
    "'pauc_A_B' (normalized pAUC on FPR in [A, B], e.g. 'pauc_0.05_0.5'), 'pauc_A_B_raw', "
    "'pauc_0_B_mcclish', 'accuracy' (multi-class top-1); an optional '<split>/' prefix is ignored"
)


def _normalize_name(name: str) -> str:
    if not isinstance(name, str):
        raise ValueError(f"metric name must be a string, got {name!r}; {_ACCEPTED}")
    return name.strip().lower().rsplit("/", 1)[-1]


def _parse(name: str) -> tuple[str, dict]:
    key = _normalize_name(name)
    if key == "ap":
        return "ap", {}
    if key == "auroc":
        return "auroc", {}
    if key == "accuracy":
        return "accuracy", {}
    m = _NDCG_RE.fullmatch(key)
    if m:
        k = None if m.group(1) is None else int(m.group(1))
        if k is not None and k < 1:
            raise ValueError(f"unknown metric name {name!r}: the NDCG cut-off must be >= 1; {_ACCEPTED}")
        return "ndcg", {"top_k": k}
    m = _PAUC_RE.fullmatch(key)
    if m:
        lo, hi = float(m.group(1)), float(m.group(2))
        normalization = m.group(3) or "normalized"
        if not (0.0 <= lo < hi <= 1.0):
            raise ValueError(f"unknown metric name {name!r}: pAUC needs 0 <= A < B <= 1; {_ACCEPTED}")
        if normalization == "mcclish" and lo != 0.0:
            raise ValueError(f"unknown metric name {name!r}: McClish pAUC needs A = 0; {_ACCEPTED}")
        return "pauc", {"fpr_min": lo, "fpr_max": hi, "normalization": normalization}
    raise ValueError(f"unknown metric name {name!r}; {_ACCEPTED}")


def build_metric(name: str, num_classes: int | None = None) -> BatchMetric:
    """A fresh Metric for a logged metric name, e.g. ``"ndcg@10"`` -> ``NDCGScore(top_k=10)``.

    Args:
        name: a metric name of the module docstring's table (case-insensitive; a ``"<split>/"`` prefix is ignored).
        num_classes: sizes ``accuracy``'s per-class states up front (so a process that sees no evaluation batch still
            joins the DDP reduction with states of the right shape); ignored by the other metrics.

    Raises:
        ValueError: ``name`` is not a string or matches no pattern (the message lists the accepted patterns), an NDCG
            cut-off is below 1, or a pAUC range is outside ``0 <= A < B <= 1`` (McClish: ``A = 0``).

    Example:
        >>> build_metric("val/ndcg@10")
        NDCGScore()
        >>> build_metric("pauc_0.05_0.5").fpr_max
        0.5
    """
    family, kwargs = _parse(name)
    if family == "ndcg":
        return NDCGScore(**kwargs)
    if family == "ap":
        return APScore()
    if family == "auroc":
        return AUROCScore()
    if family == "accuracy":
        return AccuracyScore(num_classes)
    return PartialAUCScore(**kwargs)


def metric_kind(name: str) -> str:
    """The kind of data a metric name evaluates: ``"ranking"``, ``"binary"`` or ``"multiclass"``.

    ``"ranking"`` for NDCG names (``update(preds[Q, L], target[Q, L], mask)``), ``"multiclass"`` for accuracy
    (``update(preds[N, C], target[N])``), ``"binary"`` for AP, AUROC and pAUC names (``update(preds[N], target[N])``,
    or ``[N, T]`` both for T tasks). Descriptive only: the algorithm modules feed every metric through
    :meth:`BatchMetric.update_from_batch`.

    Args:
        name: a metric name, as for :func:`build_metric`.

    Raises:
        ValueError: as :func:`build_metric`, on a name it does not accept.

    Example:
        >>> metric_kind("test/ndcg@5"), metric_kind("pauc_0_0.1_mcclish"), metric_kind("accuracy")
        ('ranking', 'binary', 'multiclass')
    """
    family, _ = _parse(name)
    return {"ndcg": "ranking", "accuracy": "multiclass"}.get(family, "binary")
