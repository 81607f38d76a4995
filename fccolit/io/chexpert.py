"""Reader of CheXpert's ``train.csv`` / ``valid.csv`` (Irvin et al. 2019) and its label values.

CSV columns: ``Path, Sex, Age, Frontal/Lateral, AP/PA`` and 14 observations (:data:`OBSERVATIONS`) valued ``1.0``
(positive), ``0.0`` (negative), ``-1.0`` (uncertain) or blank (not mentioned). ``Path`` starts with the release
folder's name (``CheXpert-v1.0-small/…``).

Why not a plain ``pandas.read_csv``: it is the fast path already (its C tokenizer reads the columns as text); what
this module adds is the check of every row, vectorized over the columns: a label outside {1.0, 0.0, −1.0, blank}, a
view other than Frontal / Lateral, a ``Path`` leaving the release folder or a row with the wrong number of fields.
A file the fast path does not accept as it stands (a quote, a blank line, a lone CR, any failed check) is read again
by the line-by-line parser, the specification, which names the file, the line and the field of the first error.
Cost: 8× a bare ``read_csv`` (0.59 s against 73 ms for a 223,414-row ``train.csv``; the line-by-line parser
alone took 1.7 s, ``benchmarks/handwritten.py``), once per raw file: the DataModule caches the arrays.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

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


def read_chexpert_csv(
    path: str | os.PathLike, labels: Sequence[str], *, _force_slow: bool = False
) -> dict[str, np.ndarray]:
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
    parsed = None if _force_slow else _read_fast(path, labels)
    return parsed if parsed is not None else _read_checked(path, labels)


#: ``Path`` values the vectorized check accepts: relative, ``/``-separated, without a drive, a backslash or a NUL
#: (:data:`_GOES_UP` then refuses a ``..`` component). Any other file goes to the line-by-line parser, where
#: :func:`~fccolit.io.paths.confined_relative_path` decides and explains.
_PLAIN_PATH = re.compile(r"[^/\\\x00:]+(?:/[^/\\\x00:]+)*")
_GOES_UP = re.compile(r"(?:^|/)\.\.(?:/|$)")


def _read_fast(path: Path, labels: Sequence[str]) -> dict[str, np.ndarray] | None:
    """pandas' C tokenizer and vectorized checks; None when anything is off (the line-by-line parser explains)."""
    data = path.read_bytes()
    header_end = data.find(b"\n")
    if header_end < 0 or b'"' in data or data.count(b"\r") != data.count(b"\r\n"):
        return None  # a quoted field or a lone CR: the line parser reads those
    if b"\n\n" in data or b"\n\r\n" in data:
        return None  # a blank line would shift the line numbers
    try:
        header = [h.strip() for h in data[:header_end].decode("utf-8").rstrip("\r").split(",")]
    except UnicodeDecodeError:
        return None
    needed = ["Path", "Frontal/Lateral", *labels]
    if any(c not in header for c in needed) or len(set(header)) != len(header):
        return None
    try:
        frame = pd.read_csv(
            io.BytesIO(data), header=None, skiprows=1, names=header, usecols=needed, engine="c", encoding="utf-8",
            dtype={name: (str if name == "Path" else "category") for name in needed},
            keep_default_na=False, na_filter=False, quoting=csv.QUOTE_NONE,
        )
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError):
        return None
    n = len(frame)
    if n == 0 or data.count(b",") != (len(header) - 1) * (n + 1):
        return None  # a short or long row (pandas pads the one, may shift the other)
    paths = frame["Path"].str.strip()
    if not paths.str.fullmatch(_PLAIN_PATH).all() or paths.str.contains(_GOES_UP).any():
        return None

    def lookup(name: str, table: dict[str, float]) -> np.ndarray | None:
        """The column's values through ``table`` (cells stripped), looked up once per distinct cell."""
        column = frame[name].cat
        values = [table.get(str(cell).strip()) for cell in column.categories]
        return None if None in values else np.asarray(values, dtype=np.float32)[column.codes.to_numpy()]

    frontal = lookup("Frontal/Lateral", {"Frontal": 1.0, "Lateral": 0.0})
    raw = [lookup(name, _VALUES) for name in labels]
    if frontal is None or any(column is None for column in raw):
        return None
    try:
        encoded = paths.to_numpy(dtype=str).astype(bytes)  # ASCII, as in every release
    except UnicodeEncodeError:
        encoded = np.char.encode(paths.to_numpy(dtype=str), "utf-8")
    return {
        "path": encoded,
        "line": np.arange(2, n + 2, dtype=np.int32),
        "frontal": frontal == 1.0,
        "raw": np.stack(raw, axis=1) if raw else np.zeros((n, 0), dtype=np.float32),
    }


def _read_checked(path: Path, labels: Sequence[str]) -> dict[str, np.ndarray]:
    """The line-by-line parser: the specification, and the explanation of the first malformed row."""
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
