"""Datasets of named tensors, fetched a whole batch at a time."""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit.io.csr import take_rows
from fccolit.samplers.base import index_tensor


class TensorDictDataset(Dataset):
    """Rows of equally long named tensors; a batch is one ``index_select`` per field.

    With a batch sampler, the DataLoader calls :meth:`__getitems__` with the batch's indices, so no per-sample
    collation happens (use ``collate_fn=identity_collate``). Items are dicts of the fields' rows.

    Args:
        **fields: the named fields, each ``[N, ...]`` (a tensor, or anything with ``shape`` and ``index_select``
            such as :class:`SparseRows`).

    Raises:
        ValueError: fields with different numbers of rows N.

    Example:
        >>> import torch
        >>> from fccolit.data import TensorDictDataset
        >>> data = TensorDictDataset(x=torch.arange(12.0).reshape(6, 2), y=torch.tensor([0, 1, 0, 1, 1, 0]))
        >>> len(data), data[1]["x"].tolist()
        (6, [2.0, 3.0])
        >>> batch = data.__getitems__([4, 1])  # what the DataLoader asks for with a batch sampler
        >>> batch["x"].shape, batch["y"].tolist()
        (torch.Size([2, 2]), [1, 1])
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
        idx = index_tensor(indices)
        return {k: v.index_select(0, idx) for k, v in self.fields.items()}


def check_split_fractions(val_fraction: float, test_fraction: float) -> None:
    """Raise ``ValueError`` unless the validation and test shares are in [0, 1) and leave rows for training."""
    if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0) or val_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must be in [0, 1) and leave data for training"
        )


class SparseRows:
    """A sparse ``[N, D]`` feature matrix kept as its CSR arrays, usable as a field of :class:`TensorDictDataset`.

    A batch of rows is a ``torch.sparse_csr`` tensor ``[B, D]`` built in O(B + the rows' stored values).

    Args:
        indptr: ``[N + 1]`` int64 row offsets.
        indices: ``[nnz]`` 0-based columns (int32 or int64; memory-mapped arrays are read, never copied whole).
        values: ``[nnz]`` float32 (or float64) values.
        num_columns: D.

    Raises:
        ValueError: inconsistent CSR arrays (``indptr`` empty or not 1-D, ``indptr[-1]``, ``indices`` and
            ``values`` of different lengths); :meth:`index_select` along a ``dim`` other than 0.

    Example:
        >>> import numpy as np
        >>> import torch
        >>> from fccolit.data import SparseRows
        >>> rows = SparseRows(np.array([0, 2, 2, 3]), np.array([0, 3, 1]), np.array([1.0, 2.0, 5.0], np.float32), 4)
        >>> len(rows), rows.shape
        (3, (3, 4))
        >>> rows.index_select(0, torch.tensor([2, 0])).to_dense().tolist()
        [[0.0, 5.0, 0.0, 0.0], [1.0, 0.0, 0.0, 2.0]]
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, num_columns: int) -> None:
        if indptr.ndim != 1 or indptr.size < 1 or int(indptr[-1]) != indices.size or indices.size != values.size:
            raise ValueError(
                f"SparseRows: inconsistent CSR arrays (indptr {indptr.shape} ending at "
                f"{int(indptr[-1]) if indptr.size else None}, indices {indices.shape}, values {values.shape})"
            )
        self.indptr, self.indices, self.values = indptr, indices, values
        self.shape = (indptr.size - 1, int(num_columns))

    def __len__(self) -> int:
        return self.shape[0]

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` as a sparse CSR tensor ``[len(index), D]`` (``dim`` must be 0)."""
        if dim != 0:
            raise ValueError(f"SparseRows selects rows only (dim=0), got dim={dim}")
        indptr, positions = take_rows(self.indptr, index.numpy())
        with warnings.catch_warnings():  # torch's once-per-process note that sparse CSR is "in beta"; we only
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)  # build and read it
            return torch.sparse_csr_tensor(
                torch.from_numpy(indptr), torch.from_numpy(self.indices[positions].astype(np.int64)),
                torch.from_numpy(np.asarray(self.values[positions])), size=(index.numel(), self.shape[1]),
                check_invariants=False,
            )


def random_splits(num_rows: int, val_fraction: float, test_fraction: float, seed: int) -> dict[str, torch.Tensor]:
    """Row indices of a seeded random train / validation / test split: ``{"train", "val", "test"}`` → ``[N_s]`` long.

    One permutation of ``num_rows`` (``torch.randperm`` seeded with ``seed``): the first ``round(val_fraction · N)``
    rows are the validation split, the next ``round(test_fraction · N)`` the test split, the rest training.
    """
    check_split_fractions(val_fraction, test_fraction)
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))
    n_val, n_test = round(val_fraction * num_rows), round(test_fraction * num_rows)
    return {"val": order[:n_val], "test": order[n_val : n_val + n_test], "train": order[n_val + n_test :]}


def identity_collate(batch):
    """The batch is already collated by ``__getitems__``."""
    return batch


def binary_fields(x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The batch fields of binary classification for one split.

    Returns ``x`` ``[N, D]``, ``y`` ``[N]`` long in {0, 1}, ``index`` ``[N]`` (row in the split), ``pos_index``
    ``[N]`` (row among the split's positives, −1 for negatives) and ``neg_index`` ``[N]`` (row among the
    negatives, −1 for positives): the per-index state of AP is indexed by ``pos_index``, that of p-norm push by
    ``neg_index``.
    """
    y = y.long()
    positive = y == 1
    pos_index = torch.full_like(y, -1)
    pos_index[positive] = torch.arange(int(positive.sum()))
    neg_index = torch.full_like(y, -1)
    neg_index[~positive] = torch.arange(int((~positive).sum()))
    return {"x": x, "y": y, "index": torch.arange(y.numel()), "pos_index": pos_index, "neg_index": neg_index}


def binary_sizes(fields: dict[str, torch.Tensor]) -> dict[str, int]:
    """``num_samples``, ``num_positives``, ``num_negatives`` and ``num_features`` of a training split
    (tensors or numpy arrays, e.g. memory-mapped ones)."""
    y = fields["y"]
    positives = int((y == 1).sum())
    return {
        "num_samples": len(y),
        "num_positives": positives,
        "num_negatives": len(y) - positives,
        "num_features": int(fields["x"].shape[1]),
    }


def data_fingerprint(dataset: object) -> str:
    """A short hash of a dataset's content: every array (numpy or torch) among its attributes and one level into its
    dict-valued attributes (``fields``, the arrays of a recommendation or ranking split), and its file ``paths``, in a
    fixed order. Two datasets with the same rows in the same order have the same fingerprint; shuffled rows or a
    changed value give another. A resumed run compares it with the checkpoint's (``FCCODataModule``): the per-index
    state pairs its rows with the data by position."""
    import hashlib

    digest = hashlib.blake2b(digest_size=12)

    def add(name: str, value: object) -> None:
        if torch.is_tensor(value):
            value = value.detach().cpu().contiguous().numpy() if value.layout == torch.strided else None
        if isinstance(value, np.ndarray):
            digest.update(f"{name}:{value.dtype}:{value.shape};".encode())
            if value.dtype.hasobject:
                digest.update(repr(value.tolist()).encode())
            elif value.size:
                digest.update(memoryview(np.ascontiguousarray(value)).cast("B"))
        elif name.endswith("paths") and isinstance(value, (list, tuple)):
            digest.update(f"{name}:{len(value)};".encode() + "\n".join(map(str, value)).encode())

    for name, value in sorted(vars(dataset).items()):
        if isinstance(value, dict):
            for key, item in sorted(value.items(), key=lambda kv: str(kv[0])):
                add(f"{name}.{key}", item)
        else:
            add(name, value)
    return digest.hexdigest()
