"""BDD100K image attributes (weather, scene, time of day) as classification tasks, with the per-class subsets of
the continual learning with non-forgetting constraints of Chen et al., NeurIPS 2025, arXiv:2506.02504.

Files, from https://bdd-data.berkeley.edu/ (free registration): ``root`` holds

    images/100k/{train,val}/<name>.jpg                      70,000 / 10,000 frames, 1280 × 720
    labels/bdd100k_labels_images_{train,val}.json           the 2018 "Labels" package, or
    labels/det_20/det_{train,val}.json                      the 2020 detection labels

Both label files are a JSON list of frames in the Scalabel format, ``{"name": "<id>.jpg", "attributes":
{"weather": ..., "scene": ..., "timeofday": ...}, "labels": [...boxes...], ...}``; only ``name`` and
``attributes`` are read (:func:`fccolit.io.bdd100k.read_bdd100k_attributes`; the frame list is streamed, so the 1 GB training file never sits in memory as Python
objects). Documented attribute values (bdd100k ``doc/format.rst``):

* weather: ``rainy, snowy, clear, overcast, undefined, partly cloudy, foggy``
* scene: ``tunnel, residential, parking lot, undefined, city street, gas stations, highway``
* timeofday: ``daytime, night, dawn/dusk, undefined``

A value outside these is an error naming the file, the frame and the field.

Tasks (classes in DevSafety's order, ``GangLii/DevSafety`` ``bdd100k_classnames.py``): ``"weather"`` over
``clear, overcast, snowy, rainy, partly cloudy, foggy``; ``"scene"`` over ``highway, residential, city street,
parking lot, tunnel`` (gas stations dropped, as there); ``"timeofday"`` over ``daytime, night, dawn/dusk``
[assumption: not in the papers]. Frames whose value is ``undefined`` (or not among ``classes``) are dropped. The
task ``"attributes"`` is multi-label: one binary task per class of each of the three attributes (14 tasks,
named ``"weather=foggy"`` …), a frame being unlabeled (−1) for the tasks of an attribute it has undefined.

Splits: the official ``val`` frames are the test split (DevSafety); ``val_fraction`` of the official training
frames (stratified by class, seeded; default 0.1 [assumption: DevSafety's own train / val CSVs are not
reproducible]) is the validation split. ``max_per_class`` subsamples each training class except the target
(DevSafety's ``control_size=1000``; default None keeps all).

Chen et al. (§6 and App. F.3): a ``target`` class (foggy or overcast) is learned while the other, ``protected``
classes must not get worse (one constraint each). With ``target`` set the task is binary (``y = 1`` for the
target), with ``label`` (the class), ``group`` (the protected class's constraint index, −1 for the target and for
classes that are neither) and per-class subsets: :meth:`~BDD100KDataModule.class_indices`, and
:meth:`~BDD100KDataModule.constraint_sampler` / :meth:`~BDD100KDataModule.constraint_dataloader` for batches of
``classes_per_batch`` protected classes × ``samples_per_class`` images (DevSafety's ``ClassSampler``).

Images: decoded per image in the DataLoader workers, shorter side resized to ``image_size`` (bicubic) and
center-cropped (CLIP's preprocessing), normalized with CLIP's mean / std (``normalization="clip"``, default) or
ImageNet's. ``augment`` adds a random crop position and a horizontal flip for training [not in DevSafety, which
uses the CLIP preprocessing as is].

Batch fields: ``x`` ``[B, 3, S, S]``, ``index``, and ``y`` — the class (``[B]``, classification tasks), the
target indicator plus ``pos_index`` / ``neg_index`` / ``label`` / ``group`` (``target`` set), or the multi-label
fields of :class:`~fccolit.samplers.multilabel.MultiLabelPairDataset` (``"attributes"``; evaluation batches have
``y`` ``[B, 14]``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from fccolit._checks import check_choice
from fccolit.data import binary_fields
from fccolit.datasets.images import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, ImageFileDataset, RowOrigin
from fccolit.datasets.splits import stratified_split
from fccolit.datasets.transforms import ClipImageTransform
from fccolit.io.bdd100k import ATTRIBUTE_VALUES, ATTRIBUTES, LABEL_FILES, read_bdd100k_attributes
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.paths import is_data_file
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes, tasks_per_batch_for
from fccolit.samplers.uniform import UniformBatchSampler

from fccolit.datamodules.base import FCCODataModule

__all__ = ["BDD100KDataModule", "ATTRIBUTE_VALUES", "DEFAULT_CLASSES", "class_prompts"]

BDD100K_URL = "https://bdd-data.berkeley.edu/"
#: Classes of each classification task (DevSafety's order for weather and scene).
DEFAULT_CLASSES = {
    "weather": ("clear", "overcast", "snowy", "rainy", "partly cloudy", "foggy"),
    "scene": ("highway", "residential", "city street", "parking lot", "tunnel"),
    "timeofday": ("daytime", "night", "dawn/dusk"),
}
_TEMPLATES = {"weather": "the weather is {}.", "scene": "the scene is a {}.", "timeofday": "the time of day is {}."}
_PROMPT_NAMES = {"residential": "residential area"}  # DevSafety's scene class name in its prompts


def class_prompts(task: str, classes: Sequence[str]) -> list[str]:
    """CLIP prompts of DevSafety's templates: ``"the weather is foggy."``, ``"the scene is a residential area."``
    (time of day: ``"the time of day is night."`` [assumption])."""
    return [_TEMPLATES[task].format(_PROMPT_NAMES.get(c, c)) for c in classes]


# ---------------------------------------------------------------------------------------------- the DataModule
class BDD100KDataModule(FCCODataModule):
    """BDD100K frame attributes as image classification (see the module docstring for files, tasks and fields).

    The labels JSON is streamed once into a cache (``<cache_dir>/bdd100k-<hash>/``: frame names and attribute
    codes, keyed by the file); classes, splits and subsets are built in ``__init__``, so :attr:`sizes` exists
    right after construction.

    Args:
        root: the folder holding ``labels/`` and ``images/100k/``.
        task: ``"weather"``, ``"scene"``, ``"timeofday"`` or ``"attributes"`` (multi-label).
        classes: the classes of a classification task, in output order (None: :data:`DEFAULT_CLASSES`).
        target: a class of ``classes``: binary target-versus-rest task (Chen et al.: ``"foggy"`` or ``"overcast"``).
        protected: the constrained classes (None: every class but the target).
        labels_version: ``"2018"``, ``"2020"`` or ``"auto"`` (the 2020 ``det_20`` files if present, else 2018).
        val_fraction: share of the official training frames held out for validation (stratified).
        max_per_class: keep at most this many training images per class (the target excepted; None: all).
        image_size: S of the ``S × S`` crops (224 for CLIP ViT-B).
        normalization: ``"clip"`` or ``"imagenet"``.
        augment: random crop position and flip for training.
        batch_size: global training batch size.
        num_positives: target task: target images per batch; multi-label: positives per task of a batch
            (None: half).
        sampler: classification tasks: ``"uniform"`` (shuffled epochs,
            :class:`~fccolit.samplers.uniform.UniformBatchSampler`) or ``"class_balanced"`` (``classes_per_batch``
            classes × ``batch_size / classes_per_batch`` images, DevSafety's ``ClassSampler``).
        classes_per_batch: classes per batch of the class-balanced sampler (None: all), or tasks per multi-label
            batch (None: the largest divisor of ``batch_size`` up to 14).
        num_batches: batches per epoch (None: the sampler's default).
        seed: seeds the split, ``max_per_class`` and the samplers.
        num_workers, eval_batch_size: DataLoader workers and evaluation batch size.
        cache_dir: folder of the cache entries.

    Attributes:
        classes, task_names, prompts (CLIP prompts of the classes), protected, class_counts (training images per
        class; a classification task's sizes also hold them as ``num_class_<k>``), label_files (the two JSON files
        read).

    Raises:
        ValueError: ``task``, ``normalization``, ``sampler`` or ``labels_version`` not one of the listed values;
            ``val_fraction`` outside [0, 1); ``classes``, ``target`` or ``protected`` given with
            ``task="attributes"``, or not consistent with the task's documented values; a labels file listing no
            frame; a class without training image; a ``batch_size`` that is not a multiple of the classes (or
            groups) per batch.
        FileNotFoundError: the labels package or the image folder is not under ``root``.

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.images import bdd_frames, write_bdd100k
        >>> with tempfile.TemporaryDirectory() as folder:  # the 2018 label files and tiny JPEGs of 24 + 8 frames
        ...     _ = write_bdd100k(pathlib.Path(folder), frames=bdd_frames(24, 8), image_size=(16, 9))
        ...     BDD100KDataModule(folder, cache_dir=folder).sizes["num_classes"]
        6
    """

    def __init__(
        self,
        root: str | os.PathLike,
        task: Literal["weather", "scene", "timeofday", "attributes"] = "weather",
        classes: Sequence[str] | None = None,
        target: str | None = None,
        protected: Sequence[str] | None = None,
        labels_version: Literal["auto", "2018", "2020"] = "auto",
        val_fraction: float = 0.1,
        max_per_class: int | None = None,
        image_size: int = 224,
        normalization: Literal["clip", "imagenet"] = "clip",
        augment: bool = False,
        batch_size: int = 64,
        num_positives: int | None = None,
        sampler: Literal["uniform", "class_balanced"] = "uniform",
        classes_per_batch: int | None = None,
        num_batches: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 64,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        check_choice("task", task, (*ATTRIBUTES, "attributes"))
        check_choice("normalization", normalization, ("clip", "imagenet"))
        check_choice("sampler", sampler, ("uniform", "class_balanced"))
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.root, self.task = Path(root), task
        self.val_fraction, self.max_per_class, self.image_size = val_fraction, max_per_class, int(image_size)
        self.normalization, self.augment, self.sampler = normalization, augment, sampler
        self.batch_size, self.num_positives, self.classes_per_batch = batch_size, num_positives, classes_per_batch
        self.num_batches, self.seed = num_batches, seed
        if task == "attributes":
            if classes is not None or target is not None or protected is not None:
                raise ValueError("task='attributes' uses every class of the three attributes: leave classes, target and protected unset")
            self.classes = []
            self.task_names = [f"{a}={c}" for a in ATTRIBUTES for c in DEFAULT_CLASSES[a]]
        else:
            self.classes = list(DEFAULT_CLASSES[task] if classes is None else classes)
            bad = [c for c in self.classes if c not in ATTRIBUTE_VALUES[task] or c == "undefined"]
            if bad or len(set(self.classes)) != len(self.classes) or len(self.classes) < 2:
                raise ValueError(f"classes of task {task!r} must be at least two distinct documented values {list(ATTRIBUTE_VALUES[task])} but 'undefined'; got {list(self.classes)}")
            self.task_names = list(self.classes)
        self.prompts = class_prompts(task, self.classes) if self.classes else []
        if target is not None and target not in self.classes:
            raise ValueError(f"target {target!r} is not one of the classes {self.classes}")
        self.target = target
        self.protected = [c for c in self.classes if c != target] if protected is None else list(protected)
        bad = [c for c in self.protected if c not in self.classes or c == target]
        if bad:
            raise ValueError(f"protected classes must be classes other than the target; got {bad} (classes {self.classes}, target {target!r})")

        self.label_files = self._find_label_files(labels_version)
        self.image_dirs = {s: self.root / "images" / "100k" / s for s in ("train", "val")}
        for split, folder in self.image_dirs.items():
            if not folder.is_dir():
                raise FileNotFoundError(f"BDD100K image folder not found: {folder} (extract the 100K images package from {BDD100K_URL} into {self.root})")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = cache_key(self.label_files, {"reader": "bdd100k-attributes"}, prefix="bdd100k")
        self._arrays = cached_arrays(self.cache_dir, key, self._read)
        self._build_splits()

    # ------------------------------------------------------------------ files
    def _find_label_files(self, version: str) -> list[Path]:
        check_choice("labels_version", version, ("auto", "2018", "2020"))
        order = ("2020", "2018") if version == "auto" else (version,)
        for v in order:
            files = [self.root / f for f in LABEL_FILES[v]]
            if all(is_data_file(f) for f in files):
                self.labels_version = v
                return files
        wanted = " or ".join(f"{self.root / LABEL_FILES[v][0]} + {Path(LABEL_FILES[v][1]).name}" for v in order)
        raise FileNotFoundError(f"BDD100K labels not found: {wanted}. Download the labels package from {BDD100K_URL} and extract it into {self.root}.")

    def _read(self) -> dict[str, np.ndarray]:
        out = {}
        for split, path in zip(("train", "test"), self.label_files):
            parsed = read_bdd100k_attributes(path)
            if parsed["name"].size == 0:
                raise ValueError(
                    f"{path}: the labels file lists no frame (an empty JSON list); is it truncated? Extract it again "
                    f"from the labels package ({BDD100K_URL})"
                )
            for k, v in parsed.items():
                out[f"{split}_{k}"] = v
        return out

    # ------------------------------------------------------------------ the protocol
    def _class_codes(self, split: str) -> np.ndarray:
        """Class index per frame of a classification task (−1: undefined or not among ``classes``)."""
        codes = np.asarray(self._arrays[f"{split}_{self.task}"])
        mapping = np.full(len(ATTRIBUTE_VALUES[self.task]), -1, dtype=np.int64)
        for i, c in enumerate(self.classes):
            mapping[ATTRIBUTE_VALUES[self.task].index(c)] = i
        return mapping[codes]

    def _attribute_labels(self, split: str) -> np.ndarray:
        """``[n, 14]`` one-vs-rest labels of every attribute class (−1 where the attribute is undefined)."""
        columns = []
        for a in ATTRIBUTES:
            codes = np.asarray(self._arrays[f"{split}_{a}"])
            values = ATTRIBUTE_VALUES[a]
            defined = codes != values.index("undefined")
            for c in DEFAULT_CLASSES[a]:
                columns.append(np.where(defined, (codes == values.index(c)).astype(np.int64), -1))
        return np.stack(columns, axis=1)

    def _build_splits(self) -> None:
        rng = np.random.default_rng([int(self.seed), 0xBDD1])
        self._splits: dict[str, dict[str, Any]] = {}
        if self.task == "attributes":
            labels = {s: self._attribute_labels(s) for s in ("train", "test")}
            keep = {s: np.flatnonzero((labels[s] >= 0).any(1)) for s in labels}
            strata = np.asarray(self._arrays["train_weather"])[keep["train"]]
        else:
            codes = {s: self._class_codes(s) for s in ("train", "test")}
            keep = {s: np.flatnonzero(codes[s] >= 0) for s in codes}
            labels = {s: codes[s] for s in codes}
            strata = codes["train"][keep["train"]]
        kept, held = stratified_split(strata, self.val_fraction, rng)
        rows = {"train": keep["train"][kept], "val": keep["train"][held], "test": keep["test"]}
        if self.max_per_class is not None and self.task != "attributes":
            train_codes = labels["train"][rows["train"]]
            chosen = []
            for i, c in enumerate(self.classes):
                members = np.flatnonzero(train_codes == i)
                if c != self.target and members.size > self.max_per_class:
                    members = np.sort(rng.choice(members, self.max_per_class, replace=False))
                chosen.append(members)
            rows["train"] = rows["train"][np.sort(np.concatenate(chosen))]
        for split, split_rows in rows.items():
            source = "test" if split == "test" else "train"
            self._splits[split] = {"rows": split_rows, "source": source, "labels": labels[source][split_rows]}
        y = self._splits["train"]["labels"]
        if self.task == "attributes":
            self.class_counts = [int(v) for v in (y == 1).sum(0)]
            self.sizes = multilabel_sizes(y)
            return
        self.class_counts = np.bincount(y, minlength=len(self.classes)).tolist()
        empty = [c for c, n in zip(self.classes, self.class_counts) if n == 0]
        if empty:
            raise ValueError(f"{self.label_files[0]}: no training image of class(es) {empty} (task {self.task!r})")
        if self.target is None:
            self.sizes = {"num_samples": int(y.size), "num_classes": len(self.classes), "num_outputs": len(self.classes)}
            self.sizes.update({f"num_class_{k}": int(n) for k, n in enumerate(self.class_counts)})  # training images per class
        else:
            positives = self.class_counts[self.classes.index(self.target)]
            self.sizes = {
                "num_samples": int(y.size),
                "num_positives": positives,
                "num_negatives": int(y.size) - positives,
                "num_constraints": len(self.protected),
                "num_outputs": 1,
            }

    def class_indices(self, split: str = "train") -> dict[str, torch.Tensor]:
        """``{class: rows of the split}`` (classification tasks): the per-class subsets — the target's data and
        each protected class's constraint data ``D_k`` of Chen et al."""
        if self.task == "attributes":
            raise ValueError("class_indices is for the classification tasks (weather, scene, timeofday)")
        y = torch.from_numpy(self._splits[split]["labels"])
        return {c: torch.nonzero(y == i).flatten() for i, c in enumerate(self.classes)}

    # ------------------------------------------------------------------ LightningDataModule
    def prepare_data(self) -> None:
        """Nothing to download (BDD100K needs registration); the labels were parsed and cached in ``__init__``."""

    def _fields(self, split: str) -> dict[str, torch.Tensor]:
        labels = torch.from_numpy(np.asarray(self._splits[split]["labels"], dtype=np.int64))
        if self.task == "attributes" or self.target is None:
            return {"y": labels, "index": torch.arange(labels.shape[0])}
        fields = binary_fields(labels, (labels == self.classes.index(self.target)).long())
        fields["label"] = fields.pop("x")
        group = torch.full_like(labels, -1)
        for k, c in enumerate(self.protected):
            group[labels == self.classes.index(c)] = k
        fields["group"] = group
        return fields

    def _dataset(self, split: str) -> ImageFileDataset:
        info = self._splits[split]
        source = info["source"]
        names = np.asarray(self._arrays[f"{source}_name"])[info["rows"]]
        folder = self.image_dirs["val" if source == "test" else "train"]
        mean, std = (CLIP_MEAN, CLIP_STD) if self.normalization == "clip" else (IMAGENET_MEAN, IMAGENET_STD)
        load = ClipImageTransform(self.image_size, augment=self.augment and split == "train")
        origin = RowOrigin(str(self.label_files[0 if source == "train" else 1]), info["rows"], "frame")
        return ImageFileDataset(folder, [str(n) for n in names], self._fields(split), load, mean, std, origin)

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self._dataset("train")
        self.val_dataset = self._dataset("val")
        self.test_dataset = self._dataset("test")
        if self.task == "attributes":
            self.train_dataset = MultiLabelPairDataset(self.train_dataset, self.train_dataset.fields["y"])

    def _per_block(self, groups: int, what: str) -> int:
        if self.batch_size % groups:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of {what} ({groups})")
        return self.batch_size // groups

    def build_train_sampler(self) -> RankAwareBatchSampler:
        y = torch.from_numpy(np.asarray(self._splits["train"]["labels"], dtype=np.int64))
        if self.task == "attributes":
            k = tasks_per_batch_for(self.batch_size, y.shape[1], self.classes_per_batch)
            block = self.batch_size // k
            p = block // 2 if self.num_positives is None else int(self.num_positives)
            return MultiLabelSampler(y, k, p, block - p, self.num_batches, seed=self.seed)
        if self.target is not None:
            return DualSampler(y == self.classes.index(self.target), self.batch_size, self.num_positives, num_batches=self.num_batches, seed=self.seed)
        if self.sampler == "class_balanced":
            k = self.classes_per_batch or len(self.classes)
            one_hot = torch.nn.functional.one_hot(y, len(self.classes))
            return MultiLabelSampler(one_hot, k, self._per_block(k, "classes_per_batch"), 0, self.num_batches, pair_ids=False, seed=self.seed)
        return UniformBatchSampler(int(y.numel()), self.batch_size, self.num_batches, seed=self.seed)

    def constraint_sampler(
        self, classes_per_batch: int | None = None, samples_per_class: int = 10, num_batches: int | None = None, seed: int | None = None
    ) -> MultiLabelSampler:
        """Batches of the protected classes' training images: ``classes_per_batch`` protected classes (None: all)
        × ``samples_per_class`` images each, in blocks (DevSafety's ``ClassSampler``); yields rows of
        ``train_dataset`` (whose ``group`` field gives the constraint of each image)."""
        if self.target is None or not self.protected:
            raise ValueError("constraint_sampler needs a target and protected classes")
        y = torch.from_numpy(np.asarray(self._splits["train"]["labels"], dtype=np.int64))
        one_hot = torch.stack([(y == self.classes.index(c)).long() for c in self.protected], dim=1)
        k = classes_per_batch or len(self.protected)
        return MultiLabelSampler(one_hot, k, samples_per_class, 0, num_batches, pair_ids=False, seed=self.seed if seed is None else seed)

    def constraint_dataloader(self, classes_per_batch: int | None = None, samples_per_class: int = 10, num_batches: int | None = None) -> DataLoader:
        """A DataLoader of :meth:`constraint_sampler`'s batches over the training images (same fields as training)."""
        if self.train_dataset is None:
            self.setup("fit")
        return self._loader(self.train_dataset, self.constraint_sampler(classes_per_batch, samples_per_class, num_batches), "constraint")
