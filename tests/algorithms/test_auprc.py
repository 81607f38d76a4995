"""AUPRC methods of Wang et al., AISTATS 2022 (issue 6): SOAP (SGD / Adam), MOAP-V1, MOAP-V2, ADAP.

The modules are compared step by step with an independent, eager float64 implementation of the paper's
algorithms (every row of U decayed every step, hand-written momentum / eq. (13) second moments), so the lazy
decay, the m/B scaling, the projection, the orderings and the optimizers are all checked against the formulas.
Also: invariants of U, the reductions between the methods, exact gradient descent as a corollary, 2-process DDP
equals 1 process (decay counters included), and the four LIBSVM configs under fast_dev_run."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from builders import DDP_SCRIPTS, assert_rounding_close, dual_batches, fit_batches, optimizer_of, toy_binary_data
from builders import drive as drive_records
from lightning.pytorch import Callback

from fccolit.algorithms.sox import ADAP, MOAPV1, MOAPV2, SOAP
from fccolit.callbacks.schedules import InverseSqrtSchedule
from fccolit.models import LinearScorer
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.optim import AdaptiveMomentum, Momentum

ROOT = Path(__file__).resolve().parents[2]
MARGIN = 0.5


# ---------------------------------------------------------------------------------------------- data and drivers


def sizes_of(x, y):
    return {"num_samples": len(y), "num_positives": int(y.sum()), "num_features": x.shape[1]}


def make(cls, x, y, optimizer, project=True, **kw):
    torch.manual_seed(0)
    module = cls(LinearScorer(bias=False), AveragePrecisionSurrogate(margin=MARGIN, project=project), optimizer=optimizer,
                 data_sizes=sizes_of(x, y), state_dtype="float64", **kw)
    return module.double()


def drive(module, batches, before_step=None):
    """The module's own step outside Lightning (:func:`builders.drive`); returns ``(weights [d], U)`` after every
    step, the form of :func:`reference`."""
    return [(record["w"].flatten(), record["u"]) for record in drive_records(module, batches, before_step)]


class WeightRecorder(Callback):
    def __init__(self):
        self.steps = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append((pl_module.model.net.weight.detach().flatten().clone(), pl_module.state.values().clone()))


def fit(module, batches, callbacks=()):
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
    module = make(MOAPV2, x, y, lambda p: Momentum(p, lr=3.0, momentum_weight=0.5), ema_weight=0.5)
    w0 = module.model.net.weight.detach().flatten().clone()
    lr, beta = (const(3.0), const(0.5)) if schedule == "constant" else (inv_sqrt(3.0, clip=False), inv_sqrt(0.5))
    callbacks = [InverseSqrtSchedule()] if schedule == "inverse_sqrt" else []
    steps = fit(module, batches, callbacks)
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
    module = make(MOAPV2, x, y, lambda p: Momentum(p, lr=1.0), ema_weight=0.2)
    steps = drive(module, batches)
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
    module = make(cls, x, y, opt, ema_weight=0.3, initial_state="projected_zero")
    w0 = module.model.net.weight.detach().flatten().clone()
    steps = drive(module, batches)
    lower, upper = omega(len(y), int(y.sum()))
    start = torch.maximum(torch.minimum(torch.zeros(2, dtype=torch.float64), upper), lower)
    step = momentum_step(const(1.0), const(0.3)) if cls is MOAPV2 else adap_step("adam", const(0.05), const(0.3), 0.1)
    ref = reference(x, y, batches, w0, weights=const(0.3), opt_step=step, decay=True, scale=True, initial=start)
    assert_same(steps, ref)
    # the first estimate would have given another state (u := ĝ, without the factor) and another trajectory
    other = drive(make(cls, x, y, opt, ema_weight=0.3), batches)
    assert (other[0][1] - steps[0][1]).nan_to_num().abs().max() > 1e-3
    assert (other[-1][0] - steps[-1][0]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------- ADAP
@pytest.mark.parametrize("variant", ["adam", "amsgrad", "adagrad", "adabound"])
def test_adap_step_equals_its_formula(variant):
    """ADAP trained by Lightning (with the 1/√t schedule of η and β0 = β1) equals Algorithm 3 with eq. (13)."""
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 40)
    bounds = {"bound_low": 0.5, "bound_high": 5.0} if variant == "adabound" else {}
    module = make(ADAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.3, momentum_weight=0.4, second_moment=variant,
                                                         **bounds), ema_weight=0.4)
    w0 = module.model.net.weight.detach().flatten().clone()
    steps = fit(module, batches, [InverseSqrtSchedule()])
    clipped = {"any": False}
    step = adap_step(variant, inv_sqrt(0.3, clip=False), inv_sqrt(0.4), c_l=0.5, c_u=5.0, clipped=clipped)
    ref = reference(x, y, batches, w0, weights=inv_sqrt(0.4), opt_step=step, decay=True, scale=True)
    assert_same(steps, ref)
    if variant == "adabound":
        assert clipped["any"]
    if variant == "amsgrad":  # v is element-wise non-decreasing
        module2 = make(ADAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.3, second_moment="amsgrad"))
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
        module = make(SOAP, x, y, lambda p: Momentum(p, lr=2.0, momentum_weight=1.0), project=False, ema_weight=0.6)
    else:
        module = make(SOAP, x, y, lambda p: AdaptiveMomentum(p, lr=0.05, second_moment=mode, bias_correction=True),
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
    assert_same(fit(module, batches), ref)


# ---------------------------------------------------------------------------------------------- reductions
def test_moapv1_equals_its_algorithm_and_with_B_equal_m_equals_moapv2():
    x, y, pos_index = toy_binary_data()
    m = int(y.sum())
    opt = lambda p: Momentum(p, lr=2.0, momentum_weight=0.3)  # noqa: E731
    partial = dual_batches(x, y, pos_index, 30)
    v1 = make(MOAPV1, x, y, opt, ema_weight=0.7)
    w0 = v1.model.net.weight.detach().flatten().clone()
    ref = reference(x, y, partial, w0, weights=const(0.7), opt_step=momentum_step(const(2.0), const(0.3)),
                    decay=False, scale=False)
    assert_same(drive(v1, partial), ref)
    full = dual_batches(x, y, pos_index, 30, positives=m, negatives=8)  # B = m: every positive, every step
    a = drive(make(MOAPV1, x, y, opt, ema_weight=0.7), full)
    b = drive(make(MOAPV2, x, y, opt, ema_weight=0.7), full)
    assert_same(a, b, rtol=1e-13, atol=1e-15)
    # with B < m they differ (V2 decays and scales)
    assert not torch.allclose(drive(make(MOAPV2, x, y, opt, ema_weight=0.7), partial)[-1][0], ref[-1][0])


@pytest.mark.parametrize("project", [True, False], ids=["with_omega", "without_omega"])
def test_moapv1_with_beta1_1_is_soap(project):
    x, y, pos_index = toy_binary_data()
    batches = dual_batches(x, y, pos_index, 30)
    opt = lambda p: Momentum(p, lr=2.0, momentum_weight=1.0)  # noqa: E731
    v1 = make(MOAPV1, x, y, opt, project=project, ema_weight=0.6, require_projection=project)
    soap = make(SOAP, x, y, opt, project=project, ema_weight=0.6)
    assert_same(drive(v1, batches), drive(soap, batches), rtol=0, atol=0)


def test_moapv1_with_full_batches_and_weights_1_is_gradient_descent_on_F():
    """β0 = β1 = 1, B = m and S = D make MOAP-V1 exact gradient descent on F (Wang et al., Algorithm 1)."""
    x, y, pos_index = toy_binary_data(n=30, m=8)
    full = {"x": x, "y": y, "index": torch.arange(len(y)), "pos_index": pos_index}
    module = make(MOAPV1, x, y, lambda p: Momentum(p, lr=5.0, momentum_weight=1.0), ema_weight=1.0)
    w = module.model.net.weight.detach().clone()
    steps = drive(module, [full] * 10)
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
    module = make(cls, x, y, optimizer, ema_weight=0.9)
    lower, upper = omega(n, m)
    assert torch.allclose(module.state.lower, lower) and torch.allclose(module.state.upper, upper)
    at_bound = {"u2_upper": False, "u2_lower": False}
    for _, u in drive(module, batches):
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
