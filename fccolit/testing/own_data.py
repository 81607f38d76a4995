"""Real tables as a user has them, from the data sets scikit-learn ships (nothing is downloaded), and a config run
on them in this process: what ``benchmarks/own_data_defaults.py`` measures the defaults with and
``tests/data/test_own_data.py`` checks them with.

Three tables (the rows of issue 26's table), each written as Parquet with its raw values:

* ``digits_raw``: scikit-learn's ``load_digits``, digit "8" against the rest (174 of 1,797 rows positive, 9.7%), 64
  pixel values 0–16;
* ``digits_scaled``: the same with the pixels divided by 16 (values in [0, 1]);
* ``breast_cancer_raw``: ``load_breast_cancer``, 569 rows, its 30 measurements as they are (areas up to 4,254,
  smoothness around 0.1), the label the diagnosis as text, ``"malignant"`` (212 rows, 37%, the positive class: the
  larger of the two values) or ``"benign"``.

``layout="list"`` writes the features as one list column ``features`` (the layout of ``configs/hf/*.yaml``);
``layout="columns"`` one scalar column per feature, named as scikit-learn names them. A multi-label table of the
digits (:func:`write_digits_multilabel`) holds three one-against-the-rest tasks, "8", "9" and "3", for
``configs/hf/adap_multilabel.yaml``. scikit-learn is a development dependency (``pip install 'fccolit[dev]'``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

__all__ = ["TABLES", "MULTILABEL_DIGITS", "write_table", "write_digits_multilabel", "run_config", "in_folder"]

#: the three tables of issue 26 (name → what it holds)
TABLES = {
    "digits_raw": "digits, 8 vs rest, raw pixels 0-16",
    "digits_scaled": "digits, 8 vs rest, pixels / 16",
    "breast_cancer_raw": "breast cancer, malignant vs benign, raw measurements",
}
#: the digits of the multi-label table's tasks (task0, task1, task2)
MULTILABEL_DIGITS = (8, 9, 3)


def _frame(name: str) -> tuple[pd.DataFrame, Any]:
    """The feature columns of table ``name`` (scikit-learn's names and raw values) and its label column."""
    from sklearn.datasets import load_breast_cancer, load_digits

    if name in ("digits_raw", "digits_scaled"):
        bunch = load_digits(as_frame=True)
        x = bunch.data.astype(np.float64) / (16.0 if name == "digits_scaled" else 1.0)
        return x, (bunch.target.to_numpy() == 8).astype(np.int64)
    if name == "breast_cancer_raw":
        bunch = load_breast_cancer(as_frame=True)
        return bunch.data.astype(np.float64), bunch.target_names[bunch.target.to_numpy()]
    raise ValueError(f"no table {name!r}; the tables are {list(TABLES)}")


def write_table(name: str, path: str | os.PathLike, layout: str = "list") -> tuple[Path, list[str] | str]:
    """Write table ``name`` (one of :data:`TABLES`) to the Parquet file ``path``; returns the path and the
    ``features`` argument that reads it (``"features"``, or the list of column names)."""
    x, label = _frame(name)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "list":
        frame, features = pd.DataFrame({"features": list(x.to_numpy()), "label": label}), "features"
    elif layout == "columns":
        frame, features = x.assign(label=label), list(x.columns)
    else:
        raise ValueError(f"layout must be 'list' or 'columns', got {layout!r}")
    frame.to_parquet(path, index=False)
    return path, features


def write_digits_multilabel(path: str | os.PathLike, scaled: bool = False,
                            digits: Sequence[int] = MULTILABEL_DIGITS) -> Path:
    """The digits as a multi-label table: a list column ``features`` (the 64 raw pixels, or / 16 with ``scaled``)
    and ``task0`` … ``task2``, 1 where the digit is ``digits[t]``, else 0 (the label columns of
    ``configs/hf/adap_multilabel.yaml``; its ``features`` are overridden with ``features``)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.data.astype(np.float64) / (16.0 if scaled else 1.0)
    columns: dict[str, Any] = {"features": list(x)}
    columns.update({f"task{t}": (bunch.target == d).astype(np.int64) for t, d in enumerate(digits)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_parquet(path, index=False)
    return path


@contextlib.contextmanager
def in_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Run the body with ``folder`` as the working folder (a run writes ``lightning_logs/`` there)."""
    before = Path.cwd()
    Path(folder).mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    try:
        yield Path(folder)
    finally:
        os.chdir(before)


def run_config(config: str | os.PathLike, args: Sequence[str], folder: str | os.PathLike,
               splits: Sequence[str] = ("val", "test")) -> dict[str, float]:
    """``fccolit fit --config CONFIG ARGS`` in this process (no subcommand in ``args``), in the working folder ``folder``, then the final
    weights evaluated on ``splits``: ``{"val/ap": ..., "test/ap": ..., ...}`` (every metric the config logs).
    Progress bars and the metrics summary are left out of the output."""
    import torch

    from fccolit.cli import main

    with in_folder(folder):
        cli = main(["--config", str(config), *args, "--trainer.enable_progress_bar", "false"], run=False)
        cli.trainer.callbacks = [c for c in cli.trainer.callbacks if type(c).__name__ != "MetricsSummary"]
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        results: dict[str, float] = {}
        for split in splits:
            run = cli.trainer.validate if split == "val" else cli.trainer.test
            with torch.no_grad():
                for metrics in run(cli.model, datamodule=cli.datamodule, verbose=False):
                    results.update({k: float(v) for k, v in metrics.items()})
    return results
