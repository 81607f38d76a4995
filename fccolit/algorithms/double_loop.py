r"""What the double-loop algorithms share: ALEXR2, AGD-SBCD (``PAUCRange``, ``SoRR``) and DCA.

Each of them solves a proximal (or linearised) subproblem around an **anchor** ``a`` in an inner loop and moves the
anchor in an outer loop. Lightning runs one batch per training step, so a double loop is a state machine: every
batch is one inner step, and after the inner loop's last step the module takes its outer step. The pieces:

* :class:`ParameterSnapshot`: a copy of the trainable parameters kept as persistent buffers (ALEXR2's anchor
  ``w_t`` and previous inner iterate, SONEX's previous iterate).
* :func:`proximal_step_` and its optimizer :class:`ProximalStep`: the closed-form proximal inner step

  .. math::

      z_{k+1} = \operatorname*{arg\,min}_z \langle G_k, z\rangle + \frac{\|z - a\|^2}{2ν} + \frac{\|z - z_k\|^2}{2η}
              = \frac{η a + ν z_k − ην G_k}{η + ν}
              = z_k − \frac{ην}{η + ν}\Big(G_k + \frac{z_k − a}{ν}\Big)
              = z_k + \frac{η}{η + ν}(a − z_k) − \frac{ην}{η + ν} G_k

  (Yao, Lin & Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates", NeurIPS 2022,
  arXiv:2203.01505, eq. (14) with ``ν = μ``; Chen, Wang, Yang, Lin & Yang, "Stochastic Momentum Methods for
  Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025, arXiv:2506.02504,
  Algorithm 2 step 11). ``ν = ∞`` (no proximal term) is the plain gradient step ``z_k − η G_k`` (DCA).
* :class:`LoopPosition`: the loop counters (outer step t, inner step k, ...) as Python ints, in every checkpoint, so
  that a checkpoint written anywhere in the loop resumes exactly.
* :class:`DoubleLoop`: the anchor (taken from the live parameters at the first training step unless a checkpoint
  restored it, and again after every outer step), the schedule of inner steps and the proximal-step optimizer.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

__all__ = ["ParameterSnapshot", "proximal_step_", "ProximalStep", "LoopPosition", "DoubleLoop"]


# ----------------------------------------------------------------------------------------------------------
# a copy of the parameters
# ----------------------------------------------------------------------------------------------------------
def _buffer_name(name: str) -> str:
    return name.replace(".", "__")


class ParameterSnapshot(nn.Module):
    """A copy of a module's trainable parameters kept as persistent buffers (ALEXR2's anchor, SONEX's w_{t−1}).

    It moves with the module, follows its dtype, is in every checkpoint (so a resumed run continues with the
    same previous iterate / anchor) and is identical on every rank under DDP (the weights are). ``ready`` is False
    until the first :meth:`copy_from`.

    Args:
        named: ``(name, parameter)`` pairs; names as in ``module.named_parameters()``.

    Raises:
        ValueError: :meth:`copy_from` given another number of tensors than the snapshot holds.

    Example:
        >>> layer = nn.Linear(2, 1)
        >>> snapshot = ParameterSnapshot(layer.named_parameters())
        >>> bool(snapshot.ready)
        False
        >>> snapshot.copy_from(layer.parameters())
        >>> bool(snapshot.ready), sorted(snapshot.as_dict())
        (True, ['bias', 'weight'])
        >>> sorted(snapshot.state_dict())  # persistent buffers: in every checkpoint
        ['bias', 'ready', 'weight']
    """

    def __init__(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        super().__init__()
        named = list(named)
        self.names = [n for n, _ in named]
        for n, p in named:
            self.register_buffer(_buffer_name(n), p.detach().clone())
        self.register_buffer("ready", torch.zeros((), dtype=torch.bool))

    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self, _buffer_name(n)) for n in self.names]

    def as_dict(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """``{name without prefix: copy}`` for the names starting with ``prefix``."""
        return {n[len(prefix):]: t for n, t in zip(self.names, self.tensors()) if n.startswith(prefix)}

    @torch.no_grad()
    def copy_from(self, params: Iterable[torch.Tensor]) -> None:
        for buf, p in zip(self.tensors(), params, strict=True):
            buf.copy_(p)
        self.ready.fill_(True)

    def extra_repr(self) -> str:
        return f"{len(self.names)} tensors"


# ----------------------------------------------------------------------------------------------------------
# the closed-form proximal step
# ----------------------------------------------------------------------------------------------------------
@torch.no_grad()
def proximal_step_(
    params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], anchors: Sequence[torch.Tensor], lr: float,
    nu: float, running_sum: Sequence[torch.Tensor] | None = None,
) -> None:
    r"""``z ← argmin_z ⟨G, z⟩ + ‖z − a‖²/(2ν) + ‖z − z_k‖²/(2η) = z + (η/(η+ν))(a − z) − (ην/(η+ν)) G``, in place.

    The one implementation of the proximal inner step (see the module docstring): the proximal term's gradient
    ``(z − a)/ν`` is taken in closed form, as a move of ``z`` towards ``a``, so there is no autograd graph over the
    parameters and ``G`` is only read. Two fused passes over the parameters (``torch._foreach_lerp_`` towards the
    anchors, then ``torch._foreach_add_`` of ``G``), one more with ``running_sum``.

    Args:
        params: the iterate ``z_k`` (overwritten with ``z_{k+1}``).
        grads: ``G``, one tensor per parameter, or None for a parameter without gradient (pulled towards its
            anchor only); not modified.
        anchors: ``a``, one tensor per parameter (unused when ``ν = ∞``).
        lr: η ≥ 0, the inner step size.
        nu: ν > 0, the weight of the proximal term (μ of AGD-SBCD, 1/L of proximal DCA); ``math.inf``: none, the
            plain step ``z − ηG``.
        running_sum: tensors (one per parameter) to which ``z_k``, the iterate before this step, is added: the
            running sum of the iterates that AGD-SBCD averages, in the same pass over the parameters' loop.

    Example:
        >>> z, a = [torch.tensor([1.0, 2.0])], [torch.tensor([0.0, 0.0])]
        >>> total = [torch.zeros(2)]
        >>> proximal_step_(z, [torch.tensor([1.0, -1.0])], a, lr=1.0, nu=1.0, running_sum=total)
        >>> z[0], total[0]  # (η a + ν z − ην G)/(η + ν) = (z − G)/2; the sum holds z before the step
        (tensor([0.0000, 1.5000]), tensor([1., 2.]))
    """
    params = list(params)
    if running_sum is not None:
        torch._foreach_add_(list(running_sum), params)
    if math.isinf(nu):
        step = lr
    else:
        torch._foreach_lerp_(params, list(anchors), lr / (lr + nu))  # z + (η/(η+ν))(a − z)
        step = nu * lr / (nu + lr)
    stepped = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
    if stepped and step != 0.0:
        torch._foreach_add_([p for p, _ in stepped], [g for _, g in stepped], alpha=-step)


class ProximalStep(torch.optim.Optimizer):
    r""":func:`proximal_step_` as an optimizer: ``z ← (η a + ν z − η ν G)/(η + ν)`` with ``G = z.grad``.

    The anchors ``a`` come from ``anchors()`` at every step (one tensor per parameter, in the order of the
    parameters over all groups), so they may be buffers that the module moves or re-creates. A parameter without
    gradient is pulled towards its anchor only. ``.grad`` is left as it is (``G``). Gradient clipping (Lightning's
    ``clip_gradients`` before the step) clips ``G`` alone.

    Args:
        params: the inner iterate z (the live parameters).
        anchors: returns the anchor tensors.
        lr: η ≥ 0, the inner step size (``lr`` so that schedulers and the modules can drive it).
        nu: ν > 0, the weight of the proximal term; ``math.inf`` for none.
        running_sum: returns tensors (one per parameter, ordered as the anchors) to which every step adds the
            iterate before it (AGD-SBCD's running sum of the iterates; None: none).

    Raises:
        ValueError: ``lr`` < 0 or ``nu`` ≤ 0.
        RuntimeError: ``anchors()`` (or ``running_sum()``) returns another number of tensors than there are
            parameters.

    Example:
        >>> z = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
        >>> opt = ProximalStep([z], lambda: [torch.zeros(2)], lr=1.0, nu=1.0)
        >>> z.grad = torch.tensor([1.0, -1.0])
        >>> opt.step()
        >>> z.data
        tensor([0.0000, 1.5000])
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    def __init__(
        self, params: Iterable[nn.Parameter], anchors: Callable[[], Sequence[torch.Tensor]], lr: float, nu: float,
        running_sum: Callable[[], Sequence[torch.Tensor]] | None = None,
    ) -> None:
        if not float(lr) >= 0.0:
            raise ValueError(f"the inner step size η (lr) must be >= 0, got {lr}")
        if not float(nu) > 0.0:
            raise ValueError(f"the proximal parameter ν (nu) must be > 0 (inf: no proximal term), got {nu}")
        super().__init__(params, dict(lr=float(lr), nu=float(nu)))
        self.anchors, self.running_sum = anchors, running_sum

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        total = sum(len(group["params"]) for group in self.param_groups)
        anchors = list(self.anchors())
        sums = None if self.running_sum is None else list(self.running_sum())
        for what, tensors in (("anchors", anchors), ("running sums", sums)):
            if tensors is not None and len(tensors) != total:
                raise RuntimeError(f"ProximalStep: {len(tensors)} {what} for {total} parameters")
        start = 0
        for group in self.param_groups:
            params = group["params"]
            end = start + len(params)
            proximal_step_(params, [p.grad for p in params], anchors[start:end], group["lr"], group["nu"],
                           running_sum=None if sums is None else sums[start:end])
            start = end
        return loss


# ----------------------------------------------------------------------------------------------------------
# the loop position and the anchor
# ----------------------------------------------------------------------------------------------------------
class LoopPosition:
    """Mixin of a ``LightningModule``: its loop counters as Python ints in ``self.loop``, kept in every checkpoint.

    Plain ints cost no device synchronization to read (a step reads them to decide what to do). The checkpoint
    holds them in the module's state dict in one of two layouts (``loop_layout``), both read back exactly:

    * ``"extra_state"`` (default): one dict of ints, the module's ``_extra_state`` entry;
    * ``"tensors"``: one 0-dim int64 tensor per counter, named after it (a state dict of tensors only).

    Call :meth:`init_loop` in ``__init__`` before ``LightningModule.__init__`` (hooks that run inside it may read
    the counters). :meth:`on_loop_restored` runs after a checkpoint restored them.

    Class attributes:
        loop_keys: the counters.
        loop_layout: ``"extra_state"`` or ``"tensors"``.

    Raises:
        KeyError: a state dict whose loop position lacks one of ``loop_keys``.

    Example:
        >>> class Counted(LoopPosition, nn.Module):
        ...     loop_layout = "tensors"
        ...     def __init__(self):
        ...         self.init_loop()
        ...         super().__init__()
        >>> module = Counted()
        >>> module.loop["inner_step"] += 3
        >>> dict(module.state_dict())
        {'outer_step': tensor(0), 'inner_step': tensor(3)}
        >>> restored = Counted()
        >>> _ = restored.load_state_dict(module.state_dict())
        >>> restored.loop
        {'outer_step': 0, 'inner_step': 3}
    """

    loop_keys: tuple[str, ...] = ("outer_step", "inner_step")
    loop_layout: str = "extra_state"
    loop: dict[str, int]

    def init_loop(self) -> None:
        """Every counter at 0."""
        self.loop = dict.fromkeys(self.loop_keys, 0)

    def on_loop_restored(self) -> None:
        """Called when a state dict has restored the counters (default: nothing)."""

    def get_extra_state(self) -> dict[str, int]:
        return dict(self.loop)

    def set_extra_state(self, state: dict[str, int]) -> None:
        missing = set(self.loop_keys) - set(state)
        if missing:
            raise KeyError(f"{type(self).__name__}: the saved loop position lacks {sorted(missing)}")
        self.loop = {key: int(state[key]) for key in self.loop_keys}
        self.on_loop_restored()

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        if self.loop_layout == "tensors":
            del destination[prefix + "_extra_state"]
            for key in self.loop_keys:
                destination[prefix + key] = torch.tensor(self.loop[key], dtype=torch.long)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        if self.loop_layout == "tensors":  # read back through set_extra_state, as the other layout is
            saved = {key: state_dict.pop(prefix + key) for key in self.loop_keys if prefix + key in state_dict}
            if saved:
                state_dict[prefix + "_extra_state"] = {key: int(value) for key, value in saved.items()}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)  # type: ignore[misc]


