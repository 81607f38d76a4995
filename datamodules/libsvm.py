"""Binary classification on LIBSVM data sets (a9a, w8a, ijcnn1, mushrooms, phishing, covtype, ...).

Get the files from the LIBSVM data sets page (binary classification):
https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html — download the file named ``name`` (and
``name.t``, the test file, where the data set has one) into ``root``; ``.bz2`` / ``.gz`` / ``.xz`` files can be
used as they are. The file format is described in :mod:`fccolit.io.libsvm`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fccolit.data import binary_fields, binary_sizes
from fccolit.io.cache import CACHE_DIRNAME, cache_key, cached_arrays, default_cache_dir
from fccolit.io.libsvm import dense_size_error, parse_libsvm
from fccolit.samplers import DualSampler, RankAwareBatchSampler

from fccolit.datamodules.base import FCCODataModule

LIBSVM_DATASETS_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html"
_COMPRESSED = (".bz2", ".gz", ".xz")
_SPLITS = ("train", "val", "test")


def _test_file(root: Path, name: str) -> Path | None:
    """The LIBSVM distribution's test file for ``name``: ``name.t`` (or ``stem.t.bz2`` for ``stem.bz2``)."""
    candidates = [root / f"{name}.t"]
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            candidates.append(root / f"{name[: -len(suffix)]}.t{suffix}")
    return next((c for c in candidates if c.is_file()), None)


def _missing_file_error(root: Path, name: str) -> FileNotFoundError:
    path = root / name
    if root.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.name != CACHE_DIRNAME)
        listing = ", ".join(present[:30]) + (f", ... ({len(present)} in all)" if len(present) > 30 else "")
        where = f"Files in {root}: {listing or '(none)'}."
    else:
        where = f"The folder {root} does not exist."
    return FileNotFoundError(
        f"LibSVM data set file not found: {path}. {where} LIBSVM data sets come from the LIBSVM data sets page, "
        f"{LIBSVM_DATASETS_URL}: download the file named '{name}' (and '{name}.t' if the data set has a test "
        f"file) into {root}."
    )


def _label_text(value: float) -> str:
    return f"{value:g}"


