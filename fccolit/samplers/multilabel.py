"""Multi-label batches: a few tasks (labels) per batch, and per task a fixed number of positives and negatives.

The third sampler shape, after the plain shuffle (:class:`~fccolit.samplers.uniform.UniformBatchSampler`) and the
binary :class:`~fccolit.samplers.DualSampler`. With ``T`` binary tasks on ``N`` samples (CheXpert's five
diseases, BDD100K's attribute values), each global batch picks ``K`` tasks and, for each of them, ``P`` of its
positives and ``Q`` of its negatives::

    [ P positives of t_1 | Q negatives of t_1 | P positives of t_2 | Q negatives of t_2 | ... ]   (K blocks)

so AP or pAUC can be optimized as the mean over tasks: every task present in a batch has both classes, and the
per-task state is indexed by the **(task, sample) pair**. The sampler yields pair ids
``pair = task · N + sample`` (a flat id over the ``T × N`` table, never a dense per-task copy of the data);
:class:`MultiLabelPairDataset` decodes them into the batch fields.

Labels are ``1`` (positive), ``0`` (negative) or anything else (``-1``: unlabeled for that task, e.g. an
uncertain CheXpert finding under the U-Ignore policy); unlabeled (task, sample) pairs are never drawn.

This follows the classification mode of LibAUC's ``TriSampler`` (``num_sampled_tasks`` tasks × ``num_pos`` +
``num_neg`` samples; ``libauc/sampler/sampler.py`` in https://github.com/Optimization-AI/LibAUC), made rank-aware
and resumable on :class:`~fccolit.samplers.RankAwareBatchSampler` and without its global-RNG side effects.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import Dataset

from fccolit.samplers.base import RankAwareBatchSampler, SampledBatch
from fccolit.samplers.binary import draw_stream

__all__ = ["MultiLabelSampler", "MultiLabelPairDataset", "multilabel_pair_tables", "multilabel_sizes", "tasks_per_batch_for"]


def _as_label_matrix(labels: Any) -> torch.Tensor:
    labels = torch.as_tensor(labels)
    if labels.dim() == 1:  # one task
        labels = labels.unsqueeze(1)
    if labels.dim() != 2:
        raise ValueError(f"multi-label labels must be a [N, T] matrix, got shape {tuple(labels.shape)}")
    return labels


def multilabel_pair_tables(labels: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the (task, positive) and (task, negative) pairs.

    Args:
        labels: ``[N, T]`` with 1 (positive), 0 (negative), other values (unlabeled).

    Returns:
        ``(pos_rows, neg_rows)``, both ``[T, N]`` long: ``pos_rows[t, n]`` is the row of pair ``(t, n)`` among all
        positive pairs, ordered by task then sample (task ``t``'s rows are a contiguous block), −1 where ``n`` is not a
        positive of ``t``; ``neg_rows`` likewise for negatives. These are the per-(task, sample) state rows: an AP
        state has ``num_positives = Σ_t |P_t|`` rows.
    """
    labels = _as_label_matrix(labels).t()  # [T, N]
    tables = []
    for value in (1, 0):
        mask = (labels == value).reshape(-1)
        rows = torch.full((mask.numel(),), -1, dtype=torch.long)
        rows[mask] = torch.arange(int(mask.sum()))
        tables.append(rows.view(labels.shape))
    return tables[0], tables[1]


def multilabel_sizes(labels: Any) -> dict[str, int]:
    """``num_samples`` N, ``num_tasks`` T, ``num_pairs`` T·N, ``num_positives`` / ``num_negatives`` (labeled
    positive / negative pairs over all tasks: the state rows of the per-task objectives) and ``num_outputs`` T."""
    labels = _as_label_matrix(labels)
    n, t = labels.shape
    return {
        "num_samples": int(n),
        "num_tasks": int(t),
        "num_pairs": int(n * t),
        "num_positives": int((labels == 1).sum()),
        "num_negatives": int((labels == 0).sum()),
        "num_outputs": int(t),
    }


