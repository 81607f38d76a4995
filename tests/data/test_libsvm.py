"""LIBSVM reader, array cache and LibSVMDataModule on generated files in the exact format (plus real a9a if present)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import SHARED_DATA

import fccolit.datamodules.libsvm as dm_module
from fccolit.datamodules import LibSVMDataModule
from fccolit.io import cache_key, cached_arrays, default_cache_dir, parse_libsvm, read_libsvm
from fccolit.io.libsvm import fits_storage
from fccolit.testing import write_libsvm

A9A = SHARED_DATA / "libsvm-a9a"


# ---------------------------------------------------------------------------------------------- helpers
def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def _dataset_text(n: int, d: int, pos_share: float, seed: int, labels=("-1", "+1"), eol: str = "\n") -> str:
    """A LIBSVM file: n rows, features 1..d (sparse, ascending), the first label negative, the second positive."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        positive = rng.random() < pos_share
        cols = np.sort(rng.choice(d, size=rng.integers(1, d + 1), replace=False)) + 1
        vals = rng.normal(loc=1.0 if positive else 0.0, size=cols.size)
        feats = " ".join(f"{c}:{v:.6g}" for c, v in zip(cols, vals))
        lines.append(f"{labels[1] if positive else labels[0]} {feats}")
    return eol.join(lines) + eol


def _module(root: Path, name: str, **kw) -> LibSVMDataModule:
    kw.setdefault("cache_dir", root / "cache")
    return LibSVMDataModule(root, name, **kw)


# ---------------------------------------------------------------------------------------------- reader
def test_fits_storage_is_numpys_float32_rounding():
    """The plain-float check equals "finite after a float32 cast" at the overflow boundary and around it."""
    top = float(np.finfo(np.float32).max)
    edge = 2.0**128 - 2.0**103  # halfway between float32's largest value and 2^128
    values = [0.0, -0.0, 1e-320, 1.0, top, -top, np.nextafter(top, np.inf), np.nextafter(edge, 0.0), edge, -edge,
              2.0**128, 1e300, -1e300, np.inf, -np.inf, np.nan]
    values += list(np.random.default_rng(0).uniform(top * (1 - 1e-6), top * (1 + 1e-6), 10_000))
    with np.errstate(over="ignore"):
        expected = [bool(np.isfinite(v) and np.isfinite(np.float32(v))) for v in values]
    assert [fits_storage(float(v)) for v in values] == expected
    assert expected.count(False) > 100 and expected.count(True) > 100  # both sides of the boundary are sampled


def test_reader_format_crlf_comments_blank_lines(tmp_path):
    text = (
        "# header comment\r\n"
        "+1 1:0.5 3:-2 # trailing comment\r\n"
        "\r\n"
        "-1\t2:1e-3   4:7\r\n"
        "   \r\n"
        "-1\r\n"  # a row without features
        "+1 4:.25 1:3"  # unsorted indices, no final newline
    )
    path = _write(tmp_path / "toy", text)
    x, labels = read_libsvm(path)
    assert x.dtype == np.float32 and labels.dtype == np.float64
    expected = np.array([[0.5, 0, -2, 0], [0, 1e-3, 0, 7], [0, 0, 0, 0], [3, 0, 0, 0.25]], dtype=np.float32)
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_array_equal(labels, [1, -1, -1, 1])
    np.testing.assert_array_equal(parse_libsvm(path).lines, [2, 4, 6, 7])  # 1-based lines of the rows
    x6, _ = read_libsvm(path, num_features=6)
    assert x6.shape == (4, 6) and not x6[:, 4:].any()


def test_reader_zero_based_and_empty(tmp_path):
    x, labels = read_libsvm(_write(tmp_path / "z", "1 0:1 2:3\n0 1:2\n"), zero_based=True)
    np.testing.assert_array_equal(x, [[1, 0, 3], [0, 2, 0]])
    x, labels = read_libsvm(_write(tmp_path / "e", "\n# nothing\n"), num_features=5)
    assert x.shape == (0, 5) and labels.shape == (0,)


