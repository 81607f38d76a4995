"""The FCCO objectives of the SOX paper: p-norm push, NCA, listwise cross-entropy, and AP's inner estimators.

For every objective (float64):

* exactness: with the whole data in one batch and γ = 1 (so the state holds g_i(w) exactly), the SOX
  estimator equals the autograd gradient of ``exact_value``;
* ``exact_value`` equals an independent double loop over the paper's formula;
* unbiasedness: with u fixed to the exact inner values, the expectation of the SOX
  estimator over every possible batch (enumerated: an exact expectation) is ∇F, while the plug-in BSGD
  estimator ∇ĝ ∇f(ĝ) is biased; and a Monte-Carlo version of the same check for p-norm push (5 standard errors);
* sum/mean scale invariance of AP and NCA: the two scales give the same updates;
* data path: the multi-class DataModule and the uniform sampler (resumable, rank-aware), and two processes
  (gloo) equal one process for the objectives that need the global batch.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from builders import free_port
from torch import nn

from fccolit.algorithms.sox import SOX
from fccolit.data import binary_fields, binary_sizes
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule
from fccolit.models import MLP, LinearScorer
from fccolit.objectives.ap import AveragePrecisionSurrogate
from fccolit.objectives.listwise import ListwiseCELoss
from fccolit.objectives.nca import NCALoss
from fccolit.objectives.pnorm_push import PNormPushLoss
from fccolit.optim import Momentum
from fccolit.samplers import DualSampler
from fccolit.samplers.uniform import UniformBatchSampler


# ---------------------------------------------------------------------------------------------- helpers
def binary_data(n=30, d=4, m=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    fields = binary_fields(x, y)
    return fields, binary_sizes(fields)


def multiclass_data(n=20, d=5, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + y.unsqueeze(1).double() * 0.5
    return {"x": x, "y": y, "index": torch.arange(n)}, {"num_samples": n, "num_features": d, "num_classes": classes}


def ranking_data(num_items=(7, 5, 6, 4), seed=0, features=3):
    """Full lists (every item of every query), padded to L = max N_q; relevance in {0, …, 3}."""
    g = torch.Generator().manual_seed(seed)
    q, big_l = len(num_items), max(num_items)
    relevance = torch.zeros(q, big_l, dtype=torch.float64)
    mask = torch.zeros(q, big_l, dtype=torch.bool)
    for r, n_q in enumerate(num_items):
        mask[r, :n_q] = True
        rel = torch.randint(0, 4, (n_q,), generator=g).double()
        rel[0], rel[1] = 0.0, 2.0  # at least one non-relevant and one relevant item
        relevance[r, :n_q] = rel[torch.randperm(n_q, generator=g)]
    relevant = relevance > 0
    pair_index = torch.full((q, big_l), -1, dtype=torch.long)
    pair_index[relevant] = torch.arange(int(relevant.sum()))
    batch = {
        "x": torch.randn(q, big_l, features, generator=g, dtype=torch.float64),
        "relevance": relevance,
        "mask": mask,
        "pair_index": pair_index,
        "num_items": torch.tensor(num_items, dtype=torch.float64),
        "num_relevant": relevant.sum(1),
    }
    return batch, {"num_pairs": int(relevant.sum()), "num_queries": q, "num_features": features}


def make_sox(objective, sizes, model=None, **kw):
    """SOX in float64; ``model`` is a factory (default: a linear scorer without bias), called after seeding."""
    torch.manual_seed(0)
    model = model() if model is not None else LinearScorer(bias=False)
    return SOX(model, objective, data_sizes=sizes, state_dtype="float64", **kw).double()


def grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


def sox_estimate(module, batch):
    return grads(module, module.compositional_loss(module(batch), batch)[0])


def exact_table(module, full_batch):
    """``[n, d']`` the exact inner values g_i(w) of every outer index (the objective on the whole data)."""
    with torch.no_grad():
        inner = module.objective.inner(module(full_batch), full_batch)
    table = torch.full_like(module.state.value, math.nan)
    table[inner.index] = inner.value.to(table.dtype)
    assert not table.isnan().any()
    return table


def subset(fields, idx):
    idx = torch.as_tensor(idx, dtype=torch.long)
    return {k: v.index_select(0, idx) for k, v in fields.items()}


def expectation(module, full, batches, exact):
    """Exact mean over ``batches`` of the estimator; with ``exact``, u is reset to the exact g before each
    batch (the SOX estimator with exact state, "previous" ordering); otherwise the module's own rule runs."""
    total = None
    for idx in batches:
        if exact is not None:
            module.state.value.copy_(exact)
        est = sox_estimate(module, subset(full, idx))
        total = est if total is None else total + est
    return total / len(batches)


# ---------------------------------------------------------------------------------------------- p-norm push
@pytest.mark.parametrize(
    "objective",
    [PNormPushLoss(), PNormPushLoss(p=2.5, scale=0.7), PNormPushLoss(surrogate="squared_hinge"), PNormPushLoss(surrogate="logistic")],
    ids=["exp_p4", "exp_p2.5_scaled", "squared_hinge", "logistic"],
)
@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_pnorm_push_estimator_is_the_exact_gradient(objective, u_for_gradient):
    full, sizes = binary_data()
    module = make_sox(objective, sizes, ema_weight=1.0, u_for_gradient=u_for_gradient)
    true = grads(module, objective.exact_value(module(full), full))
    first = sox_estimate(module, full)  # first visit: u := the (full, hence exact) inner value
    second = sox_estimate(module, full)  # the state now holds g(w) from the previous step
    assert true.abs().max() > 1e-2
    assert torch.allclose(first, true, rtol=1e-11, atol=1e-13)
    assert torch.allclose(second, true, rtol=1e-11, atol=1e-13)
    assert module.state.value.shape == (sizes["num_negatives"], 1)


def test_pnorm_push_exact_value_is_the_rudin_formula():
    """Double loop over (negative, positive) pairs: F = mean_neg (mean_pos exp(s_neg − s_pos))^p."""
    full, sizes = binary_data()
    for objective in (PNormPushLoss(), PNormPushLoss(p=3.0, scale=0.5)):
        module = make_sox(objective, sizes)
        s = module(full).detach().tolist()
        y = full["y"].tolist()
        neg = [s[i] for i in range(len(s)) if y[i] == 0]
        pos = [s[j] for j in range(len(s)) if y[j] == 1]
        total = 0.0
        for si in neg:
            g = sum(math.exp(objective.scale * (si - sj)) for sj in pos) / len(pos)
            total += g**objective.p
        value = float(objective.exact_value(module(full), full).detach())
        assert value == pytest.approx(total / len(neg), rel=1e-12)


def test_pnorm_push_factorized_exp_equals_the_pairwise_sum_and_survives_large_scores():
    g = torch.Generator().manual_seed(1)
    s_neg = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    s_pos = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    obj = PNormPushLoss()
    fast = obj._inner_values(s_neg, s_pos)
    slow = torch.exp(s_neg.unsqueeze(1) - s_pos.unsqueeze(0)).mean(1)
    assert torch.allclose(fast, slow, rtol=1e-14)
    gf = torch.autograd.grad(fast.pow(4).sum(), [s_neg, s_pos])
    gs = torch.autograd.grad(slow.pow(4).sum(), [s_neg, s_pos])
    assert all(torch.allclose(a, b, rtol=1e-12) for a, b in zip(gf, gs))
    # scores around 800: exp(800) overflows float64, the margins (and g) do not
    big = obj._inner_values(s_neg.detach() + 800.0, s_pos.detach() + 800.0)
    assert torch.allclose(big, slow.detach(), rtol=1e-12)


def test_pnorm_push_reads_negatives_as_outer_and_positives_as_inner():
    full, sizes = binary_data()
    inner = PNormPushLoss().inner(full["x"][:, 0], full)
    assert torch.equal(inner.index, torch.arange(sizes["num_negatives"]))  # neg_index of every negative
    no_pos = subset(full, torch.nonzero(full["y"] == 0).flatten())
    with pytest.raises(ValueError, match="no positive example"):
        PNormPushLoss().inner(no_pos["x"][:, 0], no_pos)
    with pytest.raises(ValueError, match="p > 1"):
        PNormPushLoss(p=1.0)


def pnorm_batches(fields, b1, b2):
    neg = torch.nonzero(fields["y"] == 0).flatten().tolist()
    pos = torch.nonzero(fields["y"] == 1).flatten().tolist()
    return [list(a) + list(b) for a in itertools.combinations(neg, b1) for b in itertools.combinations(pos, b2)]


def test_pnorm_push_sox_estimator_is_unbiased_and_bsgd_is_not_exact_expectation():
    """Every batch of B1 = 2 negatives and B2 = 2 positives (150 batches): the exact expectation."""
    full, sizes = binary_data(n=11, d=3, m=6, seed=3)
    module = make_sox(PNormPushLoss(), sizes, ema_weight=0.5)
    true = grads(module, module.objective.exact_value(module(full), full))
    batches = pnorm_batches(full, 2, 2)
    sox = expectation(module, full, batches, exact_table(module, full))
    assert torch.allclose(sox, true, rtol=1e-10, atol=1e-12)
    bsgd_module = make_sox(PNormPushLoss(), sizes, ema_weight=1.0, u_for_gradient="fresh")
    bsgd = expectation(bsgd_module, full, batches, None)
    assert (bsgd - true).norm() > 0.05 * true.norm()  # Jensen: E[ĝ^3 ∇ĝ] ≠ g^3 ∇g


def test_pnorm_push_unbiasedness_monte_carlo():
    """Unbiasedness by Monte Carlo: random batches (B1 = 4 negatives, B2 = 1 positive), u fixed to the exact g:
    the SOX estimator's mean is within 5 standard errors of ∇F on every coordinate; BSGD's is not (B2 = 1: the
    plug-in f(ĝ) is most biased with the smallest inner batch; the exact size of the bias is checked above)."""
    full, sizes = binary_data(n=40, d=3, m=12, seed=4)
    sox_module = make_sox(PNormPushLoss(), sizes, ema_weight=0.5)
    bsgd_module = make_sox(PNormPushLoss(), sizes, ema_weight=1.0, u_for_gradient="fresh")
    true = grads(sox_module, sox_module.objective.exact_value(sox_module(full), full))
    exact = exact_table(sox_module, full)
    neg, pos = torch.nonzero(full["y"] == 0).flatten(), torch.nonzero(full["y"] == 1).flatten()
    g = torch.Generator().manual_seed(0)
    draws = {"sox": [], "bsgd": []}
    for _ in range(2000):
        idx = torch.cat([neg[torch.randperm(neg.numel(), generator=g)[:4]], pos[torch.randperm(pos.numel(), generator=g)[:1]]])
        batch = subset(full, idx)
        sox_module.state.value.copy_(exact)
        draws["sox"].append(sox_estimate(sox_module, batch))
        draws["bsgd"].append(sox_estimate(bsgd_module, batch))
    z = {}
    for name, d in draws.items():
        d = torch.stack(d)
        z[name] = ((d.mean(0) - true).abs() / (d.std(0) / math.sqrt(d.shape[0]))).max()
    assert z["sox"] < 5.0
    assert z["bsgd"] > 6.0


# ---------------------------------------------------------------------------------------------- AP
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


# ---------------------------------------------------------------------------------------------- scale invariance
def run_steps(objective, sizes, batches, model, steps):
    module = make_sox(objective, sizes, model=model, ema_weight=0.5)
    opt = Momentum(module.model.parameters(), lr=0.2, momentum_weight=0.3)
    for batch in itertools.islice(batches, steps):
        loss, _ = module.compositional_loss(module(batch), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return module


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


def test_nca_sum_and_mean_scales_give_the_same_updates():
    full, sizes = multiclass_data(n=24, d=5, classes=3)
    sampler = UniformBatchSampler(24, 6, seed=0)
    batches = [subset(full, idx) for idx in itertools.islice(itertools.cycle(sampler), 10)]
    mods = {
        scale: run_steps(NCALoss(inner_scale=scale), sizes, iter(batches), lambda: nn.Linear(5, 2, bias=False), 10)
        for scale in ("mean", "sum")
    }
    moved = (mods["mean"].model.weight - make_sox(NCALoss(), sizes, model=lambda: nn.Linear(5, 2, bias=False)).model.weight).abs()
    assert moved.max() > 1e-3
    assert torch.allclose(mods["mean"].model.weight, mods["sum"].model.weight, rtol=1e-11, atol=1e-14)
    visited = mods["mean"].state.visited()
    assert torch.allclose(mods["sum"].state.value[visited], 23 * mods["mean"].state.value[visited], rtol=1e-12)


# ---------------------------------------------------------------------------------------------- NCA
@pytest.mark.parametrize("inner_scale", ["mean", "sum"])
@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_nca_estimator_is_the_exact_gradient(inner_scale, u_for_gradient):
    full, sizes = multiclass_data()
    module = make_sox(NCALoss(inner_scale), sizes, model=lambda: nn.Linear(5, 3, bias=False), ema_weight=1.0,
                      u_for_gradient=u_for_gradient)
    true = grads(module, module.objective.exact_value(module(full), full))
    assert true.abs().max() > 1e-3
    for _ in range(2):
        assert torch.allclose(sox_estimate(module, full), true, rtol=1e-10, atol=1e-13)
    assert module.state.value.shape == (20, 2)


def test_nca_exact_value_is_the_leave_one_out_formula_with_the_anchor_excluded():
    full, sizes = multiclass_data()
    module = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(5, 2, bias=False))
    z = module(full).detach().tolist()
    y = full["y"].tolist()
    total = 0.0
    for i in range(len(z)):
        k = [math.exp(-sum((a - b) ** 2 for a, b in zip(z[i], z[j]))) if j != i else 0.0 for j in range(len(z))]
        total += sum(kj for j, kj in enumerate(k) if y[j] == y[i]) / sum(k)
    value = float(module.objective.exact_value(module(full), full).detach())
    assert value == pytest.approx(-total / len(z), rel=1e-12)
    assert -total / len(z) > -1.0  # with the anchor in C_i (as printed) the probabilities would not sum to 1


def test_nca_sox_estimator_is_unbiased_over_uniform_batches_and_bsgd_is_not():
    """Every batch of 3 of the 8 points (56 batches): the exact expectation."""
    full, sizes = multiclass_data(n=8, d=3, classes=2, seed=2)
    module = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(3, 2, bias=False), ema_weight=0.3)
    true = grads(module, module.objective.exact_value(module(full), full))
    batches = [list(c) for c in itertools.combinations(range(8), 3)]
    assert torch.allclose(expectation(module, full, batches, exact_table(module, full)), true, rtol=1e-10, atol=1e-13)
    bsgd = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(3, 2, bias=False), ema_weight=1.0, u_for_gradient="fresh")
    assert (expectation(bsgd, full, batches, None) - true).norm() > 0.05 * true.norm()


