"""Momentum and Adam-type optimizers in the convention of the FCCO / X-risk papers.

Every compositional method in fccolit (SOX, SOAP, MOAP, ADAP, SONG, SONEX, ALEXR2, ...) builds a
stochastic gradient estimator ``G_t`` (usually as the gradient of a surrogate loss whose ``.backward()``
fills ``p.grad``) and then takes either a *momentum* step or an *Adam-type* step on it.  The two
optimizers below implement exactly those steps, written the way the papers write them.

Convention: the weight multiplies the new sample
=================================================
Every ``*_weight`` hyper-parameter here (and every β in the papers) is the weight of the **new** sample
in an exponential moving average::

    new = (1 - β) * old + β * sample

This is the opposite of ``torch.optim``'s ``momentum`` / ``betas``, which weight the *old* value.  So a
paper β of 0.1 corresponds to a torch value of 0.9:

====================================  =============================  ===========================================
fccolit argument                      paper symbol                   torch equivalent
====================================  =============================  ===========================================
``Momentum.momentum_weight``          β (SOX, SONEX), β1 (MOAP)      ``SGD(lr=lr*β, momentum=1-β, dampening=0)``
``AdaptiveMomentum.momentum_weight``  β1 (ADAP), β (SONEX)           ``Adam(betas=(1-β1, ·))``
``AdaptiveMomentum.second_moment_``   β' (ADAP eq. (13), SONEX)      ``Adam(betas=(·, 1-β'))``
``weight``
``eps``                               δ (ADAP), ε_adam (SONEX)       ``Adam(eps=...)``
====================================  =============================  ===========================================

All hyper-parameters live in ``param_groups`` and are re-read at every step, so
``torch.optim.lr_scheduler`` schedulers (for ``lr``) and hand-written schedules of the weights (for
example the ``β_t = min(1, β_0/√t)`` schedule of the MOAP/ADAP linear experiments: assign
``group["momentum_weight"]`` before ``step()``) take effect immediately.

Why not ``torch.optim``: at constant weights ``Momentum`` is ``SGD(lr·β, momentum=1−β)`` and
``AdaptiveMomentum(bias_correction=True)`` is ``Adam`` (``tests/optim/test_optim.py``), but under the papers' β
schedules no per-step mapping onto ``momentum`` / ``dampening`` / ``betas`` gives their update (torch skips dampening
on the first step and corrects Adam's bias with the current β^t), ADAP runs without bias correction, which torch's
Adam cannot, and eq. (13)'s ``adagrad`` / ``adabound`` second moments have no torch counterpart
(``tests/optim/test_optim_vs_torch.py``). The hand-written steps take about the time of torch's per-tensor ones
(``benchmarks/handwritten.py``; the measured ratios, and those of torch's multi-tensor ``foreach`` path, are in
``benchmarks/results/handwritten.md``). ``LazyAdam`` is one optimizer for a config's one ``optimizer:`` entry where
torch needs ``SparseAdam`` and ``Adam``.

References (the steps as the papers write them):
    * Wang & Yang (ICML 2022), Algorithm 1 (SOX's momentum step): Bokun Wang and Tianbao Yang, "Finite-Sum
      Coupled Compositional Stochastic Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Wang et al. (AISTATS 2022), Algorithms 1–3 and eq. (13) (MOAP-V1/V2's momentum, ADAP's four second
      moments): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates the Convergence of
      Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
    * Chen et al. (NeurIPS 2025), Algorithm 1 and App. E (SONEX's momentum and Adam-type steps): Xingyu Chen, Bokun
      Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic Momentum Methods for Non-smooth Non-Convex
      Finite-Sum Coupled Compositional Optimization", NeurIPS 2025, arXiv:2506.02504.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Literal, Optional

import torch
from torch.optim import Optimizer

from fccolit._checks import check_choice, check_weight, is_number

__all__ = ["Momentum", "AdaptiveMomentum", "LazyAdam", "SECOND_MOMENT_VARIANTS"]

#: Accepted values of ``AdaptiveMomentum(second_moment=...)``: the four options of ADAP's eq. (13).
SECOND_MOMENT_VARIANTS = ("adam", "amsgrad", "adagrad", "adabound")


# --------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------
def _check_lr(lr: Any) -> None:
    if isinstance(lr, torch.Tensor):
        if lr.numel() != 1:
            raise ValueError(f"lr must be a scalar, got a tensor of shape {tuple(lr.shape)}")
        lr = lr.item()
    if not is_number(lr) or not math.isfinite(lr) or lr < 0.0:
        raise ValueError(f"Invalid learning rate: {lr!r} (need a finite lr >= 0)")


def _check_weight(name: str, value: Any, symbol: str) -> None:
    check_weight(name, value, symbol, note=f"Torch's momentum / beta is 1 - {symbol}.")


def _check_weight_decay(weight_decay: Any) -> None:
    if not is_number(weight_decay) or not math.isfinite(weight_decay) or weight_decay < 0.0:
        raise ValueError(f"Invalid weight_decay: {weight_decay!r} (need a finite value >= 0)")


def _lr_value(lr: Any) -> float:
    return lr.item() if isinstance(lr, torch.Tensor) else float(lr)


def _grad_of(p: torch.Tensor, optimizer_name: str) -> torch.Tensor:
    grad = p.grad
    if grad.is_sparse:
        raise RuntimeError(f"{optimizer_name} does not support sparse gradients")
    return grad


# --------------------------------------------------------------------------------------------------
# Momentum
# --------------------------------------------------------------------------------------------------

def _evaluate(closure: Optional[Callable[[], Any]]) -> Any:
    """The loss of an optimizer ``step(closure)``: the closure re-evaluates the model with gradients on (None: no
    closure)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()

