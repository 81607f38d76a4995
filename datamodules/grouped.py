"""Data with a ``group`` field: the base of the group-DRO and fairness DataModules, and a generated one for tests.

Any DataModule whose training split has a ``group`` field can train GDRO-CVaR
(:class:`~fccolit.objectives.constrained.GroupDROCVaRLoss`) by deriving from :class:`GroupedDataModule`: its training
batches come from a :class:`~fccolit.samplers.group.GroupBatchSampler` (B1 groups × B2 samples), or are plain
shuffled batches when ``groups_per_batch`` is None.
"""

from __future__ import annotations

import math

import torch

from fccolit.data import binary_fields, binary_sizes, check_split_fractions
from fccolit.samplers.base import RankAwareBatchSampler
from fccolit.samplers.group import GroupBatchSampler, StratifiedBatchSampler

from fccolit.datamodules.base import FCCODataModule

__all__ = ["GroupedDataModule", "SyntheticGroupedDataModule", "make_grouped_binary"]


class GroupedDataModule(FCCODataModule):
    """Base DataModule for data with a ``group`` field (long, ``[N]``) in every split.

    Subclasses fill ``self._splits = {"train": fields, "val": fields, "test": fields}`` (dicts of tensors with a
    ``group`` field) and :attr:`sizes` (including ``num_groups``) in ``__init__``.

    Args:
        batch_size: global batch size of shuffled batches (used when ``groups_per_batch`` is None).
        groups_per_batch: B1: batches of B1 groups × ``samples_per_group`` samples (group DRO); None: shuffled
            batches of ``batch_size`` (every sample once per pass).
        samples_per_group: B2.
        paired: every batch is two independent halves over the same groups (ALEXR2's value and gradient batches).
            With shuffled batches and ``paired=False`` an algorithm that splits its batch in halves (ALEXR2's
            ``independent_batches``) sees the two halves of one shuffled batch, which are just as independent.
        stratify_by_cell: shuffled batches (``groups_per_batch`` None) stratified by the (group × label) cell,
            the cell of a row being ``2·group + y`` (:class:`~fccolit.samplers.group.StratifiedBatchSampler`): each
            cell gets a fixed share of every batch (of every half when ``paired``), proportional to its size and at
            least one row, so a constraint on a cell's mean (ROC-fairness TPR / FPR gaps) is estimated in every
            step. False (default): plain shuffled batches, in which a rare cell is sometimes missing (then that
            constraint is left out of the step).
        num_batches: training batches per epoch (None: one pass over the training samples).
        seed: seeds the sampler.
        num_workers, eval_batch_size: DataLoader workers and rows per evaluation batch.

    Raises:
        ValueError: ``stratify_by_cell`` with ``groups_per_batch`` set; ``paired`` shuffled batches with an odd
            ``batch_size``.

    Example:
        >>> from fccolit.datamodules import FairnessDataModule
        >>> FairnessDataModule("adult", groups_per_batch=4, stratify_by_cell=True)  # checked before any file is read
        Traceback (most recent call last):
        ...
        ValueError: stratify_by_cell applies to shuffled batches: set groups_per_batch to None
    """

    def __init__(
        self,
        batch_size: int = 128,
        groups_per_batch: int | None = None,
        samples_per_group: int = 32,
        paired: bool = False,
        num_batches: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
        stratify_by_cell: bool = False,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        if stratify_by_cell and groups_per_batch is not None:
            raise ValueError("stratify_by_cell applies to shuffled batches: set groups_per_batch to None")
        self.stratify_by_cell = bool(stratify_by_cell)
        if groups_per_batch is None and batch_size % (2 if paired else 1):
            raise ValueError(f"paired batches need an even batch_size, got {batch_size}")
        self.batch_size, self.groups_per_batch, self.samples_per_group = batch_size, groups_per_batch, samples_per_group
        self.paired, self.num_batches, self.seed = paired, num_batches, seed
        self._splits: dict[str, dict[str, torch.Tensor]] = {}

    def setup(self, stage: str | None = None) -> None:
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if not self._splits:
            self.setup("fit")
        groups = self._splits["train"]["group"]
        if self.groups_per_batch is None:  # shuffled batches: one group holding every sample
            half = self.batch_size // 2 if self.paired else self.batch_size
            if self.stratify_by_cell:
                cells = 2 * groups.long() + self._splits["train"]["y"].reshape(-1).long()
                return StratifiedBatchSampler(
                    cells, half, num_batches=self.num_batches, paired=self.paired, seed=self.seed
                )
            return GroupBatchSampler(
                torch.zeros_like(groups), 1, half, num_batches=self.num_batches, paired=self.paired, seed=self.seed
            )
        return GroupBatchSampler(
            groups, self.groups_per_batch, self.samples_per_group, num_batches=self.num_batches, paired=self.paired,
            seed=self.seed,
        )


def make_grouped_binary(
    group_sizes: list[int], num_features: int, shift: float, noise: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logistic-regression data whose groups differ: group ``g`` has its own feature mean and its own weights.

    ``x_g ~ N(shift · m_g, I)``, ``y ~ Bernoulli(σ(⟨w + shift · d_g, x⟩ / noise))`` with random unit ``m_g, d_g``
    and a shared unit ``w``. Returns ``x [N, D]`` float32, ``y [N]`` long in {0, 1}, ``group [N]`` long.
    """
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(num_features, generator=g)
    w /= w.norm()
    xs, ys, gs = [], [], []
    for k, n in enumerate(group_sizes):
        mean = torch.randn(num_features, generator=g)
        delta = torch.randn(num_features, generator=g)
        x = torch.randn(n, num_features, generator=g) + shift * mean / mean.norm()
        logits = x @ (w + shift * delta / delta.norm()) / noise
        y = (torch.rand(n, generator=g) < torch.sigmoid(logits)).long()
        xs.append(x)
        ys.append(y)
        gs.append(torch.full((n,), k, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys), torch.cat(gs)


class SyntheticGroupedDataModule(GroupedDataModule):
    """Generated binary classification with ``num_groups`` groups of unequal size (no files), for GDRO tests.

    Group ``g`` has ``round(max_group_size · imbalance^(−g/(num_groups−1)))`` samples (the largest group is
    ``imbalance`` times the smallest), its own feature shift and its own decision rule (:func:`make_grouped_binary`).
    Each group is split into train / validation / test with the given fractions (every group in every split).

    Batch fields: ``x``, ``y``, ``index``, ``pos_index``, ``neg_index`` (:func:`fccolit.data.binary_fields`) and
    ``group``. Sizes: ``num_samples``, ``num_positives``, ``num_negatives``, ``num_features``, ``num_groups``.

    Args:
        num_groups: n.
        max_group_size: samples of the largest group (all splits together).
        imbalance: largest / smallest group size.
        num_features: D.
        shift: how different the groups are (0: identical distributions).
        noise: temperature of the labels (larger: noisier).
        val_fraction, test_fraction: shares of every group held out.
        (the rest): see :class:`GroupedDataModule`; ``seed`` also seeds the data.

    Raises:
        ValueError: ``num_groups`` < 1 or ``imbalance`` < 1, or batch options :class:`GroupedDataModule` refuses.

    Example:
        >>> from fccolit.datamodules.grouped import SyntheticGroupedDataModule
        >>> data = SyntheticGroupedDataModule(num_groups=3, max_group_size=40)
        >>> data.sizes
        {'num_samples': 37, 'num_positives': 27, 'num_negatives': 10, 'num_features': 10, 'num_groups': 3}
    """

    def __init__(
        self,
        num_groups: int = 8,
        max_group_size: int = 400,
        imbalance: float = 8.0,
        num_features: int = 10,
        shift: float = 1.5,
        noise: float = 0.5,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        batch_size: int = 64,
        groups_per_batch: int | None = 4,
        samples_per_group: int = 16,
        paired: bool = False,
        num_batches: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
    ) -> None:
        super().__init__(
            batch_size=batch_size, groups_per_batch=groups_per_batch, samples_per_group=samples_per_group,
            paired=paired, num_batches=num_batches, seed=seed, num_workers=num_workers, eval_batch_size=eval_batch_size,
        )
        if num_groups < 1 or imbalance < 1.0:
            raise ValueError(f"need num_groups >= 1 and imbalance >= 1, got {num_groups} and {imbalance}")
        check_split_fractions(val_fraction, test_fraction)
        exponent = [k / max(num_groups - 1, 1) for k in range(num_groups)]
        sizes = [max(3, round(max_group_size * imbalance ** (-e))) for e in exponent]
        x, y, group = make_grouped_binary(sizes, num_features, shift, noise, seed)
        gen = torch.Generator().manual_seed(seed + 1)
        parts: dict[str, list[torch.Tensor]] = {"train": [], "val": [], "test": []}
        for k in range(num_groups):
            members = torch.nonzero(group == k).flatten()
            members = members[torch.randperm(members.numel(), generator=gen)]
            n_val = max(1, math.floor(val_fraction * members.numel()))
            n_test = max(1, math.floor(test_fraction * members.numel()))
            parts["val"].append(members[:n_val])
            parts["test"].append(members[n_val : n_val + n_test])
            parts["train"].append(members[n_val + n_test :])
        for split, idx in parts.items():
            idx = torch.sort(torch.cat(idx)).values
            self._splits[split] = {**binary_fields(x[idx], y[idx]), "group": group[idx]}
        self.sizes = {**binary_sizes(self._splits["train"]), "num_groups": num_groups}
