"""Non-smooth outer functions with their prox and Moreau envelope, and the composite objectives built on them.

Chen et al. (NeurIPS 2025; SONEX / ALEXR2) solve ``min_w F(w) = g_0(w) + (1/n) Σ_i f(g_i(w))`` where the outer
``f`` is convex (or weakly convex) but **non-smooth** and has a cheap prox. The algorithms replace ``f`` by its
Moreau envelope (§3, eq. (2))::

    prox_{λf}(u) = argmin_v f(v) + ‖u − v‖²/(2λ)
    f_λ(u)       = min_v   f(v) + ‖u − v‖²/(2λ)          (smooth: ∇f_λ is max{1/λ, ρ/(1 − λρ)}-Lipschitz)
    ∇f_λ(u)      = (u − prox_{λf}(u)) / λ ∈ ∂f(prox_{λf}(u))

:class:`OuterFunction` is that interface; every function here has all three in closed form:

=========================  ================================  ==============================================
class                      f                                 used for
=========================  ================================  ==============================================
:class:`Hinge`             ``ρ[x]_+``                        exact penalty (SONX, Yang et al. 2025); CVaR, ρ = 1/r
:class:`SmoothedHinge`     the Huber form ``f_λ`` of Hinge   smoothed-hinge penalty (SONEX / ALEXR2, eq. (9))
:class:`SquaredHinge`      ``ρ[x]_+²``                       inexact penalty of the SOX baseline (Li et al. 2024)
:class:`GapPenalty`        ``p(|g_1 − g_2| − κ)`` on R²      ROC-fairness constraints (App. F.2)
=========================  ================================  ==============================================

The smoothing parameter λ belongs to the algorithm (``SONEX(smoothing=...)``, ``ALEXR2(smoothing=...)``): the objective says
what ``f`` is, the algorithm smooths it. ``lam = 0`` means "no smoothing" (the value and a subgradient of ``f``
itself: SONX). The Huber form is also offered as a penalty in its own right (``penalty="smoothed_hinge"``), so that
an algorithm for smooth problems can be run on ``Φ_λ``; for a scalar constraint SONEX(λ) on the hinge and SONEX(0)
on the smoothed hinge with the same λ are the same algorithm (a test checks it).

:class:`CompositeObjective` is the FCCO objective shared by GDRO-CVaR and the constrained problems
(:mod:`fccolit.objectives.constrained`): ``F(w) = g_0(w) + (1/n) Σ_i f(g_i(w))`` with one outer function for every
``i`` and an optional direct term ``g_0`` (a plain mini-batch mean: the objective of a constrained problem, or the
CVaR threshold ``s``).

Every closed form here is checked against a numerical Moreau envelope in ``tests/objectives/test_nonsmooth.py``.

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504 (§3: the Moreau envelope; §5: the smoothed hinge penalty; App. F: the tasks).
    * Yang et al. 2025: Ming Yang, Gang Li, Quanqi Hu, Qihang Lin and Tianbao Yang, "Single-loop Algorithms for
      Stochastic Non-convex Optimization with Weakly-convex Constraints", arXiv:2504.15243 (the hinge penalty).
    * Li et al. 2024: Gang Li, Wendi Yu, Yao Yao, Wei Tong, Yingbin Liang, Qihang Lin and Tianbao Yang, "Model
      Developmental Safety: A Safety-Centric Method and Applications in Vision-Language Models", arXiv:2410.03955
      (the squared-hinge penalty).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from fccolit.objectives.base import FCCOObjective, InnerBatch

__all__ = [
    "OuterFunction",
    "Hinge",
    "SmoothedHinge",
    "SquaredHinge",
    "GapPenalty",
    "make_penalty",
    "PENALTIES",
    "PenaltyName",
    "CompositeObjective",
]

#: Accepted ``penalty`` names of :func:`make_penalty`.
PenaltyName = Literal["hinge", "smoothed_hinge", "squared_hinge"]
PENALTIES: tuple[str, ...] = get_args(PenaltyName)


def _check_lam(lam: float) -> float:
    lam = float(lam)
    if not lam >= 0.0:
        raise ValueError(f"the smoothing parameter λ (lam) must be >= 0, got {lam}")
    return lam


class OuterFunction:
    """A scalar outer function of a vector, applied row-wise: ``u [B, dim] → [B]``.

    Subclasses implement :meth:`value`, :meth:`grad`, :meth:`prox` and, where a closed form exists (all of them
    here), :meth:`envelope` and :meth:`envelope_grad`; the defaults derive the envelope from the prox. Every method
    accepts ``lam = 0``, meaning the function itself (prox = identity, envelope = value, envelope_grad = grad).

    Attributes:
        dim: d', the number of components of the inner value.
        smooth: f has a Lipschitz gradient (then ``grad`` is the gradient; otherwise a subgradient).
        lipschitz: C_f, the Lipschitz constant of f (None when f is not Lipschitz, e.g. the squared hinge).

    Raises:
        NotImplementedError: :meth:`value`, :meth:`grad` or :meth:`prox` called on a subclass that lacks it.
        ValueError: a smoothing parameter ``lam`` below 0 (or NaN) given to :meth:`envelope` or
            :meth:`envelope_grad`.

    Example:
        >>> import torch
        >>> hinge, u = Hinge(), torch.tensor([[-1.0], [2.0]])
        >>> hinge.envelope(u, 0.0), hinge.envelope(u, 0.5)  # lam = 0: f itself; lam > 0: the Moreau envelope
        (tensor([0., 2.]), tensor([0.0000, 1.7500]))
        >>> hinge.envelope(u, -1.0)
        Traceback (most recent call last):
        ...
        ValueError: the smoothing parameter λ (lam) must be >= 0, got -1.0
    """

    dim: int = 1
    smooth: bool = False
    lipschitz: float | None = None

    def value(self, u: torch.Tensor) -> torch.Tensor:
        """``f(u)``: ``[B, dim] → [B]``."""
        raise NotImplementedError

    def grad(self, u: torch.Tensor) -> torch.Tensor:
        """A (sub)gradient of ``f`` at ``u``, ``[B, dim]`` (at a kink: the one of the right-continuous branch)."""
        raise NotImplementedError

    def prox(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        """``prox_{λf}(u)``, ``[B, dim]``."""
        raise NotImplementedError

    def envelope(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        """The Moreau envelope ``f_λ(u) = f(p) + ‖u − p‖²/(2λ)``, ``p = prox_{λf}(u)``: ``[B]``."""
        if _check_lam(lam) == 0.0:
            return self.value(u)
        p = self.prox(u, lam)
        return self.value(p) + (u - p).square().sum(-1) / (2.0 * lam)

    def envelope_grad(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        """``∇f_λ(u) = (u − prox_{λf}(u))/λ`` (eq. (2)), ``[B, dim]``; the optimal dual variable y of f_λ."""
        if _check_lam(lam) == 0.0:
            return self.grad(u)
        return (u - self.prox(u, lam)) / lam

    def multiplier(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        """The scalar weight ``∂p(h)`` the (smoothed) penalty puts on the constraint value ``h`` of each row
        (before the 1/m of the mean over constraints): ``[B]``. For d' = 1 it is ``∇f_λ(u)``."""
        return self.envelope_grad(u, lam)[..., 0]

    def constraint(self, u: torch.Tensor) -> torch.Tensor:
        """The constraint value ``h`` the penalty acts on (``h ≤ 0`` is feasible): ``[B]``. For d' = 1, ``u``."""
        return u[..., 0]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in vars(self).items() if k not in ("smooth", "lipschitz") and not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Hinge(OuterFunction):
    r"""``f(x) = ρ [x]_+`` (d' = 1): the exact penalty of a constraint ``x ≤ 0``, and CVaR's outer with ρ = 1/r.

    Closed forms (Chen et al., §5; convex, C_f = ρ)::

        prox_{λf}(x) = x (x ≤ 0);  0 (0 ≤ x ≤ λρ);  x − λρ (x > λρ)   =  x − clip(x, 0, λρ)
        f_λ(x)       = 0 (x ≤ 0);  x²/(2λ) (0 < x ≤ λρ);  ρx − λρ²/2 (x > λρ)      (the Huber form)
        ∇f_λ(x)      = clip(x/λ, 0, ρ)     (= the dual maximizer of max_{y∈[0,ρ]} y x − λy²/2)

    Args:
        rho: ρ > 0, the penalty weight (β in eq. (53); 1/r for CVaR).

    Raises:
        ValueError: ``rho ≤ 0``; in the envelope methods, a smoothing ``lam < 0``.

    Example:
        >>> import torch
        >>> u = torch.tensor([[-1.0], [0.5]])  # two constraint values
        >>> from fccolit.objectives import Hinge
        >>> f = Hinge(rho=2.0)
        >>> f.value(u).tolist(), f.envelope_grad(u, 0.1)[:, 0].tolist()  # f and ∇f_λ (λ = 0.1)
        ([0.0, 1.0], [0.0, 2.0])
    """

    def __init__(self, rho: float = 1.0) -> None:
        if not float(rho) > 0.0:
            raise ValueError(f"the penalty weight ρ (rho) must be > 0, got {rho}")
        self.rho = float(rho)
        self.lipschitz = self.rho

    def value(self, u: torch.Tensor) -> torch.Tensor:
        return self.rho * u[..., 0].clamp_min(0.0)

    def grad(self, u: torch.Tensor) -> torch.Tensor:
        return self.rho * (u > 0).to(u.dtype)

    def prox(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        return u - u.clamp(0.0, lam * self.rho)

    def envelope(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        if lam == 0.0:
            return self.value(u)
        x = u[..., 0]
        knee = lam * self.rho
        quadratic = x.clamp(0.0, knee).square() / (2.0 * lam)
        linear = self.rho * (x - knee).clamp_min(0.0)
        return quadratic + linear  # = x²/(2λ) below the knee, ρx − λρ²/2 above it

    def envelope_grad(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        if lam == 0.0:
            return self.grad(u)
        return (u / lam).clamp(0.0, self.rho)


class SquaredHinge(OuterFunction):
    r"""``f(x) = ρ [x]_+²`` (d' = 1): the squared-hinge penalty of the SOX baseline (Chen et al., NeurIPS 2025).

    After Li et al. 2024; the paper does not print its scaling: ``(ρ/m) Σ [g_i]_+²`` is an assumption. Smooth,
    not Lipschitz.

    Closed forms: ``∇f = 2ρ[x]_+``; ``prox_{λf}(x) = x`` (x ≤ 0), ``x/(1 + 2λρ)`` (x > 0);
    ``f_λ(x) = ρ[x]_+²/(1 + 2λρ)``.

    Args:
        rho: ρ > 0, the penalty weight.

    Raises:
        ValueError: ``rho ≤ 0``; in the envelope methods, a smoothing ``lam < 0``.

    Example:
        >>> import torch
        >>> u = torch.tensor([[-1.0], [0.5]])  # two constraint values
        >>> from fccolit.objectives import SquaredHinge
        >>> f = SquaredHinge(rho=2.0)
        >>> f.value(u).tolist(), f.grad(u)[:, 0].tolist()
        ([0.0, 0.5], [0.0, 2.0])
    """

    smooth = True

    def __init__(self, rho: float = 1.0) -> None:
        if not float(rho) > 0.0:
            raise ValueError(f"the penalty weight ρ (rho) must be > 0, got {rho}")
        self.rho = float(rho)

    def value(self, u: torch.Tensor) -> torch.Tensor:
        return self.rho * u[..., 0].clamp_min(0.0).square()

    def grad(self, u: torch.Tensor) -> torch.Tensor:
        return 2.0 * self.rho * u.clamp_min(0.0)

    def prox(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        return torch.where(u > 0, u / (1.0 + 2.0 * lam * self.rho), u)

    def envelope(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.value(u) / (1.0 + 2.0 * _check_lam(lam) * self.rho)

    def envelope_grad(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.grad(u) / (1.0 + 2.0 * _check_lam(lam) * self.rho)


class SmoothedHinge(OuterFunction):
    r"""The smoothed hinge ``f_λ``: the Moreau envelope of :class:`Hinge` ``ρ[x]_+`` (Chen et al., NeurIPS 2025).

    The Huber form of Chen et al.'s eq. (9)::

        f_λ(x)  = 0 (x ≤ 0);  x²/(2λ) (0 < x ≤ λρ);  ρx − λρ²/2 (x > λρ)
        ∇f_λ(x) = min{[x]_+/λ, ρ}          f_λ ≤ ρ[x]_+ ≤ f_λ + λρ²/2

    Being an envelope, its own prox and envelope follow from the semigroup property ``(f_λ)_μ = f_{λ+μ}``::

        prox_{μ f_λ}(x) = x − μ ∇f_{λ+μ}(x),       (f_λ)_μ = f_{λ+μ}

    Args:
        rho: ρ > 0, the penalty weight.
        smoothing: λ > 0, the smoothing parameter of the Moreau envelope (the paper takes λ = ε/ρ; the ROC-fairness
            grid is {2e-2, 2e-3, 2e-4}).

    Raises:
        ValueError: ``rho ≤ 0`` or ``smoothing ≤ 0`` (use :class:`Hinge` for λ = 0).

    Example:
        >>> import torch
        >>> u = torch.tensor([[-1.0], [0.5]])  # two constraint values
        >>> from fccolit.objectives import SmoothedHinge
        >>> f = SmoothedHinge(rho=2.0, smoothing=0.1)
        >>> [round(v, 4) for v in f.value(u).tolist()], f.grad(u)[:, 0].tolist()  # ρx − λρ²/2 above the knee λρ
        ([0.0, 0.8], [0.0, 2.0])
    """

    smooth = True

    def __init__(self, rho: float = 1.0, smoothing: float = 0.01) -> None:
        if not float(smoothing) > 0.0:
            raise ValueError(f"the smoothed hinge needs smoothing (λ) > 0, got {smoothing}; use Hinge for λ = 0")
        self.hinge = Hinge(rho)
        self.rho, self.smoothing = self.hinge.rho, float(smoothing)
        self.lipschitz = self.rho

    def value(self, u: torch.Tensor) -> torch.Tensor:
        return self.hinge.envelope(u, self.smoothing)

    def grad(self, u: torch.Tensor) -> torch.Tensor:
        return self.hinge.envelope_grad(u, self.smoothing)

    def prox(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        return u - lam * self.hinge.envelope_grad(u, self.smoothing + lam)

    def envelope(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.hinge.envelope(u, self.smoothing + _check_lam(lam))

    def envelope_grad(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.hinge.envelope_grad(u, self.smoothing + _check_lam(lam))

    def __repr__(self) -> str:
        return f"SmoothedHinge(rho={self.rho}, smoothing={self.smoothing})"


class GapPenalty(OuterFunction):
    r"""``f(g) = p(|g_1 − g_2| − κ)`` on ``g ∈ R²``: a penalty ``p`` of the constraint ``|g_1 − g_2| ≤ κ``.

    The ROC-fairness constraints (Chen et al., App. F.2) are ``h = |g_1 − g_2| − κ ≤ 0`` where ``g_1, g_2`` are the mean
    sigmoid scores of the two groups; with ``p = ρ[·]_+`` this is the paper's ``f(g) = ρ[|g_1 − g_2| − κ]_+``
    (convex, not monotone: case A2).

    Closed forms [derived; tests compare them with numerical 2-D envelopes]: with ``z = g_1 − g_2`` and
    ``q(ζ) = p(|ζ| − κ)`` (only the component of ``g`` along ``(1, −1)`` matters, and ``‖g − v‖²`` along it is
    ``(z − ζ)²/2``)::

        prox_{λf}(g) = g − ((z − ζ*)/2)·(1, −1),     ζ* = prox_{2λ q}(z) = z (|z| ≤ κ), sign(z)(κ + prox_{2λp}(|z| − κ))
        f_λ(g)       = p_{2λ}(|z| − κ)               (for the hinge: its Huber form with 2λ, at |z| − κ)
        ∇f_λ(g)      = (1, −1) · sign(z) · ∇p_{2λ}(|z| − κ)

    So smoothing ``f`` in g-space with λ is smoothing the scalar penalty of ``h`` with 2λ.

    Args:
        penalty: the scalar penalty ``p`` (:class:`Hinge`, :class:`SmoothedHinge` or :class:`SquaredHinge`).
        kappa: κ ≥ 0, the tolerance.

    Raises:
        ValueError: a penalty that is not scalar (``dim != 1``), or ``kappa < 0``.

    Example:
        >>> import torch
        >>> from fccolit.objectives import GapPenalty, Hinge
        >>> f = GapPenalty(Hinge(1.0), kappa=0.1)
        >>> g = torch.tensor([[0.5, 0.2], [0.3, 0.25]])  # (g_1, g_2) of two constraints
        >>> [round(v, 4) for v in f.constraint(g).tolist()], [round(v, 4) for v in f.value(g).tolist()]
        ([0.2, -0.05], [0.2, 0.0])
    """

    dim = 2

    def __init__(self, penalty: OuterFunction, kappa: float = 0.005) -> None:
        if penalty.dim != 1:
            raise ValueError(f"GapPenalty needs a scalar penalty, got {penalty!r}")
        if not float(kappa) >= 0.0:
            raise ValueError(f"the tolerance κ (kappa) must be >= 0, got {kappa}")
        self.penalty, self.kappa = penalty, float(kappa)
        self.smooth = penalty.smooth and self.kappa > 0.0  # |z| is smooth where p' vanishes
        self.lipschitz = None if penalty.lipschitz is None else 2.0**0.5 * penalty.lipschitz

    def _split(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = u[..., 0] - u[..., 1]
        direction = torch.stack([torch.ones_like(z), -torch.ones_like(z)], dim=-1)
        return z, torch.sign(z), direction

    def constraint(self, u: torch.Tensor) -> torch.Tensor:
        return (u[..., 0] - u[..., 1]).abs() - self.kappa

    def value(self, u: torch.Tensor) -> torch.Tensor:
        return self.penalty.value(self.constraint(u).unsqueeze(-1))

    def grad(self, u: torch.Tensor) -> torch.Tensor:
        z, sign, direction = self._split(u)
        slope = self.penalty.grad(self.constraint(u).unsqueeze(-1))[..., 0]
        return direction * (sign * slope).unsqueeze(-1)

    def prox(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        lam = _check_lam(lam)
        z, sign, direction = self._split(u)
        excess = (z.abs() - self.kappa).unsqueeze(-1)
        shrunk = sign * (self.kappa + self.penalty.prox(excess, 2.0 * lam)[..., 0])
        zeta = torch.where(excess[..., 0] > 0, shrunk, z)
        return u - direction * ((z - zeta) / 2.0).unsqueeze(-1)

    def envelope(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.penalty.envelope(self.constraint(u).unsqueeze(-1), 2.0 * _check_lam(lam))

    def envelope_grad(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        z, sign, direction = self._split(u)
        return direction * (sign * self.multiplier(u, lam)).unsqueeze(-1)

    def multiplier(self, u: torch.Tensor, lam: float) -> torch.Tensor:
        return self.penalty.envelope_grad(self.constraint(u).unsqueeze(-1), 2.0 * _check_lam(lam))[..., 0]

    def __repr__(self) -> str:
        return f"GapPenalty({self.penalty!r}, kappa={self.kappa})"


def make_penalty(name: PenaltyName, rho: float, smoothing: float | None = None) -> OuterFunction:
    """The scalar penalty named ``name``: ``"hinge"`` (ρ[x]_+), ``"smoothed_hinge"`` (its Huber form with λ) or
    ``"squared_hinge"`` (ρ[x]_+²). ``smoothing`` (λ) is only accepted (and required) for ``"smoothed_hinge"``."""
    if name not in PENALTIES:
        raise ValueError(f"unknown penalty {name!r}; choose one of {', '.join(PENALTIES)}")
    if name == "smoothed_hinge":
        if smoothing is None:
            raise ValueError("penalty='smoothed_hinge' needs its smoothing parameter: pass smoothing (λ > 0)")
        return SmoothedHinge(rho, smoothing)
    if smoothing is not None:
        raise ValueError(
            f"smoothing={smoothing} only applies to penalty='smoothed_hinge'; to smooth a '{name}' penalty give λ to "
            "the algorithm instead (SONEX(smoothing=...), ALEXR2(smoothing=...))"
        )
    return Hinge(rho) if name == "hinge" else SquaredHinge(rho)


class CompositeObjective(FCCOObjective):
    r"""``F(w) = g_0(w) + (1/n) Σ_i f(g_i(w))`` with one :class:`OuterFunction` ``f`` for every outer index.

    Subclasses set :attr:`outer_fn` and implement :meth:`inner` (the ``g_i``) and, if there is one, :meth:`direct`
    (a plain mini-batch estimate of ``g_0``, differentiable; e.g. the objective of a constrained problem or the
    CVaR threshold ``s``). The algorithms of Chen et al. (:class:`~fccolit.algorithms.sonex.SONEX`,
    :class:`~fccolit.algorithms.alexr2.ALEXR2`) then step on ``∇g_0 + mean_i ∇ĝ_i · ∇f_λ(u_i)``.

    ``forward(scores, batch)`` is :meth:`inner`, so ``torch.func.functional_call`` can evaluate the inner values at
    other parameters (the previous iterate of SONEX's MSVR correction) when the objective has parameters.

    **A direct term that is itself an FCCO**, ``g_0(w) = (1/n_0) Σ_a f_0(g_{0,a}(w))`` (e.g. a global contrastive
    loss, whose log wraps a mean over the data): return it as an :class:`~fccolit.objectives.FCCOObjective` from
    :attr:`direct_objective` (held by composition, e.g. :class:`~fccolit.objectives.continual.GlobalContrastiveLoss`).
    SONEX then tracks ``g_{0,a}`` with a per-index state of its own and the same step as the ``g_i`` (Chen et al.'s
    "modified SONEX", App. F.3), stepping on ``mean_a ∇ĝ_{0,a} ∇f_0(u_{0,a})``; :meth:`direct` is then the plug-in
    mini-batch value ``mean_a f_0(ĝ_{0,a})`` (what the algorithms without that state use).

    Example:
        >>> import torch
        >>> from fccolit.objectives import CompositeObjective, Hinge, InnerBatch
        >>> class HingeOfTheMean(CompositeObjective):  # F = [mean(s) − 1]_+, one outer index
        ...     outer_fn = Hinge(1.0)
        ...     def inner(self, scores, batch):
        ...         return InnerBatch(index=torch.zeros(1, dtype=torch.long), value=(scores.mean() - 1.0).reshape(1, 1))
        >>> objective, scores = HingeOfTheMean(), torch.tensor([1.0, 2.0, 3.0])
        >>> float(objective.exact_value(scores, {})), float(objective.exact_value(scores, {}, lam=2.0))  # F and F_λ
        (1.0, 0.25)
    """

    outer_fn: OuterFunction

    @property
    def direct_objective(self) -> FCCOObjective | None:
        """The direct term when it is itself an FCCO (tracked by SONEX), else None (the default)."""
        return None

    def direct(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Mini-batch estimate of ``g_0`` (a differentiable scalar), or None when ``F`` has no direct term.

        With a tracked direct term (:attr:`direct_objective`): ``mean_a f_0(ĝ_{0,a})`` over the batch's direct
        rows (0, with the graph, when the batch has none)."""
        direct = self.direct_objective
        if direct is None:
            return None
        inner = direct.inner(scores, batch)
        if inner.index.numel() == 0:
            return scores.sum() * 0.0
        return direct.outer(inner.value, inner.context).mean()

    def forward(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        return self.inner(scores, batch)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.outer_fn.value(u)

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.outer_fn.grad(u)

    def smoothed_outer(self, u: torch.Tensor, lam: float, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``f_λ(u)``, ``[B]``."""
        return self.outer_fn.envelope(u, lam)

    def smoothed_outer_grad(self, u: torch.Tensor, lam: float, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``∇f_λ(u)``, ``[B, d']`` (= ``outer_grad`` when λ = 0)."""
        return self.outer_fn.envelope_grad(u, lam)

    def prox(self, u: torch.Tensor, lam: float, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``prox_{λf}(u)``, ``[B, d']``."""
        return self.outer_fn.prox(u, lam)

    def multipliers(self, u: torch.Tensor, lam: float = 0.0) -> torch.Tensor:
        """Per-row weights ``(1/n) ∂p_λ(h_i)`` of the (smoothed) penalty at the inner values ``u`` ``[n, d']``.

        At the exact inner values ``u = g(ŵ)`` of a point ŵ these are the multipliers ``ν_i = (1/m) ∇f_λ(g_i(ŵ))``
        of Chen et al.'s Prop. 5.2 (constraints) or the CVaR group weights (GDRO); at an algorithm's tracked estimates
        they are only the weights its estimator used (see ``NonsmoothFCCOModule.penalty_weights``). ``[n]``."""
        return self.outer_fn.multiplier(u, lam) / u.shape[0]

    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor], lam: float = 0.0) -> torch.Tensor:
        """``F_λ`` (``F`` for λ = 0) when ``batch`` holds every sample: ``g_0 + mean_i f_λ(g_i)``."""
        inner = self.inner(scores, batch)
        value = self.smoothed_outer(inner.value, lam, inner.context).mean()
        direct = self.direct(scores, batch)
        return value if direct is None else value + direct

    def extra_repr(self) -> str:
        return f"outer_fn={self.outer_fn!r}"
