"""Multi-class top-1 accuracy as a torchmetrics Metric, overall and per class, exact under DDP (sum states)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from fccolit.metrics.base import BatchMetric, per_task_names

__all__ = ["AccuracyScore"]


class AccuracyScore(BatchMetric):
    """Top-1 accuracy of ``[N, C]`` class scores against class labels, overall and per class, over all samples seen.

    ``update(preds, target)`` takes scores ``[N, C]`` and labels ``[N]`` (or ``[N, 1]``) in ``[0, C)``; from an
    evaluation batch: ``update(scores, batch["y"])``. ``compute()`` returns the overall accuracy, a 0-d float64
    tensor, and keeps each class's accuracy (its recall: correct / samples of that class; NaN for a class never seen)
    in :attr:`per_task` ``[C]``; :meth:`named_values` returns both, which the algorithm modules log as
    ``{stage}/accuracy`` and ``{stage}/accuracy/<class>`` (e.g. the target class of the continual-learning task,
    whose change is the target-task accuracy improvement of Chen et al., NeurIPS 2025, Figure 3). Sum states: exact
    under DDP. Logged as ``accuracy`` (:func:`build_metric`).

    Args:
        num_classes: C, sizes the states up front (the algorithm modules pass the data's ``num_classes``); None
            takes it from the first batch — then every process must see an evaluation batch before the DDP reduction.
        kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        ValueError: at ``update``, on shapes other than ``[N, C]`` and ``[N]``, a number of classes that changes
            between batches or a label outside ``[0, C)``; at ``compute()``, without samples.

    Example:
        >>> import torch
        >>> from fccolit.metrics import AccuracyScore
        >>> metric = AccuracyScore(num_classes=3)
        >>> scores = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1]])
        >>> metric.update(scores, torch.tensor([0, 1, 1]))  # the third sample (class 1) is taken for class 0
        >>> {name: round(float(value), 4) for name, value in metric.named_values("accuracy").items()}
        {'accuracy': 0.6667, 'accuracy/0': 1.0, 'accuracy/1': 0.5, 'accuracy/2': nan}
    """

    inputs = ("y",)
    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.add_state("correct", default=torch.zeros(num_classes or 0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(num_classes or 0, dtype=torch.float64), dist_reduce_fx="sum")
        self.per_task: Tensor | None = None

    def update(self, preds: Tensor, target: Tensor) -> None:  # type: ignore[override]
        """Count the top-1 hits of a batch per class: scores ``[N, C]``, labels ``[N]`` or ``[N, 1]``."""
        if target.ndim == 2 and target.shape[1] == 1:
            target = target[:, 0]
        if preds.ndim != 2 or target.ndim != 1 or target.shape[0] != preds.shape[0]:
            raise ValueError(
                f"accuracy takes scores [N, C] and class labels [N], got {tuple(preds.shape)} and {tuple(target.shape)}"
            )
        num_classes = preds.shape[1]
        if self.total.numel() == 0:  # the width comes from the first batch (the same on every rank)
            self.correct = torch.zeros(num_classes, dtype=torch.float64, device=preds.device)
            self.total = torch.zeros(num_classes, dtype=torch.float64, device=preds.device)
        if self.total.numel() != num_classes:
            raise ValueError(f"accuracy: scores have {num_classes} classes, earlier batches had {self.total.numel()}")
        target = target.to(preds.device).long()
        outside = (target < 0) | (target >= num_classes)
        if bool(outside.any()):
            example = target[outside][0].item()
            raise ValueError(f"accuracy: class labels must be in [0, {num_classes}), got e.g. {example}")
        hit = (preds.argmax(1) == target).to(torch.float64)
        # out of place: states reset inside trainer.validate (inference mode) must not be updated in place later
        self.correct = self.correct.index_add(0, target, hit)
        self.total = self.total.index_add(0, target, torch.ones_like(hit))

    def compute(self) -> Tensor:
        """The overall accuracy; each class's accuracy goes to :attr:`per_task`."""
        if float(self.total.sum()) == 0:
            raise ValueError("accuracy is undefined without samples")
        self.per_task = self.correct / self.total  # NaN for a class never seen
        return self.correct.sum() / self.total.sum()

    def named_values(self, name: str, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{name: overall accuracy}`` and ``{name/<class>: the class's accuracy}`` (``labels`` name the classes,
        else their index)."""
        values = {name: self.compute()}
        values.update(zip(per_task_names(name, len(self.per_task), labels), self.per_task.unbind()))
        return values