def test_reader_fast_path_equals_line_parser(tmp_path):
    """Many number spellings: the vectorised parser agrees bit for bit with the line-by-line one (= float())."""
    rng = np.random.default_rng(1)
    spell = [repr, "{:.3f}".format, "{:e}".format, "{:.20f}".format, "{:+.6g}".format, lambda v: str(int(v))]
    lines = []
    for _ in range(2000):
        cols = np.sort(rng.choice(40, size=rng.integers(0, 6), replace=False)) + 1
        vals = rng.normal(size=cols.size) * 10.0 ** rng.integers(-8, 8, size=cols.size)
        toks = [f"{c}:{spell[rng.integers(len(spell))](float(v))}" for c, v in zip(cols, vals)]
        lines.append(" ".join([str(rng.choice(["-1", "+1", "1.0", "0", "-0"]))] + toks))
    path = _write(tmp_path / "many", "\n".join(lines) + "\n")
    fast, slow = parse_libsvm(path), parse_libsvm(path, _force_slow=True)
    for field in ("labels", "indptr", "indices", "values", "lines"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field), err_msg=field)
    assert fast.num_features == slow.num_features
    assert np.array_equal(np.signbit(fast.labels), np.signbit(slow.labels))


def test_reader_matches_sklearn(tmp_path):
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 17)) * (rng.random((300, 17)) < 0.3)
    y = rng.choice([-1.0, 1.0], size=300)
    path = tmp_path / "dumped"
    sklearn_datasets.dump_svmlight_file(x, y, str(path), zero_based=False)
    ours_x, ours_y = read_libsvm(path, num_features=17)
    ref_x, ref_y = sklearn_datasets.load_svmlight_file(str(path), n_features=17, zero_based=False, dtype=np.float32)
    np.testing.assert_array_equal(ours_x, ref_x.toarray())
    np.testing.assert_array_equal(ours_y, ref_y)


@pytest.mark.parametrize(
    "text, line, field",
    [
        ("1 1:1\n-1 3:abc\n", 2, "feature '3:abc' is not <index>:<value>"),
        ("1 1:1\n\n-1 3:\n", 3, "feature '3:' is not <index>:<value>"),
        ("1 :4\n", 1, "feature ':4' is not <index>:<value>"),
        ("1 1:2:3\n", 1, "feature '1:2:3' is not <index>:<value>"),
        ("1 1.5:2\n", 1, "feature '1.5:2' is not <index>:<value>"),
        ("1 7\n", 1, "feature '7' is not <index>:<value>"),
        ("# c\r\n1 1:1\r\n-1 2:x # c\r\n", 3, "feature '2:x' is not <index>:<value>"),
        ("1 1:nan\n", 1, "feature '1:nan' has a value that is not finite"),
        ("abc 1:1\n", 1, "label 'abc' is not a finite number"),
        ("1:1 2:1\n", 1, "label '1:1' is not a finite number"),
        ("1 0:1\n", 1, "feature '0:1' has index 0 < 1"),
        ("1 1:1\n1 2:1\n1 50:1\n", 3, "feature '50:1' has index 50, beyond num_features=10"),
        ("1 3:1 2:1 3:4\n", 1, "feature '3:4' repeats index 3"),
    ],
)
def test_reader_errors_name_file_line_and_field(tmp_path, text, line, field):
    path = _write(tmp_path / "bad.svm", text)
    with pytest.raises(ValueError) as err:
        read_libsvm(path, num_features=10)
    message = str(err.value)
    assert f"{path} line {line}: " in message and field in message, message


def test_reader_rejects_ranking_files(tmp_path):
    path = _write(tmp_path / "letor.txt", "2 qid:10 1:0.5 2:1\n0 qid:10 1:0.1\n")
    with pytest.raises(ValueError, match=r"letor.txt line 1: found 'qid:10': this is a ranking"):
        read_libsvm(path)


