"""Rows of a Hugging Face ``datasets.Dataset`` (an Arrow table, memory-mapped from its cache files) read a batch at
a time, with the per-row fields the samplers and objectives need (``y``, ``index``, ``pos_index``, ``group``, ...)
held in memory beside it. Used by :mod:`fccolit.datamodules.hf`."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from fccolit.datasets.images import IMAGENET_MEAN, IMAGENET_STD, batch_draw_keys, random_crop_flip

__all__ = ["ArrowRowsDataset"]


class ArrowRowsDataset(Dataset):
    """A split of a ``datasets.Dataset`` whose batch is one Arrow ``take`` of the input columns plus an
    ``index_select`` of the in-memory fields.

    The input ``x`` of a batch is either

    * the feature columns (``feature_columns``): several scalar columns stacked to ``[B, D]`` float32, or one
      column holding a fixed-length list per row (``[B, D]``); or
    * an image column (``image_column``: a ``datasets.Image`` column, decoded to ``[C, H, W]``, or a column of
      ``[H, W]`` / ``[H, W, C]`` uint8 arrays; every image of one size): ``[B, C, H, W]`` float32, pixels scaled to [0, 1] and normalized by ``mean`` /
      ``std`` per channel (a grey image is repeated to ``len(mean)`` channels). With ``augment`` a training batch
      is randomly cropped (zero padding ``padding``) and flipped, drawn from the batch's keys
      (:func:`~fccolit.datasets.images.random_crop_flip`), so the same after a resume and on any number of
      processes.

    Reading only the batch's rows keeps the table on disk (memory-mapped): a batch of 128 rows of a few columns
    costs about 3 ms, images decoding on top.

    Args:
        table: the split's rows (``len(table) == N``).
        fields: ``{name: [N, ...] tensor}`` gathered with the batch (``y``, ``index``, ``pos_index``, ...).
        feature_columns: the columns making ``x`` (exclusive with ``image_column``).
        image_column: the image column.
        augment, padding, mean, std: the image pipeline above.
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
    ) -> None:
        if bool(feature_columns) == (image_column is not None):
            raise ValueError("ArrowRowsDataset: give either feature_columns or image_column")
        columns = [image_column] if image_column is not None else list(feature_columns)
        self.table = table.with_format("torch", columns=columns)
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

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        rows = self.table[idx.tolist()]
        x = self._images(rows[self.image_column], indices) if self.image_column else self._features(rows)
        return {"x": x, **{k: v.index_select(0, idx) for k, v in self.fields.items()}}

    def _features(self, rows: dict[str, Any]) -> torch.Tensor:
        """``[B, D]`` float32 from the feature columns of ``rows``."""
        parts = [torch.as_tensor(rows[c]) for c in self.feature_columns]
        parts = [p.unsqueeze(1) if p.dim() == 1 else p for p in parts]
        return torch.cat(parts, dim=1).to(torch.float32)

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
