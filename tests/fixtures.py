"""Toy in-memory batches, and the registry the config smoke test uses to feed each DataModule.

The files are written by :mod:`fccolit.testing` in the real formats (LIBSVM text, MovieLens ``ratings.csv``, the
Netflix Prize ``combined_data_*.txt``, MSLR ``Fold1/{train,vali,test}.txt``, the CIFAR python pickles, CheXpert's
CSVs and JPEGs, BDD100K's labels JSON and JPEGs, UCI Adult, ProPublica COMPAS).

:data:`DATA_GENERATORS` maps a DataModule class to ``generate(root, init_args) -> list[str]``: it writes a tiny data
set under ``root`` (for the config's ``init_args``, e.g. the Adult or the COMPAS file) and returns the command-line
overrides that point the config at it and shrink what a fast smoke run cannot afford (batch sizes, image sizes,
DataLoader workers). A DataModule without a generator cannot be smoke-tested: :func:`generator_for` says so.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import torch

from fccolit.datamodules.bdd100k import DEFAULT_CLASSES, BDD100KDataModule
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.datamodules.cifar import CIFARLTDataModule
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.datamodules.grouped import SyntheticGroupedDataModule
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.movielens import MovieLensDataModule
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule, SyntheticMultiLabelDataModule
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.testing import (
    bdd_frames, cifar_arrays, write_adult_files, write_bdd100k, write_chexpert, write_cifar, write_compas_file,
    write_libsvm, write_movielens_csv, write_mslr_fold, write_netflix,
)


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
