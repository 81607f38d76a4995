"""AveragePrecisionSurrogate (fccolit/objectives/ap.py): its estimators are the exact gradient on the whole data,
``exact_value`` is −(smoothed AP) by a double loop, the reweighted estimator is unbiased under class-stratified batches
(every batch enumerated) where the batch mean and the plain reweighting are not, Ω holds every estimate, the sum and
mean scales give the same updates, the options fail clearly; and on multi-task (multi-label) batches, the mean over
tasks with same-task inner sets, whose estimator is the autograd gradient when the state is exact."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from objective_helpers import (
    binary_data, exact_table, expectation, grads, make_sox, multilabel_full_batch, multilabel_labels, run_steps,
    sox_estimate, subset,
)

from fccolit.algorithms.sox import SOX
from fccolit.data import TensorDictDataset
from fccolit.models import LinearScorer
from fccolit.objectives.ap import AveragePrecisionSurrogate
from fccolit.samplers import DualSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes


@pytest.mark.parametrize(
    "objective",
    [
        AveragePrecisionSurrogate(inner_estimator="reweighted"),
        AveragePrecisionSurrogate(inner_estimator="reweighted", inner_scale="sum"),
        AveragePrecisionSurrogate(inner_estimator="reweighted", surrogate="sigmoid", scale=3.0, project=True),
        AveragePrecisionSurrogate(inner_scale="sum", project=True, margin=0.3),
    ],
    ids=["reweighted", "reweighted_sum", "reweighted_sigmoid_projected", "batch_mean_sum_projected"],
)
def test_ap_estimators_are_the_exact_gradient_on_the_whole_data(objective):
    full, sizes = binary_data()
    module = make_sox(objective, sizes, model=LinearScorer, ema_weight=1.0)
    true = grads(module, objective.exact_value(module(full), full))
    assert true.abs().max() > 1e-3
    for _ in range(2):
        assert torch.allclose(sox_estimate(module, full), true, rtol=1e-10, atol=1e-12)


def test_ap_exact_value_is_minus_smoothed_ap_for_both_estimators_and_scales():
    full, sizes = binary_data()
    reference = None
    for estimator, scale in itertools.product(("batch_mean", "reweighted"), ("mean", "sum")):
        objective = AveragePrecisionSurrogate(inner_estimator=estimator, inner_scale=scale)
        module = make_sox(objective, sizes, model=LinearScorer)
        if reference is None:  # −ÂP by a double loop over pairs (Wang et al., AISTATS 2022, eq. (2))
            s = torch.sigmoid(module(full)).detach().tolist()
            y = full["y"].tolist()
            ell = lambda d: max(0.0, 1.0 + d) ** 2  # noqa: E731
            total = 0.0
            for i in (i for i in range(len(s)) if y[i] == 1):
                num = sum(ell(s[j] - s[i]) for j in range(len(s)) if y[j] == 1)
                total += num / sum(ell(s[j] - s[i]) for j in range(len(s)))
            reference = -total / sum(y)
        assert float(objective.exact_value(module(full), full).detach()) == pytest.approx(reference, rel=1e-12)


def ap_batches(fields, p, q):
    pos = torch.nonzero(fields["y"] == 1).flatten().tolist()
    neg = torch.nonzero(fields["y"] == 0).flatten().tolist()
    return [list(a) + list(b) for a in itertools.combinations(pos, p) for b in itertools.combinations(neg, q)]


def note_formula_estimate(objective, scores, batch, sizes):
    """The plain class reweighting: (m/P) Σ_{B+} ℓ and (m/P) Σ_{B+} ℓ + ((n−m)/Q) Σ_{B−} ℓ (mean scale)."""
    s = torch.sigmoid(scores)
    y = batch["y"].double()
    anchors = (batch["pos_index"] >= 0).nonzero().flatten()
    ell = objective.loss(s.unsqueeze(0) - s[anchors].unsqueeze(1))
    n, m, p, q = sizes["num_samples"], sizes["num_positives"], y.sum(), (1 - y).sum()
    first = (m / p) * (ell * y).sum(1)
    return torch.stack([first, first + (n - m) / q * (ell * (1 - y)).sum(1)], -1) / n, anchors


def test_ap_reweighted_estimator_is_unbiased_under_class_stratified_batches():
    """Every batch of P = 2 of the m = 4 positives and Q = 3 of the 7 negatives (210 batches), the anchors
    the batch's positives: E[ĝ_i | i in the batch] = g_i and E[SOX estimator] = ∇F exactly for "reweighted";
    the batch mean and the plain (m/P) reweighting (which counts the anchor's self pair m/P times) are biased."""
    full, sizes = binary_data(n=11, d=3, m=4, seed=5)
    batches = ap_batches(full, 2, 3)
    obj = AveragePrecisionSurrogate(inner_estimator="reweighted", margin=0.5)
    module = make_sox(obj, sizes, model=LinearScorer, ema_weight=0.5)
    exact = exact_table(module, full)
    # inner values: the mean of ĝ_i over the batches that hold anchor i
    sums = {k: torch.zeros_like(exact) for k in ("reweighted", "batch_mean", "note")}
    counts = torch.zeros(exact.shape[0], 1, dtype=torch.float64)
    batch_mean = AveragePrecisionSurrogate(margin=0.5)
    with torch.no_grad():
        for idx in batches:
            b = subset(full, idx)
            scores = module(b)
            for name, o in (("reweighted", obj), ("batch_mean", batch_mean)):
                inner = o.inner(scores, b)
                sums[name].index_add_(0, inner.index, inner.value)
            value, anchors = note_formula_estimate(obj, scores, b, sizes)
            sums["note"].index_add_(0, b["pos_index"][anchors], value)
            counts.index_add_(0, b["pos_index"][anchors], torch.ones(len(anchors), 1, dtype=torch.float64))
    mean = {k: v / counts for k, v in sums.items()}
    assert torch.allclose(mean["reweighted"], exact, rtol=1e-12)
    assert (mean["note"] - exact).abs().max() > 1e-2 * exact.abs().max()
    assert (mean["batch_mean"] - exact).abs().max() > 1e-2 * exact.abs().max()
    # the gradient estimator
    true = grads(module, obj.exact_value(module(full), full))
    assert torch.allclose(expectation(module, full, batches, exact), true, rtol=1e-10, atol=1e-13)
    biased = make_sox(AveragePrecisionSurrogate(margin=0.5), sizes, model=LinearScorer, ema_weight=0.5)
    assert (expectation(biased, full, batches, exact) - true).norm() > 0.05 * true.norm()


@pytest.mark.parametrize("surrogate, margin, scale, c, big_m", [
    ("squared_hinge", 0.5, 1.0, 0.25, 2.25),  # C = γ², M = (1 + γ)²
    ("sigmoid", 1.0, 2.0, 0.5, 1 / (1 + math.exp(-2.0))),  # C = 1/2, M = sigmoid(scale)
])
def test_ap_omega_is_seed_002s_box_and_holds_every_estimate(surrogate, margin, scale, c, big_m):
    full, sizes = binary_data(n=40, d=4, m=6, seed=6)
    n, m = sizes["num_samples"], sizes["num_positives"]
    kw = dict(surrogate=surrogate, margin=margin, scale=scale, project=True)
    expected = {
        ("reweighted", "sum"): ((None, c), (big_m * m, big_m * n)),
        ("reweighted", "mean"): ((None, c / n), (big_m * m / n, big_m)),
        ("batch_mean", "sum"): ((None, c), (big_m * n, big_m * n)),
        ("batch_mean", "mean"): ((None, c / n), (big_m, big_m)),
    }
    sampler = DualSampler(full["y"], batch_size=8, num_positives=4, seed=0)  # positives oversampled: 1/2 ≫ 6/40
    exceeds_seed_002 = False
    for (estimator, scale_name), (lower, upper) in expected.items():
        obj = AveragePrecisionSurrogate(inner_estimator=estimator, inner_scale=scale_name, **kw)
        got_lower, got_upper = obj.state_bounds(sizes)
        assert got_lower[0] is None and got_lower[1] == pytest.approx(lower[1], rel=1e-12)
        assert got_upper == pytest.approx(upper, rel=1e-12)
        obj.bind_sizes(sizes)
        g = torch.Generator().manual_seed(1)
        for idx in itertools.islice(iter(sampler), 30):
            b = subset(full, idx)
            value = obj.inner(3.0 * torch.randn(len(idx), generator=g, dtype=torch.float64), b).value
            assert (value[:, 1] >= lower[1] * (1 - 1e-12)).all() and (value <= torch.tensor(upper) * (1 + 1e-12)).all()
            if estimator == "batch_mean" and scale_name == "mean":
                exceeds_seed_002 |= bool((value[:, 0] > big_m * m / n).any())
    assert exceeds_seed_002  # why the batch mean cannot use Wang et al.'s u_1 ≤ M·m/n
    # ... unless asked to: omega_bounds="paper" is the printed Ω for either estimator (estimates above it are capped)
    for scale_name, (lower, upper) in {"sum": ((None, c), (big_m * m, big_m * n)),
                                       "mean": ((None, c / n), (big_m * m / n, big_m))}.items():
        obj = AveragePrecisionSurrogate(inner_scale=scale_name, omega_bounds="paper", **kw)
        got_lower, got_upper = obj.state_bounds(sizes)
        assert got_lower[1] == pytest.approx(lower[1], rel=1e-12) and got_upper == pytest.approx(upper, rel=1e-12)
    with pytest.raises(ValueError, match="omega_bounds"):
        AveragePrecisionSurrogate(omega_bounds="printed")


def test_ap_options_fail_clearly():
    with pytest.raises(ValueError, match="score_range"):
        AveragePrecisionSurrogate(score_transform="identity", project=True)
    assert AveragePrecisionSurrogate(score_transform="identity", project=True, score_range=4.0).score_range == 4.0
    with pytest.raises(ValueError, match="inner_estimator"):
        AveragePrecisionSurrogate(inner_estimator="unbiased")
    full, _ = binary_data()
    with pytest.raises(ValueError, match="needs the training data's 'num_samples'"):
        AveragePrecisionSurrogate(inner_estimator="reweighted").inner(full["x"][:, 0], full)


@pytest.mark.parametrize("estimator", ["batch_mean", "reweighted"])
def test_ap_sum_and_mean_scales_give_the_same_updates(estimator):
    full, sizes = binary_data(n=40, d=4, m=8, seed=7)
    sampler = DualSampler(full["y"], batch_size=10, num_positives=4, seed=0)
    batches = [subset(full, idx) for idx in itertools.islice(itertools.cycle(sampler), 12)]
    mods = {
        scale: run_steps(AveragePrecisionSurrogate(inner_estimator=estimator, inner_scale=scale), sizes, iter(batches),
                         LinearScorer, 12)
        for scale in ("mean", "sum")
    }
    for a, b in zip(mods["mean"].parameters(), mods["sum"].parameters()):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-14)
    visited = mods["mean"].state.visited()
    assert visited.sum() > 4
    assert torch.allclose(mods["sum"].state.value[visited], 40 * mods["mean"].state.value[visited], rtol=1e-12)


