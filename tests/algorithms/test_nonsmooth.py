"""Chen et al. (NeurIPS 2025): the outer functions' closed forms, SONEX's estimator and tracking, ALEXR2's dual step
and inner loop, and the constrained toy problem with a known answer (all float64)."""

import math
import warnings

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback, Trainer
from scipy.optimize import minimize, minimize_scalar
from torch import nn

from fccolit.algorithms.alexr2 import ALEXR2
from fccolit.algorithms.sonex import SONEX, SONX, PenaltySOX, theoretical_correction_weight
from fccolit.algorithms.sox import SOX
from fccolit.data import TensorDictDataset
from fccolit.datamodules.base import FCCODataModule
from fccolit.models import MLP, LinearScorer
from fccolit.objectives.base import InnerBatch
from fccolit.objectives.constrained import ConstrainedObjective, GroupDROCVaRLoss, ROCFairnessAUCObjective
from fccolit.objectives.nonsmooth import GapPenalty, Hinge, SmoothedHinge, SquaredHinge, make_penalty
from fccolit.optim import Momentum
from fccolit.samplers.base import RankAwareBatchSampler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*LeafSpec.*")

D = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def t(*rows):
    return torch.tensor(rows, dtype=D)


def numeric_envelope(f, x, lam):
    """min_v f(v) + (x − v)²/(2λ) for a scalar function, by a bounded 1-D search (tight tolerance)."""
    res = minimize_scalar(
        lambda v: float(f.value(t([v]))) + (x - v) ** 2 / (2 * lam),
        bounds=(x - 50.0, x + 50.0), method="bounded", options={"xatol": 1e-13, "maxiter": 5000},
    )
    return res.fun, res.x


# ---------------------------------------------------------------------- outer functions: closed forms
X_GRID = [-2.0, -0.3, 0.0, 0.01, 0.05, 0.2, 0.4, 0.61, 1.0, 3.0]


@pytest.mark.parametrize("rho,lam", [(1.0, 0.1), (3.0, 0.2), (10.0, 0.002)])
def test_hinge_prox_envelope_and_gradient_equal_their_numerical_definitions(rho, lam):
    f = Hinge(rho)
    u = torch.tensor(X_GRID, dtype=D).unsqueeze(-1)
    env, prox, grad = f.envelope(u, lam), f.prox(u, lam)[:, 0], f.envelope_grad(u, lam)[:, 0]
    for k, x in enumerate(X_GRID):
        value, argmin = numeric_envelope(f, x, lam)
        assert float(env[k]) == pytest.approx(value, abs=1e-10)
        assert float(prox[k]) == pytest.approx(argmin, abs=1e-6)
        # the closed forms, written out independently
        huber = 0.0 if x <= 0 else (x * x / (2 * lam) if x <= lam * rho else rho * x - lam * rho**2 / 2)
        assert float(env[k]) == pytest.approx(huber, abs=1e-14)
        assert float(grad[k]) == pytest.approx(min(max(x, 0.0) / lam, rho), abs=1e-14)
        # ∇f_λ = (x − prox)/λ (eq. (2)) and = the dual maximizer of max_{y∈[0,ρ]} y x − λy²/2
        assert float(grad[k]) == pytest.approx((x - float(prox[k])) / lam, abs=1e-12)
        dual = minimize_scalar(lambda y: -(y * x - lam * y * y / 2), bounds=(0, rho), method="bounded",
                               options={"xatol": 1e-12})
        assert float(grad[k]) == pytest.approx(dual.x, abs=1e-6)
        # finite difference of the envelope
        h = 1e-6
        fd = (float(f.envelope(t([x + h]), lam)) - float(f.envelope(t([x - h]), lam))) / (2 * h)
        assert float(grad[k]) == pytest.approx(fd, abs=1e-7 + h / lam)  # ∇f_λ is (1/λ)-Lipschitz
    assert (grad > 0).any() and (grad < rho).any() and ((grad > 0) & (grad < rho)).any()  # every regime is hit


