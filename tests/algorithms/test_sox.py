"""SOX: the estimator is the exact gradient of F when the state is exact (float64), and its orderings."""

import pytest
import torch

from fccolit.algorithms import SOX
from fccolit.models import LinearScorer
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.optim import Momentum


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
