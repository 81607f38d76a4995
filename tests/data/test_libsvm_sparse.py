"""LibSVMDataModule's sparse layout: the same batches as the dense one, the automatic choice, its errors, and every
LIBSVM config training on it (float64: the same trajectory as the dense layout)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fccolit.cli import main
from fccolit.datamodules import LibSVMDataModule
from fccolit.datamodules.libsvm import AUTO_DENSE_MAX_BYTES, choose_layout
from fccolit.io.csr import take_rows
from fccolit.testing import write_libsvm

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LIBSVM_CONFIGS = sorted((CONFIGS / "libsvm").glob("*.yaml"))


def test_take_rows_matches_slicing_each_row():
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 4, size=10)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.normal(size=int(indptr[-1]))
    rows = np.array([9, 0, 0, 5, 2])
    new_indptr, positions = take_rows(indptr, rows)
    expected = [values[indptr[r] : indptr[r + 1]] for r in rows]
    np.testing.assert_array_equal(np.diff(new_indptr), [e.size for e in expected])
    np.testing.assert_array_equal(values[positions], np.concatenate(expected))
    assert take_rows(indptr, np.zeros(0, dtype=np.int64))[1].size == 0


def test_auto_layout_is_dense_for_small_or_dense_files_and_sparse_for_wide_sparse_ones():
    assert choose_layout(48_842, 123, 48_842 * 14) == "dense"  # a9a + a9a.t: 24 MB dense
    assert choose_layout(20_000, 1_360_000, int(20_000 * 1_360_000 * 3e-4)) == "sparse"  # news20.binary: 109 GB dense
    assert choose_layout(400_000, 2_000, 400_000 * 2_000) == "dense"  # epsilon: 3.2 GB, but every value stored
    rows = AUTO_DENSE_MAX_BYTES // (4 * 1000)
    assert choose_layout(rows, 1000, 10) == "dense" and choose_layout(rows + 1, 1000, 10) == "sparse"  # the 1 GiB edge


@pytest.fixture
def toy(tmp_path):
    write_libsvm(tmp_path, "toy", rows=300, test_rows=120)
    return tmp_path


def _module(root: Path, **kw) -> LibSVMDataModule:
    dm = LibSVMDataModule(root, "toy", cache_dir=root / "cache", batch_size=20, num_positives=8, **kw)
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("normalize", [None, "minmax"])
def test_sparse_layout_gives_the_dense_batches(toy, normalize):
    dense, sparse = _module(toy, layout="dense", normalize=normalize), _module(toy, layout="sparse", normalize=normalize)
    assert (dense.layout, sparse.layout, _module(toy).layout) == ("dense", "sparse", "dense")  # auto: small, dense
    assert dense.sizes == sparse.sizes
    loaders = [(dense.train_dataloader(), sparse.train_dataloader()), (dense.val_dataloader(), sparse.val_dataloader()),
               (dense.test_dataloader(), sparse.test_dataloader())]
    for dense_loader, sparse_loader in loaders:
        for d, s in zip(dense_loader, sparse_loader, strict=True):
            assert s["x"].layout == torch.sparse_csr and s["x"].dtype == torch.float32
            assert torch.equal(s["x"].to_dense(), d["x"])
            assert s.keys() == d.keys() and all(torch.equal(s[k], d[k]) for k in d if k != "x")


def test_sparse_minmax_needs_zero_minima_and_standard_is_refused(tmp_path):
    (tmp_path / "neg").write_text("+1 1:0.5 2:-2\n-1 1:1 3:4\n+1 2:3\n-1 3:1\n" * 5)
    with pytest.raises(ValueError, match=r"neg: normalize='minmax' with the sparse layout .* feature 2 has minimum -2 "
                                         r"\(1 features in all\): pass layout='dense'"):
        LibSVMDataModule(tmp_path, "neg", layout="sparse", normalize="minmax", batch_size=4, num_positives=2,
                         cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="normalize='standard' subtracts each feature's mean"):
        LibSVMDataModule(tmp_path, "neg", layout="sparse", normalize="standard", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="layout must be one of 'auto', 'dense', 'sparse', got 'csr'"):
        LibSVMDataModule(tmp_path, "neg", layout="csr", cache_dir=tmp_path / "cache")


def _fit(config: Path, data: Path, tmp_path: Path, *extra: str):
    return main(["fit", "--config", str(config), "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
                 "--trainer.default_root_dir", str(tmp_path), "--data.init_args.root", str(data),
                 "--data.init_args.name", "toy", *extra])


@pytest.mark.parametrize("config", LIBSVM_CONFIGS, ids=lambda p: p.name)
def test_every_libsvm_config_trains_on_sparse_batches(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_libsvm(tmp_path, "toy", rows=800, test_rows=120)  # about 200 training positives: a batch of 100 fits
    result = _fit(config, tmp_path, tmp_path, "--trainer.fast_dev_run", "2", "--data.init_args.layout", "sparse")
    assert result.datamodule.layout == "sparse"
    assert result.trainer.fit_loop.epoch_loop.batch_progress.total.completed == 2
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    assert {f"val/{m}" for m in result.model.metric_names} <= set(result.trainer.callback_metrics)


def test_sox_follows_the_same_trajectory_on_sparse_and_dense_batches_in_float64(tmp_path, monkeypatch):
    """SOX on configs/libsvm/sox_ap.yaml for 12 steps in float64: weights and per-index state agree."""
    monkeypatch.chdir(tmp_path)
    write_libsvm(tmp_path, "toy", rows=400, test_rows=60)
    runs = {}
    for layout in ("dense", "sparse"):
        result = _fit(CONFIGS / "libsvm" / "sox_ap.yaml", tmp_path, tmp_path / layout, "--trainer.max_steps", "12",
                      "--trainer.val_check_interval", "6", "--trainer.precision", "64-true",
                      "--model.init_args.state_dtype", "float64", "--data.init_args.layout", layout)
        assert result.datamodule.layout == layout
        runs[layout] = (result.model.model.net.weight.detach(), result.model.state.values().detach())
    (w_dense, u_dense), (w_sparse, u_sparse) = runs["dense"], runs["sparse"]
    assert w_dense.dtype == torch.float64 and not torch.equal(w_dense, torch.zeros_like(w_dense))
    torch.testing.assert_close(w_sparse, w_dense, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(u_sparse, u_dense, rtol=1e-10, atol=1e-12, equal_nan=True)
