"""Generated multi-class data (no files, no download): the data path of NCA and other embedding objectives."""

from __future__ import annotations

import torch

from fccolit.data import random_splits
from fccolit.samplers import RankAwareBatchSampler
from fccolit.samplers.uniform import UniformBatchSampler

from fccolit.datamodules.base import FCCODataModule


def make_multiclass(
    num_samples: int, num_features: int, num_classes: int, num_informative: int, class_sep: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian classes in ``num_informative`` dimensions, padded with pure-noise dimensions.

    Class ``c`` has mean ``class_sep · μ_c`` (``μ_c`` a random unit vector) in the first ``num_informative``
    coordinates and zero elsewhere; every coordinate has unit-variance noise. Labels are balanced
    (``y = i mod C`` before a shuffle). So a metric that keeps the informative directions and drops the noise
    ones separates the classes: the problem NCA solves.

    Returns ``x [N, D]`` float32 and ``y [N]`` long in ``{0, …, C − 1}``.
    """
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(num_classes, num_informative, generator=g, dtype=torch.float64)
    means = class_sep * means / means.norm(dim=1, keepdim=True)
    y = torch.arange(num_samples) % num_classes
    y = y[torch.randperm(num_samples, generator=g)]
    x = torch.randn(num_samples, num_features, generator=g, dtype=torch.float64)
    x[:, :num_informative] += means[y]
    return x.float(), y


class SyntheticMulticlassDataModule(FCCODataModule):
    """Balanced multi-class classification on generated Gaussian data, for NCA (Wang & Yang, ICML 2022).

    As in Wang & Yang, arXiv:2202.12396, §4.3.

    Batch fields: ``x`` ``[B, D]`` float32, ``y`` ``[B]`` long (class), ``index`` ``[B]`` (row in its split: the
    state row of NCA). Training batches are uniform without replacement
    (:class:`~fccolit.samplers.uniform.UniformBatchSampler`). Sizes: ``num_samples`` (training split),
    ``num_features`` (D) and ``num_classes`` (C), available right after construction.

    Args:
        num_samples: rows generated in total (split into train / validation / test).
        num_features: D (the first ``num_informative`` carry the classes, the rest is noise).
        num_classes: C ≥ 2.
        num_informative: dimensions carrying the class means (≤ D).
        class_sep: distance of each class mean from the origin (larger: easier).
        val_fraction, test_fraction: shares of the validation and test splits.
        batch_size: global training batch size.
        num_batches: training batches per epoch (None: one pass over the training split).
        seed: seeds the data, the split and the sampler.
        num_workers, eval_batch_size: DataLoader workers and rows per evaluation batch.

    Raises:
        ValueError: ``num_classes < 2``; ``num_informative`` outside [1, ``num_features``]; ``val_fraction`` /
            ``test_fraction`` outside [0, 1) or leaving no training rows; a training split missing a class; a
            ``batch_size`` larger than the training split.

    Example:
        >>> SyntheticMulticlassDataModule(num_samples=100, batch_size=16).sizes
        {'num_samples': 60, 'num_features': 10, 'num_classes': 5}
    """

    def __init__(
        self,
        num_samples: int = 3_000,
        num_features: int = 10,
        num_classes: int = 5,
        num_informative: int = 3,
        class_sep: float = 2.0,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        batch_size: int = 64,
        num_batches: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        if not 1 <= num_informative <= num_features:
            raise ValueError(f"num_informative must be in [1, num_features={num_features}], got {num_informative}")
        if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + test_fraction < 1.0):
            raise ValueError("val_fraction and test_fraction must be in [0, 1) and leave data for training")
        self.batch_size, self.num_batches, self.seed = batch_size, num_batches, seed
        x, y = make_multiclass(num_samples, num_features, num_classes, num_informative, class_sep, seed)
        parts = random_splits(num_samples, val_fraction, test_fraction, seed + 1)
        self._splits = {
            name: {"x": x[idx], "y": y[idx], "index": torch.arange(idx.numel())} for name, idx in parts.items()
        }
        train = self._splits["train"]
        if train["y"].unique().numel() < num_classes:
            raise ValueError(f"the training split ({train['y'].numel()} rows) misses a class: generate more samples")
        self.sizes = {"num_samples": int(train["y"].numel()), "num_features": num_features, "num_classes": num_classes}
        if batch_size > self.sizes["num_samples"]:
            raise ValueError(f"batch_size ({batch_size}) exceeds the training split ({self.sizes['num_samples']} rows)")

    def setup(self, stage: str | None = None) -> None:
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        return UniformBatchSampler(
            self.sizes["num_samples"], self.batch_size, num_batches=self.num_batches, seed=self.seed
        )
