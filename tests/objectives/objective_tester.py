"""What every :class:`~fccolit.objectives.FCCOObjective` must satisfy, in the spirit of torchmetrics' MetricTester.

:func:`check_fcco_objective` runs one objective on one batch (float64) and asserts the contract the algorithms rely
on: the sizes bind and give the number of state rows, :meth:`inner` returns rows inside the state with values
``[R, d']`` (differentiable in the scores) and per-row context, :meth:`outer` is ``[R]``, :meth:`outer_grad` equals
the autograd gradient of :meth:`outer`, :meth:`state_bounds` is a box over ``d'`` that holds the batch's estimates,
:meth:`InnerBatch.select` keeps rows together, and :meth:`exact_value` is a finite scalar with a gradient.
"""

from __future__ import annotations

import torch

from fccolit.objectives import FCCOObjective, InnerBatch


def _as_bound(bound, dim: int) -> torch.Tensor | None:
    """A bound of :meth:`FCCOObjective.state_bounds` as ``[d']`` float64 (None components: ±inf), or None."""
    if bound is None:
        return None
    if isinstance(bound, (tuple, list)):
        return torch.tensor([float("nan") if b is None else float(b) for b in bound], dtype=torch.float64)
    return torch.as_tensor(bound, dtype=torch.float64).expand(dim).clone()


def check_fcco_objective(objective: FCCOObjective, scores: torch.Tensor, batch: dict[str, torch.Tensor],
                         sizes: dict[str, int]) -> InnerBatch:
    """Assert the FCCO contract of ``objective`` on one batch; returns its inner batch."""
    assert isinstance(objective, FCCOObjective)
    objective.bind_sizes(sizes)
    assert objective.sizes == {k: int(v) for k, v in sizes.items()}, "bind_sizes keeps the sizes"
    rows = objective.num_rows(sizes)
    assert isinstance(rows, int) and rows > 0
    dim = objective.inner_dim

    scores = scores.detach().to(torch.float64).requires_grad_(True)
    inner = objective.inner(scores, batch)
    r = inner.index.shape[0]
    assert inner.index.dtype == torch.long and inner.index.dim() == 1
    assert r > 0, "the test batch must give some rows"
    assert bool((inner.index >= 0).all()) and bool((inner.index < rows).all()), "rows inside the state"
    assert inner.value.shape == (r, dim) and inner.value.dtype == torch.float64
    assert inner.value.requires_grad, "the inner estimate is differentiable in the scores"
    for key, value in inner.context.items():
        assert value.shape[0] == r, f"context {key!r} has one entry per row"

    kept = torch.arange(0, r, 2)
    part = inner.select(kept)
    assert torch.equal(part.index, inner.index[kept]) and torch.equal(part.value, inner.value[kept])
    assert all(torch.equal(part.context[k], v[kept]) for k, v in inner.context.items())

    u = inner.value.detach()
    value = objective.outer(u, inner.context)
    assert value.shape == (r,) and bool(torch.isfinite(value).all())
    grad = objective.outer_grad(u, inner.context)
    with torch.enable_grad():
        leaf = u.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(objective.outer(leaf, inner.context).sum(), leaf)
    assert grad.shape == (r, dim)
    assert torch.allclose(grad.to(torch.float64), auto, rtol=1e-10, atol=1e-12), "outer_grad = autograd of outer"

    lower, upper = (_as_bound(b, dim) for b in objective.state_bounds(sizes))
    for bound in (lower, upper):
        assert bound is None or bound.shape == (dim,)
    if lower is not None and upper is not None:
        both = ~(lower.isnan() | upper.isnan())
        assert bool((lower[both] <= upper[both]).all()), "lower <= upper"
    tolerance = 1e-12 * (1.0 + u.abs())
    if lower is not None:
        assert bool(((u >= lower - tolerance) | lower.isnan()).all()), "the estimates lie above the lower bound"
    if upper is not None:
        assert bool(((u <= upper + tolerance) | upper.isnan()).all()), "the estimates lie below the upper bound"

    exact = objective.exact_value(scores, batch)
    assert exact.dim() == 0 and bool(torch.isfinite(exact))
    (score_grad,) = torch.autograd.grad(exact, scores, allow_unused=True)
    assert score_grad is not None and bool(torch.isfinite(score_grad).all())
    return inner
