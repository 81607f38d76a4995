import os

import pytest
import torch

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
