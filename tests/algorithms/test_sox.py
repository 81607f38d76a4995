"""SOX and its family (fccolit/algorithms/sox.py): SOX, BSGD, SOAP, MOAP, MOAP-V1, MOAP-V2, ADAP.

SOX (Wang & Yang, ICML 2022): the estimator is the exact gradient of F when the state is exact (float64), and its
orderings. The presets (issue 5): every preset's estimator is exact with an exact state, the presets reduce to their
definitions step by step, the selective update / the MOAP decay, unbiasedness against BSGD's bias, SOX-boost and the
1/√t schedule. The AUPRC methods of Wang et al. (AISTATS 2022, issue 6), compared step by step with an independent,
eager float64 implementation of the paper's algorithms (every row of U decayed every step, hand-written momentum /
eq. (13) second moments), invariants of U, the reductions between the methods, 2-process DDP equals 1 process."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from builders import DDP_SCRIPTS, assert_rounding_close, drive, dual_batches, fit_batches, optimizer_of, toy_binary_data
from lightning.pytorch import Callback

from fccolit.algorithms.sox import ADAP, BSGD, MOAP, MOAPV1, MOAPV2, SOAP, SOX
from fccolit.callbacks.schedules import InverseSqrtSchedule
from fccolit.callbacks.sox_boost import SOXBoost
from fccolit.models import LinearScorer
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.optim import AdaptiveMomentum, Momentum


def make_sox(batch, objective=None, **kw):
    sizes = {
        "num_samples": int(batch["y"].numel()),
        "num_positives": int(batch["y"].sum()),
        "num_features": int(batch["x"].shape[1]),
    }
    torch.manual_seed(0)
    module = SOX(LinearScorer(), objective or AveragePrecisionSurrogate(), data_sizes=sizes, state_dtype="float64", **kw)
    return module.double()


def grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


@pytest.mark.parametrize(
    "objective",
    [
        AveragePrecisionSurrogate(),
        AveragePrecisionSurrogate(surrogate="sigmoid", scale=3.0),
        AveragePrecisionSurrogate(surrogate="logistic", score_transform="identity"),
        AveragePrecisionSurrogate(margin=0.3, project=True),
    ],
    ids=["squared_hinge", "sigmoid", "logistic_identity", "projected"],
)
@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_estimator_equals_autograd_gradient_of_F_with_exact_state(binary_batch, objective, u_for_gradient):
    module = make_sox(binary_batch, objective, ema_weight=1.0, u_for_gradient=u_for_gradient)
    true_grad = grads(module, module.objective.exact_value(module(binary_batch), binary_batch))
    # first step: first visit sets u to the (full-batch, hence exact) inner value
    est1 = grads(module, module.compositional_loss(module(binary_batch), binary_batch)[0])
    # second step at the same weights: the state holds g(w) exactly from the first step
    est2 = grads(module, module.compositional_loss(module(binary_batch), binary_batch)[0])
    assert torch.allclose(est1, true_grad, rtol=1e-10, atol=1e-12)
    assert torch.allclose(est2, true_grad, rtol=1e-10, atol=1e-12)
    assert true_grad.abs().max() > 1e-3  # not a vacuous comparison


def test_exact_objective_is_minus_smoothed_ap(binary_batch):
    """F from the objective equals −ÂP computed by a direct double loop over pairs (sum form)."""
    module = make_sox(binary_batch)
    obj = module.objective
    s = torch.sigmoid(module(binary_batch)).detach()
    y = binary_batch["y"]
    total = 0.0
    for i in torch.nonzero(y == 1).flatten():
        num = sum(float(obj.loss(s[j] - s[i])) for j in range(len(s)) if y[j] == 1)
        den = sum(float(obj.loss(s[j] - s[i])) for j in range(len(s)))
        total += num / den
    assert float(obj.exact_value(module(binary_batch), binary_batch).detach()) == pytest.approx(-total / int(y.sum()), rel=1e-12)


def test_previous_uses_the_stale_state_and_fresh_the_updated_one(binary_batch):
    """With a deliberately stale state the two orderings differ exactly as the formulas say."""
    out = {}
    for order in ("previous", "fresh"):
        module = make_sox(binary_batch, ema_weight=0.5, u_for_gradient=order)
        stale = torch.tensor([[-0.3, 0.9]], dtype=torch.float64).repeat(8, 1)
        module.state.value.copy_(stale)
        inner = module.objective.inner(module(binary_batch), binary_batch)
        u_expected = stale if order == "previous" else 0.5 * stale + 0.5 * inner.value.detach()
        w = module.objective.outer_grad(u_expected, {})
        expected = grads(module, (w * inner.value).sum(-1).mean())
        out[order] = grads(module, module.compositional_loss(module(binary_batch), binary_batch)[0])
        assert torch.allclose(out[order], expected, rtol=1e-12)
    assert not torch.allclose(out["previous"], out["fresh"])


def test_closed_form_outer_gradient_matches_autograd():
    obj = AveragePrecisionSurrogate()
    u = torch.rand(5, 2, dtype=torch.float64) + 0.1
    auto = super(AveragePrecisionSurrogate, obj).outer_grad(u, {})
    assert torch.allclose(obj.outer_grad(u, {}), auto)


def test_first_momentum_step_is_eta_beta_times_the_estimator(binary_batch):
    module = make_sox(binary_batch, ema_weight=1.0)
    w0 = [p.detach().clone() for p in module.model.parameters()]
    opt = Momentum(module.model.parameters(), lr=0.3, momentum_weight=0.2)
    loss = module.compositional_loss(module(binary_batch), binary_batch)[0]
    g = torch.autograd.grad(loss, list(module.model.parameters()))
    for p, gi in zip(module.model.parameters(), g):
        p.grad = gi
    opt.step()
    for p, p0, gi in zip(module.model.parameters(), w0, g):
        assert torch.allclose(p, p0 - 0.3 * 0.2 * gi)


def test_state_rows_follow_the_data_sizes(binary_batch):
    module = make_sox(binary_batch)
    assert module.state.value.shape == (8, 2)
    with pytest.raises(ValueError, match="needs data_sizes"):
        SOX(LinearScorer(4), AveragePrecisionSurrogate())
    with pytest.raises(ValueError, match="ema_weight"):
        make_sox(binary_batch, ema_weight=0.0)


def test_model_that_does_not_fit_the_data_is_a_clear_error(binary_batch):
    sizes = {"num_samples": 30, "num_positives": 8, "num_features": 4}
    with pytest.raises(ValueError, match="in_features=7 but the data has num_features=4"):
        SOX(LinearScorer(7), AveragePrecisionSurrogate(), data_sizes=sizes)


# ============================================================================ the presets (issue 5)
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- helpers
def sizes_of(x, y):
    return {"num_samples": len(y), "num_positives": int(y.sum()), "num_negatives": int((y == 0).sum()),
            "num_features": x.shape[1]}


def make_preset(cls, data_sizes, objective=None, optimizer=None, seed=0, **kw):
    torch.manual_seed(seed)
    module = cls(LinearScorer(bias=False), objective or AveragePrecisionSurrogate(margin=0.5), optimizer=optimizer,
                 data_sizes=data_sizes, state_dtype="float64", **kw)
    return module.double()


def flat_grad(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


PRESETS = {
    "SOX-previous": (SOX, {"u_for_gradient": "previous"}, False),
    "SOX-fresh": (SOX, {"u_for_gradient": "fresh"}, False),
    "BSGD": (BSGD, {}, False),
    "SOAP": (SOAP, {}, False),
    "MOAP": (MOAP, {}, False),
    "MOAPV1": (MOAPV1, {}, True),
    "MOAPV2": (MOAPV2, {}, True),
    "ADAP": (ADAP, {}, True),
}


# ---------------------------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_estimator_is_the_gradient_of_F_with_an_exact_state(binary_batch, name):
    """Full batch (B1 = all rows, inner set = all data): the first visit sets u = g(w) exactly (MOAP's n/B1 = 1,
    Π_Ω[g] = g), so G = ∇F; a second step at the same w with γ = 0.3 keeps u = g(w) and G = ∇F."""
    cls, kw, projected = PRESETS[name]
    sizes = sizes_of(binary_batch["x"], binary_batch["y"])
    if cls is not BSGD:
        kw = {**kw, "ema_weight": 1.0}
    module = make_preset(cls, sizes, AveragePrecisionSurrogate(margin=0.5, project=projected), **kw)
    true_grad = flat_grad(module, module.objective.exact_value(module(binary_batch), binary_batch))
    assert true_grad.abs().max() > 1e-3
    for gamma in (None, 0.3):
        if gamma is not None and cls is not BSGD:
            module.ema_weight = gamma
        est = flat_grad(module, module.compositional_loss(module(binary_batch), binary_batch)[0])
        assert torch.allclose(est, true_grad, rtol=1e-10, atol=1e-13), (name, gamma)
    inner = module.objective.inner(module(binary_batch), binary_batch)
    assert torch.allclose(module.state.values()[inner.index], inner.value.detach(), rtol=1e-12)


# ---------------------------------------------------------------------------------------------- reductions
def test_sox_with_gamma_1_beta_1_fresh_is_bsgd_step_by_step():
    """SOX(γ = 1, β = 1, fresh u) and BSGD take the same steps, and BSGD's G is the plug-in gradient
    ∇_w mean_i f(ĝ_i(w)) (autograd straight through f, no state) at every step."""
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 25)
    sizes = sizes_of(x, y)
    lr = 2.0
    sox = make_preset(SOX, sizes, optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=1.0), ema_weight=1.0,
               u_for_gradient="fresh")
    bsgd = make_preset(BSGD, sizes, optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=1.0))
    w = bsgd.model.net.weight.detach().clone()
    plug_in = []
    for batch in batches:  # the definition of BSGD, computed independently of the state machinery
        w = w.requires_grad_(True)
        inner = bsgd.objective.inner(batch["x"] @ w.t(), batch)
        loss = bsgd.objective.outer(inner.value, inner.context).mean()
        (g,) = torch.autograd.grad(loss, w)
        plug_in.append(g)
        w = (w - lr * g).detach()
    a, b = drive(sox, batches), drive(bsgd, batches)
    for t, (ra, rb, g) in enumerate(zip(a, b, plug_in)):
        assert torch.allclose(rb["G"], g, rtol=1e-10, atol=1e-14), t
        assert torch.allclose(ra["G"], rb["G"], rtol=1e-10, atol=1e-14), t
        assert torch.allclose(ra["w"], rb["w"], rtol=1e-10, atol=1e-13), t
    assert torch.allclose(b[-1]["w"], w, rtol=1e-9)
    assert (b[-1]["w"] - b[0]["w"]).abs().max() > 1e-2  # it moved


def test_sox_with_beta_1_fresh_is_soap_step_by_step():
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 25)
    sizes = sizes_of(x, y)
    opt = lambda p: Momentum(p, lr=1.5, momentum_weight=1.0)  # noqa: E731
    sox = make_preset(SOX, sizes, optimizer=opt, ema_weight=0.3, u_for_gradient="fresh")
    soap = make_preset(SOAP, sizes, optimizer=opt, ema_weight=0.3)
    for ra, rb in zip(drive(sox, batches), drive(soap, batches)):
        assert torch.equal(ra["w"], rb["w"]) and torch.equal(ra["u"].nan_to_num(-1), rb["u"].nan_to_num(-1))
    # and the ordering matters: the analysed "previous" ordering takes other steps
    prev = make_preset(SOX, sizes, optimizer=opt, ema_weight=0.3, u_for_gradient="previous")
    assert not torch.allclose(drive(prev, batches)[-1]["w"], ra["w"])


def test_unsampled_rows_never_change_in_sox_and_soap():
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    for cls in (SOX, SOAP):
        module = make_preset(cls, sizes_of(x, y), optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=1.0), ema_weight=0.4)
        before = module.state.values().clone()
        for t, record in enumerate(drive(module, batches)):
            sampled = batches[t]["pos_index"][batches[t]["pos_index"] >= 0]
            others = torch.ones(len(before), dtype=torch.bool)
            others[sampled] = False
            assert torch.equal(record["u"][others].nan_to_num(-7), before[others].nan_to_num(-7)), (cls, t)
            assert not torch.equal(record["u"][sampled], before[sampled].nan_to_num(-7))
            before = record["u"]


@pytest.mark.parametrize("scale", [True, False], ids=["n_over_B1", "decay_only"])
def test_moap_decays_unsampled_rows_by_exactly_1_minus_gamma(scale):
    """MOAP (Wang & Yang, ICML 2022, eq. (3)): unsampled visited rows are multiplied by 1 − γ (lazily: compared after
    reading), sampled rows become (1 − γ) u + γ (n/B1) ĝ (first visit: ĝ)."""
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    gamma, n, b1 = 0.2, int(y.sum()), 3
    module = make_preset(MOAP, sizes_of(x, y), optimizer=lambda p: Momentum(p, lr=1.0), ema_weight=gamma,
                  scale_by_n_over_B1=scale)
    s = n / b1 if scale else 1.0
    before = module.state.values().clone()
    for t, batch in enumerate(batches):
        inner = module.objective.inner(module(batch), batch)
        g = inner.value.detach()
        record = drive(module, [batch])[0]
        sampled = inner.index
        others = torch.ones(n, dtype=torch.bool)
        others[sampled] = False
        assert torch.allclose(record["u"][others], (1 - gamma) * before[others], rtol=1e-14, atol=0, equal_nan=True)
        first = torch.isnan(before[sampled, 0]).unsqueeze(-1)
        expected = torch.where(first, g, (1 - gamma) * before[sampled] + gamma * s * g)
        assert torch.allclose(record["u"][sampled], expected, rtol=1e-13), t
        before = record["u"]
    assert torch.isfinite(before).all()  # every row was visited and decays were applied


def test_moap_of_seed_001_is_moapv2_without_the_projection_requirement(binary_batch):
    sizes = sizes_of(binary_batch["x"], binary_batch["y"])
    projected = AveragePrecisionSurrogate(margin=0.5, project=True)
    v2 = make_preset(MOAPV2, sizes, projected)
    moap = make_preset(MOAP, sizes, AveragePrecisionSurrogate(margin=0.5, project=True))
    for attr in ("u_for_gradient", "decay_unsampled", "scale_by_n_over_B1", "ema_weight"):
        assert getattr(v2, attr) == getattr(moap, attr), attr
    with pytest.raises(ValueError, match="defines no Ω"):
        make_preset(MOAPV2, sizes, AveragePrecisionSurrogate())
    make_preset(MOAP, sizes, AveragePrecisionSurrogate())  # Wang & Yang's MOAP has no projection


# ---------------------------------------------------------------------------------------------- unbiasedness
class NegativeLogSumExp(FCCOObjective):
    """A toy FCCO problem written in a test: outer rows = positives, inner set = the negatives of the batch,
    ``g_i = mean_j exp(s_j − s_i)``, ``f = log`` (concave: the plug-in estimate is biased)."""

    inner_dim = 1
    state_rows = "num_positives"

    def inner(self, scores, batch):
        anchors = batch["pos_index"] >= 0
        s_pos, s_neg = scores[anchors], scores[~anchors]
        value = torch.exp(s_neg.unsqueeze(0) - s_pos.unsqueeze(1)).mean(1, keepdim=True)
        return InnerBatch(index=batch["pos_index"][anchors], value=value)

    def outer(self, u, context):
        return torch.log(u[:, 0])


def test_sox_estimator_is_unbiased_with_exact_u_and_bsgd_is_not():
    """Expectation over every (B1 = 2 of 4 positives) × (B2 = 2 of 6 negatives) batch, enumerated exactly."""
    x, y, pos_index = toy_binary_data(n=10, d=3, m=4, seed=3)
    sizes = sizes_of(x, y)
    sox = make_preset(SOX, sizes, NegativeLogSumExp(), u_for_gradient="previous")
    bsgd = make_preset(BSGD, sizes, NegativeLogSumExp())
    bsgd.load_state_dict(sox.state_dict())
    full = {"x": x, "y": y, "index": torch.arange(len(y)), "pos_index": pos_index}
    true_grad = flat_grad(sox, sox.objective.exact_value(sox(full), full))
    exact_u = sox.objective.inner(sox(full), full).value.detach()
    pos, neg = torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()
    means = {"sox": 0.0, "bsgd": 0.0}
    combos = list(itertools.product(itertools.combinations(pos.tolist(), 2), itertools.combinations(neg.tolist(), 2)))
    for p, q in combos:
        idx = torch.tensor(p + q)
        batch = {"x": x[idx], "y": y[idx], "index": idx, "pos_index": pos_index[idx]}
        sox.state.value.copy_(exact_u)  # u = g(w) exactly, before every draw
        means["sox"] += flat_grad(sox, sox.compositional_loss(sox(batch), batch)[0]) / len(combos)
        means["bsgd"] += flat_grad(bsgd, bsgd.compositional_loss(bsgd(batch), batch)[0]) / len(combos)
    assert torch.allclose(means["sox"], true_grad, rtol=1e-12, atol=1e-14)
    bias = (means["bsgd"] - true_grad).abs().max()
    assert bias > 1e-2 * true_grad.abs().max(), bias


# ---------------------------------------------------------------------------------------------- schedules
def flat(rows):
    return [v for row in rows for v in row]


class Recorder(Callback):
    """Records (lr, momentum_weight, ema_weight) as the optimizer step sees them, and the weights after it."""

    def __init__(self):
        self.values, self.weights = [], []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        g = optimizer.param_groups[0]
        self.values.append((g["lr"], g["momentum_weight"], pl_module.ema_weight))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.weights.append(pl_module.model.net.weight.detach().clone())


def test_sox_boost_halves_eta_beta_gamma_doubles_stages_and_carries_u_and_v_over():
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    eta, beta, gamma = 0.8, 0.4, 0.6
    opt = lambda p: Momentum(p, lr=eta, momentum_weight=beta)  # noqa: E731
    module = make_preset(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)
    boost, rec = SOXBoost(first_stage_steps=3, num_stages=3), Recorder()
    trainer = fit_batches(module, batches, [boost, rec], max_steps=100)
    assert trainer.global_step == 21 == boost.total_steps()  # 3 + 6 + 12 steps, then it stops
    expected = [(eta * f, beta * f, gamma * f) for f in [1.0] * 3 + [0.5] * 6 + [0.25] * 12]
    assert flat(rec.values) == pytest.approx(flat(expected), rel=1e-15)
    # the same trajectory by hand: one module, one optimizer, values set per stage, nothing reset in between
    manual = make_preset(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)

    def set_stage(m, o, t):
        lr, b, g = expected[t - 1]
        o.param_groups[0]["lr"], o.param_groups[0]["momentum_weight"], m.ema_weight = lr, b, g

    records = drive(manual, batches[:21], set_stage)
    for t, r in enumerate(records):
        assert torch.allclose(r["w"], rec.weights[t], rtol=1e-12, atol=1e-15), t
    assert torch.allclose(records[-1]["u"], module.state.values(), rtol=1e-12, equal_nan=True)
    # carrying over matters: restarting u and v at the second stage gives another trajectory
    first = drive(make_preset(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma), batches[:3], set_stage)
    fresh = make_preset(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)
    fresh.model.net.weight.data.copy_(first[-1]["w"])  # same w at the stage boundary, but u and v reset
    later = drive(fresh, batches[3:21], lambda m, o, t: set_stage(m, o, t + 3))
    assert not torch.allclose(later[-1]["w"], records[-1]["w"], rtol=1e-6)


def test_sox_boost_stage_arithmetic():
    boost = SOXBoost(first_stage_steps=4, growth=2.0)
    assert [boost.stage(t) for t in (1, 4, 5, 12, 13, 28, 29)] == [1, 1, 2, 2, 3, 3, 4]
    assert [boost.stage_length(k) for k in (1, 2, 3)] == [4, 8, 16]
    assert boost.total_steps() is None and SOXBoost(4, num_stages=2).total_steps() == 12
    assert boost.value("lr", 1.0, 13) == 0.25
    bad_args = ({"first_stage_steps": 0}, {"first_stage_steps": 2, "decay": 1.5}, {"first_stage_steps": 2, "growth": 0.5})
    for bad in bad_args:
        with pytest.raises(ValueError):
            SOXBoost(**bad)


def test_inverse_sqrt_schedule_values_tie_and_resume(tmp_path):
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 12)
    opt = lambda p: Momentum(p, lr=2.0, momentum_weight=0.5)  # noqa: E731
    module = make_preset(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5)
    rec = Recorder()
    fit_batches(module, batches, [InverseSqrtSchedule(), rec])
    expected = [(2.0 / math.sqrt(t), min(1.0, 0.5 / math.sqrt(t)), min(1.0, 0.5 / math.sqrt(t))) for t in range(1, 13)]
    assert flat(rec.values) == pytest.approx(flat(expected), rel=1e-15)
    # β0 ≠ β1 is refused when tied (the paper ties them)
    with pytest.raises(ValueError, match="β0 = β1"):
        fit_batches(make_preset(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.3), batches, [InverseSqrtSchedule()])
    # a run resumed from a checkpoint continues the schedule from the saved initial values (not the decayed lr)
    from lightning.pytorch.callbacks import ModelCheckpoint

    ckpt = ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=5, save_top_k=-1)
    full = make_preset(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5)
    fit_batches(full, batches, [InverseSqrtSchedule(), ckpt], enable_checkpointing=True)
    resumed, rec2 = make_preset(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5), Recorder()
    # the DataLoader restarts from its first batch on resume: feed the batches the full run saw after step 5
    fit_batches(resumed, batches[5:] + batches[:5], [InverseSqrtSchedule(), rec2], max_steps=12,
        ckpt_path=str(tmp_path / "step=5.ckpt"))
    assert flat(rec2.values) == pytest.approx(flat(expected[5:]), rel=1e-15)
    assert torch.allclose(resumed.model.net.weight, full.model.net.weight, rtol=1e-12)
    assert torch.allclose(resumed.state.values(), full.state.values(), rtol=1e-12, equal_nan=True)


def test_schedule_needs_fccolit_optimizer_weights():
    x, y, pos_index = toy_binary_data()
    module = make_preset(SOX, sizes_of(x, y), optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    with pytest.raises(ValueError, match="no 'momentum_weight'"):
        fit_batches(module, dual_batches(x, y, pos_index, 2), [InverseSqrtSchedule(tie_weights=False)])


# ---------------------------------------------------------------------------------------------- checks
def test_presets_refuse_optimizers_that_are_not_theirs():
    x, y, _ = toy_binary_data()
    sizes = sizes_of(x, y)
    with pytest.raises(ValueError, match="BSGD takes plain SGD"):
        optimizer_of(make_preset(BSGD, sizes, optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=0.1)))
    with pytest.raises(ValueError, match="SOAP \\(mode='sgd'\\)"):
        optimizer_of(make_preset(SOAP, sizes, optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=0.5)))
    with pytest.raises(ValueError, match="bias-corrected Adam"):
        optimizer_of(make_preset(SOAP, sizes, mode="adam", optimizer=lambda p: AdaptiveMomentum(p, lr=0.1)))
    with pytest.raises(ValueError, match="without bias correction"):
        optimizer_of(make_preset(ADAP, sizes, AveragePrecisionSurrogate(project=True),
                          optimizer=lambda p: AdaptiveMomentum(p, lr=0.1, bias_correction=True)))
    with pytest.raises(ValueError, match="needs decay_unsampled"):
        make_preset(SOX, sizes, scale_by_n_over_B1=True)
    # the accepted equivalents
    optimizer_of(make_preset(BSGD, sizes, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)))
    optimizer_of(make_preset(SOAP, sizes, mode="adam", optimizer=lambda p: torch.optim.Adam(p, lr=0.1)))
    assert isinstance(optimizer_of(make_preset(SOAP, sizes, mode="amsgrad")), AdaptiveMomentum)


# ---------------------------------------------------------------------------------------------- presets
# The SOX-family configs run in tests/cli/test_configs.py.


def test_presets_take_back_their_defining_arguments_and_refuse_others(tmp_path):
    """A checkpoint's hyper-parameters hold the defining values (γ = 1 for BSGD, ...): they are accepted, so
    ``load_from_checkpoint`` rebuilds the preset; other values name the general class."""
    x, y, _ = toy_binary_data()
    sizes = sizes_of(x, y)
    for cls, objective in ((BSGD, AveragePrecisionSurrogate()), (SOAP, AveragePrecisionSurrogate()), (MOAP, AveragePrecisionSurrogate()),
                           (MOAPV1, AveragePrecisionSurrogate(project=True)), (MOAPV2, AveragePrecisionSurrogate(project=True)),
                           (ADAP, AveragePrecisionSurrogate(project=True))):
        module = make_preset(cls, sizes, objective)
        hparams = {k: v for k, v in module.hparams.items() if k != "data_sizes"}
        again = cls(LinearScorer(bias=False), objective, data_sizes=sizes, **hparams)
        for attr in ("ema_weight", "u_for_gradient", "decay_unsampled", "scale_by_n_over_B1"):
            assert getattr(again, attr) == getattr(module, attr), (cls, attr)
    with pytest.raises(ValueError, match="BSGD is defined by ema_weight=1.0"):
        make_preset(BSGD, sizes, ema_weight=0.5)
    with pytest.raises(ValueError, match="MOAPV2 is defined by scale_by_n_over_B1=True"):
        make_preset(MOAPV2, sizes, AveragePrecisionSurrogate(project=True), scale_by_n_over_B1=False)
    with pytest.raises(ValueError, match="SOAP is defined by u_for_gradient='fresh'"):
        make_preset(SOAP, sizes, u_for_gradient="previous")


def test_adap_and_soap_take_the_bias_correction_they_declare():
    x, y, _ = toy_binary_data()
    sizes = sizes_of(x, y)
    corrected = lambda p: AdaptiveMomentum(p, lr=0.1, bias_correction=True)  # noqa: E731
    plain = lambda p: AdaptiveMomentum(p, lr=0.1)  # noqa: E731
    optimizer_of(make_preset(ADAP, sizes, AveragePrecisionSurrogate(project=True), bias_correction=True, optimizer=corrected))
    optimizer_of(make_preset(SOAP, sizes, mode="adam", bias_correction=False, optimizer=plain))
    with pytest.raises(ValueError, match="with bias correction"):
        optimizer_of(make_preset(ADAP, sizes, AveragePrecisionSurrogate(project=True), bias_correction=True, optimizer=plain))
    with pytest.raises(ValueError, match="uncorrected Adam"):
        optimizer_of(make_preset(SOAP, sizes, mode="adam", bias_correction=False, optimizer=corrected))
    default = optimizer_of(make_preset(ADAP, sizes, AveragePrecisionSurrogate(project=True)))
    assert default.param_groups[0]["second_moment_weight"] == ADAP.default_second_moment_weight
    assert not default.param_groups[0]["bias_correction"]


def test_initial_state_is_refused_where_the_state_has_its_own_rule():
    from fccolit.algorithms.song import SOLC
    from fccolit.objectives import SOLCListwiseCELoss

    with pytest.raises(ValueError, match="does not take initial_state"):
        SOLC(torch.nn.Linear(2, 1), SOLCListwiseCELoss(), data_sizes={"num_pairs": 4, "num_queries": 2, "num_items": 3},
             initial_state="zero")


# ============================================================================ AUPRC methods (issue 6)
MARGIN = 0.5


# ---------------------------------------------------------------------------------------------- data and drivers


def auprc_sizes_of(x, y):
    return {"num_samples": len(y), "num_positives": int(y.sum()), "num_features": x.shape[1]}


def make_auprc(cls, x, y, optimizer, project=True, **kw):
    torch.manual_seed(0)
    module = cls(LinearScorer(bias=False), AveragePrecisionSurrogate(margin=MARGIN, project=project), optimizer=optimizer,
                 data_sizes=auprc_sizes_of(x, y), state_dtype="float64", **kw)
    return module.double()


def drive_steps(module, batches, before_step=None):
    """The module's own step outside Lightning (:func:`builders.drive`); returns ``(weights [d], U)`` after every
    step, the form of :func:`reference`."""
    return [(record["w"].flatten(), record["u"]) for record in drive(module, batches, before_step)]


class WeightRecorder(Callback):
    def __init__(self):
        self.steps = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append((pl_module.model.net.weight.detach().flatten().clone(), pl_module.state.values().clone()))


def fit_auprc(module, batches, callbacks=()):
    """A Lightning run over ``batches`` (:func:`builders.fit_batches`); returns ``(weights [d], U)`` after every
    step."""
    rec = WeightRecorder()
    fit_batches(module, batches, [*callbacks, rec])
    return rec.steps


# ---------------------------------------------------------------------------------------------- the reference
def omega(n, m, margin=MARGIN):
    """Ω on the mean scale for sigmoid scores and the squared hinge (C = γ², M = (1 + γ)²) with the batch-mean
    inner estimate: Wang et al.'s box ``u1 ≤ M m/n, C/n ≤ u2 ≤ M``, except that a dual batch may hold more than the
    share m/n of positives, so ``u1 ≤ M`` (AveragePrecisionSurrogate's docstring)."""
    c, big_m = margin**2, (1 + margin) ** 2
    lower = torch.tensor([-math.inf, c / n], dtype=torch.float64)
    upper = torch.tensor([big_m, big_m], dtype=torch.float64)
    return lower, upper


def reference(x, y, batches, w0, *, weights, opt_step, decay, scale, project=True, fresh=True, hits=None,
              initial=None):
    """Wang et al.'s algorithms written out eagerly. ``weights(t)`` gives β0 at step t; ``opt_step(w, G, t)`` the
    optimizer; ``initial``: U₁ as a ``[2]`` row (None: the first visit sets u := ĝ). Returns the weights and U after
    every step."""
    n, m = len(y), int(y.sum())
    lower, upper = omega(n, m)

    def proj(u):
        if not project:
            return u
        out = torch.maximum(torch.minimum(u, upper), lower)
        if hits is not None:
            hits["upper"] |= bool((u > upper).any())
            hits["lower"] |= bool((u < lower).any())
        return out

    U = torch.full((m, 2), math.nan, dtype=torch.float64) if initial is None else initial.repeat(m, 1)
    w = w0.clone()
    out = []
    for t, b in enumerate(batches, 1):
        beta0 = weights(t)
        wv = w.clone().requires_grad_(True)
        s = torch.sigmoid(b["x"] @ wv)
        anchors = b["pos_index"] >= 0
        rows = b["pos_index"][anchors]
        ell = torch.relu(MARGIN + s.unsqueeze(0) - s[anchors].unsqueeze(1)).square()  # ℓ(s_j − s_i), [B, |S|]
        g_tilde = torch.stack([(ell * b["y"].double()).mean(1), ell.mean(1)], dim=-1)
        g = g_tilde.detach()
        old = U[rows].clone()
        first = torch.isnan(old[:, :1])
        factor = m / len(rows) if scale else 1.0
        if decay:  # every row: Π_Ω[(1 − β0) U_j]; the sampled rows are overwritten below
            U = proj((1 - beta0) * U)
        new = proj(torch.where(first, g, (1 - beta0) * old + beta0 * factor * g))
        U[rows] = new
        u = new if fresh else torch.where(first, g, old)
        grad_f = torch.stack([-1.0 / u[:, 1], u[:, 0] / u[:, 1].square()], dim=-1)
        (G,) = torch.autograd.grad((grad_f * g_tilde).sum(-1).mean(), wv)
        w = opt_step(w, G, t)
        out.append((w.clone(), U.clone()))
    return out


def momentum_step(lr, beta):
    v = {}

    def step(w, G, t):
        v["v"] = (1 - beta(t)) * v.get("v", torch.zeros_like(w)) + beta(t) * G
        return w - lr(t) * v["v"]

    return step


def adap_step(variant, lr, beta1, beta2=0.001, delta=1e-8, c_l=None, c_u=None, clipped=None):
    """Algorithm 3 lines 7–9 with eq. (13), no bias correction."""
    st = {"t": 0}

    def step(w, G, t):
        z = torch.zeros_like(w)
        st["m"] = (1 - beta1(t)) * st.get("m", z) + beta1(t) * G
        if variant == "adam":
            st["v"] = (1 - beta2) * st.get("v", z) + beta2 * G**2
        elif variant == "amsgrad":
            st["vp"] = (1 - beta2) * st.get("vp", z) + beta2 * G**2
            st["v"] = torch.maximum(st.get("v", z), st["vp"])
        elif variant == "adagrad":
            st["sum"] = st.get("sum", z) + G**2
            st["v"] = st["sum"] / (t + 1)  # v_{t+1} = (1/(t+1)) Σ_{i≤t} ∇̃_i², as printed
        else:
            st["vp"] = (1 - beta2) * st.get("vp", z) + beta2 * G**2
            st["v"] = st["vp"].clamp(1 / c_u**2, 1 / c_l**2)
            clipped["any"] |= bool(((st["vp"] < 1 / c_u**2) | (st["vp"] > 1 / c_l**2)).any())
        return w - lr(t) * st["m"] / (st["v"].sqrt() + delta)

    return step


def const(value):
    return lambda t: value


def inv_sqrt(value, clip=True):
    return lambda t: min(1.0, value / math.sqrt(t)) if clip else value / math.sqrt(t)


def assert_same(steps, ref, rtol=1e-9, atol=1e-12):
    assert len(steps) == len(ref)
    for t, ((w, u), (w_ref, u_ref)) in enumerate(zip(steps, ref), 1):
        assert torch.allclose(w, w_ref, rtol=rtol, atol=atol), (t, (w - w_ref).abs().max())
        assert torch.allclose(u, u_ref, rtol=rtol, atol=atol, equal_nan=True), (t, (u - u_ref).nan_to_num().abs().max())


# ---------------------------------------------------------------------------------------------- MOAP-V2 / lazy
@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt"])
def test_moapv2_lazy_decay_equals_the_eager_algorithm_over_many_steps(schedule):
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 200, positives=1, negatives=7)  # m/B = 10
    module = make_auprc(MOAPV2, x, y, lambda p: Momentum(p, lr=3.0, momentum_weight=0.5), ema_weight=0.5)
    w0 = module.model.net.weight.detach().flatten().clone()
    lr, beta = (const(3.0), const(0.5)) if schedule == "constant" else (inv_sqrt(3.0, clip=False), inv_sqrt(0.5))
    callbacks = [InverseSqrtSchedule()] if schedule == "inverse_sqrt" else []
    steps = fit_auprc(module, batches, callbacks)
    hits = {"upper": False, "lower": False}
    ref = reference(x, y, batches, w0, weights=beta, opt_step=momentum_step(lr, beta), decay=True, scale=True,
                    hits=hits)
    assert_same(steps, ref)
    if schedule == "constant":  # the projection was active on both sides: fresh rows (1 − β0)u + β0 (m/B) ĝ
        assert hits["upper"] and hits["lower"], hits  # exceeded M, rows decayed between visits reached C/n
    assert (steps[-1][0] - w0).abs().max() > 0.1