def test_reader_error_in_later_chunk_has_global_line_number(tmp_path, monkeypatch):
    monkeypatch.setattr("fccolit.io.text.PARSE_BYTES", 64)  # many chunks
    lines = [f"{1 if i % 3 else -1} 1:{i} 2:0.5" for i in range(200)]
    lines[150] = "1 1:1 2:oops"
    path = _write(tmp_path / "chunks", "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"chunks line 151: feature '2:oops'"):
        read_libsvm(path)
    lines[150] = "1 1:1 2:2"
    x, y = read_libsvm(_write(tmp_path / "chunks", "\n".join(lines) + "\n"))
    assert x.shape == (200, 2) and x[199, 0] == 199 and parse_libsvm(path).lines[-1] == 200


def test_reader_compressed(tmp_path):
    import bz2

    (tmp_path / "c.bz2").write_bytes(bz2.compress(b"1 2:3\n-1 1:1\n"))
    x, y = read_libsvm(tmp_path / "c.bz2")
    np.testing.assert_array_equal(x, [[0, 3], [1, 0]])


# ---------------------------------------------------------------------------------------------- cache
def test_cache_roundtrip_memory_mapped(tmp_path):
    src = _write(tmp_path / "raw", "data")
    key = cache_key([src], {"a": 1}, prefix="toy set")
    assert key.startswith("toy_set-")
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.array([0, 1, 1], dtype=np.int8)}
    out = cached_arrays(tmp_path / "cache", key, lambda: arrays)
    assert isinstance(out["x"], np.memmap) and not out["x"].flags.writeable
    np.testing.assert_array_equal(out["x"], arrays["x"])
    meta = json.loads((tmp_path / "cache" / key / "meta.json").read_text())
    assert meta["arrays"]["y"] == {"dtype": "int8", "shape": [3]}
    again = cached_arrays(tmp_path / "cache", key, lambda: pytest.fail("rebuilt a cached entry"))
    np.testing.assert_array_equal(again["y"], arrays["y"])


def test_cache_key_tracks_files_and_options(tmp_path):
    src = _write(tmp_path / "raw", "1 1:1\n")
    key = cache_key([src], {"seed": 0})
    assert key == cache_key([src], {"seed": 0})
    assert key != cache_key([src], {"seed": 1})
    _write(src, "1 1:2\n")  # same size, different bytes
    assert key != cache_key([src], {"seed": 0})


def test_cache_nothing_half_written_when_build_fails(tmp_path, monkeypatch):
    cache = tmp_path / "cache"

    def broken():
        raise RuntimeError("parse failed")

    with pytest.raises(RuntimeError, match="parse failed"):
        cached_arrays(cache, "k", broken)
    assert not cache.exists() or not any(cache.iterdir())

    with pytest.raises(ValueError, match="cannot store"):
        cached_arrays(cache, "k", lambda: {"bad": np.array([object()], dtype=object)})
    assert not cache.exists() or not any(cache.iterdir())

    import fccolit.io.cache as cache_module

    real_write = cache_module._write

    def dies_half_way(tmp, key, arrays):  # one array on disk, then the process "crashes"
        real_write(tmp, key, dict(list(arrays.items())[:1]))
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module, "_write", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        cached_arrays(cache, "k", lambda: {"a": np.zeros(3), "b": np.ones(2)})
    assert not (cache / "k").exists() and not any(cache.iterdir())

    def disk_full(tmp, key, arrays):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_module, "_write", disk_full)
    with pytest.warns(UserWarning, match="uncached"):
        out = cached_arrays(cache, "k", lambda: {"a": np.zeros(3)})
    np.testing.assert_array_equal(out["a"], np.zeros(3))
    assert not any(cache.iterdir())


