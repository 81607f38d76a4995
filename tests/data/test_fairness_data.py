"""FairnessDataModule: generated files in the exact UCI Adult / ProPublica COMPAS formats, the real Adult files,
errors naming file / line / field, and the cache. pandas is the independent reader used as the oracle."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from builders import SHARED_DATA

from fccolit.datamodules import fairness
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.io.fairness import ADULT_COLUMNS
from fccolit.testing import write_adult_files, write_compas_file

REAL_ADULT = SHARED_DATA / "uci-adult"


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def read_adult_with_pandas(path: Path, test: bool) -> pd.DataFrame:
    frame = pd.read_csv(path, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True, skiprows=1 if test else 0,
                        dtype=str, skip_blank_lines=True)
    frame["income"] = frame["income"].str.rstrip(".")
    return frame


def all_rows(data: FairnessDataModule, splits=("train", "val")) -> dict[str, np.ndarray]:
    """The rows of some splits in file order (by source line)."""
    arrays = data._arrays
    lines = np.concatenate([arrays[f"line_{s}"] for s in splits])
    order = np.argsort(lines)
    return {k: np.concatenate([arrays[f"{k}_{s}"] for s in splits])[order] for k in ("x", "y", "group", "line")}


@pytest.fixture
def adult_root(tmp_path):
    return write_adult_files(tmp_path / "adult", num_train=300, num_test=120, seed=0)


def test_generated_adult_files_parse_to_the_pandas_reading(adult_root, tmp_path):
    data = FairnessDataModule(adult_root, "adult", val_fraction=0.2, cache_dir=tmp_path / "cache")
    train = read_adult_with_pandas(adult_root / "adult.data", test=False)
    test = read_adult_with_pandas(adult_root / "adult.test", test=True)
    assert len(train) == 300 and len(test) == 120
    rows = all_rows(data)
    assert rows["y"].size == 300 and data._arrays["y_test"].size == 120
    assert np.array_equal(rows["y"], (train["income"] == ">50K").to_numpy().astype(np.int8))
    assert np.array_equal(rows["group"], (train["sex"] == "Female").to_numpy().astype(np.int8))
    assert np.array_equal(data._arrays["y_test"], (test["income"] == ">50K").to_numpy().astype(np.int8))  # "." stripped
    assert rows["line"].tolist() == list(range(1, 301))
    assert data._arrays["line_test"].tolist() == list(range(2, 122))  # line 1 is "|1x3 Cross validator"
    # features: standardized continuous fields (training split statistics), one-hot blocks with '?' as a category
    names = data.feature_names
    assert names[:6] == ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    assert "workclass=?" in names and "sex=Female" in names
    x_train = data._arrays["x_train"].astype(np.float64)
    assert np.allclose(x_train[:, :6].mean(0), 0.0, atol=1e-5) and np.allclose(x_train[:, :6].std(0), 1.0, atol=1e-4)
    age = pd.to_numeric(train["age"]).to_numpy()[np.argsort(rows["line"])]
    assert np.allclose(rows["x"][:, 0] * data._arrays["norm_std"][0] + data._arrays["norm_mean"][0], age, atol=1e-4)
    for column in ("workclass", "sex", "native-country"):
        block = [i for i, n in enumerate(names) if n.startswith(column + "=")]
        assert np.array_equal(rows["x"][:, block].sum(1), np.ones(300))
        expected = train[column].to_numpy()
        picked = np.array([names[block[k]].split("=", 1)[1] for k in rows["x"][:, block].argmax(1)])
        assert np.array_equal(picked, expected)
    # sizes (for the CLI links) and the batch fields
    assert data.sizes == {"num_samples": 240, "num_positives": int(data._arrays["y_train"].sum()),
                          "num_negatives": 240 - int(data._arrays["y_train"].sum()), "num_features": len(names),
                          "num_groups": 2}
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert set(batch) >= {"x", "y", "group", "index", "pos_index", "neg_index"}
    assert batch["x"].shape == (128, len(names)) and batch["x"].dtype == torch.float32
    assert batch["group"].dtype == torch.long


def test_missing_values_can_be_dropped_and_the_group_feature_removed(adult_root, tmp_path):
    train = read_adult_with_pandas(adult_root / "adult.data", test=False)
    categorical = ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country"]
    complete = int((~(train[categorical] == "?").any(axis=1)).sum())
    assert complete < 300  # the generated file has '?' values
    data = FairnessDataModule(adult_root, "adult", missing="drop", include_group_feature=False, cache_dir=tmp_path)
    assert all_rows(data)["y"].size == complete
    assert not any(n.startswith("sex=") for n in data.feature_names) and "workclass=?" not in data.feature_names


def test_compas_filter_labels_and_groups_match_pandas(tmp_path):
    path = write_compas_file(tmp_path / "compas", num_rows=500, seed=1)
    frame = pd.read_csv(path)  # pandas renames the repeated columns decile_score.1 and priors_count.1
    assert "priors_count.1" in frame.columns
    kept = frame[
        frame["days_b_screening_arrest"].between(-30, 30)
        & (frame["is_recid"] != -1)
        & (frame["c_charge_degree"] != "O")
        & (frame["score_text"].fillna("N/A") != "N/A")
    ]
    assert 0 < len(kept) < len(frame)
    data = FairnessDataModule(path.parent, "compas", val_fraction=0.1, test_fraction=0.2, cache_dir=tmp_path / "c")
    rows = all_rows(data, ("train", "val", "test"))
    assert rows["line"].tolist() == (kept.index.to_numpy() + 2).tolist()  # header is line 1
    assert np.array_equal(rows["y"], kept["two_year_recid"].to_numpy().astype(np.int8))
    assert np.array_equal(rows["group"], (kept["race"] != "Caucasian").to_numpy().astype(np.int8))
    sizes = {s: data._arrays[f"y_{s}"].size for s in ("train", "val", "test")}
    assert sizes["test"] == pytest.approx(0.2 * len(kept), abs=2) and sizes["val"] == pytest.approx(0.1 * len(kept), abs=2)
    assert "race=Caucasian" in data.feature_names and "c_charge_degree=F" in data.feature_names
    assert not any(n.startswith(("decile_score", "score_text", "is_recid")) for n in data.feature_names)
    unfiltered = FairnessDataModule(path.parent, "compas", propublica_filter=False, cache_dir=tmp_path / "c")
    assert sum(unfiltered._arrays[f"y_{s}"].size for s in ("train", "val", "test")) == len(frame)


def test_bad_files_are_errors_that_name_file_line_and_field(tmp_path):
    root = write_adult_files(tmp_path / "a", 30, 10)
    with pytest.raises(FileNotFoundError, match=r"adult\.test.*archive\.ics\.uci\.edu"):
        (root / "adult.test").rename(root / "moved")
        FairnessDataModule(root, "adult", cache_dir=tmp_path)
    (root / "moved").rename(root / "adult.test")
    lines = (root / "adult.data").read_text().splitlines()
    cases = [
        (4, lines[3].rsplit(",", 1)[0], r"adult\.data, line 4: expected 15 comma-separated fields"),
        (5, lines[4].replace("<=50K", "maybe").replace(">50K", "maybe"), r"adult\.data, line 5, field 'income'"),
        (6, "abc" + lines[5][lines[5].index(","):], r"adult\.data, line 6, field 'age': cannot read 'abc'"),
    ]
    for number, text, message in cases:
        broken = list(lines)
        broken[number - 1] = text
        (root / "adult.data").write_text("\n".join(broken) + "\n")
        with pytest.raises(ValueError, match=message):
            FairnessDataModule(root, "adult", cache_dir=tmp_path / f"c{number}")
    compas = write_compas_file(tmp_path / "c", 20)
    text = compas.read_text().splitlines()
    compas.write_text("\n".join([text[0].replace("two_year_recid", "recid")] + text[1:]) + "\n")
    with pytest.raises(ValueError, match=r"compas-scores-two-years\.csv, line 1: the header has no column 'two_year_recid'"):
        FairnessDataModule(compas.parent, "compas", cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="propublica/compas-analysis"):
        FairnessDataModule(tmp_path / "nowhere", "compas")
    with pytest.raises(ValueError, match="dataset must be"):
        FairnessDataModule(root, "german")


def test_the_parsed_arrays_are_cached(adult_root, tmp_path, monkeypatch):
    first = FairnessDataModule(adult_root, "adult", cache_dir=tmp_path)
    monkeypatch.setattr(fairness, "parse_adult", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed again")))
    second = FairnessDataModule(adult_root, "adult", cache_dir=tmp_path)
    assert second.cache_key == first.cache_key
    for name in first._arrays:
        assert np.array_equal(first._arrays[name], second._arrays[name])
    with pytest.raises(AssertionError, match="parsed again"):  # another option is another entry
        FairnessDataModule(adult_root, "adult", val_fraction=0.3, cache_dir=tmp_path)


def test_group_batches_on_fairness_data(adult_root, tmp_path):
    data = FairnessDataModule(adult_root, "adult", groups_per_batch=2, samples_per_group=8, cache_dir=tmp_path)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert batch["group"].view(8, 2)[:, 0].unique().numel() == 1 and set(batch["group"].tolist()) == {0, 1}


@pytest.mark.skipif(not (REAL_ADULT / "adult.data").is_file(), reason="the UCI Adult files are not in shared/data")
def test_real_adult_files(tmp_path):
    data = FairnessDataModule(REAL_ADULT, "adult", val_fraction=0.1, cache_dir=tmp_path)
    rows = all_rows(data)
    assert rows["y"].size == 32_561 and data._arrays["y_test"].size == 16_281
    assert int(rows["y"].sum()) == 7_841 and int(data._arrays["y_test"].sum()) == 3_846
    assert int(rows["group"].sum()) == 10_771  # women in adult.data
    train = read_adult_with_pandas(REAL_ADULT / "adult.data", test=False)
    test = read_adult_with_pandas(REAL_ADULT / "adult.test", test=True)
    assert np.array_equal(rows["y"], (train["income"] == ">50K").to_numpy().astype(np.int8))
    assert np.array_equal(data._arrays["group_test"], (test["sex"] == "Female").to_numpy().astype(np.int8))
    # 6 continuous + one-hot of the 8 categorical fields over adult.data's values ('?' included)
    categories = sum(train[c].nunique() for c in
                     ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country"])
    assert data.sizes["num_features"] == 6 + categories == 108
    assert data.sizes["num_samples"] == 32_561 - round(0.1 * (32_561 - 7_841)) - round(0.1 * 7_841)
    dropped = FairnessDataModule(REAL_ADULT, "adult", missing="drop", val_fraction=0.0, cache_dir=tmp_path)
    assert dropped._arrays["y_train"].size == 30_162 and dropped._arrays["y_test"].size == 15_060  # adult.names