def test_smoothed_hinge_value_gradient_and_prox_equal_their_closed_forms():
    rho, lam = 4.0, 0.05
    f = SmoothedHinge(rho, lam)
    hinge = Hinge(rho)
    xs = torch.linspace(-1, 1, 401, dtype=D).unsqueeze(-1)
    x = xs[:, 0]
    huber = torch.where(x <= 0, 0.0, torch.where(x <= lam * rho, x * x / (2 * lam), rho * x - lam * rho**2 / 2))
    assert torch.allclose(f.value(xs), huber, atol=1e-15)
    assert torch.allclose(f.grad(xs)[:, 0], torch.clamp(x / lam, 0.0, rho), atol=1e-15)
    # Lipschitz-preserving smoothing: f_λ ≤ f ≤ f_λ + λρ²/2, the gap attained far right
    assert (f.value(xs) <= hinge.value(xs) + 1e-15).all()
    assert (hinge.value(xs) <= f.value(xs) + lam * rho**2 / 2 + 1e-15).all()
    assert float(hinge.value(t([1.0])) - f.value(t([1.0]))) == pytest.approx(lam * rho**2 / 2, abs=1e-14)
    # its own prox and envelope (with μ) equal the numerical ones, and (f_λ)_μ = f_{λ+μ}
    mu = 0.03
    for x0 in [-0.5, 0.0, 0.1, 0.2, 0.26, 0.5]:
        value, argmin = numeric_envelope(f, x0, mu)
        assert float(f.envelope(t([x0]), mu)) == pytest.approx(value, abs=1e-10)
        assert float(f.prox(t([x0]), mu)) == pytest.approx(argmin, abs=1e-6)
        assert float(f.envelope(t([x0]), mu)) == pytest.approx(float(hinge.envelope(t([x0]), lam + mu)), abs=1e-15)
    # the envelope gradient is a subgradient of the hinge at the prox point: ∇f_λ(x) ∈ ∂f(prox(x))
    p, g = hinge.prox(xs, lam)[:, 0], hinge.envelope_grad(xs, lam)[:, 0]
    assert torch.all(torch.where(p < 0, g == 0, torch.where(p > 0, g == rho, (g >= 0) & (g <= rho))))


@pytest.mark.parametrize("rho,lam", [(0.5, 0.3), (20.0, 0.01)])
def test_squared_hinge_prox_and_envelope_equal_numerical(rho, lam):
    f = SquaredHinge(rho)
    for x in X_GRID:
        value, argmin = numeric_envelope(f, x, lam)
        assert float(f.envelope(t([x]), lam)) == pytest.approx(value, rel=1e-9, abs=1e-12)
        assert float(f.prox(t([x]), lam)) == pytest.approx(argmin, abs=1e-6)
        assert float(f.grad(t([x]))) == pytest.approx(2 * rho * max(x, 0.0), abs=1e-14)


@pytest.mark.parametrize("penalty", [Hinge(3.0), SquaredHinge(2.0), SmoothedHinge(3.0, 0.05)], ids=repr)
def test_gap_penalty_envelope_and_prox_equal_a_numerical_2d_moreau_envelope(penalty):
    kappa, lam = 0.1, 0.2
    f = GapPenalty(penalty, kappa)
    rng = np.random.default_rng(0)
    points = [[0.5, 0.1], [0.1, 0.5], [0.3, 0.25], [0.9, -0.5], [0.2, 0.45]] + rng.uniform(-1, 1, (5, 2)).tolist()
    for g in points:
        g = np.array(g)

        def objective(v):
            return float(f.value(torch.tensor(v, dtype=D).unsqueeze(0))) + ((g - v) ** 2).sum() / (2 * lam)

        starts = [g, g + [0.2, -0.2], g - [0.2, -0.2], np.full(2, g.mean())]
        best = min((minimize(objective, s, method="Nelder-Mead",
                             options={"xatol": 1e-12, "fatol": 1e-15, "maxiter": 40000}) for s in starts),
                   key=lambda r: r.fun)
        u = torch.tensor(g, dtype=D).unsqueeze(0)
        assert float(f.envelope(u, lam)) == pytest.approx(best.fun, abs=1e-9)
        assert np.allclose(f.prox(u, lam)[0].numpy(), best.x, atol=1e-5)
        assert torch.allclose(f.envelope_grad(u, lam), (u - f.prox(u, lam)) / lam, atol=1e-12)
    # for the hinge: its Huber form with 2λ at |g_1 − g_2| − κ
    if isinstance(penalty, Hinge):
        rho, mu = penalty.rho, 2 * lam
        for z in [0.05, 0.2, 0.5, 1.0, -0.7]:
            a = abs(z)
            h = 0.0 if a <= kappa else ((a - kappa) ** 2 / (2 * mu) if a <= kappa + mu * rho else rho * (a - kappa) - mu * rho**2 / 2)
            assert float(f.envelope(t([z + 0.3, 0.3]), lam)) == pytest.approx(h, abs=1e-14)