def test_nca_errors_name_the_cause():
    full, sizes = multiclass_data()
    with pytest.raises(FloatingPointError, match="underflowed"):
        NCALoss().inner(1e3 * full["x"], full)  # distances ~1e3: every exp(−d²) is 0
    with pytest.raises(ValueError, match="num_samples"):
        NCALoss("sum").inner(full["x"], full)
    with pytest.raises(ValueError, match="at least 2"):
        NCALoss().inner(full["x"][:1], subset(full, [0]))
    one_dim = NCALoss().inner(full["x"][:, 0], full)  # a [B] output is a 1-d embedding
    assert one_dim.value.shape == (20, 2)


# ---------------------------------------------------------------------------------------------- listwise CE
@pytest.mark.parametrize("relevance_weight", ["linear", "uniform", "none"])
@pytest.mark.parametrize("inner_estimator", ["list_mean", "stratified"])
def test_listwise_ce_estimator_is_the_exact_gradient_on_full_lists(relevance_weight, inner_estimator):
    batch, sizes = ranking_data()
    obj = ListwiseCELoss(relevance_weight, inner_estimator)
    module = make_sox(obj, sizes, model=None, ema_weight=1.0)
    true = grads(module, obj.exact_value(module(batch), batch))
    assert true.abs().max() > 1e-3
    for _ in range(2):
        assert torch.allclose(sox_estimate(module, batch), true, rtol=1e-10, atol=1e-13)
    assert module.state.value.shape == (sizes["num_pairs"], 1)


