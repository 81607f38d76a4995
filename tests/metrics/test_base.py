"""Tests of fccolit.metrics.base: metrics that read their batch fields (BatchMetric) in one container per stage
(EvaluationMetrics), what the container logs and which curves it merges, and ``trainer.validate`` followed by
``trainer.fit`` (metric states reset under inference mode must take later updates)."""

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, Trainer, seed_everything
from torch import nn
from torch.utils.data import DataLoader

from fccolit.algorithms.song import SONG
from fccolit.algorithms.supervised import Supervised
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.metrics import (
    APScore,
    AUROCScore,
    BatchMetric,
    EvaluationMetrics,
    FullRankingNDCGScore,
    NDCGScore,
    build_metric,
)
from fccolit.metrics.functional import ap_score
from fccolit.models.ltr import ListMLP
from fccolit.objectives.ndcg import NDCGSurrogate

from .helpers import ranking_lists, tied_binary


def test_each_batch_feeds_the_metrics_that_read_its_fields():
    metrics = EvaluationMetrics({"ap": build_metric("ap"), "ndcg@2": build_metric("ndcg@2")})
    assert list(metrics) == ["ap", "ndcg_at_2"] and isinstance(metrics["ap"], APScore)
    scores, y = torch.tensor([0.9, 0.1, 0.4, 0.3]), torch.tensor([1, 0, 0, 1])
    metrics.update_from_batch(scores, {"y": y, "x": torch.zeros(4, 2)})
    assert metrics["ap"].update_count == 1 and metrics["ndcg_at_2"].update_count == 0
    # NDCG was not fed: only AP is logged
    assert metrics.named_values() == {"ap": ap_score(scores, y)}
    lists = {"relevance": torch.tensor([[1.0, 0.0, 2.0]]), "mask": torch.tensor([[True, True, False]])}
    metrics.update_from_batch(torch.tensor([[0.0, 1.0, 5.0]]), lists)  # the padded item's score is ignored
    assert float(metrics.named_values()["ndcg@2"]) == pytest.approx(1 / 1.5849625007211563 / 1.0)
    metrics.reset()
    assert metrics.named_values() == {}
    with pytest.raises(KeyError, match=r"no metric reads this batch.*ap reads \['y'\]"):
        metrics.update_from_batch(scores, {"x": torch.zeros(4, 2)})
    with pytest.raises(TypeError, match="BatchMetric"):
        EvaluationMetrics({"plain": nn.Identity()})
    with pytest.raises(ValueError, match="taken"):
        EvaluationMetrics({"ndcg@2": NDCGScore(top_k=2), "ndcg_at_2": NDCGScore(top_k=2)})


def test_every_metric_is_a_batch_metric_that_names_its_fields():
    for name in ("ap", "auroc", "pauc_0.05_0.5", "accuracy", "ndcg@3"):
        metric = build_metric(name, num_classes=2)
        assert isinstance(metric, BatchMetric) and metric.inputs, name
    assert FullRankingNDCGScore.inputs == ("heldout_items", "heldout_relevance")
    assert FullRankingNDCGScore.optional_inputs == ("exclude_items",) and NDCGScore.optional_inputs == ("mask",)


def test_a_stage_merges_the_curves_that_describe_the_same_data():
    s, y = tied_binary(4)
    p, rel, mask = ranking_lists(5)
    metrics = EvaluationMetrics({"ap": APScore(), "auroc": AUROCScore(), "ndcg@3": NDCGScore(top_k=3),
                                 "ndcg@6": NDCGScore(top_k=6)})
    metrics.update_from_batch(s, {"y": y})
    metrics.update_from_batch(p, {"relevance": rel, "mask": mask})
    metrics.named_values()
    curves = metrics.named_curves()
    assert sorted(curves) == ["ndcg@k", "roc"]
    assert curves["ndcg@k"].shape == (6,)  # the longer of NDCG@1..3 and NDCG@1..6
    torch.testing.assert_close(curves["ndcg@k"][:3], metrics["ndcg_at_3"].named_curves()["ndcg@k"], rtol=0, atol=1e-15)
    metrics.reset()
    assert metrics.named_curves() == {}


# ---------------------------------------------------------------------------- validate, then fit


class CrossEntropy(Supervised):
    """Multi-class cross-entropy on ``[B, C]`` scores (the training half does not matter here)."""

    def supervised_loss(self, scores, batch):
        return F.cross_entropy(scores, batch["y"])


class Blobs(LightningDataModule):
    """Three classes of 4-d points, batches of 20 (dict batches, as the fccolit DataModules yield)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.y = torch.randint(0, 3, (60,), generator=g)
        self.x = torch.randn(60, 4, generator=g) + 2.0 * F.one_hot(self.y, 4).float()
        self.sizes = {"num_classes": 3, "num_samples": 60}

    def _loader(self):
        return DataLoader([{"x": self.x[i : i + 20], "y": self.y[i : i + 20]} for i in range(0, 60, 20)],
                          batch_size=None)

    train_dataloader = val_dataloader = _loader


def _trainer(tmp_path, **kw):
    return Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path, **kw)


def test_validate_then_fit_with_a_multiclass_metric(tmp_path):
    """States reset inside trainer.validate are inference tensors: the accuracy's (and AP's) later updates in fit
    must not change them in place ("Inplace update to inference tensor outside InferenceMode")."""
    seed_everything(0)
    dm = Blobs()
    module = CrossEntropy(nn.Linear(4, 3), data_sizes=dm.sizes, metrics=["accuracy"],
                          optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    before = _trainer(tmp_path).validate(module, datamodule=dm, verbose=False)[0]
    assert set(before) == {"val/accuracy", "val/accuracy/0", "val/accuracy/1", "val/accuracy/2"}
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(module, datamodule=dm)
    assert float(trainer.callback_metrics["val/accuracy"]) > float(before["val/accuracy"])
    after = _trainer(tmp_path).validate(module, datamodule=dm, verbose=False)[0]
    assert after["val/accuracy"] == pytest.approx(float(trainer.callback_metrics["val/accuracy"]))


def test_validate_then_fit_with_a_ranking_metric(tmp_path):
    seed_everything(0)
    dm = SyntheticRankingDataModule(task="ltr", num_queries=24, num_features=5, list_size=(6, 14), queries_per_batch=8,
                                    top_k=3, seed=3)
    module = SONG(ListMLP(hidden=[4]), NDCGSurrogate(), data_sizes=dm.sizes, metrics=["ndcg@3", "ndcg"])
    before = _trainer(tmp_path).validate(module, datamodule=dm, verbose=False)[0]
    assert set(before) == {"val/ndcg@3", "val/ndcg"}
    trainer = _trainer(tmp_path, max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=dm)
    assert {"val/ndcg@3", "val/ndcg"} <= set(trainer.callback_metrics)
