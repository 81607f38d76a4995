"""Small data sets in the real file formats, and the registry the config smoke test uses to feed each DataModule.

Every generator writes files a DataModule reads exactly as it reads the released data (LIBSVM text, MovieLens
``ratings.csv``, the Netflix Prize ``combined_data_*.txt``, MSLR ``Fold1/{train,vali,test}.txt``, the CIFAR python
pickles, CheXpert's CSVs and JPEGs, BDD100K's labels JSON and JPEGs, UCI Adult, ProPublica COMPAS).

:data:`DATA_GENERATORS` maps a DataModule class to ``generate(root, init_args) -> list[str]``: it writes a tiny data
set under ``root`` (for the config's ``init_args``, e.g. the Adult or the COMPAS file) and returns the command-line
overrides that point the config at it and shrink what a fast smoke run cannot afford (batch sizes, image sizes,
DataLoader workers). A DataModule without a generator cannot be smoke-tested: :func:`generator_for` says so.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fccolit.datamodules.bdd100k import ATTRIBUTE_VALUES, DEFAULT_CLASSES, BDD100KDataModule, write_bdd100k
from fccolit.datamodules.chexpert import CheXpertDataModule, write_chexpert
from fccolit.datamodules.cifar import CIFARLTDataModule, write_cifar
from fccolit.datamodules.fairness import FairnessDataModule, write_adult_files, write_compas_file
from fccolit.datamodules.grouped import SyntheticGroupedDataModule
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.movielens import MovieLensDataModule
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule, SyntheticMultiLabelDataModule
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule


#: ``../shared/data`` beside the repository (the small real data sets; tests that use them skip without it)
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def toy_binary_data(n: int = 40, d: int = 5, m: int = 10, seed: int = 1):
    """``x [n, d]`` float64, ``y [n]`` with ``m`` positives, ``pos_index [n]`` (−1 for negatives)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(m)
    return x, y, pos_index


