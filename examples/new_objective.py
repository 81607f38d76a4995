"""A new objective in one class, trained by an existing algorithm (SOX).

Mean reciprocal rank (MRR) of the positives, smoothed: with s the scores, n₋ negatives and σ the sigmoid,

    F(w) = −(1/n₊) Σ_{i positive} 1 / (1 + n₋ · g_i(w)),    g_i(w) = mean_{j negative} σ((s_j − s_i) / τ)

g_i is an average over all negatives (too large for one batch): the inner function, estimated on the batch's
negatives. f(u) = −1 / (1 + n₋ u) is non-linear, so plugging the batch estimate into f would be biased; SOX keeps
one moving estimate u_i per positive instead. Writing `inner` and `outer` is all a new problem needs.

    python examples/new_objective.py        # a few seconds on a CPU; prints the validation AP before and after
"""

from __future__ import annotations

import torch
from lightning.pytorch import Trainer

from fccolit.algorithms import SOX
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.models import MLP
from fccolit.objectives import FCCOObjective, InnerBatch


class SmoothedMRR(FCCOObjective):
    """−(1/n₊) Σ_i 1 / (1 + n₋ g_i), g_i = mean_{j negative} σ((s_j − s_i)/τ): one state row per positive."""

    inner_dim = 1                       # g_i is a scalar: u_i has one component
    task = "binary"                     # validation metrics for binary labels
    state_rows = "num_positives"        # outer index i = a positive (the DataModule's sizes count them)
    needs_global_batch = True           # under DDP, g_i uses the negatives of every rank's share of the batch
    batch_fields = ("y", "pos_index")   # the batch fields `inner` reads
    default_metrics = ("ap", "auroc")

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.num_negatives = 1  # n₋, set from the data by bind_sizes

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        self.num_negatives = int(sizes["num_negatives"])

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """scores ``[B]`` → ĝ_i ``[P, 1]`` for the P positives of the batch, indexed by their ``pos_index``."""
        positive = batch["y"] == 1
        pos_scores, neg_scores = scores[positive], scores[~positive]
        value = torch.sigmoid((neg_scores[None, :] - pos_scores[:, None]) / self.temperature).mean(1, keepdim=True)
        return InnerBatch(index=batch["pos_index"][positive], value=value)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """f(u) = −1 / (1 + n₋ u): ``[P, 1]`` → ``[P]``. (``outer_grad`` defaults to autograd of this.)"""
        return -1.0 / (1.0 + self.num_negatives * u[:, 0])


def main(epochs: int = 3) -> dict[str, float]:
    torch.manual_seed(0)
    data = SyntheticBinaryDataModule(num_samples=4000, num_features=10, pos_fraction=0.05, batch_size=64,
                                     num_positives=16, seed=0)
    # f'(u) = n₋ / (1 + n₋ u)² is tiny (n₋ ≈ 2300 here): Adam's step does not depend on the gradient's scale
    module = SOX(MLP(hidden=[32]), SmoothedMRR(), data_sizes=data.sizes, ema_weight=0.9,
                 optimizer=lambda params: torch.optim.Adam(params, lr=0.01))
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      use_distributed_sampler=False)
    before = trainer.validate(module, datamodule=data, verbose=False)[0]["val/ap"]
    trainer.fit(module, datamodule=data)
    after = trainer.validate(module, datamodule=data, verbose=False)[0]["val/ap"]
    print(f"validation AP: {before:.3f} before training, {after:.3f} after {epochs} epochs of SOX on SmoothedMRR")
    return {"ap_before": before, "ap_after": after, "visited": float(module.state.visited().float().mean())}


if __name__ == "__main__":
    main()
