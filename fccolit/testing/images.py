"""Small data sets in the real layouts of the image data sets: the CIFAR python pickles, CheXpert's CSVs and
JPEGs, BDD100K's labels JSON and JPEGs; the noise images they hold."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pickle
import struct
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from fccolit.io.bdd100k import ATTRIBUTE_VALUES, ATTRIBUTES, LABEL_FILES
from fccolit.io.chexpert import OBSERVATIONS
from fccolit.io.cifar import CIFAR_SPECS

__all__ = [
    "bdd_frames", "cifar_arrays", "noise_image", "write_bdd100k", "write_chexpert", "write_chexpert_csv", "write_cifar",
]


def noise_image(rng: np.random.Generator, size: tuple[int, int], channels: int, grain: int = 8) -> np.ndarray:
    """A smooth random image (upsampled coarse noise plus ±``grain`` grain): JPEG sizes and decode times of the order
    of the releases' (CheXpert-small: about 30 KB here, 50 KB on average in the release)."""
    from PIL import Image

    w, h = size
    coarse = rng.integers(0, 256, (max(2, h // 32), max(2, w // 32), channels), dtype=np.uint8)
    img = Image.fromarray(coarse.squeeze(-1) if channels == 1 else coarse).resize((w, h), Image.BILINEAR)
    arr = np.asarray(img, dtype=np.int16) + rng.integers(-grain, grain + 1, (h, w) if channels == 1 else (h, w, channels))
    return np.clip(arr, 0, 255).astype(np.uint8)


def cifar_arrays(per_class: int, num_classes: int, test_per_class: int, seed: int = 0):
    """(train images ``[N, 32, 32, 3]`` uint8, train labels, test images, test labels), labels shuffled."""
    rng = np.random.default_rng(seed)
    train_labels = np.repeat(np.arange(num_classes), per_class)
    rng.shuffle(train_labels)
    test_labels = np.repeat(np.arange(num_classes), test_per_class)
    train = rng.integers(0, 256, (train_labels.size, 32, 32, 3), dtype=np.uint8)
    test = rng.integers(0, 256, (test_labels.size, 32, 32, 3), dtype=np.uint8)
    return train, train_labels, test, test_labels


class _Python2Pickler(pickle._Pickler):  # type: ignore[misc]
    """Writes pickles the way the CIFAR files were written (cPickle, protocol 2, Python 2): every ``str`` and
    ``bytes`` as a Python 2 byte string, numpy classes under their numpy 1.x module names."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def save_py2_str(self, obj: str | bytes) -> None:
        data = obj.encode("latin-1") if isinstance(obj, str) else bytes(obj)
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[str] = save_py2_str
    dispatch[bytes] = save_py2_str

    def save_global(self, obj: Any, name: str | None = None) -> None:
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("numpy._core"):
            qual = name or obj.__qualname__
            self.write(pickle.GLOBAL + ("numpy.core" + module[len("numpy._core") :]).encode() + b"\n" + qual.encode() + b"\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


def _dump(path: Path, obj: dict[str, Any], key_style: str) -> None:
    if key_style == "python2":
        buffer = io.BytesIO()
        _Python2Pickler(buffer, protocol=2).dump(obj)
        path.write_bytes(buffer.getvalue())
    elif key_style == "bytes":
        path.write_bytes(pickle.dumps({k.encode(): v for k, v in obj.items()}, protocol=4))
    elif key_style == "str":
        path.write_bytes(pickle.dumps(obj, protocol=4))
    else:
        raise ValueError(f"key_style must be 'python2', 'bytes' or 'str', got {key_style!r}")


def write_cifar(
    root: str | os.PathLike,
    train_images: np.ndarray,
    train_labels: np.ndarray,
    test_images: np.ndarray,
    test_labels: np.ndarray,
    dataset: Literal["cifar10", "cifar100"] = "cifar10",
    class_names: Sequence[str] | None = None,
    key_style: Literal["python2", "bytes", "str"] = "python2",
) -> Path:
    """Write images in the exact layout and format of the CIFAR python release (for tests and benchmarks).

    ``key_style="python2"`` reproduces the released files (Python 2 strings: ``str`` keys under
    ``encoding="latin1"``, ``bytes`` keys under ``encoding="bytes"``); ``"bytes"`` / ``"str"`` write Python 3
    pickles with that key type. CIFAR-10's training set is cut into five ``data_batch_*`` files.

    Args:
        train_images, test_images: ``[n, 32, 32, 3]`` uint8. train_labels, test_labels: ``[n]`` ints.

    Returns:
        the data folder (``root/cifar-10-batches-py`` or ``root/cifar-100-python``).
    """
    spec = CIFAR_SPECS[dataset]
    folder = Path(root) / spec["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    names = list(class_names) if class_names is not None else [f"class{i}" for i in range(spec["num_classes"])]

    def record(images: np.ndarray, labels: np.ndarray, label: str, offset: int) -> dict[str, Any]:
        images = np.asarray(images, dtype=np.uint8)
        data = np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3072))
        labels = [int(v) for v in labels]
        out: dict[str, Any] = {"batch_label": label}
        if dataset == "cifar10":
            out["labels"] = labels
        else:
            out.update(fine_labels=labels, coarse_labels=[v // 5 for v in labels])
        out.update(data=data, filenames=[f"image_{offset + i:06d}.png" for i in range(len(labels))])
        return out

    train_parts = np.array_split(np.arange(len(train_labels)), len(spec["train"]))
    for i, (name, part) in enumerate(zip(spec["train"], train_parts)):
        _dump(folder / name, record(train_images[part], np.asarray(train_labels)[part], f"training batch {i + 1} of {len(spec['train'])}", int(part[0]) if part.size else 0), key_style)
    _dump(folder / spec["test"][0], record(test_images, test_labels, "testing batch 1 of 1", 0), key_style)
    meta: dict[str, Any] = {spec["names_key"]: names}
    if dataset == "cifar10":
        meta.update(num_cases_per_batch=len(train_parts[0]), num_vis=3072)
    else:
        meta["coarse_label_names"] = [f"super{i}" for i in range(20)]
    _dump(folder / spec["meta"], meta, key_style)
    return folder


def write_chexpert(
    root: str | os.PathLike,
    num_patients: int = 12,
    num_valid_patients: int = 4,
    studies_per_patient: int = 2,
    image_size: tuple[int, int] = (390, 320),
    labels: dict[str, Sequence[float]] | None = None,
    folder: str = "CheXpert-v1.0-small",
    seed: int = 0,
) -> tuple[Path, list[dict[str, str]]]:
    """Write a small data set in CheXpert's exact layout: ``root/<folder>/{train,valid}.csv`` and grayscale JPEGs
    ``root/<folder>/{train,valid}/patientNNNNN/studyK/view1_frontal.jpg`` (plus a lateral view for every other
    study). For tests and loader benchmarks.

    Training labels are drawn from {1.0, 0.0, -1.0, blank}; validation labels from {1.0, 0.0} (like the release).

    Args:
        image_size: (width, height) of the JPEGs (the -small release: about 390 × 320).
        labels: optional fixed values per observation for the training rows, cycled (NaN writes a blank cell).

    Returns:
        (the release folder, the training rows as written: dicts of column → cell text).
    """
    rng = np.random.default_rng(seed)
    base = Path(root) / folder
    header = ["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *OBSERVATIONS]
    written: list[dict[str, str]] = []
    from PIL import Image

    def cell(value: float) -> str:
        return "" if isinstance(value, float) and math.isnan(value) else f"{float(value):.1f}"

    for split, patients, first in (("train", num_patients, 1), ("valid", num_valid_patients, 64541)):
        rows = []
        for p in range(patients):
            for s in range(1, studies_per_patient + 1):
                views = [("view1_frontal.jpg", "Frontal", "AP" if rng.random() < 0.7 else "PA")]
                if s % 2 == 0:
                    views.append(("view2_lateral.jpg", "Lateral", ""))
                for name, view, appa in views:
                    rel = f"{folder}/{split}/patient{first + p:05d}/study{s}/{name}"
                    target = Path(root) / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    Image.fromarray(noise_image(rng, image_size, 1)).save(target, quality=90)
                    row = {"Path": rel, "Sex": "Male" if rng.random() < 0.5 else "Female", "Age": str(int(rng.integers(18, 90))), "Frontal/Lateral": view, "AP/PA": appa}
                    for obs in OBSERVATIONS:
                        if split == "train" and labels is not None and obs in labels:
                            values = labels[obs]
                            row[obs] = cell(values[len(rows) % len(values)])
                        elif split == "train":
                            row[obs] = ["1.0", "0.0", "-1.0", ""][int(rng.choice(4, p=[0.25, 0.25, 0.15, 0.35]))]
                        else:
                            row[obs] = "1.0" if rng.random() < 0.35 else "0.0"
                    rows.append(row)
        with open(base / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        if split == "train":
            written = rows
    return base, written


def write_chexpert_csv(
    path: str | os.PathLike,
    num_rows: int,
    values: Sequence[str] = ("1.0", "0.0", "-1.0", ""),
    seed: int = 0,
) -> Path:
    """Write a CheXpert ``train.csv`` of ``num_rows`` rows and no images (for the reader's tests and benchmarks; the
    small release's has 223,414 rows): patient ``i`` has one study, every seventh view is Lateral, and each of the 14
    observations takes a cell of ``values`` at random (``"1"``, ``"0"``, ``"-1"`` are also valid cells).

    Returns:
        ``path``.
    """
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = np.asarray(values)[rng.integers(0, len(values), (num_rows, len(OBSERVATIONS)))]
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *OBSERVATIONS]) + "\n")
        for i in range(num_rows):
            f.write(f"CheXpert-v1.0-small/train/patient{i:05d}/study1/view1_frontal.jpg,Female,{40 + i % 50},"
                    f"{'Frontal' if i % 7 else 'Lateral'},AP," + ",".join(cells[i]) + "\n")
    return path


def bdd_frames(num_train: int = 84, num_val: int = 21, seed: int = 3) -> dict[str, list[dict[str, str]]]:
    """Frame attributes for :func:`write_bdd100k`: the weather cycles through the seven
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


def write_bdd100k(
    root: str | os.PathLike,
    frames: dict[str, Sequence[dict[str, str]]] | None = None,
    num_frames: tuple[int, int] = (60, 20),
    version: Literal["2018", "2020"] = "2018",
    image_size: tuple[int, int] = (1280, 720),
    write_images: bool = True,
    seed: int = 0,
) -> Path:
    """Write a small data set in BDD100K's layout: the labels JSON of ``version`` and JPEG frames under
    ``images/100k/{train,val}/`` (for tests and loader benchmarks).

    Args:
        frames: ``{"train": [attributes...], "val": [...]}``, one ``{"weather": ..., "scene": ..., "timeofday": ...}``
            per frame; None draws ``num_frames`` (train, val) frames with random documented values.
        image_size: (width, height) of the JPEGs (the release: 1280 × 720).
        write_images: also write the JPEGs.

    Returns:
        ``root``.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    from PIL import Image

    if frames is None:
        frames = {
            split: [{a: str(rng.choice(ATTRIBUTE_VALUES[a])) for a in ATTRIBUTES} for _ in range(n)]
            for split, n in zip(("train", "val"), num_frames)
        }
    for split, label_file in zip(("train", "val"), LABEL_FILES[version]):
        records = []
        for i, attributes in enumerate(frames[split]):
            name = f"{split[0]}{seed:02d}{i:06x}-{int(rng.integers(16**8)):08x}.jpg"
            box = {"x1": 10.0, "y1": 20.0, "x2": 110.5, "y2": 220.25}
            record: dict[str, Any] = {"name": name, "attributes": dict(attributes), "timestamp": 10000}
            if version == "2018":
                record["labels"] = [
                    {"category": "car", "attributes": {"occluded": False, "truncated": False, "trafficLightColor": "none"}, "manualShape": True, "manualAttributes": True, "box2d": box, "id": 0},
                    {"category": "drivable area", "attributes": {"areaType": "direct"}, "manualShape": True, "manualAttributes": True, "poly2d": [{"vertices": [[0, 0], [5, 5], [0, 5]], "types": "LLL", "closed": True}], "id": 1},
                ]
            else:
                record.update(videoName=name[:-4], frameIndex=0)
                if i % 3:  # det_20 frames without objects have no "labels" field
                    record["labels"] = [{"id": "1", "category": "pedestrian", "attributes": {"occluded": True, "truncated": False, "crowd": False}, "box2d": box}]
            records.append(record)
            if write_images:
                target = root / "images" / "100k" / split / name
                target.parent.mkdir(parents=True, exist_ok=True)
                # about 70 KB at 1280 × 720 (the release averages about 53 KB: 5.3 GB for 100k frames)
                Image.fromarray(noise_image(rng, image_size, 3, grain=3)).save(target, quality=75)
        (root / "images" / "100k" / split).mkdir(parents=True, exist_ok=True)
        path = root / label_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records, indent=None if version == "2018" else 1))
    return root
