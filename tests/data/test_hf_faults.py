"""Faults of Hugging Face data on the user's path (issue 25, items 6, 9, 11, 13): DataModules built from real files
in the real formats (Parquet, CSV, a folder of split files) under ``tmp_path``, as ``fccolit fit --data.dataset
PATH`` builds them.

* an edit that keeps a file's size and modification time is read, not served from ``datasets``' cache;
* non-finite or missing features, ragged list columns and relevance grades outside 0..24 are refused when the
  DataModule is built, naming the file, the row and the column;
* empty, header-only and damaged files are refused naming the file.

Nothing is downloaded (HF_DATASETS_OFFLINE)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

os.environ["HF_DATASETS_OFFLINE"] = "1"

import datasets  # noqa: E402

from fccolit.datamodules import HFClassificationDataModule, HFRankingDataModule, HFRecommendationDataModule  # noqa: E402
from fccolit.datasets.ranking import MAX_RELEVANCE  # noqa: E402
from fccolit.io.hf import CONTENT_FOLDER  # noqa: E402
from fccolit.testing import write_movielens_csv  # noqa: E402
from fccolit.testing.hf import write_binary_parquet, write_ltr_parquet  # noqa: E402


def _keep_size_and_mtime(path: Path, write) -> None:
    """Rewrite ``path`` with ``write(path)``, then give it back its modification time; the size must not change
    (what ``touch -r``, ``cp -p`` or a restore from a backup leave behind)."""
    before = path.stat()
    write(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def _binary(path, cache, **kw) -> HFClassificationDataModule:
    kw.setdefault("features", "features")
    return HFClassificationDataModule(path, label="label", batch_size=8, num_positives=2, cache_dir=cache, **kw)


def _ltr(path, cache, **kw) -> HFRankingDataModule:
    return HFRankingDataModule(path, query="query", features="features", relevance="relevance", cache_dir=cache, **kw)


def _features_table(frame: pd.DataFrame, width: int) -> pa.Table:
    """``frame`` with its ``features`` as a list<float32> column written by pyarrow itself, so NaN stays NaN
    (pandas' conversion turns a NaN inside an object column into a null)."""
    values = pa.array([np.asarray(v, dtype=np.float32) for v in frame["features"]], type=pa.list_(pa.float32()))
    table = pa.Table.from_pandas(frame.drop(columns=["features"]), preserve_index=False)
    return table.append_column("features", values)


# ------------------------------------------------------------------------------------ item 6: stale rows
def test_a_parquet_edit_keeping_size_and_mtime_is_read_not_served_from_the_cache(tmp_path):
    path = write_binary_parquet(tmp_path / "a9a.parquet", num_rows=300, seed=1)
    cache = tmp_path / "hf"
    before = _binary(path, cache)
    assert (before.sizes["num_positives"], before.label_values) == (24, (-1, 1))

    def swap_labels(p):  # the classes swapped: same Parquet layout, same byte count
        frame = pd.read_parquet(p)
        frame["label"] = -frame["label"]
        frame.to_parquet(p, index=False)

    _keep_size_and_mtime(path, swap_labels)
    after = _binary(path, cache)
    assert after.sizes["num_positives"] == after.sizes["num_samples"] - 24  # the new rows (datasets alone: the old)
    arrow = [Path(f["filename"]) for f in after.tables["train"].cache_files]
    assert arrow and all(cache / CONTENT_FOLDER in p.parents for p in arrow)
    again = _binary(path, cache)  # unchanged content: the converted table is reused, not rebuilt
    assert [Path(f["filename"]) for f in again.tables["train"].cache_files] == arrow


def test_a_csv_changed_to_one_class_is_refused_not_trained_on_its_old_rows(tmp_path):
    path = tmp_path / "mail.csv"
    rows = ["a,b,label"] + [f"{i % 7}.5,{i % 3}.0,{int(i % 4 == 0)}" for i in range(80)]
    path.write_text("\n".join(rows) + "\n")
    cache = tmp_path / "hf"
    assert _binary(path, cache, features=["a", "b"]).sizes["num_positives"] == 16
    _keep_size_and_mtime(path, lambda p: p.write_text(p.read_text().replace(",1\n", ",0\n")))
    with pytest.raises(ValueError, match=r"column 'label': a binary label column needs exactly two values in the "
                                         r"training split, found 1: 0"):
        _binary(path, cache, features=["a", "b"]).sizes  # the data is read on first use


def test_a_folder_is_keyed_by_every_split_file(tmp_path):
    folder = tmp_path / "data"
    write_binary_parquet(folder / "train.parquet", num_rows=200, seed=1)
    write_binary_parquet(folder / "test.parquet", num_rows=100, seed=2)
    cache = tmp_path / "hf"
    assert int(_binary(folder, cache).labels["test"].sum()) == 10

    def swap_labels(p):
        frame = pd.read_parquet(p)
        frame["label"] = -frame["label"]
        frame.to_parquet(p, index=False)

    _keep_size_and_mtime(folder / "test.parquet", swap_labels)
    assert int(_binary(folder, cache).labels["test"].sum()) == 90


# ------------------------------------------------------------------------------- item 9: non-finite values
def test_an_infinite_feature_in_a_validation_file_names_the_file_row_and_column(tmp_path):
    folder = tmp_path / "data"
    write_binary_parquet(folder / "train.parquet", num_rows=200, seed=1)
    frame = pd.read_parquet(write_binary_parquet(folder / "validation.parquet", num_rows=60, seed=2))
    values = [np.array(v, dtype=np.float32) for v in frame["features"]]
    values[17][3] = np.inf
    frame["features"] = values
    pq.write_table(_features_table(frame, 10), folder / "validation.parquet")
    with pytest.raises(ValueError, match=r"validation\.parquet' row 17, column 'features': value 3 of its list is inf, "
                                         r"not a finite number \(NaN, infinite or missing values in 1 row of 60\); model "
                                         r"inputs must be finite"):
        _binary(folder, tmp_path / "hf").sizes  # the data is read on first use


def test_a_nan_or_inf_in_a_csv_feature_column_is_named(tmp_path):
    path = tmp_path / "table.csv"
    lines = ["x0,x1,label"] + [f"{i / 10},{i % 5},{int(i % 3 == 0)}" for i in range(40)]
    lines[1 + 23] = "inf,4,0"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"table\.csv' row 23, column 'x0': inf, not a finite number"):
        _binary(path, tmp_path / "hf", features=["x0", "x1"]).sizes  # the data is read on first use