def test_moapv2_decays_every_unsampled_row_each_step():
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    module = make_auprc(MOAPV2, x, y, lambda p: Momentum(p, lr=1.0), ema_weight=0.2)
    steps = drive_steps(module, batches)
    lower, _ = omega(len(y), int(y.sum()))
    for t in range(1, len(batches)):
        sampled = batches[t]["pos_index"][batches[t]["pos_index"] >= 0]
        others = torch.ones(int(y.sum()), dtype=torch.bool)
        others[sampled] = False
        before, after = steps[t - 1][1][others], steps[t][1][others]
        expected = torch.maximum(0.8 * before, lower)
        assert torch.allclose(after, expected, rtol=1e-14, equal_nan=True), t


@pytest.mark.parametrize("cls", [MOAPV2, ADAP])
def test_projected_zero_start_is_the_printed_algorithm(cls):
    """U₁ = Π_Ω[0] (Algorithms 2–3 as printed): the first visit of a row takes Π_Ω[(1 − β0)U₁ + β0 (m/B) ĝ], so the
    first ∇f is scaled by the m/B factor; the module equals the eager reference started at U₁."""
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 60, positives=2, negatives=6)
    opt = (lambda p: Momentum(p, lr=1.0, momentum_weight=0.3)) if cls is MOAPV2 else (
        lambda p: AdaptiveMomentum(p, lr=0.05, momentum_weight=0.3, second_moment_weight=0.1))
    module = make_auprc(cls, x, y, opt, ema_weight=0.3, initial_state="projected_zero")
    w0 = module.model.net.weight.detach().flatten().clone()
    steps = drive_steps(module, batches)
    lower, upper = omega(len(y), int(y.sum()))
    start = torch.maximum(torch.minimum(torch.zeros(2, dtype=torch.float64), upper), lower)
    step = momentum_step(const(1.0), const(0.3)) if cls is MOAPV2 else adap_step("adam", const(0.05), const(0.3), 0.1)
    ref = reference(x, y, batches, w0, weights=const(0.3), opt_step=step, decay=True, scale=True, initial=start)
    assert_same(steps, ref)
    # the first estimate would have given another state (u := ĝ, without the factor) and another trajectory
    other = drive_steps(make_auprc(cls, x, y, opt, ema_weight=0.3), batches)
    assert (other[0][1] - steps[0][1]).nan_to_num().abs().max() > 1e-3
    assert (other[-1][0] - steps[-1][0]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------- ADAP
@pytest.mark.parametrize("variant", ["adam", "amsgrad", "adagrad", "adabound"])
def test_adap_step_equals_its_formula(variant):
    """ADAP trained by Lightning (with the 1/√t schedule of η and β0 = β1) equals Algorithm 3 with eq. (13)."""
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 40)
    bounds = {"bound_low": 0.5, "bound_high": 5.0} if variant == "adabound" else {}
    module = make_auprc(ADAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.3, momentum_weight=0.4, second_moment=variant,
                                                         **bounds), ema_weight=0.4)
    w0 = module.model.net.weight.detach().flatten().clone()
    steps = fit_auprc(module, batches, [InverseSqrtSchedule()])
    clipped = {"any": False}
    step = adap_step(variant, inv_sqrt(0.3, clip=False), inv_sqrt(0.4), c_l=0.5, c_u=5.0, clipped=clipped)
    ref = reference(x, y, batches, w0, weights=inv_sqrt(0.4), opt_step=step, decay=True, scale=True)
    assert_same(steps, ref)
    if variant == "adabound":
        assert clipped["any"]
    if variant == "amsgrad":  # v is element-wise non-decreasing
        module2 = make_auprc(ADAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.3, second_moment="amsgrad"))
        opt, prev = optimizer_of(module2), None
        for b in batches[:10]:
            loss, _ = module2.compositional_loss(module2(b), b)
            opt.zero_grad(), loss.backward(), opt.step()
            v = opt.state[module2.model.net.weight]["second_moment"].clone()
            assert prev is None or bool((v >= prev).all())
            prev = v


