"""Image DataModules (CIFAR-LT, CheXpert, BDD100K) on generated files in each exact format, the real BDD100K
labels sample, the multi-label sampler, and one-epoch Trainer runs (SOX + AveragePrecisionSurrogate) plus the configs."""

from __future__ import annotations

import csv
import itertools
import json
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer

import fccolit.datamodules.cifar as cifar_module
import fccolit.io.chexpert as chexpert_module
from fccolit.algorithms.sox import SOX
from fccolit.datamodules.bdd100k import ATTRIBUTE_VALUES, BDD100KDataModule, class_prompts
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.datamodules.cifar import CIFARLTDataModule, long_tail_counts, long_tail_indices
from fccolit.datasets.images import random_crop_flip
from fccolit.io.bdd100k import read_bdd100k_attributes
from fccolit.io.chexpert import apply_uncertainty, read_chexpert_csv
from fccolit.io.cifar import read_cifar_batch
from fccolit.metrics.functional import ap_score
from fccolit.models.vision import ResNet20
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.optim import Momentum
from fccolit.samplers.multilabel import (
    MultiLabelPairDataset,
    MultiLabelSampler,
    multilabel_pair_tables,
    multilabel_sizes,
)

from fccolit.testing import (
    cifar_arrays as _cifar_arrays, write_bdd100k, write_chexpert, write_chexpert_csv, write_cifar,
)
from builders import CIFAR10_NAMES, SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
BDD_SAMPLE = SHARED_DATA / "bdd100k-labels-sample" / "unitest_val_bdd.json"
CIFAR_MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
CIFAR_STD = torch.tensor([0.2023, 0.1994, 0.2010]).view(3, 1, 1)


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory):
    """CIFAR-10 in the released format with 500 training images per class (a tenth of the real size)."""
    root = tmp_path_factory.mktemp("cifar")
    arrays = _cifar_arrays(500, 10, 20)
    write_cifar(root, *arrays, class_names=CIFAR10_NAMES)
    return root, arrays


@pytest.fixture(scope="module")
def chexpert_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("chexpert")
    write_chexpert(root, num_patients=16, num_valid_patients=4, image_size=(78, 64), seed=1)
    return root


def _fit_one_epoch(model, dm, tmp_path):
    trainer = Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=dm)
    return trainer


# ---------------------------------------------------------------------------------------------- CIFAR: format
@pytest.mark.parametrize("key_style", ["python2", "bytes", "str"])
def test_cifar_pickles_in_every_key_style_read_back_exactly(tmp_path, key_style):
    train, train_y, test, test_y = _cifar_arrays(3, 10, 2, seed=5)
    folder = write_cifar(tmp_path, train, train_y, test, test_y, class_names=CIFAR10_NAMES, key_style=key_style)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    )
    images = np.concatenate([read_cifar_batch(folder / f"data_batch_{i}")[0] for i in range(1, 6)])
    labels = np.concatenate([read_cifar_batch(folder / f"data_batch_{i}")[1] for i in range(1, 6)])
    np.testing.assert_array_equal(images, train)
    np.testing.assert_array_equal(labels, train_y)
    # the raw record: [n, 3072] uint8 rows of 1024 R, 1024 G, 1024 B values (row-major 32×32 planes)
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    data_key = b"data" if key_style != "str" else "data"
    data = raw[data_key]
    assert data.dtype == np.uint8 and data.shape == (6, 3072)  # 30 images in five batches
    assert data[0, 1024 + 5 * 32 + 7] == train[0, 5, 7, 1]  # green plane, row 5, column 7
    if key_style == "python2":  # the released files: Python 2 strings
        assert (folder / "data_batch_1").read_bytes()[:2] == b"\x80\x02"
        with open(folder / "data_batch_1", "rb") as f:
            assert set(pickle.load(f, encoding="latin1")) == {"batch_label", "labels", "data", "filenames"}
        assert set(raw) == {b"batch_label", b"labels", b"data", b"filenames"}


def test_cifar100_layout_and_fine_labels(tmp_path):
    train, train_y, test, test_y = _cifar_arrays(10, 100, 1, seed=2)
    folder = write_cifar(tmp_path, train, train_y, test, test_y, dataset="cifar100")
    assert sorted(p.name for p in folder.iterdir()) == ["meta", "test", "train"]
    with open(folder / "train", "rb") as f:
        assert {b"fine_labels", b"coarse_labels", b"data", b"filenames", b"batch_label"} == set(pickle.load(f, encoding="bytes"))
    dm = CIFARLTDataModule(tmp_path, dataset="cifar100", imb_factor=10, cache_dir=tmp_path / "cache")
    assert dm.class_counts == long_tail_counts(10, 100, 10) and dm.class_counts[0] == 10 and dm.class_counts[-1] == 1
    assert dm.sizes == {"num_samples": sum(dm.class_counts), "num_classes": 100, "num_outputs": 100}
    with pytest.raises(ValueError, match="needs positive_classes"):
        CIFARLTDataModule(tmp_path, dataset="cifar100", task="one_vs_rest", cache_dir=tmp_path / "cache")


def test_long_tail_counts_closed_form():
    cifar10 = long_tail_counts(5000, 10, 100)
    assert cifar10 == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50] and sum(cifar10) == 12_406
    assert sum(long_tail_counts(5000, 10, 10)) == 20_431
    cifar100 = long_tail_counts(500, 100, 100)
    assert sum(cifar100) == 10_847 and cifar100[-1] == 5
    assert sum(long_tail_counts(500, 100, 10)) == 19_573
    assert long_tail_counts(5000, 10, 100, "step") == [5000] * 5 + [50] * 5
    assert long_tail_counts(5000, 10, 1) == [5000] * 10
    with pytest.raises(ValueError, match="at least 1"):
        long_tail_counts(5000, 10, 0.5)


