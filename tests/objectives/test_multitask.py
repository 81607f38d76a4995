"""The multi-task (multi-label) path end to end: metrics macro-averaged over tasks with unlabeled entries left out,
multi-task batches refused by objectives that do not take them, a short multi-label training run, multi-class
accuracy. (The mean-AP objective's multi-task tests are in test_ap.py.)"""

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from objective_helpers import multilabel_full_batch, multilabel_labels
from torch import nn

from fccolit.algorithms import SOX
from fccolit.metrics import build_metric
from fccolit.objectives import AveragePrecisionSurrogate, PNormPushLoss
from fccolit.samplers.multilabel import multilabel_sizes


def test_metrics_are_the_mean_over_tasks_of_the_labeled_entries():
    rng = np.random.default_rng(0)
    labels = multilabel_labels(n=60, tasks=4, positives=12).numpy()
    scores = rng.normal(size=labels.shape) + labels
    for name, reference in (("ap", average_precision_score), ("auroc", roc_auc_score)):
        metric = build_metric(name)
        for rows in np.array_split(np.arange(60), 3):
            metric.update(torch.from_numpy(scores[rows]), torch.from_numpy(labels[rows]))
        per_task = [reference(labels[labels[:, t] >= 0, t], scores[labels[:, t] >= 0, t]) for t in range(4)]
        assert float(metric.compute()) == pytest.approx(float(np.mean(per_task)), rel=1e-12)
        assert metric.per_task.tolist() == pytest.approx(per_task, rel=1e-12)


def test_a_task_without_both_classes_is_nan_and_left_out_of_the_mean():
    labels = torch.tensor([[1, 0], [0, 0], [1, -1], [0, 0]])
    scores = torch.tensor([[2.0, 0.1], [1.0, 0.3], [0.5, 0.2], [0.0, 0.4]])
    metric = build_metric("auroc")
    metric.update(scores, labels)
    assert float(metric.compute()) == pytest.approx(0.75)
    assert torch.isnan(metric.per_task[1])
    with pytest.raises(ValueError, match="1, 0 or -1"):
        metric.update(scores, labels * 2)


def test_multi_task_batches_need_a_multi_task_objective_and_one_output_per_task():
    labels = multilabel_labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64)
    batch = multilabel_full_batch(labels, x)
    sizes = multilabel_sizes(labels)
    push = SOX(nn.Linear(4, 3), PNormPushLoss(), data_sizes=sizes, state_dtype="float64").double()
    with pytest.raises(ValueError, match="does not take multi-task batches"):
        push(batch)
    single = SOX(nn.Linear(4, 1), AveragePrecisionSurrogate(), data_sizes=sizes, state_dtype="float64").double()
    with pytest.raises(ValueError, match="one output per task"):
        single(batch)


def test_training_on_multi_label_data_logs_the_mean_and_each_task(tmp_path):
    from lightning.pytorch import Trainer

    from fccolit.algorithms import ADAP
    from fccolit.datamodules import SyntheticMultiLabelDataModule
    from fccolit.models import MLP
    from fccolit.optim import AdaptiveMomentum

    dm = SyntheticMultiLabelDataModule(num_samples=600, num_tasks=3, batch_size=24, num_positives=4, seed=1)
    assert dm.tasks_per_batch == 3 and dm.sizes["num_outputs"] == 3
    module = ADAP(MLP(hidden=[8], out_features=3), AveragePrecisionSurrogate(project=True), data_sizes=dm.sizes,
                  ema_weight=0.05, optimizer=lambda p: AdaptiveMomentum(p, lr=1e-2), metrics=["ap", "auroc"])
    trainer = Trainer(max_epochs=1, limit_train_batches=5, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=dm)
    logged = trainer.callback_metrics
    per_task = [float(logged[f"val/ap/task{t}"]) for t in range(3)]
    assert float(logged["val/ap"]) == pytest.approx(np.mean(per_task), rel=1e-6)
    assert module.state.num_rows == dm.sizes["num_positives"] and module.state.visited().sum() == 5 * 12
    y = dm.val_dataset.fields["y"]
    reference = [average_precision_score(y[y[:, t] >= 0, t], module(dm.val_dataset.fields).detach()[y[:, t] >= 0, t])
                 for t in range(3)]
    assert per_task == pytest.approx(reference, rel=1e-5)


def test_multiclass_accuracy_overall_and_per_class():
    from fccolit.metrics import AccuracyScore, metric_kind

    assert metric_kind("val/accuracy") == "multiclass"
    metric = build_metric("accuracy")
    assert isinstance(metric, AccuracyScore)
    scores = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    labels = torch.tensor([0, 1, 1, 2, 2])
    metric.update(scores[:2], labels[:2])
    metric.update(scores[2:], labels[2:])
    assert float(metric.compute()) == pytest.approx(2 / 5)
    assert metric.per_task.tolist() == pytest.approx([1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match=r"class labels must be in \[0, 3\)"):
        metric.update(scores, torch.tensor([0, 1, 2, 3, 0]))
