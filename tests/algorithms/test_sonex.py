"""SONEX, SONX and PenaltySOX (Chen et al., NeurIPS 2025): the estimator, MSVR tracking, constraint sampling, the
presets, and the constrained toy problem (all float64)."""

import warnings

import pytest
import torch
from nonsmooth_problems import (
    ToyProblem, build, fairness_batch, flat_grad, gdro_batch, median_group_loss, run_toy, toy_module,
)
from torch import nn

from fccolit.algorithms.sonex import SONEX, SONX, PenaltySOX, theoretical_correction_weight
from fccolit.algorithms.sox import SOX
from fccolit.models import MLP, LinearScorer
from fccolit.objectives.ap import AveragePrecisionSurrogate
from fccolit.objectives.constrained import GroupDROCVaRLoss, ROCFairnessAUCObjective
from fccolit.optim import Momentum

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*LeafSpec.*")

D = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


CASES = {
    # GDRO-CVaR with s at the median group loss: groups on both sides of the hinge's kink
    "gdro_hinge_smoothed": lambda b: (LinearScorer(), GroupDROCVaRLoss(ratio=0.25, init_threshold=median_group_loss(b)), 0.05),
    # gaps |g_1 − g_2| of this model are 0.0012 … 0.0029: with κ = 0.002 and 2λρ = 8e-4 rows are feasible, in the
    # quadratic and in the linear part of the Huber penalty
    "roc_hinge_smoothed": lambda b: (MLP(hidden=[6, 5]), ROCFairnessAUCObjective(thresholds=(-1, 0, 1), kappa=0.002, rho=8.0), 5e-5),
    "roc_squared_hinge_unsmoothed": lambda b: (MLP(hidden=[6]), ROCFairnessAUCObjective(kappa=0.0, penalty="squared_hinge", rho=50.0), 0.0),
}


@pytest.mark.parametrize("case", CASES)
def test_sonex_estimator_equals_autograd_gradient_of_F_lambda(case):
    """γ = 1, γ' = 0, full batch (full participation, exact inner values): G = ∇F_λ(w) exactly (float64)."""
    batch = gdro_batch() if case.startswith("gdro") else fairness_batch()
    model, objective, lam = CASES[case](batch)
    module = build(SONEX, model, objective, batch, smoothing=lam, ema_weight=1.0, correction_weight=0.0)
    true_grad = flat_grad(module, module.objective.exact_value(module(batch), batch, lam=lam))
    for _ in range(2):  # first visit, then an update at the same weights
        loss, estimate = module.compositional_loss(module(batch), batch)
        est = flat_grad(module, loss)
        assert torch.allclose(est, true_grad, rtol=1e-10, atol=1e-13)
    assert true_grad.abs().max() > 1e-3
    # not vacuous: the penalty part contributes, and with smoothing some rows are in the quadratic (curved) part
    weights = module.outer_weight(module.state.value, {})
    assert (weights != 0).any()
    if lam > 0:
        scalar = module.objective.outer_fn.multiplier(module.state.value, lam)
        rho = module.objective.outer_fn.rho if case.startswith("gdro") else module.objective.rho
        assert ((scalar > 1e-9) & (scalar < rho - 1e-9)).any() and (scalar == rho).any() and (scalar == 0).any()
    # the logged estimate is g_0 + f(u) with the un-smoothed f
    direct = module.objective.direct(module(batch), batch).detach()
    assert torch.allclose(estimate, module.objective.outer(module.state.value, {}) + direct)


def test_msvr_with_gamma_prime_one_minus_gamma_tracks_g_exactly():
    """Full participation, deterministic g: u_{t+1} = (1−γ)g(w_{t−1}) + γg(w_t) + (1−γ)(g(w_t) − g(w_{t−1})) = g(w_t)."""
    batch = fairness_batch()
    for gamma, prime, exact in [(0.3, 0.7, True), (0.3, 0.0, False)]:
        module = build(SONEX, MLP(hidden=[6]), ROCFairnessAUCObjective(rho=5.0), batch, seed=1, smoothing=0.01,
                       ema_weight=gamma, correction_weight=prime)
        params = [p for _, p in module.trainable()]
        errors, inner_values = [], []
        for step in range(6):
            loss, _ = module.compositional_loss(module(batch), batch)
            with torch.no_grad():
                exact_inner = module.objective.inner(module(batch), batch)
            inner_values.append(exact_inner.value)
            errors.append(float((module.state.value[exact_inner.index] - exact_inner.value).abs().max()))
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(3.0 * g)  # large steps: g(w) moves a lot between steps
        assert float((inner_values[-1] - inner_values[0]).abs().max()) > 1e-2  # g(w_t) really moved
        if exact:
            assert max(errors) < 1e-12, errors
        else:
            assert max(errors[1:]) > 1e-4, errors  # negative control: a plain moving average lags behind


