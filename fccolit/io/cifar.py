"""Reader of the CIFAR-10 / CIFAR-100 python release (https://www.cs.toronto.edu/~kriz/cifar.html).

Each file is a pickled dict written by Python 2 (keys are ``str`` with ``encoding="latin1"``, ``bytes`` with
``encoding="bytes"``; both are accepted, as are files re-saved from Python 3 with either key type): ``data`` is a
``[n, 3072]`` uint8 array, each row 1024 red, then 1024 green, then 1024 blue values of a 32×32 image in row-major
order; ``labels`` (CIFAR-10) or ``fine_labels`` / ``coarse_labels`` (CIFAR-100) are lists of ints; the meta file has
``label_names`` / ``fine_label_names``.

Why not ``torchvision.datasets.CIFAR10`` / ``CIFAR100``: they unpickle the same files at the same speed (this reader
takes 1.00–1.01× its time on the five training files of 50,000 images, ``benchmarks/handwritten.py``), but they accept only the release's
exact bytes (an MD5 check refuses the files the tests write and any re-saved copy), say only ``Dataset not found or
corrupted`` where this reader names the file and the field, and give a per-image PIL dataset, where the DataModule
needs the arrays for its cache, its long-tailed subsampling and the batched augmentation of
:class:`~fccolit.datasets.images.ImageArrayDataset`.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CIFAR_SPECS", "load_cifar_pickle", "read_cifar_batch", "read_cifar_names"]

#: dataset → its release: folder, archive, data files, meta file and the keys of labels and class names
CIFAR_SPECS: dict[str, dict[str, Any]] = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "archive": "cifar-10-python.tar.gz",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "meta": "batches.meta",
        "label_key": "labels",
        "names_key": "label_names",
        "num_classes": 10,
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "archive": "cifar-100-python.tar.gz",
        "train": ["train"],
        "test": ["test"],
        "meta": "meta",
        "label_key": "fine_labels",
        "names_key": "fine_label_names",
        "num_classes": 100,
    },
}


def load_cifar_pickle(path: Path) -> dict[str, Any]:
    """A CIFAR pickle as a dict with ``str`` keys (Python 2 files and re-saved Python 3 files alike)."""
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f, encoding="latin1")
    except Exception as err:  # noqa: BLE001 - truncated, not a pickle, ...: name the file
        raise ValueError(f"{path}: not a readable CIFAR python pickle ({type(err).__name__}: {err})") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: a CIFAR pickle holds a dict, this one holds {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _field(obj: dict[str, Any], key: str, path: Path) -> Any:
    if key not in obj:
        raise ValueError(f"{path}: missing key '{key}' (keys found: {sorted(obj)})")
    return obj[key]


def read_cifar_batch(path: str | os.PathLike, label_key: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR data file.

    Returns:
        ``images`` ``[n, 32, 32, 3]`` uint8 (HWC, as torchvision decodes them) and ``labels`` ``[n]`` int64.
    """
    path = Path(path)
    obj = load_cifar_pickle(path)
    data = np.asarray(_field(obj, "data", path))
    labels = _field(obj, label_key, path)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: field 'data' must be a [n, 3072] uint8 array, got {data.dtype} {data.shape}")
    try:
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: field '{label_key}' must be a list of integers ({err})") from err
    if labels.shape[0] != data.shape[0]:
        raise ValueError(f"{path}: field '{label_key}' has {labels.shape[0]} labels for {data.shape[0]} images")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def read_cifar_names(path: str | os.PathLike, key: str) -> list[str]:
    """The class names (``label_names`` / ``fine_label_names``: ``key``) of a CIFAR meta file."""
    path = Path(path)
    names = _field(load_cifar_pickle(path), key, path)
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]
