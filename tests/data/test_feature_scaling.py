"""Feature scaling of the Hugging Face DataModules (``feature_scaling``; :mod:`fccolit.datasets.scaling`): the
statistics of the training split only, standard by default, min-max or none on request, constant columns shifted
and never divided by zero; the statistics in the checkpoint, so ``test`` and a resume apply the run's transform
even when the data would give other statistics now, and rank 0's under DDP. Nothing is downloaded."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch

os.environ["HF_DATASETS_OFFLINE"] = "1"

from lightning.pytorch import Trainer  # noqa: E402

from fccolit.algorithms import SOX  # noqa: E402
from fccolit.datamodules import HFClassificationDataModule, HFGroupedDataModule, HFRankingDataModule  # noqa: E402
from fccolit.datasets.scaling import FeatureScaler  # noqa: E402
from fccolit.models import LinearScorer  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.testing.hf import write_grouped_parquet, write_ltr_parquet  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _rows(dataset) -> dict[str, torch.Tensor]:
    return dataset.__getitems__(list(range(len(dataset))))


@pytest.fixture(scope="module")
def raw_table(tmp_path_factory):
    """Scalar columns on very different scales, as a user's table has them: ``area`` in the thousands, ``count``
    integers, ``flag`` constant (0 everywhere), ``small`` around 1e-3; the label follows ``area``."""
    rng = np.random.default_rng(7)
    n = 400
    area = rng.normal(1500.0, 400.0, n)
    frame = pd.DataFrame({"area": area, "count": rng.integers(0, 40, n), "flag": np.zeros(n),
                          "small": rng.normal(1e-3, 2e-4, n),
                          "label": (area + rng.normal(0, 300.0, n) > 1900).astype(int)})
    path = tmp_path_factory.mktemp("raw") / "raw.parquet"
    frame.to_parquet(path, index=False)
    return path


COLUMNS = ["area", "count", "flag", "small"]


def _dm(path, tmp_path, **kw) -> HFClassificationDataModule:
    options = dict(label="label", features=COLUMNS, batch_size=16, num_positives=4, cache_dir=tmp_path / "hf")
    return HFClassificationDataModule(path, **{**options, **kw})


def _raw(dm, split: str) -> np.ndarray:
    return np.stack([np.asarray(dm.tables[split][c], dtype=np.float64) for c in COLUMNS], axis=1)


def test_the_scaler_equals_numpy_over_chunks_and_keeps_constant_columns_finite():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(1e4, 3.0, (1000, 1)), rng.integers(0, 17, (1000, 1)), np.full((1000, 1), 0.1)], 1)
    one = FeatureScaler.fit("standard", [x])
    chunked = FeatureScaler.fit("standard", (x[i : i + 64] for i in range(0, 1000, 64)))  # Chan's merge
    np.testing.assert_allclose(chunked.shift.numpy(), x.mean(0), rtol=1e-13)
    np.testing.assert_allclose(chunked.scale.numpy()[:2], x.std(0)[:2], rtol=1e-10)
    np.testing.assert_allclose(one.scale.numpy()[:2], x.std(0)[:2], rtol=1e-12)
    assert chunked.scale[2] == np.inf and one.scale[2] == np.inf  # constant (min == max): 0, never divided by 0
    scaled = chunked(torch.from_numpy(x))
    assert scaled.dtype == torch.float32 and torch.isfinite(scaled).all()
    np.testing.assert_allclose(scaled[:, :2].mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(scaled[:, :2].std(0, unbiased=False).numpy(), 1.0, rtol=1e-5)
    assert float(scaled[:, 2].abs().max()) == 0.0
    assert float(chunked(torch.tensor([[1e4, 3.0, 7.0]]))[0, 2]) == 0.0  # another value in another split: 0 too
    minmax = FeatureScaler.fit("minmax", (x[i : i + 100] for i in range(0, 1000, 100)))
    y = minmax(torch.from_numpy(x))
    assert float(y[:, :2].min()) == 0.0 and float(y[:, :2].max()) == 1.0 and float(y[:, 2].abs().max()) == 0.0
    assert FeatureScaler.fit("none", [x])(torch.from_numpy(x)).equal(torch.from_numpy(x).float())
    with pytest.raises(ValueError, match="feature_scaling must be one of 'standard', 'minmax', 'none', got 'zscore'"):
        FeatureScaler.fit("zscore", [x])


def test_standard_by_default_from_the_training_split_only_minmax_and_none_on_request(raw_table, tmp_path):
    dm = _dm(raw_table, tmp_path)
    assert dm.feature_scaling == "standard" and dm.feature_scaler.kind == "standard"
    dm.setup()
    train_raw = _raw(dm, "train")
    mean, std = train_raw.mean(0), train_raw.std(0)
    std[2] = np.inf  # the constant column: 0 everywhere
    for split in ("train", "val", "test"):  # every split with the training split's statistics
        x = _rows(getattr(dm, f"{split}_dataset"))["x"]
        expected = ((_raw(dm, split) - mean) / std).astype(np.float32)
        np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6, atol=1e-6, err_msg=split)
    x = _rows(dm.train_dataset)["x"]
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(0, unbiased=False).numpy(), [1, 1, 0, 1], atol=1e-5)
    assert dm.sizes["num_features"] == 4
    batch = next(iter(dm.train_dataloader()))  # batches read scaled rows too
    assert torch.equal(batch["x"], x[batch["index"]])

    minmax = _dm(raw_table, tmp_path, feature_scaling="minmax")
    minmax.setup()
    x = _rows(minmax.train_dataset)["x"]
    assert torch.equal(x.min(0).values, torch.tensor([0.0, 0.0, 0.0, 0.0])) and float(x[:, [0, 1, 3]].max()) == 1.0
    none = _dm(raw_table, tmp_path, feature_scaling="none")
    none.setup()
    assert torch.equal(_rows(none.train_dataset)["x"], torch.from_numpy(_raw(none, "train")).float())
    with pytest.raises(ValueError, match="HFClassificationDataModule: feature_scaling must be one of"):
        _dm(raw_table, tmp_path, feature_scaling="zscore")


def test_grouped_and_ranking_tables_are_scaled_from_their_training_split(tmp_path):
    grouped_path = write_grouped_parquet(tmp_path / "grouped.parquet", group_sizes=(150, 90), num_features=3)
    frame = pd.read_parquet(grouped_path)
    frame["x0"] = frame["x0"] * 1000 + 5000  # one column far from unit scale
    frame.to_parquet(grouped_path, index=False)
    grouped = HFGroupedDataModule(grouped_path, features=["x0", "x1", "x2"], label="label", group="group",
                                  batch_size=32, samples_per_group=16, cache_dir=tmp_path / "hf")
    grouped.setup()
    x = _rows(grouped.train_dataset)["x"]
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(0, unbiased=False).numpy(), 1.0, rtol=1e-5)

    ltr_path = write_ltr_parquet(tmp_path / "ltr.parquet", num_queries=30, seed=2)
    raw = HFRankingDataModule(ltr_path, query="query", features="features", relevance="relevance",
                              feature_scaling="none", cache_dir=tmp_path / "hf")
    ranking = HFRankingDataModule(ltr_path, query="query", features="features", relevance="relevance",
                                  cache_dir=tmp_path / "hf")
    train_raw = raw.lists["train"]["features"].astype(np.float64)
    mean, std = train_raw.mean(0), train_raw.std(0)
    for split in ("train", "val", "test"):
        np.testing.assert_allclose(ranking.lists[split]["features"],
                                   (raw.lists[split]["features"] - mean) / std, rtol=1e-5, atol=1e-5)


def _fit_and_save(dm, tmp_path, steps: int = 4) -> str:
    module = SOX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=dm.sizes, metrics=["ap"])
    trainer = Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, limit_val_batches=0, default_root_dir=str(tmp_path))
    trainer.fit(module, datamodule=dm)
    path = str(tmp_path / "run.ckpt")
    trainer.save_checkpoint(path)
    return path


def test_the_statistics_travel_with_the_checkpoint_to_test_and_a_resume(raw_table, tmp_path):
    dm = _dm(raw_table, tmp_path, seed=0)
    path = _fit_and_save(dm, tmp_path)
    saved = torch.load(path, weights_only=True)["HFClassificationDataModule"]["feature_scaling"]
    assert saved["kind"] == "standard" and torch.equal(saved["shift"], dm.feature_scaler.shift)
    # another held-out split: the training rows, and so the statistics computed now, differ from the run's
    other = _dm(raw_table, tmp_path, seed=1)
    assert not other.feature_scaler.same_as(dm.feature_scaler)
    module = SOX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=other.sizes, metrics=["ap"])
    tester = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    tester.test(module, datamodule=other, ckpt_path=path, verbose=False)
    assert other.feature_scaler.same_as(dm.feature_scaler)
    x = _rows(other.test_dataset)["x"]
    expected = dm.feature_scaler(torch.from_numpy(_raw(other, "test")))
    assert torch.equal(x, expected)  # exactly the run's transform
    # a resumed fit restores them too, on a table whose values changed since (statistics of its own now)
    frame = pd.read_parquet(raw_table)
    frame["area"] *= 1.01
    edited = tmp_path / "edited.parquet"
    frame.to_parquet(edited, index=False)
    resumed = _dm(edited, tmp_path, seed=0)
    assert not resumed.feature_scaler.same_as(dm.feature_scaler)
    module = SOX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=resumed.sizes, metrics=["ap"])
    trainer = Trainer(accelerator="cpu", max_steps=6, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, datamodule=resumed, ckpt_path=path)
    assert trainer.global_step == 6 and resumed.feature_scaler.same_as(dm.feature_scaler)
    for split in ("train", "val"):
        x = _rows(getattr(resumed, f"{split}_dataset"))["x"]
        assert torch.equal(x, dm.feature_scaler(torch.from_numpy(_raw(resumed, split))))


def test_ranking_statistics_from_a_checkpoint_rescale_the_lists(tmp_path):
    path = write_ltr_parquet(tmp_path / "ltr.parquet", num_queries=30, seed=2)
    options = dict(query="query", features="features", relevance="relevance", cache_dir=tmp_path / "hf")
    first, second = HFRankingDataModule(path, seed=0, **options), HFRankingDataModule(path, seed=1, **options)
    raw = HFRankingDataModule(path, seed=1, feature_scaling="none", **options)
    second.setup()
    before = second.train_dataset
    second.load_state_dict(first.state_dict())
    assert second.feature_scaler.same_as(first.feature_scaler) and second.train_dataset is not before
    for split in ("train", "val", "test"):
        expected = first.feature_scaler.transform_numpy(raw.lists[split]["features"])
        np.testing.assert_array_equal(second.lists[split]["features"], expected)
    np.testing.assert_array_equal(second.train_dataset.x, second.lists["train"]["features"])


def test_checkpoints_without_statistics_of_another_width_or_kind_are_said(raw_table, tmp_path):
    dm = _dm(raw_table, tmp_path)
    dm.setup()
    with pytest.warns(UserWarning, match="holds no feature statistics .* unscaled features"):
        dm.load_state_dict({"train_sampler": {"epoch": 0, "batches_consumed": 1}})  # written before scaling
    assert dm.feature_scaler.kind == "none"
    assert torch.equal(_rows(dm.val_dataset)["x"], torch.from_numpy(_raw(dm, "val")).float())
    minmax = _dm(raw_table, tmp_path, feature_scaling="minmax")
    with pytest.warns(UserWarning, match="scaled its features 'minmax', configured feature_scaling='standard'"):
        dm.load_state_dict(minmax.state_dict())
    assert dm.feature_scaler.same_as(minmax.feature_scaler)
    narrow = _dm(raw_table, tmp_path, features=["area", "count"])
    with pytest.raises(ValueError, match="the checkpoint scales 2 features, the data has 4"):
        dm.load_state_dict(narrow.state_dict())


class _Strategy:
    def __init__(self, state):
        self.state, self.calls = state, 0

    def broadcast(self, obj, src=0):
        assert src == 0
        self.calls += 1
        return self.state


class _Trainer:
    """What ``share_feature_scaling`` reads of a DDP trainer: its world size and the strategy's broadcast (here
    rank 1's view: it receives rank 0's statistics)."""

    world_size, limit_val_batches = 2, 1

    def __init__(self, state):
        self.strategy = _Strategy(state)


def test_under_ddp_every_rank_takes_rank_0s_statistics(raw_table, tmp_path):
    rank0 = _dm(raw_table, tmp_path, seed=0)
    rank1 = _dm(raw_table, tmp_path, seed=1)  # as if this rank had read other rows
    assert not rank1.feature_scaler.same_as(rank0.feature_scaler)
    rank1.trainer = _Trainer(rank0.feature_scaler.state_dict())
    rank1.setup("fit")
    assert rank1.trainer.strategy.calls == 1 and rank1.feature_scaler.same_as(rank0.feature_scaler)
    assert torch.equal(_rows(rank1.train_dataset)["x"], rank0.feature_scaler(torch.from_numpy(_raw(rank1, "train"))))
