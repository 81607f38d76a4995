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
    _NORMALIZATIONS,
    ROCVertices,
    _auroc_of,
    _average_precision_of,
    _check_range,
    _partial_auc_of,
    _roc_counts,
    _validate_binary,
    _validate_multitask,
)

__all__ = [
    "BinaryAveragePrecision",
    "AUROC",
    "PartialAUC",
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


class BinaryAveragePrecision(_BinaryCatMetric):
    """Exact average precision over all samples seen (see :func:`average_precision`).

    Macro over tasks for ``[N, T]`` inputs. (The training objective of the same quantity is
    :class:`fccolit.objectives.AveragePrecision`.)
    """

    _what = "average precision"
    _needs_negatives = False

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _average_precision_of(roc)


class AUROC(_BinaryCatMetric):
    """AUROC over all samples seen, ties counted 1/2 (see :func:`auroc`); macro over tasks for ``[N, T]``."""

    _what = "AUROC"

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _auroc_of(roc)


class PartialAUC(_BinaryCatMetric):
    """Partial AUC over FPR in ``[fpr_min, fpr_max]`` over all samples seen (see :func:`partial_auc`).

    Args:
        fpr_min, fpr_max: the FPR range, ``0 <= fpr_min < fpr_max <= 1``.
        normalization: ``"normalized"`` (area / (β − α), default), ``"raw"`` or ``"mcclish"`` (α = 0 only).
    """

    def __init__(self, fpr_min: float, fpr_max: float, normalization: str = "normalized", **kwargs) -> None:
        super().__init__(**kwargs)
        if normalization not in _NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {_NORMALIZATIONS}, got {normalization!r}")
        self.fpr_min, self.fpr_max = _check_range(fpr_min, fpr_max)
        if normalization == "mcclish" and self.fpr_min != 0.0:
            raise ValueError(
                f"McClish standardization is defined for the range [0, fpr_max] only, got fpr_min={fpr_min}"
            )
        self.normalization = normalization

    _what = "partial AUC"

    def _value_of(self, roc: ROCVertices) -> Tensor:
        return _partial_auc_of(roc, self.fpr_min, self.fpr_max, self.normalization)
