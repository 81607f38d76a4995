"""PNormPushLoss (fccolit/objectives/pnorm_push.py): the SOX estimator is the exact gradient on the whole data,
``exact_value`` is Rudin's formula, the factorized exp equals the pairwise sum, and over every possible batch the SOX
estimator is unbiased while the plug-in BSGD estimator is not (exactly, and by Monte Carlo)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from objective_helpers import binary_data, exact_table, expectation, grads, make_sox, sox_estimate, subset

from fccolit.objectives.pnorm_push import PNormPushLoss


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
