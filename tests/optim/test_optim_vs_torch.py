"""Where fccolit.optim equals torch.optim and where it cannot: the papers' β schedules and ADAP's uncorrected moments.

At constant weights Momentum is torch's SGD and AdaptiveMomentum(bias_correction=True) torch's Adam under the mapped
hyper-parameters (tests/optim/test_optim.py proves both to rounding). Under a schedule of β (MOAP / ADAP's
β_t = min(1, β0/√t), written into ``param_groups`` before each step) no per-step mapping onto torch's
``momentum`` / ``dampening`` / ``betas`` gives the papers' update: these tests show both candidate mappings drift away.
"""

from __future__ import annotations

import math

import torch

from fccolit.optim import AdaptiveMomentum, Momentum

DT = torch.float64
STEPS = 12


def _gradients(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(6, generator=gen, dtype=DT) for _ in range(STEPS)]


def _trajectory(optimizer: torch.optim.Optimizer, param: torch.Tensor, grads, schedule) -> torch.Tensor:
    """The parameter after each step; ``schedule(group, t)`` sets the group's hyper-parameters before step t."""
    out = []
    for t, g in enumerate(grads, start=1):
        schedule(optimizer.param_groups[0], t)
        param.grad = g.clone()
        optimizer.step()
        out.append(param.detach().clone())
    return torch.stack(out)


def _start() -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, 6, dtype=DT).requires_grad_()


def _beta(t: int) -> float:
    return min(1.0, 0.5 / math.sqrt(t))


def _relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_momentum_under_a_beta_schedule_is_no_torch_sgd_mapping():
    lr, grads = 0.3, _gradients(0)
    p = _start()

    def ours_schedule(group, t):
        group["momentum_weight"] = _beta(t)

    ours = _trajectory(Momentum([p], lr=lr), p, grads, ours_schedule)

    # the papers' recursion, written out: v_t = (1 − β_t) v_{t−1} + β_t g_t, w_t = w_{t−1} − η v_t
    w, v, expected = _start().detach(), torch.zeros(6, dtype=DT), []
    for t, g in enumerate(grads, start=1):
        v = (1 - _beta(t)) * v + _beta(t) * g
        w = w - lr * v
        expected.append(w)
    torch.testing.assert_close(ours, torch.stack(expected), rtol=1e-14, atol=1e-15)

    # mapping of the constant-β equality, applied per step: lr·β_t, momentum 1 − β_t, no dampening
    q = _start()

    def scaled(group, t):
        group.update(lr=lr * _beta(t), momentum=1 - _beta(t))

    sgd = _trajectory(torch.optim.SGD([q], lr=lr, momentum=0.5, dampening=0.0), q, grads, scaled)
    assert _relative_gap(sgd, ours) > 1e-2
    # dampening 1 − β_t gives the papers' recursion from step 2 on, but torch skips dampening on the first step
    # (its buffer starts at g_1, not β_1·g_1), and that first step's excess never leaves the buffer
    r = _start()

    def damped(group, t):
        group.update(momentum=1 - _beta(t), dampening=1 - _beta(t))

    sgd = _trajectory(torch.optim.SGD([r], lr=lr, momentum=0.5, dampening=0.5), r, grads, damped)
    assert _relative_gap(sgd, ours) > 1e-2


def test_adaptive_momentum_with_scheduled_weights_is_no_torch_adam():
    lr, grads = 0.05, _gradients(1)

    def beta2(t: int) -> float:
        return 0.3 / t

    p = _start()

    def ours_schedule(group, t):
        group.update(momentum_weight=_beta(t), second_moment_weight=beta2(t))

    ours = _trajectory(AdaptiveMomentum([p], lr=lr, bias_correction=True), p, grads, ours_schedule)
    # torch's Adam with the mapped betas, changed before each step: its bias correction divides by 1 − β^t with
    # the current β, not by 1 − Π(1 − β_s) (the sum of the moving average's weights), so the trajectories part
    q = _start()

    def mapped(group, t):
        group["betas"] = (1 - _beta(t), 1 - beta2(t))

    adam = _trajectory(torch.optim.Adam([q], lr=lr, betas=(0.5, 0.7), foreach=False), q, grads, mapped)
    assert _relative_gap(adam, ours) > 1e-3


def test_adap_without_bias_correction_is_no_torch_adam():
    # ADAP (bias_correction=False, the paper's update) takes a first step of η·β1·g / (√(β'·g²) + δ); torch's Adam
    # always corrects (first step η·g / (|g| + δ)), with no option to turn it off. With the default weights
    # (β1 = 0.1, β' = 0.001) ADAP's first step is β1/√β' ≈ 3.2 times Adam's.
    grads = _gradients(2)[:1]
    p, q = _start(), _start()
    ours = _trajectory(AdaptiveMomentum([p], lr=0.1, momentum_weight=0.1, second_moment_weight=0.001), p, grads,
                       lambda group, t: None)
    adam = _trajectory(torch.optim.Adam([q], lr=0.1, betas=(0.9, 0.999), foreach=False), q, grads, lambda group, t: None)
    g, start = grads[0], _start().detach()
    torch.testing.assert_close(ours[0], start - 0.1 * 0.1 * g / (g.abs() * math.sqrt(0.001) + 1e-8))
    torch.testing.assert_close(adam[0], start - 0.1 * g / (g.abs() + 1e-8))
    torch.testing.assert_close(ours[0] - start, (adam[0] - start) * 0.1 / math.sqrt(0.001), rtol=1e-5, atol=0)
