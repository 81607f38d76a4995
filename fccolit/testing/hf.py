"""Small Parquet tables in the column layouts of :mod:`fccolit.datamodules.hf` (one per shape), for its tests, the
configs in ``configs/hf/`` and their smoke test. Each problem is learnable: the labels (relevance) follow the
features."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fccolit.datamodules.grouped import make_grouped_binary
from fccolit.datamodules.synthetic import imbalanced_labels, make_imbalanced_binary

__all__ = ["write_binary_parquet", "write_grouped_parquet", "write_ltr_parquet", "write_multilabel_parquet"]


def _write(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def write_binary_parquet(path: str | os.PathLike, num_rows: int = 1000, num_features: int = 10,
                         pos_fraction: float = 0.1, seed: int = 0) -> Path:
    """Columns ``features`` (a list of ``num_features`` float32 per row) and ``label`` (±1, ``pos_fraction`` of
    +1): the layout of a LIBSVM file such as a9a saved as Parquet (the command in ``configs/hf/sox_binary.yaml``)."""
    x, y = make_imbalanced_binary(num_rows, num_features, pos_fraction, 0.5, seed)
    return _write(pd.DataFrame({"features": list(x.numpy()), "label": (2 * y - 1).numpy()}), path)


def write_multilabel_parquet(path: str | os.PathLike, num_rows: int = 1000, num_features: int = 8, num_tasks: int = 3,
                             pos_fraction: float = 0.15, unlabeled_fraction: float = 0.05, seed: int = 0) -> Path:
    """Scalar columns ``f0`` … ``f<D−1>`` (float32) and one column per task ``task0`` … ``task<T−1>`` with 1, 0
    or −1 (unlabeled, ``unlabeled_fraction`` of the entries)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_rows, num_features, generator=g)
    labels = torch.stack([imbalanced_labels(x, pos_fraction, 0.5, g) for _ in range(num_tasks)], dim=1)
    labels[torch.rand(labels.shape, generator=g) < unlabeled_fraction] = -1
    columns = {f"f{j}": x[:, j].numpy() for j in range(num_features)}
    columns.update({f"task{t}": labels[:, t].numpy() for t in range(num_tasks)})
    return _write(pd.DataFrame(columns), path)


def write_grouped_parquet(path: str | os.PathLike, group_sizes: tuple[int, ...] = (500, 200), num_features: int = 6,
                          seed: int = 0) -> Path:
    """Columns ``x0`` … ``x<D−1>`` (float32), ``label`` (0 / 1) and ``group`` (``"group0"``, ``"group1"``, ...:
    strings), the groups of :func:`~fccolit.datamodules.grouped.make_grouped_binary` (own feature shift and
    decision rule each)."""
    x, y, group = make_grouped_binary(list(group_sizes), num_features, 1.0, 0.5, seed)
    columns = {f"x{j}": x[:, j].numpy() for j in range(num_features)}
    columns.update(label=y.numpy(), group=[f"group{g}" for g in group.tolist()])
    return _write(pd.DataFrame(columns), path)


def write_ltr_parquet(path: str | os.PathLike, num_queries: int = 60, docs_per_query: tuple[int, int] = (10, 30),
                      num_features: int = 12, seed: int = 0) -> Path:
    """One row per (query, document): ``query`` (``"q<k>"`` strings; the rows of a query are **not** adjacent:
    the table is shuffled), ``features`` (a list of float32) and ``relevance`` (0–4, from a noisy linear score of the
    features: the higher the score within its list, the higher the grade)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(docs_per_query[0], docs_per_query[1] + 1, num_queries)
    query = np.repeat(np.arange(num_queries), sizes)
    x = rng.normal(size=(query.size, num_features)).astype(np.float32)
    score = x @ rng.normal(size=num_features) + 0.5 * rng.normal(size=query.size)
    relevance = np.digitize(score, np.quantile(score, [0.5, 0.75, 0.9, 0.97])).astype(np.float32)
    order = rng.permutation(query.size)
    frame = pd.DataFrame({"query": [f"q{q}" for q in query[order]], "features": list(x[order]),
                          "relevance": relevance[order]})
    return _write(frame, path)
