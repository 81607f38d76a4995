"""Tests for fccolit.optim: Momentum and AdaptiveMomentum against hand-written formulas and torch.optim."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from fccolit.optim import SECOND_MOMENT_VARIANTS, AdaptiveMomentum, Momentum

DT = torch.float64
N_STEPS = 20
SHAPES = [(3, 4), (5,)]


def _exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to a couple of ulps (1e-14 relative)."""
    torch.testing.assert_close(actual, expected, rtol=1e-14, atol=1e-15)


def _gradients(seed: int, n: int = N_STEPS, large_every: int = 0, large_scale: float = 100.0):
    """Per step, one gradient per shape in SHAPES; every `large_every`-th step is scaled by large_scale."""
    gen = torch.Generator().manual_seed(seed)
    steps = []
    for t in range(n):
        scale = large_scale if large_every and t % large_every == large_every - 1 else 1.0
        steps.append([scale * torch.randn(s, generator=gen, dtype=DT) for s in SHAPES])
    return steps


def _params(seed: int = 0):
    gen = torch.Generator().manual_seed(1000 + seed)
    return [torch.randn(s, generator=gen, dtype=DT).requires_grad_() for s in SHAPES]


def _run(opt_cls, grads, params=None, **kw):
    params = _params() if params is None else params
    opt = opt_cls(params, **kw)
    traj = []
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = g.clone()
        opt.step()
        traj.append([p.detach().clone() for p in params])
    return params, opt, traj


def _assert_traj(a, b, close=_exact):
    assert len(a) == len(b)
    for sa, sb in zip(a, b):
        for x, y in zip(sa, sb):
            close(x, y)


# ==================================================================================================
# Momentum
# ==================================================================================================
def _momentum_reference(grads, lr, beta, wd=0.0, decoupled=False):
    ws = [p.detach().clone() for p in _params()]
    vs = [torch.zeros_like(w) for w in ws]
    traj = []
    for gs in grads:
        for i, g in enumerate(gs):
            if wd and decoupled:
                ws[i] = ws[i] * (1 - lr * wd)
            elif wd:
                g = g + wd * ws[i]
            vs[i] = (1 - beta) * vs[i] + beta * g
            ws[i] = ws[i] - lr * vs[i]
        traj.append([w.clone() for w in ws])
    return traj


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9, 1.0])
def test_momentum_matches_formula(beta):
    grads = _gradients(1)
    _, opt, traj = _run(Momentum, grads, lr=0.3, momentum_weight=beta)
    _assert_traj(traj, _momentum_reference(grads, 0.3, beta))


def test_momentum_first_buffer_is_beta_times_grad():
    # Paper convention (v_0 = 0): the first v is β·G, not G as in torch's heavy-ball buffer.
    p = torch.zeros(4, dtype=DT, requires_grad=True)
    opt = Momentum([p], lr=1.0, momentum_weight=0.25)
    g = torch.arange(1.0, 5.0, dtype=DT)
    p.grad = g.clone()
    opt.step()
    assert torch.equal(opt.state[p]["momentum_buffer"], 0.25 * g)
    assert torch.equal(p.detach(), -0.25 * g)
    assert opt.state[p]["step"] == 1


def test_momentum_beta_one_is_plain_sgd():
    grads = _gradients(2)
    _, _, ours = _run(Momentum, grads, lr=0.2, momentum_weight=1.0)
    _, _, sgd = _run(torch.optim.SGD, grads, lr=0.2)
    _assert_traj(ours, sgd, close=lambda a, b: torch.testing.assert_close(a, b, rtol=0, atol=0))


