"""Why fccolit.io.cache is not the `datasets` cache: `datasets` keys a local data file by its path and modification
time, so an edit that keeps both serves the old rows; fccolit's key hashes the content and the entry is rebuilt."""

import os

import numpy as np
import pytest

from fccolit.io.cache import cache_key, cached_arrays

datasets = pytest.importorskip("datasets")


def _edit_keeping_size_and_mtime(path, text):
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_an_edit_keeping_size_and_mtime_is_stale_in_datasets_and_rebuilt_here(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # a packaged builder on a local file: nothing is fetched
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n3,4\n")

    def load_with_datasets():
        return datasets.load_dataset("csv", data_files=str(data), cache_dir=str(tmp_path / "hf"), split="train")["b"]

    def build():
        return {"b": np.loadtxt(data, delimiter=",", skiprows=1, dtype=np.int64)[:, 1]}

    assert list(load_with_datasets()) == [2, 4]
    key = cache_key([data], {})
    assert cached_arrays(tmp_path / "ours", key, build)["b"].tolist() == [2, 4]

    _edit_keeping_size_and_mtime(data, "a,b\n1,2\n3,9\n")
    assert list(load_with_datasets()) == [2, 4]  # datasets: the old rows
    new_key = cache_key([data], {})
    assert new_key != key
    assert cached_arrays(tmp_path / "ours", new_key, build)["b"].tolist() == [2, 9]
