r"""Per-step schedules of the step size η, the momentum weight β and the state's moving-average weight γ.

The FCCO papers schedule three numbers together: η (``lr`` of every optimizer parameter group), β (the
``momentum_weight`` of :mod:`fccolit.optim`'s optimizers: β in SOX, β1 in MOAP / ADAP) and γ (the module's
``ema_weight``: γ in SOX, β0 in MOAP-V1/V2 and ADAP). :class:`HyperParameterSchedule` is the one mechanism: before
every training step it sets each scheduled number to ``value(name, initial, t)`` with ``t = global_step + 1``
(t = 1, 2, ...), from the initial values it read when training started. The initial values are part of the
callback's checkpoint state, so a resumed run continues the same schedule (the optimizer's restored ``lr`` is
already a scheduled value, not the initial one). Every rank computes the same values, so the per-index state's
decay counters stay identical under DDP.

Schedules:

* :class:`InverseSqrtSchedule`: ``η_t = η/√t`` and ``β_t = min(1, β/√t)``, ``γ_t = min(1, γ/√t)``: the
  "O(1/√t)" decrease of Wang et al.'s linear experiments (§4.1: "we decrease η and β0 = β1 on the order of
  O(1/√t)"; the constants and the clipping at 1 are an assumption: the paper gives only the order).
* :class:`fccolit.callbacks.sox_boost.SOXBoost`: SOX-boost's stages (Wang & Yang, ICML 2022, Algorithm 2).

References:
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
"""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from torch.optim import Optimizer

__all__ = ["HyperParameterSchedule", "InverseSqrtSchedule"]

SCHEDULED = ("lr", "momentum_weight", "ema_weight")


def should_log(trainer: Trainer) -> bool:
    """Log this step's values? Only when a logger writes them (every ``log_every_n_steps`` steps): a
    ``self.log`` call costs about as much as a small model's whole training step."""
    every = max(1, int(trainer.log_every_n_steps or 1))
    return bool(trainer.loggers) and (trainer.global_step + 1) % every == 0


class HyperParameterSchedule(Callback):
    """Base class: sets η, β and γ before every training step to ``value(name, initial, t)``.

    Subclasses implement :meth:`value`. The scheduled values are logged as ``schedule/lr``,
    ``schedule/momentum_weight`` and ``schedule/ema_weight`` (first parameter group) on the steps the trainer's
    logger writes (every ``log_every_n_steps``).

    Args:
        lr: schedule the ``lr`` of every parameter group of every optimizer (η).
        momentum_weight: schedule the ``momentum_weight`` of every parameter group (β / β1); the optimizers must
            be :mod:`fccolit.optim` ones (torch's ``momentum`` has the opposite convention).
        ema_weight: schedule the module's ``ema_weight`` (γ / β0).

    Raises:
        ValueError: at :meth:`start` (training start), when ``ema_weight`` is scheduled and the module has no
            ``ema_weight``, or when a scheduled name is missing from an optimizer's parameter groups.
        RuntimeError: :meth:`apply` called before :meth:`start`.
        NotImplementedError: :meth:`value` of the base class itself.

    Example:
        A schedule that halves η every step, applied by hand to a torch optimizer (what the Lightning hooks do):

        >>> import torch
        >>> class Halving(HyperParameterSchedule):
        ...     def value(self, name, initial, t):
        ...         return initial / 2 ** (t - 1)
        >>> model = torch.nn.Linear(2, 1)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.8)
        >>> schedule = Halving(momentum_weight=False, ema_weight=False)
        >>> schedule.names
        ('lr',)
        >>> schedule.start([optimizer], model)
        >>> schedule.apply([optimizer], model, t=3)
        {'lr': 0.2}
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    def __init__(self, lr: bool = True, momentum_weight: bool = True, ema_weight: bool = True) -> None:
        self.names = tuple(n for n, on in zip(SCHEDULED, (lr, momentum_weight, ema_weight)) if on)
        # initial values: {"lr": [[per group] per optimizer], "momentum_weight": [[...]], "ema_weight": float}
        self.initial: dict[str, Any] | None = None

    # ------------------------------------------------------------------ to implement
    def value(self, name: str, initial: float, t: int) -> float:
        """The value of ``name`` (one of ``lr``, ``momentum_weight``, ``ema_weight``) at step ``t`` (from 1)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading and writing the numbers
    def _read_initial(self, optimizers: list[Optimizer], module: LightningModule) -> dict[str, Any]:
        initial: dict[str, Any] = {}
        for name in self.names:
            if name == "ema_weight":
                if not hasattr(module, "ema_weight"):
                    raise ValueError(
                        f"{type(self).__name__} schedules ema_weight (γ / β0), but {type(module).__name__} has "
                        "none: pass ema_weight=False"
                    )
                initial[name] = float(module.ema_weight)
                continue
            values = []
            for opt in optimizers:
                for group in opt.param_groups:
                    if name not in group:
                        raise ValueError(
                            f"{type(self).__name__} schedules {name}, but {type(opt).__name__}'s parameter groups "
                            f"have no '{name}' (they have {sorted(k for k in group if k != 'params')}): use an "
                            f"fccolit.optim optimizer, or pass {name}=False"
                        )
                values.append([float(g[name]) for g in opt.param_groups])
            initial[name] = values
        return initial

    def check_initial(self, initial: dict[str, Any]) -> None:
        """Validate the initial values (subclasses add constraints)."""

    def start(self, optimizers: list[Optimizer], module: LightningModule) -> None:
        """Read the initial values (unless restored from a checkpoint) and validate them."""
        if self.initial is None:
            self.initial = self._read_initial(optimizers, module)
        self.check_initial(self.initial)

    def apply(self, optimizers: list[Optimizer], module: LightningModule, t: int) -> dict[str, float]:
        """Set every scheduled number for step ``t``; return the values of the first parameter group.

        :meth:`start` and :meth:`apply` are what the Lightning hooks call; a loop outside Lightning can call them
        itself (``benchmarks/reproduce/auprc_linear.py``)."""
        if self.initial is None:
            raise RuntimeError(f"{type(self).__name__}.apply before start(): the initial values are unknown")
        shown: dict[str, float] = {}
        for name in self.names:
            if name == "ema_weight":
                module.ema_weight = shown[name] = self.value(name, self.initial[name], t)
                continue
            for opt, values in zip(optimizers, self.initial[name]):
                for group, first in zip(opt.param_groups, values):
                    group[name] = self.value(name, first, t)
            shown[name] = float(optimizers[0].param_groups[0][name])
        return shown

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.start(trainer.optimizers, pl_module)  # a resumed run restored the initial values from the checkpoint

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        shown = self.apply(trainer.optimizers, pl_module, trainer.global_step + 1)
        if should_log(trainer):
            for name, value in shown.items():
                pl_module.log(f"schedule/{name}", value, on_step=True, on_epoch=False)

    def state_dict(self) -> dict[str, Any]:
        return {"initial": self.initial}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.initial = state_dict.get("initial")