class LibSVMDataModule(FCCODataModule):
    """A binary LIBSVM data set: seeded train / validation (/ test) splits, optional positive dropping and
    feature scaling, dual-sampled training batches.

    Files: ``root/name`` is the training file; ``root/name.t`` (LIBSVM's test file), when present, is the test
    split, otherwise ``test_fraction`` of the training file is held out as the test split. ``val_fraction`` of the
    training file is the validation split. Splits are stratified by class and seeded by ``seed``.

    Steps, in order (the result is cached, see below):

    1. parse both files (width: ``num_features``, or the widest of the two files, e.g. 123 for a9a / a9a.t);
    2. labels: the file must hold exactly two distinct labels ({−1, +1}, {0, 1}, {1, 2}, ...); ``y = 1`` for the
       larger one, or for ``positive_label`` when given (``positive_label=-1`` flips {−1, +1} data);
    3. ``pos_fraction``: drop positives of the training file at random until they are that share of it, before
       splitting (the recipe of Wang et al., AISTATS 2022, §4.1, for mushrooms and phishing: drop positives, then
       split). The stratified splits then all keep that share, up to rounding; a ``.t`` test file is never changed;
    4. split; 5. ``normalize`` ("minmax" to [0, 1] or "standard" to zero mean / unit variance per feature),
       fitted on the training split only and applied to all splits (constant features are only shifted).

    Batch fields (as :class:`~fccolit.datamodules.SyntheticBinaryDataModule`): ``x`` ``[B, D]`` float32, ``y``
    ``[B]`` long in {0, 1}, ``index`` ``[B]`` (row in its split), ``pos_index`` ``[B]`` (row among the training
    positives, −1 otherwise). Training batches come from a :class:`~fccolit.samplers.DualSampler`.

    Parsing happens in ``__init__`` through a cache, so :attr:`sizes` (``num_samples``, ``num_positives``:
    training split; ``num_features``: D) exist right after construction. The cache entry
    ``<cache_dir>/libsvm-<name>-<hash>/`` holds the finished splits as ``.npy`` files (memory-mappable), keyed by
    the raw files' whole content (SHA-256) and every option above; a second construction loads it without
    parsing. ``cache_dir`` defaults to ``root/.fccolit-cache``, or to ``~/.cache/fccolit`` (``$FCCOLIT_CACHE``)
    when ``root`` is read-only.

    Args:
        root: folder holding the files.
        name: the training file's name as on the LIBSVM page (``"a9a"``, ``"mushrooms"``, ``"ijcnn1.bz2"``).
        num_features: D (None: the largest feature index in the files).
        val_fraction: share of the training file used for validation.
        test_fraction: share of the training file held out for testing; only used when there is no ``.t`` file.
        pos_fraction: drop positives until they are this share of the training data (None: keep all).
        positive_label: the raw label of the positive class (None: the larger of the two labels).
        batch_size: global training batch size B.
        num_positives: positives per training batch.
        num_batches: training batches per epoch (None: one pass over the negatives).
        anchor_sampling: how each batch's positives are drawn: ``"permutation"`` (default, every positive once per
            pass) or ``"with_replacement"`` (uniform, as the AUPRC papers sample B_t); see
            :class:`~fccolit.samplers.DualSampler`.
        seed: seeds the splits, the dropping of positives and the sampler.
        normalize: None, ``"minmax"`` or ``"standard"``.
        num_workers, eval_batch_size: DataLoader workers and evaluation batch size.
        cache_dir: where the cache entries live (None: see above).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        name: str,
        num_features: int | None = None,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        pos_fraction: float | None = None,
        positive_label: float | None = None,
        batch_size: int = 64,
        num_positives: int = 16,
        num_batches: int | None = None,
        anchor_sampling: Literal["permutation", "with_replacement"] = "permutation",
        seed: int = 0,
        normalize: Literal["minmax", "standard"] | None = None,
        num_workers: int = 0,
        eval_batch_size: int = 1024,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        self.root, self.name = Path(root), str(name)
        self.train_file = self.root / self.name
        if not self.train_file.is_file():
            raise _missing_file_error(self.root, self.name)
        self.test_file = _test_file(self.root, self.name)
        held_out = 0.0 if self.test_file is not None else test_fraction
        if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and val_fraction + held_out < 1.0):
            raise ValueError(
                f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}, used only without a .t file) "
                "must be in [0, 1) and leave data for training"
            )
        if pos_fraction is not None and not 0.0 < pos_fraction < 1.0:
            raise ValueError(f"pos_fraction must be in (0, 1) or None, got {pos_fraction}")
        if normalize not in (None, "minmax", "standard"):
            raise ValueError(f"normalize must be None, 'minmax' or 'standard', got {normalize!r}")
        if not 0 < num_positives < batch_size:
            raise ValueError(
                f"num_positives must be between 1 and batch_size − 1 = {batch_size - 1}, got {num_positives}"
            )
        if num_features is not None and int(num_features) < 1:
            raise ValueError(f"num_features must be positive or None, got {num_features}")
        self.num_features, self.val_fraction, self.test_fraction = num_features, val_fraction, test_fraction
        self._held_out = held_out  # share of the training file cut off as the test split
        self.pos_fraction, self.positive_label, self.normalize = pos_fraction, positive_label, normalize
        self.batch_size, self.num_positives, self.num_batches, self.seed = batch_size, num_positives, num_batches, seed
        self.anchor_sampling = anchor_sampling

        files = [self.train_file] + ([self.test_file] if self.test_file is not None else [])
        options = {
            "reader": "libsvm",
            "num_features": num_features,
            "val_fraction": float(val_fraction),
            "test_fraction": float(held_out),
            "pos_fraction": None if pos_fraction is None else float(pos_fraction),
            "positive_label": None if positive_label is None else float(positive_label),
            "seed": int(seed),
            "normalize": normalize,
        }
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(self.root)
        self.cache_key = cache_key(files, options, prefix=f"libsvm-{self.name}")
        self._arrays = cached_arrays(self.cache_dir, self.cache_key, self._build)
        self.label_values = tuple(float(v) for v in self._arrays["label_values"])  # (negative, positive) raw labels
        self.sizes = binary_sizes({"x": self._arrays["x_train"], "y": self._arrays["y_train"]})
        self._splits: dict[str, dict[str, torch.Tensor]] | None = None

    # ------------------------------------------------------------------ building the arrays (cache miss)
    def _build(self) -> dict[str, np.ndarray]:
        train = parse_libsvm(self.train_file, num_features=self.num_features)
        test = parse_libsvm(self.test_file, num_features=self.num_features) if self.test_file is not None else None
        if test is not None and test.labels.size == 0:
            raise ValueError(
                f"{self.test_file}: the test file holds no example (is it empty or truncated?); download it again "
                f"from {LIBSVM_DATASETS_URL}, or remove it to hold out test_fraction of {self.train_file.name} instead"
            )
        width = self.num_features or max(train.num_features, test.num_features if test is not None else 0)
        # the file whose largest index sets the width is the one to name, before any dense allocation
        widest = train if test is None or train.num_features >= test.num_features else test
        line, column = widest.widest_feature()
        if column + 1 != width:
            line, column = 0, width - 1
        rows = train.labels.size + (0 if test is None else test.labels.size)
        error = dense_size_error(rows, width, np.float32, widest.path, line, column + 1)
        if error is not None:
            raise error
        label_values = self._label_values(train.labels, None if test is None else test.labels)
        y = (train.labels == label_values[1]).astype(np.int8)

        rng = np.random.default_rng([int(self.seed), 0x11B5])
        pool = np.arange(y.size)
        if self.pos_fraction is not None:
            pool = self._drop_positives(y, rng)
        fractions = {"val": self.val_fraction, "test": self._held_out}
        parts = self._stratified_split(pool, y[pool], fractions, rng)
        x = train.to_dense(width)
        splits = {s: (x[idx], y[idx], train.lines[idx]) for s, idx in parts.items()}
        if test is not None:
            splits["test"] = (test.to_dense(width), (test.labels == label_values[1]).astype(np.int8), test.lines)
        del x

        train_y = splits["train"][1]
        if not 0 < int(train_y.sum()) < train_y.size:
            raise ValueError(
                f"{self.train_file}: the training split holds {int(train_y.sum())} positives of {train_y.size} rows; "
                "it needs both classes (lower val_fraction / test_fraction, or raise pos_fraction)"
            )
        arrays: dict[str, np.ndarray] = {"label_values": np.asarray(label_values, dtype=np.float64)}
        shift, scale = self._normalization(splits["train"][0])
        if shift is not None:
            arrays["norm_shift"], arrays["norm_scale"] = shift, scale
        for split, (xs, ys, lines) in splits.items():
            if shift is not None:
                xs = ((xs - shift) / scale).astype(np.float32)
            arrays[f"x_{split}"], arrays[f"y_{split}"], arrays[f"line_{split}"] = xs, ys, lines
        return arrays

    def _label_values(self, train_labels: np.ndarray, test_labels: np.ndarray | None) -> tuple[float, float]:
        """(negative, positive) raw label values; errors unless the files hold exactly two distinct labels."""
        labels = train_labels if test_labels is None else np.concatenate([train_labels, test_labels])
        values, counts = np.unique(labels, return_counts=True)
        files = str(self.train_file) + ("" if self.test_file is None else f" and {self.test_file}")
        found = ", ".join(f"{_label_text(v)} ({c} rows)" for v, c in zip(values[:20], counts[:20]))
        found += f", ... ({values.size} in all)" if values.size > 20 else ""
        if values.size != 2:
            raise ValueError(
                f"{files}: LibSVMDataModule needs exactly two distinct labels (binary classification), found "
                f"{values.size}: {found or 'none (empty file)'}"
            )
        if self.positive_label is None:
            return float(values[0]), float(values[1])
        if float(self.positive_label) not in values:
            raise ValueError(f"{files}: positive_label={self.positive_label} is not one of the labels {found}")
        positive = float(self.positive_label)
        return float(values[values != positive][0]), positive

    def _drop_positives(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rows kept: all negatives and a random subset of positives making up ``pos_fraction`` of the rows."""
        positives, negatives = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        share = positives.size / y.size
        if self.pos_fraction > share + 1e-12:
            raise ValueError(
                f"{self.train_file}: pos_fraction={self.pos_fraction} is larger than the share of positives in the "
                f"file ({positives.size} of {y.size} = {share:.4f}); pos_fraction can only drop positives"
            )
        keep = round(self.pos_fraction * negatives.size / (1.0 - self.pos_fraction))
        keep = min(max(keep, 1), positives.size)
        kept = rng.choice(positives, size=keep, replace=False)
        return np.sort(np.concatenate([negatives, kept]))

    @staticmethod
    def _stratified_split(
        pool: np.ndarray, y: np.ndarray, fractions: dict[str, float], rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """Rows of ``pool`` per split: each class is shuffled and cut by ``fractions``; the rest is "train"."""
        parts: dict[str, list[np.ndarray]] = {"train": [], **{s: [] for s in fractions}}
        for cls in (0, 1):
            members = pool[y == cls]
            members = members[rng.permutation(members.size)]
            start = 0
            for split, fraction in fractions.items():
                count = round(fraction * members.size)
                parts[split].append(members[start : start + count])
                start += count
            parts["train"].append(members[start:])
        return {s: np.sort(np.concatenate(p)) for s, p in parts.items()}

    def _normalization(self, x_train: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(shift, scale)`` [D] float64 fitted on the training split: ``x ↦ (x − shift) / scale``."""
        if self.normalize is None:
            return None, None
        x = x_train.astype(np.float64)
        if self.normalize == "minmax":
            shift, scale = x.min(axis=0), x.max(axis=0) - x.min(axis=0)
        else:
            shift, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale == 0] = 1.0
        return shift, scale

    # ------------------------------------------------------------------ LightningDataModule
    @staticmethod
    def _fields(x: np.ndarray, y: np.ndarray) -> dict[str, torch.Tensor]:
        # a writable copy of the memory-mapped arrays
        return binary_fields(torch.from_numpy(np.array(x, dtype=np.float32)), torch.from_numpy(np.asarray(y, dtype=np.int64)))

    def prepare_data(self) -> None:
        """Nothing left to do: the cache entry was written (or found) in ``__init__``."""

    def setup(self, stage: str | None = None) -> None:
        if self._splits is None:
            self._splits = {s: self._fields(self._arrays[f"x_{s}"], self._arrays[f"y_{s}"]) for s in _SPLITS}
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if self._splits is None:
            self.setup("fit")
        labels = self._splits["train"]["y"]
        return DualSampler(labels, self.batch_size, self.num_positives, num_batches=self.num_batches,
                           anchor_sampling=self.anchor_sampling, seed=self.seed)
