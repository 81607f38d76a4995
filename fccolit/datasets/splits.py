"""Seeded splits of a data set's rows."""

from __future__ import annotations

import numpy as np

__all__ = ["stratified_split", "class_splits"]


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


def class_splits(
    y: np.ndarray, fractions: dict[str, float], rng: np.random.Generator, pool: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Rows per split, stratified by a binary label: the rows of each class (0, then 1) are shuffled and cut in the
    order of ``fractions`` (``round(fraction · n_class)`` rows each); the rest is ``"train"``. Each split sorted.

    Args:
        y: ``[n]`` labels in {0, 1} of the rows in ``pool``.
        fractions: split name → fraction of each class, e.g. ``{"val": 0.1, "test": 0.2}``.
        rng: the generator that shuffles (one permutation per class).
        pool: ``[n]`` the row indices ``y`` describes (default ``0 … n − 1``).

    Example:
        >>> y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> {k: v.tolist() for k, v in class_splits(y, {"val": 0.25}, np.random.default_rng(0)).items()}
        {'train': [0, 1, 3, 4, 5, 6], 'val': [2, 7]}
    """
    pool = np.arange(y.size) if pool is None else pool
    parts: dict[str, list[np.ndarray]] = {"train": [], **{s: [] for s in fractions}}
    for cls in (0, 1):
        members = pool[y == cls]
        members = members[rng.permutation(members.size)]
        start = 0
        for split, fraction in fractions.items():
            count = round(fraction * members.size)
            parts[split].append(members[start : start + count])
            start += count
        parts["train"].append(members[start:])
    return {s: np.sort(np.concatenate(p)) for s, p in parts.items()}
