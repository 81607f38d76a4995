"""The validation pictures reach TensorBoard: a real ``TensorBoardLogger`` writes them and tensorboard's
``EventAccumulator`` reads them back from the event file — precision-recall and ROC figures and the PR-curve plugin
(binary, and per task for multi-label data), NDCG@k against k (ranking), the constraints against the epoch
(``ConstraintViolationLogger``). Other loggers get nothing and nothing fails; ``evaluation_figures=False`` turns the
evaluation figures off."""

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fccolit.algorithms import ADAP, SONG, SOX
from fccolit.algorithms.alexr2 import ALEXR2
from fccolit.callbacks import ConstraintViolationLogger
from fccolit.datamodules import FairnessDataModule, SyntheticBinaryDataModule, SyntheticMultiLabelDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.metrics.figures import render
from fccolit.models import MLP
from fccolit.models.ltr import ListMLP
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.objectives.constrained import ROCFairnessAUCObjective
from fccolit.objectives.ndcg import NDCGSurrogate

pytestmark = pytest.mark.usefixtures("one_thread")


def fit(module, data, logger, max_epochs=1, callbacks=(), test=False):
    trainer = Trainer(accelerator="cpu", max_epochs=max_epochs, limit_train_batches=3, logger=logger,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      use_distributed_sampler=False, num_sanity_val_steps=0, callbacks=list(callbacks))
    trainer.fit(module, datamodule=data)
    if test:
        trainer.test(module, datamodule=data)
    return trainer


def events(logger):
    accumulator = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def binary_data():
    return SyntheticBinaryDataModule(num_samples=600, num_features=5, pos_fraction=0.1, batch_size=32, num_positives=8)


def test_binary_validation_writes_pr_and_roc_figures_and_the_pr_plugin(tmp_path):
    seed_everything(0)
    data = binary_data()
    module = SOX(MLP(hidden=[8]), AveragePrecisionSurrogate(), data_sizes=data.sizes, metrics=["ap", "auroc"])
    logger = TensorBoardLogger(tmp_path, name="binary")
    fit(module, data, logger, max_epochs=2, test=True)
    found = events(logger)
    for group in ("val", "test"):
        assert {f"{group}/figures/precision_recall", f"{group}/figures/roc"} <= set(found.Tags()["images"])
        assert f"{group}/pr_curve" in found.Tags()["tensors"]
    pictures = found.Images("val/figures/roc")
    assert [p.step for p in pictures] == [3, 6]  # one per validation, at the global step
    assert pictures[0].width == 500 and pictures[0].height == 380
    # the PR plugin's thresholds: rows TP, FP, TN, FN, precision, recall; each column adds up to the validation set
    pr = found.Tensors("val/pr_curve")[-1].tensor_proto
    table = np.array(pr.float_val).reshape([d.size for d in pr.tensor_shape.dim])
    assert table.shape[0] == 6 and 2 <= table.shape[1] <= 127
    counts = table[:4].sum(0)
    assert np.all(counts == counts[0]) and counts[0] == len(data.val_dataset)
    assert table[5, 0] == 1.0  # the lowest threshold predicts every sample positive: recall 1


def test_multi_label_validation_writes_one_pr_curve_per_task(tmp_path):
    seed_everything(0)
    data = SyntheticMultiLabelDataModule(num_samples=600, num_tasks=3, pos_fraction=0.2, batch_size=30,
                                         num_positives=4)
    module = ADAP(MLP(hidden=[8], out_features=3), AveragePrecisionSurrogate(project=True), data_sizes=data.sizes, metrics=["ap"])
    logger = TensorBoardLogger(tmp_path, name="tasks")
    fit(module, data, logger)
    found = events(logger)
    names = [f"val/pr_curve/{'_'.join(str(t).split())}" for t in data.task_names]
    assert set(names) <= set(found.Tags()["tensors"])
    assert {"val/figures/precision_recall", "val/figures/roc"} <= set(found.Tags()["images"])


def test_ranking_validation_writes_ndcg_against_k(tmp_path):
    seed_everything(0)
    data = SyntheticRankingDataModule(task="ltr", num_queries=24, num_features=5, list_size=(6, 14),
                                      queries_per_batch=8, val_queries=12, test_queries=12, seed=3)
    module = SONG(ListMLP(hidden=[8]), NDCGSurrogate(), data_sizes=data.sizes, metrics=["ndcg@3", "ndcg@10"])
    logger = TensorBoardLogger(tmp_path, name="ranking")
    fit(module, data, logger)
    found = events(logger)
    assert "val/figures/ndcg_at_k" in found.Tags()["images"]
    assert not any("roc" in tag or "precision_recall" in tag for tag in found.Tags()["images"])


def test_constraints_are_drawn_against_the_epoch_and_their_history_is_checkpointed(adult_files, tmp_path):
    seed_everything(0)
    data = FairnessDataModule(adult_files, "adult", batch_size=32, stratify_by_cell=True, paired=True)
    module = ALEXR2(MLP(hidden=[8]), ROCFairnessAUCObjective(rho=10.0), data_sizes=data.sizes, smoothing=2e-3, inner_lr=1e-2,
                    inner_steps=3, outer_normalization="fixed")
    constraints = ConstraintViolationLogger(stages=("val",))
    logger = TensorBoardLogger(tmp_path, name="constraints")
    fit(module, data, logger, max_epochs=2, callbacks=[constraints])
    found = events(logger)
    assert [p.step for p in found.Images("val/figures/constraints")] == [3, 6]
    history = constraints.history["val"]
    assert [epoch for epoch, _ in history] == [0, 1] and len(history[0][1]) == module.objective.num_constraints
    assert history[-1][1] == pytest.approx([constraints.last["val"][f"val/constraint_{i}"] for i in range(14)])
    restored = ConstraintViolationLogger()
    restored.load_state_dict(constraints.state_dict())
    assert restored.history == constraints.history


def test_other_loggers_and_the_switch_draw_nothing(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr("fccolit.metrics.figures.render", lambda figure: drawn.append(figure) or render(figure))
    seed_everything(0)
    data = binary_data()
    fit(SOX(MLP(hidden=[8]), AveragePrecisionSurrogate(), data_sizes=data.sizes), data, CSVLogger(tmp_path))
    assert drawn == []
    logger = TensorBoardLogger(tmp_path, name="off")
    module = SOX(MLP(hidden=[8]), AveragePrecisionSurrogate(), data_sizes=data.sizes, evaluation_figures=False)
    fit(module, data, logger)
    assert drawn == [] and events(logger).Tags()["images"] == []
    assert "val/ap" in events(logger).Tags()["scalars"]
    assert module.hparams.evaluation_figures is False


def test_a_figure_is_an_agg_image_and_is_released():
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1), dpi=50)
    figure.add_subplot().plot([0, 1], [0, 1])
    image = render(figure)
    assert image.shape == (50, 100, 3) and image.dtype == np.uint8 and figure.axes == []
    assert torch.tensor(image).float().std() > 0