@pytest.mark.parametrize("relevance_weight", ["linear", "uniform", "none"])
def test_listwise_ce_is_listnet_top_one_cross_entropy(relevance_weight):
    """|D|·F = Σ_q −Σ_{i relevant} P_q(y_i) log softmax_i(h over S_q), by a double loop."""
    batch, sizes = ranking_data()
    obj = ListwiseCELoss(relevance_weight)
    module = make_sox(obj, sizes, model=None)
    s = module(batch).detach()
    total = 0.0
    for q in range(s.shape[0]):
        n_q = int(batch["num_items"][q])
        scores, rel = s[q, :n_q].tolist(), batch["relevance"][q, :n_q].tolist()
        log_z = math.log(sum(math.exp(v) for v in scores))
        for i in range(n_q):
            if rel[i] > 0:
                p = {"linear": rel[i] / sum(rel), "uniform": 1 / sum(r > 0 for r in rel), "none": 1.0}[relevance_weight]
                total += -p * (scores[i] - log_z)
    assert float(obj.exact_value(module(batch), batch).detach()) * sizes["num_pairs"] == pytest.approx(total, rel=1e-12)


def test_listwise_ce_linear_weight_is_uniform_for_binary_relevance():
    batch, _ = ranking_data()
    batch["relevance"] = (batch["relevance"] > 0).double()
    scores = batch["x"].sum(-1)
    linear, uniform = ListwiseCELoss("linear").inner(scores, batch), ListwiseCELoss("uniform").inner(scores, batch)
    assert torch.allclose(linear.context["weight"], uniform.context["weight"], rtol=1e-15)
    assert not torch.allclose(linear.context["weight"], torch.ones_like(linear.context["weight"]))


