import os

import pytest
import torch

from fccolit.testing import bdd_frames, write_bdd100k

os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture
def binary_batch():
    """A small imbalanced binary problem as one full batch (float64)."""
    g = torch.Generator().manual_seed(0)
    n, d, m = 30, 4, 8
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(m)
    return {"x": x, "y": y, "index": torch.arange(n), "pos_index": pos_index}


@pytest.fixture(scope="module")
def bdd_root(tmp_path_factory):
    """A generated BDD100K (2018 labels JSON and 96 × 54 JPEGs; every weather class present): ``(root, frames)``."""
    root = tmp_path_factory.mktemp("bdd")
    frames = bdd_frames()
    write_bdd100k(root, frames=frames, version="2018", image_size=(96, 54), seed=0)
    return root, frames
