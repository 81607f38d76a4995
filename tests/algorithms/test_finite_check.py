"""The finite check before every optimizer step (``FiniteSteps.check_finite_step``): it sums each gradient, so a
NaN or an infinity anywhere stops the step, while finite gradients pass, float16 ones included (summed in float32:
a float16 sum of many ordinary values would overflow at 65,504)."""

from __future__ import annotations

import math

import pytest
import torch

from fccolit.algorithms import Supervised
from fccolit.models import LinearScorer


def module_with_gradients(values: list[torch.Tensor]):
    module = Supervised(LinearScorer(), data_sizes={"num_features": 3})
    params = [torch.nn.Parameter(torch.zeros_like(v)) for v in values]
    for p, v in zip(params, values):
        p.grad = v.clone()
    return module, torch.optim.SGD(params, lr=0.1)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_gradient_value_anywhere_stops_the_step(bad):
    grad = torch.randn(300, 40)
    grad[123, 7] = bad
    module, optimizer = module_with_gradients([torch.randn(5), grad])
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        module.check_finite_step(optimizer, torch.tensor(1.0))


def test_infinities_of_both_signs_do_not_cancel():
    grad = torch.zeros(10)
    grad[2], grad[5] = math.inf, -math.inf
    module, optimizer = module_with_gradients([grad])
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        module.check_finite_step(optimizer)


def test_a_non_finite_loss_with_finite_gradients_is_named_as_the_loss():
    module, optimizer = module_with_gradients([torch.randn(4)])
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        module.check_finite_step(optimizer, torch.tensor(math.nan))


def test_finite_gradients_pass_float16_ones_whose_sum_exceeds_the_float16_range_included():
    module, optimizer = module_with_gradients([torch.ones(100_000, dtype=torch.float16) * 60_000,
                                               torch.full((7,), -1.0e30)])
    module.check_finite_step(optimizer, torch.tensor(2.0))  # nothing raised: every value is finite