def test_long_tail_selection_is_ldam_bit_for_bit():
    """LDAM: np.random.seed(0) once, then per class (ascending) shuffle its indices and keep the first n_i."""
    labels = np.random.default_rng(1).integers(0, 10, 3000)
    counts = long_tail_counts(np.bincount(labels).min(), 10, 20)
    np.random.seed(0)
    expected = []
    for c in np.unique(labels):
        idx = np.where(labels == c)[0]
        np.random.shuffle(idx)
        expected.append(idx[: counts[c]])
    state = np.random.get_state()
    np.random.seed(12345)  # long_tail_indices must not touch the global generator
    before = np.random.get_state()[1].copy()
    np.testing.assert_array_equal(long_tail_indices(labels, counts, seed=0), np.concatenate(expected))
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    np.random.set_state(state)


def test_cifar10_lt_at_full_size(tmp_path):
    """The real shapes (5 × 10,000 training images): class counts of the closed form, Yao, Lin & Yang's 1077 /
    11,329."""
    arrays = _cifar_arrays(5000, 10, 2, seed=0)
    write_cifar(tmp_path, *arrays, class_names=CIFAR10_NAMES)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_3", "rb") as f:
        assert pickle.load(f, encoding="latin1")["data"].shape == (10_000, 3072)
    cache = tmp_path / "cache"
    dm = CIFARLTDataModule(tmp_path, imb_factor=100, cache_dir=cache)
    assert dm.class_counts == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
    assert dm.sizes["num_samples"] == 12_406  # multiclass: no validation split (LDAM)
    np.testing.assert_array_equal(np.bincount(arrays[1][dm.rows["train"]]), dm.class_counts)
    cats = CIFARLTDataModule(tmp_path, task="one_vs_rest", positive_classes=["cat"], val_fraction=0.0, cache_dir=cache)
    assert cats.positive_classes == [3]
    assert (cats.sizes["num_positives"], cats.sizes["num_negatives"]) == (1077, 11_329)
    split = CIFARLTDataModule(tmp_path, task="one_vs_rest", cache_dir=cache)  # Yao, Lin & Yang's 9:1 split by default
    assert split.sizes["num_positives"] == 1077 - round(107.7)  # stratified by the binary label
    assert split.sizes["num_samples"] + len(split.rows["val"]) == 12_406
    assert set(split.rows["train"]).isdisjoint(split.rows["val"])


def test_binary_imbalanced_protocol_of_seed_002(cifar_small):
    root, (train, train_y, test, test_y) = cifar_small
    dm = CIFARLTDataModule(root, task="binary_imbalanced", cache_dir=root / "cache", seed=4)
    assert dm.imb_factor == 1.0 and dm.val_fraction == 0.2
    assert dm.positive_classes == [5, 6, 7, 8, 9]  # the upper half (LibAUC's convention)
    assert dm.class_counts[:5] == [500] * 5 and sum(dm.class_counts[5:]) == 50  # 2% of 2500 positives kept
    rows = np.concatenate([dm.rows["train"], dm.rows["val"]])
    assert len(set(rows.tolist())) == rows.size == 2550
    assert len(dm.rows["val"]) == 500 + 10  # 4:1, stratified by the binary label
    assert dm.sizes["num_positives"] == 40 and int(np.isin(train_y[dm.rows["val"]], range(5, 10)).sum()) == 10
    dm.setup("fit")
    test_fields = dm.test_dataset.fields
    assert len(dm.test_dataset) == test_y.size and int(test_fields["y"].sum()) == test_y.size // 2  # unchanged
    assert torch.equal(test_fields["label"], torch.from_numpy(test_y))
    other = CIFARLTDataModule(root, task="binary_imbalanced", cache_dir=root / "cache", seed=5)
    assert not np.array_equal(np.sort(other.rows["train"]), np.sort(dm.rows["train"]))


def test_cifar_batches_augmentation_and_normalization(cifar_small):
    root, (train, train_y, test, test_y) = cifar_small
    dm = CIFARLTDataModule(root, task="one_vs_rest", batch_size=32, num_positives=8, cache_dir=root / "cache")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (32, 3, 32, 32) and batch["x"].dtype == torch.float32
    assert int(batch["y"].sum()) == 8 and torch.equal(batch["y"] == 1, batch["label"] == 3)
    assert torch.equal(batch["pos_index"] >= 0, batch["y"] == 1)
    assert torch.equal(batch["label"], torch.from_numpy(train_y[dm.rows["train"]])[batch["index"]])
    # evaluation: exactly the normalized images
    val = dm.val_dataset.__getitems__([0, 5])
    expected = torch.from_numpy(train[dm.rows["val"][[0, 5]]]).permute(0, 3, 1, 2).float() / 255
    torch.testing.assert_close(val["x"], (expected - CIFAR_MEAN) / CIFAR_STD)
    # training: each image is a 32×32 window of the zero-padded image, possibly flipped
    raw = torch.from_numpy(train[dm.rows["train"]][batch["index"].numpy()]).permute(0, 3, 1, 2)
    pixels = (batch["x"] * CIFAR_STD + CIFAR_MEAN) * 255
    for img, src in zip(pixels.round().to(torch.uint8), raw):
        padded = torch.nn.functional.pad(src, (4, 4, 4, 4))
        windows = [padded[:, i : i + 32, j : j + 32] for i in range(9) for j in range(9)]
        assert any(torch.equal(img, w) or torch.equal(img, w.flip(-1)) for w in windows)


