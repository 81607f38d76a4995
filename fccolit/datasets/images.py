"""Image datasets: files decoded per batch (CheXpert, BDD100K) and uint8 arrays (CIFAR), with the batched CIFAR
augmentation keyed by the training batch (the same after a resume, in any worker, on any number of processes).

Why not torchvision's dataset classes: ``ImageFolder`` wants one folder per class, where CheXpert lists its images
in a CSV and BDD100K in a JSON, with several labels per image; ``CIFAR10`` with ``RandomCrop`` / ``RandomHorizontalFlip``
transforms crops and flips image by image from the global generator, so a resumed run or another number of workers
or processes draws other crops. :class:`ImageArrayDataset` crops and flips the whole batch at once from the batch's
keys, in 0.20–0.21× the time of torchvision's per-image transforms plus ``default_collate`` for a batch of 128
(``benchmarks/handwritten.py``). The image files are still decoded by the caller's ``load`` (PIL or torchvision).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from fccolit.samplers.base import index_tensor
from fccolit.samplers.ranking import batch_integers, batch_words

__all__ = [
    "ImageFileDataset", "ImageArrayDataset", "RowOrigin", "batch_draw_keys", "random_crop_flip",
    "IMAGENET_MEAN", "IMAGENET_STD", "CIFAR_MEAN", "CIFAR_STD", "CLIP_MEAN", "CLIP_STD",
]

# streams of the keyed random numbers (fccolit.samplers.ranking.batch_words) of a training batch's augmentation
_CROP_STREAM, _FLIP_STREAM, _LOAD_STREAM = 0xC409, 0xF119, 0x10AD


def batch_draw_keys(indices: Sequence[int]) -> tuple[int, list[int]] | None:
    """``(batch seed, global positions)`` of a training batch from a :class:`~fccolit.samplers.RankAwareBatchSampler`
    (a :class:`~fccolit.samplers.base.SampledBatch`), or None for plain indices (evaluation, direct indexing)."""
    seed, positions = getattr(indices, "seed", None), getattr(indices, "positions", None)
    return None if seed is None or positions is None else (int(seed), list(positions))


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class RowOrigin:
    """``row -> "<file> <unit> <k>"``: where row ``row`` of a dataset was listed, for error messages.

    E.g. ``"train.csv line 12"`` or ``"det_train.json frame 4"`` in :class:`ImageFileDataset`'s messages; picklable
    for DataLoader workers.

    Args:
        name: the file.
        positions: ``[N]`` the line (or frame) of each row in the file.
        unit: ``"line"`` or ``"frame"``.

    Raises:
        IndexError: when called with a row outside ``[0, N)`` (numpy indexing).

    Example:
        >>> import numpy as np
        >>> RowOrigin("train.csv", np.array([2, 3, 5]))(2)
        'train.csv line 5'
    """

    def __init__(self, name: str, positions: np.ndarray, unit: str = "line") -> None:
        self.name, self.positions, self.unit = name, np.asarray(positions), unit

    def __call__(self, i: int) -> str:
        return f"{self.name} {self.unit} {int(self.positions[i])}"


class ImageFileDataset(Dataset):
    """Images decoded from files, one per row, plus named per-row fields; the batch is a dict of tensors.

    ``__getitems__`` decodes (and augments) each image of the batch with ``load`` (in the DataLoader workers),
    stacks them and normalizes the batch at once. For a training batch (a
    :class:`~fccolit.samplers.base.SampledBatch`) each image's ``load`` runs with torch's CPU generator seeded from
    the batch's keys and the image's position in the global batch (and restored after), so random augmentation is a
    pure function of ``(sampler seed, epoch, batch, position)``: the same after a mid-epoch resume, in any worker and
    on any number of processes. A missing file raises ``FileNotFoundError`` and an unreadable one
    ``ValueError``, both naming the file and where it was listed (``origin``).

    Args:
        root: folder the relative paths start from.
        paths: ``[N]`` relative paths (str or bytes), ``/``-separated.
        fields: ``{name: [N, ...] tensor}`` gathered with the batch.
        load: ``Path -> uint8 tensor [3, S, S]`` (decode, augment, resize); must be picklable for workers.
        mean, std: per-channel normalization of ``[0, 1]`` pixels.
        origin: ``row -> str`` saying where a row's path came from (e.g. ``"train.csv line 12"``).

    Raises:
        ValueError: a field whose row count differs from ``len(paths)``; from ``__getitems__``, an image ``load``
            cannot read (naming the file and ``origin``).
        FileNotFoundError: from ``__getitems__``, a missing image file (naming the file and ``origin``).

    Example (a stand-in ``load`` that returns a white 2 × 2 image; pixels normalized with mean and std 0.5):
        >>> import tempfile
        >>> import numpy as np, torch
        >>> white = lambda path: torch.full((3, 2, 2), 255, dtype=torch.uint8)
        >>> dataset = ImageFileDataset("data", ["a.jpg", "b/c.jpg"], {"y": torch.tensor([1, 0])}, white,
        ...                            mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
        >>> batch = dataset.__getitems__([1])
        >>> len(dataset), dataset.path(1).as_posix(), tuple(batch["x"].shape), batch["x"].max().item(), batch["y"]
        (2, 'data/b/c.jpg', (1, 3, 2, 2), 1.0, tensor([0]))
        >>> from fccolit.datasets.transforms import ClipImageTransform
        >>> missing = ImageFileDataset(tempfile.mkdtemp(), ["missing.jpg"], {}, ClipImageTransform(8),
        ...                            origin=RowOrigin("train.csv", np.array([2])))
        >>> missing[0]
        Traceback (most recent call last):
            ...
        FileNotFoundError: image not found: ...missing.jpg (listed in train.csv line 2). ...
    """

    def __init__(
        self,
        root: str | os.PathLike,
        paths: Sequence[Any],
        fields: dict[str, torch.Tensor],
        load: Callable[[Path], torch.Tensor],
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        origin: Callable[[int], str] | None = None,
    ) -> None:
        self.root, self.paths, self.fields, self.load, self.origin = Path(root), paths, fields, load, origin
        for name, value in fields.items():
            if value.shape[0] != len(paths):
                raise ValueError(f"field {name!r} has {value.shape[0]} rows, there are {len(paths)} paths")
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __len__(self) -> int:
        return len(self.paths)

    def path(self, i: int) -> Path:
        rel = self.paths[i]
        rel = rel.decode() if isinstance(rel, (bytes, np.bytes_)) else str(rel)
        return self.root.joinpath(*rel.split("/"))

    def _where(self, i: int) -> str:
        return f" (listed in {self.origin(i)})" if self.origin is not None else ""

    def image(self, i: int, seed: int | None = None) -> torch.Tensor:
        """Row ``i``'s image from ``load``; with ``seed``, torch's CPU generator is seeded with it for the call (and
        restored after), so what ``load`` draws (its augmentation) depends on ``seed`` only."""
        path = self.path(i)
        try:
            if seed is None:
                return self.load(path)
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                return self.load(path)
        except FileNotFoundError as err:
            raise FileNotFoundError(
                f"image not found: {path}{self._where(i)}. The images under {self.root} are incomplete: extract the "
                "release's images again into it (labels and images must come from the same release)"
            ) from err
        except (OSError, ValueError, SyntaxError) as err:  # PIL: UnidentifiedImageError, truncated files, ...
            raise ValueError(f"cannot read image {path}{self._where(i)}: {type(err).__name__}: {err}") from err

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = index_tensor(indices)
        keys = batch_draw_keys(indices)
        if keys is None:
            x = torch.stack([self.image(int(i)) for i in idx])
        else:
            seeds = (batch_words(keys[0], keys[1], _LOAD_STREAM, 1)[:, 0] >> np.uint64(1)).tolist()
            x = torch.stack([self.image(int(i), int(seed)) for i, seed in zip(idx, seeds)])
        x = x.float().div_(255.0).sub_(self.mean).div_(self.std)
        return {"x": x, **{k: v.index_select(0, idx) for k, v in self.fields.items()}}


class ImageArrayDataset(Dataset):
    """Images stored as a uint8 array (e.g. memory-mapped) plus named per-row fields, a batch built at once.

    ``__getitems__`` gathers, augments and normalizes the whole batch in one go.

    Args:
        images: ``[M, H, W, 3]`` uint8 (a split refers to its rows through ``rows``).
        rows: ``[N]`` rows of ``images`` making up this split.
        fields: ``{name: [N] tensor}`` gathered with the batch (``y``, ``index``, ...).
        augment: random crop with zero padding (``padding``) and horizontal flip; for a training batch (a
            :class:`~fccolit.samplers.base.SampledBatch`) drawn from the batch's keys (:func:`random_crop_flip`), so
            the same after a mid-epoch resume, in any worker and on any number of processes.
        mean, std: per-channel normalization of ``[0, 1]`` pixels.
        padding: zero padding of the random crop (with ``augment``).

    Raises:
        ValueError: a field whose row count differs from ``len(rows)``.

    Example (a split of three rows out of five 4 × 4 images):
        >>> import numpy as np, torch
        >>> dataset = ImageArrayDataset(np.zeros((5, 4, 4, 3), dtype=np.uint8), np.array([1, 3, 4]),
        ...                             {"y": torch.tensor([0, 1, 1])}, augment=True, padding=1)
        >>> batch = dataset.__getitems__([0, 2])
        >>> len(dataset), tuple(batch["x"].shape), batch["y"].tolist()
        (3, (2, 3, 4, 4), [0, 1])
        >>> ImageArrayDataset(np.zeros((5, 4, 4, 3), dtype=np.uint8), np.array([1]), {"y": torch.tensor([0, 1])})
        Traceback (most recent call last):
            ...
        ValueError: field 'y' has 2 rows, the split 1
    """

    def __init__(
        self,
        images: np.ndarray,
        rows: np.ndarray,
        fields: dict[str, torch.Tensor],
        augment: bool = False,
        mean: Sequence[float] = CIFAR_MEAN,
        std: Sequence[float] = CIFAR_STD,
        padding: int = 4,
    ) -> None:
        self.images, self.rows = images, np.asarray(rows, dtype=np.int64)
        self.fields = fields
        for name, value in fields.items():
            if value.shape[0] != self.rows.size:
                raise ValueError(f"field {name!r} has {value.shape[0]} rows, the split {self.rows.size}")
        self.augment, self.padding = augment, int(padding)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __len__(self) -> int:
        return int(self.rows.size)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = index_tensor(indices)
        pixels = np.ascontiguousarray(self.images[self.rows[idx.numpy()]])
        x = torch.from_numpy(pixels).permute(0, 3, 1, 2)  # [B, 3, H, W] uint8
        if self.augment:
            keys = batch_draw_keys(indices)
            x = random_crop_flip(x, self.padding, *(keys or ()))
        x = x.float().div_(255.0).sub_(self.mean).div_(self.std)
        return {"x": x, **{k: v.index_select(0, idx) for k, v in self.fields.items()}}


def random_crop_flip(
    x: torch.Tensor, padding: int = 4, seed: int | None = None, positions: Sequence[int] | None = None
) -> torch.Tensor:
    """``RandomCrop(H, padding)`` with zero fill and ``RandomHorizontalFlip(0.5)`` per image of a batch ``[B, C, H, W]``.

    With ``seed`` and ``positions`` (a training batch's keys, :class:`~fccolit.samplers.base.SampledBatch`) image
    ``k``'s offsets and flip are a pure function of ``(seed, positions[k])`` (counter-based, no generator state);
    without them they are drawn from torch's global generator.
    """
    b, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (padding, padding, padding, padding))
    if seed is not None:
        if positions is None or len(positions) != b:
            raise ValueError(f"random_crop_flip: {b} images need {b} positions, got {positions!r}")
        offsets = torch.from_numpy(batch_integers(seed, positions, _CROP_STREAM, 2, np.full(b, 2 * padding + 1)))
        flip = torch.from_numpy(batch_integers(seed, positions, _FLIP_STREAM, 1, np.full(b, 2))[:, 0] == 1)
        return _crop_flip(x, padded, offsets[:, 0], offsets[:, 1], flip)
    top = torch.randint(0, 2 * padding + 1, (b,))
    left = torch.randint(0, 2 * padding + 1, (b,))
    flip = torch.rand(b) < 0.5
    return _crop_flip(x, padded, top, left, flip)


def _crop_flip(
    x: torch.Tensor, padded: torch.Tensor, top: torch.Tensor, left: torch.Tensor, flip: torch.Tensor
) -> torch.Tensor:
    """The ``[B, C, H, W]`` crops of ``padded`` at ``(top, left)``, mirrored where ``flip``."""
    b, c, h, w = x.shape
    rows = (top[:, None] + torch.arange(h))[:, None, :, None]
    cols = (left[:, None] + torch.arange(w))[:, None, None, :]
    out = padded[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]
    return torch.where(flip[:, None, None, None], out.flip(-1), out)
