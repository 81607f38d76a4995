"""Multi-task (multi-label) AP: metrics macro-averaged over tasks with unlabeled entries left out, the mean-AP
objective over (task, positive) rows with same-task inner sets, and its estimator equal to the autograd gradient
of the mean over tasks when the state is exact (float64)."""

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import nn

from fccolit.algorithms import SOX
from fccolit.data import TensorDictDataset
from fccolit.metrics import build_metric
from fccolit.objectives import AveragePrecisionSurrogate, PNormPushLoss
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes


def _labels(n=24, tasks=3, positives=5, seed=0):
    """[n, T] labels with exactly `positives` positives per task and a few unlabeled (−1) entries."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.zeros(n, tasks, dtype=torch.long)
    for t in range(tasks):
        order = torch.randperm(n, generator=g)
        labels[order[:positives], t] = 1
        labels[order[positives : positives + 3], t] = -1
    return labels


def _full_batch(labels, x):
    """Every labeled (task, sample) pair once, with the fields of MultiLabelPairDataset."""
    n, tasks = labels.shape
    pairs = [t * n + i for t in range(tasks) for i in range(n) if labels[i, t] >= 0]
    dataset = MultiLabelPairDataset(TensorDictDataset(x=x, y=labels, index=torch.arange(n)), labels)
    return dataset.__getitems__(pairs)


def test_metrics_are_the_mean_over_tasks_of_the_labeled_entries():
    rng = np.random.default_rng(0)
    labels = _labels(n=60, tasks=4, positives=12).numpy()
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


def _module(labels, x, objective=None):
    sizes = multilabel_sizes(labels)
    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], labels.shape[1])
    module = SOX(model, objective or AveragePrecisionSurrogate(), data_sizes=sizes, state_dtype="float64", ema_weight=1.0)
    return module.double()


def _grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


def test_exact_value_is_the_mean_over_tasks_of_each_tasks_smoothed_ap():
    labels = _labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    module = _module(labels, x)
    batch = _full_batch(labels, x)
    obj = module.objective
    s = torch.sigmoid(module.model(x)).detach()
    per_task = []
    for t in range(3):  # a direct double loop over each task's labeled samples
        lab = [i for i in range(24) if labels[i, t] >= 0]
        terms = []
        for i in (i for i in lab if labels[i, t] == 1):
            num = sum(float(obj.loss(s[j, t] - s[i, t])) for j in lab if labels[j, t] == 1)
            den = sum(float(obj.loss(s[j, t] - s[i, t])) for j in lab)
            terms.append(num / den)
        per_task.append(-np.mean(terms))
    assert float(obj.exact_value(module(batch), batch).detach()) == pytest.approx(np.mean(per_task), rel=1e-12)


@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_estimator_equals_autograd_gradient_of_the_mean_over_tasks(u_for_gradient):
    labels = _labels(tasks=3, positives=5)  # equal positives per task, as the sampler draws them
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    module = _module(labels, x)
    module.u_for_gradient = u_for_gradient
    batch = _full_batch(labels, x)
    assert module.state.num_rows == 15  # one row per (task, positive) pair
    true_grad = _grads(module, module.objective.exact_value(module(batch), batch))
    est1 = _grads(module, module.compositional_loss(module(batch), batch)[0])  # first visit: exact u
    est2 = _grads(module, module.compositional_loss(module(batch), batch)[0])  # state holds g(w) exactly
    assert torch.allclose(est1, true_grad, rtol=1e-10, atol=1e-13)
    assert torch.allclose(est2, true_grad, rtol=1e-10, atol=1e-13)
    assert true_grad.abs().max() > 1e-3


def test_an_anchors_inner_value_ignores_the_other_tasks_positions():
    labels = _labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    module = _module(labels, x)
    sampler = MultiLabelSampler(labels, tasks_per_batch=3, num_positives=2, num_negatives=2, seed=0)
    dataset = MultiLabelPairDataset(TensorDictDataset(x=x, y=labels, index=torch.arange(24)), labels)
    batch = dataset.__getitems__(next(iter(sampler)))
    scores = module(batch).detach().requires_grad_(True)
    inner = module.objective.inner(scores, batch)
    anchors = (batch["pos_index"] >= 0).nonzero().flatten()
    for row, anchor in enumerate(anchors.tolist()):
        (grad,) = torch.autograd.grad(inner.value[row].sum(), scores, retain_graph=True)
        other = batch["task"] != batch["task"][anchor]
        assert other.any() and grad[other].abs().max() == 0
        assert grad[~other].abs().max() > 0


def test_multi_task_batches_need_a_multi_task_objective_and_one_output_per_task():
    labels = _labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64)
    batch = _full_batch(labels, x)
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
