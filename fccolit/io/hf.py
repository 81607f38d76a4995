"""Reading Hugging Face ``datasets`` sources for :mod:`fccolit.datamodules.hf`: files (Parquet, Arrow, CSV, JSON),
``save_to_disk`` folders, in-memory ``Dataset`` / ``DatasetDict`` objects or Hub names, their named splits, and
whole columns as numpy. Caching and memory mapping are ``datasets``' own (no second cache)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["load_hf_dataset", "read_tables", "named_splits", "require_columns", "column", "feature_width", "describe", "as_list"]

#: split names looked for when ``val_split`` / ``test_split`` is None
SPLIT_NAMES = {"val": ("validation", "valid", "val", "dev"), "test": ("test",)}
#: file suffix → ``datasets`` builder
FILE_BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def load_hf_dataset(source: Any, config_name: str | None = None, cache_dir: str | os.PathLike | None = None):
    """A ``datasets.DatasetDict`` from ``source``:

    * a ``datasets.Dataset`` (becomes the ``train`` split) or ``DatasetDict``: used as it is;
    * a folder written by ``save_to_disk``: ``datasets.load_from_disk`` (memory-mapped, nothing converted);
    * a data file (``.parquet``, ``.arrow``, ``.csv``, ``.json``, ``.jsonl``; the ``train`` split) or a folder of
      them (splits from the file names, e.g. ``train.parquet`` + ``test.parquet``): ``datasets.load_dataset``,
      converted to Arrow once in ``cache_dir``;
    * anything else: a Hub name, ``datasets.load_dataset(source, config_name)`` (needs the network, or the Hub
      cache with ``HF_DATASETS_OFFLINE=1``).

    Raises:
        FileNotFoundError: ``source`` looks like a path (it has a data-file suffix or starts with ``.`` or ``/``) but
            nothing is there.
        ValueError: a file with another suffix; a Hub name that cannot be loaded (the message keeps the cause).
    """
    import datasets

    if isinstance(source, datasets.DatasetDict):
        return source
    if isinstance(source, datasets.Dataset):
        return datasets.DatasetDict({"train": source})
    cache = None if cache_dir is None else str(cache_dir)
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"{path}: unknown data file type {path.suffix!r}; use one of {sorted(FILE_BUILDERS)}")
        return datasets.load_dataset(builder, data_files=str(path), cache_dir=cache)
    if path.is_dir():
        return datasets.load_dataset(str(path), cache_dir=cache)
    text = os.fspath(source)
    if path.suffix.lower() in FILE_BUILDERS or text.startswith((".", "/", "~")):
        raise FileNotFoundError(f"no data file or folder at {path}")
    try:
        return datasets.load_dataset(text, config_name, cache_dir=cache)
    except Exception as error:  # offline, unknown name, private repository ...: say which source failed
        raise ValueError(
            f"{text!r} is neither a local file or folder nor a loadable Hub data set ({type(error).__name__}: {error})"
        ) from error


def describe(source: Any) -> str:
    """A short name of ``source`` for error messages: the path or Hub name, or ``"the given Dataset"``."""
    return repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else f"the given {type(source).__name__}"


def require_columns(table: Any, columns: Sequence[str], where: str) -> None:
    """Raise ``ValueError`` naming the first of ``columns`` that ``table`` lacks, the columns it has, and any column
    with missing (null) values."""
    for name in columns:
        if name not in table.column_names:
            raise ValueError(f"{where}: no column {name!r}; the columns are {table.column_names}")
        nulls = table.data.column(name).null_count
        if nulls:
            raise ValueError(
                f"{where}: column {name!r} has {nulls} missing values; fill or drop those rows first "
                "(datasets.Dataset.map / filter)"
            )


def column(table: Any, name: str) -> np.ndarray:
    """The whole column ``name`` of ``table`` as numpy (``[N]``, or ``[N, K]`` for a fixed-length list column)."""
    return np.asarray(table.with_format("numpy", columns=[name])[:][name])  # [:]: one batch read, not row by row


def named_splits(tables: Any, source: Any, train_split: str, val_split: str | None, test_split: str | None) -> dict:
    """``{"train": table, "val": table or None, "test": table or None}`` from the split names of ``tables``: the
    names given, and for an evaluation split given as None the first of :data:`SPLIT_NAMES` present and not used
    by another role (None: held out later)."""
    where = describe(source)
    if train_split not in tables:
        raise ValueError(f"{where}: no split {train_split!r} (train_split); the splits are {list(tables)}")
    given = {"val": val_split, "test": test_split}
    for role, name in given.items():
        if name is not None and name not in tables:
            raise ValueError(f"{where}: no split {name!r} ({role}_split); the splits are {list(tables)}")
    used = {train_split, *(n for n in given.values() if n is not None)}
    names = {role: name if name is not None else next((n for n in SPLIT_NAMES[role] if n not in used and n in tables), None)
             for role, name in given.items()}
    return {"train": tables[train_split], **{role: None if n is None else tables[n] for role, n in names.items()}}


def read_tables(
    dataset: Any, config_name: str | None, cache_dir: Any, train_split: str, val_split: str | None,
    test_split: str | None, columns: Sequence[str],
) -> tuple[dict, str]:
    """The named splits of ``dataset`` (:func:`named_splits`; an absent evaluation split is None), each checked
    to hold ``columns`` without missing values, and the source's name for error messages."""
    where = describe(dataset)
    tables = named_splits(load_hf_dataset(dataset, config_name, cache_dir), dataset, train_split, val_split, test_split)
    for split, table in tables.items():
        if table is not None:
            require_columns(table, columns, f"{where} ({split} split)")
    return tables, where


def feature_width(table: Any, features: Sequence[str]) -> int:
    """D: one per scalar column, the list length for a list column (every row the same length)."""
    width = 0
    for name in features:
        values = column(table.select(range(min(len(table), 1))), name)
        width += 1 if values.ndim == 1 else int(values.shape[1])
    return width


def as_list(columns: str | Sequence[str] | None) -> list[str]:
    return [] if columns is None else [columns] if isinstance(columns, str) else list(columns)