def test_listwise_ce_ignores_padding_whatever_its_scores():
    batch, sizes = ranking_data()
    obj = ListwiseCELoss()
    scores = batch["x"].sum(-1).clone().requires_grad_(True)
    garbage = torch.where(batch["mask"], scores, torch.full_like(scores, 1e4))  # exp(1e4) is inf in float64
    clean = obj.inner(scores, batch)
    dirty = obj.inner(garbage, batch)
    assert torch.isfinite(dirty.value).all() and torch.equal(dirty.value, clean.value)
    (grad,) = torch.autograd.grad(obj.outer(dirty.value, dirty.context).sum(), scores)
    assert torch.isfinite(grad).all() and (grad[~batch["mask"]] == 0).all()


def listwise_lists(num_items, n_rel, p, m, seed=0, features=2):
    """Queries with N_q items, the first n_rel relevant; every list of p relevant and m other items."""
    g = torch.Generator().manual_seed(seed)
    feats = [torch.randn(n, features, generator=g, dtype=torch.float64) for n in num_items]
    rels = [torch.cat([torch.randint(1, 4, (n_rel,), generator=g).double(), torch.zeros(n - n_rel, dtype=torch.float64)])
            for n in num_items]
    offsets = [0] + list(itertools.accumulate([n_rel] * len(num_items)))
    full_l = max(num_items)

    def list_batch(q, items):
        pad = full_l - len(items)
        idx = torch.tensor(items)
        rel = torch.cat([rels[q][idx], torch.zeros(pad, dtype=torch.float64)])
        pair = torch.tensor([offsets[q] + i if i < n_rel else -1 for i in items] + [-1] * pad)
        return {
            "x": torch.cat([feats[q][idx], torch.zeros(pad, features, dtype=torch.float64)]).unsqueeze(0),
            "relevance": rel.unsqueeze(0),
            "mask": torch.tensor([True] * len(items) + [False] * pad).unsqueeze(0),
            "pair_index": pair.unsqueeze(0),
            "num_items": torch.tensor([float(num_items[q])], dtype=torch.float64),
            "num_relevant": torch.tensor([n_rel]),
            "relevance_sum": rels[q].sum().reshape(1),
        }

    full = [list_batch(q, list(range(n))) for q, n in enumerate(num_items)]
    full = {k: torch.cat([b[k] for b in full]) for k in full[0]}
    sampled = [
        list_batch(q, list(a) + list(b))
        for q, n in enumerate(num_items)
        for a in itertools.combinations(range(n_rel), p)
        for b in itertools.combinations(range(n_rel, n), m)
    ]
    weights = [1.0 / (len(num_items) * math.comb(n_rel, p) * math.comb(n - n_rel, m))
               for n in num_items for _ in range(math.comb(n_rel, p) * math.comb(n - n_rel, m))]
    return full, sampled, weights, {"num_pairs": n_rel * len(num_items), "num_features": features}