# ---------------------------------------------------------------------------------------------- multi-task AP
def _multitask_module(labels, x, objective=None):
    sizes = multilabel_sizes(labels)
    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], labels.shape[1])
    module = SOX(model, objective or AveragePrecisionSurrogate(), data_sizes=sizes, state_dtype="float64", ema_weight=1.0)
    return module.double()


def _multitask_grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


def test_exact_value_is_the_mean_over_tasks_of_each_tasks_smoothed_ap():
    labels = multilabel_labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    module = _multitask_module(labels, x)
    batch = multilabel_full_batch(labels, x)
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
    labels = multilabel_labels(tasks=3, positives=5)  # equal positives per task, as the sampler draws them
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    module = _multitask_module(labels, x)
    module.u_for_gradient = u_for_gradient
    batch = multilabel_full_batch(labels, x)
    assert module.state.num_rows == 15  # one row per (task, positive) pair
    true_grad = _multitask_grads(module, module.objective.exact_value(module(batch), batch))
    est1 = _multitask_grads(module, module.compositional_loss(module(batch), batch)[0])  # first visit: exact u
    est2 = _multitask_grads(module, module.compositional_loss(module(batch), batch)[0])  # state holds g(w) exactly
    assert torch.allclose(est1, true_grad, rtol=1e-10, atol=1e-13)
    assert torch.allclose(est2, true_grad, rtol=1e-10, atol=1e-13)
    assert true_grad.abs().max() > 1e-3


def test_an_anchors_inner_value_ignores_the_other_tasks_positions():
    labels = multilabel_labels(tasks=3, positives=5)
    x = torch.randn(24, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    module = _multitask_module(labels, x)
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