def test_cifar_multiclass_batches_cover_the_long_tail(cifar_small):
    root, (train, train_y, _, _) = cifar_small
    dm = CIFARLTDataModule(root, batch_size=64, cache_dir=root / "cache")
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == dm.sizes["num_samples"] // 64 and all(b["x"].shape == (64, 3, 32, 32) for b in batches)
    seen = torch.cat([b["index"] for b in batches])
    assert seen.unique().numel() == seen.numel()  # shuffled epoch, no repeats
    assert all(torch.equal(b["y"], torch.from_numpy(train_y[dm.rows["train"]])[b["index"]]) for b in batches)
    assert dm.val_dataset is dm.test_dataset  # LDAM: no validation split, validation on the balanced test set


def test_random_crop_flip_covers_shifts_and_flips():
    torch.manual_seed(0)
    x = torch.randint(1, 256, (400, 3, 8, 8), dtype=torch.uint8)  # no zero pixel: the padding is recognizable
    out = random_crop_flip(x, padding=2)
    assert out.shape == x.shape and out.dtype == torch.uint8
    seen = []
    for o, src in zip(out, x):
        padded = torch.nn.functional.pad(src, (2, 2, 2, 2))
        found = [(i, j, f) for i in range(5) for j in range(5) for f in (0, 1)
                 if torch.equal(o, padded[:, i : i + 8, j : j + 8].flip(-1) if f else padded[:, i : i + 8, j : j + 8])]
        assert len(found) == 1
        seen.append(found[0])
    assert {(i, j) for i, j, _ in seen} == {(i, j) for i in range(5) for j in range(5)}  # every shift
    assert 150 < sum(f for _, _, f in seen) < 250  # flipped about half of the time


def test_cifar_errors_name_the_file(tmp_path, cifar_small):
    with pytest.raises(FileNotFoundError, match=r"data_batch_1.*download=True.*cifar\.html"):
        CIFARLTDataModule(tmp_path / "nothing", cache_dir=tmp_path / "cache")
    root, _ = cifar_small
    broken = tmp_path / "broken"
    shutil.copytree(root / "cifar-10-batches-py", broken / "cifar-10-batches-py")
    target = broken / "cifar-10-batches-py" / "data_batch_2"
    target.write_bytes(target.read_bytes()[:1000])  # truncated
    with pytest.raises(ValueError, match=r"data_batch_2: not a readable CIFAR python pickle"):
        CIFARLTDataModule(broken, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("cifar10-*"))  # nothing half-written
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}))
    with pytest.raises(ValueError, match=r"data_batch_2: missing key 'labels'"):
        CIFARLTDataModule(broken, cache_dir=tmp_path / "cache")
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 1024), np.uint8), "labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"data_batch_2: field 'data' must be a \[n, 3072\] uint8 array"):
        CIFARLTDataModule(broken, cache_dir=tmp_path / "cache")
    target.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 17]}))
    with pytest.raises(ValueError, match=r"label 17 .* not a class"):
        CIFARLTDataModule(broken, cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="unknown class name 'kitten'"):
        CIFARLTDataModule(root, task="one_vs_rest", positive_classes=["kitten"], cache_dir=root / "cache")


def test_cifar_cache_is_reused(cifar_small, monkeypatch):
    root, _ = cifar_small
    CIFARLTDataModule(root, cache_dir=root / "cache")

    def fail(*args, **kwargs):
        raise AssertionError("the pickles were read again")

    monkeypatch.setattr(cifar_module, "read_cifar_batch", fail)
    dm = CIFARLTDataModule(root, cache_dir=root / "cache", task="one_vs_rest")
    assert isinstance(dm._arrays["train_images"], np.memmap)


# ---------------------------------------------------------------------------------------------- CheXpert
def test_uncertainty_policies_map_uncertain_and_blank():
    nan = math.nan
    raw = np.array([[1, 0, -1, nan]] * 3, dtype=np.float32).T  # rows: 1, 0, -1, blank; three label columns
    np.testing.assert_array_equal(
        apply_uncertainty(raw, ["ones", "zeros", "ignore"], blank="zeros"),
        [[1, 1, 1], [0, 0, 0], [1, 0, -1], [0, 0, 0]],
    )
    np.testing.assert_array_equal(
        apply_uncertainty(raw, ["ones", "zeros", "ignore"], blank="ignore"),
        [[1, 1, 1], [0, 0, 0], [1, 0, -1], [-1, -1, -1]],
    )


