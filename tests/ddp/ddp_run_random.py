"""One training run that draws random numbers (dropout in the model, random crop and flip of the images), for the
exact-resume tests of tests/algorithms/test_faults.py (run as a script, not collected). The pattern of
``tests/ddp/ddp_run.py``:

    python tests/ddp/ddp_run_random.py --data CIFAR_ROOT --devices 2 --max-steps 12 --out DIR [--workers N]
                                       [--save-every K] [--resume CKPT]

SOX on average precision of a binary CIFAR task (one class against the rest, generated images) with a scorer that
applies dropout, trained in float64 with ``augment=True``. Every rank writes ``DIR/rank{r}.pt`` (module and
optimizer state, global step, batch trace, the sum of the pixels of every training batch it saw (the
augmentation's fingerprint) and the last ``train/objective_epoch``).
"""

import os
import sys

import torch
from lightning.pytorch import Callback, seed_everything
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import arguments, fit_and_save  # noqa: E402

from fccolit.algorithms import SOX  # noqa: E402
from fccolit.datamodules.cifar import CIFARLTDataModule  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402


class DropoutScorer(nn.Module):
    """Flattened 32×32 images → 16 hidden units → dropout(0.3) → one score per image ``[B]``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class PixelTrace(Callback):
    """The sum of the (augmented) pixels of every training batch, keyed by global step."""

    def __init__(self) -> None:
        self.sums: dict[int, float] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.sums[trainer.global_step] = float(batch["x"].double().sum())


def build_data(root: str, workers: int = 0) -> CIFARLTDataModule:
    """The binary CIFAR task (class 3 against the rest, no long tail) with augmentation on."""
    return CIFARLTDataModule(
        root, task="one_vs_rest", imb_factor=1.0, val_fraction=0.1, augment=True, batch_size=8, num_positives=2,
        seed=0, num_workers=workers, eval_batch_size=64, cache_dir=os.path.join(root, "cache"),
    )


def build(root: str, workers: int = 0):
    seed_everything(0, workers=True)
    data = build_data(root, workers)
    model = SOX(
        DropoutScorer(), AveragePrecisionSurrogate(margin=0.5), optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=0.2),
        ema_weight=0.3, data_sizes=data.sizes, state_dtype="float64", metrics=["ap"],
    )
    return model.double(), data  # float64 from construction (see ddp_run.py)


def main():
    def add(parser):
        parser.add_argument("--data", required=True)
        parser.add_argument("--workers", type=int, default=0)

    args = arguments(max_steps=12, add=add)
    model, data = build(args.data, args.workers)
    pixels = PixelTrace()
    fit_and_save(model, data, args, callbacks=[pixels], extras=lambda trainer: {
        "pixels": pixels.sums, "objective_epoch": float(trainer.callback_metrics["train/objective_epoch"])})


if __name__ == "__main__":
    main()
