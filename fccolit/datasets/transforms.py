"""Per-image loaders for :class:`~fccolit.datasets.images.ImageFileDataset`: decode a JPEG, augment, resize, and
return uint8 ``[3, S, S]`` (picklable, so they run in the DataLoader workers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["ChestXrayTransform", "ClipImageTransform"]


class ChestXrayTransform:
    """LibAUC's CheXpert image pipeline: a JPEG path to a uint8 ``[3, size, size]`` grayscale image tensor.

    Grayscale → (training) ``RandomAffine(±15°, translate 0.05, scale 0.95–1.05)`` → resize to ``size × size`` →
    3 channels.

    JPEG decoding uses PIL's draft mode (DCT scaling to at least ``size``), which makes the full-resolution
    ``CheXpert-v1.0`` images cheap to read; the ``-small`` images are decoded as they are.

    Args:
        size: side S of the square output.
        augment: apply the random affine transform (training).

    Raises:
        FileNotFoundError: ``path`` does not exist (raised by PIL).
        PIL.UnidentifiedImageError: the file is not an image PIL can read.

    Example (a 40 × 30 JPEG written to a temporary folder):
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.jpg"
        >>> Image.new("RGB", (40, 30), (200, 10, 10)).save(path)
        >>> image = ChestXrayTransform(size=16)(path)
        >>> tuple(image.shape), image.dtype
        ((3, 16, 16), torch.uint8)
    """

    def __init__(self, size: int = 320, augment: bool = False) -> None:
        self.size, self.augment = int(size), augment
        self._affine = None

    def __call__(self, path: Path) -> torch.Tensor:
        from PIL import Image

        with Image.open(path) as img:
            img.draft("L", (self.size, self.size))
            img = img.convert("L")
        if self.augment:
            if self._affine is None:
                from torchvision.transforms import InterpolationMode, v2

                self._affine = v2.RandomAffine(degrees=15, translate=(0.05, 0.05), scale=(0.95, 1.05), interpolation=InterpolationMode.BILINEAR)
            img = self._affine(img)
        img = img.resize((self.size, self.size), Image.BILINEAR)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).unsqueeze(0).expand(3, -1, -1)


class ClipImageTransform:
    """CLIP's preprocessing: a JPEG path to a uint8 ``[3, size, size]`` RGB image tensor.

    Shorter side to ``size`` (bicubic), center crop ``size × size``; with ``augment`` a random crop position along
    the longer side and a horizontal flip.

    Args:
        size: side S of the square output.
        augment: random crop position and horizontal flip (training; drawn from torch's global generator).

    Raises:
        FileNotFoundError: ``path`` does not exist (raised by PIL).
        PIL.UnidentifiedImageError: the file is not an image PIL can read.

    Example (a 40 × 30 JPEG written to a temporary folder):
        >>> import tempfile, pathlib
        >>> from PIL import Image
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.jpg"
        >>> Image.new("RGB", (40, 30), (200, 10, 10)).save(path)
        >>> image = ClipImageTransform(size=8)(path)
        >>> tuple(image.shape), image.dtype
        ((3, 8, 8), torch.uint8)
    """

    def __init__(self, size: int = 224, augment: bool = False) -> None:
        self.size, self.augment = int(size), augment

    def __call__(self, path: Path) -> torch.Tensor:
        from PIL import Image

        with Image.open(path) as img:
            img.draft("RGB", (self.size, self.size))  # JPEG DCT scaling: decode at the smallest scale ≥ size
            img = img.convert("RGB")
        w, h = img.size
        side = min(w, h)  # the square that becomes the crop: resize and crop in one resampling
        if self.augment:
            left, top = float(torch.randint(0, w - side + 1, ())), float(torch.randint(0, h - side + 1, ()))
        else:
            left, top = (w - side) / 2, (h - side) / 2
        img = img.resize((self.size, self.size), Image.BICUBIC, box=(left, top, left + side, top + side))
        if self.augment and bool(torch.rand(()) < 0.5):
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)
