"""Binary classification on LIBSVM data sets (a9a, w8a, ijcnn1, mushrooms, phishing, covtype, ...).

Get the files from the LIBSVM data sets page (binary classification):
https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html — download the file named ``name`` (and
``name.t``, the test file, where the data set has one) into ``root``; ``.bz2`` / ``.gz`` / ``.xz`` files can be
used as they are. The file format is described in :mod:`fccolit.io.libsvm`.

Wide data sets (news20.binary: 1.36M features, rcv1: 47k, url: 3.2M) stay sparse: ``layout="sparse"`` keeps the
reader's CSR arrays (8 bytes per stored value) and gives batches as ``torch.sparse_csr`` tensors, which
:class:`~fccolit.models.LinearScorer` and :class:`~fccolit.models.MLP` score in O(nnz); ``layout="auto"`` (the
default) chooses it from the sizes (:func:`choose_layout`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fccolit._checks import check_choice
from fccolit.data import SparseRows, binary_fields, binary_sizes
from fccolit.datasets.splits import class_splits
from fccolit.io.cache import CACHE_DIRNAME, cache_key, cached_arrays, default_cache_dir
from fccolit.io.csr import take_rows
from fccolit.io.libsvm import STORAGE_DTYPE, LibSVMFile, dense_size_error, parse_libsvm
from fccolit.io.paths import is_data_file
from fccolit.samplers import DualSampler, RankAwareBatchSampler

from fccolit.datamodules.base import FCCODataModule

LIBSVM_DATASETS_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html"
_COMPRESSED = (".bz2", ".gz", ".xz")
_SPLITS = ("train", "val", "test")

#: ``layout="auto"`` stays dense up to this size of the dense float32 feature matrix (all splits together).
AUTO_DENSE_MAX_BYTES = 1 << 30
_SPARSE_BYTES_PER_VALUE = 8  # int32 column + float32 value


def choose_layout(num_rows: int, num_features: int, nnz: int) -> Literal["dense", "sparse"]:
    """The layout ``"auto"`` picks: ``"sparse"`` when the dense float32 matrix ``[num_rows, num_features]`` would
    take more than :data:`AUTO_DENSE_MAX_BYTES` and the CSR arrays of its ``nnz`` stored values at most half of
    that (so a large file that is dense anyway, e.g. epsilon, stays dense); ``"dense"`` otherwise (every small file:
    a9a's matrix is 16 MB)."""
    dense_bytes = int(num_rows) * int(num_features) * np.dtype(STORAGE_DTYPE).itemsize
    sparse_bytes = int(nnz) * _SPARSE_BYTES_PER_VALUE + (int(num_rows) + 1) * 8
    return "sparse" if dense_bytes > AUTO_DENSE_MAX_BYTES and 2 * sparse_bytes <= dense_bytes else "dense"


def _csr_rows(parsed: LibSVMFile, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr int64, indices int32, values float32)`` of the rows ``rows`` of a parsed file."""
    indptr, positions = take_rows(parsed.indptr, rows)
    return indptr, parsed.indices[positions].astype(np.int32), parsed.values[positions].astype(STORAGE_DTYPE)


def _test_file(root: Path, name: str) -> Path | None:
    """The LIBSVM distribution's test file for ``name``: ``name.t`` (or ``stem.t.bz2`` for ``stem.bz2``)."""
    candidates = [root / f"{name}.t"]
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            candidates.append(root / f"{name[: -len(suffix)]}.t{suffix}")
    return next((c for c in candidates if is_data_file(c)), None)


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
    """A binary LIBSVM data set: seeded splits, optional positive dropping and scaling, dual-sampled batches.

    Seeded train / validation (/ test) splits, optional positive dropping and feature scaling, dual-sampled
    training batches.

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

    Layout of ``x``: ``"dense"`` (a ``[N, D]`` float32 matrix per split), ``"sparse"`` (its CSR arrays; a batch's
    ``x`` is a ``torch.sparse_csr`` tensor ``[B, D]``, for :class:`~fccolit.models.LinearScorer` and
    :class:`~fccolit.models.MLP`; memory O(nnz) instead of O(N·D)) or ``"auto"`` (:func:`choose_layout`: sparse
    only when the dense matrix would exceed 1 GiB and the CSR arrays take at most half of it). Both give the same
    batches up to the layout. Sparse data takes ``normalize="minmax"`` only when every feature's training minimum
    is 0 (then scaling keeps absent features at 0 and equals the dense result), and never ``"standard"``.
    :attr:`layout` is the layout in use.

    Batch fields (as :class:`~fccolit.datamodules.SyntheticBinaryDataModule`): ``x`` ``[B, D]`` float32, ``y``
    ``[B]`` long in {0, 1}, ``index`` ``[B]`` (row in its split), ``pos_index`` ``[B]`` (row among the training
    positives, −1 otherwise). Training batches come from a :class:`~fccolit.samplers.DualSampler`.

    Parsing happens in ``__init__`` through a cache, so :attr:`sizes` (``num_samples``, ``num_positives``:
    training split; ``num_features``: D) exist right after construction. The cache entry
    ``<cache_dir>/libsvm-<name>-<hash>/`` holds the finished splits as ``.npy`` files (memory-mappable), keyed by
    the raw files' whole content (SHA-256) and every option above; a second construction loads it without
    parsing. ``cache_dir`` defaults to the user cache folder, ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``
    (:func:`~fccolit.io.default_cache_dir`), never the data folder.

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
        layout: ``"auto"``, ``"dense"`` or ``"sparse"`` (see above).
        num_workers, eval_batch_size: DataLoader workers and evaluation batch size.
        cache_dir: where the cache entries live (None: see above).

    Raises:
        FileNotFoundError: ``root/name`` is not there.
        ValueError: a malformed line (named by file and line), labels that are not exactly two values, fractions
            or options out of range (``pos_fraction``, ``normalize`` with the sparse layout, an unknown ``layout``).

    Example:
        A tiny generated a9a-like pair of files (``toy`` and ``toy.t``):

        >>> import tempfile
        >>> from pathlib import Path
        >>> from fccolit.datamodules import LibSVMDataModule
        >>> from fccolit.testing.tabular import write_libsvm
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     write_libsvm(Path(folder), "toy", rows=100, test_rows=40)
        ...     data = LibSVMDataModule(folder, "toy", val_fraction=0.2, batch_size=16, num_positives=4,
        ...                             cache_dir=Path(folder) / "cache")
        ...     data.setup("fit")
        >>> data.sizes
        {'num_samples': 80, 'num_positives': 10, 'num_negatives': 70, 'num_features': 12}
        >>> data.summary().split(";")[0]  # the test split is toy.t
        'LibSVMDataModule: train 80 rows (10 positives), val 20 rows (3 positives), test 40 rows (6 positives)'
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
        layout: Literal["auto", "dense", "sparse"] = "auto",
        num_workers: int = 0,
        eval_batch_size: int = 1024,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        self.root, self.name = Path(root), str(name)
        self.train_file = self.root / self.name
        if not is_data_file(self.train_file):
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
        check_choice("normalize", normalize, (None, "minmax", "standard"))
        check_choice("layout", layout, ("auto", "dense", "sparse"))
        if layout == "sparse" and normalize == "standard":
            raise ValueError(
                "normalize='standard' subtracts each feature's mean, which fills every absent entry: use "
                "layout='dense', or normalize='minmax' / None with layout='sparse'"
            )
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
        self.anchor_sampling, self.requested_layout = anchor_sampling, layout

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
            "layout": layout,
        }
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_key = cache_key(files, options, prefix=f"libsvm-{self.name}")
        self._arrays = cached_arrays(self.cache_dir, self.cache_key, self._build)
        self.label_values = tuple(float(v) for v in self._arrays["label_values"])  # (negative, positive) raw labels
        self.layout: Literal["dense", "sparse"] = "sparse" if "x_train_indptr" in self._arrays else "dense"
        self.sizes = binary_sizes({"x": self._features("train"), "y": self._arrays["y_train"]})
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
        rows = train.labels.size + (0 if test is None else test.labels.size)
        nnz = train.indices.size + (0 if test is None else test.indices.size)
        layout = choose_layout(rows, width, nnz) if self.requested_layout == "auto" else self.requested_layout
        if layout == "dense":
            # the file whose largest index sets the width is the one to name, before any dense allocation
            widest = train if test is None or train.num_features >= test.num_features else test
            line, column = widest.widest_feature()
            if column + 1 != width:
                line, column = 0, width - 1
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
        parts = class_splits(y[pool], fractions, rng, pool=pool)
        test_y = None if test is None else (test.labels == label_values[1]).astype(np.int8)
        if layout == "sparse":
            return self._sparse_arrays(train, test, y, test_y, parts, width, label_values)
        x = train.to_dense(width)
        splits = {s: (x[idx], y[idx], train.lines[idx]) for s, idx in parts.items()}
        if test is not None:
            splits["test"] = (test.to_dense(width), test_y, test.lines)
        del x

        self._check_both_classes(splits["train"][1])
        arrays: dict[str, np.ndarray] = {"label_values": np.asarray(label_values, dtype=np.float64)}
        shift, scale = self._normalization(splits["train"][0])
        if shift is not None:
            arrays["norm_shift"], arrays["norm_scale"] = shift, scale
        for split, (xs, ys, lines) in splits.items():
            if shift is not None:
                xs = ((xs - shift) / scale).astype(np.float32)
            arrays[f"x_{split}"], arrays[f"y_{split}"], arrays[f"line_{split}"] = xs, ys, lines
        return arrays

    def _sparse_arrays(
        self, train: LibSVMFile, test: LibSVMFile | None, y: np.ndarray, test_y: np.ndarray | None,
        parts: dict[str, np.ndarray], width: int, label_values: tuple[float, float],
    ) -> dict[str, np.ndarray]:
        """The cache entry of the sparse layout: per split ``x_<split>_{indptr,indices,values}`` (CSR), ``y``,
        ``line``; O(nnz) memory throughout."""
        self._check_both_classes(y[parts["train"]])
        everything = np.arange(0 if test is None else test.labels.size)
        splits = {s: (_csr_rows(train, idx), y[idx], train.lines[idx]) for s, idx in parts.items()}
        if test is not None:
            splits["test"] = (_csr_rows(test, everything), test_y, test.lines)
        arrays: dict[str, np.ndarray] = {
            "label_values": np.asarray(label_values, dtype=np.float64), "num_features": np.asarray(width),
        }
        scale = self._sparse_scale(*splits["train"][0], width) if self.normalize is not None else None
        if scale is not None:
            arrays["norm_shift"], arrays["norm_scale"] = np.zeros(width), scale
        for split, ((indptr, indices, values), ys, lines) in splits.items():
            if scale is not None:
                values = (values / scale[indices]).astype(STORAGE_DTYPE)
            arrays.update({f"x_{split}_indptr": indptr, f"x_{split}_indices": indices, f"x_{split}_values": values})
            arrays[f"y_{split}"], arrays[f"line_{split}"] = ys, lines
        return arrays

    def _sparse_scale(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, width: int) -> np.ndarray:
        """``scale`` [D] float64 of ``normalize="minmax"`` on sparse training rows (the dense path's
        ``max − min`` with ``min = 0``, 1 for constant features), in O(nnz); an error naming the first feature
        whose minimum is not 0 (its shift would fill the absent entries)."""
        rows = indptr.size - 1
        stored = np.bincount(indices, minlength=width)
        low, high = np.full(width, np.inf), np.full(width, -np.inf)
        np.minimum.at(low, indices, values.astype(np.float64))
        np.maximum.at(high, indices, values.astype(np.float64))
        low = np.where(stored < rows, np.minimum(low, 0.0), low)  # an absent entry is a 0
        high = np.where(stored < rows, np.maximum(high, 0.0), high)
        bad = np.flatnonzero(low != 0.0)
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"{self.train_file}: normalize='minmax' with the sparse layout needs every feature's training minimum "
                f"to be 0 (its shift would fill the absent entries), but feature {j + 1} has minimum {low[j]:g} "
                f"({bad.size} features in all): pass layout='dense' (if the dense matrix fits) or normalize=None"
            )
        scale = high - low
        scale[scale == 0] = 1.0
        return scale

    def _check_both_classes(self, train_y: np.ndarray) -> None:
        if not 0 < int(train_y.sum()) < train_y.size:
            raise ValueError(
                f"{self.train_file}: the training split holds {int(train_y.sum())} positives of {train_y.size} rows; "
                "it needs both classes (lower val_fraction / test_fraction, or raise pos_fraction)"
            )

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
    def _features(self, split: str) -> np.ndarray | SparseRows:
        """The cached ``x`` of ``split``: the dense ``[N, D]`` array, or :class:`~fccolit.data.SparseRows` over the
        memory-mapped CSR arrays."""
        if self.layout == "dense":
            return self._arrays[f"x_{split}"]
        a = self._arrays
        return SparseRows(a[f"x_{split}_indptr"], a[f"x_{split}_indices"], a[f"x_{split}_values"], int(a["num_features"]))

    def _fields(self, split: str) -> dict[str, torch.Tensor]:
        x = self._features(split)
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(np.array(x, dtype=np.float32))  # a writable copy of the memory-mapped array
        return binary_fields(x, torch.from_numpy(np.asarray(self._arrays[f"y_{split}"], dtype=np.int64)))

    def split_source(self, split: str) -> str | None:
        """The training file, the ``.t`` test file, or the training file a split was held out of."""
        if split == "train":
            return str(self.train_file)
        if split == "test" and self.test_file is not None:
            return str(self.test_file)
        return f"held out of {self.train_file}"

    def prepare_data(self) -> None:
        """Nothing left to do: the cache entry was written (or found) in ``__init__``."""

    def setup(self, stage: str | None = None) -> None:
        if self._splits is None:
            self._splits = {s: self._fields(s) for s in _SPLITS}
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if self._splits is None:
            self.setup("fit")
        labels = self._splits["train"]["y"]
        return DualSampler(labels, self.batch_size, self.num_positives, num_batches=self.num_batches,
                           anchor_sampling=self.anchor_sampling, seed=self.seed)