def test_a_nan_in_ranking_features_names_the_file_row_and_column(tmp_path):
    path = write_ltr_parquet(tmp_path / "ltr.parquet", seed=2)
    frame = pd.read_parquet(path)
    frame.at[7, "features"] = np.where(np.arange(12) == 5, np.nan, frame.at[7, "features"]).astype(np.float32)
    pq.write_table(_features_table(frame, 12), path)
    with pytest.raises(ValueError, match=r"ltr\.parquet' row 7, column 'features': value 5 of its list is nan"):
        _ltr(path, tmp_path / "hf").sizes  # the data is read on first use


def test_rows_are_those_of_the_given_dataset_after_a_select(tmp_path):
    x = np.arange(10, dtype=np.float64)
    x[2] = np.nan
    table = datasets.Dataset.from_dict({"x": x.tolist(), "y": [i % 2 for i in range(10)]}).select([5, 9, 2, 0])
    with pytest.raises(ValueError, match=r"the given Dataset \(train split\) row 2, column 'x': nan, not a finite"):
        HFClassificationDataModule(table, label="y", features="x").sizes  # the data is read on first use


def test_a_missing_rating_is_named_with_its_row(tmp_path):
    path = write_movielens_csv(tmp_path / "ml")
    lines = path.read_text().splitlines()
    user, item, _, time = lines[12].split(",")
    lines[12] = f"{user},{item},,{time}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"column 'rating' has 1 missing values, the first in row 11; fill or drop"):
        HFRecommendationDataModule(path, user="userId", item="movieId", rating="rating", time="timestamp",
                                   cache_dir=tmp_path / "hf", num_negatives=5).sizes  # the data is read on first use


# --------------------------------------------------------------------------------- item 11: relevance grades
@pytest.mark.parametrize("grade, shown", [(400, "400.0"), (2.5, "2.5"), (-1, "-1.0"), (np.inf, "inf")])
def test_a_relevance_outside_the_grades_names_the_file_row_and_column(tmp_path, grade, shown):
    path = write_ltr_parquet(tmp_path / "ltr.parquet", seed=3)
    frame = pd.read_parquet(path)
    frame.loc[9, "relevance"] = grade
    frame.to_parquet(path, index=False)
    with pytest.raises(ValueError, match=rf"ltr\.parquet' row 9, column 'relevance': relevance {shown} is not a grade; "
                                         rf"relevance labels must be finite and >= 0 integers up to {MAX_RELEVANCE}"):
        _ltr(path, tmp_path / "hf").sizes  # the data is read on first use