def test_make_penalty_names_its_errors():
    assert isinstance(make_penalty("hinge", 2.0), Hinge)
    assert isinstance(make_penalty("smoothed_hinge", 2.0, 0.1), SmoothedHinge)
    with pytest.raises(ValueError, match="needs its smoothing parameter"):
        make_penalty("smoothed_hinge", 2.0)
    with pytest.raises(ValueError, match="only applies to penalty='smoothed_hinge'"):
        make_penalty("hinge", 2.0, 0.1)
    with pytest.raises(ValueError, match="unknown penalty"):
        make_penalty("huber", 2.0)
    with pytest.raises(ValueError, match="ρ"):
        Hinge(0.0)


# ---------------------------------------------------------------------- fixtures: problems with exact full batches
def gdro_batch(n_groups=6, per_group=20, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_groups * per_group, d, generator=g, dtype=D)
    group = torch.arange(n_groups).repeat_interleave(per_group)
    shift = torch.randn(n_groups, d, generator=g, dtype=D)
    y = ((x + shift[group]).sum(-1) + 0.5 * torch.randn(x.shape[0], generator=g, dtype=D) > 0).long()
    return {"x": x, "y": y, "group": group, "index": torch.arange(x.shape[0])}


def fairness_batch(n=80, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=D)
    group = (torch.rand(n, generator=g) < 0.4).long()
    y = ((x[:, 0] + 0.7 * group + 0.5 * torch.randn(n, generator=g, dtype=D)) > 0.2).long()
    return {"x": x, "y": y, "group": group, "index": torch.arange(n)}


def build(cls, model, objective, batch, seed=0, **kw):
    torch.manual_seed(seed)
    sizes = {"num_features": batch["x"].shape[1], "num_groups": int(batch["group"].max()) + 1}
    return cls(model, objective, data_sizes=sizes, state_dtype="float64", **kw).double()


def flat_grad(module, loss):
    params = [p for p in module.parameters() if p.requires_grad]
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, allow_unused=False)])


def median_group_loss(batch):
    torch.manual_seed(0)
    model = LinearScorer(batch["x"].shape[1]).double()
    _, means = GroupDROCVaRLoss().group_means(model(batch["x"]), batch)
    return float(means.detach().median())


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


# ---------------------------------------------------------------------- the toy problem with a known answer
A = (1.0, 0.0)


class Point(nn.Module):
    """The "model" of the toy problem: its output is the decision variable w ∈ R² itself."""

    def __init__(self, start=(0.5, 0.5)):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(start, dtype=D))

    def forward(self, x):
        return self.w


class ToyProblem(ConstrainedObjective):
    """min ½‖w − a‖² s.t. w_1 ≤ 0, a = (1, 0): KKT point w* = 0, multiplier ν* = 1 (m = 1)."""

    num_constraints = 1

    def direct(self, scores, batch):
        return 0.5 * (scores - torch.tensor(A, dtype=scores.dtype)).square().sum()

    def inner(self, scores, batch):
        return InnerBatch(index=torch.zeros(1, dtype=torch.long), value=scores[:1].reshape(1, 1))


TOY_BATCH = {"x": torch.zeros(1, 1, dtype=D)}


def run_toy(module, steps, lr):
    params = [p for _, p in module.trainable()]
    trace = []
    for _ in range(steps):
        loss, _ = module.compositional_loss(module(TOY_BATCH), TOY_BATCH)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        trace.append(module.model.w.detach().clone())
    return torch.stack(trace)


def toy_module(cls, penalty, rho, **kw):
    """The toy problem under algorithm ``cls`` (``kw``: the algorithm's arguments, e.g. its smoothing λ)."""
    return cls(Point(), ToyProblem(penalty, rho), data_sizes={"num_samples": 1}, state_dtype="float64", **kw).double()


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


