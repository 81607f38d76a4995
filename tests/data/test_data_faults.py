"""Fault injection on the data side (issue 16): caches under edits, corruption and concurrency; malformed, empty,
oversized and hostile data files. Every fault must end in the right arrays or in an error that names the file
(and the line and field where there is one), never in silently wrong data or a downstream error.

The training-side faults (kills, resumes, diverging learning rates, checkpoints) are in
``tests/algorithms/test_faults.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from fccolit.datamodules.bdd100k import BDD100KDataModule
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.datamodules.libsvm import LibSVMDataModule
import fccolit.datamodules.movielens as ml
from fccolit.datamodules.movielens import MovieLensDataModule, download_movielens
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.io import cache_key, cached_arrays, parse_letor, parse_libsvm, read_libsvm, read_movielens_ratings
import fccolit.io.cache as cache_module
from fccolit.io.bdd100k import read_bdd100k_attributes
from fccolit.io.chexpert import OBSERVATIONS, read_chexpert_csv
from fccolit.io.fairness import parse_adult
from fccolit.testing import (
    write_adult_files, write_bdd100k, write_chexpert, write_csv, write_large_libsvm, write_libsvm, write_mslr_fold,
    write_netflix, zip_bytes,
)


# ---------------------------------------------------------------------------------------------- helpers
def _flip_label_in_middle(path: Path) -> int:
    """Flip the ±1 label of the line in the middle of ``path`` in place: same size, mtime kept. Returns the line."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    start = data.index(b"\n", len(data) // 2) + 1
    assert data[start : start + 2] in (b"+1", b"-1")
    data[start : start + 2] = b"-1" if data[start : start + 2] == b"+1" else b"+1"
    line = data[:start].count(b"\n") + 1
    with open(path, "r+b") as f:  # rewrite in place (same inode)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    return line


# ---------------------------------------------------------------------------------------------- defect 4: stale cache
def test_edit_in_the_middle_same_size_mtime_kept_changes_the_key(tmp_path):
    path = tmp_path / "big"
    write_large_libsvm(path)
    assert path.stat().st_size > 3 << 20
    before = cache_key([path], {"seed": 0})
    _flip_label_in_middle(path)
    assert cache_key([path], {"seed": 0}) != before


def test_edited_data_file_under_a_cache_serves_the_new_arrays(tmp_path):
    """A flipped label in the middle of a multi-MiB training file, size and mtime kept: the DataModule must not
    serve the cached arrays of the old file."""
    root = tmp_path / "data"
    root.mkdir()
    write_large_libsvm(root / "big")
    kw = dict(root=root, name="big", val_fraction=0.0, test_fraction=0.0, cache_dir=tmp_path / "cache")
    first = LibSVMDataModule(**kw)
    _flip_label_in_middle(root / "big")
    second = LibSVMDataModule(**kw)
    fresh = LibSVMDataModule(**{**kw, "cache_dir": tmp_path / "fresh"})  # parsed from scratch
    assert second.cache_key != first.cache_key
    assert abs(second.sizes["num_positives"] - first.sizes["num_positives"]) == 1
    np.testing.assert_array_equal(np.asarray(second._arrays["y_train"]), np.asarray(fresh._arrays["y_train"]))


def test_touch_or_copy_keeps_the_entry(tmp_path):
    """The key is the content: a new mtime, or the same file in another folder, reuses the entry."""
    src = tmp_path / "a" / "f"
    src.parent.mkdir()
    src.write_text("1 1:1\n-1 2:1\n")
    key = cache_key([src], {})
    os.utime(src, ns=(1, 1))
    copy = tmp_path / "b" / "f"
    copy.parent.mkdir()
    copy.write_bytes(src.read_bytes())
    assert cache_key([src], {}) == key == cache_key([copy], {})


def test_content_hash_streams_large_files(tmp_path):
    path = tmp_path / "blob"
    data = np.random.default_rng(0).bytes((9 << 20) + 123)  # more than one 8 MiB block
    path.write_bytes(data)
    assert cache_module.content_sha256(path) == hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- corrupt cache entries
