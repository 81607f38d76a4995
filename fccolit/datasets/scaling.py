"""Per-feature scaling of a user's feature table, fitted on the training split: ``x ↦ (x − shift) / scale``.

Raw features (pixel values 0–16, areas in the thousands, counts) put a linear model's first scores far out where
the sigmoid of AP's and pAUC's score transform is flat (σ′ vanishes), and the surrogate then has no gradient: on
scikit-learn's digits ("8" vs rest, raw pixels) SOX's test AP fell below the base rate, and on its breast cancer
table the objective never moved (``benchmarks/results/own_data_defaults.md``). The Hugging Face DataModules
(:mod:`fccolit.datamodules.hf`) therefore scale the feature columns by default:

* ``"standard"``: zero mean and unit variance per feature (the population standard deviation, as scikit-learn's
  ``StandardScaler``);
* ``"minmax"``: the training range onto [0, 1];
* ``"none"``: the values as they are.

A feature that is constant on the training split (its minimum equals its maximum) becomes 0 in every split
(``scale = inf``): nothing is divided by zero, and since training never sees it vary, the weights it meets are never
trained on it, so its values in other splits would only add noise through them. (With ``scale = 1``, as
scikit-learn's ``StandardScaler`` keeps such a column, a pixel that is always 0 in training and 16 in a test row
would add 16 times an untrained weight, and the digits scaled to [0, 1] would no longer train exactly as the raw
digits do.) The statistics are accumulated in float64 over chunks of rows (the merge of
per-chunk means and squared deviations of Chan, Golub & LeVeque), so the table is never held in memory whole, and
the scaled value is computed in float64 and rounded to float32 once. They are a plain dict of tensors
(:meth:`FeatureScaler.state_dict`), which the DataModules put into every checkpoint: ``test``, ``predict`` and a
resumed run apply the statistics the model was trained with, not statistics computed again from data that may
have changed since.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

import numpy as np
import torch

__all__ = ["FeatureScaling", "SCALINGS", "FeatureScaler", "check_scaling"]

#: the values of the DataModules' ``feature_scaling`` argument
FeatureScaling = Literal["standard", "minmax", "none"]
SCALINGS: tuple[str, ...] = ("standard", "minmax", "none")


def check_scaling(owner: str, kind: Any) -> str:
    """``kind`` if it is one of :data:`SCALINGS`, else a ``ValueError`` naming ``owner`` and the choices."""
    if kind not in SCALINGS:
        raise ValueError(f"{owner}: feature_scaling must be one of {', '.join(map(repr, SCALINGS))}, got {kind!r}")
    return kind


class FeatureScaler:
    """``x ↦ (x − shift) / scale`` per feature, ``shift`` and ``scale`` ``[D]`` float64 (None for ``"none"``).

    Args:
        kind: one of :data:`SCALINGS`.
        shift, scale: the statistics (both None for ``"none"``).
        rows: the number of training rows they were computed from (for messages; 0 if unknown).

    Raises:
        ValueError: ``kind`` not one of :data:`SCALINGS`; ``shift`` / ``scale`` given for ``"none"`` or missing for
            the others; a scale that is not positive, or a shift that is not finite; from :meth:`fit`, no rows.

    Example (the second feature is constant in training, so it becomes 0):
        >>> import numpy as np, torch
        >>> scaler = FeatureScaler.fit("standard", [np.array([[0.0, 5.0], [2.0, 5.0]]), np.array([[4.0, 5.0]])])
        >>> scaler, scaler.shift.tolist()
        (FeatureScaler('standard', 2 features from 3 rows), [2.0, 5.0])
        >>> scaler(torch.tensor([[4.0, 7.0]]))
        tensor([[1.2247, 0.0000]])
        >>> FeatureScaler("minmax")
        Traceback (most recent call last):
            ...
        ValueError: FeatureScaler('minmax'): shift and scale are needed for 'standard' and 'minmax' only
    """

    def __init__(self, kind: str, shift: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                 rows: int = 0) -> None:
        self.kind = check_scaling("FeatureScaler", kind)
        if (kind == "none") != (shift is None) or (shift is None) != (scale is None):
            raise ValueError(f"FeatureScaler({kind!r}): shift and scale are needed for 'standard' and 'minmax' only")
        self.shift = None if shift is None else torch.as_tensor(shift, dtype=torch.float64).reshape(-1)
        self.scale = None if scale is None else torch.as_tensor(scale, dtype=torch.float64).reshape(-1)
        if self.scale is not None and not bool((self.scale > 0).all()):  # inf: a constant column (becomes 0)
            raise ValueError("FeatureScaler: every scale must be positive (inf for a column constant in training)")
        if self.shift is not None and not bool(torch.isfinite(self.shift).all()):
            raise ValueError("FeatureScaler: every shift must be finite")
        self.rows = int(rows)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, kind: str, chunks: Iterable[np.ndarray | torch.Tensor]) -> "FeatureScaler":
        """The statistics of ``kind`` over the rows of ``chunks`` (``[n_k, D]`` arrays, e.g. a table read a few
        thousand rows at a time), accumulated in float64; ``"none"`` reads nothing."""
        check_scaling("FeatureScaler.fit", kind)
        if kind == "none":
            return cls("none")
        count, mean, m2, low, high = 0, None, None, None, None
        for chunk in chunks:
            x = chunk.numpy() if torch.is_tensor(chunk) else np.asarray(chunk)
            x = x.astype(np.float64, copy=False).reshape(len(x), -1)
            if x.shape[0] == 0:
                continue
            n, chunk_mean = x.shape[0], x.mean(axis=0)
            chunk_m2 = np.square(x - chunk_mean).sum(axis=0)
            if mean is None:
                count, mean, m2, low, high = n, chunk_mean, chunk_m2, x.min(axis=0), x.max(axis=0)
                continue
            total = count + n
            delta = chunk_mean - mean
            mean = mean + delta * (n / total)
            m2 = m2 + chunk_m2 + np.square(delta) * (count * n / total)
            low, high = np.minimum(low, x.min(axis=0)), np.maximum(high, x.max(axis=0))
            count = total
        if mean is None:
            raise ValueError("FeatureScaler.fit: no training rows to compute feature statistics from")
        constant = high == low
        if kind == "standard":
            shift, scale = mean, np.sqrt(m2 / count)
        else:
            shift, scale = low, high - low
        scale = np.where(constant | ~(scale > 0), np.inf, scale)  # a constant column becomes 0, never divided by 0
        return cls(kind, torch.from_numpy(shift), torch.from_numpy(scale), rows=count)

    # ------------------------------------------------------------------ applying
    @property
    def width(self) -> int | None:
        """D, or None for ``"none"`` (any width)."""
        return None if self.shift is None else int(self.shift.numel())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, D]`` float32: the scaled rows of ``x`` (any numeric dtype), computed in float64."""
        if self.shift is None:
            return x.to(torch.float32)
        return ((x.to(torch.float64) - self.shift) / self.scale).to(torch.float32)

    def transform_numpy(self, x: np.ndarray, chunk_rows: int = 65536) -> np.ndarray:
        """``[N, D]`` float32: the scaled rows of ``x``, a chunk of rows at a time (float64 only per chunk)."""
        out = np.empty(x.shape, dtype=np.float32)
        if self.shift is None:
            out[...] = x
            return out
        shift, scale = self.shift.numpy(), self.scale.numpy()
        for start in range(0, x.shape[0], chunk_rows):
            part = np.asarray(x[start : start + chunk_rows], dtype=np.float64)
            out[start : start + chunk_rows] = (part - shift) / scale
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """``{"kind", "shift", "scale", "rows"}``: plain values and float64 tensors (loadable with
        ``torch.load(weights_only=True)``)."""
        return {"kind": self.kind, "shift": self.shift, "scale": self.scale, "rows": self.rows}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "FeatureScaler":
        return cls(state["kind"], state.get("shift"), state.get("scale"), int(state.get("rows", 0)))

    def same_as(self, other: "FeatureScaler") -> bool:
        """The same transform (kind and every statistic bit for bit)."""
        if self.kind != other.kind:
            return False
        if self.shift is None:
            return True
        return (self.shift.shape == other.shift.shape and bool(torch.equal(self.shift, other.shift))
                and bool(torch.equal(self.scale, other.scale)))

    def __repr__(self) -> str:
        width = "" if self.width is None else f", {self.width} features from {self.rows:,} rows"
        return f"FeatureScaler({self.kind!r}{width})"