def test_listwise_ce_stratified_estimator_is_unbiased_and_the_list_mean_is_not():
    """One query per batch, uniformly; its list holds 2 of its 3 relevant items and 2 of its other items
    (every such list enumerated). The stratified SOX estimator's expectation is ∇F; the list mean's is not."""
    full, sampled, weights, sizes = listwise_lists((7, 6, 8), n_rel=3, p=2, m=2, seed=1)
    out = {}
    for estimator in ("stratified", "list_mean"):
        obj = ListwiseCELoss("linear", estimator)
        module = make_sox(obj, sizes, model=None, ema_weight=0.5)
        true = grads(module, obj.exact_value(module(full), full))
        exact = exact_table(module, full)
        total = torch.zeros_like(true)
        for w, b in zip(weights, sampled):
            module.state.value.copy_(exact)
            total += w * sox_estimate(module, b)
        out[estimator] = (total, true)
    total, true = out["stratified"]
    assert torch.allclose(total, true, rtol=1e-10, atol=1e-13)
    total, true = out["list_mean"]
    assert (total - true).norm() > 0.05 * true.norm()


def test_listwise_ce_weight_normalizer_needs_the_whole_relevant_set():
    full, sampled, _, sizes = listwise_lists((7, 6), n_rel=3, p=2, m=2)
    partial = dict(sampled[0])
    del partial["relevance_sum"]
    scores = partial["x"].sum(-1)
    with pytest.raises(ValueError, match="relevance_sum"):
        ListwiseCELoss("linear").inner(scores, partial)
    assert ListwiseCELoss("uniform").inner(scores, partial).context["weight"].tolist() == pytest.approx([1 / 3, 1 / 3])
    with pytest.raises(ValueError, match=r"scores \[B, L\]"):
        ListwiseCELoss().inner(scores.reshape(-1), partial)
    with pytest.raises(KeyError, match="num_relevant"):
        ListwiseCELoss(inner_estimator="stratified").inner(scores, {k: v for k, v in partial.items() if k != "num_relevant"})


