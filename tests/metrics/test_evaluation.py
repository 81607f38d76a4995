"""The evaluation mechanism: metrics that read their batch fields (BatchMetric) in one container per stage
(EvaluationMetrics), what they log, and ``trainer.validate`` followed by ``trainer.fit`` (metric states reset under
inference mode must take later updates)."""

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
    AUROCScore,
    NDCGScore,
    BatchMetric,
    APScore,
    EvaluationMetrics,
    FullRankingNDCGScore,
    AccuracyScore,
    build_metric,
)
from fccolit.metrics.functional import ap_score
from fccolit.models.ltr import ListMLP
from fccolit.objectives.ndcg import NDCGSurrogate


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


def test_metrics_name_their_values_per_task_per_class_and_per_cutoff():
    tasks = APScore()
    scores = torch.tensor([[0.9, 0.2], [0.1, 0.8], [0.5, 0.1]])
    tasks.update_from_batch(scores, {"y": torch.tensor([[1, 0], [0, 1], [0, -1]])})
    values = tasks.named_values("ap", labels=["No Finding", "edema"])
    assert list(values) == ["ap", "ap/No_Finding", "ap/edema"]
    assert float(values["ap"]) == pytest.approx(1.0) and float(values["ap/edema"]) == pytest.approx(1.0)
    single = AUROCScore()
    single.update_from_batch(scores[:, 0], {"y": torch.tensor([[1], [0], [0]])})  # [N, 1] labels
    assert list(single.named_values("auroc")) == ["auroc"]

    accuracy = AccuracyScore(3)
    accuracy.update_from_batch(torch.eye(3)[[0, 1, 1]], {"y": torch.tensor([[0], [1], [2]])})
    values = accuracy.named_values("accuracy")
    assert list(values) == ["accuracy", "accuracy/0", "accuracy/1", "accuracy/2"]
    assert [float(v) for v in values.values()] == pytest.approx([2 / 3, 1.0, 1.0, 0.0])

    full = FullRankingNDCGScore(top_ks=(1, 3), names=("ndcg@1", "ndcg"))
    batch = {"heldout_items": torch.tensor([[2, -1]]), "heldout_relevance": torch.tensor([[1.0, 0.0]])}
    assert full.reads(batch) and not NDCGScore().reads(batch)
    full.update_from_batch(torch.tensor([[0.3, 0.2, 0.1]]), batch)  # the held-out item ranks third
    assert {k: float(v) for k, v in full.named_values("unused").items()} == pytest.approx({"ndcg@1": 0.0, "ndcg": 0.5})
    with pytest.raises(ValueError, match="one logged name per cut-off"):
        FullRankingNDCGScore(top_ks=(1, 3), names=("ndcg@1",))


def test_every_metric_is_a_batch_metric_that_names_its_fields():
    for name in ("ap", "auroc", "pauc_0.05_0.5", "accuracy", "ndcg@3"):
        metric = build_metric(name, num_classes=2)
        assert isinstance(metric, BatchMetric) and metric.inputs, name
    assert FullRankingNDCGScore.inputs == ("heldout_items", "heldout_relevance")
    assert FullRankingNDCGScore.optional_inputs == ("exclude_items",) and NDCGScore.optional_inputs == ("mask",)


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


def test_constraint_statistics_add_up_batches_and_divide_once():
    from fccolit.callbacks.constraints import ConstraintStatistics

    stats = ConstraintStatistics(num_constraints=2, dim=1)
    stats.update(torch.tensor([[3.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
    stats.update(torch.tensor([[1.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
    means = stats.compute()
    assert means[0, 0] == 1.0 and torch.isnan(means[1, 0])  # no data for constraint 1
    stats.reset()
    with torch.inference_mode():  # as trainer.validate resets it; a later fit's updates must still apply
        stats.reset()
    stats.update(torch.tensor([[2.0], [4.0]]), torch.tensor([[1.0], [2.0]]))
    assert stats.reduced().tolist() == [[2.0], [2.0]]
    with pytest.raises(ValueError, match="shape"):
        stats.update(torch.zeros(3, 1), torch.ones(3, 1))