@pytest.mark.parametrize("beta", [0.1, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_momentum_equals_torch_sgd(beta, wd):
    grads = _gradients(3)
    lr = 0.7
    _, _, ours = _run(Momentum, grads, lr=lr, momentum_weight=beta, weight_decay=wd)
    _, _, ref = _run(
        torch.optim.SGD, grads, lr=lr * beta, momentum=1 - beta, dampening=0, nesterov=False, weight_decay=wd
    )
    # v = β·buf in exact arithmetic; the two orders of operations differ only by rounding.
    _assert_traj(ours, ref, close=lambda a, b: torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14))


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("beta", [0.2, 1.0])
def test_momentum_weight_decay_matches_formula(decoupled, beta):
    grads = _gradients(4)
    lr, wd = 0.3, 0.1
    _, _, ours = _run(Momentum, grads, lr=lr, momentum_weight=beta, weight_decay=wd, decoupled_weight_decay=decoupled)
    _assert_traj(ours, _momentum_reference(grads, lr, beta, wd, decoupled))
    # and the decay really does something
    _, _, plain = _run(Momentum, grads, lr=lr, momentum_weight=beta)
    assert not torch.allclose(ours[-1][0], plain[-1][0])


def test_momentum_decoupled_differs_from_coupled():
    grads = _gradients(5)
    _, _, a = _run(Momentum, grads, lr=0.3, momentum_weight=0.2, weight_decay=0.1, decoupled_weight_decay=False)
    _, _, b = _run(Momentum, grads, lr=0.3, momentum_weight=0.2, weight_decay=0.1, decoupled_weight_decay=True)
    assert not torch.allclose(a[-1][0], b[-1][0])


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=-0.1),
        dict(lr=float("nan")),
        dict(lr=0.1, momentum_weight=0.0),
        dict(lr=0.1, momentum_weight=1.5),
        dict(lr=0.1, momentum_weight=-0.1),
        dict(lr=0.1, weight_decay=-1.0),
    ],
)
def test_momentum_invalid_arguments(kw):
    with pytest.raises(ValueError):
        Momentum(_params(), **kw)


def test_momentum_invalid_param_group_and_scheduled_value():
    params = _params()
    with pytest.raises(ValueError, match="momentum_weight"):
        Momentum([{"params": [params[0]]}, {"params": [params[1]], "momentum_weight": 2.0}], lr=0.1)
    opt = Momentum(params, lr=0.1)
    opt.param_groups[0]["momentum_weight"] = 0.0  # e.g. a buggy β schedule
    for p in params:
        p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="momentum_weight"):
        opt.step()


def test_sparse_gradients_rejected():
    for cls in (Momentum, AdaptiveMomentum):
        p = torch.zeros(3, dtype=DT, requires_grad=True)
        opt = cls([p], lr=0.1)
        p.grad = torch.zeros(3, dtype=DT).to_sparse()
        with pytest.raises(RuntimeError, match="sparse"):
            opt.step()


# ==================================================================================================
# AdaptiveMomentum
# ==================================================================================================
def _adaptive_reference(grads, lr, b1, b2, eps, variant, cl=None, cu=None, wd=0.0, decoupled=False):
    """ADAP Algorithm 3 lines 7-9 with eq. (13), written out literally; also reports whether max/clip fired."""
    ws = [p.detach().clone() for p in _params()]
    m = [torch.zeros_like(w) for w in ws]
    v = [torch.zeros_like(w) for w in ws]
    v_ema = [torch.zeros_like(w) for w in ws]
    sq_sum = [torch.zeros_like(w) for w in ws]
    fired = {"max": 0, "clip_low": 0, "clip_high": 0}
    traj = []
    for t, gs in enumerate(grads, start=1):
        for i, g in enumerate(gs):
            if wd and decoupled:
                ws[i] = ws[i] * (1 - lr * wd)
            elif wd:
                g = g + wd * ws[i]
            m[i] = (1 - b1) * m[i] + b1 * g
            if variant == "adam":
                v[i] = (1 - b2) * v[i] + b2 * g * g
            elif variant == "amsgrad":
                v_ema[i] = (1 - b2) * v_ema[i] + b2 * g * g
                fired["max"] += int((v[i] > v_ema[i]).sum())
                v[i] = torch.maximum(v[i], v_ema[i])
            elif variant == "adagrad":
                sq_sum[i] = sq_sum[i] + g * g  # Σ_{s=1..t} G_s²
                v[i] = sq_sum[i] / (t + 1)  # v_{t+1} = (1/(t+1)) Σ_{s=1..t} G_s², as printed
            elif variant == "adabound":
                v_ema[i] = (1 - b2) * v_ema[i] + b2 * g * g
                lo, hi = 1 / cu**2, 1 / cl**2
                fired["clip_low"] += int((v_ema[i] < lo).sum())
                fired["clip_high"] += int((v_ema[i] > hi).sum())
                v[i] = torch.clamp(v_ema[i], lo, hi)
            ws[i] = ws[i] - lr * (m[i] / (v[i].sqrt() + eps))
        traj.append([w.clone() for w in ws])
    return traj, fired


