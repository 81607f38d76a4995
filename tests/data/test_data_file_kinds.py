"""A data file that is there but is no regular file (issue 25, item 15): a symbolic link loop, or a link to
``/dev/zero``, is named for what it is by every DataModule that looks for its files, never reported as "not found"
by a message that lists the same file as present (and a device is never opened: reading ``/dev/zero`` never ends).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_DATASETS_OFFLINE"] = "1"

from fccolit.datamodules import (  # noqa: E402
    FairnessDataModule, HFClassificationDataModule, LibSVMDataModule, MovieLensDataModule, MSLRDataModule,
)
from fccolit.io.paths import data_file_problem, is_data_file  # noqa: E402
from fccolit.testing import write_adult_files, write_libsvm, write_movielens_csv, write_mslr_fold  # noqa: E402
from fccolit.testing.hf import write_binary_parquet  # noqa: E402


def _libsvm(root: Path, tmp_path: Path):
    write_libsvm(root, name="toy")
    return root / "toy", lambda: LibSVMDataModule(root, "toy", cache_dir=tmp_path / "cache")


def _movielens(root: Path, tmp_path: Path):
    write_movielens_csv(root)
    return root / "ratings.csv", lambda: MovieLensDataModule(root, cache_dir=tmp_path / "cache")


def _mslr(root: Path, tmp_path: Path):
    write_mslr_fold(root, num_features=5)
    return root / "Fold1" / "vali.txt", lambda: MSLRDataModule(root, cache_dir=tmp_path / "cache")


def _adult(root: Path, tmp_path: Path):
    write_adult_files(root, 60, 30)
    return root / "adult.test", lambda: FairnessDataModule(root, cache_dir=tmp_path / "cache")


def _hf(root: Path, tmp_path: Path):
    write_binary_parquet(root / "train.parquet", num_rows=100)
    return root / "table.parquet", lambda: HFClassificationDataModule(root / "table.parquet", label="label",
                                                                       features="features",
                                                                       cache_dir=tmp_path / "hf").sizes  # read on use


@pytest.mark.parametrize("make", [_libsvm, _movielens, _mslr, _adult, _hf], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("fault", ["loop", "dev_zero"])
def test_a_link_loop_or_a_device_is_named_for_what_it_is(tmp_path, make, fault):
    root = tmp_path / "data"
    root.mkdir()
    path, build = make(root, tmp_path)
    if path.exists():
        path.unlink()
    if fault == "loop":
        os.symlink(path.name + ".other", path)
        os.symlink(path.name, path.with_name(path.name + ".other"))
        expected = r"is a symbolic link loop \(it points to .*, which leads back to itself\)"
    else:
        os.symlink("/dev/zero", path)
        expected = r"is not a regular file \(a character device, through the symbolic link to '/dev/zero'\)"
    with pytest.raises(ValueError, match=rf"{path.name} {expected}: ") as raised:
        build()
    assert "not found" not in str(raised.value)




def test_data_file_problem_says_what_is_there(tmp_path):
    (tmp_path / "file").write_text("x")
    os.symlink("file", tmp_path / "link")
    os.symlink("nowhere", tmp_path / "dangling")
    (tmp_path / "folder").mkdir()
    assert data_file_problem(tmp_path / "file") is None and data_file_problem(tmp_path / "link") is None
    assert data_file_problem(tmp_path / "absent") is None and not is_data_file(tmp_path / "absent")
    assert data_file_problem(tmp_path / "dangling") == "is a broken symbolic link (to 'nowhere', which does not exist)"
    assert data_file_problem(tmp_path / "folder") == "is a folder, not a file"
    os.mkfifo(tmp_path / "pipe")
    assert data_file_problem(tmp_path / "pipe") == "is not a regular file (a named pipe (FIFO))"
    with pytest.raises(ValueError, match=r"MovieLens ratings file .*pipe is not a regular file"):
        is_data_file(tmp_path / "pipe", "MovieLens ratings file")
