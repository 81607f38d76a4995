"""Binary classification metrics as torchmetrics Metrics: exact average precision, AUROC and partial AUC on an FPR
range, over all samples of all processes (``cat`` states), macro-averaged over tasks for multi-label data.

The values, their tie conventions and the references are those of the functional kernels in
:mod:`fccolit.metrics.functional.classification`.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

import torch
from torch import Tensor
from torchmetrics.utilities import dim_zero_cat

from fccolit.metrics.base import BatchMetric, per_task_names
from fccolit.metrics.functional.classification import (
    Normalization,
    ROCVertices,
    _auroc_of,
    _average_precision_of,
    _check_partial_auc_args,
    _partial_auc_of,
    _roc_counts,
    _validate_binary,
    _validate_multitask,
)

__all__ = [
    "APScore",
    "AUROCScore",
    "PartialAUCScore",
]


class _BinaryCatMetric(BatchMetric):
    """Keeps every (score, label) pair in ``cat`` states, so the metric is computed once on all samples of
    all processes: the global value under DDP is exact, whatever the shard sizes.

    ``update(preds, target)``: ``preds`` ``[N]`` or ``[N, 1]`` raw scores (any monotone scale), ``target`` in
    {0, 1} as bool, int or float. NaN scores and labels outside {0, 1} raise ValueError at ``update``. From an
    evaluation batch: ``update(scores, batch["y"])``.
    Memory: two float64/int64 values per sample. Use ``update()`` per batch and ``compute()`` (or log the
    Metric object) at epoch end: calling the metric (``forward``) also computes a per-batch value, which
    raises on a batch that holds one class only.

    Multi-task (multi-label) data: ``preds`` and ``target`` ``[N, T]`` with ``T > 1``, one column per task;
    a target of ``-1`` marks a sample unlabeled for that task (e.g. an uncertain CheXpert finding under
    U-Ignore) and is left out of that task. ``compute()`` returns the mean over the tasks of the per-task
    values (the macro average of LibAUC and torchmetrics' ``Multilabel*(average="macro")``) and keeps the
    per-task values in :attr:`per_task` (``[T]``; NaN for a task without both classes, which the mean skips).
    :meth:`named_values` logs the mean as ``name`` and each task as ``name/<task>``.
    """

    inputs = ("y",)
    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    preds: list[Tensor]
    target: list[Tensor]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")
        self.per_task: Tensor | None = None
        self._roc: list[ROCVertices | None] | None = None  # per task, from the last compute()

    def update(self, preds: Tensor, target: Tensor) -> None:  # type: ignore[override]
        """Keep the (score, label) pairs of a batch: ``[N]`` / ``[N, 1]`` binary, or ``[N, T]`` multi-task."""
        if preds.ndim == 2 and preds.shape[1] > 1:
            preds, target = _validate_multitask(preds, target)
        else:
            preds, target = _validate_binary(preds, target)
        self.preds.append(preds)
        self.target.append(target.to(torch.long))

    def _gathered(self) -> tuple[Tensor, Tensor]:
        if isinstance(self.preds, list) and not self.preds:
            empty = torch.zeros(0, dtype=torch.float64, device=self.device)
            return empty, empty.to(torch.long)
        return dim_zero_cat(self.preds), dim_zero_cat(self.target)

    #: what the metric is called in the error raised when ``_value_of`` is undefined
    _what: ClassVar[str] = "the metric"
    #: whether the metric is undefined without negatives (AUROC, pAUC; AP is 1 with positives only)
    _needs_negatives: ClassVar[bool] = True

    def _value_of(self, roc: ROCVertices) -> Tensor:
        """The metric of one binary task from its ROC vertices (the classes it needs are present)."""
        raise NotImplementedError

    def _task(self, preds: Tensor, target: Tensor) -> tuple[Tensor, ROCVertices]:
        """``(value, ROC vertices)`` of one task: ``preds`` float64 ``[N]``, ``target`` ``[N]`` in {0, 1}; raises
        ValueError, naming the class counts, when the metric is undefined for them."""
        roc = ROCVertices(*_roc_counts(preds, target == 1))
        n_pos, n_neg = roc.num_positives, roc.num_negatives
        if n_pos == 0 or (self._needs_negatives and n_neg == 0):
            classes = "both classes" if self._needs_negatives else "positives"
            raise ValueError(f"{self._what} is undefined without {classes}: got {n_pos} positives, {n_neg} negatives")
        return self._value_of(roc), roc

    def compute(self) -> Tensor:
        """The metric over every pair kept (on every process), or the mean over the tasks; keeps the ROC vertices."""
        preds, target = self._gathered()
        if preds.ndim == 1:
            self.per_task = None
            value, roc = self._task(preds, target)
            self._roc = [roc]
            return value
        values, self._roc = [], []
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=preds.device)
        for task in range(preds.shape[1]):
            labeled = target[:, task] >= 0
            p, t = preds[labeled, task], target[labeled, task]
            both = bool((t == 1).any()) and bool((t == 0).any())
            value, roc = self._task(p, t) if both else (nan, None)
            values.append(value)
            self._roc.append(roc)
        self.per_task = torch.stack(values)
        defined = self.per_task[~torch.isnan(self.per_task)]
        if defined.numel() == 0:
            raise ValueError(f"{type(self).__name__}: no task has both classes among the samples seen")
        return defined.mean()

    def reset(self) -> None:
        """Drop the pairs, the per-task values and the kept ROC vertices."""
        self._roc = None
        super().reset()

    def named_values(self, name: str, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{name: value}``; for multi-task data also ``{name/<task>: value of the task}`` (``labels`` name the
        tasks, else their index)."""
        values = {name: self.compute()}
        if self.per_task is not None:
            values.update(zip(per_task_names(name, len(self.per_task), labels), self.per_task.unbind()))
        return values

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, ROCVertices]:
        """The ROC vertices of each task from the last ``compute()`` (global under DDP, like the value):
        ``{"roc": vertices}``, or ``{"roc/<task>": vertices}`` per task with both classes for ``[N, T]`` data. Every
        binary metric of a stage sees the same scores and labels, so their curves agree."""
        if not self._roc:
            return {}
        if self.per_task is None:
            return {"roc": self._roc[0]}
        names = per_task_names("roc", len(self._roc), labels)
        return {name: roc for name, roc in zip(names, self._roc) if roc is not None}


