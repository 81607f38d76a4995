r"""SOX-boost (Wang & Yang, ICML 2022, Algorithm 2): SOX run in stages, each with half the step sizes and twice
the length.

::

    for stages k = 1, ..., K:
        run SOX(w^k, u^k, v^k, η_k, β_k, γ_k, T_k)        # warm start: u and v carry over
        η_{k+1} = η_k/2,  β_{k+1} = β_k/2,  γ_{k+1} = γ_k/2,  T_{k+1} = 2 T_k

This is Theorem 2's schedule once its ε_k-terms bind (ε_k halves, β_k = O(η_k), γ_k = O(n η_k/B1),
T_k = O(1/(μ η_k))). The ratios γ_k/β_k and η_k/β_k stay those of the first stage (Theorem 4 fixes
γ_k/β_k = 10n/(3B1); set the first stage's values accordingly to follow it). The stage output is the last
iterate (the proof's random iterate of the stage is replaced by the last one, as in practice).

Nothing is reset between stages: the per-index state ``u`` and the optimizer's momentum ``v`` carry over, so the
callback works with any SOX-family module (SOX, MOAP, MOAP-V2, ADAP, ...) and any :mod:`fccolit.optim` optimizer.

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
"""

from __future__ import annotations

import math
from typing import Any

from lightning.pytorch import LightningModule, Trainer

from fccolit.callbacks.schedules import HyperParameterSchedule, should_log

__all__ = ["SOXBoost"]


class SOXBoost(HyperParameterSchedule):
    """Stagewise schedule of η, β and γ (SOX-boost).

    Stage ``k`` (from 1) lasts ``T_1 · growth^(k−1)`` steps (rounded) and uses ``decay^(k−1)`` times the initial η
    (``lr``), β (``momentum_weight``) and γ (``ema_weight``).

    Args:
        first_stage_steps: T_1, the length of the first stage in optimizer steps.
        num_stages: K; training stops after the last stage (None: stages continue until the trainer stops).
        decay: factor of η, β and γ from one stage to the next (0.5 in SOX-boost).
        growth: factor of the stage length (2 in SOX-boost).
        lr, momentum_weight, ema_weight: which numbers to schedule (all three in SOX-boost).

    Logs ``sox_boost/stage`` and the ``schedule/*`` values (on the steps the logger writes).

    Raises:
        ValueError: ``first_stage_steps`` not a positive integer; ``num_stages`` neither None nor a positive
            integer; ``decay`` outside (0, 1]; ``growth`` not a finite number >= 1; and the cases of
            :class:`~fccolit.callbacks.schedules.HyperParameterSchedule` at training start.

    Example:
        >>> boost = SOXBoost(first_stage_steps=10, num_stages=3)
        >>> [boost.stage_length(k) for k in (1, 2, 3)], boost.total_steps()
        ([10, 20, 40], 70)
        >>> boost.stage(10), boost.stage(11), boost.value("lr", 0.1, t=31)
        (1, 2, 0.025)
        >>> SOXBoost(first_stage_steps=0)
        Traceback (most recent call last):
            ...
        ValueError: first_stage_steps (T_1) must be a positive integer, got 0
    """

    def __init__(
        self,
        first_stage_steps: int,
        num_stages: int | None = None,
        decay: float = 0.5,
        growth: float = 2.0,
        lr: bool = True,
        momentum_weight: bool = True,
        ema_weight: bool = True,
    ) -> None:
        super().__init__(lr=lr, momentum_weight=momentum_weight, ema_weight=ema_weight)
        if int(first_stage_steps) != first_stage_steps or first_stage_steps < 1:
            raise ValueError(f"first_stage_steps (T_1) must be a positive integer, got {first_stage_steps!r}")
        if num_stages is not None and (int(num_stages) != num_stages or num_stages < 1):
            raise ValueError(f"num_stages (K) must be a positive integer or None, got {num_stages!r}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        if not (math.isfinite(growth) and growth >= 1.0):
            raise ValueError(f"growth must be a finite number >= 1, got {growth!r}")
        self.first_stage_steps, self.num_stages = int(first_stage_steps), num_stages
        self.decay, self.growth = float(decay), float(growth)

    def stage_length(self, k: int) -> int:
        """T_k, the number of steps of stage ``k`` (from 1)."""
        return max(1, round(self.first_stage_steps * self.growth ** (k - 1)))

    def stage(self, t: int) -> int:
        """The stage (from 1) that step ``t`` (from 1) belongs to."""
        k, end = 1, self.stage_length(1)
        while t > end:
            k += 1
            end += self.stage_length(k)
        return k

    def total_steps(self) -> int | None:
        """Σ_k T_k over the K stages (None without ``num_stages``)."""
        if self.num_stages is None:
            return None
        return sum(self.stage_length(k) for k in range(1, int(self.num_stages) + 1))

    def value(self, name: str, initial: float, t: int) -> float:
        return initial * self.decay ** (self.stage(t) - 1)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        if should_log(trainer):
            pl_module.log("sox_boost/stage", float(self.stage(trainer.global_step + 1)), on_step=True, on_epoch=False)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        total = self.total_steps()
        if total is not None and trainer.global_step >= total:
            trainer.should_stop = True
