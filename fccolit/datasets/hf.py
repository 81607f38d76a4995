"""Rows of a Hugging Face ``datasets.Dataset`` (an Arrow table, memory-mapped from its cache files) read a batch at
a time, with the per-row fields the samplers and objectives need (``y``, ``index``, ``pos_index``, ``group``, ...)
held in memory beside it, and the split and label helpers of :mod:`fccolit.datamodules.hf` (evaluation splits held
out of the training split, binary labels from a raw label column)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

import torch
from torch.utils.data import Dataset

from fccolit.data import binary_fields
from fccolit.datasets.images import IMAGENET_MEAN, IMAGENET_STD, batch_draw_keys, random_crop_flip
from fccolit.datasets.scaling import FeatureScaler
from fccolit.datasets.splits import stratified_split
from fccolit.samplers.base import index_tensor

__all__ = [
    "ArrowRowsDataset", "arrow_features", "split_features", "hold_out", "select_rows", "binary_labels", "without_inputs",
]


class ArrowRowsDataset(Dataset):
    """A split of a ``datasets.Dataset`` whose batch is one Arrow ``take`` plus the in-memory fields.

    The input columns are read with one ``take``; the in-memory fields with an ``index_select``.

    The input ``x`` of a batch is either

    * the feature columns (``feature_columns``): several scalar columns stacked to ``[B, D]`` float32, or one
      column holding a fixed-length list per row (``[B, D]``); or
    * an image column (``image_column``: a ``datasets.Image`` column, decoded to ``[C, H, W]``, or a column of
      ``[H, W]`` / ``[H, W, C]`` uint8 arrays; every image of one size): ``[B, C, H, W]`` float32, pixels scaled to [0, 1] and normalized by ``mean`` /
      ``std`` per channel (a grey image is repeated to ``len(mean)`` channels). With ``augment`` a training batch
      is randomly cropped (zero padding ``padding``) and flipped, drawn from the batch's keys
      (:func:`~fccolit.datasets.images.random_crop_flip`), so the same after a resume and on any number of
      processes.

    The feature columns are scaled by ``scaler`` (a :class:`~fccolit.datasets.scaling.FeatureScaler` fitted on
    the training split, computed in float64: :meth:`feature_chunks` reads the rows it is fitted on), or used as
    they are (None). The DataModule may replace :attr:`scaler` later (the statistics of a checkpoint).

    Reading only the batch's rows keeps the table on disk (memory-mapped): a batch of 128 rows of a few columns
    costs about 3 ms, images decoding on top.

    Args:
        table: the split's rows (``len(table) == N``).
        fields: ``{name: [N, ...] tensor}`` gathered with the batch (``y``, ``index``, ``pos_index``, ...).
        feature_columns: the columns making ``x`` (exclusive with ``image_column``).
        image_column: the image column.
        augment, padding, mean, std: the image pipeline above.
        scaler: the feature scaling (None: features as they are; images are normalized by ``mean`` / ``std``).

    Raises:
        ValueError: both or neither of ``feature_columns`` and ``image_column``; a field whose row count differs
            from ``len(table)``; from ``__getitems__``, a batch of images of several sizes; from
            :meth:`feature_chunks`, an image column.

    Example (two scalar feature columns, three rows, no scaling):
        >>> import datasets, torch
        >>> table = datasets.Dataset.from_dict({"a": [1.0, 2.0, 3.0], "b": [0.0, 1.0, 0.0]})
        >>> dataset = ArrowRowsDataset(table, {"y": torch.tensor([1, 0, 1])}, feature_columns=["a", "b"])
        >>> batch = dataset.__getitems__([0, 2])
        >>> len(dataset), batch["x"].tolist(), batch["y"].tolist()
        (3, [[1.0, 0.0], [3.0, 0.0]], [1, 1])
        >>> ArrowRowsDataset(table, {})
        Traceback (most recent call last):
            ...
        ValueError: ArrowRowsDataset: give either feature_columns or image_column
    """

    def __init__(
        self,
        table: Any,
        fields: dict[str, torch.Tensor],
        feature_columns: Sequence[str] = (),
        image_column: str | None = None,
        augment: bool = False,
        padding: int = 4,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        scaler: FeatureScaler | None = None,
    ) -> None:
        if bool(feature_columns) == (image_column is not None):
            raise ValueError("ArrowRowsDataset: give either feature_columns or image_column")
        if image_column is not None:
            self.table = table.with_format("torch", columns=[image_column])
        else:  # float64 (datasets' default is float32), so that scaling sees the values as they are
            self.table = table.with_format("torch", columns=list(feature_columns), dtype=torch.float64)
        if image_column is not None:
            import datasets

            self.decoded_chw = isinstance(table.features[image_column], datasets.Image)  # datasets' torch layout
        self.feature_columns, self.image_column = list(feature_columns), image_column
        for name, value in fields.items():
            if value.shape[0] != len(table):
                raise ValueError(f"ArrowRowsDataset: field {name!r} has {value.shape[0]} rows, the table {len(table)}")
        self.fields = fields
        self.augment, self.padding = bool(augment), int(padding)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.scaler = scaler

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = index_tensor(indices)
        rows = self.table[idx.tolist()]
        x = self._images(rows[self.image_column], indices) if self.image_column else self._features(rows)
        return {"x": x, **{k: v.index_select(0, idx) for k, v in self.fields.items()}}

    def _features(self, rows: dict[str, Any]) -> torch.Tensor:
        """``[B, D]`` float32 from the feature columns of ``rows`` (read as float64), scaled by :attr:`scaler`."""
        parts = [torch.as_tensor(rows[c]) for c in self.feature_columns]
        x = torch.cat([p.unsqueeze(1) if p.dim() == 1 else p for p in parts], dim=1)
        return x.to(torch.float32) if self.scaler is None else self.scaler(x)

    def feature_chunks(self, chunk_rows: int = 16384) -> Iterator[np.ndarray]:
        """The unscaled features of the split's rows, ``[n, D]`` float64 blocks (what :meth:`FeatureScaler.fit
        <fccolit.datasets.scaling.FeatureScaler.fit>` reads), as a multiset: the rows are those of the split, each
        as often as it is selected, but in the order of the table they were selected from. The blocks are read
        from that table in contiguous slices of ``chunk_rows`` rows: ``datasets``' reads through a selection
        (a held-out split) of a table of 123 scalar columns took 50 s for 80,000 rows, against 0.13 s this way."""
        if self.image_column is not None:
            raise ValueError("ArrowRowsDataset.feature_chunks: an image column has no feature statistics")
        data = self.table.data.table.select(self.feature_columns)  # pyarrow, every row of the source table
        indices = getattr(self.table, "_indices", None)
        counts = None
        if indices is not None:
            counts = np.bincount(indices.column(0).to_numpy(), minlength=data.num_rows)
        for start in range(0, data.num_rows, chunk_rows):
            x = arrow_features(data.slice(start, chunk_rows), self.feature_columns)
            yield x if counts is None else np.repeat(x, counts[start : start + chunk_rows], axis=0)

    def _images(self, images: Any, indices: Sequence[int]) -> torch.Tensor:
        """``[B, C, H, W]`` float32, normalized (and augmented for a training batch)."""
        if not torch.is_tensor(images):  # a list: images of several sizes, or one image
            shapes = sorted({tuple(im.shape) for im in images})
            if len(shapes) > 1:
                raise ValueError(
                    f"image column {self.image_column!r}: a batch holds images of several sizes {shapes[:4]}; resize "
                    "them to one size first (e.g. datasets.Dataset.map with PIL's resize)"
                )
            images = torch.stack(list(images))
        if images.dim() == 3:  # [B, H, W]: grey arrays
            images = images.unsqueeze(-1)
        x = images if self.decoded_chw else images.permute(0, 3, 1, 2)  # [B, C, H, W]
        channels = self.mean.shape[1]
        if x.shape[1] == 1 and channels > 1:
            x = x.expand(-1, channels, -1, -1)
        if self.augment:
            keys = batch_draw_keys(indices)
            x = random_crop_flip(x.contiguous(), self.padding, *(keys or ()))
        return x.float().div(255.0).sub_(self.mean).div_(self.std)


def arrow_features(table: Any, columns: Sequence[str]) -> np.ndarray:
    """``[N, D]`` float64: the columns of the pyarrow ``table`` side by side (a scalar column gives one feature, a
    list column of equal lengths as many as its lists hold)."""
    import pyarrow as pa

    parts = []
    for name in columns:
        values = table.column(name).combine_chunks()
        depth = 0
        while any(test(values.type) for test in (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)):
            values, depth = values.flatten(), depth + 1
        flat = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
        parts.append(flat.reshape(table.num_rows, -1) if depth else flat.reshape(-1, 1))
    return np.concatenate(parts, axis=1) if parts else np.zeros((table.num_rows, 0))


def split_features(table: Any, columns: Sequence[str]) -> np.ndarray:
    """``[N, D]`` float64: :func:`arrow_features` of the rows of the ``datasets.Dataset`` ``table`` in its order
    (one Arrow ``take`` through its selection, if it has one)."""
    data = table.data.table.select(list(columns))
    indices = getattr(table, "_indices", None)
    if indices is not None:
        data = data.take(indices.column(0))
    return arrow_features(data, columns)


def select_rows(per_split: dict[str, Any], positions: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``per_split`` (in-memory rows of the named splits: tensors or arrays) completed with the splits that
    :func:`hold_out` took from the training split, and the training split reduced to the rows it kept."""
    train = per_split["train"]
    rows = {s: torch.from_numpy(p) if torch.is_tensor(train) else p for s, p in positions.items()}
    return {**per_split, **{s: train[r] for s, r in rows.items()}}


def without_inputs(y: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`fccolit.data.binary_fields` of the labels ``y`` without ``x``: the inputs stay in the Arrow table."""
    fields = binary_fields(torch.empty(y.numel(), 0), y)
    del fields["x"]
    return fields


def hold_out(
    splits: dict, strata: np.ndarray, val_fraction: float, test_fraction: float, seed: int,
    units: np.ndarray | None = None,
) -> tuple[dict, dict[str, np.ndarray]]:
    """Fill the missing (None) evaluation splits of ``splits`` with rows of the training split: ``test_fraction``
    and ``val_fraction`` of its rows, each stratum (``strata [N_train]``: label or cell) in proportion
    (:func:`~fccolit.datasets.splits.stratified_split`), seeded by ``seed``. With ``units`` (``[N_train]`` ids
    ``0..U−1``, e.g. each row's query) whole units are held out: the fractions count units and ``strata`` is
    ``[U]``.

    Returns:
        the three tables, and ``{split: positions [N_s] in the original training split}`` for ``"train"`` and each
        split held out of it.
    """
    fractions = {"test": test_fraction, "val": val_fraction}
    missing = [s for s in ("test", "val") if splits[s] is None]
    if not (0.0 <= val_fraction < 1.0 and 0.0 <= test_fraction < 1.0 and sum(fractions[s] for s in missing) < 1.0):
        raise ValueError(f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must leave training rows")
    rng = np.random.default_rng([int(seed), 0x4F])
    left, chosen, rest = 1.0, {}, np.arange(strata.size)
    for split in missing:
        kept, held = stratified_split(strata[rest], fractions[split] / left, rng)
        chosen[split], rest, left = rest[held], rest[kept], left - fractions[split]
    chosen["train"] = rest
    positions = chosen if units is None else {s: np.flatnonzero(np.isin(units, u)) for s, u in chosen.items()}
    tables = dict(splits)
    if missing:
        tables.update({s: splits["train"].select(p) for s, p in positions.items()})
    return tables, positions


def binary_labels(raw: Mapping[str, np.ndarray], positive_label: Any, where: str) -> tuple[dict[str, torch.Tensor], tuple]:
    """``y`` ``[N_s]`` long in {0, 1} per split from the raw label columns ``raw``, and the raw ``(negative,
    positive)`` values. Every split's labels must be one of the training split's two values; the positive class is
    ``positive_label``, or the larger value (1 of {0, 1}, True of booleans)."""
    values = np.unique(raw["train"])
    if values.size != 2:
        shown = ", ".join(map(str, values[:10].tolist()))
        raise ValueError(f"{where}: a binary label column needs exactly two values in the training split, found "
                         f"{values.size}: {shown}")
    if positive_label is None:
        negative, positive = values[0], values[1]
    else:
        matches = [v for v in values.tolist() if v == positive_label or str(v) == str(positive_label)]
        if not matches:
            raise ValueError(f"{where}: positive_label={positive_label!r} is not one of the labels {values.tolist()}")
        positive = matches[0]
        negative = next(v for v in values.tolist() if v != positive)
    y = {}
    for split, labels in raw.items():
        unknown = np.setdiff1d(np.unique(labels), values)
        if unknown.size:
            raise ValueError(f"{where}: the {split} split has labels {unknown[:5].tolist()} that the training split "
                             f"does not have ({values.tolist()})")
        y[split] = torch.from_numpy((labels == positive).astype(np.int64))
    return y, (negative.item() if hasattr(negative, "item") else negative, positive.item() if hasattr(positive, "item") else positive)
