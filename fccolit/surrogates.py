"""Pairwise surrogate losses ℓ(d) of the step ``I(d ≥ 0)``, with ``d = s_j − s_i`` the score margin.

Every surrogate "penalizes large input" (seed 001): it is non-decreasing in ``d``, so ``ℓ(s_j − s_i)`` is large
when the competitor ``j`` scores above the anchor ``i``. The same functions serve AP (ℓ of ``s_j − s_i`` for
anchor positive ``i``), NDCG (ℓ of ``s_j − s_i`` for relevant item ``i``) and p-norm push (``exp`` of
``s_i − s_j`` for negative ``i``, positive ``j``).

==================  ===================================  =======================================
name                ℓ(d)                                 notes
==================  ===================================  =======================================
``squared_hinge``   ``max(0, margin + d)²``              AP (SOAP/MOAP/ADAP), NDCG (SONG)
``hinge``           ``max(0, margin + d)``
``logistic``        ``log(1 + exp(scale · d))``
``sigmoid``         ``1 / (1 + exp(−scale · d))``          AP's "logistic" surrogate in seed 002
``exp``             ``exp(scale · d)``                   p-norm push (Rudin 2009)
==================  ===================================  =======================================
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

SURROGATES = ("squared_hinge", "hinge", "logistic", "sigmoid", "exp")


def pairwise_surrogate(name: str, margin: float = 1.0, scale: float = 1.0) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return ``ℓ`` as a function of the margin tensor ``d`` (any shape, elementwise)."""
    if name == "squared_hinge":
        return lambda d: F.relu(margin + d).square()
    if name == "hinge":
        return lambda d: F.relu(margin + d)
    if name == "logistic":
        return lambda d: F.softplus(scale * d)
    if name == "sigmoid":
        return lambda d: torch.sigmoid(scale * d)
    if name == "exp":
        return lambda d: torch.exp(scale * d)
    raise ValueError(f"unknown surrogate {name!r}; choose one of {', '.join(SURROGATES)}")


def surrogate_range(name: str, margin: float = 1.0, scale: float = 1.0, score_range: float = 1.0) -> tuple[float, float]:
    """``(ℓ(0), max ℓ)`` for scores in an interval of width ``score_range`` (e.g. 1 for sigmoid scores).

    ``ℓ(0)`` is the self-pair value C of seed 002's Assumption 1 and the bound M of its Ω.
    """
    ell = pairwise_surrogate(name, margin, scale)
    lo, hi = ell(torch.tensor(0.0, dtype=torch.float64)), ell(torch.tensor(float(score_range), dtype=torch.float64))
    return float(lo), float(hi)