VARIANT_KW = {
    "adam": {},
    "amsgrad": {},
    "adagrad": {},
    # c_l < c_u chosen so that both clips fire on the gradients below: the lower clip 1/c_u² = 0.01 catches
    # the small early averages, the upper clip 1/c_l² = 4 catches the averages after a large gradient.
    "adabound": dict(bound_low=0.5, bound_high=10.0),
}


@pytest.mark.parametrize("variant", SECOND_MOMENT_VARIANTS)
@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.05, False), (0.05, True)])
def test_adaptive_matches_formula(variant, wd, decoupled):
    grads = _gradients(10, large_every=7, large_scale=50.0)
    lr, b1, b2, eps = 0.05, 0.2, 0.1, 1e-8
    kw = VARIANT_KW[variant]
    _, opt, ours = _run(
        AdaptiveMomentum,
        grads,
        lr=lr,
        momentum_weight=b1,
        second_moment_weight=b2,
        eps=eps,
        second_moment=variant,
        weight_decay=wd,
        decoupled_weight_decay=decoupled,
        **kw,
    )
    ref, fired = _adaptive_reference(
        grads, lr, b1, b2, eps, variant, cl=kw.get("bound_low"), cu=kw.get("bound_high"), wd=wd, decoupled=decoupled
    )
    _assert_traj(ours, ref)
    if variant == "amsgrad":
        assert fired["max"] > 0, "the max in AMSGrad never fired; the test does not exercise it"
    if variant == "adabound":
        assert fired["clip_low"] > 0 and fired["clip_high"] > 0, f"a clip never fired: {fired}"


def test_adaptive_first_step_and_no_bias_correction():
    # m_1 = β1·G, v_1 = β'·G² (no bias correction): the first step is η·β1·G/(√β'·|G| + δ).
    p = torch.zeros(3, dtype=DT, requires_grad=True)
    opt = AdaptiveMomentum([p], lr=1.0, momentum_weight=0.1, second_moment_weight=0.01, eps=1e-8)
    g = torch.tensor([1.0, -2.0, 4.0], dtype=DT)
    p.grad = g.clone()
    opt.step()
    _exact(opt.state[p]["exp_avg"], 0.1 * g)
    _exact(opt.state[p]["second_moment"], 0.01 * g * g)
    _exact(p.detach(), -(0.1 * g) / ((0.01 * g * g).sqrt() + 1e-8))


def test_adagrad_normalisation_is_t_plus_one():
    p = torch.zeros(2, dtype=DT, requires_grad=True)
    opt = AdaptiveMomentum([p], lr=0.1, second_moment="adagrad")
    gs = [torch.tensor([1.0, 2.0], dtype=DT), torch.tensor([3.0, -1.0], dtype=DT), torch.tensor([0.5, 0.0], dtype=DT)]
    for t, g in enumerate(gs, start=1):
        p.grad = g.clone()
        opt.step()
        expected = sum(x * x for x in gs[:t]) / (t + 1)
        _exact(opt.state[p]["second_moment"], expected)


def test_amsgrad_second_moment_is_monotone():
    grads = _gradients(11, large_every=5)
    params = _params()
    opt = AdaptiveMomentum(params, lr=0.01, second_moment="amsgrad", second_moment_weight=0.3)
    prev = None
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()
        cur = opt.state[params[0]]["second_moment"].clone()
        if prev is not None:
            assert torch.all(cur >= prev)
        prev = cur


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.03])
def test_bias_correction_equals_torch_adam(amsgrad, wd):
    grads = _gradients(12, large_every=6, large_scale=20.0)
    lr, b1, b2, eps = 0.01, 0.1, 0.001, 1e-8
    variant = "amsgrad" if amsgrad else "adam"
    _, _, ours = _run(
        AdaptiveMomentum, grads, lr=lr, momentum_weight=b1, second_moment_weight=b2, eps=eps,
        second_moment=variant, weight_decay=wd, bias_correction=True,
    )
    _, _, ref = _run(
        torch.optim.Adam, grads, lr=lr, betas=(1 - b1, 1 - b2), eps=eps, weight_decay=wd, amsgrad=amsgrad,
        foreach=False,
    )
    _assert_traj(ours, ref, close=lambda a, b: torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13))