class _CheckedOptimizer(Optimizer):
    """The loop Momentum and AdaptiveMomentum share: every param group is validated when added and before each step
    (schedulers change hyper-parameters), weight decay is applied (coupled: ``G ← G + λw``; decoupled: ``w ←
    (1 − ηλ)w``; complex parameters as real views), and :meth:`_update` takes one parameter's step."""

    @staticmethod
    def _validate_group(group: dict) -> None:
        raise NotImplementedError

    def _update(self, param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict, lr: float) -> None:
        raise NotImplementedError

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        self._validate_group(self.param_groups[-1])

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Take one update. ``closure`` (optional) re-evaluates the model and returns the loss."""
        loss = _evaluate(closure)
        for group in self.param_groups:
            self._validate_group(group)  # schedulers may have changed the hyper-parameters
            self._step_group(group)
        return loss

    def _step_group(self, group: dict) -> None:
        """One update of every parameter of ``group`` that has a gradient, one parameter at a time."""
        lr = _lr_value(group["lr"])
        wd = float(group["weight_decay"])
        decoupled = bool(group["decoupled_weight_decay"])
        for p in group["params"]:
            if p.grad is None:
                continue
            param, grad = p, _grad_of(p, type(self).__name__)
            if torch.is_complex(p):
                param, grad = torch.view_as_real(p), torch.view_as_real(grad)
            if wd != 0.0:
                if decoupled:
                    param.mul_(1.0 - lr * wd)
                else:
                    grad = grad.add(param, alpha=wd)
            self._update(param, grad, self.state[p], group, lr)


class Momentum(_CheckedOptimizer):
    r"""Moving-average (heavy-ball) momentum in the papers' convention.

    Update, for every parameter ``w`` with gradient estimator ``G = w.grad``::

        G ← G + λ·w                         (coupled weight decay, if weight_decay=λ > 0)
        v ← (1 − β)·v + β·G                 (v initialised to 0, so the first v is β·G)
        w ← w − η·v

    This is SOX's steps (3)–(4), MOAP's lines 7–8 (eq. (6)) and SONEX/ALEXR2's momentum-type update.
    ``β = 1`` is plain SGD (``v = G``); SOAP (SGD) is this optimizer with ``momentum_weight=1``.

    Args:
        params: iterable of parameters or of parameter-group dicts.
        lr: step size η (paper η in SOX/MOAP/SONEX; α in ALEXR2). No default: the papers tune it.
        momentum_weight: β, the weight of the **new** gradient (paper β in SOX and SONEX, β1 in MOAP,
            β with β0 = β1 tied in the proofs of MOAP/ADAP). Must satisfy ``0 < β <= 1``. Default 0.1:
            the β that Wang & Yang (ICML 2022, §4.1) fix in their deep AP experiments; this default is a
            library choice, not a value the theory prescribes.
        weight_decay: λ ≥ 0 (default 0). Coupled (default) decay adds ``λ·w`` to ``G`` before the
            moving average, i.e. it optimises ``F(w) + (λ/2)‖w‖²`` (the regulariser of SOX's
            Corollary 1). **ADAP's experiments write the regulariser as λ‖w‖²** (gradient ``2λw``,
            λ = 1e-4 in the linear runs); to reproduce them pass ``weight_decay=2*λ``.
        decoupled_weight_decay: if True, decay is decoupled (AdamW/SGDW style): ``w ← (1 − η·λ)·w``
            first, then the momentum step on the un-decayed ``G``. Default False.

    Relation to ``torch.optim.SGD``: with ``v = 0`` initially, ``v_t = β·buf_t`` where ``buf`` is torch's
    heavy-ball buffer, so this optimizer equals ``SGD(lr=η·β, momentum=1−β, dampening=0,
    nesterov=False, weight_decay=λ)`` (coupled decay) up to floating-point rounding.  It does **not**
    equal ``SGD(lr=η, momentum=1−β, dampening=1−β)``: PyTorch skips dampening on the first step, which
    makes its first step 1/β times too large.  Equivalently: paper η = torch lr / β.

    State per parameter: ``momentum_buffer`` (v, same shape/dtype/device as the parameter) and
    ``step`` (int, number of updates taken).  Sparse gradients are not supported.

    Raises:
        ValueError: ``lr`` is negative or not finite, ``momentum_weight`` is outside ``(0, 1]``, or
            ``weight_decay`` is negative or not finite (checked at construction and before every step, since a
            scheduler may change them).
        RuntimeError: a parameter has a sparse gradient (at ``step``).

    Example:
        >>> import torch
        >>> from fccolit.optim import Momentum
        >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        >>> optimizer = Momentum([w], lr=0.5, momentum_weight=0.1)  # η = 0.5, β = 0.1
        >>> for step in range(2):
        ...     w.grad = torch.tensor([1.0, -2.0])  # the estimator G (here constant)
        ...     optimizer.step()
        ...     v = optimizer.state[w]["momentum_buffer"]  # v = 0.9 v + 0.1 G, then w = w − 0.5 v
        ...     print([round(x, 4) for x in v.tolist()], [round(x, 4) for x in w.tolist()])
        [0.1, -0.2] [0.95, -1.9]
        [0.19, -0.38] [0.855, -1.71]
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum_weight: float = 0.1,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum_weight=momentum_weight,
            weight_decay=weight_decay,
            decoupled_weight_decay=bool(decoupled_weight_decay),
        )
        self._validate_group(defaults)
        super().__init__(params, defaults)

    @staticmethod
    def _validate_group(group: dict) -> None:
        _check_lr(group["lr"])
        _check_weight("momentum_weight", group["momentum_weight"], "β")
        _check_weight_decay(group["weight_decay"])

    def _update(self, param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict, lr: float) -> None:
        if len(state) == 0:
            state["step"] = 0
            state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        v = state["momentum_buffer"]
        state["step"] += 1
        beta = float(group["momentum_weight"])
        # v ← (1 − β) v + β G
        v.mul_(1.0 - beta).add_(grad, alpha=beta)
        # w ← w − η v
        param.add_(v, alpha=-lr)


