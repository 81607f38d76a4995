"""The outer functions of non-smooth FCCO (fccolit/objectives/nonsmooth.py): values, proxes, Moreau envelopes and
their gradients equal their closed forms and numerical definitions (float64)."""

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize, minimize_scalar

from fccolit.objectives.nonsmooth import GapPenalty, Hinge, SmoothedHinge, SquaredHinge, make_penalty

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