def _corruptions():
    def truncate(entry):
        f = entry / "x.npy"
        f.write_bytes(f.read_bytes()[:-7])

    def overwrite_middle(entry):  # same size: only the content hash sees it
        f = entry / "x.npy"
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))

    def garbage_meta(entry):
        (entry / "meta.json").write_text("{not json")

    def missing_array(entry):
        (entry / "y.npy").unlink()

    def empty_meta(entry):
        (entry / "meta.json").write_text("")

    return [truncate, overwrite_middle, garbage_meta, missing_array, empty_meta]


@pytest.mark.parametrize("corrupt", _corruptions(), ids=lambda f: f.__name__)
def test_corrupt_cache_entry_is_rebuilt_not_served(tmp_path, corrupt):
    arrays = {"x": np.arange(4000, dtype=np.float32).reshape(100, 40), "y": np.arange(100, dtype=np.int64)}
    calls = []

    def build():
        calls.append(1)
        return arrays

    cached_arrays(tmp_path, "k", build)
    corrupt(tmp_path / "k")
    with pytest.warns(UserWarning, match=r"cache entry .*k is corrupt .*rebuilding it"):
        out = cached_arrays(tmp_path, "k", build)
    assert len(calls) == 2
    for name, value in arrays.items():
        np.testing.assert_array_equal(out[name], value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cached_arrays(tmp_path, "k", build)  # the rebuilt entry is good: loaded, not rebuilt
    assert len(calls) == 2
    np.testing.assert_array_equal(again["x"], arrays["x"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]  # the corrupt copy is gone, no leftovers


def test_corrupt_entry_that_cannot_be_removed_is_refused_by_name(tmp_path, monkeypatch):
    """A corrupt entry in a cache this process cannot change (e.g. a shared read-only cache) is never served."""
    cached_arrays(tmp_path / "c", "k", lambda: {"x": np.arange(10.0)})
    (tmp_path / "c" / "k" / "meta.json").write_text("{")
    monkeypatch.setattr(cache_module, "_set_aside", lambda entry, identity: None)  # the rename is not permitted
    with pytest.warns(UserWarning, match="corrupt"), pytest.raises(RuntimeError, match=r"c/k is corrupt .*delete"):
        cached_arrays(tmp_path / "c", "k", lambda: {"x": np.arange(10.0)})


# ---------------------------------------------------------------------------------------------- two processes, one cache
def _race_worker(cache_dir, key, barrier, queue, corrupt_first):
    def build():
        barrier.wait(timeout=60)  # both processes are inside build_fn: they race to the rename
        return {"x": np.arange(1000, dtype=np.float64) * 3.0, "y": np.ones(7, dtype=np.int8)}

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = cached_arrays(cache_dir, key, build)
        queue.put(("ok", float(np.asarray(out["x"]).sum()), int(np.asarray(out["y"]).sum())))
    except BaseException as err:  # pragma: no cover - reported to the parent
        queue.put(("error", repr(err), 0))


@pytest.mark.parametrize("corrupt_first", [False, True], ids=["empty-cache", "corrupt-entry"])
def test_two_processes_build_one_entry_at_once(tmp_path, corrupt_first):
    """Two processes build the same key at the same moment (a barrier inside build_fn); with ``corrupt_first`` they
    both find a corrupt entry first. Both get the right arrays; one complete entry remains, nothing else."""
    cache = tmp_path / "cache"
    if corrupt_first:
        cached_arrays(cache, "k", lambda: {"x": np.zeros(1000), "y": np.zeros(7, dtype=np.int8)})
        (cache / "k" / "x.npy").write_bytes(b"\x93NUMPY garbage")
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(cache, "k", barrier, queue, corrupt_first)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [("ok", 3.0 * 999 * 1000 / 2, 7)] * 2
    assert sorted(p.name for p in cache.iterdir()) == ["k"]
    out = cached_arrays(cache, "k", lambda: pytest.fail("the entry left behind is not complete"))
    np.testing.assert_array_equal(out["x"], np.arange(1000) * 3.0)


def _datamodule_worker(root, cache_dir, queue):
    try:
        dm = LibSVMDataModule(root, "toy", cache_dir=cache_dir, batch_size=32, num_positives=8)
        queue.put((dm.cache_key, dm.sizes, hashlib.sha256(np.asarray(dm._arrays["x_train"]).tobytes()).hexdigest()))
    except BaseException as err:  # pragma: no cover
        queue.put(repr(err))


def test_two_processes_construct_one_datamodule_on_one_cache(tmp_path):
    write_libsvm(tmp_path, rows=2000, test_rows=300)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_datamodule_worker, args=(tmp_path, tmp_path / "cache", queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results[0] == results[1] and isinstance(results[0], tuple)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [results[0][0]]


# ---------------------------------------------------------------------------------------------- defect 5: float32 range
@pytest.mark.parametrize("force_slow", [False, True], ids=["fast", "slow"])
def test_libsvm_value_beyond_float32_is_named(tmp_path, force_slow):
    path = tmp_path / "a9a"
    path.write_text("+1 1:1 3:0.5\n-1 2:1\n-1 1:1 3:1e300\n+1 2:3.4e38\n")
    with pytest.raises(ValueError, match=r"a9a line 3: feature '3:1e300' has a value beyond the float32 range"):
        parse_libsvm(path, _force_slow=force_slow)
    path.write_text("+1 1:1 3:0.5\n-1 2:1\n-1 1:1 3:-3.4e38\n")  # the largest float32 magnitude still fits
    x, _ = read_libsvm(path)
    assert np.isfinite(x).all() and x[2, 2] == np.float32(-3.4e38)


@pytest.mark.parametrize("force_slow", [False, True], ids=["fast", "slow"])
def test_letor_value_or_label_beyond_float32_is_named(tmp_path, force_slow):
    path = tmp_path / "train.txt"
    path.write_text("1 qid:1 1:0.5 2:1\n0 qid:1 1:2e39 2:1\n")
    with pytest.raises(ValueError, match=r"train.txt line 2: feature '1:2e39' has a value beyond the float32 range"):
        parse_letor(path, _force_slow=force_slow)
    path.write_text("1 qid:1 1:0.5 2:1\n1e300 qid:1 1:2 2:1\n")
    with pytest.raises(ValueError, match=r"train.txt line 2: relevance label '1e300' is beyond the float32 range"):
        parse_letor(path, _force_slow=force_slow)


def test_ratings_and_tabular_values_beyond_float32_are_named(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,2,4.0,5\n1,3,1e300,6\n")
    with pytest.raises(ValueError, match=r"ratings.csv line 3: field 'rating' = '1e300' is beyond the float32 range"):
        read_movielens_ratings(path)
    write_adult_files(tmp_path, num_train=20, num_test=10)
    lines = (tmp_path / "adult.data").read_text().split("\n")
    fields = lines[4].split(", ")
    fields[0] = "1e300"  # age
    lines[4] = ", ".join(fields)
    (tmp_path / "adult.data").write_text("\n".join(lines))
    with pytest.raises(ValueError, match=r"adult.data, line 5, field 'age': '1e300' is not a finite number within"):
        parse_adult(tmp_path / "adult.data")


# ---------------------------------------------------------------------------------------------- defect 6: huge index
def test_huge_feature_index_is_named_before_allocating(tmp_path):
    path = tmp_path / "toy"
    path.write_text("+1 1:1\n" * 500 + "-1 2000000000:1\n" + "-1 2:1\n" * 499)
    parsed = parse_libsvm(path)  # the sparse reader is fine
    assert parsed.num_features == 2_000_000_000
    message = r"toy line 501: feature index 2000000000 makes the dense feature matrix 1,000 × 2,000,000,000 float32"
    with pytest.raises(MemoryError, match=message + r".*more than this machine's .*read it sparse"):
        read_libsvm(path)
    (tmp_path / "toy.t").write_text("+1 1:1\n-1 2:1\n")
    with pytest.raises(MemoryError, match=message.replace("1,000", "1,002")):
        LibSVMDataModule(tmp_path, "toy", cache_dir=tmp_path / "cache", layout="dense")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    # the default layout ("auto") reads such a file sparse instead of refusing it
    assert LibSVMDataModule(tmp_path, "toy", cache_dir=tmp_path / "cache").layout == "sparse"


def test_huge_feature_index_in_a_letor_file_is_named(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("".join(f"{i % 3} qid:{i // 10} 1:1 2:0.5\n" for i in range(300)) + "1 qid:99 2000000000:1\n")
    with pytest.raises(MemoryError, match=r"train.txt line 301: feature index 2000000000 makes the dense feature"):
        parse_letor(path)


# ---------------------------------------------------------------------------------------------- defect 8: named errors
def test_header_only_ratings_file_is_named(tmp_path):
    root = tmp_path / "ml"
    root.mkdir()
    (root / "ratings.csv").write_text("userId,movieId,rating,timestamp\n")
    with pytest.raises(ValueError, match=r"ml/ratings.csv: the ratings file holds no rating \(only its header line\)"):
        MovieLensDataModule(root, cache_dir=tmp_path / "cache")


def test_no_relevant_rating_is_named(tmp_path):
    root = tmp_path / "ml"
    root.mkdir()
    rows = "".join(f"{u},{i},{1 + (u + i) % 3}.0,{100 + i}\n" for u in range(1, 6) for i in range(1, 9))
    (root / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + rows)
    with pytest.raises(ValueError, match=r"ratings.csv: no relevant training \(user, item\) pair: with "
                                         r"relevance='binary' no training rating reaches relevance_threshold=4"):
        MovieLensDataModule(root, relevance="binary", cache_dir=tmp_path / "cache")


def test_letor_file_without_relevant_document_is_named(tmp_path):
    base = write_mslr_fold(tmp_path, num_features=4)
    text = (base / "train.txt").read_text()
    (base / "train.txt").write_text(re.sub(r"(?m)^[0-9]+ qid:", "0 qid:", text))
    with pytest.raises(ValueError, match=r"Fold1/train.txt: no query of the training file has a relevant document"):
        MSLRDataModule(tmp_path, normalize="standard", cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------------------------------- defect 9: empty evaluation files
def test_empty_libsvm_test_file_is_named(tmp_path):
    write_libsvm(tmp_path)
    (tmp_path / "toy.t").write_text("")
    with pytest.raises(ValueError, match=r"toy.t: the test file holds no example"):
        LibSVMDataModule(tmp_path, "toy", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("split", ["vali.txt", "test.txt"])
def test_empty_letor_evaluation_file_is_named(tmp_path, split):
    base = write_mslr_fold(tmp_path, num_features=4)
    (base / split).write_text("\n")
    role = "validation" if split == "vali.txt" else "test"
    with pytest.raises(ValueError, match=rf"Fold1/{split}: the {role} file holds no document"):
        MSLRDataModule(tmp_path, normalize="standard", cache_dir=tmp_path / "cache")


def test_header_only_chexpert_valid_csv_is_named(tmp_path):
    base, _ = write_chexpert(tmp_path, num_patients=4, num_valid_patients=1, image_size=(16, 16))
    header = (base / "valid.csv").read_text().split("\n")[0]
    (base / "valid.csv").write_text(header + "\n")
    with pytest.raises(ValueError, match=r"valid.csv: the file holds only its header line, no image row"):
        CheXpertDataModule(tmp_path, cache_dir=tmp_path / "cache")


def test_empty_bdd100k_label_list_is_named(tmp_path):
    write_bdd100k(tmp_path, num_frames=(20, 5), write_images=False)
    (tmp_path / "labels" / "bdd100k_labels_images_val.json").write_text("[]")
    with pytest.raises(ValueError, match=r"bdd100k_labels_images_val.json: the labels file lists no frame"):
        BDD100KDataModule(tmp_path, task="weather", cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------------------------------- defect 11: rating scale
@pytest.mark.parametrize("force_slow", [False, True], ids=["fast", "slow"])
def test_rating_far_outside_the_scale_is_named(tmp_path, force_slow):
    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,2,4.0,5\n1,3,1000000,6\n")
    with pytest.raises(ValueError, match=r"ratings.csv line 3: field 'rating' = '1000000' is outside the rating "
                                         r"scale \[0.5, 5\]"):
        read_movielens_ratings(path, rating_scale=(0.5, 5.0), _force_slow=force_slow)
    assert read_movielens_ratings(path, _force_slow=force_slow).rating.max() == 1e6  # no scale: the reader's choice


def test_datamodules_validate_their_rating_scale(tmp_path):
    root = tmp_path / "ml"
    root.mkdir()
    rows = "".join(f"{u},{i},{1 + (u * i) % 5}.0,{100 + i}\n" for u in range(1, 6) for i in range(1, 9))
    (root / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + rows + "3,40,1000000,500\n")
    with pytest.raises(ValueError, match=r"ratings.csv line 42: field 'rating' = '1000000' is outside the rating "
                                         r"scale \[0.5, 5\]"):
        MovieLensDataModule(root, cache_dir=tmp_path / "cache")
    dm = MovieLensDataModule(root, cache_dir=tmp_path / "cache", rating_scale=(0, 1e6), relevance="binary")
    assert dm.rating_scale == (0.0, 1e6)

    nf = tmp_path / "nf"
    write_netflix(nf)
    text = (nf / "combined_data_2.txt").read_text().split("\n")
    k = next(i for i, line in enumerate(text) if "," in line)
    text[k] = re.sub(r",[0-9]+,", ",9,", text[k])
    (nf / "combined_data_2.txt").write_text("\n".join(text))
    with pytest.raises(ValueError, match=rf"combined_data_2.txt line {k + 1}: field 'Rating' = '9' is outside the "
                                         r"rating scale \[1, 5\]"):
        NetflixDataModule(nf, min_ratings=1, cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------------------------------- defect 12: checksums
def _fake_release_zip(folder: str = "ml-100k", name: str = "u.data") -> bytes:
    ratings = "".join(f"{u}\t{i}\t{1 + (u + i) % 5}\t{900 + i}\n" for u in range(1, 6) for i in range(1, 9))
    return zip_bytes({f"{folder}/{name}": ratings})


def test_corrupted_movielens_download_is_refused_and_not_kept(tmp_path, monkeypatch):
    payload = _fake_release_zip()  # a valid zip, but not GroupLens' ml-100k.zip: its MD5 differs
    requested = []

    def fake_urlopen(url, timeout):
        requested.append(url)
        return io.BytesIO(payload)

    monkeypatch.setattr(ml.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(ValueError, match=r"ml-100k.zip does not match the checksum GroupLens publishes "
                                         rf"\({ml.MOVIELENS_MD5['ml-100k']}; got {hashlib.md5(payload).hexdigest()}\)"):
        download_movielens(tmp_path, "ml-100k")
    assert requested == ["https://files.grouplens.org/datasets/movielens/ml-100k.zip"]
    assert list(tmp_path.iterdir()) == []  # no zip, no temporary file, nothing extracted

    monkeypatch.setitem(ml.MOVIELENS_MD5, "ml-100k", hashlib.md5(payload).hexdigest())  # "the published one"
    assert download_movielens(tmp_path, "ml-100k") == tmp_path / "ml-100k" / "u.data"


def test_corrupted_movielens_zip_in_root_is_named(tmp_path):
    (tmp_path / "ml-1m.zip").write_bytes(_fake_release_zip("ml-1m", "ratings.dat"))
    with pytest.raises(ValueError, match=r"ml-1m.zip: MD5 [0-9a-f]{32} differs from the checksum GroupLens publishes "
                                         r"for ml-1m.zip \(c4d9eecfca2ab87c1945afe126590906\)"):
        MovieLensDataModule(tmp_path, version="ml-1m", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "ml-1m").exists()


def test_release_without_embedded_checksum_uses_the_published_md5_file(tmp_path, monkeypatch):
    payload = _fake_release_zip("ml-latest-small", "ratings.csv")
    published = {"value": "0" * 32}

    def fake_urlopen(url, timeout):
        if url.endswith(".md5"):
            return io.BytesIO(f"MD5 (ml-latest-small.zip) = {published['value']}\n".encode())
        return io.BytesIO(payload)

    monkeypatch.setattr(ml.urllib.request, "urlopen", fake_urlopen)
    assert "ml-latest-small" not in ml.MOVIELENS_MD5
    with pytest.raises(ValueError, match=r"does not match the checksum GroupLens publishes \(0{32};"):
        download_movielens(tmp_path, "ml-latest-small")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- defect 13: paths
@pytest.mark.parametrize(
    "bad",
    ["CheXpert-v1.0-small/../../outside/view1_frontal.jpg", "/etc/passwd", "CheXpert-v1.0-small\\..\\..\\x.jpg",
     "C:\\Windows\\x.jpg"],
)
def test_chexpert_path_escaping_the_release_is_named(tmp_path, bad):
    header = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *OBSERVATIONS]
    good = ["CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg", "Male", "50", "Frontal", "AP"]
    rows = [good + ["1.0"] * len(OBSERVATIONS), [bad, "Male", "50", "Frontal", "AP"] + ["0.0"] * len(OBSERVATIONS)]
    write_csv(tmp_path / "train.csv", header, rows)
    with pytest.raises(ValueError, match=rf"train.csv line 3, field 'Path': path {re.escape(repr(bad))} "
                                         r"(goes up with '..'|is absolute); paths in a data file must stay inside"):
        read_chexpert_csv(tmp_path / "train.csv", ["Edema"])


def test_chexpert_datamodule_refuses_an_escaping_path(tmp_path):
    base, _ = write_chexpert(tmp_path, num_patients=4, num_valid_patients=1, image_size=(16, 16))
    lines = (base / "valid.csv").read_text().split("\n")
    lines[1] = "CheXpert-v1.0-small/../../secret.jpg" + lines[1][lines[1].index(","):]
    (base / "valid.csv").write_text("\n".join(lines))
    with pytest.raises(ValueError, match=r"valid.csv line 2, field 'Path': path .*secret.jpg' goes up with '..'"):
        CheXpertDataModule(tmp_path, cache_dir=tmp_path / "cache")


def test_bdd100k_frame_name_escaping_the_image_folder_is_named(tmp_path):
    write_bdd100k(tmp_path, num_frames=(6, 3), write_images=False)
    path = tmp_path / "labels" / "bdd100k_labels_images_train.json"
    frames = json.loads(path.read_text())
    frames[4]["name"] = "../../../home/user/.ssh/id_rsa"
    path.write_text(json.dumps(frames))
    with pytest.raises(ValueError, match=r"bdd100k_labels_images_train.json: frame 4, field 'name': path "
                                         r"'../../../home/user/.ssh/id_rsa' goes up with '..'"):
        read_bdd100k_attributes(path)


def test_confined_relative_path_normalizes_harmless_spellings():
    from fccolit.io.paths import confined_relative_path

    assert confined_relative_path("a//./b\\c.jpg", "/r", "f") == "a/b/c.jpg"
    assert confined_relative_path(b"x/y.jpg", "/r", "f") == "x/y.jpg"
    for bad in ("", ".", "..", "a/../b", "/a", "\\\\server\\share\\a", "D:a", "a\x00b"):
        with pytest.raises(ValueError, match=r"f: path .* data root /r"):
            confined_relative_path(bad, "/r", "f")
