"""How the algorithm modules evaluate: metrics that read their inputs from a batch, in one container per stage.

A :class:`BatchMetric` is a torchmetrics ``Metric`` that declares the batch fields its ``update`` takes after the
scores (:attr:`BatchMetric.inputs`, then :attr:`BatchMetric.optional_inputs`, passed as ``None`` when absent) and
says what it logs (:meth:`BatchMetric.named_values`: one value, or one per task or class, or one per cut-off). An
:class:`EvaluationMetrics` holds the metrics of one evaluation stage under their logged names; the module's
evaluation step is ``metrics.update_from_batch(scores, batch)`` and its epoch end logs
``metrics.named_values(labels)``, whatever the metrics are: binary, multi-task, multi-class, NDCG on lists or
NDCG over a full ranking.

Example:
    >>> import torch
    >>> from fccolit.metrics import AUROCScore, NDCGScore
    >>> metrics = EvaluationMetrics({"auroc": AUROCScore(), "ndcg@2": NDCGScore(top_k=2)})
    >>> metrics.update_from_batch(torch.tensor([0.9, 0.2, 0.4]), {"y": torch.tensor([1, 0, 0])})
    >>> {name: round(float(value), 4) for name, value in metrics.named_values().items()}
    {'auroc': 1.0}

    NDCG reads ``relevance`` (and ``mask`` when the batch has it), which this batch lacks: it is not updated, so
    it logs nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator, Mapping, Sequence

import torch
import torchmetrics
from torch import Tensor, nn

from fccolit import distributed

__all__ = ["BatchMetric", "EvaluationMetrics", "per_task_names"]


class BatchMetric(torchmetrics.Metric):
    """A torchmetrics ``Metric`` fed from evaluation batches: ``update(scores, *inputs, *optional_inputs)``.

    Subclasses set :attr:`inputs` (the batch fields ``update`` takes after the scores, in order) and, if any,
    :attr:`optional_inputs` (taken next, ``None`` when the batch lacks them), and update their states out of place
    (``self.total = self.total + x``, never ``self.total += x`` or ``index_add_``): states reset inside
    ``trainer.validate`` / ``trainer.test`` are inference tensors, which a later ``fit`` may read but not change in
    place. A metric with more than one value to log (per task, per class, per cut-off) overrides
    :meth:`named_values`; one that keeps a curve beside its value overrides :meth:`named_curves`.

    Args:
        kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ``process_group``, ...).

    Raises:
        KeyError: :meth:`update_from_batch` on a batch that lacks a field of :attr:`inputs`.

    Example:
        >>> import torch
        >>> class MeanPositiveScore(BatchMetric):
        ...     inputs = ("y",)
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        ...         self.add_state("count", default=torch.tensor(0.0), dist_reduce_fx="sum")
        ...     def update(self, scores, y):
        ...         self.total = self.total + scores[y == 1].sum()
        ...         self.count = self.count + (y == 1).sum()
        ...     def compute(self):
        ...         return self.total / self.count
        >>> metric = MeanPositiveScore()
        >>> metric.update_from_batch(torch.tensor([0.9, 0.2, 0.4]), {"y": torch.tensor([1, 0, 1])})
        >>> metric.named_values("mean_positive_score")
        {'mean_positive_score': tensor(0.6500)}
    """

    #: the batch fields ``update`` takes after the scores, in this order
    inputs: ClassVar[tuple[str, ...]] = ()
    #: further fields ``update`` takes after :attr:`inputs`; ``None`` when the batch lacks them
    optional_inputs: ClassVar[tuple[str, ...]] = ()

    def reads(self, batch: Mapping[str, Any]) -> bool:
        """Whether ``batch`` holds every field of :attr:`inputs` (so :meth:`update_from_batch` accepts it)."""
        return all(field in batch for field in self.inputs)

    def update_from_batch(self, scores: Tensor, batch: Mapping[str, Any]) -> None:
        """``update(scores, batch[inputs[0]], ..., batch.get(optional_inputs[0]), ...)``.

        Raises:
            KeyError: when ``batch`` lacks a field of :attr:`inputs`.
        """
        missing = [field for field in self.inputs if field not in batch]
        if missing:
            raise KeyError(
                f"{type(self).__name__} reads the batch fields {list(self.inputs)}; this batch lacks {missing} "
                f"(it has {sorted(batch)})"
            )
        self.update(scores, *(batch[f] for f in self.inputs), *(batch.get(f) for f in self.optional_inputs))

    def named_values(self, name: str, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """The values to log for this metric logged as ``name``: ``{name: compute()}`` (synchronized across
        processes by torchmetrics). ``labels`` name the tasks or classes of metrics that log one value each."""
        return {name: self.compute()}

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Any]:
        """The curves the last ``compute()`` kept beside the value, under keys that say what they describe, so that
        metrics holding the same data give the same key (``"roc"`` or ``"roc/<task>"``: the ROC vertices every binary
        metric keeps, :class:`~fccolit.metrics.functional.ROCVertices`; ``"ndcg@k"``: NDCG@1..K of the
        queries, ``[K]``). Default: none. Global under DDP, as the value (computed from the synchronized states);
        cleared by ``reset``."""
        return {}


def per_task_names(name: str, count: int, labels: Sequence[str] | None = None) -> list[str]:
    """The logged name ``name/<label>`` of each of ``count`` tasks or classes.

    Args:
        name: the metric's logged name.
        count: the number of tasks or classes.
        labels: their names (spaces become ``_``: a TensorBoard tag has none); used only when there is one per task,
            else each task is named by its index.

    Raises:
        Nothing: any ``labels`` of the wrong length fall back to the indexes.

    Example:
        >>> per_task_names("auroc", 2, ["pleural effusion", "edema"])
        ['auroc/pleural_effusion', 'auroc/edema']
        >>> per_task_names("accuracy", 3)
        ['accuracy/0', 'accuracy/1', 'accuracy/2']
    """
    if labels is None or len(labels) != count:
        labels = [str(t) for t in range(count)]
    return [f"{name}/{'_'.join(str(label).split())}" for label in labels]


def _key(name: str) -> str:
    """The ModuleDict key of a logged name (keys cannot hold '.', logged names can)."""
    return name.replace(".", "_").replace("@", "_at_")


class EvaluationMetrics(nn.ModuleDict):
    """The metrics of one evaluation stage, under their logged names.

    Entries are :class:`BatchMetric` s, stored under a key derived from the name (``"ndcg@10"`` under
    ``"ndcg_at_10"``, ``"pauc_0.05_0.5"`` under ``"pauc_0_05_0_5"``: module keys cannot hold ``.``).

    * :meth:`update_from_batch` updates every metric whose :attr:`~BatchMetric.inputs` the batch holds (a module
      may hold metrics of several batch kinds, e.g. NDCG on candidate lists and full-ranking NDCG) and raises
      when no metric reads the batch;
    * :meth:`named_values` returns the logged values of the metrics updated since the last reset on any process
      (one collective under DDP decides, so every process computes, and synchronizes, the same metrics);
    * :meth:`reset` resets them all.

    Args:
        metrics: ``{logged name: metric}``.

    Raises:
        TypeError: a metric is not a :class:`BatchMetric` (here or in :meth:`add`).
        ValueError: two names map to the same key (here or in :meth:`add`).
        KeyError: :meth:`update_from_batch` on a batch that no metric reads.

    Example:
        >>> import torch
        >>> from fccolit.metrics import APScore, NDCGScore
        >>> metrics = EvaluationMetrics({"ap": APScore(), "ndcg@2": NDCGScore(top_k=2)})
        >>> metrics.update_from_batch(torch.tensor([[0.9, 0.1]]), {"relevance": torch.tensor([[0, 1]])})
        >>> {name: round(float(value), 4) for name, value in metrics.named_values().items()}  # AP saw no batch
        {'ndcg@2': 0.6309}
    """

    def __init__(self, metrics: Mapping[str, BatchMetric] | None = None) -> None:
        super().__init__()
        self._names: dict[str, str] = {}
        for name, metric in (metrics or {}).items():
            self.add(name, metric)

    def add(self, name: str, metric: BatchMetric) -> None:
        """Add ``metric`` under the logged name ``name``.

        Raises:
            TypeError: ``metric`` is not a :class:`BatchMetric` (it must say which batch fields it reads).
            ValueError: the name (or its key) is taken.
        """
        if not isinstance(metric, BatchMetric):
            raise TypeError(
                f"{name!r}: {type(metric).__name__} is not a fccolit.metrics.BatchMetric; subclass it and set "
                "`inputs` to the batch fields its update(scores, ...) takes"
            )
        key = _key(name)
        if key in self._names:
            raise ValueError(f"metric name {name!r} is taken (by {self._names[key]!r})")
        self[key] = metric
        self._names[key] = name

    def named_metrics(self) -> Iterator[tuple[str, BatchMetric]]:
        """``(logged name, metric)`` pairs in insertion order."""
        for key, metric in self.items():
            yield self._names.get(key, key), metric

    def update_from_batch(self, scores: Tensor, batch: Mapping[str, Any]) -> None:
        """Update every metric that reads ``batch`` with ``scores``.

        Raises:
            KeyError: the container holds metrics and none reads ``batch``.
        """
        readers = [metric for metric in self.values() if metric.reads(batch)]
        if len(self) and not readers:
            wanted = "; ".join(f"{name} reads {list(m.inputs)}" for name, m in self.named_metrics())
            raise KeyError(f"no metric reads this batch (it has the fields {sorted(batch)}): {wanted}")
        for metric in readers:
            metric.update_from_batch(scores, batch)

    def named_values(self, labels: Sequence[str] | None = None) -> dict[str, Tensor]:
        """``{logged name: value}`` of every metric updated since its last reset on some process (collective under
        DDP: every process must call it). ``labels``: the names of the tasks or classes, for the metrics that log
        one value each (see :meth:`BatchMetric.named_values`)."""
        entries = list(self.named_metrics())
        if not entries:
            return {}
        updated = torch.tensor([float(metric.update_called) for _, metric in entries], device=entries[0][1].device)
        if distributed.is_distributed():
            torch.distributed.all_reduce(updated)
        values: dict[str, Tensor] = {}
        for (name, metric), seen in zip(entries, updated.tolist()):
            if seen:
                values.update(metric.named_values(name, labels))
        return values

    def named_curves(self, labels: Sequence[str] | None = None) -> dict[str, Any]:
        """The curves the metrics kept at their last ``compute()`` (call :meth:`named_values` first), merged by key:
        where two metrics describe the same data the longer curve is kept (``ndcg@10`` holds NDCG@1..10, ``ndcg@5``
        its first five values). No collective: rank 0 may call it alone."""
        curves: dict[str, Any] = {}
        for _, metric in self.named_metrics():
            for key, curve in metric.named_curves(labels).items():
                if key not in curves or len(curve) > len(curves[key]):
                    curves[key] = curve
        return curves

    def reset(self) -> None:
        """Reset every metric."""
        for metric in self.values():
            metric.reset()
