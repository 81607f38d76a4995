"""Generated data that needs no download: the quickstart default and the test workhorse."""

from __future__ import annotations

from typing import Literal

import torch

from fccolit.data import binary_fields, binary_sizes, check_split_fractions, random_splits
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes, tasks_per_batch_for

from fccolit.datamodules.base import FCCODataModule


def make_imbalanced_binary(
    num_samples: int, num_features: int, pos_fraction: float, noise: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian features; the positives are the top ``pos_fraction`` of a noisy, mildly non-linear score.
    Returns ``x [N, D]`` float32 and ``y [N]`` long in {0, 1} with exactly ``round(pos_fraction · N)`` positives.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, num_features, generator=g)
    return x, imbalanced_labels(x, pos_fraction, noise, g)


def imbalanced_labels(x: torch.Tensor, pos_fraction: float, noise: float, generator: torch.Generator) -> torch.Tensor:
    """Labels ``[N]`` of features ``x [N, D]``: the top ``pos_fraction`` of ``x·d + ½ tanh(x_0 x_1) + noise·ε``
    for a random unit direction ``d`` (drawn from ``generator``, then ε)."""
    num_samples, num_features = x.shape
    direction = torch.randn(num_features, generator=generator)
    direction /= direction.norm()
    latent = x @ direction + 0.5 * torch.tanh(x[:, 0] * x[:, 1 % num_features]) + noise * torch.randn(num_samples, generator=generator)
    num_pos = max(1, round(pos_fraction * num_samples))
    y = torch.zeros(num_samples, dtype=torch.long)
    y[torch.topk(latent, num_pos).indices] = 1
    return y