def test_chexpert_csv_labels_follow_the_documented_policies(chexpert_root):
    release = chexpert_root / "CheXpert-v1.0-small"
    with open(release / "train.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Frontal/Lateral"] == "Frontal"]
    assert {r["Edema"] for r in rows} >= {"1.0", "0.0", "-1.0", ""}  # the fixture has every kind of cell
    cells = {"1.0": 1, "0.0": 0}
    default = {"Cardiomegaly": "zeros", "Edema": "ones", "Consolidation": "zeros", "Atelectasis": "ones", "Pleural Effusion": "zeros"}
    cases = [  # (uncertainty, blank, the policy per label it means)
        (None, "zeros", default),
        ({"Edema": "ignore", "Cardiomegaly": "ones"}, "ignore", {**default, "Edema": "ignore", "Cardiomegaly": "ones"}),
        ({label: "zeros" for label in default}, "zeros", {label: "zeros" for label in default}),
    ]
    for uncertainty, blank, policies in cases:
        dm = CheXpertDataModule(chexpert_root, uncertainty=uncertainty, blank=blank, cache_dir=chexpert_root / "cache")
        assert dict(zip(dm.labels, dm.policies)) == policies
        dm.setup("fit")
        got = {}
        for dataset in (dm.train_dataset.base, dm.val_dataset):
            for i in range(len(dataset)):
                got[str(dataset.path(i).relative_to(release)).replace("\\", "/")] = dataset.fields["y"][i].tolist()
        assert len(got) == len(rows)  # frontal views only, all of them
        for r in rows:
            expected = []
            for label in dm.labels:
                cell = r[label]
                if cell in cells:
                    expected.append(cells[cell])
                elif cell == "-1.0":
                    expected.append({"ones": 1, "zeros": 0, "ignore": -1}[policies[label]])
                else:
                    expected.append(0 if blank == "zeros" else -1)
            assert got[r["Path"].split("/", 1)[1]] == expected


def test_chexpert_paths_splits_and_binary_task(chexpert_root, tmp_path):
    cache = chexpert_root / "cache"
    a = CheXpertDataModule(chexpert_root, task="Edema", uncertainty={"Edema": "ignore"}, cache_dir=cache)
    b = CheXpertDataModule(chexpert_root / "CheXpert-v1.0-small", task="Edema", uncertainty={"Edema": "ignore"}, cache_dir=cache)
    assert a.sizes == b.sizes and a.data_dir == b.data_dir == chexpert_root / "CheXpert-v1.0-small"
    a.setup("fit")
    # the "CheXpert-v1.0-small/" prefix of Path is replaced by the release folder
    assert a.train_dataset.path(0).is_file() and a.train_dataset.path(0).parent.parent.parent.name == "train"
    parsed = read_chexpert_csv(a.data_dir / "train.csv", ["Edema"])
    frontal_known = int((parsed["frontal"] & (parsed["raw"][:, 0] != -1)).sum())
    assert len(a.train_dataset) + len(a.val_dataset) == frontal_known  # U-Ignore drops the uncertain rows
    patients = lambda ds: {ds.path(i).parent.parent.name for i in range(len(ds))}  # noqa: E731
    assert patients(a.train_dataset).isdisjoint(patients(a.val_dataset)) and patients(a.val_dataset)
    assert len(a.test_dataset) == int(read_chexpert_csv(a.data_dir / "valid.csv", ["Edema"])["frontal"].sum())
    batch = a.train_dataset.__getitems__([0, 1, 2])
    assert batch["x"].shape == (3, 3, 320, 320) and set(batch) == {"x", "y", "index", "pos_index", "neg_index"}
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    gray = batch["x"] * std + mean  # grayscale replicated to 3 channels, then ImageNet-normalized per channel
    torch.testing.assert_close(gray[:, 0], gray[:, 2])
    assert not torch.equal(batch["x"][:, 0], batch["x"][:, 2])
    # the full release's prefix works the same
    full = tmp_path / "CheXpert-v1.0"
    shutil.copytree(a.data_dir, full, ignore=shutil.ignore_patterns("train", ".fccolit-cache"))
    text = (full / "valid.csv").read_text().replace("CheXpert-v1.0-small/", "CheXpert-v1.0/")
    (full / "valid.csv").write_text(text)
    c = CheXpertDataModule(tmp_path, task="Edema", cache_dir=tmp_path / "cache", image_size=16)
    c.setup("test")
    assert c.test_dataset.path(0) == full / "valid" / c.test_dataset.path(0).relative_to(full / "valid")
    assert c.test_dataset.__getitems__([0])["x"].shape == (1, 3, 16, 16)


def test_chexpert_multilabel_batches(chexpert_root):
    dm = CheXpertDataModule(chexpert_root, batch_size=20, num_positives=2, tasks_per_batch=5, image_size=24, cache_dir=chexpert_root / "cache")
    assert dm.sizes["num_tasks"] == 5 and dm.sizes["num_outputs"] == 5
    dm.setup("fit")
    loader = dm.train_dataloader()
    batch = next(iter(loader))
    assert batch["x"].shape == (20, 3, 24, 24)
    assert torch.equal(batch["task"].view(5, 4)[:, 0].sort().values, torch.arange(5))
    assert batch["y"].view(5, 4).tolist() == [[1, 1, 0, 0]] * 5
    assert torch.equal(batch["labels"][torch.arange(20), batch["task"]], batch["y"])
    assert torch.equal(batch["pair_index"], batch["task"] * dm.sizes["num_samples"] + batch["index"])
    assert int(batch["pos_index"].max()) < dm.sizes["num_positives"] and (batch["pos_index"][batch["y"] == 1] >= 0).all()
    val = next(iter(dm.val_dataloader()))
    assert val["y"].shape[1] == 5 and set(val) == {"x", "y", "index"}


