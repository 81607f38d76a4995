"""The DataModules over Hugging Face ``datasets`` tables (fccolit.datamodules.hf): every source kind (Parquet, CSV,
JSON, a save_to_disk folder, an in-memory Dataset / DatasetDict), datasets' own Arrow cache, the column mappings of
each shape, the splits, the errors on bad input, and one short fit per shape with an algorithm that fits it.
Nothing is downloaded (HF_DATASETS_OFFLINE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

os.environ["HF_DATASETS_OFFLINE"] = "1"

import datasets  # noqa: E402
from lightning.pytorch import Trainer  # noqa: E402

from fccolit.algorithms import ADAP, ALEXR2, SONG, SOX  # noqa: E402
from fccolit.datamodules import (  # noqa: E402
    HFClassificationDataModule, HFGroupedDataModule, HFRankingDataModule, HFRecommendationDataModule,
    MovieLensDataModule,
)
from fccolit.io.hf import load_hf_dataset  # noqa: E402
from fccolit.metrics.functional import ap_score  # noqa: E402
from fccolit.models import MLP, LinearScorer  # noqa: E402
from fccolit.models.ltr import ListMLP  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.models.vision import ResNet20  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.objectives.constrained import ROCFairnessAUCObjective  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate  # noqa: E402
from fccolit.state import IndexedState  # noqa: E402
from fccolit.testing import write_movielens_csv  # noqa: E402
from fccolit.testing.hf import (  # noqa: E402
    write_binary_parquet, write_grouped_parquet, write_ltr_parquet, write_multilabel_parquet,
)

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _table(frame_or_path) -> pd.DataFrame:
    return pd.read_parquet(frame_or_path) if isinstance(frame_or_path, (str, Path)) else frame_or_path


def _all_rows(dm, split: str) -> dict[str, torch.Tensor]:
    dataset = {"train": dm.train_dataset, "val": dm.val_dataset, "test": dm.test_dataset}[split]
    return dataset.__getitems__(list(range(len(dataset))))


def _fit(module, dm, tmp_path, steps: int = 3) -> Trainer:
    trainer = Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, limit_val_batches=1, val_check_interval=steps,
                      check_val_every_n_epoch=None, default_root_dir=str(tmp_path))
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step >= 1
    assert all(torch.isfinite(p).all() for p in module.parameters())
    states = [m for m in module.modules() if isinstance(m, IndexedState)]
    assert states and all(bool(s.visited().any()) for s in states)  # the per-index state was written
    return trainer


# -------------------------------------------------------------------------------------------- binary
@pytest.fixture(scope="module")
def binary_file(tmp_path_factory):
    return write_binary_parquet(tmp_path_factory.mktemp("bin") / "a9a.parquet", num_rows=600, seed=3)


def test_binary_parquet_splits_partition_the_rows_stratified_and_batches_carry_the_rows(binary_file, tmp_path):
    frame = _table(binary_file)
    x_file = np.stack(frame["features"].to_numpy()).astype(np.float32)
    dm = HFClassificationDataModule(binary_file, label="label", features="features", val_fraction=0.1,
                                    test_fraction=0.2, batch_size=20, num_positives=5, cache_dir=tmp_path / "hf",
                                    feature_scaling="none")  # the file's values, to compare with it
    assert dm.label_values == (-1, 1) and not dm.multilabel
    positives = int((frame["label"] == 1).sum())  # 60
    assert dm.sizes == {"num_samples": 420, "num_positives": 42, "num_negatives": 378, "num_features": 10}
    dm.setup("fit")
    rows = {s: _all_rows(dm, s) for s in ("train", "val", "test")}
    assert {s: len(r["y"]) for s, r in rows.items()} == {"train": 420, "val": 60, "test": 120}
    assert {s: int(r["y"].sum()) for s, r in rows.items()} == {"train": 42, "val": 6, "test": 12}
    assert sum(int(r["y"].sum()) for r in rows.values()) == positives
    # the three splits together are the file's rows, each with its own label
    together = torch.cat([r["x"] for r in rows.values()]).numpy()
    labels = torch.cat([r["y"] for r in rows.values()]).numpy()
    order_file, order_split = np.lexsort(x_file.T), np.lexsort(together.T)
    np.testing.assert_array_equal(together[order_split], x_file[order_file])
    np.testing.assert_array_equal(labels[order_split], (frame["label"].to_numpy() == 1)[order_file])
    # binary_fields: pos_index numbers the split's positives, neg_index its negatives
    train = rows["train"]
    assert torch.equal(train["index"], torch.arange(420))
    assert torch.equal(train["pos_index"][train["y"] == 1], torch.arange(42))
    assert torch.equal(train["neg_index"][train["y"] == 0], torch.arange(378))
    batch = next(iter(dm.train_dataloader()))  # DualSampler: 5 positives then 15 negatives
    assert batch["y"].tolist() == [1] * 5 + [0] * 15 and batch["x"].dtype == torch.float32
    assert torch.equal(batch["x"], train["x"][batch["index"]])


def test_the_table_is_converted_once_into_datasets_cache_and_memory_mapped(binary_file, tmp_path):
    cache = tmp_path / "hf"
    first = HFClassificationDataModule(binary_file, label="label", features="features", cache_dir=cache)
    arrow = [Path(f["filename"]) for f in first.tables["train"].cache_files]
    assert arrow and all(cache in p.parents for p in arrow)
    stamps = {p: p.stat().st_mtime_ns for p in arrow}
    second = HFClassificationDataModule(binary_file, label="label", features="features", cache_dir=cache)
    assert [Path(f["filename"]) for f in second.tables["train"].cache_files] == arrow
    assert {p: p.stat().st_mtime_ns for p in arrow} == stamps  # read back, not rebuilt
    assert second.sizes == first.sizes


def test_positive_label_picks_the_class_and_strings_work(tmp_path):
    frame = pd.DataFrame({"a": np.arange(40, dtype=np.float32), "b": np.ones(40, np.float32),
                          "label": ["spam" if i % 4 == 0 else "ham" for i in range(40)]})
    path = tmp_path / "mail.csv"
    frame.to_csv(path, index=False)
    dm = HFClassificationDataModule(path, label="label", features=["a", "b"], positive_label="spam",
                                    val_fraction=0.25, test_fraction=0.25, batch_size=4, num_positives=1,
                                    cache_dir=tmp_path / "hf", feature_scaling="none")
    assert dm.label_values == ("ham", "spam")
    assert dm.sizes["num_positives"] == 5 and dm.sizes["num_features"] == 2
    dm.setup()
    train = _all_rows(dm, "train")
    # row i of the file: a = i; spam where i % 4 == 0
    assert torch.equal(train["y"], (train["x"][:, 0].long() % 4 == 0).long())
    assert torch.equal(train["x"][:, 1], torch.ones(len(train["y"])))


def test_named_splits_of_a_datasetdict_json_files_and_a_saved_folder_are_used_as_they_are(tmp_path):
    rng = np.random.default_rng(0)

    def part(n):
        return {"f": rng.normal(size=n).astype(np.float32).tolist(), "y": [int(i % 3 == 0) for i in range(n)]}

    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(part(30)),
                                   "validation": datasets.Dataset.from_dict(part(9)),
                                   "test": datasets.Dataset.from_dict(part(12))})
    splits.save_to_disk(str(tmp_path / "saved"))
    folder = tmp_path / "json"
    folder.mkdir()
    for name, table in splits.items():
        table.to_json(str(folder / f"{name}.jsonl"))
    for source in (splits, tmp_path / "saved", str(folder)):
        dm = HFClassificationDataModule(source, label="y", features="f", batch_size=4, num_positives=2,
                                        cache_dir=tmp_path / "hf", feature_scaling="none")
        assert {s: len(t) for s, t in dm.tables.items()} == {"train": 30, "val": 9, "test": 12}, source
        dm.setup()
        np.testing.assert_allclose(_all_rows(dm, "val")["x"][:, 0].numpy(), splits["validation"]["f"], rtol=1e-6)
    # validation as the test split: the validation split is then held out of training
    renamed = HFClassificationDataModule(splits, label="y", features="f", batch_size=4, num_positives=2,
                                         test_split="validation", val_fraction=0.1)
    assert {s: len(t) for s, t in renamed.tables.items()} == {"train": 27, "val": 3, "test": 9}


# ---------------------------------------------------------------------------------------- multi-label
def test_multilabel_columns_and_a_list_column_give_the_same_labels_with_unlabeled_entries(tmp_path):
    path = write_multilabel_parquet(tmp_path / "ml.parquet", num_rows=300, num_tasks=3, seed=1)
    frame = _table(path)
    columns = HFClassificationDataModule(path, label=["task0", "task1", "task2"], features=[f"f{j}" for j in range(8)],
                                         batch_size=12, num_positives=2, cache_dir=tmp_path / "hf")
    frame["tasks"] = list(frame[["task0", "task1", "task2"]].to_numpy())
    listed = HFClassificationDataModule(datasets.Dataset.from_pandas(frame), label="tasks",
                                        features=[f"f{j}" for j in range(8)], batch_size=12, num_positives=2)
    assert columns.multilabel and listed.multilabel
    for split in ("train", "val", "test"):
        assert torch.equal(columns.labels[split], listed.labels[split])
    labels = torch.cat([columns.labels[s] for s in ("train", "val", "test")])
    assert int((labels == -1).sum()) == int((frame[["task0", "task1", "task2"]] == -1).to_numpy().sum()) > 0
    assert columns.sizes["num_tasks"] == 3 and columns.sizes["num_outputs"] == 3 and columns.sizes["num_features"] == 8
    assert columns.sizes["num_positives"] == int((columns.labels["train"] == 1).sum())
    columns.setup()
    batch = next(iter(columns.train_dataloader()))  # K = 3 tasks × (2 positives + 2 negatives)
    assert batch["y"].view(3, 4).tolist() == [[1, 1, 0, 0]] * 3
    assert torch.equal(batch["y"], columns.labels["train"][batch["index"], batch["task"]])
    evaluation = _all_rows(columns, "val")
    assert evaluation["y"].shape == (len(columns.tables["val"]), 3)


# ---------------------------------------------------------------------------------------------- images
def test_an_image_column_becomes_normalized_batches_with_keyed_augmentation(tmp_path):
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, size=(24, 8, 8, 3), dtype=np.uint8)
    table = datasets.Dataset.from_dict(
        {"img": list(pixels), "y": [int(i % 4 == 0) for i in range(24)], "id": list(range(24))},
        features=datasets.Features({"img": datasets.Image(), "y": datasets.Value("int64"), "id": datasets.Value("int64")}),
    )
    dm = HFClassificationDataModule(table, label="y", image="img", batch_size=8, num_positives=2,
                                    val_fraction=0.25, test_fraction=0.25, image_mean=(0.5, 0.5, 0.5),
                                    image_std=(0.25, 0.25, 0.25), augment=True)
    assert "num_features" not in dm.sizes
    dm.setup()
    val = _all_rows(dm, "val")  # no augmentation outside training
    expected = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25
    assert val["x"].shape == (6, 3, 8, 8)
    torch.testing.assert_close(val["x"], expected[torch.tensor(dm.tables["val"]["id"])])
    arrays = HFClassificationDataModule(datasets.Dataset.from_dict({"img": list(pixels), "y": table["y"]}), label="y",
                                        image="img", batch_size=8, num_positives=2, val_fraction=0.25,
                                        test_fraction=0.25, image_mean=(0.5, 0.5, 0.5), image_std=(0.25, 0.25, 0.25))
    arrays.setup()  # a column of [H, W, C] arrays: the same batches as the decoded images
    assert torch.equal(_all_rows(arrays, "val")["x"], val["x"])
    loader = dm.train_dataloader()
    first, again = next(iter(loader)), next(iter(loader))
    assert torch.equal(first["x"], again["x"])  # crops and flips drawn from the batch's keys, not a global generator
    plain = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25
    train_ids = torch.tensor(dm.tables["train"]["id"])
    assert not torch.equal(first["x"], plain[train_ids[first["index"]]])  # augmented
    _fit(SOX(ResNet20(), AveragePrecisionSurrogate(), data_sizes=dm.sizes), dm, tmp_path, steps=2)


# -------------------------------------------------------------------------------------------- grouped
def test_grouped_string_groups_are_coded_and_every_split_holds_every_cell(tmp_path):
    path = write_grouped_parquet(tmp_path / "g.parquet", group_sizes=(300, 120), seed=4)
    frame = _table(path)
    dm = HFGroupedDataModule(path, features=[f"x{j}" for j in range(6)], label="label", group="group",
                             batch_size=32, paired=True, stratify_by_cell=True, cache_dir=tmp_path / "hf")
    assert dm.group_values.tolist() == ["group0", "group1"] and dm.sizes["num_groups"] == 2
    dm.setup()
    cells = 2 * frame["group"].map({"group0": 0, "group1": 1}).to_numpy() + frame["label"].to_numpy()
    counts = np.bincount(cells, minlength=4)
    for split, share in (("train", 0.8), ("val", 0.1), ("test", 0.1)):
        rows = _all_rows(dm, split)
        got = np.bincount((2 * rows["group"] + rows["y"]).numpy(), minlength=4)
        assert (np.abs(got - share * counts) <= 1).all(), (split, got, counts)
    batch = next(iter(dm.train_dataloader()))  # two stratified halves of 16: every cell in each
    for half in (slice(0, 16), slice(16, 32)):
        assert set((2 * batch["group"][half] + batch["y"][half]).tolist()) == {0, 1, 2, 3}
    module = ALEXR2(MLP(hidden=[8]), ROCFairnessAUCObjective(rho=10.0), data_sizes=dm.sizes, smoothing=2e-3, inner_lr=1e-2,
                    inner_steps=2, outer_normalization="fixed")
    _fit(module, dm, tmp_path)


def test_a_group_missing_from_training_is_an_error(tmp_path):
    table = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"x": [0.0, 1.0, 2.0, 3.0], "y": [0, 1, 0, 1], "g": ["a", "a", "b", "b"]}),
        "test": datasets.Dataset.from_dict({"x": [0.0, 1.0], "y": [0, 1], "g": ["a", "c"]}),
    })
    with pytest.raises(ValueError, match=r"column 'g': the test split has groups \['c'\]"):
        HFGroupedDataModule(table, features="x", label="y", group="g", val_fraction=0.0).sizes  # the data is read on first use


# -------------------------------------------------------------------------------------------- ranking
def test_ltr_lists_gather_a_querys_scattered_rows_and_hold_out_whole_queries(tmp_path):
    path = write_ltr_parquet(tmp_path / "ltr.parquet", num_queries=40, seed=5)
    frame = _table(path)
    dm = HFRankingDataModule(path, query="query", features="features", relevance="relevance", slate_length=12,
                             num_positives=3, queries_per_batch=4, cache_dir=tmp_path / "hf", feature_scaling="none")
    lists = dm.lists
    queries = {s: set(lists[s]["qid"].tolist()) for s in lists}
    assert (len(queries["train"]), len(queries["val"]), len(queries["test"])) == (32, 4, 4)
    assert not (queries["train"] & queries["val"]) and not (queries["train"] & queries["test"])
    assert set().union(*queries.values()) == set(frame["query"])
    for split, lst in lists.items():  # every query's list is exactly its rows of the file
        for k, q in enumerate(lst["qid"].tolist()):
            mine = frame[frame["query"] == q]
            span = slice(lst["indptr"][k], lst["indptr"][k + 1])
            np.testing.assert_array_equal(lst["features"][span], np.stack(mine["features"].to_numpy()))
            np.testing.assert_array_equal(lst["relevance"][span], mine["relevance"].to_numpy())
    assert dm.sizes == {"num_queries": 32, "num_features": 12, "num_pairs": int((lists["train"]["relevance"] > 0).sum())}
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["features"].shape == (4, 12, 12)
    relevant = batch["pair_index"] >= 0
    assert torch.equal(relevant, (batch["relevance"] > 0) & batch["mask"])
    module = SONG(ListMLP(hidden=[16]), NDCGSurrogate(), data_sizes=dm.sizes, metrics=["ndcg@5"])
    _fit(module, dm, tmp_path)


def test_recommendation_from_a_csv_equals_the_movielens_datamodule_on_the_same_file(tmp_path):
    write_movielens_csv(tmp_path / "ml", num_users=30, num_items=60, seed=6)
    csv = tmp_path / "ml" / "ratings.csv"
    options = dict(num_negatives=10, queries_per_batch=4, num_positives=3)
    hf = HFRecommendationDataModule(csv, user="userId", item="movieId", rating="rating", time="timestamp",
                                    cache_dir=tmp_path / "hf", **options)
    ml = MovieLensDataModule(tmp_path / "ml", cache_dir=tmp_path / "ml-cache", **options)
    assert hf.sizes == ml.sizes
    for key in (k for k in ml._arrays if not k.endswith("_raw")):  # _raw: codes of the ids here, see user_ids
        np.testing.assert_array_equal(np.asarray(hf._arrays[key]), np.asarray(ml._arrays[key]), err_msg=key)
    np.testing.assert_array_equal(hf.user_ids, ml.user_ids)
    np.testing.assert_array_equal(hf.item_ids, ml.item_ids)
    # string ids and no time column: ids are kept, each user's last rows in table order are held out
    frame = pd.read_csv(csv)
    frame["userId"] = "u" + frame["userId"].astype(str)
    named = HFRecommendationDataModule(datasets.Dataset.from_pandas(frame), user="userId", item="movieId",
                                       rating="rating", **options)
    assert set(named.user_ids) == set(frame["userId"]) and named.sizes["num_users"] == 30
    last = frame.groupby("userId").tail(1)
    test_items = np.asarray(named._arrays["test_items"])
    index_of = {u: k for k, u in enumerate(named.user_ids)}
    item_of = {i: k for k, i in enumerate(named.item_ids)}
    indptr = np.asarray(named._arrays["test_indptr"])
    for user, item in zip(last["userId"], last["movieId"]):
        k = index_of[user]
        assert test_items[indptr[k]:indptr[k + 1]].tolist() == [item_of[item]]
    hf.setup()
    module = SONG(NeuMF(embedding_dim=8, layers=[8]), NDCGSurrogate(), data_sizes=hf.sizes, metrics=["ndcg@10"])
    _fit(module, hf, tmp_path)


# ----------------------------------------------------------------------------------- fits on the other shapes
def _val_ap(module, dm) -> list[float]:
    """Each task's AP of the module's scores on the DataModule's validation split (one entry for binary labels;
    multi-label: the labeled rows of each task)."""
    rows = _all_rows(dm, "val")
    with torch.no_grad():
        scores = module(rows)
    y = rows["y"]
    if y.dim() == 1:
        return [float(ap_score(scores.reshape(-1), y))]
    return [float(ap_score(scores[y[:, t] >= 0, t], y[y[:, t] >= 0, t])) for t in range(y.shape[1])]


def test_sox_and_multilabel_adap_learn_on_the_parquet_datamodules(binary_file, tmp_path):
    """Training on the DataModules' batches improves the validation AP well beyond the untrained model's: SOX on the
    binary table (10% positives) from 0.14 to 0.58 in 60 steps, ADAP on the three-task table on every task."""
    binary = HFClassificationDataModule(binary_file, label="label", features="features", batch_size=20,
                                        num_positives=5, cache_dir=tmp_path / "hf")
    torch.manual_seed(0)
    module = SOX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=binary.sizes)
    binary.setup("fit")
    (before,) = _val_ap(module, binary)
    _fit(module, binary, tmp_path, steps=60)
    (after,) = _val_ap(module, binary)
    assert before < 0.2 and after > 0.5, (before, after)  # base rate 0.1
    path = write_multilabel_parquet(tmp_path / "ml.parquet", num_rows=300, num_tasks=3, seed=1)
    multi = HFClassificationDataModule(path, label=["task0", "task1", "task2"], features=[f"f{j}" for j in range(8)],
                                       batch_size=12, num_positives=2, cache_dir=tmp_path / "hf")
    torch.manual_seed(0)
    module = ADAP(MLP(hidden=[8], out_features=3), AveragePrecisionSurrogate(project=True), data_sizes=multi.sizes,
                  ema_weight=0.02)
    multi.setup("fit")
    before = _val_ap(module, multi)
    _fit(module, multi, tmp_path, steps=100)
    after = _val_ap(module, multi)
    assert all(a > b + 0.1 for a, b in zip(after, before)), (before, after)
    assert np.mean(after) > np.mean(before) + 0.12, (before, after)


# ---------------------------------------------------------------------------------------------- errors
def test_bad_input_names_the_source_the_split_and_the_column(tmp_path, binary_file):
    with pytest.raises(ValueError, match=r"a9a\.parquet' \(train split\): no column 'lable'; the columns are "
                                         r"\['features', 'label'\]"):
        HFClassificationDataModule(binary_file, label="lable", features="features", cache_dir=tmp_path / "hf").sizes  # the data is read on first use
    with pytest.raises(ValueError, match=r"positive_label=2 is not one of the labels \[-1, 1\]"):
        HFClassificationDataModule(binary_file, label="label", features="features", positive_label=2,
                                   cache_dir=tmp_path / "hf").sizes  # the data is read on first use
    three = datasets.Dataset.from_dict({"x": [0.0, 1.0, 2.0], "y": [0, 1, 2]})
    with pytest.raises(ValueError, match=r"column 'y': a binary label column needs exactly two values .* found 3"):
        HFClassificationDataModule(three, label="y", features="x").sizes  # the data is read on first use
    holes = datasets.Dataset.from_dict({"x": [0.0, None, 2.0, 3.0], "y": [0, 1, 0, 1]})
    with pytest.raises(ValueError, match=r"column 'x' has 1 missing values"):
        HFClassificationDataModule(holes, label="y", features="x").sizes  # the data is read on first use
    with pytest.raises(ValueError, match=r"no split 'dev' \(val_split\); the splits are \['train'\]"):
        HFClassificationDataModule(three, label="y", features="x", val_split="dev").sizes  # the data is read on first use
    with pytest.raises(FileNotFoundError, match=r"no data file or folder at .*missing\.parquet"):
        HFClassificationDataModule(tmp_path / "missing.parquet", label="y", features="x").sizes  # the data is read on first use
    with pytest.raises(ValueError, match=r"'no-such-user/no-such-set' is neither a local file or folder nor a "
                                         r"loadable Hub data set"):
        load_hf_dataset("no-such-user/no-such-set", cache_dir=tmp_path / "hf")
    with pytest.raises(ValueError, match=r"either features= \(columns\) or image="):
        HFClassificationDataModule(three, label="y")
    with pytest.raises(ValueError, match=r"row 1, column 'rel': relevance -1\.0 is not a grade; relevance labels must be "
                                         r"finite and >= 0 integers up to 24"):
        HFRankingDataModule(datasets.Dataset.from_dict({"q": [1, 1, 2, 2], "x": [0.0] * 4, "rel": [1.0, -1.0, 0, 1]}),
                            query="q", features="x", relevance="rel", val_fraction=0.0, test_fraction=0.0,
                            test_split="train").sizes  # the data is read on first use


# ------------------------------------------------------------------------- the a9a command of the binary config
@pytest.mark.skipif(not (SHARED_DATA / "libsvm-a9a" / "a9a").is_file(), reason="needs ../shared/data/libsvm-a9a")
def test_the_configs_a9a_command_writes_a_parquet_the_datamodule_reads(tmp_path):
    header = (Path(__file__).resolve().parents[2] / "configs" / "hf" / "sox_binary.yaml").read_text()
    command = next(line for line in header.splitlines() if "python -c" in line).split("python -c ", 1)[1].strip()
    (tmp_path / "data").mkdir()
    os.symlink(SHARED_DATA / "libsvm-a9a" / "a9a", tmp_path / "a9a")
    subprocess.run([sys.executable, "-c", command.strip('"')], cwd=tmp_path, check=True)
    dm = HFClassificationDataModule(tmp_path / "data" / "a9a.parquet", label="label", features="features",
                                    cache_dir=tmp_path / "hf")
    assert dm.label_values == (-1.0, 1.0)
    assert dm.sizes["num_features"] == 123
    assert sum(len(t) for t in dm.tables.values()) == 32561  # a9a's rows


# ------------------------------------------------------------------------------------------------- README
def test_the_readme_five_lines_run_as_written(tmp_path, monkeypatch):
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Your own data in five lines", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    pd.DataFrame({"f0": x[:, 0], "f1": x[:, 1], "f2": x[:, 2],
                  "label": (x[:, 0] + 0.3 * rng.normal(size=300) > 1.0).astype(int)}).to_parquet(tmp_path / "my_table.parquet")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # datasets' default cache, here
    namespace: dict = {}
    exec(block, namespace)
    assert namespace["model"].state.visited().any() and namespace["data"].sizes["num_features"] == 3
    assert any((tmp_path / "hf").rglob("*.arrow"))