def dual_batches(x, y, pos_index, steps: int, positives: int = 3, negatives: int = 5, seed: int = 2):
    """Dual batches (distinct positives, then negatives) as dicts of the binary batch fields."""
    g = torch.Generator().manual_seed(seed)
    pos, neg = torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()
    out = []
    for _ in range(steps):
        idx = torch.cat([pos[torch.randperm(len(pos), generator=g)[:positives]],
                         neg[torch.randperm(len(neg), generator=g)[:negatives]]])
        out.append({"x": x[idx], "y": y[idx], "index": idx, "pos_index": pos_index[idx]})
    return out

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---------------------------------------------------------------------------------------------- file writers
def write_libsvm(folder: Path, name: str = "toy", rows: int = 300, test_rows: int = 120, features: int = 12,
                 seed: int = 5) -> None:
    """A small a9a-like LIBSVM pair (``name``, ``name.t``): labels ±1 (about a third positive), sparse 1-based
    binary features, four active per row."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, generator=g)
    for fname, count in ((name, rows), (f"{name}.t", test_rows)):
        lines = []
        for _ in range(count):
            active = sorted(torch.randperm(features, generator=g)[:4].tolist())
            score = float(w[active].sum()) + 0.5 * float(torch.randn(1, generator=g))
            label = "+1" if score > 1.0 else "-1"
            lines.append(label + " " + " ".join(f"{j + 1}:1" for j in active))
        (folder / fname).write_text("\n".join(lines) + "\n")


def write_movielens_csv(folder: Path, num_users: int = 60, num_items: int = 120, seed: int = 0) -> Path:
    """``ratings.csv`` in the ml-20m / ml-latest format (header, ``userId,movieId,rating,timestamp``, half stars),
    15 to 40 ratings per user."""
    rng = np.random.default_rng(seed)
    lines = ["userId,movieId,rating,timestamp"]
    for user in range(1, num_users + 1):
        items = np.sort(rng.choice(num_items, size=int(rng.integers(15, 41)), replace=False))
        for item in items:
            lines.append(f"{user},{int(item) * 3 + 1},{rng.integers(1, 11) / 2:.1f},{978300000 + int(rng.integers(0, 10**6))}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_netflix(folder: Path, num_users: int = 50, num_movies: int = 80, seed: int = 0) -> Path:
    """``combined_data_1.txt`` and ``combined_data_2.txt`` in the Kaggle format: a ``<movie>:`` line, then
    ``<customer>,<rating>,<YYYY-MM-DD>`` lines."""
    rng = np.random.default_rng(seed)
    customers = rng.choice(2_649_429, size=num_users, replace=False) + 1
    blocks = []
    for movie in range(1, num_movies + 1):
        raters = rng.choice(customers, size=int(rng.integers(5, num_users // 2)), replace=False)
        lines = [f"{c},{int(rng.integers(1, 6))},2005-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"
                 for c in raters]
        blocks.append(f"{movie}:\n" + "\n".join(lines) + "\n")
    folder.mkdir(parents=True, exist_ok=True)
    half = len(blocks) // 2
    (folder / "combined_data_1.txt").write_text("".join(blocks[:half]))
    (folder / "combined_data_2.txt").write_text("".join(blocks[half:]))
    return folder


def write_mslr_fold(folder: Path, fold: int = 1, num_features: int = 136, seed: int = 0) -> Path:
    """``Fold<k>/{train,vali,test}.txt`` in the MSLR-WEB format: ``<label> qid:<q> 1:<v> ... 136:<v>``, labels 0-4,
    5 to 30 documents per query."""
    rng = np.random.default_rng(seed)
    base = folder / f"Fold{fold}"
    base.mkdir(parents=True, exist_ok=True)
    qid = 1
    for split, num_queries in (("train", 30), ("vali", 8), ("test", 8)):
        lines = []
        for _ in range(num_queries):
            for _ in range(int(rng.integers(5, 31))):
                values = np.abs(rng.normal(size=num_features)) * 10
                label = int(rng.choice([0, 0, 0, 1, 2, 3, 4]))
                lines.append(f"{label} qid:{qid} " + " ".join(f"{j + 1}:{v:.4g}" for j, v in enumerate(values)))
            qid += 1
        (base / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return base


def cifar_arrays(per_class: int, num_classes: int, test_per_class: int, seed: int = 0):
    """(train images ``[N, 32, 32, 3]`` uint8, train labels, test images, test labels), labels shuffled."""
    rng = np.random.default_rng(seed)
    train_labels = np.repeat(np.arange(num_classes), per_class)
    rng.shuffle(train_labels)
    test_labels = np.repeat(np.arange(num_classes), test_per_class)
    train = rng.integers(0, 256, (train_labels.size, 32, 32, 3), dtype=np.uint8)
    test = rng.integers(0, 256, (test_labels.size, 32, 32, 3), dtype=np.uint8)
    return train, train_labels, test, test_labels


def bdd_frames(num_train: int = 84, num_val: int = 21, seed: int = 3) -> dict[str, list[dict[str, str]]]:
    """Frame attributes for :func:`~fccolit.datamodules.bdd100k.write_bdd100k`: the weather cycles through the seven
    documented values (every class, ``undefined`` included, in both splits), scene and time of day at random."""
    rng = np.random.default_rng(seed)
    weather = ["clear", "overcast", "snowy", "rainy", "partly cloudy", "foggy", "undefined"]
    return {
        split: [
            {"weather": weather[i % 7], "scene": str(rng.choice(ATTRIBUTE_VALUES["scene"])),
             "timeofday": str(rng.choice(ATTRIBUTE_VALUES["timeofday"]))}
            for i in range(n)
        ]
        for split, n in (("train", num_train), ("val", num_val))
    }


# ---------------------------------------------------------------------------------------------- the registry
def _shrink(init_args: dict[str, Any], **small: Any) -> list[str]:
    """Overrides ``--data.init_args.<key> <value>`` for the keys the config sets (a config that leaves a key at its
    default keeps the default)."""
    return [arg for key, value in small.items() if key in init_args for arg in (f"--data.init_args.{key}", str(value))]


def _files(root: Path, extra: list[str]) -> list[str]:
    return ["--data.init_args.root", str(root), "--data.init_args.cache_dir", str(root / "cache"), *extra]


def _generated_in_memory(root: Path, init_args: dict[str, Any]) -> list[str]:
    return []


def _libsvm(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_libsvm(root, rows=800, test_rows=120)  # about 200 training positives: a batch of 100 fits
    return _files(root, ["--data.init_args.name", "toy"])


def _movielens(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_movielens_csv(root)
    return _files(root, _shrink({**init_args, "num_negatives": 0, "queries_per_batch": 0}, num_negatives=20,
                                queries_per_batch=16, num_positives=5, eval_batch_size=32))


def _netflix(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_netflix(root)
    return _files(root, _shrink({**init_args, "min_ratings": 0, "num_negatives": 0}, min_ratings=5, num_negatives=20,
                                queries_per_batch=16, num_positives=5, eval_batch_size=32))


def _mslr(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_mslr_fold(root, fold=int(init_args.get("fold", 1)))
    return _files(root, _shrink(init_args, queries_per_batch=8, num_positives=3, slate_length=30, eval_batch_size=16))


def _cifar(root: Path, init_args: dict[str, Any]) -> list[str]:
    # 100 images per class: binary_imbalanced keeps 10 of 500 positives, one_vs_rest (cat, imbalance 100) 21
    write_cifar(root, *cifar_arrays(100, 10, 5, seed=9), class_names=CIFAR10_NAMES)
    return _files(root, _shrink({**init_args, "num_workers": 0}, batch_size=8, num_positives=2, num_workers=0,
                                eval_batch_size=16))


def _chexpert(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_chexpert(root, num_patients=24, num_valid_patients=4, image_size=(78, 64), seed=1)
    tasks = int(init_args.get("tasks_per_batch") or 1)  # multi-label batches: tasks × (positives + negatives)
    return _files(root, _shrink({**init_args, "num_workers": 0, "image_size": 0}, image_size=32,
                                batch_size=2 * tasks if tasks > 1 else 8, num_positives=1 if tasks > 1 else 2,
                                num_workers=0, val_fraction=0.25, eval_batch_size=16))


def _bdd100k(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_bdd100k(root, frames=bdd_frames(), version="2018", image_size=(96, 54), seed=0)
    batch_size = 8
    if init_args.get("sampler") == "class_balanced":  # classes_per_batch classes × 2 images
        classes = init_args.get("classes") or DEFAULT_CLASSES[init_args.get("task", "weather")]
        batch_size = 2 * int(init_args.get("classes_per_batch") or len(classes))
    return _files(root, _shrink({**init_args, "num_workers": 0, "image_size": 0}, image_size=32,
                                batch_size=batch_size, num_positives=2, num_workers=0, eval_batch_size=16))


def _fairness(root: Path, init_args: dict[str, Any]) -> list[str]:
    if init_args.get("dataset", "adult") == "adult":
        write_adult_files(root, 300, 120, seed=1)
    else:
        write_compas_file(root, 500, seed=2)
    return _files(root, [])


#: DataModule class → generator. A new DataModule used by a config in configs/ needs an entry here.
DATA_GENERATORS: dict[type, Callable[[Path, dict[str, Any]], list[str]]] = {
    SyntheticBinaryDataModule: _generated_in_memory,
    SyntheticMultiLabelDataModule: _generated_in_memory,
    SyntheticMulticlassDataModule: _generated_in_memory,
    SyntheticGroupedDataModule: _generated_in_memory,
    SyntheticRankingDataModule: _generated_in_memory,
    LibSVMDataModule: _libsvm,
    MovieLensDataModule: _movielens,
    NetflixDataModule: _netflix,
    MSLRDataModule: _mslr,
    CIFARLTDataModule: _cifar,
    CheXpertDataModule: _chexpert,
    BDD100KDataModule: _bdd100k,
    FairnessDataModule: _fairness,
}


def import_class(class_path: str) -> type:
    """``"a.b.C"`` → the class (configs name classes by their full import path)."""
    module, _, name = class_path.rpartition(".")
    if not module:
        raise ValueError(f"class_path {class_path!r} is not a full import path (module.Class)")
    return getattr(importlib.import_module(module), name)


def generator_for(class_path: str) -> Callable[[Path, dict[str, Any]], list[str]]:
    """The generator of the DataModule ``class_path``, or an AssertionError that says where to register one."""
    cls = import_class(class_path)
    if cls not in DATA_GENERATORS:
        raise AssertionError(
            f"no fixture generator for the DataModule {class_path}: register one in DATA_GENERATORS in "
            f"tests/fixtures.py (write a tiny data set in its real file format under the given root and return the "
            f"--data.init_args overrides that point the config at it)"
        )
    return DATA_GENERATORS[cls]


def model_overrides(model_init_args: dict[str, Any], root: Path) -> list[str]:
    """Overrides for backbones that need local files: a CLIP classifier gets a tiny random CLIP folder (nothing is
    ever downloaded) matching the smoke run's 32-pixel crops."""
    backbone = model_init_args.get("model") or {}
    if str(backbone.get("class_path", "")).endswith("CLIPClassifier"):
        from fccolit.models.vision import write_tiny_clip

        folder = write_tiny_clip(root / "tiny_clip", image_size=32, patch_size=16)
        return ["--model.init_args.model.init_args.pretrained_path", str(folder)]
    return []
