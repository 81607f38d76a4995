"""Pairwise surrogate losses ℓ(d) of the step ``I(d ≥ 0)``, with ``d = s_j − s_i`` the score margin.

Every surrogate "penalizes large input" (Wang & Yang, ICML 2022, §4.1): it is non-decreasing in ``d``, so
``ℓ(s_j − s_i)`` is large when the competitor ``j`` scores above the anchor ``i``. The same functions serve AP (ℓ
of ``s_j − s_i`` for anchor positive ``i``), NDCG (ℓ of ``s_j − s_i`` for relevant item ``i``) and p-norm push (``exp`` of
``s_i − s_j`` for negative ``i``, positive ``j``).

==================  ===================================  =======================================
name                ℓ(d)                                 notes
==================  ===================================  =======================================
``squared_hinge``   ``max(0, margin + d)²``              AP (SOAP/MOAP/ADAP), NDCG (SONG)
``hinge``           ``max(0, margin + d)``
``logistic``        ``log(1 + exp(scale · d))``
``sigmoid``         ``1 / (1 + exp(−scale · d))``          AP's "logistic" surrogate in Wang et al. §3
``exp``             ``exp(scale · d)``                   p-norm push (Rudin 2009)
==================  ===================================  =======================================

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
"""

from __future__ import annotations

import math
from typing import Callable, Literal, get_args

import torch
import torch.nn.functional as F

#: the names of the pairwise surrogates ℓ (the table above)
SurrogateName = Literal["squared_hinge", "hinge", "logistic", "sigmoid", "exp"]
SURROGATES: tuple[str, ...] = get_args(SurrogateName)


def sigmoid_scores(scores: torch.Tensor) -> torch.Tensor:
    """``σ(scores)``, the papers' map of logits into (0, 1) before the pair margins, without subnormal numbers.

    The logits are clamped from below at ``log √tiny`` of their dtype (float32: −43.7, where σ = 1.1e-19; float64:
    −354), so σ stays at 1.1e-19 (float32) and its gradient is exactly 0 there instead of subnormal. Why: a model
    trained for AP pushes negatives to logits below −87, where float32's σ and σ' are subnormal, and on x86 CPUs every
    matrix product of the backward pass that meets them runs several times slower (measured in
    ``benchmarks/results/fcco_overhead.md``). Nothing a float32 loss can see changes: margins are taken between scores in [0, 1], where a difference below 1e-19 rounds
    away against any margin, and a gradient below 1e-19 times the upstream one vanishes in any sum with a normal one.

    Args:
        scores: logits, any shape, floating point.

    Returns:
        ``σ(max(scores, log √tiny))``, same shape and dtype; equal to ``torch.sigmoid(scores)``, values and
        gradients, wherever ``scores > log √tiny`` (tested).
    """
    return torch.sigmoid(scores.clamp(min=0.5 * math.log(torch.finfo(scores.dtype).tiny)))


class _SquaredHinge(torch.autograd.Function):
    """``max(0, margin + d)²`` with the backward ``2·max(0, margin + d)·grad``: two elementwise ops each way instead
    of autograd's add / relu / pow chain (whose backward is five ops, among them a ``pow`` and a threshold mask:
    the clipped entries are 0 in the saved hinge already). Every pAUC step evaluates it on every pair (and AP's
    multi-task and reweighted estimators; AP's common case fuses the whole inner in :func:`pairwise_weighted_sum`).
    First derivatives only: a second backward raises instead of treating the saved hinge as a constant."""

    @staticmethod
    def forward(ctx, d: torch.Tensor, margin: float) -> torch.Tensor:
        hinge = (d + margin).clamp_min_(0.0)
        ctx.save_for_backward(hinge)
        return hinge * hinge

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (hinge,) = ctx.saved_tensors
        return grad * hinge * 2.0, None