# ---------------------------------------------------------------------------------------------- data path
def test_uniform_batch_sampler_epochs_ranks_and_resume():
    sampler = UniformBatchSampler(23, 5, seed=3)
    assert len(sampler) == 4
    epoch0 = list(sampler)
    flat = [i for b in epoch0 for i in b]
    assert all(len(b) == 5 for b in epoch0) and len(set(flat)) == 20 and set(flat) <= set(range(23))
    assert list(sampler) == epoch0  # a pure function of (seed, epoch)
    sampler.set_epoch(1)
    assert list(sampler) != epoch0
    # ranks: disjoint slices that together are the global batch
    s10 = UniformBatchSampler(24, 6, seed=1)
    ranks = [list(UniformBatchSampler(24, 6, seed=1, rank=r, world_size=2)) for r in range(2)]
    for glob, a, b in zip(list(s10), *ranks):
        assert sorted(a + b) == sorted(glob) and not set(a) & set(b)
    with pytest.raises(ValueError, match="divide evenly"):
        list(UniformBatchSampler(24, 5, rank=0, world_size=2))
    # resume mid-epoch
    s = UniformBatchSampler(30, 4, seed=2)
    s.set_epoch(2)
    full = list(s)
    state = s.state_dict(batches_consumed=3)
    resumed = UniformBatchSampler(30, 4, seed=2)
    resumed.load_state_dict(state)
    assert list(resumed) == full[3:]
    with pytest.raises(ValueError, match="exceeds"):
        UniformBatchSampler(3, 4)
    with pytest.raises(ValueError, match="num_batches"):
        UniformBatchSampler(30, 4, num_batches=8)


def test_multiclass_datamodule_fields_sizes_and_loader():
    dm = SyntheticMulticlassDataModule(num_samples=500, num_features=6, num_classes=4, batch_size=32, seed=1)
    assert dm.sizes == {"num_samples": 300, "num_features": 6, "num_classes": 4}
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == 300 // 32
    b = batches[0]
    assert b["x"].shape == (32, 6) and b["x"].dtype == torch.float32 and b["y"].dtype == torch.long
    seen = torch.cat([x["index"] for x in batches])
    assert seen.unique().numel() == seen.numel()  # one pass without replacement
    assert torch.equal(dm.train_dataset.fields["x"][b["index"]], b["x"])
    assert set(dm.train_dataset.fields["y"].tolist()) == {0, 1, 2, 3}
    again = SyntheticMulticlassDataModule(num_samples=500, num_features=6, num_classes=4, batch_size=32, seed=1)
    assert torch.equal(again._splits["val"]["x"], dm._splits["val"]["x"])
    with pytest.raises(ValueError, match="num_informative"):
        SyntheticMulticlassDataModule(num_features=2, num_informative=3)