def test_msvr_update_uses_the_same_batch_at_the_previous_parameters():
    batch = fairness_batch(seed=3)
    gamma, prime = 0.5, 0.2
    module = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(rho=5.0), batch, smoothing=0.01, ema_weight=gamma, correction_weight=prime)
    params = [p for _, p in module.trainable()]
    module.compositional_loss(module(batch), batch)  # first visit at w_0
    w0 = [p.detach().clone() for p in params]
    assert all(torch.equal(a, b) for a, b in zip(module.previous.tensors(), w0))  # previous = w_t before the step
    with torch.no_grad():
        for p in params:
            p.add_(0.3 * torch.randn_like(p))
        g_new = module.objective.inner(module(batch), batch)
        prev_model = MLP(hidden=[5], in_features=4).double()
        prev_model.load_state_dict({k[len("model."):]: v for k, v in zip(module.previous.names, w0)})
        g_old = module.objective.inner(prev_model(batch["x"]), batch)
    u_before = module.state.value.clone()
    module.compositional_loss(module(batch), batch)
    expected = (1 - gamma) * u_before[g_new.index] + gamma * g_new.value + prime * (g_new.value - g_old.value)
    assert torch.allclose(module.state.value[g_new.index], expected, rtol=1e-12, atol=1e-14)


def test_constraint_sampling_leaves_the_other_rows_bit_identical():
    batch = fairness_batch()
    module = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(rho=5.0), batch, smoothing=0.01, constraints_per_step=4, sample_seed=7)
    seen = []
    for _ in range(5):
        before = module.state.value.clone()
        with torch.no_grad():  # move the weights so that every updated row changes
            for _, p in module.trainable():
                p.add_(0.1 * torch.randn_like(p))
        module.compositional_loss(module(batch), batch)
        changed = ~(before.nan_to_num(123.0) == module.state.value.nan_to_num(123.0)).all(-1)
        assert int(changed.sum()) == 4
        seen.append(changed.nonzero().flatten().tolist())
    assert len({tuple(s) for s in seen}) > 1  # different constraints at different steps
    again = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(rho=5.0), batch, smoothing=0.01, constraints_per_step=4, sample_seed=7)
    before = again.state.value.clone()
    again.compositional_loss(again(batch), batch)
    assert (~(before.nan_to_num(1.0) == again.state.value.nan_to_num(1.0)).all(-1)).nonzero().flatten().tolist() == seen[0]


def test_theoretical_correction_weight():
    assert theoretical_correction_weight(0.3, 10, 10) == pytest.approx(0.7)
    assert theoretical_correction_weight(0.5, 10, 2) == pytest.approx(0.5 + 8 / (2 * 0.5))


# ---------------------------------------------------------------------- presets reduce to SONEX / SOX
def test_sonx_is_sonex_without_smoothing():
    batch = fairness_batch()
    a = build(SONX, MLP(hidden=[5]), ROCFairnessAUCObjective(rho=5.0), batch)
    b = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(rho=5.0), batch, smoothing=0.0)
    for _ in range(3):
        ga = flat_grad(a, a.compositional_loss(a(batch), batch)[0])
        gb = flat_grad(b, b.compositional_loss(b(batch), batch)[0])
        assert torch.equal(ga, gb)
    assert torch.equal(a.state.value, b.state.value)
    opt = a.default_optimizer([nn.Parameter(torch.zeros(1))])
    assert isinstance(opt, Momentum) and opt.defaults["momentum_weight"] == 1.0  # SGD


def test_penalty_sox_is_sox_plus_the_direct_term():
    batch = fairness_batch()
    objective = ROCFairnessAUCObjective(penalty="squared_hinge", rho=40.0)
    a = build(PenaltySOX, MLP(hidden=[5]), objective, batch, ema_weight=0.4)
    b = build(SOX, MLP(hidden=[5]), ROCFairnessAUCObjective(penalty="squared_hinge", rho=40.0), batch, ema_weight=0.4)
    assert a.previous is None  # no MSVR correction, no copy of the weights
    for _ in range(3):
        ga = flat_grad(a, a.compositional_loss(a(batch), batch)[0])
        gb = flat_grad(b, b.compositional_loss(b(batch), batch)[0] + b.objective.direct(b(batch), batch))
        assert torch.allclose(ga, gb, rtol=1e-12, atol=1e-15)
    assert torch.allclose(a.state.value, b.state.value)