def pairwise_surrogate(name: str, margin: float = 1.0, scale: float = 1.0) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return ``ℓ`` as a function of the margin tensor ``d`` (any shape, elementwise).

    Args:
        name: the surrogate (the table of the module docstring).
        margin: the margin of ``"squared_hinge"`` and ``"hinge"``.
        scale: the slope of ``"logistic"``, ``"sigmoid"`` and ``"exp"``.

    Raises:
        ValueError: an unknown ``name``.

    Example:
        >>> import torch
        >>> from fccolit.surrogates import pairwise_surrogate
        >>> loss = pairwise_surrogate("squared_hinge", margin=1.0)
        >>> loss(torch.tensor([-2.0, -0.5, 0.0, 1.0])).tolist()  # max(0, 1 + d)²
        [0.0, 0.25, 1.0, 4.0]
    """
    if name == "squared_hinge":
        return lambda d: _SquaredHinge.apply(d, float(margin))
    if name == "hinge":
        return lambda d: F.relu(margin + d)
    scaled = _scaling(scale)
    if name == "logistic":
        return lambda d: F.softplus(scaled(d))
    if name == "sigmoid":
        return lambda d: torch.sigmoid(scaled(d))
    if name == "exp":
        return lambda d: torch.exp(scaled(d))
    raise ValueError(f"unknown surrogate {name!r}; choose one of {', '.join(SURROGATES)}")


def _scaling(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """``d ↦ scale · d``, and ``d`` itself at scale 1 (the default): the product is exact there, and skipping it
    saves a pass over the pair matrix and its backward node at every step."""
    return (lambda d: d) if scale == 1.0 else (lambda d: scale * d)


def pairwise_surrogate_with_slope(
    name: str, margin: float = 1.0, scale: float = 1.0
) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Return ``d ↦ (ℓ(d), ℓ'(d))`` elementwise, without autograd (for :func:`pairwise_weighted_sum`)."""
    if name == "squared_hinge":
        def squared_hinge(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            hinge = (d + margin).clamp_min_(0.0)
            return hinge * hinge, hinge.mul_(2.0)
        return squared_hinge
    if name == "hinge":
        return lambda d: ((d + margin).clamp_min_(0.0), (d > -margin).to(d.dtype))
    scaled = _scaling(scale)
    if name == "logistic":
        def logistic(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = scaled(d)
            slope = torch.sigmoid(x)
            return F.softplus(x), (slope if scale == 1.0 else slope.mul_(scale))
        return logistic
    if name == "sigmoid":
        def sigmoid(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            value = torch.sigmoid(scaled(d))
            return value, value * (1.0 - value) * scale
        return sigmoid
    if name == "exp":
        def exp(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            value = torch.exp(scaled(d))
            return value, value * scale
        return exp
    raise ValueError(f"unknown surrogate {name!r}; choose one of {', '.join(SURROGATES)}")


class _PairwiseWeightedSum(torch.autograd.Function):
    """See :func:`pairwise_weighted_sum`. One autograd node in place of the ~10 of the expression (each recorded
    node costs several microseconds on a CPU, and the expression is evaluated at every step)."""

    @staticmethod
    def forward(ctx, scores, anchors, weights, with_slope):  # type: ignore[override]
        value, slope = with_slope(scores.unsqueeze(0) - scores.index_select(0, anchors).unsqueeze(1))  # [P, B]
        ctx.save_for_backward(slope, anchors, weights)
        return value @ weights

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        slope, anchors, weights = ctx.saved_tensors
        grad_pairs = (grad @ weights.transpose(0, 1)).mul_(slope)  # ∂/∂d_ij, d_ij = s_j − s_{a_i}
        grad_scores = grad_pairs.sum(0)
        grad_scores.index_add_(0, anchors, grad_pairs.sum(1), alpha=-1.0)
        return grad_scores, None, None, None


def pairwise_weighted_sum(
    scores: torch.Tensor,
    anchors: torch.Tensor,
    weights: torch.Tensor,
    with_slope: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """``out[i, k] = Σ_j ℓ(s_j − s_{a_i}) · weights[j, k]``: every anchor ``a_i`` against every position ``j``.

    Args:
        scores: ``[B]`` (with gradient).
        anchors: ``[P]`` long, positions of the anchors in ``scores``.
        weights: ``[B, K]`` constants (no gradient), e.g. AP's ``[1[y_j = 1], 1] / B``.
        with_slope: ``d ↦ (ℓ(d), ℓ'(d))`` from :func:`pairwise_surrogate_with_slope`.

    Returns:
        ``[P, K]``. The gradient w.r.t. ``scores`` is computed in closed form from the saved ``ℓ'``:
        ``∂out/∂s_j`` collects ``+ℓ'`` over the anchors and ``∂out/∂s_{a_i}`` the ``−ℓ'`` of anchor i's row.
    """
    if weights.requires_grad:
        raise ValueError("pairwise_weighted_sum: weights are constants (no gradient flows to them)")
    return _PairwiseWeightedSum.apply(scores, anchors, weights, with_slope)


def surrogate_range(name: str, margin: float = 1.0, scale: float = 1.0, score_range: float = 1.0) -> tuple[float, float]:
    """``(ℓ(0), max ℓ)`` for scores in an interval of width ``score_range`` (e.g. 1 for sigmoid scores).

    ``ℓ(0)`` is the self-pair value C of Wang et al.'s (AISTATS 2022) Assumption 1 and the bound M of its Ω.
    """
    ell = pairwise_surrogate(name, margin, scale)
    lo, hi = ell(torch.tensor(0.0, dtype=torch.float64)), ell(torch.tensor(float(score_range), dtype=torch.float64))
    return float(lo), float(hi)
