"""Multi-class top-1 accuracy as a torchmetrics Metric, overall and per class, exact under DDP (sum states)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from fccolit.metrics.base import BatchMetric, per_task_names

__all__ = ["MulticlassAccuracy"]


class MulticlassAccuracy(BatchMetric):
    """Top-1 accuracy of ``[N, C]`` class scores against class labels, over all samples of all processes.

    Labels ``[N]`` (or ``[N, 1]``; long in ``[0, C)``); sum states: exact under DDP. From an evaluation batch:
    ``update(scores, batch["y"])``. ``compute()`` returns the overall accuracy and keeps each class's accuracy (its
    recall: correct / samples of that class; NaN for a class never seen) in :attr:`per_task` ``[C]``;
    :meth:`named_values` returns both, which the algorithm modules log as ``{stage}/accuracy`` and
    ``{stage}/accuracy/<class>`` (e.g. the target class of the continual-learning task, whose change is the
    target-task accuracy improvement plotted by Chen et al., NeurIPS 2025, Figure 3).

    Args:
        num_classes: C, sizes the states up front (the algorithm modules pass the data's ``num_classes``); None
            takes it from the first batch — then every process must see an evaluation batch before the DDP reduction.
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
        if target.ndim == 2 and target.shape[1] == 1:
            target = target[:, 0]
        if preds.ndim != 2 or target.ndim != 1 or target.shape[0] != preds.shape[0]:
            raise ValueError(f"accuracy takes scores [N, C] and class labels [N], got {tuple(preds.shape)} and {tuple(target.shape)}")
        num_classes = preds.shape[1]
        if self.total.numel() == 0:  # the width comes from the first batch (the same on every rank)
            self.correct = torch.zeros(num_classes, dtype=torch.float64, device=preds.device)
            self.total = torch.zeros(num_classes, dtype=torch.float64, device=preds.device)
        if self.total.numel() != num_classes:
            raise ValueError(f"accuracy: scores have {num_classes} classes, earlier batches had {self.total.numel()}")
        target = target.to(preds.device).long()
        if bool(((target < 0) | (target >= num_classes)).any()):
            raise ValueError(f"accuracy: class labels must be in [0, {num_classes}), got e.g. {target[(target < 0) | (target >= num_classes)][0].item()}")
        hit = (preds.argmax(1) == target).to(torch.float64)
        # out of place: states reset inside trainer.validate (inference mode) must not be updated in place later
        self.correct = self.correct.index_add(0, target, hit)
        self.total = self.total.index_add(0, target, torch.ones_like(hit))

    def compute(self) -> Tensor:
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