# ---------------------------------------------------------------------- ALEXR2
class FullBatchSampler(RankAwareBatchSampler):
    """Every batch is the whole data set in order (deterministic inner values)."""

    def __init__(self, n, steps):
        super().__init__()
        self.n, self.steps = n, steps

    def num_batches(self):
        return self.steps

    def global_batch_size(self):
        return self.n

    def global_batches(self, generator):
        for _ in range(self.steps):
            yield torch.arange(self.n)


class FullBatchData(FCCODataModule):
    def __init__(self, batch, steps):
        super().__init__()
        self.batch, self.steps = batch, steps
        self.sizes = {"num_features": batch["x"].shape[1]}

    def setup(self, stage=None):
        self.train_dataset = self.val_dataset = self.test_dataset = TensorDictDataset(**self.batch)

    def build_train_sampler(self):
        return FullBatchSampler(self.batch["x"].shape[0], self.steps)


def fit(module, batch, steps, callbacks=()):
    trainer = Trainer(
        accelerator="cpu", max_steps=steps, precision="64-true", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
        use_distributed_sampler=False, callbacks=list(callbacks),
    )
    trainer.fit(module, datamodule=FullBatchData(batch, steps))
    return trainer


def bregman_argmax_1d(g_tilde, u_k, gamma, lam, rho):
    """argmax_{y∈[0,ρ]} y g̃ − f̄*(y) − (1/γ) U(y, y_k), f̄*(y) = λy²/2 on [0, ρ], U with the subgradient u_k at y_k."""
    y_k = min(max(u_k / lam, 0.0), rho)
    conj = lambda y: lam * y * y / 2  # noqa: E731
    bregman = lambda y: conj(y) - conj(y_k) - u_k * (y - y_k)  # noqa: E731
    res = minimize_scalar(lambda y: -(y * g_tilde - conj(y) - bregman(y) / gamma), bounds=(0.0, rho),
                          method="bounded", options={"xatol": 1e-13})
    return res.x


def bregman_argmax_gap(g_tilde, u_k, gamma, lam, rho, kappa):
    """The same for ρ[|g_1 − g_2| − κ]_+: dom f* = {a(1, −1) : |a| ≤ ρ}, f̄*(a) = κ|a| + λa²."""
    z_tilde, z_k = g_tilde[0] - g_tilde[1], u_k[0] - u_k[1]
    a_k = math.copysign(min(max(abs(z_k) - kappa, 0.0) / (2 * lam), rho), z_k)
    conj = lambda a: kappa * abs(a) + lam * a * a  # noqa: E731
    bregman = lambda a: conj(a) - conj(a_k) - z_k * (a - a_k)  # noqa: E731
    res = minimize_scalar(lambda a: -(a * z_tilde - conj(a) - bregman(a) / gamma), bounds=(-rho, rho),
                          method="bounded", options={"xatol": 1e-13})
    return np.array([res.x, -res.x])