def test_decoupled_bias_corrected_equals_torch_adamw():
    grads = _gradients(13)
    lr, b1, b2, eps, wd = 0.02, 0.2, 0.01, 1e-8, 0.1
    _, _, ours = _run(
        AdaptiveMomentum, grads, lr=lr, momentum_weight=b1, second_moment_weight=b2, eps=eps,
        weight_decay=wd, decoupled_weight_decay=True, bias_correction=True,
    )
    _, _, ref = _run(torch.optim.AdamW, grads, lr=lr, betas=(1 - b1, 1 - b2), eps=eps, weight_decay=wd, foreach=False)
    _assert_traj(ours, ref, close=lambda a, b: torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13))


def test_bias_correction_with_scheduled_weights_uses_product():
    # With time-varying β1, the correction divides by 1 - Π(1 - β1_s), making the weights of m sum to one:
    # feeding a constant gradient G then gives m̂ = G exactly (up to rounding) at every step.
    p = torch.zeros(3, dtype=DT, requires_grad=True)
    opt = AdaptiveMomentum([p], lr=0.0, bias_correction=True)
    g = torch.tensor([1.0, -3.0, 0.5], dtype=DT)
    for t in range(1, 11):
        opt.param_groups[0]["momentum_weight"] = min(1.0, 0.5 / math.sqrt(t))
        opt.param_groups[0]["second_moment_weight"] = 0.3 / t
        p.grad = g.clone()
        opt.step()
        st = opt.state[p]
        torch.testing.assert_close(st["exp_avg"] / (1 - st["momentum_decay_prod"]), g, rtol=1e-13, atol=0)
        torch.testing.assert_close(st["second_moment"] / (1 - st["second_moment_decay_prod"]), g * g, rtol=1e-13, atol=0)


@pytest.mark.parametrize("variant", ["adagrad", "adabound"])
def test_bias_correction_other_variants_match_formula(variant):
    # adagrad: only m is corrected (v is a mean, not a moving average);
    # adabound: v' is corrected before the clip.
    grads = _gradients(14, large_every=7, large_scale=50.0)
    lr, b1, b2, eps, cl, cu = 0.05, 0.2, 0.1, 1e-8, 0.5, 10.0
    kw = VARIANT_KW[variant]
    _, _, ours = _run(AdaptiveMomentum, grads, lr=lr, momentum_weight=b1, second_moment_weight=b2, eps=eps,
                      second_moment=variant, bias_correction=True, **kw)
    ws = [p.detach().clone() for p in _params()]
    m = [torch.zeros_like(w) for w in ws]
    acc = [torch.zeros_like(w) for w in ws]
    clipped = 0
    for t, gs in enumerate(grads, start=1):
        for i, g in enumerate(gs):
            m[i] = (1 - b1) * m[i] + b1 * g
            if variant == "adagrad":
                acc[i] = acc[i] + g * g
                v = acc[i] / (t + 1)
            else:
                acc[i] = (1 - b2) * acc[i] + b2 * g * g
                v_hat = acc[i] / (1 - (1 - b2) ** t)
                clipped += int(((v_hat < 1 / cu**2) | (v_hat > 1 / cl**2)).sum())
                v = torch.clamp(v_hat, 1 / cu**2, 1 / cl**2)
            ws[i] = ws[i] - lr / (1 - (1 - b1) ** t) * (m[i] / (v.sqrt() + eps))
        for a, b in zip(ours[t - 1], ws):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)
    if variant == "adabound":
        assert clipped > 0


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(lr=-1.0), "learning rate"),
        (dict(lr=0.1, momentum_weight=0.0), "momentum_weight"),
        (dict(lr=0.1, momentum_weight=1.01), "momentum_weight"),
        (dict(lr=0.1, second_moment_weight=0.0), "second_moment_weight"),
        (dict(lr=0.1, second_moment_weight=2.0), "second_moment_weight"),
        (dict(lr=0.1, eps=0.0), "eps"),
        (dict(lr=0.1, eps=-1e-8), "eps"),
        (dict(lr=0.1, second_moment="rmsprop"), "adam.*amsgrad.*adagrad.*adabound"),
        (dict(lr=0.1, second_moment="adabound"), "bound"),
        (dict(lr=0.1, second_moment="adabound", bound_low=0.5), "bound"),
        (dict(lr=0.1, second_moment="adabound", bound_low=2.0, bound_high=1.0), "bound_low < bound_high"),
        (dict(lr=0.1, second_moment="adabound", bound_low=1.0, bound_high=1.0), "bound_low < bound_high"),
        (dict(lr=0.1, second_moment="adabound", bound_low=0.0, bound_high=1.0), "bound_low < bound_high"),
        (dict(lr=0.1, second_moment="adam", bound_low=0.1, bound_high=1.0), "only apply"),
        (dict(lr=0.1, weight_decay=-0.1), "weight_decay"),
    ],
)
def test_adaptive_invalid_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveMomentum(_params(), **kw)


