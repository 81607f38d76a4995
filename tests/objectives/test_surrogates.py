"""fccolit/surrogates.py: the fused pairwise weighted sum equals the autograd expression, and the sigmoid score
transform is torch.sigmoid without subnormal numbers."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.mark.parametrize("surrogate", ["squared_hinge", "hinge", "logistic", "sigmoid", "exp"])
def test_pairwise_weighted_sum_equals_the_autograd_expression(surrogate):
    """The fused AP inner (one autograd node, closed-form backward) = ℓ(s_j − s_{a_i}) @ W through autograd, values
    and gradients in float64, with repeated anchors and a gradient check."""
    from fccolit.surrogates import pairwise_surrogate, pairwise_surrogate_with_slope, pairwise_weighted_sum

    g = torch.Generator().manual_seed(3)
    scores = torch.randn(17, dtype=torch.float64, generator=g).requires_grad_()
    anchors = torch.tensor([0, 4, 4, 9, 16])
    weights = torch.rand(17, 3, dtype=torch.float64, generator=g)
    upstream = torch.randn(5, 3, dtype=torch.float64, generator=g)
    loss = pairwise_surrogate(surrogate, margin=0.6, scale=1.7)
    fused = pairwise_weighted_sum(scores, anchors, weights, pairwise_surrogate_with_slope(surrogate, 0.6, 1.7))
    plain = loss(scores.unsqueeze(0) - scores[anchors].unsqueeze(1)) @ weights
    assert torch.allclose(fused, plain, rtol=1e-13, atol=1e-15)
    (grad_fused,) = torch.autograd.grad((fused * upstream).sum(), scores)
    (grad_plain,) = torch.autograd.grad((plain * upstream).sum(), scores)
    assert torch.allclose(grad_fused, grad_plain, rtol=1e-12, atol=1e-14)
    if surrogate != "hinge":  # the hinge's kink: finite differences disagree only where a margin is exactly 0
        assert torch.autograd.gradcheck(
            lambda s: pairwise_weighted_sum(s, anchors, weights, pairwise_surrogate_with_slope(surrogate, 0.6, 1.7)),
            (scores.detach().requires_grad_(),),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sigmoid_scores_are_sigmoid_without_subnormals(dtype):
    """AP's and pAUC's score transform: torch.sigmoid, bit for bit, above log √tiny; at and below it σ(log √tiny)
    with gradient 0, so neither the scores nor their gradients are ever subnormal (float32's sigmoid is subnormal
    below -87, and every matrix product of the backward pass that meets such a value runs several times slower on
    x86 CPUs)."""
    from fccolit.objectives import AveragePrecisionSurrogate, PartialAUCRangeSurrogate
    from fccolit.surrogates import sigmoid_scores

    tiny = torch.finfo(dtype).tiny
    floor = 0.5 * math.log(tiny)
    logits = torch.cat([torch.linspace(2.5 * floor, 40.0, 4001, dtype=dtype), torch.tensor([floor], dtype=dtype)])
    logits.requires_grad_()
    upstream = torch.full_like(logits, 1e-3)
    ours = sigmoid_scores(logits)
    (grad,) = torch.autograd.grad(ours, logits, upstream)
    reference = logits.detach().clone().requires_grad_()
    (grad_ref,) = torch.autograd.grad(torch.sigmoid(reference), reference, upstream)
    subnormal = lambda t: bool(((t != 0) & (t.abs() < tiny)).any())  # noqa: E731
    above = logits.detach() > floor
    assert torch.equal(ours.detach()[above], torch.sigmoid(logits.detach()[above]))
    assert torch.equal(grad[above], grad_ref[above])
    assert not subnormal(ours) and not subnormal(grad)
    assert (ours.detach()[~above] == ours.detach()[-1]).all() and (grad[~above] == 0).all()
    if dtype == torch.float32:  # what the clamp removes: plain sigmoid's subnormal values and gradients
        assert subnormal(torch.sigmoid(logits.detach())) and subnormal(grad_ref)
    scores = torch.tensor([-300.0, -90.0, 0.5], dtype=dtype)
    assert torch.equal(AveragePrecisionSurrogate()._scores(scores), sigmoid_scores(scores))
    assert torch.equal(PartialAUCRangeSurrogate(0.05, 0.5, score_transform="sigmoid").transform(scores), sigmoid_scores(scores))