@pytest.mark.parametrize("case", ["gdro", "roc"])
def test_alexr2_dual_step_equals_the_bregman_argmax(case):
    gamma_hat, theta, lam = 0.6, 0.3, 0.05
    if case == "gdro":
        batch = gdro_batch()
        module = build(ALEXR2, LinearScorer(), GroupDROCVaRLoss(ratio=0.5, init_threshold=median_group_loss(batch)), batch,
                       smoothing=lam, ema_weight=gamma_hat, extrapolation=theta, independent_batches=False)
    else:
        batch = fairness_batch()
        module = build(ALEXR2, MLP(hidden=[5]), ROCFairnessAUCObjective(kappa=0.02, rho=3.0), batch,
                       smoothing=lam, ema_weight=gamma_hat, extrapolation=theta, independent_batches=False)
    params = [p for _, p in module.trainable()]
    module.anchor.copy_from(params)
    with torch.no_grad():  # z_{k−1}: a different point, so the extrapolation term is not zero
        module.inner_previous.copy_from([p + 0.2 * torch.randn_like(p) for p in params])
        module.loop["inner_step"] = 1
        g_now = module.objective.inner(module(batch), batch)
        g_old = module.inner_at(module.inner_previous, module.scores_at(module.inner_previous, batch, False), batch)
        u_k = g_now.value + 0.3 * torch.randn_like(g_now.value)  # a stale dual state
        module.state.value.index_copy_(0, g_now.index, u_k)
    with torch.no_grad():
        scores = module(batch)
    module.compositional_loss(scores, batch, batch)  # the dual step on B (the gradient half B̃ = B here)
    current = module.state.read(g_now.index)
    g_tilde = g_now.value + theta * (g_now.value - g_old.value)
    assert torch.allclose(current, (1 - gamma_hat) * u_k + gamma_hat * g_tilde, rtol=1e-12, atol=1e-14)
    y = module.outer_weight(current, {})
    gamma = module.dual_step
    assert gamma == pytest.approx(gamma_hat / (1 - gamma_hat))
    for i in range(y.shape[0]):
        if case == "gdro":
            expected = bregman_argmax_1d(float(g_tilde[i, 0]), float(u_k[i, 0]), gamma, lam, module.objective.outer_fn.rho)
            assert float(y[i, 0]) == pytest.approx(expected, abs=1e-7)
        else:
            expected = bregman_argmax_gap(g_tilde[i].numpy(), u_k[i].numpy(), gamma, lam, 3.0, 0.02)
            assert np.allclose(y[i].numpy(), expected, atol=1e-7)
    interior = (y.abs() > 1e-9) & (y.abs() < (module.objective.outer_fn.rho if case == "gdro" else 3.0) - 1e-9)
    assert interior.any()  # the strongly concave part of the dual is exercised, not only the box


def prox_point(module, batch, w, lam, nu):
    """prox_{νF_λ}(w) by L-BFGS (scipy, float64) on F_λ(z) + ‖z − w‖²/(2ν)."""
    params = [p for _, p in module.trainable()]
    shapes = [p.shape for p in params]
    w_flat = torch.cat([x.flatten() for x in w])

    def assign(vec):
        out, k = [], 0
        for s in shapes:
            n = int(np.prod(s)) if len(s) else 1
            out.append(vec[k : k + n].reshape(s))
            k += n
        return out

    def fun(vec):
        z = torch.tensor(vec, dtype=D, requires_grad=True)
        values = dict(zip([n for n, _ in module.trainable()], assign(z)))
        scores = torch.func.functional_call(module, values, (batch,))
        obj = torch.func.functional_call(module.objective, {k[10:]: v for k, v in values.items() if k.startswith("objective.")},
                                         (scores, batch))
        value = module.objective.smoothed_outer(obj.value, lam, {}).mean() + values["objective.threshold"]
        value = value + (z - w_flat).square().sum() / (2 * nu)
        (grad,) = torch.autograd.grad(value, z)
        return float(value.detach()), grad.numpy()

    res = minimize(fun, w_flat.numpy(), jac=True, method="L-BFGS-B", options={"gtol": 1e-14, "ftol": 1e-16, "maxiter": 5000})
    return torch.tensor(res.x, dtype=D)


class Distances(Callback):
    def __init__(self, target):
        self.target, self.values = target, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        z = torch.cat([p.detach().flatten() for _, p in pl_module.trainable()])
        self.values.append(float((z - self.target).norm()))


def test_alexr2_inner_loop_converges_to_the_prox_point_of_a_reference_solver():
    batch = gdro_batch(n_groups=5, per_group=16, d=3, seed=2)
    lam, nu = 0.05, 0.5
    module = build(ALEXR2, LinearScorer(), GroupDROCVaRLoss(ratio=0.4, init_threshold=median_group_loss(batch)), batch,
                   smoothing=lam, envelope_smoothing=nu, inner_lr=0.2, inner_steps=10**6, ema_weight=0.8, extrapolation=0.125,
                   independent_batches=False)
    w = [p.detach().clone() for _, p in module.trainable()]
    prox = prox_point(module, batch, w, lam, nu)
    w_flat = torch.cat([x.flatten() for x in w])
    assert float((prox - w_flat).norm()) > 0.05  # the prox point is far from the anchor: not a vacuous test
    distances = Distances(prox)
    fit(module, batch, 120, [distances])
    d = distances.values
    assert d[-1] < 1e-9, d[-1]
    assert d[24] < 1e-3 * d[0] and d[49] < 1e-7 * d[0]  # geometric decrease
    # the outer gradient (w − z_K)/ν then equals ∇F_{λ,ν}(w) = (w − prox)/ν
    z = torch.cat([p.detach().flatten() for _, p in module.trainable()])
    assert torch.allclose((w_flat - z) / nu, (w_flat - prox) / nu, atol=1e-8)