def tasks_per_batch_for(batch_size: int, num_tasks: int, given: int | None) -> int:
    """Tasks per multi-label batch: ``given`` (checked to divide ``batch_size``), or the largest divisor of
    ``batch_size`` that is at most ``num_tasks``."""
    if given is None:
        return max(k for k in range(1, num_tasks + 1) if batch_size % k == 0)
    if not 1 <= int(given) <= num_tasks or batch_size % int(given):
        raise ValueError(f"tasks_per_batch must divide batch_size ({batch_size}) and be between 1 and {num_tasks}, got {given}")
    return int(given)


class MultiLabelSampler(RankAwareBatchSampler):
    """Batches of ``K`` tasks × (``P`` positives + ``Q`` negatives of that task).

    Per batch, the ``K`` tasks are a uniformly random subset of the ``T`` tasks (distinct within the batch).
    Each task's positives (and negatives) walk through fresh random permutations of that task's pool across the
    batches of an epoch, so rare positives are oversampled and nothing repeats before its pool is exhausted.
    Everything is drawn from the ``(seed, epoch)`` generator: one process and ``W`` processes see the same global
    batches, and the stream resumes mid-epoch (see :class:`~fccolit.samplers.RankAwareBatchSampler`).

    Rank ``r`` of ``W`` gets ``global[r::W]``: with ``P`` and ``Q`` multiples of ``W`` that is ``P/W`` positives
    and ``Q/W`` negatives of every task of the batch.

    Args:
        labels: ``[N, T]`` labels (1 positive, 0 negative, anything else unlabeled); ``[N]`` is one task.
        tasks_per_batch: K (≤ T).
        num_positives: P, positives per task per global batch (≥ 1).
        num_negatives: Q, negatives per task per global batch (≥ 0; 0 gives DevSafety's class-balanced batches
            when the labels are a one-hot class matrix).
        num_batches: batches per epoch (default: about one pass over the samples, ``⌈N / (K·(P + Q))⌉``).
        pair_ids: yield pair ids ``task · N + sample`` (for :class:`MultiLabelPairDataset`); False yields the
            sample ids, keeping the block layout (the task of each position is then implicit).
        seed, rank, world_size: see :class:`~fccolit.samplers.RankAwareBatchSampler`.

    Attributes:
        num_tasks, num_samples, global_size (``K · (P + Q)``).

    Raises:
        ValueError: labels that are not ``[N]`` or ``[N, T]``; ``tasks_per_batch`` outside ``[1, T]``;
            ``num_positives`` < 1 or ``num_negatives`` < 0; a task without a positive (or, when ``num_negatives`` > 0,
            without a negative); on iteration, ``num_positives`` or ``num_negatives`` not a multiple of ``world_size``.

    Warns:
        UserWarning: a task has fewer positives than ``num_positives`` (its batches repeat positives).

    Example (four samples, two tasks; one task per batch, one positive and one negative; pair id = task · 4 +
    sample):
        >>> import torch
        >>> labels = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])
        >>> sampler = MultiLabelSampler(labels, tasks_per_batch=1, num_positives=1, num_negatives=1,
        ...                             seed=0, rank=0, world_size=1)
        >>> len(sampler), list(iter(sampler))[:2]
        (2, [[2, 1], [6, 7]])
    """

    def __init__(
        self,
        labels: Any,
        tasks_per_batch: int,
        num_positives: int,
        num_negatives: int,
        num_batches: int | None = None,
        pair_ids: bool = True,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        labels = _as_label_matrix(labels)
        self.num_samples, self.num_tasks = int(labels.shape[0]), int(labels.shape[1])
        if not 1 <= tasks_per_batch <= self.num_tasks:
            raise ValueError(
                f"MultiLabelSampler: tasks_per_batch must be between 1 and the number of tasks ({self.num_tasks}), "
                f"got {tasks_per_batch}"
            )
        if num_positives < 1 or num_negatives < 0:
            raise ValueError(
                f"MultiLabelSampler: need num_positives >= 1 and num_negatives >= 0, got {num_positives} and {num_negatives}"
            )
        columns = labels.t()
        self.positives = [torch.nonzero(col == 1).flatten() for col in columns]
        self.negatives = [torch.nonzero(col == 0).flatten() for col in columns]
        empty = [t for t in range(self.num_tasks) if self.positives[t].numel() == 0]
        if empty:
            raise ValueError(f"MultiLabelSampler: task(s) {empty} have no positive sample (label 1)")
        if num_negatives > 0:
            empty = [t for t in range(self.num_tasks) if self.negatives[t].numel() == 0]
            if empty:
                raise ValueError(f"MultiLabelSampler: task(s) {empty} have no negative sample (label 0)")
        few = {t: int(self.positives[t].numel()) for t in range(self.num_tasks) if self.positives[t].numel() < num_positives}
        if few:  # allowed (the pools are walked again), but rarely what was meant
            warnings.warn(
                f"MultiLabelSampler: {num_positives} positives per task and batch requested but some tasks have fewer "
                f"positives (label 1): {', '.join(f'task {t}: {n}' for t, n in few.items())}, so their batches repeat "
                f"positives: lower num_positives (the DataModule's num_positives) to at most {min(few.values())}, or drop "
                "those tasks",
                stacklevel=2,
            )
        self.tasks_per_batch, self.num_positives, self.num_negatives = int(tasks_per_batch), int(num_positives), int(num_negatives)
        self.pair_ids = bool(pair_ids)
        self.global_size = self.tasks_per_batch * (self.num_positives + self.num_negatives)
        self._num_batches = int(num_batches) if num_batches else math.ceil(self.num_samples / self.global_size)

    def num_batches(self) -> int:
        return self._num_batches

    def global_batch_size(self) -> int:
        return self.global_size

    def __iter__(self) -> Iterator[list[int]]:
        world = self.world_size
        if self.num_positives % world or self.num_negatives % world:
            raise ValueError(
                f"MultiLabelSampler: {self.num_positives} positives and {self.num_negatives} negatives per task cannot "
                f"be split evenly among {world} processes; choose multiples of the number of devices."
            )
        return super().__iter__()

    def global_batches(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        n, k, p, q = self._num_batches, self.tasks_per_batch, self.num_positives, self.num_negatives
        tasks = torch.stack([torch.randperm(self.num_tasks, generator=generator)[:k] for _ in range(n)])  # [n, K]
        counts = torch.bincount(tasks.flatten(), minlength=self.num_tasks).tolist()
        pos, neg = [], []
        for t in range(self.num_tasks):  # task order: the draws do not depend on the schedule's layout
            c = counts[t]
            pos.append(draw_stream(self.positives[t], c * p, generator).view(c, p) if c else None)
            neg.append(draw_stream(self.negatives[t], c * q, generator).view(c, q) if c and q else None)
        used = [0] * self.num_tasks
        offset = self.num_samples if self.pair_ids else 0
        for b in range(n):
            blocks = []
            for t in tasks[b].tolist():
                j = used[t]
                used[t] += 1
                block = pos[t][j] if q == 0 else torch.cat([pos[t][j], neg[t][j]])
                blocks.append(block + t * offset)
            yield torch.cat(blocks)


class MultiLabelPairDataset(Dataset):
    """Decodes the pair ids of :class:`MultiLabelSampler` into a batch of named tensors.

    Wraps a per-sample dataset whose batched ``__getitems__(sample_ids)`` returns a dict with the image (``x``)
    and the label vector ``y`` ``[B, T]``. Each distinct sample of a batch is fetched (decoded, augmented) once,
    even when it appears under several tasks; for a training batch (:class:`~fccolit.samplers.base.SampledBatch`)
    the base gets the sample ids as a ``SampledBatch`` keyed by the batch seed and the sample ids, so a sample's
    augmentation does not depend on the rank or position it is drawn at.

    Batch fields (B positions of the flattened ``[K × (P + Q)]`` layout):

    * ``x``: the sample's input; ``labels``: ``[B, T]`` the sample's full label vector (the base ``y``);
    * ``y``: ``[B]`` long, the label of the position's task (1 / 0);
    * ``task``: ``[B]`` long, the task of the position; ``index``: ``[B]`` the sample's row in the split;
    * ``pair_index``: ``[B]`` the (task, sample) id ``task · N + index`` (state over all pairs);
    * ``pos_index`` / ``neg_index``: ``[B]`` row among the (task, positive) / (task, negative) pairs, −1 otherwise
      (state per (task, positive), e.g. AP; per (task, negative), e.g. p-norm push);
    * any other field of the base dataset, gathered by sample.

    Args:
        base: the per-sample dataset (``len(base) == N``).
        labels: ``[N, T]`` label matrix of ``base`` (the one the sampler was built from).

    Raises:
        ValueError: labels that are not ``[N]`` or ``[N, T]``; ``len(base)`` differs from N.

    Example (pairs 2 = (task 0, sample 2) and 6 = (task 1, sample 2) of a four-sample, two-task base):
        >>> import torch
        >>> class Base(torch.utils.data.Dataset):
        ...     def __init__(self, x, y): self.x, self.y = x, y
        ...     def __len__(self): return len(self.x)
        ...     def __getitems__(self, ids): return {"x": self.x[ids], "y": self.y[ids]}
        >>> labels = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])
        >>> dataset = MultiLabelPairDataset(Base(torch.zeros(4, 3), labels), labels)
        >>> batch = dataset.__getitems__([2, 6])
        >>> len(dataset), tuple(batch["x"].shape), tuple(batch["labels"].shape)
        (8, (2, 3), (2, 2))
        >>> batch["task"].tolist(), batch["y"].tolist(), batch["pos_index"].tolist(), batch["neg_index"].tolist()
        ([0, 1], [1, 1], [1, 3], [-1, -1])
    """

    def __init__(self, base: Dataset, labels: Any) -> None:
        self.base = base
        self.labels = _as_label_matrix(labels).long()
        self.num_samples, self.num_tasks = self.labels.shape
        if len(base) != self.num_samples:
            raise ValueError(f"MultiLabelPairDataset: the base dataset has {len(base)} samples, the labels {self.num_samples}")
        self.pos_rows, self.neg_rows = multilabel_pair_tables(self.labels)

    def __len__(self) -> int:
        return self.num_samples * self.num_tasks

    def __getitem__(self, pair: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([pair]).items()}

    def __getitems__(self, pairs: Sequence[int]) -> dict[str, torch.Tensor]:
        keys = pairs if isinstance(pairs, SampledBatch) else None
        pairs = torch.as_tensor(list(pairs), dtype=torch.long)
        task, sample = pairs // self.num_samples, pairs % self.num_samples
        unique, inverse = torch.unique(sample, return_inverse=True)
        ids = unique.tolist()
        if keys is not None:  # a training batch: a sample's random draws (augmentation) keyed by its id, on any rank
            ids = SampledBatch(ids, keys.seed, ids, keys.epoch, keys.batch_index)
        fetched = self.base.__getitems__(ids)
        batch = {k: v.index_select(0, inverse) if torch.is_tensor(v) else v for k, v in fetched.items()}
        batch["labels"] = batch.pop("y") if "y" in batch else self.labels.index_select(0, sample)
        batch.update(
            y=self.labels[sample, task].clamp(min=0),
            task=task,
            index=sample,
            pair_index=pairs,
            pos_index=self.pos_rows[task, sample],
            neg_index=self.neg_rows[task, sample],
        )
        return batch