def test_nca_learns_a_metric_with_sox_on_the_multiclass_datamodule():
    """A short Trainer run (SOX, linear map into 2-d): the exact NCA objective on the training split drops."""
    from lightning.pytorch import Trainer

    dm = SyntheticMulticlassDataModule(num_samples=400, num_features=8, num_classes=3, num_informative=2,
                                       class_sep=2.5, batch_size=40, seed=0)
    torch.manual_seed(0)
    module = SOX(MLP(hidden=[], out_features=2), NCALoss(), data_sizes=dm.sizes, ema_weight=0.5,
                 optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=0.5))
    dm.setup("fit")
    train = dm.train_dataset.fields

    def objective():
        with torch.no_grad():
            return float(module.objective.exact_value(module.model(train["x"]), train))

    before = objective()
    trainer = Trainer(accelerator="cpu", max_epochs=6, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      limit_val_batches=0, log_every_n_steps=1)  # a short run: let the logger write every step
    trainer.fit(module, datamodule=dm)
    after = objective()
    assert after < before - 0.05, (before, after)
    assert "train/objective" in trainer.logged_metrics


DDP_SCRIPT = textwrap.dedent(
    r'''
    import os, sys, torch, torch.distributed as dist
    sys.path.insert(0, sys.argv[3])
    from fccolit.algorithms.sox import SOX
    from fccolit.models import LinearScorer
    from fccolit.objectives.nca import NCALoss
    from fccolit.objectives.pnorm_push import PNormPushLoss
    from fccolit.optim import Momentum
    from fccolit.data import binary_fields, binary_sizes
    from fccolit.samplers import DualSampler
    from fccolit.samplers.uniform import UniformBatchSampler

    world, out = int(sys.argv[1]), sys.argv[2]
    rank = int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=g, dtype=torch.float64)
    y = (torch.arange(48) % 3 == 0).long()
    fields = binary_fields(x, y)
    results = {}
    for name in ("pnorm", "nca"):
        torch.manual_seed(0)
        if name == "pnorm":
            module = SOX(LinearScorer(bias=False), PNormPushLoss(scale=0.5), data_sizes=binary_sizes(fields),
                         state_dtype="float64", ema_weight=0.4).double()
            sampler = DualSampler(y, 12, 4, seed=0, rank=rank, world_size=world)
        else:
            data = {"x": x, "y": torch.arange(48) % 4, "index": torch.arange(48)}
            module = SOX(torch.nn.Linear(4, 2, bias=False), NCALoss(), data_sizes={"num_samples": 48},
                         state_dtype="float64", ema_weight=0.4).double()
            sampler = UniformBatchSampler(48, 8, seed=0, rank=rank, world_size=world)
        opt = Momentum(module.parameters(), lr=0.1, momentum_weight=0.5)
        src = fields if name == "pnorm" else data
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for idx in sampler:
                batch = {k: v[torch.tensor(idx)] for k, v in src.items()}
                loss, _ = module.compositional_loss(module(batch), batch)
                opt.zero_grad()
                loss.backward()
                for p in module.parameters():  # what DDP does: average the gradients of the ranks
                    if world > 1:
                        dist.all_reduce(p.grad)
                        p.grad /= world
                opt.step()
        results[name] = {"weight": [p.detach().clone() for p in module.parameters()],
                         "state": module.state.value.clone()}
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    '''
)