# ---------------------------------------------------------------------------------------------- SOAP
@pytest.mark.parametrize("mode", ["sgd", "adam", "amsgrad"])
def test_soap_equals_eq_5_with_sgd_or_torch_adam(mode):
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 40)
    if mode == "sgd":
        module = make_auprc(SOAP, x, y, lambda p: Momentum(p, lr=2.0, momentum_weight=1.0), project=False, ema_weight=0.6)
    else:
        module = make_auprc(SOAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.05, second_moment=mode, bias_correction=True),
                      project=False, ema_weight=0.6, mode=mode)
    w0 = module.model.net.weight.detach().flatten().clone()
    if mode == "sgd":
        opt_step = lambda w, G, t: w - 2.0 * G  # noqa: E731
    else:
        param = torch.nn.Parameter(w0.clone())
        torch_opt = torch.optim.Adam([param], lr=0.05, amsgrad=mode == "amsgrad")

        def opt_step(w, G, t):
            param.data.copy_(w)
            param.grad = G.clone()
            torch_opt.step()
            return param.detach().clone()

    ref = reference(x, y, batches, w0, weights=const(0.6), opt_step=opt_step, decay=False, scale=False,
                    project=False)
    assert_same(fit_auprc(module, batches), ref)


# ---------------------------------------------------------------------------------------------- reductions
def test_moapv1_equals_its_algorithm_and_with_B_equal_m_equals_moapv2():
    x, y, pos_index = toy_binary_data()
    m = int(y.sum())
    opt = lambda p: Momentum(p, lr=2.0, momentum_weight=0.3)  # noqa: E731
    partial = dual_batches(x, y, pos_index, 30)
    v1 = make_auprc(MOAPV1, x, y, opt, ema_weight=0.7)
    w0 = v1.model.net.weight.detach().flatten().clone()
    ref = reference(x, y, partial, w0, weights=const(0.7), opt_step=momentum_step(const(2.0), const(0.3)),
                    decay=False, scale=False)
    assert_same(drive_steps(v1, partial), ref)
    full = dual_batches(x, y, pos_index, 30, positives=m, negatives=8)  # B = m: every positive, every step
    a = drive_steps(make_auprc(MOAPV1, x, y, opt, ema_weight=0.7), full)
    b = drive_steps(make_auprc(MOAPV2, x, y, opt, ema_weight=0.7), full)
    assert_same(a, b, rtol=1e-13, atol=1e-15)
    # with B < m they differ (V2 decays and scales)
    assert not torch.allclose(drive_steps(make_auprc(MOAPV2, x, y, opt, ema_weight=0.7), partial)[-1][0], ref[-1][0])


