"""Switch K-SONG between its theoretical and practical estimators during training (Qiu et al., ICML 2022, §6 and
App. C: the stop-gradient operator).

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning.pytorch import Callback, LightningModule, Trainer

from fccolit._checks import check_choice

__all__ = ["StopGradientSwitch"]

ESTIMATORS = ("practical", "theoretical")


class StopGradientSwitch(Callback):
    """Set ``module.estimator`` to ``to`` from a chosen epoch or step on; before it, the module's configured value.

    The practical estimator stops the gradient through the top-K selector ψ (and drops s_q); the theoretical one
    differentiates through ψ and the threshold λ̂ (App. C argues the two agree after a good warm-up; Fig. 4 finds
    them similar). The rule is re-evaluated before every training batch from ``(current_epoch, global_step)``
    alone, so a resumed run is in the right mode without any saved state.

    Args:
        to: the estimator from the switch on: ``"practical"`` (default) or ``"theoretical"``.
        epoch: switch at the start of this epoch (0-based).
        step: switch before this optimizer step (``global_step``). Give ``epoch`` or ``step`` (if both, the
            first reached).
        attribute: the module attribute holding the estimator name (:class:`~fccolit.algorithms.song.KSONG`'s
            ``estimator``).

    Logs ``train/theoretical_estimator`` (1 or 0) every step.

    Raises:
        ValueError: ``to`` is not ``"practical"`` or ``"theoretical"``; neither ``epoch`` nor ``step`` given;
            ``epoch`` or ``step`` not a non-negative integer.
        AttributeError: at fit start, the module has no attribute ``attribute``.

    Example:
        >>> from types import SimpleNamespace
        >>> switch = StopGradientSwitch(to="theoretical", epoch=2)
        >>> switch.switched(SimpleNamespace(current_epoch=1, global_step=50))
        False
        >>> switch.switched(SimpleNamespace(current_epoch=2, global_step=60))
        True
        >>> StopGradientSwitch()
        Traceback (most recent call last):
            ...
        ValueError: StopGradientSwitch: give the epoch or the step of the switch
    """

    def __init__(self, to: Literal["practical", "theoretical"] = "practical", epoch: int | None = None, step: int | None = None, attribute: str = "estimator") -> None:
        check_choice("StopGradientSwitch: to", to, ESTIMATORS)
        if epoch is None and step is None:
            raise ValueError("StopGradientSwitch: give the epoch or the step of the switch")
        for name, value in (("epoch", epoch), ("step", step)):
            if value is not None and (int(value) != value or value < 0):
                raise ValueError(f"StopGradientSwitch: {name} must be a non-negative integer, got {value!r}")
        self.to, self.epoch, self.step, self.attribute = to, epoch, step, attribute
        self._initial: Any = None

    def switched(self, trainer: Trainer) -> bool:
        """Whether the switch applies at the trainer's current position."""
        by_epoch = self.epoch is not None and trainer.current_epoch >= self.epoch
        by_step = self.step is not None and trainer.global_step >= self.step
        return by_epoch or by_step

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not hasattr(pl_module, self.attribute):
            raise AttributeError(
                f"StopGradientSwitch: {type(pl_module).__name__} has no attribute {self.attribute!r} (use it with KSONG)"
            )
        if self._initial is None:
            self._initial = getattr(pl_module, self.attribute)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        value = self.to if self.switched(trainer) else self._initial
        setattr(pl_module, self.attribute, value)
        pl_module.log("train/theoretical_estimator", float(value == "theoretical"), on_step=True, on_epoch=False)
