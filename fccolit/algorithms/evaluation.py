"""Validation, test and predict of the fccolit LightningModules: the metrics of each stage, logged as
``{stage}/{metric}``; evaluation never touches the per-index state."""

from __future__ import annotations

import torch

from fccolit.metrics import EvaluationMetrics, build_metric
from fccolit.metrics.figures import figure_writer, log_curve_figures

__all__ = ["Evaluation"]


class Evaluation:
    """Mixin of the fccolit LightningModules: their validation, test and predict steps and metric logging.

    One set of metrics per stage in ``self.metrics`` (built from :attr:`metric_names` by :meth:`build_metrics`),
    updated by the evaluation steps with :meth:`evaluation_scores` and logged as ``{stage}/{metric}`` at their
    epoch's end; evaluation never touches the per-index state.

    Args:
        None: a mixin without a constructor; the host module provides ``metric_names``, ``data_sizes``,
            ``evaluation_figures`` and ``self.metrics`` (:class:`~fccolit.algorithms.base.FCCOModule` does).

    Raises:
        KeyError: an evaluation step of a stage without a metric group in ``self.metrics``; and the metrics' own
            errors (:func:`~fccolit.metrics.build_metric` for an unknown metric name).

    Example:
        >>> import torch
        >>> from fccolit.algorithms import Supervised
        >>> from fccolit.models import LinearScorer
        >>> module = Supervised(LinearScorer(), data_sizes={"num_features": 3})
        >>> sorted(module.metrics)
        ['test', 'val']
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 1])}
        >>> module.validation_step(batch, 0)  # updates module.metrics["val"]
        >>> sorted(module.metrics["val"].named_values(None))
        ['ap', 'auroc', 'pauc_0.05_0.5']
        >>> module.predict_step(batch, 0).shape
        torch.Size([6])
    """

    def build_metrics(self) -> EvaluationMetrics:
        """A fresh set of the module's evaluation metrics, one set per stage in ``self.metrics`` (``"val"``,
        ``"test"``; modules with a second evaluation add groups such as ``"val_anchor"``): the metric of each name of
        :attr:`metric_names` (:func:`~fccolit.metrics.build_metric`). A module with metrics of its own (full-ranking
        NDCG for recommendation) extends it."""
        num_classes = self.data_sizes.get("num_classes")
        return EvaluationMetrics({name: build_metric(name, num_classes) for name in self.metric_names})

    def evaluation_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scores validation, test and predict take of ``batch`` (default: ``self(batch)``)."""
        return self(batch)

    def _eval_step(self, stage: str, batch: dict[str, torch.Tensor]) -> None:
        self.metrics[stage].update_from_batch(self.evaluation_scores(batch), batch)

    def _eval_epoch_end(self, stage: str) -> None:
        self.log_evaluation_metrics(stage)

    def log_evaluation_metrics(self, group: str) -> None:
        """Log the values of ``self.metrics[group]`` as ``{group}/{name}`` (``val/ap``, ``val/ap/<task>``,
        ``val/accuracy/<class>``, ``val/ndcg@10``, ...; each metric says what it logs) and reset them. Collective
        under DDP (the metrics synchronize their states). In the sanity check the metrics are reset unlogged: two
        sanity batches need not hold both classes. With ``evaluation_figures``, rank 0 also draws the curves the
        metrics kept at that computation to TensorBoard (:func:`fccolit.metrics.figures.log_curve_figures`)."""
        metrics = self.metrics[group]
        if not (self._trainer is not None and self._trainer.sanity_checking):
            labels = getattr(getattr(self._trainer, "datamodule", None), "task_names", None)
            # the values are the same on every rank (synchronized by compute): no sync_dist
            for name, value in metrics.named_values(labels).items():
                self.log(f"{group}/{name}", value, prog_bar=group == "val" and name in self.metric_names)
            writer = figure_writer(self._trainer) if self.evaluation_figures else None
            if writer is not None:
                log_curve_figures(writer, group, metrics.named_curves(labels), self.global_step)
        metrics.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.evaluation_scores(batch)
