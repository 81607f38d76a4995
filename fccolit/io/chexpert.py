"""Reader of CheXpert's ``train.csv`` / ``valid.csv`` (Irvin et al. 2019) and its label values.

CSV columns: ``Path, Sex, Age, Frontal/Lateral, AP/PA`` and 14 observations (:data:`OBSERVATIONS`) valued ``1.0``
(positive), ``0.0`` (negative), ``-1.0`` (uncertain) or blank (not mentioned). ``Path`` starts with the release
folder's name (``CheXpert-v1.0-small/…``).

Why not ``pandas.read_csv``: it is 30× faster (0.11 s against 3.2 s for the 223,414 rows of the small
release's ``train.csv``, ``benchmarks/handwritten.py``), but checks nothing: this reader refuses a label outside
{1.0, 0.0, −1.0, blank}, a view other than Frontal / Lateral and a ``Path`` leaving the release folder, naming the
file, the line and the field. It runs once per raw file (the DataModule caches the arrays), next to minutes of image
decoding per epoch; a pandas fast path with this loop as its error path (as :mod:`fccolit.io.ratings` does) would
save those seconds once.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from fccolit.io.paths import confined_relative_path

__all__ = ["COMPETITION_LABELS", "OBSERVATIONS", "apply_uncertainty", "read_chexpert_csv", "strip_release_prefix"]

OBSERVATIONS = (
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices",
)
#: The five competition findings, in LibAUC's ``train_cols`` order (= D1..D5 of Yao, Lin & Yang, NeurIPS 2022).
COMPETITION_LABELS = ("Cardiomegaly", "Edema", "Consolidation", "Atelectasis", "Pleural Effusion")
_VALUES = {"1.0": 1.0, "1": 1.0, "0.0": 0.0, "0": 0.0, "-1.0": -1.0, "-1": -1.0, "": math.nan}


def read_chexpert_csv(path: str | os.PathLike, labels: Sequence[str]) -> dict[str, np.ndarray]:
    """Parse a CheXpert ``train.csv`` / ``valid.csv``.

    Returns:
        ``path`` ``[n]`` bytes (the ``Path`` column), ``line`` ``[n]`` int32 (1-based line of the row),
        ``frontal`` ``[n]`` bool (``Frontal/Lateral == "Frontal"``), ``raw`` ``[n, T]`` float32 of the ``labels``
        columns: 1, 0, −1 (uncertain) or NaN (blank).

    Raises:
        ValueError: naming the file, line and field: a malformed row, or a ``Path`` that would leave the release
            folder (absolute, or with a ``..`` component).
    """
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file (expected a header line starting with 'Path')")
        header = [h.strip() for h in header]
        needed = ["Path", "Frontal/Lateral", *labels]
        missing = [c for c in needed if c not in header]
        if missing:
            raise ValueError(f"{path} line 1: missing column(s) {missing}; the header has {header}")
        col = {c: header.index(c) for c in needed}
        paths, lines, frontal, raw = [], [], [], []
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise ValueError(f"{path} line {line}: {len(row)} fields, the header has {len(header)}")
            if not row[col["Path"]].strip():
                raise ValueError(f"{path} line {line}: field 'Path' is empty")
            confined_relative_path(row[col["Path"]].strip(), path.parent, f"{path} line {line}, field 'Path'")
            values = []
            for name in labels:
                cell = row[col[name]].strip()
                if cell not in _VALUES:
                    raise ValueError(
                        f"{path} line {line}: field '{name}' is {cell!r}; CheXpert labels are 1.0, 0.0, -1.0 or blank"
                    )
                values.append(_VALUES[cell])
            view = row[col["Frontal/Lateral"]].strip()
            if view not in ("Frontal", "Lateral"):
                raise ValueError(f"{path} line {line}: field 'Frontal/Lateral' is {view!r}, expected 'Frontal' or 'Lateral'")
            paths.append(row[col["Path"]].strip().encode())
            lines.append(line)
            frontal.append(view == "Frontal")
            raw.append(values)
    return {
        "path": np.asarray(paths, dtype=bytes) if paths else np.zeros(0, dtype="S1"),
        "line": np.asarray(lines, dtype=np.int32),
        "frontal": np.asarray(frontal, dtype=bool),
        "raw": np.asarray(raw, dtype=np.float32).reshape(len(paths), len(labels)),
    }


def apply_uncertainty(raw: np.ndarray, policies: Sequence[str], blank: str = "zeros") -> np.ndarray:
    """Map raw CheXpert labels ``[n, T]`` (1, 0, −1, NaN) to ``[n, T]`` int8 in {1, 0, −1 = unlabeled}.

    ``policies[t]`` maps −1 of label ``t``: ``"ones"`` → 1, ``"zeros"`` → 0, ``"ignore"`` → −1; ``blank`` maps
    NaN: ``"zeros"`` → 0, ``"ignore"`` → −1.
    """
    out = np.where(raw == 1, 1, 0).astype(np.int8)
    fill = {"ones": 1, "zeros": 0, "ignore": -1}
    for t, policy in enumerate(policies):
        out[raw[:, t] == -1, t] = fill[policy]
    out[np.isnan(raw)] = fill[blank]
    return out


def strip_release_prefix(rel: bytes) -> bytes:
    """A CSV ``Path`` relative to the release folder: its first component (``CheXpert-v1.0-small``) dropped."""
    parts = rel.replace(b"\\", b"/").split(b"/")
    if parts and parts[0].startswith(b"CheXpert-v1.0"):
        parts = parts[1:]
    return b"/".join(parts)