class SyntheticBinaryDataModule(FCCODataModule):
    """Imbalanced binary classification on generated Gaussian data (no files, no download).

    Batch fields: those of :func:`fccolit.data.binary_fields` (``x``, ``y``, ``index``, ``pos_index``,
    ``neg_index``).

    Args:
        num_samples: rows generated in total (split into train / validation / test).
        num_features: D.
        pos_fraction: share of positives (the same in every split).
        noise: label noise of the latent score (larger: harder problem).
        val_fraction, test_fraction: shares of the validation and test splits.
        batch_size: global training batch size.
        num_positives: positives per training batch (dual sampler).
        anchor_sampling: ``"permutation"`` or ``"with_replacement"`` (:class:`~fccolit.samplers.DualSampler`).
        seed: seeds the data and the sampler.
        num_workers, eval_batch_size: as :class:`~fccolit.datamodules.FCCODataModule`.

    Raises:
        ValueError: ``pos_fraction`` outside (0, 1), split fractions that leave no training rows, or a batch size
            that is not a positive integer.

    Example:
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> data = SyntheticBinaryDataModule(num_samples=200, num_features=4, pos_fraction=0.1, batch_size=16,
        ...                                  num_positives=4)
        >>> data.sizes  # the training split's, for the model's data_sizes
        {'num_samples': 120, 'num_positives': 11, 'num_negatives': 109, 'num_features': 4}
        >>> data.setup("fit")
        >>> batch = next(iter(data.train_dataloader()))
        >>> sorted(batch), tuple(batch["x"].shape), int(batch["y"].sum())  # 4 positives in each batch
        (['index', 'neg_index', 'pos_index', 'x', 'y'], (16, 4), 4)
    """

    def __init__(
        self,
        num_samples: int = 20_000,
        num_features: int = 20,
        pos_fraction: float = 0.05,
        noise: float = 0.5,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        batch_size: int = 64,
        num_positives: int = 16,
        anchor_sampling: Literal["permutation", "with_replacement"] = "permutation",
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        self.anchor_sampling = anchor_sampling
        if not 0.0 < pos_fraction < 1.0:
            raise ValueError(f"pos_fraction must be in (0, 1), got {pos_fraction}")
        check_split_fractions(val_fraction, test_fraction)
        self.batch_size, self.num_positives, self.seed = batch_size, num_positives, seed
        x, y = make_imbalanced_binary(num_samples, num_features, pos_fraction, noise, seed)
        parts = random_splits(num_samples, val_fraction, test_fraction, seed + 1)
        self._splits = {name: binary_fields(x[idx], y[idx]) for name, idx in parts.items()}
        self.sizes = binary_sizes(self._splits["train"])

    def setup(self, stage: str | None = None) -> None:
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        return DualSampler(self._splits["train"]["y"], self.batch_size, self.num_positives,
                           anchor_sampling=self.anchor_sampling, seed=self.seed)


class SyntheticMultiLabelDataModule(FCCODataModule):
    """Multi-label (multi-task) binary classification on generated Gaussian data.

    ``T`` tasks sharing the features, each with its own imbalanced labels, and a share of (task, sample) entries
    unlabeled (−1), as CheXpert's uncertain findings under U-Ignore. The training batches come from
    :class:`~fccolit.samplers.MultiLabelSampler` (``K`` tasks × (``P`` positives + ``Q`` negatives)); train mean
    AP over tasks with :class:`~fccolit.objectives.AveragePrecisionSurrogate` and a model with ``T`` outputs.

    Batch fields: training — those of :class:`~fccolit.samplers.MultiLabelPairDataset` (``x``, ``labels``
    ``[B, T]``, ``y`` ``[B]``, ``task``, ``index``, ``pos_index``, ...); evaluation — ``x``, ``y`` ``[B, T]``
    (1 / 0 / −1), ``index``.

    Args:
        num_samples, num_features, noise, val_fraction, test_fraction, seed: as
            :class:`SyntheticBinaryDataModule`.
        num_tasks: T.
        pos_fraction: share of positives of each task.
        unlabeled_fraction: share of each task's entries set to −1.
        batch_size: global training batch size (a multiple of ``tasks_per_batch``).
        num_positives: positives per task of a batch (None: half of each task's block).
        tasks_per_batch: K (None: the largest divisor of ``batch_size`` up to T).
        num_workers, eval_batch_size: DataLoader workers and rows per evaluation batch.

    Raises:
        ValueError: ``unlabeled_fraction`` outside [0, 1); ``val_fraction`` / ``test_fraction`` outside [0, 1) or
            leaving no training rows; ``tasks_per_batch`` not a divisor of ``batch_size`` in [1, T];
            ``num_positives`` not in [1, block − 1], the block being ``batch_size // tasks_per_batch``.

    Example:
        >>> data = SyntheticMultiLabelDataModule(num_samples=200, batch_size=20)
        >>> data.sizes["num_samples"], data.sizes["num_tasks"], data.tasks_per_batch, data.num_positives
        (120, 5, 5, 2)
    """

    def __init__(
        self,
        num_samples: int = 4000,
        num_features: int = 16,
        num_tasks: int = 5,
        pos_fraction: float = 0.1,
        unlabeled_fraction: float = 0.05,
        noise: float = 0.5,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        batch_size: int = 60,
        num_positives: int | None = None,
        tasks_per_batch: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        if not 0.0 <= unlabeled_fraction < 1.0:
            raise ValueError(f"unlabeled_fraction must be in [0, 1), got {unlabeled_fraction}")
        check_split_fractions(val_fraction, test_fraction)
        self.batch_size, self.seed = batch_size, seed
        self.tasks_per_batch = tasks_per_batch_for(batch_size, num_tasks, tasks_per_batch)
        block = batch_size // self.tasks_per_batch
        self.num_positives = block // 2 if num_positives is None else int(num_positives)
        if not 0 < self.num_positives < block:
            raise ValueError(f"num_positives must be in [1, {block - 1}] (a task's block of the batch), got {num_positives}")
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(num_samples, num_features, generator=g)
        labels = torch.stack([imbalanced_labels(x, pos_fraction, noise, g) for _ in range(num_tasks)], dim=1)
        labels[torch.rand(labels.shape, generator=g) < unlabeled_fraction] = -1
        parts = random_splits(num_samples, val_fraction, test_fraction, seed + 1)
        self._splits = {name: {"x": x[idx], "y": labels[idx], "index": torch.arange(len(idx))} for name, idx in parts.items()}
        self.sizes = {**multilabel_sizes(self._splits["train"]["y"]), "num_features": num_features}
        self.task_names = [f"task{t}" for t in range(num_tasks)]

    def setup(self, stage: str | None = None) -> None:
        self.set_datasets(self._splits)
        self.train_dataset = MultiLabelPairDataset(self.train_dataset, self._splits["train"]["y"])

    def build_train_sampler(self) -> RankAwareBatchSampler:
        block = self.batch_size // self.tasks_per_batch
        return MultiLabelSampler(self._splits["train"]["y"], self.tasks_per_batch, self.num_positives,
                                 block - self.num_positives, seed=self.seed)