@pytest.mark.slow
@pytest.mark.ddp
def test_two_processes_equal_one_for_the_global_batch_objectives(tmp_path):
    """p-norm push and NCA gather the scores (NCA: [B, k] embeddings) with gradient: 2 gloo processes fed the
    rank slices of the same global batches end with the weights and state of 1 process (float64)."""
    script = tmp_path / "run.py"
    script.write_text(DDP_SCRIPT)
    repo = str(Path(__file__).resolve().parents[2])
    for world in (1, 2):
        out = tmp_path / f"w{world}"
        out.mkdir()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PYTHONWARNINGS": "ignore"}
        procs = [
            subprocess.Popen([sys.executable, str(script), str(world), str(out), repo],
                             env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(world)
        ]
        for p in procs:
            _, err = p.communicate(timeout=170)
            assert p.returncode == 0, err[-3000:]
    one = torch.load(tmp_path / "w1" / "rank0.pt")
    two = [torch.load(tmp_path / "w2" / f"rank{r}.pt") for r in range(2)]
    for name in ("pnorm", "nca"):
        assert (~one[name]["state"].isnan()).sum() > 10
        for r in range(2):
            assert torch.equal(two[r][name]["state"].nan_to_num(-1.0), two[0][name]["state"].nan_to_num(-1.0))
            for a, b in zip(one[name]["weight"], two[r][name]["weight"]):
                assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), name
        assert torch.allclose(one[name]["state"].nan_to_num(-1.0), two[0][name]["state"].nan_to_num(-1.0),
                              rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("surrogate", ["squared_hinge", "hinge", "logistic", "sigmoid", "exp"])
def test_pairwise_weighted_sum_equals_the_autograd_expression(surrogate):
    """The fused AP inner (one autograd node, closed-form backward) = ℓ(s_j − s_{a_i}) @ W through autograd, values
    and gradients in float64, with repeated anchors and a gradient check."""
    from fccolit.surrogates import pairwise_surrogate, pairwise_surrogate_with_slope, pairwise_weighted_sum

    g = torch.Generator().manual_seed(3)
    scores = torch.randn(17, dtype=torch.float64, generator=g).requires_grad_()
    anchors = torch.tensor([0, 4, 4, 9, 16])
    weights = torch.rand(17, 3, dtype=torch.float64, generator=g)
    upstream = torch.randn(5, 3, dtype=torch.float64, generator=g)
    loss = pairwise_surrogate(surrogate, margin=0.6, scale=1.7)
    fused = pairwise_weighted_sum(scores, anchors, weights, pairwise_surrogate_with_slope(surrogate, 0.6, 1.7))
    plain = loss(scores.unsqueeze(0) - scores[anchors].unsqueeze(1)) @ weights
    assert torch.allclose(fused, plain, rtol=1e-13, atol=1e-15)
    (grad_fused,) = torch.autograd.grad((fused * upstream).sum(), scores)
    (grad_plain,) = torch.autograd.grad((plain * upstream).sum(), scores)
    assert torch.allclose(grad_fused, grad_plain, rtol=1e-12, atol=1e-14)
    if surrogate != "hinge":  # the hinge's kink: finite differences disagree only where a margin is exactly 0
        assert torch.autograd.gradcheck(
            lambda s: pairwise_weighted_sum(s, anchors, weights, pairwise_surrogate_with_slope(surrogate, 0.6, 1.7)),
            (scores.detach().requires_grad_(),),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sigmoid_scores_are_sigmoid_without_subnormals(dtype):
    """AP's and pAUC's score transform: torch.sigmoid, bit for bit, above log √tiny; at and below it σ(log √tiny)
    with gradient 0, so neither the scores nor their gradients are ever subnormal (float32's sigmoid is subnormal
    below -87, and every matrix product of the backward pass that meets such a value runs several times slower on
    x86 CPUs)."""
    from fccolit.objectives import AveragePrecisionSurrogate, PartialAUCRangeSurrogate
    from fccolit.surrogates import sigmoid_scores

    tiny = torch.finfo(dtype).tiny
    floor = 0.5 * math.log(tiny)
    logits = torch.cat([torch.linspace(2.5 * floor, 40.0, 4001, dtype=dtype), torch.tensor([floor], dtype=dtype)])
    logits.requires_grad_()
    upstream = torch.full_like(logits, 1e-3)
    ours = sigmoid_scores(logits)
    (grad,) = torch.autograd.grad(ours, logits, upstream)
    reference = logits.detach().clone().requires_grad_()
    (grad_ref,) = torch.autograd.grad(torch.sigmoid(reference), reference, upstream)
    subnormal = lambda t: bool(((t != 0) & (t.abs() < tiny)).any())  # noqa: E731
    above = logits.detach() > floor
    assert torch.equal(ours.detach()[above], torch.sigmoid(logits.detach()[above]))
    assert torch.equal(grad[above], grad_ref[above])
    assert not subnormal(ours) and not subnormal(grad)
    assert (ours.detach()[~above] == ours.detach()[-1]).all() and (grad[~above] == 0).all()
    if dtype == torch.float32:  # what the clamp removes: plain sigmoid's subnormal values and gradients
        assert subnormal(torch.sigmoid(logits.detach())) and subnormal(grad_ref)
    scores = torch.tensor([-300.0, -90.0, 0.5], dtype=dtype)
    assert torch.equal(AveragePrecisionSurrogate()._scores(scores), sigmoid_scores(scores))
    assert torch.equal(PartialAUCRangeSurrogate(0.05, 0.5, score_transform="sigmoid").transform(scores), sigmoid_scores(scores))
