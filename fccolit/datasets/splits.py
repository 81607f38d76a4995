"""Seeded splits of a data set's rows."""

from __future__ import annotations

import numpy as np

__all__ = ["stratified_split"]


def stratified_split(groups: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(kept, held_out)`` of ``groups`` (e.g. class labels): ``round(fraction · n_g)`` of each group
    at random are held out; both outputs sorted."""
    held = []
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        held.append(rng.permutation(members)[: int(round(fraction * members.size))])
    held_out = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    kept = np.setdiff1d(np.arange(groups.size), held_out)
    return kept, held_out
