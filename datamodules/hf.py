"""Your own data through Hugging Face ``datasets``: Parquet, Arrow, CSV or JSON files, a folder saved with
``save_to_disk``, a ``datasets.Dataset`` / ``DatasetDict`` in memory, or a Hub name where the network allows.

Four DataModules map a table's columns onto the batch fields the algorithms read and feed the library's samplers:

* :class:`HFClassificationDataModule`: ``features`` or ``image``, and ``label`` (one column: binary, a
  :class:`~fccolit.samplers.DualSampler`; several columns or a list column: multi-label, a
  :class:`~fccolit.samplers.MultiLabelSampler`);
* :class:`HFGroupedDataModule`: ``features``, ``label``, ``group`` (a
  :class:`~fccolit.samplers.group.GroupBatchSampler`, or batches stratified by (group × label) cell);
* :class:`HFRankingDataModule`: ``query``, ``features``, ``relevance``, one row per document (a
  :class:`~fccolit.samplers.ranking.QueryBatchSampler` over learning-to-rank lists);
* :class:`HFRecommendationDataModule`: ``user``, ``item``, ``rating`` and optionally ``time`` (a
  :class:`~fccolit.samplers.ranking.QueryBatchSampler` over users, MovieLens' protocols).

Caching is ``datasets``' own: a file is converted once into an Arrow table in ``cache_dir`` (default: ``datasets``'
cache, ``~/.cache/huggingface/datasets`` or ``$HF_DATASETS_CACHE``) and memory-mapped on every later load, in a
folder keyed by the SHA-256 of the data files' whole content (``datasets`` alone keys a file by its path and
modification time, and served the old rows after an edit that kept both; :mod:`fccolit.io.hf`); splits are index
selections of that table (no copy). Every file is checked when read (empty, header-only or damaged files) and every
input column (NaN, infinite or missing values, lists of other lengths, relevance grades outside 0..24), each error
naming the file, the row and the column. The classification and grouped DataModules
read the input columns a batch at a time from the memory-mapped table (:class:`~fccolit.datasets.hf.ArrowRowsDataset`);
only the labels, groups and row indices are held in memory. The ranking DataModules read their columns into memory
(their samplers index whole query lists).

Feature scaling (classification, grouped and ranking: ``feature_scaling``): the feature columns are standardized by
default, with the mean and standard deviation of the training split (``"standard"``; ``"minmax"``: the training
range onto [0, 1]; ``"none"``: as they are; :mod:`fccolit.datasets.scaling`). Raw features (pixel values, areas,
counts) otherwise saturate the sigmoid scores of AP's and pAUC's surrogates and the run does not train. The
statistics are in every checkpoint (the DataModule's ``state_dict``), so ``validate``, ``test``, ``predict`` and a
resumed run use those the model was trained with; under DDP every rank takes rank 0's.

Splits: the dataset's ``train`` split (``train_split``) trains; ``val_split`` / ``test_split`` name the evaluation
splits (None: ``validation``, ``valid``, ``val`` or ``dev``, and ``test``, when present). A missing evaluation split
is held out of the training split, ``val_fraction`` / ``test_fraction`` of its rows (stratified by label, by
(group, label) for grouped data, by query for ranking), seeded by ``seed``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn

from fccolit._checks import check_choice
from fccolit.datasets.hf import (
    ArrowRowsDataset, binary_labels, hold_out, select_rows, split_features, without_inputs,
)
from fccolit.datasets.images import IMAGENET_MEAN, IMAGENET_STD
from fccolit.datasets.letor import ListEvalDataset, ListwiseTrainDataset, ltr_pair_arrays
from fccolit.datasets.scaling import FeatureScaler, FeatureScaling, check_scaling
from fccolit.io.hf import as_list, column, feature_width, read_tables
from fccolit.io.letor import group_by_query
from fccolit.io.ratings import Ratings
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler, multilabel_sizes, tasks_per_batch_for

from fccolit.datamodules.base import FCCODataModule
from fccolit.datamodules.grouped import GroupedDataModule
from fccolit.datamodules.ranking import RankingDataModule, RecommendationDataModule

__all__ = ["HFClassificationDataModule", "HFGroupedDataModule", "HFRankingDataModule", "HFRecommendationDataModule"]

_SPLITS = ("train", "val", "test")


def split_sources(origins: dict[str, str]) -> dict[str, str]:
    """Each split's source for error messages: its own (``origins`` of :func:`~fccolit.io.hf.read_tables`), or
    "held out of" the training split's."""
    return {s: origins.get(s) or f"held out of {origins['train']}" for s in _SPLITS}