class APScore(_BinaryCatMetric):
    """Exact average precision of the scores of all samples seen (functional form: ``ap_score``).

    ``update(preds, target)`` keeps the pairs (from an evaluation batch: ``update(scores, batch["y"])``);
    ``compute()`` returns AP over all of them, a 0-d float64 tensor, and for ``[N, T]`` inputs the mean over the
    tasks (each task in :attr:`per_task`). Logged as ``ap`` (:func:`build_metric`). The training objective of the
    same quantity is in :mod:`fccolit.objectives`.

    Args:
        kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        ValueError: at ``update``, on NaN scores, labels outside {0, 1} (or {-1, 0, 1} for ``[N, T]``) or shapes
            that disagree; at ``compute()``, without positives (AP is 1 without negatives), or, for ``[N, T]``,
            when no task has both classes.

    Example:
        >>> import torch
        >>> from fccolit.metrics import APScore
        >>> metric = APScore()
        >>> metric.update(torch.tensor([0.9, 0.8, 0.3]), torch.tensor([1, 0, 1]))
        >>> metric.update(torch.tensor([0.1]), torch.tensor([0]))  # precision 1 at rank 1, 2/3 at rank 3
        >>> round(float(metric.compute()), 4)
        0.8333
    """

    _what = "average precision"
    _needs_negatives = False

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _average_precision_of(roc)


class AUROCScore(_BinaryCatMetric):
    """Area under the ROC curve of all samples seen, ties counted 1/2 (functional form: ``auroc_score``).

    ``update(preds, target)`` keeps the pairs (from an evaluation batch: ``update(scores, batch["y"])``);
    ``compute()`` returns the AUROC over all of them, a 0-d float64 tensor, and for ``[N, T]`` inputs the mean over
    the tasks (each task in :attr:`per_task`). Logged as ``auroc`` (:func:`build_metric`).

    Args:
        kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        ValueError: at ``update``, on NaN scores, labels outside {0, 1} (or {-1, 0, 1} for ``[N, T]``) or shapes
            that disagree; at ``compute()``, unless both classes were seen (for ``[N, T]``: in some task).

    Example:
        >>> import torch
        >>> from fccolit.metrics import AUROCScore
        >>> metric = AUROCScore()
        >>> metric.update(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))  # 3 of 4 pairs in order
        >>> float(metric.compute())
        0.75
    """

    _what = "AUROC"

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _auroc_of(roc)


class PartialAUCScore(_BinaryCatMetric):
    """Partial AUC of all samples seen on the FPR range [fpr_min, fpr_max] (functional form: ``partial_auc_score``).

    ``update(preds, target)`` keeps the pairs (from an evaluation batch: ``update(scores, batch["y"])``);
    ``compute()`` returns the partial AUC over all of them, a 0-d float64 tensor, and for ``[N, T]`` inputs the mean
    over the tasks (each task in :attr:`per_task`). Logged as ``pauc_A_B`` (normalized), ``pauc_A_B_raw`` or
    ``pauc_0_B_mcclish`` (:func:`build_metric`). The training objective on an FPR range is in
    :mod:`fccolit.objectives`, the algorithm that optimizes it in :mod:`fccolit.algorithms`.

    Args:
        fpr_min: the range's lower end α, ``0 <= fpr_min < fpr_max``.
        fpr_max: the range's upper end β, ``<= 1``.
        normalization: ``"normalized"`` (the area divided by β − α, in [0, 1]; default), ``"raw"`` (the area) or
            ``"mcclish"`` (McClish's standardization, sklearn's ``roc_auc_score(max_fpr=β)``; α = 0 only).
        kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        ValueError: at construction, on a range outside ``0 <= fpr_min < fpr_max <= 1``, an unknown
            normalization or ``"mcclish"`` with ``fpr_min > 0``; at ``update`` and ``compute()`` as
            :class:`AUROCScore`.

    Example:
        >>> import torch
        >>> from fccolit.metrics import PartialAUCScore
        >>> metric = PartialAUCScore(fpr_min=0.0, fpr_max=0.5)
        >>> metric.update(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))
        >>> float(metric.compute())  # TPR is 1/2 while the FPR is below 1/2
        0.5
    """

    def __init__(self, fpr_min: float, fpr_max: float, normalization: Normalization = "normalized", **kwargs) -> None:
        super().__init__(**kwargs)
        self.fpr_min, self.fpr_max = _check_partial_auc_args(fpr_min, fpr_max, normalization)
        self.normalization = normalization

    _what = "partial AUC"

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _partial_auc_of(roc, self.fpr_min, self.fpr_max, self.normalization)