# --------------------------------------------------------------------------------------------------
# AdaptiveMomentum
# --------------------------------------------------------------------------------------------------
class AdaptiveMomentum(_CheckedOptimizer):
    r"""ADAP's Adam-type update (Algorithm 3, lines 7–9, with the four second-moment options of eq. (13)).

    Update, for every parameter ``w`` with gradient estimator ``G = w.grad`` (all operations
    element-wise, ``t = 1, 2, ...`` counts the updates of that parameter)::

        G ← G + λ·w                                         (coupled weight decay, if λ > 0)
        m ← (1 − β1)·m + β1·G                               (m initialised to 0)
        v ← h_t(v, G²)                                      (eq. (13), see below)
        w ← w − η · m / (√v + δ)

    with ``second_moment`` selecting ``h_t`` (β' = ``second_moment_weight``; all buffers start at 0):

    * ``"adam"``:     ``v ← (1 − β')·v + β'·G²``
    * ``"amsgrad"``:  ``v' ← (1 − β')·v' + β'·G²`` ; ``v ← max(v, v')``
    * ``"adagrad"``:  ``v_{t+1} = (1/(t+1)) · Σ_{i=1..t} G_i²`` **exactly as printed in eq. (13)**: a running
      sum of ``G²`` is kept and divided by ``t + 1`` (so after the first update ``v = G_1²/2``). This is a
      normalised mean, not AdaGrad's plain sum; ``second_moment_weight`` is unused by this variant.
    * ``"adabound"``: ``v' ← (1 − β')·v' + β'·G²`` ; ``v = clip(v', 1/c_u², 1/c_l²)`` with ``c_l = bound_low``
      and ``c_u = bound_high`` (``0 < c_l < c_u``; ``c_u = inf`` means no lower clip).  The bounds are
      static, as in ADAP, not the time-varying bounds of the original AdaBound.  They bound the
      per-coordinate factor ``1/(√v + δ)`` between about ``c_l`` and ``c_u``.

    With the default ``bias_correction=False`` this is ADAP exactly (the paper has no bias correction).
    With ``bias_correction=True`` the usual Adam correction is added::

        m̂ = m / (1 − Π_s(1 − β1_s)),     v̂ = v / (1 − Π_s(1 − β'_s))

    which, for constant weights, is ``m/(1 − (1−β1)^t)`` and ``v/(1 − (1−β')^t)`` (the products make the
    correction exact, i.e. the moving-average weights sum to one, also when a scheduler changes the
    weights).  Then ``second_moment="adam"`` equals ``torch.optim.Adam(lr=η, betas=(1−β1, 1−β'),
    eps=δ, weight_decay=λ)`` (``torch.optim.AdamW(..., weight_decay=λ)`` with
    ``decoupled_weight_decay=True``) up to rounding: the "Adam mode" of SONG/SOAP/SONEX/ALEXR2.  For the
    other variants, ``bias_correction=True`` corrects ``m`` as above and ``v`` as follows: ``"amsgrad"``
    takes the maximum of the *uncorrected* averages and divides it by the current correction (exactly
    ``torch.optim.Adam(amsgrad=True)``); ``"adabound"`` corrects ``v'`` before clipping; ``"adagrad"``
    has no moving average, so its ``v`` is not corrected.

    Args:
        params: iterable of parameters or of parameter-group dicts.
        lr: step size η (ADAP η; SONEX/ALEXR2 η or α). No default: the papers tune it.
        momentum_weight: β1, the weight of the **new** gradient in ``m`` (β1 in MOAP/ADAP; ADAP line 7
            prints β, a typo for β1; β in SONEX). ``0 < β1 <= 1``. Default 0.1 (torch ``beta1 = 0.9``):
            a library assumption, the ADAP paper does not report β1.
        second_moment_weight: β', the weight of the new ``G²`` in eq. (13) (β'_t in ADAP, β' in SONEX).
            ``0 < β' <= 1``. Default 0.001 (torch ``beta2 = 0.999``): an assumption, the papers do not
            report it.
        eps: δ > 0 in ``1/(√v + δ)`` (ADAP δ, SONEX ε_adam). Default 1e-8: an assumption (torch's
            default; ADAP does not report δ). Note that 1e-8 underflows to 0 in float16.
        second_moment: one of ``"adam"`` (default; the only variant run in ADAP's experiments),
            ``"amsgrad"``, ``"adagrad"``, ``"adabound"``.
        bound_low: c_l, required for (and only accepted with) ``"adabound"``.
        bound_high: c_u, required for (and only accepted with) ``"adabound"``; ``c_l < c_u``.
        weight_decay: λ ≥ 0 (default 0). Coupled (default) decay adds ``λ·w`` to ``G`` before both
            moments, i.e. the regulariser ``(λ/2)‖w‖²``. **ADAP's experiments write λ‖w‖²**
            (gradient ``2λw``); to reproduce them pass ``weight_decay=2*λ``.
        decoupled_weight_decay: if True, ``w ← (1 − η·λ)·w`` first (AdamW style), and ``G`` is not
            modified. Default False.
        bias_correction: see above. Default False (ADAP).
        fused: take the step of ``second_moment="adam"`` with torch's fused Adam kernel (``torch._fused_adam_``,
            one pass over each parameter; on CPU about half the time of the per-parameter loop) wherever it computes
            this update: dense real gradients and weights unchanged since the parameters' first step (a scheduler
            that changes β1 or β' sends the group back to the loop). The same update up to rounding (the kernel
            averages ``m`` by ``lerp``). Default True; False: the per-parameter loop.

    State per parameter: ``step`` (int), ``exp_avg`` (m), ``second_moment`` (v, the quantity in the
    denominator, before any bias correction), ``exp_avg_sq`` (v', only for ``"amsgrad"`` and
    ``"adabound"``), ``grad_sq_sum`` (Σ G², only for ``"adagrad"``), and the running products
    ``momentum_decay_prod`` = Π(1 − β1_s) and ``second_moment_decay_prod`` = Π(1 − β'_s) (Python floats)
    used by the bias correction.  Complex parameters are handled as pairs of reals (like torch.optim.Adam).
    Sparse gradients are not supported.

    Note (SONEX/ALEXR2): the Adam-type update of Chen et al. (NeurIPS 2025, App. E) as printed uses the
    second moment *before* its update (``s_t``) in the step; ADAP and torch use the updated one.  This optimizer
    follows ADAP/torch.

    Raises:
        ValueError: ``lr`` is negative or not finite, a weight is outside ``(0, 1]``, ``eps`` is not a finite
            positive number, ``second_moment`` is not one of the four, or the AdaBound bounds are missing,
            misordered or given to another variant (checked at construction and before every step).
        RuntimeError: a parameter has a sparse gradient, or its ``second_moment`` changed after its first step
            (at ``step``).

    Example:
        Without bias correction (ADAP) the first step is ``η · β1 G / (√(β' G²) + δ) ≈ η · 0.1 / √0.001 ≈ 3.16 η``
        per coordinate, whatever the gradient's size:

        >>> import torch
        >>> from fccolit.optim import AdaptiveMomentum
        >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        >>> optimizer = AdaptiveMomentum([w], lr=0.01)  # β1 = 0.1, β' = 0.001, second_moment="adam"
        >>> w.grad = torch.tensor([0.5, -4.0])
        >>> optimizer.step()
        >>> [round(x, 4) for x in w.tolist()]
        [0.9684, -1.9684]
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum_weight: float = 0.1,
        second_moment_weight: float = 0.001,
        eps: float = 1e-8,
        second_moment: Literal["adam", "amsgrad", "adagrad", "adabound"] = "adam",
        bound_low: Optional[float] = None,
        bound_high: Optional[float] = None,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        bias_correction: bool = False,
        fused: bool = True,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum_weight=momentum_weight,
            second_moment_weight=second_moment_weight,
            eps=eps,
            second_moment=second_moment,
            bound_low=bound_low,
            bound_high=bound_high,
            weight_decay=weight_decay,
            decoupled_weight_decay=bool(decoupled_weight_decay),
            bias_correction=bool(bias_correction),
            fused=bool(fused),
        )
        self._validate_group(defaults)
        super().__init__(params, defaults)

    #: the dtypes torch's fused Adam kernel takes on every device
    _FUSED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

    def _step_group(self, group: dict) -> None:
        """The group's update: torch's fused Adam kernel (``torch._fused_adam_``: one pass over each parameter
        instead of eight) where it computes this update, else the per-parameter loop."""
        params = [p for p in group["params"] if p.grad is not None]
        if not (params and self._fusable(group, params)):
            super()._step_group(group)
            return
        lr = _lr_value(group["lr"])
        beta1, beta2 = 1.0 - float(group["momentum_weight"]), 1.0 - float(group["second_moment_weight"])
        wd = float(group["weight_decay"])
        decoupled = bool(group["decoupled_weight_decay"])
        by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in params:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        for (device, _), ps in by_kind.items():
            steps = []
            for p in ps:
                state = self.state[p]
                if len(state) == 0:
                    self._init_state(state, p, "adam")
                state["step"] += 1
                state["momentum_decay_prod"] *= beta1
                state["second_moment_decay_prod"] *= beta2
                # the kernel corrects by 1 − β^t; t = inf makes both corrections 1 (no bias correction)
                steps.append(float(state["step"]) if group["bias_correction"] else math.inf)
            if wd != 0.0 and decoupled:
                torch._foreach_mul_(ps, 1.0 - lr * wd)
            # the kernel only reads the steps: one tensor per distinct value (the parameters of a group usually share
            # it), kept on the device and refilled, a kernel launch (a new tensor made from a Python number is a copy
            # that the host waits for on a GPU); not optimizer state: an unpickled or copied optimizer makes its own
            buffers = self.__dict__.setdefault("_step_buffers", {}).setdefault(device, [])
            distinct = sorted(set(steps))
            while len(buffers) < len(distinct):
                buffers.append(torch.empty((), dtype=torch.float32, device=device))
            shared = {t: buffers[k].fill_(t) for k, t in enumerate(distinct)}
            step_tensors = [shared[t] for t in steps]
            torch._fused_adam_(ps, [p.grad for p in ps], [self.state[p]["exp_avg"] for p in ps],
                               [self.state[p]["second_moment"] for p in ps], [], step_tensors, lr=lr, beta1=beta1,
                               beta2=beta2, weight_decay=0.0 if decoupled else wd, eps=float(group["eps"]),
                               amsgrad=False, maximize=False)

    def _fusable(self, group: dict, params: list[torch.Tensor]) -> bool:
        """Whether torch's fused Adam kernel computes this group's update: ``fused``, ``second_moment="adam"``, dense
        real gradients of a dtype it takes, and weights unchanged since the parameters' first step (the kernel
        corrects by ``1 − (1 − β)^t``, which equals the running products only then)."""
        if not (group.get("fused", False) and group["second_moment"] == "adam" and hasattr(torch, "_fused_adam_")):
            return False
        beta1, beta2 = 1.0 - float(group["momentum_weight"]), 1.0 - float(group["second_moment_weight"])
        for p in params:
            if p.grad.is_sparse or torch.is_complex(p) or p.dtype not in self._FUSED_DTYPES or p.grad.dtype != p.dtype:
                return False
            state = self.state[p]
            if state and not (math.isclose(state["momentum_decay_prod"], beta1 ** state["step"], rel_tol=1e-9)
                              and math.isclose(state["second_moment_decay_prod"], beta2 ** state["step"],
                                               rel_tol=1e-9, abs_tol=1e-300)):
                return False
        return True

    @staticmethod
    def _validate_group(group: dict) -> None:
        _check_lr(group["lr"])
        _check_weight("momentum_weight", group["momentum_weight"], "β1")
        _check_weight("second_moment_weight", group["second_moment_weight"], "β'")
        eps = group["eps"]
        if not is_number(eps) or not math.isfinite(eps) or eps <= 0.0:
            raise ValueError(f"Invalid eps: {eps!r} (ADAP's δ; need a finite eps > 0)")
        variant = group["second_moment"]
        check_choice("second_moment", variant, SECOND_MOMENT_VARIANTS)  # ADAP eq. (13); a group may be edited
        low, high = group["bound_low"], group["bound_high"]
        if variant == "adabound":
            if low is None or high is None:
                raise ValueError("second_moment='adabound' requires both bound_low (c_l) and bound_high (c_u)")
            if not is_number(low) or not is_number(high) or math.isnan(low) or math.isnan(high):
                raise ValueError(f"bound_low and bound_high must be numbers, got {low!r} and {high!r}")
            if not (0.0 < low < high):
                raise ValueError(
                    f"second_moment='adabound' requires 0 < bound_low < bound_high (c_l < c_u), "
                    f"got bound_low={low!r}, bound_high={high!r}"
                )
            if math.isinf(low):
                raise ValueError("bound_low (c_l) must be finite")
        elif low is not None or high is not None:
            raise ValueError(
                f"bound_low/bound_high only apply to second_moment='adabound' (got second_moment={variant!r})"
            )
        _check_weight_decay(group["weight_decay"])

    def _update(self, param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict, lr: float) -> None:
        beta1 = float(group["momentum_weight"])
        beta2 = float(group["second_moment_weight"])
        eps = float(group["eps"])
        variant = group["second_moment"]
        bias_correction = bool(group["bias_correction"])
        if len(state) == 0:
            self._init_state(state, param, variant)
        missing = self._missing_buffer(state, variant)
        if missing is not None:
            raise RuntimeError(
                f"AdaptiveMomentum: state has no {missing!r} buffer for second_moment={variant!r}; "
                "the second-moment variant of a parameter cannot be changed after its first step"
            )
        state["step"] += 1
        t = state["step"]

        m = state["exp_avg"]
        v = state["second_moment"]
        state["momentum_decay_prod"] *= 1.0 - beta1
        state["second_moment_decay_prod"] *= 1.0 - beta2

        # m ← (1 − β1) m + β1 G
        m.mul_(1.0 - beta1).add_(grad, alpha=beta1)

        # v ← h_t(v, G²), eq. (13)
        bc2 = 1.0 - state["second_moment_decay_prod"] if bias_correction else 1.0
        if variant == "adam":
            v.mul_(1.0 - beta2).addcmul_(grad, grad, value=beta2)
        elif variant == "amsgrad":
            v_ema = state["exp_avg_sq"]
            v_ema.mul_(1.0 - beta2).addcmul_(grad, grad, value=beta2)
            torch.maximum(v, v_ema, out=v)
        elif variant == "adagrad":
            s = state["grad_sq_sum"]
            s.addcmul_(grad, grad)
            torch.div(s, t + 1, out=v)
            bc2 = 1.0  # a mean, not a moving average: nothing to correct
        else:  # adabound
            v_ema = state["exp_avg_sq"]
            v_ema.mul_(1.0 - beta2).addcmul_(grad, grad, value=beta2)
            lo = 1.0 / float(group["bound_high"]) ** 2
            hi = 1.0 / float(group["bound_low"]) ** 2
            src = v_ema if bc2 == 1.0 else v_ema / bc2
            torch.clamp(src, min=lo, max=hi, out=v)
            bc2 = 1.0  # already applied before the clip

        # w ← w − η m̂ / (√v̂ + δ)
        if bias_correction:
            step_size = lr / (1.0 - state["momentum_decay_prod"])
        else:
            step_size = lr
        if bc2 != 1.0:
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
        else:
            denom = v.sqrt().add_(eps)
        param.addcdiv_(m, denom, value=-step_size)

    @staticmethod
    def _init_state(state: dict, param: torch.Tensor, variant: str) -> None:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["second_moment"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if variant in ("amsgrad", "adabound"):
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if variant == "adagrad":
            state["grad_sq_sum"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["momentum_decay_prod"] = 1.0
        state["second_moment_decay_prod"] = 1.0

    @staticmethod
    def _missing_buffer(state: dict, variant: str) -> Optional[str]:
        if variant in ("amsgrad", "adabound") and "exp_avg_sq" not in state:
            return "exp_avg_sq"
        if variant == "adagrad" and "grad_sq_sum" not in state:
            return "grad_sq_sum"
        return None


# --------------------------------------------------------------------------------------------------
# LazyAdam
# --------------------------------------------------------------------------------------------------
class LazyAdam(Optimizer):
    r"""Adam that updates only the rows a sparse gradient touches, and every entry of a dense one.

    For recommendation models whose embedding tables are most of the parameters (NeuMF on MovieLens / Netflix:
    millions of user and item rows, a few thousand in a batch): build them with sparse gradients
    (``NeuMF(sparse_embeddings=True)``, i.e. ``nn.Embedding(sparse=True)``) and a step costs O(batch rows), not
    O(table), for the tables, while the dense layers get the usual Adam step. One optimizer for both, so it fits the
    ``optimizer:`` entry of a config (``torch.optim.SparseAdam`` refuses dense parameters, ``torch.optim.Adam``
    sparse gradients).

    Dense gradient: exactly ``torch.optim.Adam`` (bias-corrected, no weight decay). Sparse gradient: exactly
    ``torch.optim.SparseAdam``: the moments of the touched rows only ("lazy": an untouched row's moments do not
    decay), bias correction by the parameter's step count, and ε added before the √(1 − β2^t) correction (so it
    weighs √(1 − β2^t) times less than in Adam). The weights follow this module's convention (the weight of the
    **new** sample, as in :class:`AdaptiveMomentum`): torch's ``betas=(b1, b2)`` are ``momentum_weight = 1 − b1``
    and ``second_moment_weight = 1 − b2``. Not for gradient clipping by norm (sparse gradients have no norm in
    ``clip_grad_norm_``).

    Args:
        params: parameters or parameter groups.
        lr: step size η (default 1e-3, torch's).
        momentum_weight: β1, the weight of the new gradient in the first moment, ``0 < β1 <= 1`` (default 0.1:
            torch's ``beta1 = 0.9``).
        second_moment_weight: β', the weight of the new squared gradient in the second moment, ``0 < β' <= 1``
            (default 0.001: torch's ``beta2 = 0.999``).
        eps: ε ≥ 0 added to the denominator (default 1e-8).

    Raises:
        ValueError: ``lr`` is negative or not finite, a weight is outside ``(0, 1]``, or ``eps`` is negative.

    Example:
        >>> import torch
        >>> from fccolit.optim import LazyAdam
        >>> table = torch.nn.Embedding(5, 2, sparse=True)
        >>> optimizer = LazyAdam(table.parameters(), lr=0.1)
        >>> before = table.weight.detach().clone()
        >>> table(torch.tensor([1, 3])).sum().backward()  # a sparse gradient on rows 1 and 3
        >>> optimizer.step()
        >>> (table.weight.detach() != before).any(dim=1).tolist()  # only those rows moved
        [False, True, False, True, False]
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum_weight: float = 0.1,
                 second_moment_weight: float = 0.001, eps: float = 1e-8) -> None:
        _check_lr(lr)
        _check_weight("momentum_weight", momentum_weight, "β1")
        _check_weight("second_moment_weight", second_moment_weight, "β'")
        if not (is_number(eps) and eps >= 0.0):
            raise ValueError(f"Invalid eps: {eps!r} (need eps >= 0)")
        super().__init__(params, dict(lr=lr, momentum_weight=momentum_weight,
                                      second_moment_weight=second_moment_weight, eps=eps))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Take one update. ``closure`` (optional) re-evaluates the model and returns the loss."""
        loss = _evaluate(closure)
        for group in self.param_groups:
            lr, eps = _lr_value(group["lr"]), group["eps"]
            weight1, weight2 = float(group["momentum_weight"]), float(group["second_moment_weight"])
            beta1, beta2 = 1.0 - weight1, 1.0 - weight2  # torch's betas, for the bias correction
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                bias1, bias2 = 1.0 - beta1 ** state["step"], 1.0 - beta2 ** state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                grad = p.grad
                if grad.is_sparse:
                    grad = grad.coalesce()
                    index, values = grad._indices(), grad._values()
                    if values.numel() == 0:
                        continue

                    def sparse(update: torch.Tensor) -> torch.Tensor:
                        return torch.sparse_coo_tensor(index, update, grad.shape, dtype=p.dtype, device=p.device, check_invariants=False)

                    old_m, old_v = m.sparse_mask(grad)._values(), v.sparse_mask(grad)._values()
                    m_update = values.sub(old_m).mul_(weight1)  # m ← (1 − β1) m + β1 g on the touched rows
                    v_update = values.pow(2).sub_(old_v).mul_(weight2)  # v ← (1 − β') v + β' g² likewise
                    m.add_(sparse(m_update))
                    v.add_(sparse(v_update))
                    numer = m_update.add_(old_m)
                    denom = v_update.add_(old_v).sqrt_().add_(eps)
                    p.add_(sparse(numer.div_(denom).mul_(-lr * math.sqrt(bias2) / bias1)))
                else:
                    m.lerp_(grad, weight1)
                    v.mul_(beta2).addcmul_(grad, grad, value=weight2)
                    denom = (v.sqrt() / math.sqrt(bias2)).add_(eps)
                    p.addcdiv_(m, denom, value=-lr / bias1)
        return loss