class InverseSqrtSchedule(HyperParameterSchedule):
    r"""``η_t = η/√t``, ``β_t = min(1, β/√t)``, ``γ_t = min(1, γ/√t)`` for ``t = 1, 2, ...`` (global step + 1).

    Wang et al.'s linear experiments (AISTATS 2022, §4.1; MOAP-V2 and ADAP) "decrease η and β0 = β1 on the order of
    O(1/√t)"; the exact form above is an assumption (the paper gives only the order). β0 is the state's weight (the
    module's ``ema_weight``) and β1 the momentum's (the optimizer's ``momentum_weight``); the paper ties them, so
    with ``tie_weights=True`` (the default) training refuses to start unless both start equal. ADAP's β'
    (``second_moment_weight``) stays constant, as in the paper.

    Args:
        lr, momentum_weight, ema_weight: which numbers to decrease (see :class:`HyperParameterSchedule`).
        tie_weights: require the initial β0 (``ema_weight``) to equal the initial β1 (``momentum_weight``).
        power: the exponent ``p`` of ``t^{-p}`` (0.5, the paper's; other values for experiments only).

    Raises:
        ValueError: ``power`` is not a finite number >= 0; ``tie_weights=True`` with ``momentum_weight`` or
            ``ema_weight`` off; at training start (:meth:`check_initial`), ``tie_weights=True`` and the initial β0
            differs from β1; and the cases of :class:`HyperParameterSchedule`.

    Example:
        >>> schedule = InverseSqrtSchedule()
        >>> schedule.value("lr", 0.1, t=4), schedule.value("ema_weight", 0.9, t=1)
        (0.05, 0.9)
        >>> schedule.check_initial({"ema_weight": 0.9, "momentum_weight": [[0.5]]})
        Traceback (most recent call last):
            ...
        ValueError: InverseSqrtSchedule(tie_weights=True) decreases β0 = β1 together ...
        >>> InverseSqrtSchedule(power=-1.0)
        Traceback (most recent call last):
            ...
        ValueError: power must be a finite number >= 0, got -1.0
    """

    def __init__(
        self,
        lr: bool = True,
        momentum_weight: bool = True,
        ema_weight: bool = True,
        tie_weights: bool = True,
        power: float = 0.5,
    ) -> None:
        super().__init__(lr=lr, momentum_weight=momentum_weight, ema_weight=ema_weight)
        if not (isinstance(power, (int, float)) and math.isfinite(power) and power >= 0.0):
            raise ValueError(f"power must be a finite number >= 0, got {power!r}")
        if tie_weights and not (momentum_weight and ema_weight):
            raise ValueError("tie_weights=True schedules β0 and β1 together: leave momentum_weight and ema_weight on")
        self.tie_weights, self.power = tie_weights, float(power)

    def value(self, name: str, initial: float, t: int) -> float:
        factor = float(t) ** (-self.power)
        return initial * factor if name == "lr" else min(1.0, initial * factor)

    def check_initial(self, initial: dict[str, Any]) -> None:
        if not self.tie_weights:
            return
        beta0 = initial["ema_weight"]
        betas1 = {b for groups in initial["momentum_weight"] for b in groups}
        if betas1 != {beta0}:
            raise ValueError(
                f"InverseSqrtSchedule(tie_weights=True) decreases β0 = β1 together (Wang et al., AISTATS 2022, §4.1), "
                f"but the module's "
                f"ema_weight (β0) is {beta0} and the optimizer's momentum_weight (β1) is "
                f"{sorted(betas1)[0] if len(betas1) == 1 else sorted(betas1)}: set them equal, or pass "
                "tie_weights=False"
            )