class HFTable:
    """What the four HF DataModules share about their source: the data set, read on first use.

    The constructor only stores the arguments; the table is read (converted to Arrow in ``datasets``' cache the
    first time, memory-mapped after) by :meth:`read_data`, on the first of :attr:`sizes` (the ``fccolit`` command
    links them to the model), ``setup`` or an attribute that reading sets (:attr:`data_attributes`), so an error in
    the data (a missing file, a column with NaN) is raised there.

    Args:
        dataset: a data file or folder, a ``save_to_disk`` folder, a Hub name, or a ``datasets.Dataset`` /
            ``DatasetDict`` (:func:`fccolit.io.hf.load_hf_dataset`).
        config_name: the Hub configuration (subset) of a Hub data set.
        cache_dir: ``datasets``' cache for converted files and Hub downloads (None: its default).

    Raises:
        FileNotFoundError: on first use, no data file or folder at ``dataset`` (and no such Hub name).
        ValueError: on first use, data that cannot serve the DataModule (the subclass's checks); reading again
            raises again.

    Example:
        >>> from fccolit.datamodules import HFClassificationDataModule
        >>> data = HFClassificationDataModule("no-such-file.parquet", label="y", features="x")  # nothing read yet
        >>> data.sizes
        Traceback (most recent call last):
        ...
        FileNotFoundError: no data file or folder at no-such-file.parquet
    """

    #: the attributes that :meth:`read_data` sets: reading one of them first reads the data
    data_attributes: tuple[str, ...] = ()

    def __init__(self, dataset: Any, config_name: str | None = None, cache_dir: str | os.PathLike | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dataset, self.config_name, self.cache_dir = dataset, config_name, cache_dir
        self._data_read = False

    def read_data(self) -> None:
        """Read the table and compute everything :attr:`sizes` and ``setup`` need, once."""
        if self.__dict__.get("_data_read", True):
            return
        self._data_read = True  # while reading, what it has set is there (sizes read back by _set_sizes)
        try:
            self._read_data()
        except BaseException:
            self._data_read = False  # the next use tries again (and raises again)
            raise

    def _read_data(self) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name in type(self).data_attributes and not self.__dict__.get("_data_read", True):
            self.read_data()
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class HFSplits(HFTable):
    """The splits of a HF DataModule with training, validation and test splits (module docstring).

    Args:
        train_split: the split that trains.
        val_split: the validation split (None: ``validation``, ``valid``, ``val`` or ``dev`` when present).
        test_split: the test split (None: ``test`` when present).
        val_fraction: the share of the training split's rows held out for validation when there is no
            validation split.
        test_fraction: likewise for a missing test split.
        dataset, **kwargs: see :class:`HFTable`.

    Raises:
        ValueError: on first use, a named split that the data set lacks, or ``val_fraction`` and ``test_fraction``
            leaving no training rows.

    Example:
        >>> import datasets
        >>> from fccolit.datamodules import HFClassificationDataModule
        >>> table = datasets.Dataset.from_dict({"x": [float(i) for i in range(20)], "y": [0, 1] * 10})
        >>> HFClassificationDataModule(table, label="y", features="x", val_split="dev").sizes
        Traceback (most recent call last):
        ...
        ValueError: the given Dataset: no split 'dev' (val_split); the splits are ['train']
    """

    def __init__(self, dataset: Any, train_split: str = "train", val_split: str | None = None,
                 test_split: str | None = None, val_fraction: float = 0.1, test_fraction: float = 0.1,
                 **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.train_split, self.val_split, self.test_split = train_split, val_split, test_split
        self.val_fraction, self.test_fraction = val_fraction, test_fraction

    def read_splits(self, columns: list[str], **checks: Any) -> tuple[dict[str, Any], str, dict[str, str]]:
        """The tables of the three splits (None where held out) as :func:`~fccolit.io.hf.read_tables` reads them,
        the data set's name for messages and each split's source (:meth:`split_source`)."""
        tables, where, origins = read_tables(self.dataset, self.config_name, self.cache_dir, self.train_split,
                                             self.val_split, self.test_split, columns, **checks)
        self._sources = split_sources(origins)
        return tables, where, origins

    def hold_out(self, tables: dict[str, Any], strata: np.ndarray, **kwargs: Any) -> tuple[dict[str, Any], dict]:
        """:func:`~fccolit.datasets.hf.hold_out` with this DataModule's fractions and seed: :attr:`tables` set,
        and each split's row positions."""
        self.tables, positions = hold_out(tables, strata, self.val_fraction, self.test_fraction, self.seed, **kwargs)
        return self.tables, positions

    def split_source(self, split: str) -> str | None:
        """The split's file, or the file it was held out of."""
        return self._sources[split]


class ScaledFeatures:
    """What the DataModules with feature columns share about ``feature_scaling``.

    The statistics of the training split (:attr:`feature_scaler`, a :class:`~fccolit.datasets.scaling.FeatureScaler`)
    are in the checkpoint beside the base class's state, restored from it, and rank 0's under DDP. A subclass fits
    :attr:`feature_scaler` when it reads its data, calls :meth:`share_feature_scaling` at the end of ``setup`` and
    implements :meth:`apply_feature_scaler` (make the datasets use the current :attr:`feature_scaler`).

    Args:
        feature_scaling: ``"standard"`` (default: zero mean, unit variance), ``"minmax"`` ([0, 1]) or ``"none"``,
            with the training split's statistics (module docstring).

    Raises:
        ValueError: ``feature_scaling`` is none of those.

    Example:
        >>> from fccolit.datamodules import HFClassificationDataModule
        >>> HFClassificationDataModule("table.parquet", label="y", features="x", feature_scaling="zscore")
        Traceback (most recent call last):
        ...
        ValueError: HFClassificationDataModule: feature_scaling must be one of 'standard', 'minmax', 'none', got 'zscore'
    """

    def __init__(self, feature_scaling: FeatureScaling = "standard", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the configured ``feature_scaling``; None when the data has no feature columns (images)
        self.feature_scaling: str | None = check_scaling(type(self).__name__, feature_scaling)

    def apply_feature_scaler(self) -> None:
        """Make the datasets built so far use :attr:`feature_scaler` (called when it changes after ``setup``)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The base class's state and ``feature_scaling``: the statistics the features are scaled with."""
        state = super().state_dict()
        if self.feature_scaler is not None:
            state = {**state, "feature_scaling": self.feature_scaler.state_dict()}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The base class's state, and the checkpoint's feature statistics in place of those computed from the data
        now (a checkpoint written before feature scaling existed trained on unscaled features: those apply, with a
        warning)."""
        super().load_state_dict(state_dict)
        if self.feature_scaler is None:
            return
        saved = state_dict.get("feature_scaling")
        name = type(self).__name__
        if saved is None:
            if not state_dict:
                return
            rank_zero_warn(f"{name}: the checkpoint holds no feature statistics (written before the HF DataModules "
                           "scaled features): its model was trained on unscaled features, which are used as they are")
            scaler = FeatureScaler("none")
        else:
            scaler = FeatureScaler.from_state_dict(saved)
        width = self.sizes.get("num_features")
        if scaler.width is not None and width is not None and scaler.width != width:
            raise ValueError(f"{name}: the checkpoint scales {scaler.width} features, the data has {width}: "
                             "evaluate or resume on the feature columns the run was trained on")
        if scaler.kind != self.feature_scaling and saved is not None:
            rank_zero_warn(f"{name}: the checkpoint's run scaled its features {scaler.kind!r}, configured "
                           f"feature_scaling={self.feature_scaling!r}: the checkpoint's statistics apply (its model "
                           "was trained on them)")
        self._use_feature_scaler(scaler)

    def share_feature_scaling(self) -> None:
        """Under DDP (a trainer with several processes), every rank takes rank 0's statistics: the same transform
        even if a rank read other data."""
        trainer = getattr(self, "trainer", None)
        if self.feature_scaler is None or trainer is None or int(getattr(trainer, "world_size", 1)) <= 1:
            return
        state = trainer.strategy.broadcast(self.feature_scaler.state_dict(), src=0)
        self._use_feature_scaler(FeatureScaler.from_state_dict(state))

    def _use_feature_scaler(self, scaler: FeatureScaler) -> None:
        if not scaler.same_as(self.feature_scaler):
            self.feature_scaler = scaler
            self.apply_feature_scaler()


# ------------------------------------------------------------------------------------------- classification
class HFClassificationDataModule(HFSplits, ScaledFeatures, FCCODataModule):
    """Binary or multi-label classification on a ``datasets`` table.

    See the module docstring for the sources, the cache and the splits; the table is read on first use
    (:class:`HFTable`), not by the constructor.

    * **binary** (``label`` one column of two values): batch fields ``x``, ``y`` ``[B]`` long in {0, 1}, ``index``
      (row in its split), ``pos_index`` / ``neg_index`` (row among the split's positives / negatives, −1
      otherwise) as :func:`fccolit.data.binary_fields`; training batches from a
      :class:`~fccolit.samplers.DualSampler` (``num_positives`` positives each). Sizes: ``num_samples``,
      ``num_positives``, ``num_negatives`` (and ``num_features``).
    * **multi-label** (``label`` several columns, or one column holding a list per row): label 1 positive, 0
      negative, anything else (−1, null in a list) unlabeled for that task; training batches of
      ``tasks_per_batch`` tasks × ``num_positives`` positives and ``batch_size / tasks_per_batch − num_positives``
      negatives (:class:`~fccolit.samplers.MultiLabelSampler`, fields of
      :class:`~fccolit.samplers.multilabel.MultiLabelPairDataset`); evaluation: ``x``, ``y`` ``[B, T]``, ``index``.
      Sizes of :func:`~fccolit.samplers.multilabel.multilabel_sizes` (and ``num_features``).

    ``x`` is ``[B, D]`` float32 from ``features`` (scalar columns, or a list column), scaled by
    ``feature_scaling`` (module docstring), or ``[B, C, H, W]`` from an ``image`` column
    (:class:`~fccolit.datasets.hf.ArrowRowsDataset`); images are normalized by ``image_mean`` / ``image_std``
    instead of ``feature_scaling``.

    Args:
        dataset: the data set (:class:`HFTable`).
        label: the label column (binary), or the label columns / one list column (multi-label).
        features: the input columns (exclusive with ``image``).
        image: an image column.
        positive_label: the raw value of the positive class (binary; None: the larger of the two values).
        batch_size: global training batch size.
        num_positives: positives per batch (binary) or per task of a batch (multi-label; None: half a task's block).
        num_batches: training batches per epoch (None: a pass over the negatives (binary) or the rows).
        anchor_sampling: binary: ``"permutation"`` or ``"with_replacement"`` (:class:`~fccolit.samplers.DualSampler`).
        tasks_per_batch: multi-label K (None: the largest divisor of ``batch_size`` up to the number of tasks).
        augment: images: random crop and flip of training batches.
        image_mean: images: per-channel mean of [0, 1] pixels, subtracted.
        image_std: images: per-channel standard deviation of [0, 1] pixels, divided by.
        seed: seeds the held-out splits and the sampler.
        **kwargs: the splits (:class:`HFSplits`: ``train_split``, ``val_split``, ``test_split``, ``val_fraction``,
            ``test_fraction``), the source (:class:`HFTable`: ``config_name``, ``cache_dir``), ``feature_scaling``
            (:class:`ScaledFeatures`), ``num_workers`` and ``eval_batch_size``.

    Raises:
        ValueError: both or neither of ``features`` and ``image`` are given, or ``feature_scaling`` is unknown (by
            the constructor); when the data is read: a missing column, a label column without exactly two values
            (binary), non-finite features, a training split without both classes (the message names the file, row
            and column).
        FileNotFoundError: ``dataset`` looks like a path and nothing is there (when the data is read).

    Example:
        >>> import datasets
        >>> table = datasets.Dataset.from_dict({"x": [float(i) for i in range(20)], "y": [0, 1] * 10})
        >>> data = HFClassificationDataModule(table, label="y", features="x", val_fraction=0.25, test_fraction=0.25)
        >>> data.sizes  # the table is read here, on first use
        {'num_samples': 10, 'num_positives': 5, 'num_negatives': 5, 'num_features': 1}
        >>> data.setup("fit")
        >>> sorted(data.train_dataset.__getitems__([0]))
        ['index', 'neg_index', 'pos_index', 'x', 'y']
    """

    data_attributes = ("tables", "labels", "label_values", "multilabel", "label_columns", "feature_scaler",
                       "_sources")

    def __init__(
        self,
        dataset: Any,
        label: str | list[str],
        features: str | list[str] | None = None,
        image: str | None = None,
        positive_label: Any = None,
        batch_size: int = 64,
        num_positives: int | None = 16,
        num_batches: int | None = None,
        anchor_sampling: Literal["permutation", "with_replacement"] = "permutation",
        tasks_per_batch: int | None = None,
        augment: bool = False,
        image_mean: tuple[float, ...] = IMAGENET_MEAN,
        image_std: tuple[float, ...] = IMAGENET_STD,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.label, self.features, self.image, self.positive_label = label, as_list(features), image, positive_label
        if bool(self.features) == (image is not None):
            raise ValueError("HFClassificationDataModule: give the input as either features= (columns) or image= (a column)")
        self.batch_size, self.num_batches, self.anchor_sampling, self.seed = batch_size, num_batches, anchor_sampling, seed
        self.num_positives, self.tasks_per_batch = num_positives, tasks_per_batch
        self.augment, self.image_mean, self.image_std = augment, tuple(image_mean), tuple(image_std)
        if not self.features:
            self.feature_scaling = None  # images: normalized by image_mean / image_std

    def _read_data(self) -> None:
        labels = as_list(self.label)
        tables, where, _ = self.read_splits(labels + self.features + as_list(self.image), finite=self.features,
                                            same_length=labels)
        self.multilabel = len(labels) > 1 or column(tables["train"].select(range(1)), labels[0]).ndim == 2
        self.label_columns = labels
        if self.multilabel:
            read = {s: self._label_matrix(t) for s, t in tables.items() if t is not None}
            strata = np.zeros(len(tables["train"]), dtype=np.int64)
        else:
            raw = {s: column(t, labels[0]) for s, t in tables.items() if t is not None}
            read, self.label_values = binary_labels(raw, self.positive_label, f"{where}, column {labels[0]!r}")
            strata = read["train"].numpy()
        _, positions = self.hold_out(tables, strata)
        self.labels = select_rows(read, positions)
        self.sizes = self._sizes_of_labels()
        self.feature_scaler = None
        if self.features:
            self.feature_scaler = FeatureScaler.fit(self.feature_scaling, self._rows("train", {}).feature_chunks())

    def _label_matrix(self, table: Any) -> torch.Tensor:
        """``[N, T]`` long: 1, 0, or −1 (any other value or a null inside a list column: unlabeled)."""
        if len(self.label_columns) == 1:
            values = column(table, self.label_columns[0])
            if values.dtype == object:
                raise ValueError(f"label column {self.label_columns[0]!r}: every row needs a list of the same length")
        else:
            values = np.stack([column(table, c) for c in self.label_columns], axis=1)
        values = np.asarray(values, dtype=np.float64)
        return torch.from_numpy(np.where(values == 1, 1, np.where(values == 0, 0, -1)).astype(np.int64))

    def _sizes_of_labels(self) -> dict[str, int]:
        width = {"num_features": feature_width(self.tables["train"], self.features)} if self.features else {}
        y = self.labels["train"]
        if self.multilabel:
            return {**multilabel_sizes(y), **width}
        positives = int(y.sum())
        if not 0 < positives < y.numel():
            raise ValueError(f"the training split needs both classes, it has {positives} positives among {y.numel()} rows")
        return {"num_samples": y.numel(), "num_positives": positives, "num_negatives": y.numel() - positives, **width}

    def _rows(self, split: str, fields: dict[str, torch.Tensor], augment: bool = False) -> ArrowRowsDataset:
        return ArrowRowsDataset(self.tables[split], fields, self.features, self.image, augment=augment,
                                mean=self.image_mean, std=self.image_std, scaler=self.feature_scaler)

    def _fields(self, split: str) -> dict[str, torch.Tensor]:
        y = self.labels[split]
        return {"y": y, "index": torch.arange(y.shape[0])} if self.multilabel else without_inputs(y)

    def setup(self, stage: str | None = None) -> None:
        self.read_data()
        train = self._rows("train", self._fields("train"), augment=self.augment)
        self.train_dataset = MultiLabelPairDataset(train, self.labels["train"]) if self.multilabel else train
        self.val_dataset = self._rows("val", self._fields("val"))
        self.test_dataset = self._rows("test", self._fields("test"))
        self.share_feature_scaling()

    def apply_feature_scaler(self) -> None:
        train = getattr(self.train_dataset, "base", self.train_dataset)  # a MultiLabelPairDataset wraps the rows
        for dataset in (train, self.val_dataset, self.test_dataset):
            if isinstance(dataset, ArrowRowsDataset):
                dataset.scaler = self.feature_scaler

    def build_train_sampler(self) -> RankAwareBatchSampler:
        y = self.labels["train"]
        if not self.multilabel:
            return DualSampler(y, self.batch_size, self.num_positives, num_batches=self.num_batches,
                               anchor_sampling=self.anchor_sampling, seed=self.seed)
        tasks = tasks_per_batch_for(self.batch_size, y.shape[1], self.tasks_per_batch)
        block = self.batch_size // tasks
        positives = block // 2 if self.num_positives is None else int(self.num_positives)
        if not 0 < positives < block:
            raise ValueError(f"num_positives must be in [1, {block - 1}] (a task's block of the batch), got {positives}")
        return MultiLabelSampler(y, tasks, positives, block - positives, num_batches=self.num_batches, seed=self.seed)


# -------------------------------------------------------------------------------------------------- grouped
class HFGroupedDataModule(HFSplits, ScaledFeatures, GroupedDataModule):
    """Binary classification with a group column (group DRO, ROC-fairness constraints) on a ``datasets`` table.

    Batch fields: ``x`` ``[B, D]`` float32 (``features``, scaled by ``feature_scaling``), ``y``, ``index``, ``pos_index``, ``neg_index``
    (:func:`fccolit.data.binary_fields`) and ``group`` ``[B]`` long in ``0..G−1`` (the distinct values of the
    ``group`` column of the training split in increasing order: :attr:`group_values`). Training batches as
    :class:`~fccolit.datamodules.grouped.GroupedDataModule` (B1 groups × B2 rows, or shuffled / stratified by
    (group, label) cell). Held-out splits are stratified by that cell. Sizes: ``num_samples``, ``num_positives``,
    ``num_negatives``, ``num_features``, ``num_groups``. The table is read on first use (:class:`HFTable`).

    Args:
        dataset: the data set (:class:`HFTable`).
        features: the input columns.
        label: the binary label column.
        group: the group column (any values: numbers, strings, booleans).
        positive_label: the raw value of the positive class (None: the larger of the two values).
        **kwargs: the splits (:class:`HFSplits`), the source (:class:`HFTable`: ``config_name``, ``cache_dir``),
            ``feature_scaling`` (:class:`ScaledFeatures`) and the batches (``batch_size``, ``groups_per_batch``,
            ``samples_per_group``, ``paired``, ``stratify_by_cell``, ``num_batches``, ``seed``, ``num_workers``,
            ``eval_batch_size``: :class:`~fccolit.datamodules.grouped.GroupedDataModule`).

    Raises:
        ValueError: when the data is read: a label column without exactly two values, an evaluation split with a
            group the training split does not have, non-finite features, a missing column.

    Example:
        >>> import datasets
        >>> table = datasets.Dataset.from_dict({"x": [float(i) for i in range(16)], "y": [0, 1] * 8,
        ...                                     "g": ["a", "a", "b", "b"] * 4})
        >>> data = HFGroupedDataModule(table, features="x", label="y", group="g", val_fraction=0.25,
        ...                            test_fraction=0.25, batch_size=4)
        >>> data.sizes["num_groups"], data.group_values.tolist()
        (2, ['a', 'b'])
    """

    data_attributes = ("tables", "label_values", "group_values", "feature_scaler", "_sources")

    def __init__(
        self,
        dataset: Any,
        features: str | list[str],
        label: str,
        group: str,
        positive_label: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.features, self.label, self.group, self.positive_label = as_list(features), label, group, positive_label

    def _read_data(self) -> None:
        label, group = self.label, self.group
        tables, where, _ = self.read_splits([label, group, *self.features], finite=self.features)
        raw = {s: column(t, label) for s, t in tables.items() if t is not None}
        y, self.label_values = binary_labels(raw, self.positive_label, f"{where}, column {label!r}")
        groups = {s: column(t, group) for s, t in tables.items() if t is not None}
        self.group_values = np.unique(groups["train"])
        for split, values in groups.items():
            unknown = np.setdiff1d(np.unique(values), self.group_values)
            if unknown.size:
                raise ValueError(f"{where}, column {group!r}: the {split} split has groups {unknown[:5].tolist()} "
                                 "that the training split does not have")
        codes = {s: torch.from_numpy(np.searchsorted(self.group_values, v).astype(np.int64)) for s, v in groups.items()}
        _, positions = self.hold_out(tables, (2 * codes["train"] + y["train"]).numpy())
        y, codes = select_rows(y, positions), select_rows(codes, positions)
        self._splits = {s: {**without_inputs(y[s]), "group": codes[s]} for s in _SPLITS}
        train_y = self._splits["train"]["y"]
        self.sizes = {
            "num_samples": train_y.numel(), "num_positives": int(train_y.sum()),
            "num_negatives": train_y.numel() - int(train_y.sum()),
            "num_features": feature_width(self.tables["train"], self.features), "num_groups": len(self.group_values),
        }
        self.feature_scaler = FeatureScaler.fit(
            self.feature_scaling, ArrowRowsDataset(self.tables["train"], {}, self.features).feature_chunks())

    def setup(self, stage: str | None = None) -> None:
        self.read_data()
        self.train_dataset, self.val_dataset, self.test_dataset = (
            ArrowRowsDataset(self.tables[s], self._splits[s], self.features, scaler=self.feature_scaler)
            for s in _SPLITS
        )
        self.share_feature_scaling()

    def apply_feature_scaler(self) -> None:
        for dataset in (self.train_dataset, self.val_dataset, self.test_dataset):
            if isinstance(dataset, ArrowRowsDataset):
                dataset.scaler = self.feature_scaler


# -------------------------------------------------------------------------------------------------- ranking
class HFRankingDataModule(HFSplits, ScaledFeatures, RankingDataModule):
    """Learning to rank on a ``datasets`` table of documents, as MSLR-WEB or Yahoo! LTR saved as Parquet.

    One row per (query, document) with a query column, feature columns and a graded relevance column (``y ≥ 0``,
    gain 2^y − 1).

    The batches are those of :class:`~fccolit.datamodules.MSLRDataModule` (schema in
    :mod:`fccolit.datasets.ranking`): training slates of ``slate_length`` documents of one query,
    ``num_positives`` relevant ones drawn first (:class:`~fccolit.datasets.letor.ListwiseTrainDataset`, queries from
    a :class:`~fccolit.samplers.ranking.QueryBatchSampler`), whole lists at evaluation
    (:class:`~fccolit.datasets.letor.ListEvalDataset`). A query's documents need not be adjacent in the table.
    Held-out splits take whole queries (``val_fraction`` / ``test_fraction`` of the training split's queries).
    The columns are read into memory on first use (:class:`HFTable`; features as float32, scaled by
    ``feature_scaling`` with the training split's statistics; module docstring). Sizes: ``num_queries`` (training
    queries), ``num_features``, ``num_pairs`` (relevant training documents: SONG's state rows), and ``top_k`` when
    set.

    Args:
        dataset: the data set (:class:`HFTable`).
        query: the query id column (any values).
        features: the feature columns (scalar columns, or one list column).
        relevance: the relevance label column.
        slate_length: documents per training slate.
        num_positives: relevant documents drawn first into a slate.
        queries_per_batch: queries (slates) per training batch.
        num_batches: training batches per epoch (None: a pass over the queries with a relevant document).
        top_k: K of the batches' ``ideal_dcg_at_k`` (None: no cut-off).
        empty_queries: ``"keep"`` or ``"drop"`` queries without a relevant document from evaluation.
        seed: seeds the held-out splits and the sampler.
        num_workers: DataLoader workers.
        eval_batch_size: queries per evaluation batch.
        **kwargs: the splits (:class:`HFSplits`), the source (:class:`HFTable`: ``config_name``, ``cache_dir``) and
            ``feature_scaling`` (:class:`ScaledFeatures`).

    Raises:
        ValueError: ``slate_length`` < 1 or an unknown ``empty_queries`` (by the constructor); when the data is
            read: a relevance label that is not a grade 0..24, non-finite features, a split without documents, no
            relevant training document.

    Example:
        >>> import datasets
        >>> table = datasets.Dataset.from_dict({"q": [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4], "x": [0.5, 1.0, 2.0] * 4,
        ...                                     "rel": [0, 1, 2] * 4})
        >>> data = HFRankingDataModule(table, query="q", features="x", relevance="rel", val_fraction=0.25,
        ...                            test_fraction=0.25, slate_length=3, num_positives=1, queries_per_batch=1)
        >>> data.sizes
        {'num_queries': 2, 'num_features': 1, 'num_pairs': 4}
    """

    data_attributes = ("tables", "lists", "pairs", "_document_order", "feature_scaler", "num_queries",
                       "num_features", "num_pairs")

    def __init__(
        self,
        dataset: Any,
        query: str,
        features: str | list[str],
        relevance: str,
        slate_length: int = 100,
        num_positives: int = 10,
        queries_per_batch: int = 64,
        num_batches: int | None = None,
        top_k: int | None = None,
        empty_queries: Literal["keep", "drop"] = "keep",
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 64,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, queries_per_batch=queries_per_batch, num_positives=num_positives,
                         num_batches=num_batches, top_k=top_k, seed=seed, num_workers=num_workers,
                         eval_batch_size=eval_batch_size, **kwargs)
        check_choice("empty_queries", empty_queries, ("keep", "drop"))
        if int(slate_length) < 1:
            raise ValueError(f"slate_length must be positive, got {slate_length}")
        self.slate_length, self.empty_queries_policy = int(slate_length), empty_queries
        self.query, self.features, self.relevance = query, as_list(features), relevance

    def _read_data(self) -> None:
        relevance = self.relevance
        tables, where, _ = self.read_splits([self.query, relevance, *self.features], finite=self.features,
                                            grades=relevance)
        queries = {s: column(t, self.query) for s, t in tables.items() if t is not None}
        distinct, units = np.unique(queries["train"], return_inverse=True)  # whole queries are held out
        _, positions = self.hold_out(tables, np.zeros(distinct.size, np.int64), units=units.reshape(-1))
        queries = select_rows(queries, positions)
        self.lists, self._document_order = {}, {}
        for split in _SPLITS:  # the training split first: its features give the scaling statistics
            table = self.tables[split]
            rel = column(table, relevance).astype(np.float32)  # grades 0..MAX_RELEVANCE (read_tables checked)
            order, indptr, qids = group_by_query(queries[split])
            self._document_order[split] = order
            x = self._raw_features(split)
            if split == "train":
                self.feature_scaler = FeatureScaler.fit(
                    self.feature_scaling, (x[i : i + 16384] for i in range(0, x.shape[0], 16384)))
            self.lists[split] = {"features": self.feature_scaler.transform_numpy(x), "relevance": rel[order],
                                 "indptr": indptr, "qid": qids}
            if indptr.size <= 1:
                raise ValueError(f"{where}: the {split} split holds no document")
        train = self.lists["train"]
        if not (train["relevance"] > 0).any():
            raise ValueError(f"{where}, column {relevance!r}: no training document is relevant (every label is 0); "
                             "training draws (query, relevant document) pairs")
        self.pairs = ltr_pair_arrays(train["indptr"], train["relevance"])
        self.train_num_relevant = np.diff(self.pairs["pos_indptr"])
        self._set_sizes({"num_queries": train["indptr"].size - 1, "num_features": train["features"].shape[1],
                         "num_pairs": self.pairs["pos_docs"].size})

    def _raw_features(self, split: str) -> np.ndarray:
        """``[N, D]``: the split's feature columns, unscaled, its documents grouped by query."""
        return split_features(self.tables[split], self.features)[self._document_order[split]]

    def apply_feature_scaler(self) -> None:
        """The features read again from the table and scaled by the new statistics; the datasets built again."""
        for split in _SPLITS:
            self.lists[split]["features"] = self.feature_scaler.transform_numpy(self._raw_features(split))
        if self.train_dataset is not None:
            self.train_dataset = None
            self._build_datasets()

    def _eval_dataset(self, split: str) -> ListEvalDataset:
        lists = self.lists[split]
        queries = None
        if self.empty_queries_policy == "drop":
            relevant = np.add.reduceat(lists["relevance"] > 0, lists["indptr"][:-1]) if lists["relevance"].size else []
            queries = np.flatnonzero(np.asarray(relevant) > 0)
        return ListEvalDataset(lists["features"], lists["relevance"], lists["indptr"], queries)

    def setup(self, stage: str | None = None) -> None:
        self.read_data()
        self._build_datasets()
        self.share_feature_scaling()

    def _build_datasets(self) -> None:
        train = self.lists["train"]
        if self.train_dataset is None:
            self.train_dataset = ListwiseTrainDataset(train["features"], train["relevance"], train["indptr"],
                                                      self.pairs, self.slate_length, self.num_positives, self.top_k)
        self.val_dataset, self.test_dataset = self._eval_dataset("val"), self._eval_dataset("test")


class HFRecommendationDataModule(HFTable, RecommendationDataModule):
    """Recommendation from a ``datasets`` table of interactions, as MovieLens' ``ratings.csv`` saved as Parquet.

    One row per (user, item) with a rating (and optionally a time).

    Everything after reading the columns is :class:`~fccolit.datamodules.RecommendationDataModule`'s: the per-user
    split by time (``protocol``), relevance, training lists of P relevant and M unrated items per user
    (:class:`~fccolit.samplers.ranking.QueryBatchSampler`), full-ranking or sampled-candidate evaluation, and its
    sizes (``num_users``, ``num_items``, ``num_queries``, ``num_pairs``). Only ``split`` of the data set is read
    (the protocol makes the evaluation splits), on first use (:class:`HFTable`). Users and items may have any ids
    (numbers or strings): :attr:`user_ids` and :attr:`item_ids` give the raw id of each index. Without a ``time``
    column a user's rows are in table order (the last ones are held out). The split arrays are built in memory
    (no on-disk cache beyond ``datasets``' table).

    Args:
        dataset: the data set (:class:`HFTable`).
        user: the user id column.
        item: the item id column.
        rating: the rating column (a number; ``relevance`` says how it becomes a relevance).
        time: a time column (numbers or timestamps), None: table order.
        split: the data set's split holding the interactions.
        **kwargs: the source (:class:`HFTable`: ``config_name``, ``cache_dir``) and
            :class:`~fccolit.datamodules.RecommendationDataModule`'s arguments (``protocol``, ``num_negatives``,
            ``queries_per_batch``, ...).

    Raises:
        ValueError: when the data is read: a missing or non-finite rating or time, a missing column, no relevant
            training (user, item) pair.

    Example:
        >>> import datasets
        >>> table = datasets.Dataset.from_dict({"user": ["u1"] * 4 + ["u2"] * 4, "item": list("abcdabce"),
        ...                                     "rating": [5.0, 4.0, 3.0, 5.0, 1.0, 5.0, 4.0, 2.0]})
        >>> data = HFRecommendationDataModule(table, user="user", item="item", rating="rating", num_negatives=2)
        >>> data.sizes["num_users"], data.item_ids.tolist()
        (2, ['a', 'b', 'c', 'd', 'e'])
    """

    data_attributes = ("_user_values", "_item_values", "_arrays", "num_test", "num_val", "eval_negatives",
                       "num_negatives", "num_ratings", "num_duplicates", "num_dropped_users", "num_users",
                       "num_items", "num_queries", "num_pairs")

    def __init__(
        self,
        dataset: Any,
        user: str,
        item: str,
        rating: str,
        time: str | None = None,
        split: str = "train",
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.user, self.item, self.rating, self.time, self.split = user, item, rating, time, split

    def _read_data(self) -> None:
        user, item, rating, time = self.user, self.item, self.rating, self.time
        tables, where, _ = read_tables(self.dataset, self.config_name, self.cache_dir, self.split, None, None,
                                       [user, item, rating, *as_list(time)], finite=[rating, *as_list(time)])
        table = tables["train"]
        self._user_values, users = np.unique(column(table, user), return_inverse=True)
        self._item_values, items = np.unique(column(table, item), return_inverse=True)
        times = np.arange(len(table)) if time is None else column(table, time).astype(np.int64)
        ratings = Ratings(users.astype(np.int64), items.astype(np.int64), column(table, rating).astype(np.float32),
                          times)
        self._load(Path("."), [Path(f"{where}, column {rating!r}")], lambda: ratings, "hf")

    def setup(self, stage: str | None = None) -> None:
        self.read_data()
        super().setup(stage)

    def _cached(self, root: Path, files: Sequence[Path], options: Mapping[str, Any], prefix: str,
                build: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Built in memory: the source table is already cached by ``datasets``."""
        return dict(build())

    @property
    def user_ids(self) -> np.ndarray:
        """``[num_users]`` raw user id of each user index."""
        return self._user_values[super().user_ids]

    @property
    def item_ids(self) -> np.ndarray:
        """``[num_items]`` raw item id of each item index."""
        return self._item_values[super().item_ids]
