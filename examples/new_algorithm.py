"""A new algorithm: subclass the base module and write its state rule.

:class:`~fccolit.algorithms.base.FCCOModule` does everything an FCCO algorithm shares (manual optimization, the
surrogate loss ``mean_i stop_grad(∇f_i(u_i)) · ĝ_i(w)`` whose gradient is the estimator, clipping, schedulers,
metrics, the per-index state ``self.state`` sized from the data, DDP synchronization, checkpoints). An algorithm
only says how the state row u_i of each outer index in the batch is updated and which u enters ∇f_i:
``update_state``.

Here: *damped plug-in*, u_i ← max(ĝ_i, u_floor). With γ = 1 the state is just this step's estimate (BSGD's
plug-in, no memory), and the floor keeps f(u) = log u or 1/u finite when a batch estimates g_i ≈ 0. When the
batch holds the whole inner set, ĝ_i = g_i and the estimator is exactly ∇F — checked in float64 below.

    python examples/new_algorithm.py        # the exactness check, then a short training run
"""

from __future__ import annotations

import torch
from lightning.pytorch import Trainer

from fccolit.algorithms.base import FCCOModule
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.models import MLP
from fccolit.objectives import AveragePrecision, InnerBatch
from fccolit.state import StateUpdate


class FlooredPlugIn(FCCOModule):
    """u_i = max(ĝ_i(w), u_floor): the plug-in estimator with a floor (no memory across steps).

    Args:
        model, objective: the backbone and the problem (any :class:`~fccolit.objectives.FCCOObjective`).
        floor: u_floor, the smallest value a state component may take.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule` (optimizer, scheduler, metrics, ...).
    """

    def __init__(self, model: torch.nn.Module, objective, floor: float = 1e-6, **kwargs) -> None:
        self.floor = floor  # set before super().__init__, which builds the state (configure_state)
        super().__init__(model, objective, **kwargs)

    def update_state(self, inner: InnerBatch, synced: bool) -> tuple[torch.Tensor, StateUpdate]:
        """``inner.value`` ``[B1, d']`` → (u for ∇f ``[B1, d']``, the update record). ema_weight = 1 overwrites the rows
        (the state still records them: checkpoints, histograms and DDP synchronization come for free)."""
        estimate = inner.value.detach().clamp_min(self.floor)
        record = self.state.update(inner.index, estimate, ema_weight=1.0, synced=synced)
        return record.current, record


def estimator_equals_autograd() -> float:
    """Largest |estimator − ∇F| over the parameters on a full batch in float64 (AP, 30 samples, 8 positives)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.zeros(30, dtype=torch.long)
    y[:8] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(8)
    batch = {"x": x, "y": y, "index": torch.arange(30), "pos_index": pos_index}
    sizes = {"num_samples": 30, "num_positives": 8, "num_negatives": 22, "num_features": 4}
    module = FlooredPlugIn(MLP(hidden=[5]), AveragePrecision(), data_sizes=sizes, state_dtype="float64").double()
    loss, _ = module.compositional_loss(module(batch), batch)
    estimator = torch.autograd.grad(loss, list(module.parameters()))
    exact = torch.autograd.grad(module.objective.exact_value(module(batch), batch), list(module.parameters()))
    return max(float((a - b).abs().max()) for a, b in zip(estimator, exact))


def main(epochs: int = 2) -> dict[str, float]:
    error = estimator_equals_autograd()
    print(f"full batch, float64: max |estimator − autograd ∇F| = {error:.2e}")
    torch.manual_seed(0)
    data = SyntheticBinaryDataModule(num_samples=4000, num_features=10, pos_fraction=0.05, batch_size=64,
                                     num_positives=16, seed=0)
    module = FlooredPlugIn(MLP(hidden=[32]), AveragePrecision(), data_sizes=data.sizes,
                           optimizer=lambda params: torch.optim.Adam(params, lr=0.01))
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      use_distributed_sampler=False)
    trainer.fit(module, datamodule=data)
    ap = trainer.validate(module, datamodule=data, verbose=False)[0]["val/ap"]
    print(f"validation AP after {epochs} epochs of FlooredPlugIn on AveragePrecision: {ap:.3f}")
    return {"max_error": error, "ap": ap}


if __name__ == "__main__":
    main()