def test_the_largest_grade_is_accepted_and_its_gain_is_exact_in_float32(tmp_path):
    import torch

    path = write_ltr_parquet(tmp_path / "ltr.parquet", seed=3)
    frame = pd.read_parquet(path)
    frame.loc[9, "relevance"] = MAX_RELEVANCE
    frame.to_parquet(path, index=False)
    dm = _ltr(path, tmp_path / "hf")
    assert max(float(lists["relevance"].max()) for lists in dm.lists.values()) == MAX_RELEVANCE
    top = torch.tensor([MAX_RELEVANCE, MAX_RELEVANCE + 1], dtype=torch.float32)
    assert int(torch.exp2(top[0]) - 1) == 2**MAX_RELEVANCE - 1  # exact
    assert int(torch.exp2(top[1]) - 1) != 2 ** (MAX_RELEVANCE + 1) - 1  # the next one is not


# -------------------------------------------------------------------------------- item 13: unreadable files
def test_an_empty_parquet_file_is_named(tmp_path):
    path = tmp_path / "empty.parquet"
    pd.DataFrame({"features": pd.Series([], dtype=object), "label": pd.Series([], dtype=int)}).to_parquet(path)
    with pytest.raises(ValueError, match=r"empty\.parquet: the Parquet file holds no rows \(only its columns "
                                         r"\['features', 'label'\]\)"):
        _binary(path, tmp_path / "hf").sizes  # the data is read on first use


def test_a_header_only_csv_is_named(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("a,b,label\n")
    with pytest.raises(ValueError, match=r"header\.csv: the CSV file has a header line and no rows"):
        _binary(path, tmp_path / "hf", features=["a", "b"]).sizes  # the data is read on first use
    path.write_text("")
    with pytest.raises(ValueError, match=r"header\.csv: the file is empty"):
        _binary(path, tmp_path / "hf", features=["a", "b"]).sizes  # the data is read on first use


def test_a_junk_parquet_file_in_a_folder_is_named(tmp_path):
    folder = tmp_path / "data"
    write_binary_parquet(folder / "train.parquet", num_rows=100)
    (folder / "test.parquet").write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match=r"data/test\.parquet: not a Parquet file, or a damaged one \(ArrowInvalid: "):
        _binary(folder, tmp_path / "hf").sizes  # the data is read on first use


def test_a_damaged_arrow_or_json_file_is_named(tmp_path):
    (tmp_path / "table.arrow").write_bytes(np.random.default_rng(1).bytes(3000))
    with pytest.raises(ValueError, match=r"table\.arrow: datasets could not read it as ARROW data \(ArrowInvalid: "):
        _binary(tmp_path / "table.arrow", tmp_path / "hf").sizes  # the data is read on first use
    (tmp_path / "rows.jsonl").write_text('{"features": [1.0], "label": 1}\n{"features": \n')
    with pytest.raises(ValueError, match=r"rows\.jsonl: datasets could not read it as JSON data \("):
        _binary(tmp_path / "rows.jsonl", tmp_path / "hf").sizes  # the data is read on first use


def test_a_ragged_list_column_names_the_file_row_and_column(tmp_path):
    path = tmp_path / "ragged.parquet"
    features = [np.ones(4, np.float32)] * 30
    features[13] = np.ones(3, np.float32)
    pd.DataFrame({"features": features, "label": [i % 2 for i in range(30)]}).to_parquet(path)
    with pytest.raises(ValueError, match=r"ragged\.parquet' row 13, column 'features': a list of 3 where the first "
                                         r"row of the training split holds 4; every row's list needs the same length"):
        _binary(path, tmp_path / "hf").sizes  # the data is read on first use
    ltr = write_ltr_parquet(tmp_path / "ltr.parquet", seed=4)
    frame = pd.read_parquet(ltr)
    frame.at[20, "features"] = np.zeros(5, np.float32)
    frame.to_parquet(ltr, index=False)
    with pytest.raises(ValueError, match=r"ltr\.parquet' row 20, column 'features': a list of 5 where the first row"):
        _ltr(ltr, tmp_path / "hf").sizes  # the data is read on first use