@pytest.mark.parametrize("project", [True, False], ids=["with_omega", "without_omega"])
def test_moapv1_with_beta1_1_is_soap(project):
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    opt = lambda p: Momentum(p, lr=2.0, momentum_weight=1.0)  # noqa: E731
    v1 = make_auprc(MOAPV1, x, y, opt, project=project, ema_weight=0.6, require_projection=project)
    soap = make_auprc(SOAP, x, y, opt, project=project, ema_weight=0.6)
    assert_same(drive_steps(v1, batches), drive_steps(soap, batches), rtol=0, atol=0)


def test_moapv1_with_full_batches_and_weights_1_is_gradient_descent_on_F():
    """β0 = β1 = 1, B = m and S = D make_auprc MOAP-V1 exact gradient descent on F (Wang et al., Algorithm 1)."""
    x, y, pos_index = toy_binary_data(n=30, m=8)
    full = {"x": x, "y": y, "index": torch.arange(len(y)), "pos_index": pos_index}
    module = make_auprc(MOAPV1, x, y, lambda p: Momentum(p, lr=5.0, momentum_weight=1.0), ema_weight=1.0)
    w = module.model.net.weight.detach().clone()
    steps = drive_steps(module, [full] * 10)
    for t in range(10):
        w = w.requires_grad_(True)
        F = module.objective.exact_value(x @ w.t(), full)
        (grad,) = torch.autograd.grad(F, w)
        w = (w - 5.0 * grad).detach()
        assert torch.allclose(steps[t][0], w.flatten(), rtol=1e-10, atol=1e-13), t
    assert (steps[-1][0] - steps[0][0]).abs().max() > 1e-2


