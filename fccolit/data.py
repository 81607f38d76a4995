"""Datasets of named tensors, fetched a whole batch at a time."""

from __future__ import annotations

from typing import Sequence

import torch
from torch.utils.data import Dataset


class TensorDictDataset(Dataset):
    """Rows of equally long named tensors; a batch is one ``index_select`` per field.

    With a batch sampler, the DataLoader calls :meth:`__getitems__` with the batch's indices, so no per-sample
    collation happens (use ``collate_fn=identity_collate``). Items are dicts of the fields' rows.
    """

    def __init__(self, **fields: torch.Tensor) -> None:
        lengths = {k: int(v.shape[0]) for k, v in fields.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"all fields need the same number of rows, got {lengths}")
        self.fields = fields
        self.length = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.fields.items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return {k: v.index_select(0, idx) for k, v in self.fields.items()}


def identity_collate(batch):
    """The batch is already collated by ``__getitems__``."""
    return batch
