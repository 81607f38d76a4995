"""The SOX family (issue 5): every preset's estimator is exact with an exact state, the presets reduce to their
definitions step by step, the selective update / the MOAP decay, unbiasedness against BSGD's bias, SOX-boost and
the 1/√t schedule, and the SOX-family LIBSVM configs under fast_dev_run. All float64."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
from builders import drive, dual_batches, fit_batches, optimizer_of, toy_binary_data
from lightning.pytorch import Callback

from fccolit.algorithms.sox import ADAP, BSGD, MOAP, MOAPV1, MOAPV2, SOAP, SOX
from fccolit.callbacks.schedules import InverseSqrtSchedule
from fccolit.callbacks.sox_boost import SOXBoost
from fccolit.models import LinearScorer
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.optim import AdaptiveMomentum, Momentum

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- helpers
def sizes_of(x, y):
    return {"num_samples": len(y), "num_positives": int(y.sum()), "num_negatives": int((y == 0).sum()),
            "num_features": x.shape[1]}


def make(cls, data_sizes, objective=None, optimizer=None, seed=0, **kw):
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
    module = make(cls, sizes, AveragePrecisionSurrogate(margin=0.5, project=projected), **kw)
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
    sox = make(SOX, sizes, optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=1.0), ema_weight=1.0,
               u_for_gradient="fresh")
    bsgd = make(BSGD, sizes, optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=1.0))
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
    sox = make(SOX, sizes, optimizer=opt, ema_weight=0.3, u_for_gradient="fresh")
    soap = make(SOAP, sizes, optimizer=opt, ema_weight=0.3)
    for ra, rb in zip(drive(sox, batches), drive(soap, batches)):
        assert torch.equal(ra["w"], rb["w"]) and torch.equal(ra["u"].nan_to_num(-1), rb["u"].nan_to_num(-1))
    # and the ordering matters: the analysed "previous" ordering takes other steps
    prev = make(SOX, sizes, optimizer=opt, ema_weight=0.3, u_for_gradient="previous")
    assert not torch.allclose(drive(prev, batches)[-1]["w"], ra["w"])


def test_unsampled_rows_never_change_in_sox_and_soap():
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    for cls in (SOX, SOAP):
        module = make(cls, sizes_of(x, y), optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=1.0), ema_weight=0.4)
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
    module = make(MOAP, sizes_of(x, y), optimizer=lambda p: Momentum(p, lr=1.0), ema_weight=gamma,
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
    v2 = make(MOAPV2, sizes, projected)
    moap = make(MOAP, sizes, AveragePrecisionSurrogate(margin=0.5, project=True))
    for attr in ("u_for_gradient", "decay_unsampled", "scale_by_n_over_B1", "ema_weight"):
        assert getattr(v2, attr) == getattr(moap, attr), attr
    with pytest.raises(ValueError, match="defines no Ω"):
        make(MOAPV2, sizes, AveragePrecisionSurrogate())
    make(MOAP, sizes, AveragePrecisionSurrogate())  # Wang & Yang's MOAP has no projection


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
    sox = make(SOX, sizes, NegativeLogSumExp(), u_for_gradient="previous")
    bsgd = make(BSGD, sizes, NegativeLogSumExp())
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
    module = make(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)
    boost, rec = SOXBoost(first_stage_steps=3, num_stages=3), Recorder()
    trainer = fit_batches(module, batches, [boost, rec], max_steps=100)
    assert trainer.global_step == 21 == boost.total_steps()  # 3 + 6 + 12 steps, then it stops
    expected = [(eta * f, beta * f, gamma * f) for f in [1.0] * 3 + [0.5] * 6 + [0.25] * 12]
    assert flat(rec.values) == pytest.approx(flat(expected), rel=1e-15)
    # the same trajectory by hand: one module, one optimizer, values set per stage, nothing reset in between
    manual = make(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)

    def set_stage(m, o, t):
        lr, b, g = expected[t - 1]
        o.param_groups[0]["lr"], o.param_groups[0]["momentum_weight"], m.ema_weight = lr, b, g

    records = drive(manual, batches[:21], set_stage)
    for t, r in enumerate(records):
        assert torch.allclose(r["w"], rec.weights[t], rtol=1e-12, atol=1e-15), t
    assert torch.allclose(records[-1]["u"], module.state.values(), rtol=1e-12, equal_nan=True)
    # carrying over matters: restarting u and v at the second stage gives another trajectory
    first = drive(make(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma), batches[:3], set_stage)
    fresh = make(SOX, sizes_of(x, y), optimizer=opt, ema_weight=gamma)
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
    module = make(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5)
    rec = Recorder()
    fit_batches(module, batches, [InverseSqrtSchedule(), rec])
    expected = [(2.0 / math.sqrt(t), min(1.0, 0.5 / math.sqrt(t)), min(1.0, 0.5 / math.sqrt(t))) for t in range(1, 13)]
    assert flat(rec.values) == pytest.approx(flat(expected), rel=1e-15)
    # β0 ≠ β1 is refused when tied (the paper ties them)
    with pytest.raises(ValueError, match="β0 = β1"):
        fit_batches(make(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.3), batches, [InverseSqrtSchedule()])
    # a run resumed from a checkpoint continues the schedule from the saved initial values (not the decayed lr)
    from lightning.pytorch.callbacks import ModelCheckpoint

    ckpt = ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=5, save_top_k=-1)
    full = make(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5)
    fit_batches(full, batches, [InverseSqrtSchedule(), ckpt], enable_checkpointing=True)
    resumed, rec2 = make(MOAP, sizes_of(x, y), optimizer=opt, ema_weight=0.5), Recorder()
    # the DataLoader restarts from its first batch on resume: feed the batches the full run saw after step 5
    fit_batches(resumed, batches[5:] + batches[:5], [InverseSqrtSchedule(), rec2], max_steps=12,
        ckpt_path=str(tmp_path / "step=5.ckpt"))
    assert flat(rec2.values) == pytest.approx(flat(expected[5:]), rel=1e-15)
    assert torch.allclose(resumed.model.net.weight, full.model.net.weight, rtol=1e-12)
    assert torch.allclose(resumed.state.values(), full.state.values(), rtol=1e-12, equal_nan=True)


def test_schedule_needs_fccolit_optimizer_weights():
    x, y, pos_index = toy_binary_data()
    module = make(SOX, sizes_of(x, y), optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    with pytest.raises(ValueError, match="no 'momentum_weight'"):
        fit_batches(module, dual_batches(x, y, pos_index, 2), [InverseSqrtSchedule(tie_weights=False)])


# ---------------------------------------------------------------------------------------------- checks
def test_presets_refuse_optimizers_that_are_not_theirs():
    x, y, _ = toy_binary_data()
    sizes = sizes_of(x, y)
    with pytest.raises(ValueError, match="BSGD takes plain SGD"):
        optimizer_of(make(BSGD, sizes, optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=0.1)))
    with pytest.raises(ValueError, match="SOAP \\(mode='sgd'\\)"):
        optimizer_of(make(SOAP, sizes, optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=0.5)))
    with pytest.raises(ValueError, match="bias-corrected Adam"):
        optimizer_of(make(SOAP, sizes, mode="adam", optimizer=lambda p: AdaptiveMomentum(p, lr=0.1)))
    with pytest.raises(ValueError, match="without bias correction"):
        optimizer_of(make(ADAP, sizes, AveragePrecisionSurrogate(project=True),
                          optimizer=lambda p: AdaptiveMomentum(p, lr=0.1, bias_correction=True)))
    with pytest.raises(ValueError, match="needs decay_unsampled"):
        make(SOX, sizes, scale_by_n_over_B1=True)
    # the accepted equivalents
    optimizer_of(make(BSGD, sizes, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)))
    optimizer_of(make(SOAP, sizes, mode="adam", optimizer=lambda p: torch.optim.Adam(p, lr=0.1)))
    assert isinstance(optimizer_of(make(SOAP, sizes, mode="amsgrad")), AdaptiveMomentum)


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
        module = make(cls, sizes, objective)
        hparams = {k: v for k, v in module.hparams.items() if k != "data_sizes"}
        again = cls(LinearScorer(bias=False), objective, data_sizes=sizes, **hparams)
        for attr in ("ema_weight", "u_for_gradient", "decay_unsampled", "scale_by_n_over_B1"):
            assert getattr(again, attr) == getattr(module, attr), (cls, attr)
    with pytest.raises(ValueError, match="BSGD is defined by ema_weight=1.0"):
        make(BSGD, sizes, ema_weight=0.5)
    with pytest.raises(ValueError, match="MOAPV2 is defined by scale_by_n_over_B1=True"):
        make(MOAPV2, sizes, AveragePrecisionSurrogate(project=True), scale_by_n_over_B1=False)
    with pytest.raises(ValueError, match="SOAP is defined by u_for_gradient='fresh'"):
        make(SOAP, sizes, u_for_gradient="previous")


def test_adap_and_soap_take_the_bias_correction_they_declare():
    x, y, _ = toy_binary_data()
    sizes = sizes_of(x, y)
    corrected = lambda p: AdaptiveMomentum(p, lr=0.1, bias_correction=True)  # noqa: E731
    plain = lambda p: AdaptiveMomentum(p, lr=0.1)  # noqa: E731
    optimizer_of(make(ADAP, sizes, AveragePrecisionSurrogate(project=True), bias_correction=True, optimizer=corrected))
    optimizer_of(make(SOAP, sizes, mode="adam", bias_correction=False, optimizer=plain))
    with pytest.raises(ValueError, match="with bias correction"):
        optimizer_of(make(ADAP, sizes, AveragePrecisionSurrogate(project=True), bias_correction=True, optimizer=plain))
    with pytest.raises(ValueError, match="uncorrected Adam"):
        optimizer_of(make(SOAP, sizes, mode="adam", bias_correction=False, optimizer=corrected))
    default = optimizer_of(make(ADAP, sizes, AveragePrecisionSurrogate(project=True)))
    assert default.param_groups[0]["second_moment_weight"] == ADAP.default_second_moment_weight
    assert not default.param_groups[0]["bias_correction"]


def test_initial_state_is_refused_where_the_state_has_its_own_rule():
    from fccolit.algorithms.song import SOLC
    from fccolit.objectives import SOLCListwiseCELoss

    with pytest.raises(ValueError, match="does not take initial_state"):
        SOLC(torch.nn.Linear(2, 1), SOLCListwiseCELoss(), data_sizes={"num_pairs": 4, "num_queries": 2, "num_items": 3},
             initial_state="zero")