def test_adabound_infinite_upper_bound_allowed():
    p = torch.zeros(2, dtype=DT, requires_grad=True)
    opt = AdaptiveMomentum([p], lr=0.1, second_moment="adabound", bound_low=0.5, bound_high=float("inf"),
                           second_moment_weight=1.0)
    p.grad = torch.tensor([1e-6, 10.0], dtype=DT)
    opt.step()
    v = opt.state[p]["second_moment"]
    assert v[0] > 0 and v[1] == 4.0  # no lower clip; upper clip at 1/c_l² = 4


# ==================================================================================================
# Common machinery: state_dict, param groups, schedulers, closure, dtypes
# ==================================================================================================
OPT_CASES = [
    (Momentum, dict(lr=0.1, momentum_weight=0.3, weight_decay=0.01)),
    (Momentum, dict(lr=0.1, momentum_weight=0.3, weight_decay=0.01, decoupled_weight_decay=True)),
] + [
    (AdaptiveMomentum, dict(lr=0.01, momentum_weight=0.2, second_moment_weight=0.05, second_moment=v,
                            bias_correction=bc, weight_decay=0.01, **VARIANT_KW[v]))
    for v in SECOND_MOMENT_VARIANTS
    for bc in (False, True)
]


@pytest.mark.parametrize("cls,kw", OPT_CASES)
def test_state_dict_round_trip(cls, kw):
    grads = _gradients(20, n=16, large_every=5)
    first, second = grads[:8], grads[8:]

    params, opt, _ = _run(cls, first, **kw)
    saved_params = [p.detach().clone() for p in params]
    saved_state = copy.deepcopy(opt.state_dict())
    # continue the original optimizer
    cont = []
    for gs in second:
        for p, g in zip(params, gs):
            p.grad = g.clone()
        opt.step()
        cont.append([p.detach().clone() for p in params])

    new_params = [p.clone().requires_grad_() for p in saved_params]
    new_opt = cls(new_params, **kw)
    new_opt.load_state_dict(saved_state)
    resumed = []
    for gs in second:
        for p, g in zip(new_params, gs):
            p.grad = g.clone()
        new_opt.step()
        resumed.append([p.detach().clone() for p in new_params])
    _assert_traj(resumed, cont, close=lambda a, b: torch.testing.assert_close(a, b, rtol=0, atol=0))


@pytest.mark.parametrize("cls", [Momentum, AdaptiveMomentum])
def test_param_groups_and_lr_scheduler(cls):
    torch.manual_seed(0)
    a = torch.randn(4, dtype=DT, requires_grad=True)
    b = torch.randn(3, dtype=DT, requires_grad=True)
    extra = dict(second_moment_weight=0.2) if cls is AdaptiveMomentum else {}
    opt = cls(
        [{"params": [a]}, {"params": [b], "lr": 0.5, "momentum_weight": 1.0}],
        lr=0.1, momentum_weight=0.3, **extra,
    )
    assert opt.param_groups[0]["momentum_weight"] == 0.3 and opt.param_groups[1]["momentum_weight"] == 1.0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda e: 0.5**e)

    # independent references, one per group, driven with the scheduled lr by hand
    ref_a = cls([a.detach().clone().requires_grad_()], lr=0.1, momentum_weight=0.3, **extra)
    ref_b = cls([b.detach().clone().requires_grad_()], lr=0.5, momentum_weight=1.0, **extra)
    gen = torch.Generator().manual_seed(3)
    for epoch in range(6):
        ga, gb = torch.randn(4, generator=gen, dtype=DT), torch.randn(3, generator=gen, dtype=DT)
        assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**epoch, rel=1e-15)
        assert opt.param_groups[1]["lr"] == pytest.approx(0.5 * 0.5**epoch, rel=1e-15)
        a.grad, b.grad = ga.clone(), gb.clone()
        opt.step()
        sched.step()
        for ref, g, base in ((ref_a, ga, 0.1), (ref_b, gb, 0.5)):
            ref.param_groups[0]["lr"] = base * 0.5**epoch
            ref.param_groups[0]["params"][0].grad = g.clone()
            ref.step()
        _exact(a.detach(), ref_a.param_groups[0]["params"][0].detach())
        _exact(b.detach(), ref_b.param_groups[0]["params"][0].detach())

    # group b uses β = 1 (plain SGD with Momentum): its last step must be exactly -lr_5 * G
    if cls is Momentum:
        before = b.detach().clone()
        g = torch.randn(3, generator=gen, dtype=DT)
        b.grad, a.grad = g.clone(), None
        lr_now = opt.param_groups[1]["lr"]
        assert lr_now == pytest.approx(0.5 * 0.5**6)
        opt.step()
        _exact(b.detach(), before - lr_now * g)


