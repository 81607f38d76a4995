"""CIFAR-10 / CIFAR-100, long-tailed (LDAM protocol) and the binary imbalanced tasks of Wang et al. (AISTATS 2022)
and Yao, Lin & Yang (NeurIPS 2022).

Files: the python version of CIFAR as distributed by its author, https://www.cs.toronto.edu/~kriz/cifar.html
(``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``), extracted into ``root``::

    root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}
    root/cifar-100-python/{train, test, meta}

Each file is a pickled dict written by Python 2 (keys are ``str`` with ``encoding="latin1"``, ``bytes`` with
``encoding="bytes"``; both are accepted, as are files re-saved from Python 3 with either key type): ``data`` is a
``[n, 3072]`` uint8 array, each row 1024 red, then 1024 green, then 1024 blue values of a 32×32 image in row-major
order; ``labels`` (CIFAR-10) or ``fine_labels`` / ``coarse_labels`` (CIFAR-100) are lists of ints; the meta file has
``label_names`` / ``fine_label_names`` (reader: :mod:`fccolit.io.cifar`). ``download=True`` fetches and extracts the archive with torchvision's
downloader (never used by the tests).

Long tail (Cao et al. 2019, LDAM-DRW, ``imbalance_cifar.py`` in https://github.com/kaidic/LDAM-DRW): with ``C`` classes,
``n_max = N_train / C`` and ``ρ = imb_factor``, class ``i`` keeps ``⌊n_max · (1/ρ)^{i/(C−1)}⌋`` images
(``profile="exp"``; class 0 is the head) or ``n_max`` for the first ``C/2`` classes and ``⌊n_max / ρ⌋`` for the
others (``"step"``). Which images: ``np.random.seed(seed)`` once, then for each class in label order shuffle its
indices and keep the first ``n_i`` — reproduced bit for bit (``seed=0`` is LDAM's ``rand_number=0``). CIFAR-10 at
ρ = 100: ``[5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]`` (12,406 images). The test set stays the
balanced original.

Tasks:

* ``"multiclass"``: the long-tailed C-class problem; ``y`` is the class.
* ``"one_vs_rest"`` (Yao, Lin & Yang, §6.1 and App. E.6, "binary CIFAR-10-LT"): ``positive_classes`` (default
  ``["cat"]``, class 3) against the rest, on the long-tailed set: 1077 positives and 11,329 negatives at ρ = 100.
* ``"binary_imbalanced"`` (Wang et al., §4.2): half of the classes positive, then ``1 − positive_keep`` (98%) of the
  positive training images removed at random; the test set unchanged (50% positive). Which half the paper does not
  say: the default is the upper half, classes ``C/2 … C−1``, as LibAUC's ``ImbalancedDataGenerator`` (the SOAP code
  the paper follows) [assumption]. CIFAR-10: 500 positives and 25,000 negatives before the split.

Validation: ``val_fraction`` of the (long-tailed, reduced) training set, seeded and stratified by the task's label
(the class; positive / negative for the binary tasks). Defaults follow each protocol: 0.2 for ``binary_imbalanced``
(Wang et al.: train / validation 4:1), 0.1 for ``one_vs_rest`` (Yao, Lin & Yang: 9:1, whose paper reports the 9:1
split as its "testing set"; the balanced official test set is the ``test`` split here), 0 for ``multiclass`` (LDAM has
no validation split; the validation loader then uses the test set).

Augmentation (training only, ``augment=True``): LDAM's ``RandomCrop(32, padding=4)`` (zero padding) and
``RandomHorizontalFlip``, then normalization with mean ``(0.4914, 0.4822, 0.4465)`` and std
``(0.2023, 0.1994, 0.2010)`` for every split. It runs batched in ``__getitems__`` on the uint8 images (in the
DataLoader workers); each image's offsets and flip are drawn from the training batch's keys (the sampler's seed,
epoch and batch, and the image's position in the global batch: :class:`~fccolit.samplers.base.SampledBatch`), not
from a global generator, so they are the same after a mid-epoch resume, in any worker and on any number of
processes.

Batch fields: ``x`` ``[B, 3, 32, 32]`` float32; binary tasks add those of :func:`fccolit.data.binary_fields`
(``y`` in {0, 1}, ``index``, ``pos_index``, ``neg_index``) and the original class as ``label``, with training
batches from a :class:`~fccolit.samplers.DualSampler`; the multi-class task has ``y`` (the class) and ``index``,
with shuffled training batches (:class:`~fccolit.samplers.uniform.UniformBatchSampler`).

References:
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
    * Yao, Lin & Yang (NeurIPS 2022): Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial
      AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505.
    * Cao et al. 2019: Kaidi Cao, Colin Wei, Adrien Gaidon, Nikos Arechiga and Tengyu Ma, "Learning Imbalanced
      Datasets with Label-Distribution-Aware Margin Loss", NeurIPS 2019 (LDAM-DRW).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import torch

from fccolit._checks import check_choice
from fccolit.data import binary_fields
from fccolit.datasets.images import ImageArrayDataset
from fccolit.datasets.splits import stratified_split
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.cifar import CIFAR_SPECS, read_cifar_batch, read_cifar_names
from fccolit.io.paths import is_data_file
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.samplers.uniform import UniformBatchSampler

from fccolit.datamodules.base import FCCODataModule

__all__ = ["CIFARLTDataModule", "long_tail_counts", "long_tail_indices"]

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
_TASKS = ("multiclass", "one_vs_rest", "binary_imbalanced")
_DEFAULT_VAL = {"multiclass": 0.0, "one_vs_rest": 0.1, "binary_imbalanced": 0.2}


# ---------------------------------------------------------------------------------------------- the long tail
def long_tail_counts(num_per_class: float, num_classes: int, imb_factor: float, profile: str = "exp") -> list[int]:
    """Images kept per class by LDAM's ``get_img_num_per_cls``.

    Args:
        num_per_class: ``n_max = N_train / C`` (5000 for CIFAR-10, 500 for CIFAR-100).
        num_classes: C.
        imb_factor: ρ ≥ 1, the ratio of the largest to the smallest class (LDAM passes 1/ρ).
        profile: ``"exp"`` (``⌊n_max (1/ρ)^{i/(C−1)}⌋``) or ``"step"`` (``n_max`` for the first ⌊C/2⌋ classes,
            ``⌊n_max / ρ⌋`` for the rest).
    """
    if imb_factor < 1:
        raise ValueError(f"imb_factor is ρ = largest / smallest class, at least 1, got {imb_factor}")
    ratio = 1.0 / float(imb_factor)
    if profile == "exp":
        return [int(num_per_class * ratio ** (i / (num_classes - 1.0))) for i in range(num_classes)]
    if profile == "step":
        half = num_classes // 2
        return [int(num_per_class)] * half + [int(num_per_class * ratio)] * (num_classes - half)
    raise ValueError(f"profile must be 'exp' or 'step', got {profile!r}")


def long_tail_indices(labels: np.ndarray, counts: Sequence[int], seed: int = 0) -> np.ndarray:
    """Rows kept for the long tail, in LDAM's order (class by class): ``np.random.seed(seed)`` once, then for each
    class (ascending) shuffle its row indices and keep the first ``counts[c]``."""
    rng = np.random.RandomState(seed)  # the same stream as np.random.seed(seed) + np.random.shuffle
    labels = np.asarray(labels)
    kept = []
    for c in np.unique(labels):
        rows = np.where(labels == c)[0]
        if counts[c] > rows.size:
            raise ValueError(f"class {c} has {rows.size} training images, the long-tail profile asks for {counts[c]}")
        rng.shuffle(rows)
        kept.append(rows[: counts[c]])
    return np.concatenate(kept)


class CIFARLTDataModule(FCCODataModule):
    """CIFAR-10/100 with the long-tailed training set of LDAM and the binary tasks of Wang et al. and Yao, Lin & Yang.

    See the module docstring for the protocols.

    The decoded arrays are cached once (``<cache_dir>/<dataset>-<hash>/``, memory-mappable, keyed by the files);
    the long tail, the binary labels and the splits are recomputed from them in ``__init__`` (milliseconds), so
    :attr:`sizes` and :attr:`class_counts` exist right after construction.

    Args:
        root: folder holding ``cifar-10-batches-py/`` or ``cifar-100-python/`` (or that folder itself).
        dataset: ``"cifar10"`` or ``"cifar100"``.
        imb_factor: ρ, largest / smallest class (None: 100 for ``multiclass`` and ``one_vs_rest``, the LDAM /
            Yao, Lin & Yang setting; 1, no long tail, for ``binary_imbalanced``, which is built from the full set).
        profile: ``"exp"`` or ``"step"``.
        task: ``"multiclass"``, ``"one_vs_rest"`` or ``"binary_imbalanced"``.
        positive_classes: the positive classes of a binary task, as indices or names (None: ``["cat"]`` for
            ``one_vs_rest`` on CIFAR-10, which has no default on CIFAR-100; the upper half for ``binary_imbalanced``).
        positive_keep: ``binary_imbalanced``: share of the positive training images kept (Wang et al.: 0.02).
        val_fraction: validation share of the training set (None: the task's protocol, see the module docstring).
        augment: random crop and flip for training.
        batch_size: global training batch size.
        num_positives: binary tasks: positives per batch (None: half the batch, the dual sampler's default).
        sampler: binary tasks: ``"dual"`` (positives oversampled to ``num_positives`` per batch, what the AP and
            pAUC objectives need) or ``"uniform"`` (plain shuffled batches, e.g. cross-entropy pre-training).
        num_batches: batches per epoch (None: one pass over the negatives (binary tasks) or the training set).
        seed: the long-tail selection (LDAM's ``rand_number``), the split, the dropping of positives and the sampler.
        download: fetch and extract the archive with torchvision's downloader when the files are missing.
        num_workers, eval_batch_size: DataLoader workers and evaluation batch size.
        cache_dir: folder of the cache entries (None: the user cache folder,
            ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``: :func:`~fccolit.io.default_cache_dir`).

    Attributes:
        class_names: the C class names; class_counts: training images per class after the long tail (and, for
        ``binary_imbalanced``, the dropping of positives), before the validation split; positive_classes: indices;
        rows: ``{split: rows of the original training (test) arrays}``: training rows in LDAM's class-by-class
        order, validation and test rows in file order.

    Raises:
        ValueError: ``dataset``, ``task``, ``sampler`` or ``profile`` not one of the listed values;
            ``positive_keep`` outside (0, 1]; ``val_fraction`` outside [0, 1); ``imb_factor`` below 1; a class with
            fewer training images than the long tail asks for; ``positive_classes`` missing (``one_vs_rest`` on
            CIFAR-100), naming an unknown class, or not a non-empty proper subset; a training split without both
            classes (binary tasks); files whose arrays or class names do not match the dataset.
        FileNotFoundError: the CIFAR files are not in ``root`` (and ``download`` is False).

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.images import cifar_arrays, write_cifar
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_cifar(pathlib.Path(folder), *cifar_arrays(10, 10, 2))  # 10 tiny images a class, 2 to test
        ...     CIFARLTDataModule(folder, imb_factor=5, cache_dir=folder).sizes
        {'num_samples': 46, 'num_classes': 10, 'num_outputs': 10}
    """

    def __init__(
        self,
        root: str | os.PathLike,
        dataset: Literal["cifar10", "cifar100"] = "cifar10",
        imb_factor: float | None = None,
        profile: Literal["exp", "step"] = "exp",
        task: Literal["multiclass", "one_vs_rest", "binary_imbalanced"] = "multiclass",
        positive_classes: list[int | str] | None = None,
        positive_keep: float = 0.02,
        val_fraction: float | None = None,
        augment: bool = True,
        batch_size: int = 128,
        num_positives: int | None = None,
        sampler: Literal["dual", "uniform"] = "dual",
        num_batches: int | None = None,
        seed: int = 0,
        download: bool = False,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        check_choice("dataset", dataset, sorted(CIFAR_SPECS))
        check_choice("task", task, _TASKS)
        check_choice("sampler", sampler, ("dual", "uniform"))
        self.sampler = sampler
        check_choice("profile", profile, ("exp", "step"))
        if not 0.0 < positive_keep <= 1.0:
            raise ValueError(f"positive_keep must be in (0, 1], got {positive_keep}")
        self.dataset, self.task, self.profile = dataset, task, profile
        self.imb_factor = float(imb_factor if imb_factor is not None else (1.0 if task == "binary_imbalanced" else 100.0))
        self.val_fraction = float(_DEFAULT_VAL[task] if val_fraction is None else val_fraction)
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        self.positive_keep, self.augment = float(positive_keep), augment
        self.batch_size, self.num_positives, self.num_batches, self.seed = batch_size, num_positives, num_batches, seed
        spec = CIFAR_SPECS[dataset]
        self.folder = self._find_folder(Path(root), spec, download)
        files = [self.folder / n for n in (*spec["train"], *spec["test"], spec["meta"])]
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = cache_key(files, {"reader": "cifar-pickle", "dataset": dataset}, prefix=dataset)
        self._arrays = cached_arrays(self.cache_dir, key, lambda: self._read(spec))
        self.class_names = [str(n) for n in self._arrays["class_names"]]
        self.num_classes = spec["num_classes"]
        self._build_splits(positive_classes)

    # ------------------------------------------------------------------ files
    @staticmethod
    def _find_folder(root: Path, spec: dict[str, Any], download: bool) -> Path:
        names = (*spec["train"], *spec["test"], spec["meta"])
        for folder in (root / spec["folder"], root):
            if all(is_data_file(folder / n) for n in names):
                return folder
        if download:
            import torchvision.datasets as tvd

            cls = tvd.CIFAR10 if spec["folder"].startswith("cifar-10-") else tvd.CIFAR100
            cls(str(root), train=True, download=True)  # downloads (or verifies) the archive and extracts it
            return CIFARLTDataModule._find_folder(root, spec, download=False)
        folder = root / spec["folder"]
        missing = [str(folder / n) for n in names if not is_data_file(folder / n)]
        archive = root / spec["archive"]
        hint = (
            f"The archive {archive} is there but not extracted: extract it, or pass download=True (torchvision checks "
            "and extracts it)." if is_data_file(archive) else
            f"Pass download=True to fetch {spec['archive']} with torchvision's downloader, or download it from "
            f"{CIFAR_URL} and extract it into {root}."
        )
        raise FileNotFoundError(f"CIFAR files not found: {', '.join(missing)}. {hint}")

    def _read(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        for split in ("train", "test"):
            parts = [read_cifar_batch(self.folder / n, spec["label_key"]) for n in spec[split]]
            images = np.concatenate([p[0] for p in parts])
            labels = np.concatenate([p[1] for p in parts])
            bad = np.flatnonzero((labels < 0) | (labels >= spec["num_classes"]))
            if bad.size:
                raise ValueError(
                    f"{self.folder / spec[split][0]} ...: label {labels[bad[0]]} of image {bad[0]} is not a class of "
                    f"{self.dataset} (0..{spec['num_classes'] - 1})"
                )
            arrays[f"{split}_images"], arrays[f"{split}_labels"] = images, labels
        names = read_cifar_names(self.folder / spec["meta"], spec["names_key"])
        if len(names) != spec["num_classes"]:
            raise ValueError(f"{self.folder / spec['meta']}: '{spec['names_key']}' has {len(names)} names, expected {spec['num_classes']}")
        arrays["class_names"] = np.asarray(names, dtype=str)
        return arrays

    # ------------------------------------------------------------------ the protocol
    def _positive_classes(self, given: list[int | str] | None) -> list[int]:
        c = self.num_classes
        if given is None:
            if self.task == "binary_imbalanced":
                return list(range(c // 2, c))
            if self.dataset == "cifar10":
                return [3]  # cat (Yao, Lin & Yang, Table 5)
            raise ValueError("task='one_vs_rest' on CIFAR-100 needs positive_classes (indices or names)")
        out = []
        for item in given:
            if isinstance(item, str) and not item.isdigit():
                if item not in self.class_names:
                    raise ValueError(f"unknown class name {item!r}; {self.dataset} has {self.class_names[:20]}")
                out.append(self.class_names.index(item))
            elif 0 <= int(item) < c:
                out.append(int(item))
            else:
                raise ValueError(f"positive class {item!r} is not a class index of {self.dataset} (0..{c - 1})")
        if not out or len(set(out)) == c:
            raise ValueError(f"positive_classes must be a non-empty proper subset of the classes, got {given}")
        return sorted(set(out))

    def _build_splits(self, positive_classes: list[int | str] | None) -> None:
        labels = np.asarray(self._arrays["train_labels"])
        per_class = labels.size / self.num_classes
        counts = long_tail_counts(per_class, self.num_classes, self.imb_factor, self.profile)
        pool = long_tail_indices(labels, counts, self.seed)
        binary = self.task != "multiclass"
        self.positive_classes = self._positive_classes(positive_classes) if binary else []
        is_pos = np.isin(labels, self.positive_classes)
        if self.task == "binary_imbalanced" and self.positive_keep < 1.0:
            rng = np.random.default_rng([int(self.seed), 0xC1FA])
            positives = pool[is_pos[pool]]
            keep = max(1, int(round(self.positive_keep * positives.size)))
            kept = rng.choice(positives, size=keep, replace=False)
            pool = np.concatenate([pool[~is_pos[pool]], np.sort(kept)])
        self.class_counts = np.bincount(labels[pool], minlength=self.num_classes).tolist()
        rng = np.random.default_rng([int(self.seed), 0x5B17])
        strata = is_pos[pool] if binary else labels[pool]  # binary tasks: both classes keep their share
        train_pos, val_pos = stratified_split(strata, self.val_fraction, rng)
        rows = {"train": pool[train_pos], "val": np.sort(pool[val_pos])}
        test_labels = np.asarray(self._arrays["test_labels"])
        self.rows = {**rows, "test": np.arange(test_labels.size)}
        self._fields = {}
        for split, split_rows in self.rows.items():
            cls = torch.from_numpy((test_labels if split == "test" else labels)[split_rows].astype(np.int64))
            if binary:
                fields = binary_fields(cls, torch.from_numpy(np.isin(cls.numpy(), self.positive_classes)).long())
                fields["label"] = fields.pop("x")
            else:
                fields = {"y": cls, "index": torch.arange(cls.numel())}
            self._fields[split] = fields
        y = self._fields["train"]["y"]
        if binary:
            positives = int(y.sum())
            if not 0 < positives < y.numel():
                raise ValueError(f"the training split holds {positives} positives of {y.numel()} images; it needs both classes")
            self.sizes = {"num_samples": int(y.numel()), "num_positives": positives, "num_negatives": int(y.numel()) - positives, "num_outputs": 1}
        else:
            self.sizes = {"num_samples": int(y.numel()), "num_classes": self.num_classes, "num_outputs": self.num_classes}

    # ------------------------------------------------------------------ LightningDataModule
    def prepare_data(self) -> None:
        """Nothing left to do: the files were read (or downloaded) and cached in ``__init__``."""

    def _dataset(self, split: str) -> ImageArrayDataset:
        images = self._arrays["test_images" if split == "test" else "train_images"]
        return ImageArrayDataset(images, self.rows[split], self._fields[split], augment=self.augment and split == "train")

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self._dataset("train")
        self.test_dataset = self._dataset("test")
        # without a validation split (LDAM's protocol) validation runs on the balanced test set
        self.val_dataset = self._dataset("val") if self.rows["val"].size else self.test_dataset

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if self.task == "multiclass" or self.sampler == "uniform":
            return UniformBatchSampler(self.sizes["num_samples"], self.batch_size, self.num_batches, seed=self.seed)
        return DualSampler(self._fields["train"]["y"], self.batch_size, self.num_positives, num_batches=self.num_batches, seed=self.seed)