def test_smoothing_in_the_algorithm_equals_the_smoothed_hinge_penalty():
    """SONEX(λ) on ρ[h]_+ is SONEX(0) on the Huber penalty f_λ (scalar constraint); for the 2-D gap penalty the
    g-space envelope with λ is the h-space one with 2λ."""
    batch = fairness_batch()
    lam = 0.003
    a = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(kappa=0.0, rho=6.0), batch, smoothing=lam)
    b = build(SONEX, MLP(hidden=[5]), ROCFairnessAUCObjective(kappa=0.0, rho=6.0, penalty="smoothed_hinge", smoothing=2 * lam), batch, smoothing=0.0)
    for _ in range(3):
        ga = flat_grad(a, a.compositional_loss(a(batch), batch)[0])
        gb = flat_grad(b, b.compositional_loss(b(batch), batch)[0])
        assert torch.allclose(ga, gb, rtol=1e-12, atol=1e-15)
    toy_a, toy_b = ToyProblem("hinge", 5.0), ToyProblem("smoothed_hinge", 5.0, smoothing=0.1)
    u = torch.linspace(-1, 1, 101, dtype=D).unsqueeze(-1)
    assert torch.equal(toy_a.smoothed_outer_grad(u, 0.1, {}), toy_b.outer_grad(u, {}))


def test_toy_problem_violations_match_the_closed_forms():
    lam, rho = 0.1, 5.0
    # smoothed hinge (SONEX, λ): w_1 = λ/(1 + λ), the violation ≈ λ = ε/ρ (and ≤ λρ)
    smoothed = run_toy(toy_module(SONEX, "hinge", rho, ema_weight=1.0, correction_weight=0.0, smoothing=lam), 600, 0.08)
    assert float(smoothed[-1, 0]) == pytest.approx(lam / (1 + lam), abs=1e-12)
    assert float(smoothed[-1, 1]) == pytest.approx(0.0, abs=1e-12)
    # squared hinge (SOX): w_1 = 1/(1 + 2ρ), inexact: the violation only decays like 1/ρ
    for rho_sq in (2.0, 20.0):
        squared = run_toy(toy_module(PenaltySOX, "squared_hinge", rho_sq, ema_weight=1.0), 1200, 0.02)
        assert float(squared[-1, 0]) == pytest.approx(1 / (1 + 2 * rho_sq), abs=1e-10)
    # hinge (SONX, ρ > 1 = ν*): exact penalty, w_1 = 0; plain subgradient steps oscillate around it within ηρ
    eta = 0.02
    hinge = run_toy(toy_module(SONX, "hinge", rho, ema_weight=1.0, correction_weight=0.0), 1000, eta)
    tail = hinge[-200:, 0]
    assert float(tail.abs().max()) <= eta * (rho + 1)
    assert float(tail.mean().abs()) <= eta * rho / 2
    assert abs(float(hinge[-1, 1])) < 1e-8  # 0.5 · (1 − η)^1000
    # a penalty below the exact-penalty threshold (ρ < ν* = 1) stays infeasible: w_1 = 1 − ρ
    weak = run_toy(toy_module(SONEX, "hinge", 0.4, ema_weight=1.0, correction_weight=0.0, smoothing=1e-3), 100, 0.5)
    assert float(weak[-1, 0]) == pytest.approx(0.6, abs=1e-9)


def test_multipliers_estimate_the_kkt_multiplier():
    lam, rho = 0.01, 5.0
    module = toy_module(SONEX, "hinge", rho, ema_weight=1.0, correction_weight=0.0, smoothing=lam)
    run_toy(module, 1500, 0.019)
    # ν = (1/m) ∇f_λ(g(w_λ)) = w_1/λ = 1/(1+λ) → ν* = 1
    assert float(module.penalty_weights()[0]) == pytest.approx(1 / (1 + lam), abs=1e-9)


def test_bad_arguments_are_clear_errors():
    batch = fairness_batch()
    with pytest.raises(TypeError, match="needs\\s+its prox"):
        SONEX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes={"num_samples": 3, "num_positives": 1}, smoothing=0.1)
    with pytest.raises(ValueError, match="ema_weight"):
        build(SONEX, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch, ema_weight=0.0)