@pytest.mark.parametrize("variant", ["plain", "crlf", "no_final_newline", "spaces_and_dot", "blank_quoted_unicode"])
def test_chexpert_fast_reader_equals_the_line_parser(tmp_path, monkeypatch, variant):
    """The vectorized reader returns exactly what the line-by-line parser (the specification) returns; files it
    does not take as they stand (blank lines, quotes) go to that parser, line numbers intact."""
    path = write_chexpert_csv(tmp_path / "train.csv", 300, values=("1.0", "0.0", "-1.0", "", "1", "0", "-1"))
    text = path.read_text()
    if variant == "crlf":
        text = text.replace("\n", "\r\n")
    elif variant == "no_final_newline":
        text = text.rstrip("\n")
    elif variant == "spaces_and_dot":
        text = text.replace(",Frontal,", ", Frontal ,").replace("/study1/", "/./study1/").replace(",1.0,", ", 1.0,")
    elif variant == "blank_quoted_unicode":
        lines = text.split("\n")
        lines[5] = '"' + lines[5].replace(",", '",', 1)  # a quoted Path
        lines[9] = lines[9].replace("Female", "Femme \u00e9")
        text = "\n".join(lines[:7] + ["", ",,,,,"] + lines[7:])  # a blank line and a row of blank cells
    path.write_bytes(text.encode("utf-8"))
    labels = ["Edema", "No Finding", "Pleural Effusion"]
    slow = read_chexpert_csv(path, labels, _force_slow=True)
    if variant != "blank_quoted_unicode":  # the fast path alone must read these
        monkeypatch.setattr(chexpert_module, "_read_checked", lambda *a: pytest.fail("fell back to the line parser"))
    fast = read_chexpert_csv(path, labels)
    assert set(fast) == set(slow) == {"path", "line", "frontal", "raw"}
    for key in slow:
        assert fast[key].dtype == slow[key].dtype, key
        np.testing.assert_array_equal(fast[key], slow[key], err_msg=key)
    assert len(slow["line"]) == 300 and slow["line"][-1] == (303 if variant == "blank_quoted_unicode" else 301)


