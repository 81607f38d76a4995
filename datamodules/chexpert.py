"""CheXpert chest X-rays (Irvin et al. 2019): the five competition findings, per-label uncertainty policies, one
binary task per finding or all five as a multi-label problem.

Files: the release ``CheXpert-v1.0-small`` (or the full ``CheXpert-v1.0``) from
https://stanfordmlgroup.github.io/competitions/chexpert/ (free registration; no direct download link), extracted
so that ``root`` is the release folder or its parent::

    CheXpert-v1.0-small/train.csv   223,414 rows           CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg
    CheXpert-v1.0-small/valid.csv   234 rows (200 studies)  CheXpert-v1.0-small/valid/patient64541/study1/view1_frontal.jpg

CSV columns: ``Path, Sex, Age, Frontal/Lateral, AP/PA`` and 14 observations (``No Finding, Enlarged
Cardiomediastinum, Cardiomegaly, Lung Opacity, Lung Lesion, Edema, Consolidation, Pneumonia, Atelectasis,
Pneumothorax, Pleural Effusion, Pleural Other, Fracture, Support Devices``) valued ``1.0`` (positive), ``0.0``
(negative), ``-1.0`` (uncertain) or blank (not mentioned). ``Path`` starts with the release folder's name
(``CheXpert-v1.0-small/…``): that first component is replaced by the folder holding the CSV, so the data can live
anywhere.

Labels (the five competition tasks in the order of LibAUC and of Yao, Lin & Yang's D1–D5): Cardiomegaly, Edema,
Consolidation, Atelectasis, Pleural Effusion. Each label has an uncertainty policy for ``-1.0``:

* ``"ones"`` (U-Ones): uncertain → 1;  ``"zeros"`` (U-Zeros): uncertain → 0;
* ``"ignore"`` (U-Ignore): the (image, label) pair is unlabeled: dropped from that label's binary task, ``-1`` in
  the multi-label matrix (never sampled, excluded from that task's metrics).

Default: U-Ones for Edema and Atelectasis, U-Zeros for the others (LibAUC's recipe, from Irvin et al.'s best policy
per finding). Blank cells follow ``blank``: ``"zeros"`` (default, LibAUC: not mentioned → negative) or ``"ignore"``.
``valid.csv`` (expert consensus, no uncertain labels) is the test split, as in LibAUC and Yao, Lin & Yang;
``val_fraction`` of the training patients (default 0.1, Yao, Lin & Yang's train / validation 9:1; split by patient so
no patient is in both — the paper does not say how it split [assumption]) is the validation split.

Images: grayscale JPEG, decoded per image in the DataLoader workers, replicated to 3 channels, resized to
``image_size`` × ``image_size`` (LibAUC: 320), scaled to [0, 1] and normalized with the ImageNet mean / std.
Training augmentation (``augment``): LibAUC's ``RandomAffine(degrees=15, translate=(0.05, 0.05),
scale=(0.95, 1.05))`` before the resize.

Batch fields: ``x`` ``[B, 3, S, S]`` float32 and ``index`` (row in the split), plus

* a binary task (``task="Edema"``): ``y`` ``[B]`` in {0, 1}, ``pos_index``, ``neg_index``
  (:func:`fccolit.data.binary_fields`), training batches from a :class:`~fccolit.samplers.DualSampler`;
* ``task="multilabel"``: evaluation batches have ``y`` ``[B, T]`` (1 / 0 / −1 unlabeled); training batches come
  from a :class:`~fccolit.samplers.multilabel.MultiLabelSampler` (``tasks_per_batch`` tasks × ``num_positives``
  positives and the rest negatives) through :class:`~fccolit.samplers.multilabel.MultiLabelPairDataset`: ``y``
  ``[B]`` the label of the position's ``task``, ``labels`` ``[B, T]``, ``pair_index`` / ``pos_index`` /
  ``neg_index`` the per-(task, sample) state rows.

References:
    * Yao, Lin & Yang (NeurIPS 2022): Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial
      AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505 (§6.1: the CheXpert protocol).
    * Irvin et al. 2019: Jeremy Irvin et al., "CheXpert: A Large Chest Radiograph Dataset with Uncertainty Labels and
      Expert Comparison", AAAI 2019.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch

from fccolit._checks import check_choice
from fccolit.data import binary_fields
from fccolit.datasets.images import IMAGENET_MEAN, IMAGENET_STD, ImageFileDataset, RowOrigin
from fccolit.datasets.transforms import ChestXrayTransform
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.chexpert import (
    COMPETITION_LABELS, OBSERVATIONS, apply_uncertainty, read_chexpert_csv, strip_release_prefix,
)
from fccolit.io.paths import data_file_problem, is_data_file
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes, tasks_per_batch_for

from fccolit.datamodules.base import FCCODataModule

__all__ = ["CheXpertDataModule", "COMPETITION_LABELS", "DEFAULT_UNCERTAINTY", "OBSERVATIONS"]

CHEXPERT_URL = "https://stanfordmlgroup.github.io/competitions/chexpert/"
DEFAULT_UNCERTAINTY = {"Edema": "ones", "Atelectasis": "ones"}  # every other label: "zeros"
_POLICIES = ("ones", "zeros", "ignore")
_PATIENT = re.compile(r"patient(\d+)")


# ---------------------------------------------------------------------------------------------- the DataModule
class CheXpertDataModule(FCCODataModule):
    """CheXpert with per-label uncertainty policies; one finding as a binary task, or all as a multi-label one.

    See the module docstring for the files, the policies and the batch fields.

    The CSVs are parsed once into a cache (``<cache_dir>/chexpert-<hash>/``, keyed by the CSV files and the label
    columns); policies, filters and splits are applied in ``__init__``, so :attr:`sizes` exists right after
    construction. Images are checked when they are read (a missing or unreadable image names the file and its CSV
    line); ``verify_images=True`` checks that every listed file exists up front.

    Args:
        root: the release folder (holding ``train.csv``) or its parent.
        labels: the label columns (default: the five competition findings).
        uncertainty: ``{label: "ones" | "zeros" | "ignore"}`` for ``-1.0``; labels it does not name keep the default
            (U-Ones for Edema and Atelectasis, U-Zeros for the others).
        blank: ``"zeros"`` or ``"ignore"`` for blank cells.
        frontal_only: keep frontal views only (LibAUC, Yao, Lin & Yang).
        task: a label name (binary task) or ``"multilabel"`` (all ``labels``).
        val_fraction: share of the training patients held out for validation.
        image_size: S, images are resized to S × S (LibAUC: 320).
        augment: random affine augmentation for training.
        batch_size: global training batch size.
        num_positives: positives per batch (binary task) or per task of a batch (multi-label); None: half.
        tasks_per_batch: multi-label: tasks per batch K, a divisor of ``batch_size`` (None: the largest divisor of
            ``batch_size`` up to the number of tasks, e.g. 4 of the 5 tasks for a batch of 32).
        num_batches: batches per epoch (None: the sampler's default).
        seed: seeds the split and the sampler.
        verify_images: check that every image file exists in ``setup``.
        num_workers, eval_batch_size: DataLoader workers and evaluation batch size.
        cache_dir: folder of the cache entries.

    Attributes:
        data_dir: the release folder; task_names: the label of each output; positives_per_task: training positives.

    Raises:
        ValueError: ``labels`` not distinct CheXpert observations; an ``uncertainty`` key outside ``labels`` or a
            policy not one of the listed values; ``blank`` not one of the listed values; ``task`` neither
            ``"multilabel"`` nor one of ``labels``; ``val_fraction`` outside [0, 1); a CSV file without image rows;
            a binary task's training split without both classes; in ``setup``, an image that cannot be read.
        FileNotFoundError: no ``train.csv`` / ``valid.csv`` under ``root``; in ``setup``, images listed but missing.

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.images import write_chexpert
        >>> with tempfile.TemporaryDirectory() as folder:  # CSV files and tiny JPEGs of 8 + 4 patients
        ...     _ = write_chexpert(pathlib.Path(folder), num_patients=8, num_valid_patients=4, image_size=(16, 16))
        ...     CheXpertDataModule(folder, cache_dir=folder).sizes["num_tasks"]
        5
    """

    def __init__(
        self,
        root: str | os.PathLike,
        labels: Sequence[str] = COMPETITION_LABELS,
        uncertainty: dict[str, str] | None = None,
        blank: Literal["zeros", "ignore"] = "zeros",
        frontal_only: bool = True,
        task: str = "multilabel",
        val_fraction: float = 0.1,
        image_size: int = 320,
        augment: bool = True,
        batch_size: int = 32,
        num_positives: int | None = None,
        tasks_per_batch: int | None = None,
        num_batches: int | None = None,
        seed: int = 0,
        verify_images: bool = False,
        num_workers: int = 0,
        eval_batch_size: int = 64,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        self.labels = [str(l) for l in labels]
        unknown = [l for l in self.labels if l not in OBSERVATIONS]
        if unknown or not self.labels or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct CheXpert observations {list(OBSERVATIONS)}, got {list(labels)}")
        given = dict(uncertainty or {})
        bad = {k: v for k, v in given.items() if k not in self.labels or v not in _POLICIES}
        if bad:
            raise ValueError(f"uncertainty: each key must be one of labels {self.labels} and each value one of {_POLICIES}; got {bad}")
        # a label the dict does not name keeps the default policy (U-Ones: Edema, Atelectasis; U-Zeros: the others)
        self.policies = [given.get(l, DEFAULT_UNCERTAINTY.get(l, "zeros")) for l in self.labels]
        check_choice("blank", blank, ("zeros", "ignore"))
        if task != "multilabel" and task not in self.labels:
            raise ValueError(f"task must be 'multilabel' or one of labels {self.labels}, got {task!r}")
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.blank, self.frontal_only, self.task, self.val_fraction = blank, frontal_only, task, val_fraction
        self.image_size, self.augment, self.verify_images = int(image_size), augment, verify_images
        self.batch_size, self.num_positives, self.num_batches, self.seed = batch_size, num_positives, num_batches, seed
        self.task_names = self.labels if task == "multilabel" else [task]
        self.tasks_per_batch = tasks_per_batch_for(batch_size, len(self.task_names), tasks_per_batch)

        self.data_dir = self._find_data_dir(Path(root))
        files = [self.data_dir / "train.csv", self.data_dir / "valid.csv"]
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = cache_key(files, {"reader": "chexpert-csv", "labels": self.labels}, prefix="chexpert")
        self._arrays = cached_arrays(self.cache_dir, key, self._read)
        self._build_splits()

    # ------------------------------------------------------------------ files
    @staticmethod
    def _find_data_dir(root: Path) -> Path:
        for folder in (root, root / "CheXpert-v1.0-small", root / "CheXpert-v1.0"):
            if is_data_file(folder / "train.csv"):
                if not is_data_file(folder / "valid.csv"):
                    raise FileNotFoundError(f"CheXpert file not found: {folder / 'valid.csv'} (the test split; it ships with train.csv)")
                return folder
        raise FileNotFoundError(
            f"CheXpert file not found: {root / 'train.csv'} (nor in {root / 'CheXpert-v1.0-small'} or "
            f"{root / 'CheXpert-v1.0'}). CheXpert needs a free registration at {CHEXPERT_URL}; download "
            "CheXpert-v1.0-small.zip and extract it into the folder you pass as root."
        )

    def _read(self) -> dict[str, np.ndarray]:
        out = {}
        for split, name in (("train", "train.csv"), ("test", "valid.csv")):
            parsed = read_chexpert_csv(self.data_dir / name, self.labels)
            if parsed["line"].size == 0:
                raise ValueError(
                    f"{self.data_dir / name}: the file holds only its header line, no image row (is it truncated?); "
                    f"extract it again from the release ({CHEXPERT_URL})"
                )
            for k, v in parsed.items():
                out[f"{split}_{k}"] = v
        return out

    # ------------------------------------------------------------------ the protocol
    def _build_splits(self) -> None:
        a = self._arrays
        self._splits: dict[str, dict[str, np.ndarray]] = {}
        for split in ("train", "test"):
            keep = np.asarray(a[f"{split}_frontal"]) if self.frontal_only else np.ones(len(a[f"{split}_line"]), dtype=bool)
            rows = np.flatnonzero(keep)
            labels = apply_uncertainty(np.asarray(a[f"{split}_raw"])[rows], self.policies, self.blank)
            if self.task != "multilabel":
                column = self.labels.index(self.task)
                labelled = labels[:, column] >= 0
                rows, labels = rows[labelled], labels[labelled][:, [column]]
            self._splits[split] = {"rows": rows, "labels": labels}
        # validation: whole patients of the training CSV
        train = self._splits.pop("train")
        paths = np.asarray(self._arrays["train_path"])[train["rows"]]
        patients = np.asarray([self._patient(p, i) for i, p in enumerate(paths)])
        unique = np.unique(patients)
        rng = np.random.default_rng([int(self.seed), 0xC4E5])
        held = rng.permutation(unique)[: int(round(self.val_fraction * unique.size))]
        is_val = np.isin(patients, held)
        for split, mask in (("train", ~is_val), ("val", is_val)):
            self._splits[split] = {"rows": train["rows"][mask], "labels": train["labels"][mask], "source": "train"}
        self._splits["test"]["source"] = "test"
        y = self._splits["train"]["labels"]
        if self.task == "multilabel":
            self.sizes = multilabel_sizes(y)
            self.positives_per_task = [int(v) for v in (y == 1).sum(0)]
        else:
            positives = int((y == 1).sum())
            if not 0 < positives < len(y):
                raise ValueError(
                    f"{self.data_dir / 'train.csv'}: the training split of task {self.task!r} has {positives} positives "
                    f"of {len(y)} images; it needs both classes"
                )
            self.sizes = {"num_samples": len(y), "num_positives": positives, "num_negatives": len(y) - positives, "num_outputs": 1}
            self.positives_per_task = [positives]

    @staticmethod
    def _patient(path: bytes, i: int) -> str:
        m = _PATIENT.search(path.decode(errors="replace"))
        return m.group(0) if m else f"row{i}"

    # ------------------------------------------------------------------ LightningDataModule
    def prepare_data(self) -> None:
        """Nothing to download (CheXpert needs registration); the CSVs were parsed and cached in ``__init__``."""

    def _dataset(self, split: str) -> ImageFileDataset:
        info = self._splits[split]
        source = info["source"]
        csv_name = "train.csv" if source == "train" else "valid.csv"
        rel = [strip_release_prefix(bytes(p)) for p in np.asarray(self._arrays[f"{source}_path"])[info["rows"]]]
        lines = np.asarray(self._arrays[f"{source}_line"])[info["rows"]]
        labels = torch.from_numpy(info["labels"].astype(np.int64))
        if self.task == "multilabel":
            fields = {"y": labels, "index": torch.arange(labels.shape[0])}
        else:
            fields = binary_fields(torch.empty(labels.shape[0], 0), labels[:, 0])
            del fields["x"]
        load = ChestXrayTransform(self.image_size, augment=self.augment and split == "train")
        origin = RowOrigin(str(self.data_dir / csv_name), lines)
        dataset = ImageFileDataset(self.data_dir, rel, fields, load, IMAGENET_MEAN, IMAGENET_STD, origin)
        if self.verify_images:
            missing = []
            for i in range(len(dataset)):
                problem = data_file_problem(dataset.path(i))
                if problem is not None:
                    raise ValueError(f"image {dataset.path(i)} (listed in {origin(i)}) {problem}: replace it with the image")
                if not dataset.path(i).is_file():
                    missing.append(i)
            if missing:
                i = missing[0]
                raise FileNotFoundError(f"{len(missing)} image(s) of the {split} split not found, e.g. {dataset.path(i)} (listed in {origin(i)})")
        return dataset

    def split_source(self, split: str) -> str | None:
        """``valid.csv`` (the test split), or ``train.csv`` (the validation split: patients held out of it)."""
        if split == "test":
            return str(self.data_dir / "valid.csv")
        return str(self.data_dir / "train.csv") if split == "train" else f"patients held out of {self.data_dir / 'train.csv'}"

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self._dataset("train")
        self.val_dataset = self._dataset("val")
        self.test_dataset = self._dataset("test")
        if self.task == "multilabel":
            self.train_dataset = MultiLabelPairDataset(self.train_dataset, self.train_dataset.fields["y"])

    def build_train_sampler(self) -> RankAwareBatchSampler:
        y = torch.from_numpy(self._splits["train"]["labels"].astype(np.int64))
        if self.task != "multilabel":
            return DualSampler(y[:, 0], self.batch_size, self.num_positives, num_batches=self.num_batches, seed=self.seed)
        block = self.batch_size // self.tasks_per_batch
        positives = block // 2 if self.num_positives is None else int(self.num_positives)
        return MultiLabelSampler(y, self.tasks_per_batch, positives, block - positives, self.num_batches, seed=self.seed)