def test_cache_concurrent_writer_loses_race_gracefully(tmp_path):
    """Another process finishes the same entry while we build: our rename fails, we load theirs, no leftovers."""
    cache = tmp_path / "cache"

    def build_while_other_writer_wins():
        cached_arrays(cache, "k", lambda: {"v": np.array([1.0])})  # the "other" writer
        return {"v": np.array([1.0])}

    out = cached_arrays(cache, "k", build_while_other_writer_wins)
    np.testing.assert_array_equal(out["v"], [1.0])
    assert sorted(p.name for p in cache.iterdir()) == ["k"]


def test_default_cache_dir_is_the_user_cache_never_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FCCOLIT_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("FCCOLIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "fccolit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fccolit"


def test_a_datamodule_without_cache_dir_writes_nothing_into_the_data_folder(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    write_libsvm(root, name="a9a")
    monkeypatch.setenv("FCCOLIT_CACHE_DIR", str(tmp_path / "cache"))
    before = sorted(p.name for p in root.iterdir())
    data = LibSVMDataModule(root, name="a9a", batch_size=8, num_positives=2)
    assert sorted(p.name for p in root.iterdir()) == before
    assert data.cache_dir == tmp_path / "cache" and (tmp_path / "cache" / data.cache_key).is_dir()
    assert [use.hit for use in data.cache_uses] == [False]
    again = LibSVMDataModule(root, name="a9a", batch_size=8, num_positives=2)
    assert [(use.entry, use.hit) for use in again.cache_uses] == [(tmp_path / "cache" / data.cache_key, True)]


# ---------------------------------------------------------------------------------------------- DataModule
def test_missing_file_error(tmp_path):
    _write(tmp_path / "w8a", "1 1:1\n")
    with pytest.raises(FileNotFoundError) as err:
        LibSVMDataModule(tmp_path, "a9a", cache_dir=tmp_path / "cache")
    message = str(err.value)
    assert str(tmp_path / "a9a") in message and "w8a" in message
    assert "libsvmtools/datasets" in message and "'a9a'" in message


@pytest.mark.parametrize("labels", [("-1", "+1"), ("0", "1"), ("1", "2")])
def test_label_codings_and_split_without_test_file(tmp_path, labels):
    _write(tmp_path / "toy", _dataset_text(1000, 6, 0.3, seed=0, labels=labels, eol="\r\n"))
    raw = read_libsvm(tmp_path / "toy")[1]
    dm = _module(tmp_path, "toy", val_fraction=0.2, test_fraction=0.25)
    assert dm.test_file is None
    assert dm.label_values == (float(labels[0]), float(labels[1]))
    dm.setup()
    n = {s: len(getattr(dm, f"{s}_dataset")) for s in ("train", "val", "test")}
    assert sum(n.values()) == 1000 and abs(n["val"] - 200) <= 1 and abs(n["test"] - 250) <= 1
    positives = int(dm.train_dataset.fields["y"].sum())
    assert dm.sizes == {"num_samples": n["train"], "num_positives": positives,
                        "num_negatives": n["train"] - positives, "num_features": 6}
    num_pos = int((raw == float(labels[1])).sum())
    assert sum(int(getattr(dm, f"{s}_dataset").fields["y"].sum()) for s in n) == num_pos
    # disjoint splits covering the file (the cached line numbers point back to it)
    lines = np.concatenate([dm._arrays[f"line_{s}"] for s in ("train", "val", "test")])
    assert np.array_equal(np.sort(lines), np.arange(1, 1001))


def test_positive_label_and_label_errors(tmp_path):
    _write(tmp_path / "toy", _dataset_text(200, 4, 0.3, seed=1))
    default = _module(tmp_path, "toy", val_fraction=0.0, test_fraction=0.0)
    flipped = _module(tmp_path, "toy", val_fraction=0.0, test_fraction=0.0, positive_label=-1)
    assert flipped.label_values == (1.0, -1.0)
    assert default.sizes["num_positives"] + flipped.sizes["num_positives"] == 200
    with pytest.raises(ValueError, match=r"positive_label=3 is not one of the labels"):
        _module(tmp_path, "toy", positive_label=3)
    _write(tmp_path / "multi", "1 1:1\n2 1:1\n3 2:1\n3 1:1\n")
    listing = r"exactly two distinct labels.*found 3: 1 \(1 rows\), 2 \(1 rows\), 3 \(2 rows\)"
    with pytest.raises(ValueError, match=listing):
        _module(tmp_path, "multi")


def test_test_file_is_used_and_widths_agree(tmp_path):
    _write(tmp_path / "toy", _dataset_text(600, 8, 0.25, seed=2))
    _write(tmp_path / "toy.t", "+1 2:1 3:1\n-1 1:0.5\n-1 4:2\n")  # narrower than the training file
    dm = _module(tmp_path, "toy", val_fraction=0.1, test_fraction=0.3)  # test_fraction is ignored
    dm.setup()
    assert dm.test_file == tmp_path / "toy.t"
    assert len(dm.test_dataset) == 3 and dm.test_dataset.fields["x"].shape == (3, 8)
    assert dm.test_dataset.fields["y"].tolist() == [1, 0, 0]
    assert len(dm.train_dataset) + len(dm.val_dataset) == 600 and abs(len(dm.val_dataset) - 60) <= 1


def test_pos_fraction(tmp_path):
    _write(tmp_path / "toy", _dataset_text(3000, 5, 0.45, seed=3, labels=("1", "2")))
    dm = _module(tmp_path, "toy", pos_fraction=0.05, val_fraction=0.2, test_fraction=1 / 3)
    share = dm.sizes["num_positives"] / dm.sizes["num_samples"]
    assert abs(share - 0.05) < 2 / dm.sizes["num_samples"], share
    dm.setup()
    for split in ("val", "test"):  # stratified splits keep the share (Wang et al.'s mushrooms / phishing)
        y = getattr(dm, f"{split}_dataset").fields["y"]
        assert abs(float(y.float().mean()) - 0.05) < 0.02
    negatives = sum(int((getattr(dm, f"{s}_dataset").fields["y"] == 0).sum()) for s in ("train", "val", "test"))
    assert negatives == int((read_libsvm(tmp_path / "toy")[1] == 1).sum())  # all negatives kept
    with pytest.raises(ValueError, match=r"pos_fraction=0.9 is larger than the share of positives"):
        _module(tmp_path, "toy", pos_fraction=0.9)


def test_normalize_fitted_on_training_split(tmp_path):
    _write(tmp_path / "toy", _dataset_text(800, 5, 0.3, seed=4))
    raw = _module(tmp_path, "toy")
    mm = _module(tmp_path, "toy", normalize="minmax")
    st = _module(tmp_path, "toy", normalize="standard")
    for dm in (raw, mm, st):
        dm.setup()
    x_tr = mm.train_dataset.fields["x"]
    assert torch.allclose(x_tr.min(0).values, torch.zeros(5)) and torch.allclose(x_tr.max(0).values, torch.ones(5))
    raw_val = raw.val_dataset.fields["x"].double()
    lo, scale = (torch.tensor(np.array(mm._arrays[k])) for k in ("norm_shift", "norm_scale"))
    torch.testing.assert_close(mm.val_dataset.fields["x"].double(), (raw_val - lo) / scale, rtol=1e-6, atol=1e-6)
    x_st = st.train_dataset.fields["x"].double()
    torch.testing.assert_close(x_st.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(x_st.std(0, unbiased=False), torch.ones(5, dtype=torch.float64), atol=1e-5, rtol=0)


def test_cache_reused_and_invalidated(tmp_path, monkeypatch):
    _write(tmp_path / "toy", _dataset_text(500, 4, 0.3, seed=5))
    calls = []
    real = dm_module.parse_libsvm
    monkeypatch.setattr(dm_module, "parse_libsvm", lambda *a, **k: calls.append(a[0]) or real(*a, **k))

    first = _module(tmp_path, "toy", seed=1)
    assert len(calls) == 1 and (tmp_path / "cache" / first.cache_key / "meta.json").is_file()
    second = _module(tmp_path, "toy", seed=1, batch_size=32, num_positives=8)  # sampler options: same arrays
    assert len(calls) == 1 and second.cache_key == first.cache_key and second.sizes == first.sizes
    first.setup(), second.setup()
    assert torch.equal(first.train_dataset.fields["x"], second.train_dataset.fields["x"])

    _module(tmp_path, "toy", seed=1, normalize="minmax")
    assert len(calls) == 2
    _module(tmp_path, "toy", seed=2)
    assert len(calls) == 3
    time.sleep(0.01)
    _write(tmp_path / "toy", _dataset_text(500, 4, 0.3, seed=6))  # the raw file changed
    _module(tmp_path, "toy", seed=1)
    assert len(calls) == 4
    assert not list((tmp_path / "cache").glob(".*tmp*"))


def test_build_error_leaves_no_cache_entry(tmp_path):
    _write(tmp_path / "toy", "1 1:1\n-1 2:x\n")
    with pytest.raises(ValueError, match=r"toy line 2: feature '2:x'"):
        _module(tmp_path, "toy")
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.iterdir())


def test_smoke_training_batches(tmp_path):
    _write(tmp_path / "toy", _dataset_text(1200, 10, 0.2, seed=7))
    dm = _module(tmp_path, "toy", batch_size=32, num_positives=8, num_batches=5, normalize="minmax", seed=3)
    assert set(dm.sizes) == {"num_samples", "num_positives", "num_negatives", "num_features"} and dm.sizes["num_features"] == 10
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert len(loader) == 5
    batches = [b for _, b in zip(range(2), loader)]
    train = dm.train_dataset.fields
    for batch in batches:
        assert set(batch) == {"x", "y", "index", "pos_index", "neg_index"}
        assert batch["x"].shape == (32, 10) and batch["x"].dtype == torch.float32
        assert batch["y"].shape == (32,) and batch["y"].dtype == torch.long
        assert int(batch["y"].sum()) == 8
        assert torch.equal(batch["pos_index"] >= 0, batch["y"] == 1)
        assert int(batch["pos_index"].max()) < dm.sizes["num_positives"]
        assert torch.equal(batch["x"], train["x"][batch["index"]])
    assert not torch.equal(batches[0]["index"], batches[1]["index"])
    val = next(iter(dm.val_dataloader()))
    assert val["x"].shape == (len(dm.val_dataset), 10)


# ---------------------------------------------------------------------------------------------- real data
@pytest.mark.skipif(not (A9A / "a9a").is_file(), reason="shared LIBSVM a9a files not present")
def test_real_a9a(tmp_path):
    t0 = time.perf_counter()
    x, labels = read_libsvm(A9A / "a9a")
    assert time.perf_counter() - t0 < 5.0
    assert x.shape == (32_561, 123)  # published: 32,561 training rows, 123 features
    assert int((labels == 1).sum()) == 7_841 and int((labels == -1).sum()) == 24_720
    assert set(np.unique(x).tolist()) == {0.0, 1.0}
    xt, labels_t = read_libsvm(A9A / "a9a.t", num_features=123)
    assert xt.shape == (16_281, 123) and int((labels_t == 1).sum()) == 3_846
    assert parse_libsvm(A9A / "a9a.t").num_features == 122  # why num_features must be shared across the files

    dm = LibSVMDataModule(A9A, "a9a", val_fraction=0.2, cache_dir=tmp_path / "cache")
    assert dm.test_file == A9A / "a9a.t"
    assert dm.sizes["num_features"] == 123
    assert dm.sizes["num_samples"] == 32_561 - round(0.2 * 24_720) - round(0.2 * 7_841)
    assert dm.sizes["num_positives"] == 7_841 - round(0.2 * 7_841)
    full = LibSVMDataModule(A9A, "a9a", val_fraction=0.0, cache_dir=tmp_path / "cache")
    assert full.sizes == {"num_samples": 32_561, "num_positives": 7_841, "num_negatives": 24_720, "num_features": 123}
