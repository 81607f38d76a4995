"""The pieces the double-loop algorithms share (:mod:`fccolit.algorithms.double_loop`): the closed-form proximal step
and the loop position in the state dict, in both of its layouts."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fccolit.algorithms.double_loop import LoopPosition, ProximalStep


def test_proximal_step_is_the_closed_form_for_every_group_and_a_parameter_without_gradient():
    g = torch.Generator().manual_seed(0)
    z = [nn.Parameter(torch.randn(3, 2, generator=g, dtype=torch.float64)) for _ in range(3)]
    anchors = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in z]
    grads = [torch.randn(3, 2, generator=g, dtype=torch.float64), None, torch.randn(3, 2, generator=g, dtype=torch.float64)]
    eta, nu = 0.3, 2.0
    before = [p.detach().clone() for p in z]
    opt = ProximalStep([{"params": z[:2]}, {"params": z[2:], "lr": 0.7, "nu": math.inf}], lambda: anchors, lr=eta, nu=nu)
    for p, grad in zip(z, grads):
        p.grad = None if grad is None else grad.clone()  # the step overwrites .grad with G + (z − a)/ν
    opt.step()
    zero = torch.zeros(3, 2, dtype=torch.float64)
    for k in range(2):  # (η a + ν z − η ν G)/(η + ν); no gradient: G = 0, pulled towards the anchor only
        grad = zero if grads[k] is None else grads[k]
        expected = (eta * anchors[k] + nu * before[k] - eta * nu * grad) / (eta + nu)
        torch.testing.assert_close(z[k].detach(), expected, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(z[2].detach(), before[2] - 0.7 * grads[2], rtol=0, atol=0)  # ν = ∞: a plain step
    with pytest.raises(ValueError, match="nu"):
        ProximalStep(z, lambda: anchors, lr=eta, nu=0.0)


class Counters(LoopPosition, nn.Module):
    loop_keys = ("outer_step", "inner_step")

    def __init__(self, layout: str) -> None:
        self.loop_layout = layout
        self.init_loop()
        super().__init__()
        self.register_buffer("weight", torch.ones(2))
        self.restored = 0

    def on_loop_restored(self) -> None:
        self.restored += 1


@pytest.mark.parametrize("layout", ["extra_state", "tensors"])
def test_loop_position_round_trips_through_the_state_dict_in_both_layouts(layout):
    module = Counters(layout)
    module.loop.update(outer_step=3, inner_step=7)
    state = module.state_dict()
    if layout == "tensors":  # tensors only, one 0-dim int64 entry per counter
        assert set(state) == {"weight", "outer_step", "inner_step"}
        assert state["inner_step"].dtype == torch.long and state["inner_step"].dim() == 0 and int(state["inner_step"]) == 7
    else:
        assert state["_extra_state"] == {"outer_step": 3, "inner_step": 7}
    restored = Counters(layout)
    restored.load_state_dict(state)  # strict
    assert restored.loop == {"outer_step": 3, "inner_step": 7} and restored.restored == 1
    with pytest.raises(KeyError, match="inner_step"):
        partial = dict(state)
        if layout == "tensors":
            del partial["inner_step"]
        else:
            partial["_extra_state"] = {"outer_step": 3}
        Counters(layout).load_state_dict(partial)