# ---------------------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("cls", [MOAPV1, MOAPV2, ADAP])
def test_U_stays_in_omega_with_0_le_u1_le_u2(cls):
    x, y, pos_index = toy_binary_data()
    n, m = len(y), int(y.sum())
    batches = dual_batches(x, y, pos_index, 300, positives=1, negatives=7)  # m/B = 10: inflated fresh rows
    optimizer = (lambda p: AdaptiveMomentum(p, lr=0.5, momentum_weight=0.9)) if cls is ADAP else \
        (lambda p: Momentum(p, lr=5.0, momentum_weight=0.9))
    module = make_auprc(cls, x, y, optimizer, ema_weight=0.9)
    lower, upper = omega(n, m)
    assert torch.allclose(module.state.lower, lower) and torch.allclose(module.state.upper, upper)
    at_bound = {"u2_upper": False, "u2_lower": False}
    for _, u in drive_steps(module, batches):
        u = u[~torch.isnan(u[:, 0])]
        assert torch.isfinite(u).all()
        assert bool((u <= upper).all()) and bool((u >= lower).all())
        assert bool((u[:, 0] >= 0).all()) and bool((u[:, 0] <= u[:, 1] * (1 + 1e-15)).all())
        at_bound["u2_upper"] |= bool((u[:, 1] == upper[1]).any())
        at_bound["u2_lower"] |= bool((u[:, 1] == lower[1]).any())
    assert module.state.visited().all()
    if cls is not MOAPV1:  # the inflated (m/B) rows hit the upper bound, the decayed ones the floor C/n
        assert all(at_bound.values()), at_bound