def test_momentum_weight_schedule_follows_formula():
    # A β schedule written into param_groups (β_t = min(1, β0/√t), as in MOAP's linear experiments).
    grads = _gradients(21)
    params = _params()
    opt = Momentum(params, lr=0.2, momentum_weight=0.9)
    ws = [p.detach().clone() for p in params]
    vs = [torch.zeros_like(w) for w in ws]
    for t, gs in enumerate(grads, start=1):
        beta = min(1.0, 0.9 / math.sqrt(t))
        opt.param_groups[0]["momentum_weight"] = beta
        for p, g in zip(params, gs):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(gs):
            vs[i] = (1 - beta) * vs[i] + beta * g
            ws[i] = ws[i] - 0.2 * vs[i]
            _exact(params[i].detach(), ws[i])


@pytest.mark.parametrize("cls", [Momentum, AdaptiveMomentum])
def test_closure_and_none_grads(cls):
    torch.manual_seed(1)
    x = torch.randn(10, 3, dtype=DT)
    w = torch.zeros(3, dtype=DT, requires_grad=True)
    unused = torch.ones(2, dtype=DT, requires_grad=True)
    opt = cls([w, unused], lr=0.05)

    def closure():
        opt.zero_grad()
        loss = ((x @ w - 1.0) ** 2).mean()
        loss.backward()
        return loss.detach()

    losses = [opt.step(closure).item() for _ in range(30)]
    assert losses[-1] < losses[0]
    assert torch.equal(unused.detach(), torch.ones(2, dtype=DT))  # grad None → untouched
    assert len(opt.state[unused]) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
@pytest.mark.parametrize("cls,kw", [(Momentum, {}), (AdaptiveMomentum, {}),
                                    (AdaptiveMomentum, dict(second_moment="amsgrad", bias_correction=True))])
def test_other_dtypes(dtype, cls, kw):
    p = torch.ones(5, dtype=dtype, requires_grad=True)
    opt = cls([p], lr=0.1, **kw)
    for _ in range(3):
        p.grad = torch.full_like(p, 0.5)
        opt.step()
    assert p.dtype == dtype
    assert torch.all(torch.isfinite(torch.view_as_real(p.detach()) if p.is_complex() else p.detach()))
    assert not torch.equal(p.detach(), torch.ones(5, dtype=dtype))


def test_complex_adaptive_treats_real_and_imag_separately():
    z = torch.tensor([1 + 2j, -1 + 0.5j], dtype=torch.complex128, requires_grad=True)
    r = torch.view_as_real(z.detach()).clone().requires_grad_()
    oz = AdaptiveMomentum([z], lr=0.1, second_moment_weight=0.2)
    orr = AdaptiveMomentum([r], lr=0.1, second_moment_weight=0.2)
    gen = torch.Generator().manual_seed(5)
    for _ in range(5):
        g = torch.randn(2, 2, generator=gen, dtype=DT)
        z.grad = torch.view_as_complex(g.clone())
        r.grad = g.clone()
        oz.step()
        orr.step()
    _exact(torch.view_as_real(z.detach()), r.detach())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("variant", SECOND_MOMENT_VARIANTS)
