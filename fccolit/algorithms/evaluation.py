"""Validation, test and predict of the fccolit LightningModules: the metrics of each stage, logged as
``{stage}/{metric}``; evaluation never touches the per-index state."""

from __future__ import annotations

import torch

from fccolit.metrics import EvaluationMetrics, build_metric
from fccolit.metrics.figures import figure_writer, log_curve_figures

__all__ = ["Evaluation"]


class Evaluation:
    """Mixin of the fccolit LightningModules: one set of metrics per stage in ``self.metrics`` (built from
    :attr:`metric_names` by :meth:`build_metrics`), updated by the evaluation steps and logged at their epoch's end."""

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