# ---------------------------------------------------------------------------------------------- DDP
SCRIPT = DDP_SCRIPTS / "ddp_run_family.py"
STEPS = 21


def ddp(*runs: tuple[Path, str, int, tuple[str, ...]]) -> list[list[dict]]:
    """Launch the runs ``(out, algo, devices, extra args)`` concurrently; every rank's result of each."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = []
    for out, algo, devices, extra in runs:
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(SCRIPT), "--algo", algo, "--devices", str(devices), "--max-steps", str(STEPS),
               "--out", str(out), *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = []
    for proc, (out, _, devices, _) in zip(procs, runs):
        _, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-4000:]
        results.append([torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)])
    return results


def tensors(result: dict) -> dict[str, torch.Tensor]:
    out = {k: v.nan_to_num(-123.0) for k, v in result["module"].items() if v.is_floating_point()}
    for k, st in result["optimizer"]["state"].items():
        out.update({f"optimizer.{k}.{name}": v for name, v in st.items() if torch.is_tensor(v) and v.numel() > 1})
    return out


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp_family")
    algos = ("moapv2", "adap", "adap_multilabel", "moap_local")
    plan = [(root / a / "single", a, 1, ()) for a in algos] + [(root / a / "double", a, 2, ("--save-every", "7"))
                                                               for a in algos]
    done = ddp(*plan)
    runs = {a: (done[i], done[i + len(algos)]) for i, a in enumerate(algos)}
    (resumed,) = ddp((root / "adap" / "double_resumed", "adap", 2, ("--resume", str(root / "adap" / "double" /
                                                                                   "step=14.ckpt"))))
    return runs, resumed


@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["moapv2", "adap", "adap_multilabel", "moap_local"])
def test_two_processes_equal_one_process(ddp_runs, algo):
    single, double = ddp_runs[0][algo]
    assert single[0]["step"] == double[0]["step"] == STEPS
    one, two, other_rank = tensors(single[0]), tensors(double[0]), tensors(double[1])
    assert "state.log_decay_total" in one and "state.log_decay_mark" in one
    assert float(one["state.log_decay_total"]) < -0.5  # the decay counters moved
    for k in one:
        assert torch.equal(two[k], other_rank[k]), k  # identical on every rank
        assert_rounding_close(one[k], two[k], k)
    assert single[0]["ema_weight"] == double[0]["ema_weight"] == double[1]["ema_weight"]
    for step, (_, _, indices) in single[0]["trace"].items():
        assert sorted(double[0]["trace"][step][2] + double[1]["trace"][step][2]) == sorted(indices)


@pytest.mark.ddp
@pytest.mark.slow
def test_adap_resumes_mid_run_to_the_same_trajectory_under_ddp(ddp_runs):
    runs, resumed = ddp_runs
    full = runs["adap"][1]
    for r in range(2):
        a, b = tensors(full[r]), tensors(resumed[r])
        for k in a:
            assert torch.equal(a[k], b[k]), (r, k)
        assert resumed[r]["schedule"] == full[r]["schedule"]  # the schedule's initial values were restored


# The LIBSVM configs (and soap.yaml's Adam variant) run in tests/cli/test_configs.py.
