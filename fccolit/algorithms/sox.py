"""SOX (seed 001, Algorithm 1) and its named special cases."""

from __future__ import annotations

import torch
from torch import nn

from fccolit.algorithms.base import FCCOModule
from fccolit.objectives.base import InnerBatch
from fccolit.state import StateUpdate


class SOX(FCCOModule):
    r"""SOX: selective moving averages of the inner values plus gradient momentum.

    For the sampled outer indices ``i ∈ B_1`` (others unchanged, the "selective update")::

        u_i ← (1 − γ) u_i + γ ĝ_i(w_t)                        (first visit: u_i ← ĝ_i(w_t))
        G   = (1/B1) Σ_{i∈B_1} ∇ĝ_i(w_t) ∇f_i(u_i^{t−1})      ("previous", as analysed)
                                     or ∇f_i(u_i^t)           ("fresh", as the experiments ran; SOAP, LibAUC)
        v   ← (1 − β) v + β G ;   w ← w − η v                 (the optimizer: :class:`fccolit.optim.Momentum`)

    Args:
        ema_weight: γ, weight of the new inner estimate (the paper found γ = 1 never best; 0.1 on CIFAR-10,
            0.5 on CIFAR-100).
        u_for_gradient: ``"previous"`` (u^{t−1}, Algorithm 1, the default) or ``"fresh"`` (u^t).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. The momentum β and step η belong to the
            optimizer; the default is ``Momentum(lr=1e-3, momentum_weight=0.1)`` (β = 0.1, the paper's choice).
    """

    def __init__(
        self,
        model: nn.Module,
        objective: nn.Module,
        ema_weight: float = 0.1,
        u_for_gradient: str = "previous",
        **kwargs,
    ) -> None:
        if not 0.0 < ema_weight <= 1.0:
            raise ValueError(f"ema_weight (γ) must be in (0, 1], got {ema_weight}")
        if u_for_gradient not in ("previous", "fresh"):
            raise ValueError(f"u_for_gradient must be 'previous' or 'fresh', got {u_for_gradient!r}")
        self.ema_weight = ema_weight
        self.u_for_gradient = u_for_gradient
        super().__init__(model, objective, **kwargs)

    def update_state(self, inner: InnerBatch, synced: bool) -> tuple[torch.Tensor, StateUpdate]:
        record = self.state.update(inner.index, inner.value, ema_weight=self.ema_weight, synced=synced)
        return (record.current if self.u_for_gradient == "fresh" else record.previous), record
