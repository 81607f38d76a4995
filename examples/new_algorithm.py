"""A new algorithm: subclass the base module and override the hooks where your paper differs.

:class:`~fccolit.algorithms.base.FCCOModule` takes the FCCO step (``compositional_loss``: the loss
``mean_i stop_grad(∇f_i(u_i)) · ĝ_i(w)`` whose gradient is the estimator, previous or fresh u, the DDP empty-batch
rule) and everything around it: the per-index state sized from the data, optimizers, metrics, checkpoints, DDP.
The step calls four hooks, in order: ``inner_estimates(scores, batch)`` (ĝ_i), ``update_state(inner)`` (the state
rule), ``estimator_weights(u, inner)`` (∇f_i(u_i) on ĝ_i) and ``plug_in_estimate(u, inner)`` (f_i(u_i), logged);
inside them ``self.tracked`` is the sum being stepped (its ``objective`` and ``state``) and ``self.synced`` says
whether the batch is the global one under DDP. Here only the state rule differs: u_i ← max(ĝ_i, u_floor), the
plug-in with a floor that keeps f(u) = log u or 1/u finite. With the whole inner set in the batch the estimator is
exactly ∇F — checked in float64 below.

    python examples/new_algorithm.py        # the exactness check, then a short training run
"""

from __future__ import annotations

import torch
from lightning.pytorch import Trainer

from fccolit.algorithms.base import FCCOModule
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.models import MLP
from fccolit.objectives import AveragePrecisionSurrogate, InnerBatch
from fccolit.state import StateUpdate


class FlooredPlugIn(FCCOModule):
    """u_i = max(ĝ_i(w), u_floor), no memory across steps.

    Args:
        floor: u_floor, the smallest value a state component may take.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule` (model, objective, optimizer, ...).
    """

    u_for_gradient = "fresh"  # ∇f_i at the u written this step

    def __init__(self, model: torch.nn.Module, objective, floor: float = 1e-6, **kwargs) -> None:
        self.floor = floor
        super().__init__(model, objective, **kwargs)

    def update_state(self, inner: InnerBatch) -> StateUpdate:
        """Overwrite the batch's rows ``[B1, d']`` with the floored estimate (γ = 1)."""
        return self.tracked.state.update(inner.index, inner.value.clamp_min(self.floor), ema_weight=1.0,
                                         synced=self.synced)


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
    module = FlooredPlugIn(MLP(hidden=[5]), AveragePrecisionSurrogate(), data_sizes=sizes, state_dtype="float64").double()
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
    module = FlooredPlugIn(MLP(hidden=[32]), AveragePrecisionSurrogate(), data_sizes=data.sizes,
                           optimizer=lambda params: torch.optim.Adam(params, lr=0.01))
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      use_distributed_sampler=False)
    trainer.fit(module, datamodule=data)
    ap = trainer.validate(module, datamodule=data, verbose=False)[0]["val/ap"]
    print(f"validation AP after {epochs} epochs of FlooredPlugIn on AveragePrecisionSurrogate: {ap:.3f}")
    return {"max_error": error, "ap": ap}


if __name__ == "__main__":
    main()