def test_chexpert_errors_name_the_file(chexpert_root, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train\.csv.*stanfordmlgroup"):
        CheXpertDataModule(tmp_path)
    release = tmp_path / "CheXpert-v1.0-small"
    shutil.copytree(chexpert_root / "CheXpert-v1.0-small", release, ignore=shutil.ignore_patterns(".fccolit-cache"))
    lines = (release / "train.csv").read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ",maybe"  # the last column, Support Devices, of line 4
    (release / "train.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"train\.csv line 4: field 'Support Devices' is 'maybe'"):
        CheXpertDataModule(tmp_path, labels=["Support Devices"], cache_dir=tmp_path / "cache")
    (release / "valid.csv").write_text("Path,Sex,Age,Frontal/Lateral,AP/PA,Cardiomegaly\n")
    with pytest.raises(ValueError, match=r"valid\.csv line 1: missing column\(s\) \['Edema'\]"):
        read_chexpert_csv(release / "valid.csv", ["Cardiomegaly", "Edema"])
    shutil.copy(chexpert_root / "CheXpert-v1.0-small" / "train.csv", release / "train.csv")
    shutil.copy(chexpert_root / "CheXpert-v1.0-small" / "valid.csv", release / "valid.csv")
    dm = CheXpertDataModule(tmp_path, task="Edema", image_size=16, cache_dir=tmp_path / "cache")
    dm.setup("fit")
    missing = dm.train_dataset.path(1)
    missing.unlink()
    with pytest.raises(FileNotFoundError, match=rf"image not found: {missing}.*train\.csv line \d+"):
        dm.train_dataset.__getitems__([0, 1])
    broken = dm.train_dataset.path(2)
    broken.write_bytes(b"not a jpeg at all")
    with pytest.raises(ValueError, match=rf"cannot read image {broken}.*train\.csv line \d+"):
        dm.train_dataset.__getitems__([2])
    dm.num_workers = 1  # the error crosses the worker boundary with the file's name
    with pytest.raises(ValueError, match=rf"cannot read image {broken}"):
        list(dm._loader(dm.train_dataset, [[2]], "training"))
    checked = CheXpertDataModule(tmp_path, task="Edema", verify_images=True, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match=rf"not found, e\.g\. {missing}"):
        checked.setup("fit")


# ---------------------------------------------------------------------------------------------- BDD100K
@pytest.mark.skipif(not BDD_SAMPLE.is_file(), reason="shared BDD100K labels sample not present")
def test_real_bdd100k_sample_parses_to_one_overcast_frame(tmp_path):
    parsed = read_bdd100k_attributes(BDD_SAMPLE)
    assert parsed["name"].tolist() == ["b1c66a42-6f7d68ca.jpg"]
    assert ATTRIBUTE_VALUES["weather"][parsed["weather"][0]] == "overcast"
    assert ATTRIBUTE_VALUES["scene"][parsed["scene"][0]] == "city street"
    assert ATTRIBUTE_VALUES["timeofday"][parsed["timeofday"][0]] == "daytime"
    # as the official val labels of a release (copied into a temporary folder, never into the repo)
    weather = ["clear", "overcast", "snowy", "rainy", "partly cloudy", "foggy"]
    frames = {"train": [{"weather": weather[i % 6], "scene": "highway", "timeofday": "daytime"} for i in range(30)],
              "val": [{"weather": "clear", "scene": "highway", "timeofday": "night"}]}
    write_bdd100k(tmp_path, frames=frames, image_size=(64, 36), seed=2)
    shutil.copy(BDD_SAMPLE, tmp_path / "labels" / "bdd100k_labels_images_val.json")
    from PIL import Image

    Image.new("RGB", (1280, 720), (90, 90, 90)).save(tmp_path / "images" / "100k" / "val" / "b1c66a42-6f7d68ca.jpg")
    dm = BDD100KDataModule(tmp_path, image_size=32, cache_dir=tmp_path / "cache")
    dm.setup("test")
    assert len(dm.test_dataset) == 1
    batch = dm.test_dataset.__getitems__([0])
    assert dm.classes[int(batch["y"][0])] == "overcast" and batch["x"].shape == (1, 3, 32, 32)


def test_bdd100k_2018_and_2020_layouts_agree(tmp_path):
    frames = {s: [{"weather": w, "scene": "highway", "timeofday": "night"} for w in ATTRIBUTE_VALUES["weather"]] for s in ("train", "val")}
    parsed = {}
    for version in ("2018", "2020"):
        root = write_bdd100k(tmp_path / version, frames=frames, version=version, write_images=False)
        label_file = root / ("labels/det_20/det_train.json" if version == "2020" else "labels/bdd100k_labels_images_train.json")
        records = json.loads(label_file.read_text())
        if version == "2020":
            assert any("labels" not in r for r in records)  # det_20 frames without boxes have no labels field
        parsed[version] = read_bdd100k_attributes(label_file)
        dm = BDD100KDataModule(root, val_fraction=0.0, cache_dir=tmp_path / "cache")
        assert dm.labels_version == version
        assert dm.class_counts == [1] * 6  # 'undefined' dropped
    for key in ("weather", "scene", "timeofday"):
        np.testing.assert_array_equal(parsed["2018"][key], parsed["2020"][key])
    assert [ATTRIBUTE_VALUES["weather"][c] for c in parsed["2018"]["weather"]] == list(ATTRIBUTE_VALUES["weather"])
    both = tmp_path / "2018"
    shutil.copytree(tmp_path / "2020" / "labels" / "det_20", both / "labels" / "det_20")
    assert BDD100KDataModule(both, cache_dir=tmp_path / "cache").labels_version == "2020"  # auto prefers det_20
    assert BDD100KDataModule(both, labels_version="2018", cache_dir=tmp_path / "cache").labels_version == "2018"


def test_bdd100k_tasks_drop_undefined_and_expose_class_subsets(bdd_root):
    root, frames = bdd_root
    cache = root / "cache"
    dm = BDD100KDataModule(root, task="weather", target="foggy", val_fraction=0.2, seed=1, cache_dir=cache)
    defined = [f["weather"] for f in frames["train"] if f["weather"] != "undefined"]
    assert dm.classes == ["clear", "overcast", "snowy", "rainy", "partly cloudy", "foggy"]
    assert dm.protected == ["clear", "overcast", "snowy", "rainy", "partly cloudy"]
    assert dm.prompts[5] == "the weather is foggy." and dm.sizes["num_constraints"] == 5
    held = sum(round(0.2 * defined.count(c)) for c in dm.classes)
    assert dm.sizes["num_samples"] == len(defined) - held
    assert dm.sizes["num_positives"] == defined.count("foggy") - round(0.2 * defined.count("foggy"))
    dm.setup("fit")
    subsets = dm.class_indices("train")
    fields = dm.train_dataset.fields
    for k, c in enumerate(dm.classes):
        rows = subsets[c]
        assert torch.equal(fields["label"][rows], torch.full((rows.numel(),), k))
        assert (fields["group"][rows] == (dm.protected.index(c) if c in dm.protected else -1)).all()
    assert torch.equal(fields["y"], (fields["label"] == 5).long())
    assert sum(len(v) for v in subsets.values()) == len(dm.train_dataset)
    # DevSafety's class-balanced constraint batches: classes_per_batch protected classes × samples_per_class
    loader = dm.constraint_dataloader(classes_per_batch=2, samples_per_class=3, num_batches=4)
    for batch in loader:
        groups = batch["group"].view(2, 3)
        assert (groups >= 0).all() and (groups == groups[:, :1]).all() and groups[0, 0] != groups[1, 0]
    scene = BDD100KDataModule(root, task="scene", cache_dir=cache, max_per_class=2, val_fraction=0.0)
    assert "gas stations" not in scene.classes and max(scene.class_counts) <= 2
    # a classification task's sizes count each class's training images (the continual objective's contrast size)
    assert [scene.sizes[f"num_class_{k}"] for k in range(len(scene.classes))] == scene.class_counts
    assert scene.sizes["num_samples"] == sum(scene.class_counts)
    assert class_prompts("scene", ["residential"]) == ["the scene is a residential area."]
    attributes = BDD100KDataModule(root, task="attributes", cache_dir=cache, batch_size=28, val_fraction=0.0)
    assert attributes.sizes["num_tasks"] == 14 and attributes.task_names[5] == "weather=foggy"
    attributes.setup("fit")
    expected = []
    for f in frames["train"]:  # one-vs-rest per class of each attribute, -1 where the attribute is undefined
        row = [(-1 if f[a] == "undefined" else int(f[a] == c)) for a, cs in (("weather", dm.classes),
               ("scene", ["highway", "residential", "city street", "parking lot", "tunnel"]),
               ("timeofday", ["daytime", "night", "dawn/dusk"])) for c in cs]
        if max(row) >= 0:  # frames with every attribute undefined are dropped
            expected.append(row)
    assert attributes.train_dataset.labels.tolist() == expected
    batch = next(iter(attributes.train_dataloader()))
    assert batch["x"].shape == (28, 3, 224, 224) and len(set(batch["task"].tolist())) == 14


def test_clip_transform_is_resize_then_center_crop(tmp_path):
    from PIL import Image

    from fccolit.datasets.transforms import ClipImageTransform

    rng = np.random.default_rng(0)
    path = tmp_path / "frame.jpg"
    coarse = rng.integers(0, 256, (9, 16, 3), dtype=np.uint8)
    Image.fromarray(coarse).resize((1280, 720), Image.BILINEAR).save(path, quality=95)
    with Image.open(path) as img:  # CLIP's preprocessing, step by step: shorter side to 224, center crop
        img = img.convert("RGB").resize((398, 224), Image.BICUBIC)
        reference = torch.from_numpy(np.asarray(img.crop((87, 0, 311, 224))).copy()).permute(2, 0, 1).float()
    out = ClipImageTransform(224)(path)
    assert out.shape == (3, 224, 224) and out.dtype == torch.uint8
    assert (out.float() - reference).abs().mean() < 1.5  # JPEG draft decoding and one resampling instead of two
    torch.manual_seed(0)
    augmented = [ClipImageTransform(224, augment=True)(path) for _ in range(6)]
    assert any(not torch.equal(a, augmented[0]) for a in augmented[1:])


def test_bdd100k_errors_name_file_frame_and_field(tmp_path, bdd_root):
    with pytest.raises(FileNotFoundError, match=r"bdd100k_labels_images_train\.json.*bdd-data"):
        BDD100KDataModule(tmp_path)
    times = ["daytime", "night", "dawn/dusk", "undefined"]
    frames = {s: [{"weather": "clear", "scene": "tunnel", "timeofday": times[i % 4]} for i in range(n)] for s, n in (("train", 12), ("val", 3))}
    root = write_bdd100k(tmp_path / "b", frames=frames, image_size=(64, 36), seed=4)
    label_file = root / "labels" / "bdd100k_labels_images_train.json"
    records = json.loads(label_file.read_text())
    good = json.dumps(records)
    records[4]["attributes"]["weather"] = "cloudy"
    label_file.write_text(json.dumps(records))
    with pytest.raises(ValueError, match=rf"bdd100k_labels_images_train\.json: frame 4 \({records[4]['name']}\): field 'attributes\.weather' is 'cloudy'"):
        read_bdd100k_attributes(label_file)
    del records[4]["attributes"]
    label_file.write_text(json.dumps(records))
    with pytest.raises(ValueError, match=r"frame 4 .*field 'attributes' is missing"):
        BDD100KDataModule(root, cache_dir=tmp_path / "cache")
    label_file.write_text(good[:-40])
    with pytest.raises(ValueError, match=r"invalid JSON in element \d+"):
        read_bdd100k_attributes(label_file)
    label_file.write_text(good)
    dm = BDD100KDataModule(root, task="timeofday", val_fraction=0.0, image_size=16, cache_dir=tmp_path / "cache")
    dm.setup("fit")
    missing = dm.train_dataset.path(0)
    missing.unlink()
    with pytest.raises(FileNotFoundError, match=rf"image not found: {missing} \(listed in .*bdd100k_labels_images_train\.json frame \d+\)"):
        dm.train_dataset.__getitems__([0])
    with pytest.raises(ValueError, match="target 'sunny' is not one of the classes"):
        BDD100KDataModule(bdd_root[0], target="sunny", cache_dir=bdd_root[0] / "cache")


# ---------------------------------------------------------------------------------------------- the multi-label sampler
ML_LABELS = torch.tensor(
    [[1, 0, -1], [0, 1, 1], [1, 1, 0], [0, 0, 1], [1, -1, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1], [-1, 0, 0]] * 3
)


def _batches(sampler, epoch=0):
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_multilabel_sampler_layout_and_rank_slices(world):
    k, p, q, n = 2, 4, 8, ML_LABELS.shape[0]
    full = _batches(MultiLabelSampler(ML_LABELS, k, p, q, num_batches=12, seed=3))
    per_rank = [_batches(MultiLabelSampler(ML_LABELS, k, p, q, num_batches=12, seed=3, rank=r, world_size=world)) for r in range(world)]
    assert len(full) == 12
    for b, batch in enumerate(full):
        pairs = torch.tensor(batch).view(k, p + q)
        tasks, samples = pairs // n, pairs % n
        assert (tasks == tasks[:, :1]).all() and len(set(tasks[:, 0].tolist())) == k  # one task per block, distinct
        labels = ML_LABELS[samples, tasks]
        assert (labels[:, :p] == 1).all() and (labels[:, p:] == 0).all()  # never an unlabeled (-1) pair
        slices = [per_rank[r][b] for r in range(world)]
        assert sorted(itertools.chain(*slices)) == sorted(batch)
        for s in slices:
            s = torch.tensor(s)
            for t in tasks[:, 0]:
                mine = ML_LABELS[s % n, s // n][s // n == t]
                assert int((mine == 1).sum()) == p // world and int((mine == 0).sum()) == q // world


def test_multilabel_sampler_walks_each_pool_and_resumes():
    sampler = MultiLabelSampler(ML_LABELS, 3, 2, 2, num_batches=40, seed=0)
    full = _batches(sampler, epoch=1)
    n = ML_LABELS.shape[0]
    for t in range(3):
        positives = [i % n for b in full for j, i in enumerate(b) if i // n == t and j % 4 < 2]
        pool = int((ML_LABELS[:, t] == 1).sum())
        assert len(set(positives[:pool])) == pool  # a permutation of the pool before any repeat
    assert _batches(MultiLabelSampler(ML_LABELS, 3, 2, 2, num_batches=40, seed=0), epoch=1) == full
    assert _batches(sampler, epoch=2) != full
    sampler.set_epoch(1)
    it = iter(sampler)
    head = [next(it) for _ in range(7)]
    resumed = MultiLabelSampler(ML_LABELS, 3, 2, 2, num_batches=40, seed=0)
    resumed.load_state_dict(sampler.state_dict(batches_consumed=7))
    resumed.set_epoch(1)
    assert head + list(resumed) == full
    default = MultiLabelSampler(ML_LABELS, 2, 3, 5)
    assert len(default) == math.ceil(n / 16)


def test_multilabel_sampler_errors_and_class_balanced_mode():
    with pytest.raises(ValueError, match=r"task\(s\) \[1\] have no positive"):
        MultiLabelSampler(torch.tensor([[1, 0], [0, 0]]), 1, 1, 1)
    with pytest.raises(ValueError, match="tasks_per_batch"):
        MultiLabelSampler(ML_LABELS, 4, 1, 1)
    with pytest.raises(ValueError, match="split evenly among 2"):
        list(MultiLabelSampler(ML_LABELS, 1, 3, 2, rank=0, world_size=2))
    classes = torch.tensor([0, 1, 2, 1, 0, 2, 2, 1, 0, 0])
    one_hot = torch.nn.functional.one_hot(classes, 3)
    for batch in _batches(MultiLabelSampler(one_hot, 2, 3, 0, num_batches=10, pair_ids=False, seed=1)):
        blocks = classes[torch.tensor(batch)].view(2, 3)
        assert (blocks == blocks[:, :1]).all() and blocks[0, 0] != blocks[1, 0]


def test_multilabel_pair_dataset_decodes_pairs():
    class Base(torch.utils.data.Dataset):
        fetched: list = []

        def __len__(self):
            return ML_LABELS.shape[0]

        def __getitems__(self, rows):
            self.fetched.append(list(rows))
            rows = torch.tensor(rows)
            return {"x": rows.float().unsqueeze(1) * 10, "y": ML_LABELS[rows], "index": rows}

    base = Base()
    data = MultiLabelPairDataset(base, ML_LABELS)
    pos_rows, neg_rows = multilabel_pair_tables(ML_LABELS)
    sizes = multilabel_sizes(ML_LABELS)
    assert sizes["num_positives"] == int((ML_LABELS == 1).sum()) and sizes["num_pairs"] == 90 == len(data)
    assert sorted(pos_rows[pos_rows >= 0].tolist()) == list(range(sizes["num_positives"]))
    pairs = [0 * 30 + 2, 1 * 30 + 2, 2 * 30 + 3, 1 * 30 + 5]
    batch = data.__getitems__(pairs)
    assert base.fetched[-1] == [2, 3, 5]  # each distinct sample once
    assert batch["task"].tolist() == [0, 1, 2, 1] and batch["index"].tolist() == [2, 2, 3, 5]
    assert batch["y"].tolist() == [1, 1, 1, 0] and batch["x"].squeeze(1).tolist() == [20, 20, 30, 50]
    assert batch["pos_index"].tolist() == [int(pos_rows[0, 2]), int(pos_rows[1, 2]), int(pos_rows[2, 3]), -1]
    assert batch["neg_index"][3] == neg_rows[1, 5] and torch.equal(batch["labels"], ML_LABELS[[2, 2, 3, 5]])
    assert batch["pair_index"].tolist() == pairs


# ---------------------------------------------------------------------------------------------- Trainer smoke runs
def _sox(dm):
    return SOX(
        ResNet20(num_outputs=None), AveragePrecisionSurrogate(margin=1.0), data_sizes=dm.sizes,
        optimizer=lambda params: Momentum(params, lr=0.05, momentum_weight=0.1), metrics=["ap", "auroc"],
    )


def _scores_and_labels(model, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's scores (eval mode) and the labels ``y`` of every batch of ``loader``, flattened."""
    model.eval()
    scores, labels = [], []
    with torch.no_grad():
        for batch in loader:
            scores.append(model(batch).reshape(-1))
            labels.append(batch["y"].reshape(-1))
    return torch.cat(scores), torch.cat(labels)


def test_one_epoch_sox_ap_on_each_datamodule(cifar_small, chexpert_root, bdd_root, tmp_path):
    root, _ = cifar_small
    modules = {
        "cifar": CIFARLTDataModule(root, task="one_vs_rest", batch_size=16, num_positives=4, num_batches=3,
                                   eval_batch_size=4096, cache_dir=root / "cache"),
        "chexpert": CheXpertDataModule(chexpert_root, task="Edema", image_size=32, batch_size=8, num_positives=2,
                                       num_batches=2, val_fraction=0.25, cache_dir=chexpert_root / "cache"),
        "bdd100k": BDD100KDataModule(bdd_root[0], target="foggy", image_size=32, batch_size=8, num_positives=2,
                                     num_batches=2, val_fraction=0.3, cache_dir=bdd_root[0] / "cache"),
    }
    for name, dm in modules.items():
        model = _sox(dm)
        assert model.state.num_rows == dm.sizes["num_positives"]
        trainer = _fit_one_epoch(model, dm, tmp_path / name)
        assert trainer.current_epoch == 1 and model.state.visited().any(), name
        # the logged val/ap is the AP of the trained model's scores over the whole validation split (each row once,
        # with its own label), recomputed here from the DataModule's validation loader
        scores, labels = _scores_and_labels(model, dm.val_dataloader())
        assert 0 < int(labels.sum()) < labels.numel(), name  # the fixtures' splits hold both classes
        assert labels.numel() == len(dm.val_dataset), name
        logged = float(trainer.callback_metrics["val/ap"])
        assert logged == pytest.approx(float(ap_score(scores, labels)), abs=1e-5), name
        assert logged != pytest.approx(float(ap_score(-scores, labels)), abs=1e-3), name  # the scores are not ignored
        assert "train/objective_epoch" in trainer.callback_metrics, name


# The image configs (cifar_lt, chexpert, bdd100k) run in tests/cli/test_configs.py.
