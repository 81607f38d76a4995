"""ALEXR2 (Chen et al., NeurIPS 2025, Algorithm 2): the dual step, the inner loop's prox point, the outer step, the
anchor in evaluation, the toy problem (all float64)."""

import math
import warnings

import numpy as np
import pytest
import torch
from nonsmooth_problems import TOY_BATCH, Point, ToyProblem, build, fairness_batch, gdro_batch, median_group_loss
from lightning.pytorch import Callback, Trainer
from scipy.optimize import minimize, minimize_scalar

from fccolit.algorithms.alexr2 import ALEXR2
from fccolit.data import TensorDictDataset
from fccolit.datamodules.base import FCCODataModule
from fccolit.models import MLP, LinearScorer
from fccolit.objectives.constrained import GroupDROCVaRLoss, ROCFairnessAUCObjective
from fccolit.optim import Momentum
from fccolit.samplers.base import RankAwareBatchSampler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*LeafSpec.*")

D = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

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
    with pytest.raises(ValueError, match="inner_steps"):
        build(ALEXR2, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch, inner_steps=0)
    module = build(ALEXR2, MLP(hidden=[3]), ROCFairnessAUCObjective(), batch)
    with pytest.raises(ValueError, match="even per-device batch"):
        module.split_batch({k: v[:7] for k, v in batch.items()})