class RecordingALEXR2(ALEXR2):
    def outer_step(self, optimizer, params):
        self.seen = ([a.clone() for a in self.anchor.tensors()], [p.detach().clone() for p in params])
        super().outer_step(optimizer, params)


def test_alexr2_outer_step_is_momentum_on_w_minus_z_over_nu_without_beta():
    batch = gdro_batch(seed=4)
    alpha, beta, nu, K = 0.3, 0.25, 0.2, 3
    module = build(RecordingALEXR2, LinearScorer(), GroupDROCVaRLoss(ratio=0.5), batch, smoothing=0.05, envelope_smoothing=nu, inner_steps=K,
                   independent_batches=False, optimizer=lambda p: Momentum(p, lr=alpha, momentum_weight=beta))
    trainer = fit(module, batch, K)
    assert trainer.global_step == K  # one counted step per batch (inner step)
    w_t, z_K = module.seen
    for w_new, w, z in zip(module.anchor.tensors(), w_t, z_K):
        # v_1 = βG_1 with G_1 = (w_t − z_K)/ν (no extra β: step 13 erratum), w_{t+1} = w_t − αv_1
        assert torch.allclose(w_new, w - alpha * beta * (w - z) / nu, rtol=1e-12, atol=1e-15)
    assert int(module.inner_step) == 0
    for p, a, zp in zip([p for _, p in module.trainable()], module.anchor.tensors(), module.inner_previous.tensors()):
        assert torch.equal(p, a) and torch.equal(zp, a)  # z_0 = z_{−1} = w_{t+1}
    assert not torch.equal(z_K[0], w_t[0])


def test_alexr2_evaluates_the_anchor_mid_loop():
    batch = gdro_batch(seed=5)
    module = build(ALEXR2, LinearScorer(), GroupDROCVaRLoss(ratio=0.5), batch, smoothing=0.05, inner_steps=5, independent_batches=False)
    fit(module, batch, 7)  # 1 outer step and 2 inner steps of the next loop
    assert int(module.inner_step) == 2
    module.eval()
    anchor_model = LinearScorer(3).double()
    anchor_model.load_state_dict(module.anchor.as_dict("model."))
    assert torch.equal(module(batch), anchor_model(batch["x"]))
    module.train()
    assert not torch.equal(module(batch), anchor_model(batch["x"]))


def test_alexr2_solves_the_toy_problem():
    lam, rho = 0.1, 5.0
    module = ALEXR2(Point(), ToyProblem("hinge", rho), data_sizes={"num_samples": 1}, state_dtype="float64",
                    smoothing=lam, envelope_smoothing=1.0, inner_lr=0.2, inner_steps=5, independent_batches=False,
                    optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=0.5)).double()
    fit(module, TOY_BATCH, 400)
    w = module.anchor.tensors()[0]
    assert float(w[0]) == pytest.approx(lam / (1 + lam), abs=1e-8)
    assert float(w[1]) == pytest.approx(0.0, abs=1e-8)


def test_bad_arguments_are_clear_errors():
    batch = fairness_batch()
    with pytest.raises(TypeError, match="needs\\s+its prox"):
        from fccolit.objectives.ap import AveragePrecisionSurrogate

        SONEX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes={"num_samples": 3, "num_positives": 1}, smoothing=0.1)
    with pytest.raises(ValueError, match="ema_weight"):
        build(SONEX, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch, ema_weight=0.0)
    with pytest.raises(ValueError, match="inner_steps"):
        build(ALEXR2, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch, inner_steps=0)
    module = build(ALEXR2, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch)
    with pytest.raises(ValueError, match="even per-device batch"):
        module.split_batch({k: v[:7] for k, v in batch.items()})
