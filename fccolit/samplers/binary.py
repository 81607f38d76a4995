"""Samplers for binary classification: a fixed number of positives and negatives per batch."""

from __future__ import annotations

import math
import warnings
from typing import Iterator, Literal

import torch

from fccolit._checks import check_choice
from fccolit.samplers.base import RankAwareBatchSampler


def draw_stream(pool: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` draws that walk through fresh random permutations of ``pool`` (without replacement within
    a permutation, so every element appears once per pass before any repeats)."""
    passes = max(1, math.ceil(count / pool.numel()))
    perms = [pool[torch.randperm(pool.numel(), generator=generator)] for _ in range(passes)]
    return torch.cat(perms)[:count]


class DualSampler(RankAwareBatchSampler):
    """Batches with a fixed number of positives and negatives (for AP / AUC / pAUC objectives).

    Each global batch holds ``num_positives`` positives followed by ``batch_size − num_positives`` negatives.
    Negatives walk through random permutations of their class (each seen once per epoch by default). Positives
    (the outer indices, the anchors of AP / pAUC) are drawn as ``anchor_sampling`` says:

    * ``"permutation"`` (default): walk through random permutations of the positives, so every positive is
      visited once before any repeats (rare positives are oversampled across passes).
    * ``"with_replacement"``: each batch's positives are drawn uniformly with replacement, independently of the
      other batches, as the AUPRC papers' analysis samples B_t (Wang et al., "Momentum Accelerates the
      Convergence of Stochastic AUPRC Maximization", AISTATS 2022, Alg. 1–3). A positive may then recur within a
      batch (its state row gets one update with the mean estimate) or be revisited sooner.

    Rank ``r`` gets ``num_positives / W`` positives and the matching share of negatives.

    Args:
        labels: ``[N]`` binary labels of the training set (1 positive).
        batch_size: global batch size B.
        num_positives: positives per global batch P (default: ``max(1, round(pos_ratio · B))``).
        pos_ratio: share of positives per batch when ``num_positives`` is not given (default 0.5).
        num_batches: batches per epoch (default: one pass over the negatives, ``⌈N_neg / (B − P)⌉``).
        anchor_sampling: ``"permutation"`` or ``"with_replacement"`` (above).
        seed, rank, world_size: see :class:`~fccolit.samplers.base.RankAwareBatchSampler`.

    Raises:
        ValueError: an unknown ``anchor_sampling``; ``num_positives`` outside ``[1, B − 1]``; labels without a
            positive or without a negative; on iteration, ``num_positives`` or ``batch_size`` not a multiple of
            ``world_size``.

    Warns:
        UserWarning: ``num_positives`` exceeds the positives of the labels (every batch repeats positives).

    Example (two positives, 0 and 3, among six samples; batches ``[2 positives | 2 negatives]``):
        >>> import torch
        >>> sampler = DualSampler(torch.tensor([1, 0, 0, 1, 0, 0]), batch_size=4, num_positives=2,
        ...                       seed=0, rank=0, world_size=1)
        >>> len(sampler), list(iter(sampler))[:2]
        (2, [[0, 3, 2, 1], [3, 0, 5, 4]])
    """

    ANCHOR_SAMPLING = ("permutation", "with_replacement")

    def __init__(
        self,
        labels: torch.Tensor,
        batch_size: int,
        num_positives: int | None = None,
        pos_ratio: float = 0.5,
        num_batches: int | None = None,
        anchor_sampling: Literal["permutation", "with_replacement"] = "permutation",
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        check_choice("DualSampler: anchor_sampling", anchor_sampling, self.ANCHOR_SAMPLING)
        self.anchor_sampling = anchor_sampling
        labels = torch.as_tensor(labels).reshape(-1)
        self.positives = torch.nonzero(labels == 1).flatten()
        self.negatives = torch.nonzero(labels != 1).flatten()
        if num_positives is None:
            num_positives = max(1, round(pos_ratio * batch_size))
        if not 0 < num_positives < batch_size:
            raise ValueError(
                f"DualSampler: num_positives must be between 1 and batch_size − 1 = {batch_size - 1}, got {num_positives}"
            )
        if self.positives.numel() == 0:
            raise ValueError("DualSampler: the training labels hold no positive example (label 1)")
        if self.negatives.numel() == 0:
            raise ValueError("DualSampler: the training labels hold no negative example")
        if num_positives > self.positives.numel():  # allowed (LibAUC oversamples too), but rarely what was meant
            warnings.warn(
                f"DualSampler: {num_positives} positives per batch requested but the training labels hold only "
                f"{self.positives.numel()} positives (label 1), so every batch repeats positives: lower "
                f"num_positives (the DataModule's num_positives) to at most {self.positives.numel()}, or train on more data",
                stacklevel=2,
            )
        self.batch_size, self.num_positives = int(batch_size), int(num_positives)
        negatives_per_batch = self.batch_size - self.num_positives
        self._num_batches = num_batches or math.ceil(self.negatives.numel() / negatives_per_batch)

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        world = self.world_size
        if self.num_positives % world:
            raise ValueError(
                f"DualSampler: {self.num_positives} positives per batch cannot be split evenly among {world} "
                "processes; choose num_positives and batch_size as multiples of the number of devices."
            )
        return super().__iter__()

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        n, p = self._num_batches, self.num_positives
        if self.anchor_sampling == "permutation":
            pos = draw_stream(self.positives, n * p, generator).view(n, p)
        else:
            pos = self.positives[torch.randint(self.positives.numel(), (n, p), generator=generator)]
        neg = draw_stream(self.negatives, n * (self.batch_size - p), generator).view(n, -1)
        for b in range(n):
            # [pos | neg] with P and B − P multiples of W: the slice [r::W] takes P/W positives on every rank
            yield torch.cat([pos[b], neg[b]])
