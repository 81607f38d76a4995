"""Input checks the functional kernels share."""

from __future__ import annotations

import torch
from torch import Tensor


def check_no_nan_scores(values: Tensor, what: str) -> None:
    """Raise ValueError, counting them, if the floating-point scores ``values`` hold NaN (``what`` names them)."""
    if values.is_floating_point():
        n_nan = int(torch.isnan(values).sum())
        if n_nan:
            raise ValueError(
                f"{what} contains {n_nan} NaN value(s) out of {values.numel()}: the model produced NaN scores "
                "(diverged training or a NaN input). The metric is undefined for NaN scores."
            )