class DoubleLoop(LoopPosition):
    """Mixin of a ``LightningModule`` running a double loop around an anchor (see the module docstring).

    The module keeps the counters ``outer_step`` (t) and ``inner_step`` (k) in ``self.loop`` (:class:`LoopPosition`)
    and implements where its anchor lives:

    * :meth:`loop_parameters`: the live parameters, the inner iterate z;
    * :meth:`anchor_tensors`: the anchor, one tensor per parameter in the same order;
    * :meth:`anchor_is_set`: whether the anchor holds a point (False before the first training step);
    * :meth:`set_anchor_`: anchor ← the live parameters (and whatever the module resets with it);
    * :meth:`inner_steps_at`: the number of inner steps of outer step t.

    It provides :meth:`ensure_anchor` (call it first in every training step), :meth:`end_inner_step` (count an
    inner step; True when the inner loop is done), :meth:`end_outer_step` and :meth:`proximal_step` (the inner
    step's optimizer).

    Raises:
        ValueError: :meth:`proximal_step` for a module without trainable parameters, or with ``lr`` < 0 or
            ``nu`` ≤ 0 (:class:`ProximalStep`).
        NotImplementedError: a method of the five above that the module does not implement.

    Example:
        Two inner proximal steps with G = 0 towards the anchor a = 0, then the outer step moves the anchor:

        >>> class TwoStep(DoubleLoop, nn.Module):
        ...     def __init__(self):
        ...         self.init_loop()
        ...         super().__init__()
        ...         self.w = nn.Parameter(torch.tensor([1.0]))
        ...         self.register_buffer("a", torch.zeros(1))
        ...     def loop_parameters(self): return [self.w]
        ...     def anchor_tensors(self): return [self.a]
        ...     def anchor_is_set(self): return True
        ...     def set_anchor_(self): self.a.copy_(self.w.detach())
        ...     def inner_steps_at(self, outer): return 2
        >>> module = TwoStep()
        >>> inner = module.proximal_step(lr=1.0, nu=1.0)
        >>> for _ in range(2):
        ...     module.w.grad = torch.zeros(1)
        ...     inner.step()  # w ← (η a + ν w)/(η + ν) = w/2
        ...     done = module.end_inner_step()
        >>> module.w.data, done
        (tensor([0.2500]), True)
        >>> module.end_outer_step()
        >>> module.loop, module.a
        ({'outer_step': 1, 'inner_step': 0}, tensor([0.2500]))
    """

    _anchor_checked: bool = False

    # ------------------------------------------------------------------ to implement
    def loop_parameters(self) -> list[nn.Parameter]:
        raise NotImplementedError

    def anchor_tensors(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def anchor_is_set(self) -> bool:
        raise NotImplementedError

    def set_anchor_(self) -> None:
        raise NotImplementedError

    def inner_steps_at(self, outer: int) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ provided
    @property
    def inner_step(self) -> int:
        """k, the inner steps taken in the current outer step."""
        return self.loop["inner_step"]

    def ensure_anchor(self) -> None:
        """The anchor := the live parameters at the first training step (not at construction, so that weights
        loaded into the model after building the module count), unless a checkpoint restored it. Checked once,
        and again after a state dict is loaded (no device synchronization per step)."""
        if self._anchor_checked:
            return
        if not self.anchor_is_set():
            self.set_anchor_()
        self._anchor_checked = True

    def on_loop_restored(self) -> None:
        self._anchor_checked = False  # re-check the loaded anchor at the next training step

    def end_inner_step(self) -> bool:
        """Count the inner step just taken; True when it was the last of the current outer step."""
        self.loop["inner_step"] += 1
        return self.loop["inner_step"] >= self.inner_steps_at(self.loop["outer_step"])

    @torch.no_grad()
    def end_outer_step(self) -> None:
        """After the outer update has moved the live parameters: t ← t + 1, k ← 0, anchor ← the live parameters."""
        self.loop["outer_step"] += 1
        self.loop["inner_step"] = 0
        self.set_anchor_()

    def proximal_step(
        self, lr: float, nu: float, running_sum: Callable[[], Sequence[torch.Tensor]] | None = None
    ) -> ProximalStep:
        """The inner step's optimizer over :meth:`loop_parameters`, towards :meth:`anchor_tensors` (``running_sum``:
        see :class:`ProximalStep`)."""
        params = self.loop_parameters()
        if not params:
            raise ValueError(f"{type(self).__name__}: the model has no trainable parameters")
        return ProximalStep(params, self.anchor_tensors, lr=lr, nu=nu, running_sum=running_sum)