def test_cuda_matches_cpu(variant):
    grads = _gradients(30, large_every=7, large_scale=50.0)
    kw = dict(lr=0.05, momentum_weight=0.2, second_moment_weight=0.1, second_moment=variant, **VARIANT_KW[variant])
    _, _, cpu = _run(AdaptiveMomentum, grads, **kw)
    cuda_params = [p.detach().cuda().requires_grad_() for p in _params()]
    _, _, gpu = _run(AdaptiveMomentum, [[g.cuda() for g in gs] for gs in grads], params=cuda_params, **kw)
    _assert_traj([[x.cpu() for x in s] for s in gpu], cpu,
                 close=lambda a, b: torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13))
    _, _, mcpu = _run(Momentum, grads, lr=0.1, momentum_weight=0.3)
    cuda_params = [p.detach().cuda().requires_grad_() for p in _params()]
    _, _, mgpu = _run(Momentum, [[g.cuda() for g in gs] for gs in grads], params=cuda_params, lr=0.1,
                      momentum_weight=0.3)
    _assert_traj([[x.cpu() for x in s] for s in mgpu], mcpu,
                 close=lambda a, b: torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13))


# ---------------------------------------------------------------------------------------------- LazyAdam
def test_lazy_adam_equals_adam_on_dense_and_sparse_adam_on_sparse_gradients():
    from fccolit.optim import LazyAdam

    g = torch.Generator().manual_seed(0)
    dense = torch.randn(5, 3, dtype=torch.float64, generator=g)
    table = torch.randn(20, 4, dtype=torch.float64, generator=g)
    ours = [dense.clone().requires_grad_(True), table.clone().requires_grad_(True)]
    ref = [dense.clone().requires_grad_(True), table.clone().requires_grad_(True)]
    lazy = LazyAdam(ours, lr=0.05, momentum_weight=0.2, second_moment_weight=0.05, eps=1e-6)  # torch's 1 - betas
    adam = torch.optim.Adam([ref[0]], lr=0.05, betas=(0.8, 0.95), eps=1e-6)
    sparse_adam = torch.optim.SparseAdam([ref[1]], lr=0.05, betas=(0.8, 0.95), eps=1e-6)
    for step in range(6):
        rows = torch.randint(0, 20, (7,), generator=g)  # duplicates included
        for (w, t), opts in ((ours, [lazy]), (ref, [adam, sparse_adam])):
            for o in opts:
                o.zero_grad()
            w.grad = None
            loss = (w * torch.arange(15, dtype=torch.float64).view(5, 3)).sin().sum()
            loss = loss + torch.nn.functional.embedding(rows, t, sparse=True).pow(3).sum()
            loss.backward()
            assert t.grad.is_sparse
            for o in opts:
                o.step()
        untouched = torch.ones(20, dtype=torch.bool)
        untouched[rows] = False
        before = ours[1].detach().clone()
        assert torch.allclose(ours[0], ref[0], rtol=1e-12, atol=1e-14), step
        assert torch.allclose(ours[1], ref[1], rtol=1e-12, atol=1e-14), step
    assert not torch.equal(ours[1], table) and torch.equal(before[untouched], ours[1].detach()[untouched])


