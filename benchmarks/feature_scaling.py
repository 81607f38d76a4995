"""What feature scaling costs the Hugging Face DataModules: a 100,000 × 123 table (a9a's width), as one list column
and as 123 scalar columns.

    python benchmarks/feature_scaling.py [--rows N] [--repeats R]

For each layout, in one process, with ``datasets``' Arrow cache already written (the first build is not timed):

* building ``HFClassificationDataModule`` with ``feature_scaling="none"`` and ``"standard"`` (the difference is the
  pass over the training split's 80,000 rows that computes the statistics: :meth:`ArrowRowsDataset.feature_chunks
  <fccolit.datasets.hf.ArrowRowsDataset.feature_chunks>` + :meth:`FeatureScaler.fit
  <fccolit.datasets.scaling.FeatureScaler.fit>`), alternated, median of ``--repeats`` builds each;
* reading a training batch of 128 random rows (``ArrowRowsDataset.__getitems__``) unscaled and scaled, interleaved
  call by call (:func:`timing.interleaved_medians`).

Writes ``benchmarks/results/feature_scaling.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from timing import interleaved_medians, machine, write_result  # noqa: E402

from fccolit.algorithms import SOX  # noqa: E402,F401  (imports the package in the order the CLI does)
from fccolit.datamodules import HFClassificationDataModule  # noqa: E402


def write_tables(folder: Path, rows: int, width: int) -> dict[str, tuple[Path, list[str] | str]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, width)) * rng.uniform(0.1, 1000.0, width) + rng.normal(0, 100.0, width)
    y = (rng.random(rows) < 0.1).astype(np.int64)
    listed = folder / "list.parquet"
    pd.DataFrame({"features": list(x), "label": y}).to_parquet(listed, index=False)
    names = [f"f{j}" for j in range(width)]
    scalars = folder / "columns.parquet"
    pd.DataFrame({**{n: x[:, j] for j, n in enumerate(names)}, "label": y}).to_parquet(scalars, index=False)
    return {"one list column": (listed, "features"), f"{width} scalar columns": (scalars, names)}


def build(path: Path, features, scaling: str, cache: Path) -> tuple[float, HFClassificationDataModule]:
    start = time.perf_counter()
    dm = HFClassificationDataModule(path, label="label", features=features, feature_scaling=scaling,
                                    batch_size=128, num_positives=32, cache_dir=cache)
    return time.perf_counter() - start, dm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=123)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    lines = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for layout, (path, features) in write_tables(folder, args.rows, args.width).items():
            cache = folder / "hf"
            build(path, features, "none", cache)  # datasets converts the file once (not timed)
            times = {"none": [], "standard": []}
            modules = {}
            for r in range(args.repeats):
                for scaling in (("none", "standard") if r % 2 == 0 else ("standard", "none")):
                    seconds, modules[scaling] = build(path, features, scaling, cache)
                    times[scaling].append(seconds)
            built = {k: statistics.median(v) for k, v in times.items()}
            for dm in modules.values():
                dm.setup("fit")
            train_rows = len(modules["none"].train_dataset)
            rng = np.random.default_rng(1)
            batches = [rng.integers(0, train_rows, 128).tolist() for _ in range(args.batches)]
            read = interleaved_medians({k: dm.train_dataset.__getitems__ for k, dm in modules.items()}, batches,
                                       repeats=3)
            lines.append(f"| {layout} | {train_rows:,} | {built['none']:.2f} | {built['standard']:.2f} | "
                         f"{built['standard'] - built['none']:+.2f} | {read['none']:.2f} | {read['standard']:.2f} | "
                         f"{read['standard'] / read['none']:.2f} |")
            print(lines[-1], flush=True)
    text = f"""## Feature scaling of the Hugging Face DataModules: its cost on a {args.rows:,} × {args.width} table

Command: `python benchmarks/feature_scaling.py`. Machine: {machine()}. `HFClassificationDataModule` on a Parquet
file of {args.rows:,} rows × {args.width} float64 features (10% positives), 80% of the rows training (the rest held
out), `datasets`' Arrow cache already written. Build: median of {args.repeats} constructions per setting, alternated;
the difference is the pass over the training rows that computes the statistics (float64, read in contiguous slices
of the Arrow table). Batch: reading 128 random training rows (`ArrowRowsDataset.__getitems__`), the two settings
interleaved call by call, medians over {args.batches} batches × 3 rounds; scaled rows are read as float64 and scaled
in float64 before the float32 cast.

| layout | training rows | build, none (s) | build, standard (s) | statistics (s) | batch, none (ms) | batch, standard (ms) | ratio |
|---|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(lines) + """

The statistics cost one pass over the training split when the DataModule is built; reading a batch costs the same
with or without scaling (the subtraction and division of a 128 × 123 block are microseconds next to the Arrow read).
A table of many scalar columns is read far more slowly per batch than one list column (`datasets` formats every
column of a selection on its own): write the features as one list column when the table is wide.
"""
    print(write_result("feature_scaling", text))


if __name__ == "__main__":
    main()