def test_sparse_neumf_with_lazy_adam_touches_only_the_batch_rows():
    """NeuMF(sparse_embeddings=True) + LazyAdam = SparseAdam on the tables + Adam on the rest, and a step moves only
    the batch's rows. (Against dense Adam the first step differs wherever a row's gradient sums to ~0 by cancellation:
    Adam's first step is ±lr·sign(g), and the dense and the coalesced sums round differently.)"""
    from fccolit.algorithms import SONG
    from fccolit.datamodules import SyntheticRankingDataModule
    from fccolit.models import NeuMF
    from fccolit.optim import LazyAdam

    data = SyntheticRankingDataModule(num_queries=40, num_items=200, ratings_per_query=(5, 10), num_positives=2,
                                      num_negatives=5, queries_per_batch=4, seed=0)
    data.setup()
    batches = iter(data.train_dataloader())
    modules = []
    for _ in range(2):
        torch.manual_seed(0)
        modules.append(SONG(NeuMF(embedding_dim=4, layers=[4], dropout=0.0, sparse_embeddings=True),
                            data_sizes=data.sizes, ema_weight=0.5, state_dtype="float64").double())
    lazy = [LazyAdam(modules[0].parameters(), lr=0.01)]
    tables = [p for n, p in modules[1].named_parameters() if n.endswith(("_user.weight", "_item.weight"))]
    rest = [p for n, p in modules[1].named_parameters() if not n.endswith(("_user.weight", "_item.weight"))]
    reference = [torch.optim.SparseAdam(tables, lr=0.01), torch.optim.Adam(rest, lr=0.01)]
    for step in range(3):
        batch = next(batches)
        before = modules[0].model.gmf_item.weight.detach().clone()
        for module, opts in zip(modules, (lazy, reference)):
            for opt in opts:
                opt.zero_grad()
            loss, _ = module.compositional_loss(module(batch), batch)
            loss.backward()
            assert module.model.gmf_item.weight.grad.is_sparse
            for opt in opts:
                opt.step()
        for (name, a), b in zip(modules[0].named_parameters(), modules[1].parameters()):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-15), (step, name)
        items = batch["items"].flatten()
        items = items[items >= 0].unique()
        moved = (modules[0].model.gmf_item.weight.detach() != before).any(1)
        assert moved.nonzero().flatten().tolist() == items.tolist()


# ------------------------------------------------------------------------------------------ the fused Adam kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias_correction", [False, True])
@pytest.mark.parametrize("decay", ["none", "coupled", "decoupled"])
def test_fused_adam_step_equals_the_per_parameter_loop(dtype, bias_correction, decay, monkeypatch):
    """fused=True (the default) takes torch's fused kernel for second_moment="adam" and computes the loop's update up
    to rounding, with and without bias correction (t = inf in the kernel), with either weight decay, and with a
    parameter that misses some steps (its own step count)."""
    calls = []
    kernel = torch._fused_adam_
    monkeypatch.setattr(torch, "_fused_adam_", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    gen = torch.Generator().manual_seed(3)
    start = [torch.randn(s, generator=gen, dtype=dtype) for s in [(4, 3), (3,), (2,)]]
    grads = [[torch.randn(s.shape, generator=gen, dtype=dtype) for s in start] for _ in range(12)]
    kw = dict(lr=0.01, momentum_weight=0.2, second_moment_weight=0.01, bias_correction=bias_correction,
              weight_decay=0.0 if decay == "none" else 0.05, decoupled_weight_decay=decay == "decoupled")
    out = {}
    for fused in (True, False):
        params = [p.clone().requires_grad_() for p in start]
        opt = AdaptiveMomentum(params, fused=fused, **kw)
        for t, step in enumerate(grads):
            for k, (p, g) in enumerate(zip(params, step)):
                p.grad = None if (k == 2 and t % 3 == 0) else g.clone()  # the third skips every third step
            opt.step()
        out[fused] = ([p.detach() for p in params], [opt.state[p]["step"] for p in params],
                      [opt.state[p]["momentum_decay_prod"] for p in params])
    assert len(calls) == len(grads)  # every step of the fused optimizer went through the kernel
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(out[True][0], out[False][0]):
        torch.testing.assert_close(a, b, **tol)
    assert out[True][1] == out[False][1] == [12, 12, 8] and out[True][2] == out[False][2]


def test_fused_adam_leaves_for_the_loop_when_a_scheduler_changes_the_weights(monkeypatch):
    """The kernel corrects by 1 − (1 − β)^t: once β1 changed, the running products differ and the loop (exact for
    varying weights) takes the group; the other variants never take the kernel."""
    calls = []
    kernel = torch._fused_adam_
    monkeypatch.setattr(torch, "_fused_adam_", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    grads = _gradients(5, n=6)
    out = {}
    for fused in (True, False):
        params = _params()
        opt = AdaptiveMomentum(params, lr=0.01, bias_correction=True, fused=fused)
        for t, step in enumerate(grads):
            if t == 3:
                opt.param_groups[0]["momentum_weight"] = 0.3
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        out[fused] = [p.detach() for p in params]
    assert len(calls) == 3  # steps 1-3 fused, then the loop
    for a, b in zip(out[True], out[False]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    calls.clear()
    _run(AdaptiveMomentum, grads, lr=0.01, second_moment="amsgrad")
    assert not calls
