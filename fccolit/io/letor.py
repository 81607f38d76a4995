"""Readers of learning-to-rank files: LETOR / SVMlight with query ids, and LightGBM's ranking layout.

LETOR / SVMlight with ``qid`` (MSLR-WEB10K / WEB30K, Yahoo! LTR C14, LETOR 3.0 / 4.0, RankLib), one document per
line::

    <relevance> qid:<query id> <index>:<value> <index>:<value> ... [# comment]

* ``relevance``: a number >= 0 (grades 0–4 in MSLR and Yahoo, 0–2 in LETOR 4.0);
* ``qid``: the second token; any token without white space (MSLR / Yahoo / LETOR write integers); the rows of a
  query are normally contiguous, but need not be: documents are grouped by query id (stable, queries in order of
  first appearance);
* features: 1-based ``index:value`` as in :mod:`fccolit.io.libsvm` (MSLR writes all 136 features, Yahoo only
  the defined ones of 700, so widths inferred per split may differ: pass ``num_features``);
* ``#`` starts a comment (LETOR 4.0 ends every line with ``#docid = GX008-86-4444840 inc = 1 prob = 0.086``);
  blank lines are skipped; CRLF is fine.

LightGBM layout (``examples/lambdarank`` in the LightGBM repository): ``rank.train`` holds LIBSVM lines
``<relevance> <index>:<value> ...`` without ``qid``, and ``rank.train.query`` the group sizes, one positive integer
per line, in order (their sum is the number of documents).

Parsing runs chunk by chunk on whole lines: the ``qid`` tokens are cut out with one regular expression, the rest
goes through the vectorized LIBSVM parser of :mod:`fccolit.io.libsvm`, and each chunk becomes dense float32 rows at
once (so WEB30K's 2.3M training documents never exist as float64 CSR). A chunk the fast path rejects is re-read
line by line, which raises a ``ValueError`` naming the file, the 1-based line and the field, e.g.
``train.txt line 8: token 'qid:' has an empty query id``.

Why not scikit-learn's ``load_svmlight_file(query_id=True)``: scikit-learn is only a development dependency, it reads
only integer query ids, its errors name neither file nor line (``could not convert string to float: b'x'``), and it
returns float64 CSR, which for dense LETOR features (MSLR's 136 per document) takes 3 to 4× the memory of these
float32 rows. It tokenizes faster (these readers take a bit under twice its time, on the real LightGBM lambdarank
sample and on a generated MSLR-format file, both densified to float32, with files parsed in 4 MiB pieces,
:data:`~fccolit.io.text.PARSE_BYTES`: ``benchmarks/handwritten.py``, timings in ``benchmarks/results/handwritten.md``),
but that time is spent once per raw file (the DataModules cache the arrays).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fccolit.io.libsvm import MAX_INDEX, allocate_dense, fits_storage, parse_chunk, parse_libsvm
from fccolit.io import text
from fccolit.io.text import line_chunks, line_ranges, shorten
from fccolit.io.paths import is_data_file

__all__ = ["LetorFile", "parse_letor", "read_lightgbm_ranking", "read_query_sizes", "group_by_query"]

_COMMENT = re.compile(rb"#[^\n]*")
# label, then qid as the second token: keep the label, drop " qid:<id>"
_QID = re.compile(rb"(?m)^([ \t]*[^\s]+)[ \t]+qid:([^\s]*)")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")


class LetorFile(NamedTuple):
    """A parsed learning-to-rank file (:func:`parse_letor`), one row per document in file order.

    Args:
        relevance: ``[N]`` float32 labels (>= 0).
        qid: ``[N]`` the raw query ids: int64 when every id is a decimal integer, else fixed-width bytes.
        features: ``[N, F]`` float32 dense features (absent ones 0; column ``j`` is the file's index ``j + 1``).
        lines: ``[N]`` int64 1-based line of each document.

    Raises:
        Nothing itself (a plain record); :func:`parse_letor` raises ``FileNotFoundError`` for a missing file and
        ``ValueError`` naming the file, line and field for a malformed line.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fccolit.io.letor import parse_letor
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "train.txt"
        ...     _ = path.write_text("2 qid:7 1:0.5 3:1.0\\n0 qid:7 2:0.25\\n1 qid:9 1:1.0 # docid = d3\\n")
        ...     parsed = parse_letor(path)
        >>> parsed.relevance.tolist(), parsed.qid.tolist(), parsed.features.shape
        ([2.0, 0.0, 1.0], [7, 7, 9], (3, 3))
        >>> parsed.features[1].tolist(), parsed.lines.tolist()
        ([0.0, 0.25, 0.0], [1, 2, 3])
    """

    relevance: np.ndarray
    qid: np.ndarray
    features: np.ndarray
    lines: np.ndarray


def _finite_number(token: str) -> bool:
    return bool(_NUMBER.fullmatch(token)) and bool(np.isfinite(float(token)))


def _slow_chunk(chunk: bytes, name: str, line0: int, upper: int | None, with_qid: bool):
    """Line-by-line parse with precise errors: the specification of the fast path.

    Returns (labels, qids, lines 0-based in chunk, rows of (indices, values))."""
    labels, qids, lines, rows = [], [], [], []
    for n, raw in enumerate(chunk.split(b"\n")):
        text = raw.split(b"#", 1)[0].decode("utf-8", errors="replace")
        tokens = text.split()
        if not tokens:
            continue
        where = f"{name} line {line0 + n + 1}"
        if not _finite_number(tokens[0]):
            raise ValueError(
                f"{where}: relevance label {shorten(tokens[0])!r} is not a finite number (every line starts with it)"
            )
        label = float(tokens[0])
        if label < 0:
            raise ValueError(f"{where}: relevance label {shorten(tokens[0])!r} is negative (relevance grades are >= 0)")
        if not fits_storage(label):
            raise ValueError(
                f"{where}: relevance label {shorten(tokens[0])!r} is beyond the float32 range of the labels "
                "(relevance grades are small integers, 0-4 in MSLR and Yahoo)"
            )
        features = tokens[1:]
        if with_qid:
            if len(tokens) < 2 or not tokens[1].startswith("qid:"):
                found = shorten(tokens[1]) if len(tokens) > 1 else "nothing"
                raise ValueError(f"{where}: expected 'qid:<query id>' as the second token, found {found!r}")
            if tokens[1] == "qid:":
                raise ValueError(f"{where}: token 'qid:' has an empty query id")
            qids.append(tokens[1][4:].encode())
            features = tokens[2:]
        indices, values, seen = [], [], set()
        for token in features:
            if token.startswith("qid:"):
                raise ValueError(f"{where}: '{shorten(token)}' is a second qid (the query id is the second token only)")
            index, colon, value = token.partition(":")
            if not (colon and _DIGITS.fullmatch(index) and _NUMBER.fullmatch(value)):
                raise ValueError(f"{where}: feature '{shorten(token)}' is not <index>:<value>")
            if not np.isfinite(float(value)):
                raise ValueError(f"{where}: feature '{shorten(token)}' has a value that is not finite")
            if not fits_storage(float(value)):
                raise ValueError(
                    f"{where}: feature '{shorten(token)}' has a value beyond the float32 range of the feature matrix "
                    "(|value| <= 3.402823e+38); rescale the feature or fix the value"
                )
            i = int(index)
            if i < 1:
                raise ValueError(f"{where}: feature '{shorten(token)}' has index {i} < 1 (indices are 1-based)")
            if upper is not None and i > upper:
                raise ValueError(f"{where}: feature '{shorten(token)}' has index {i}, beyond num_features={upper}")
            if i > MAX_INDEX:
                raise ValueError(f"{where}: feature '{shorten(token)}' has index {i}, larger than {MAX_INDEX}")
            if i in seen:
                raise ValueError(f"{where}: feature '{shorten(token)}' repeats index {i} within the line")
            seen.add(i)
            indices.append(i - 1)
            values.append(float(value))
        labels.append(label)
        lines.append(n)
        rows.append((indices, values))
    return labels, qids, lines, rows


def _dense(num_rows: int, counts: np.ndarray, indices: np.ndarray, values: np.ndarray, lines: np.ndarray,
           name: str) -> tuple[np.ndarray, int]:
    """Dense float32 rows of one chunk (``indices`` 0-based, ``lines`` 1-based per row) and the line of its
    largest index (0 without any); the size is checked before allocating (an error names the file and that
    line)."""
    width = int(indices.max()) + 1 if indices.size else 0
    line = 0
    if indices.size:
        k = int(np.argmax(indices))
        line = int(lines[int(np.searchsorted(np.cumsum(counts), k, side="right"))])
    x = allocate_dense(num_rows, width, np.float32, name, line, width)
    x[np.repeat(np.arange(num_rows), counts), indices] = values
    return x, line


def _parse_pieces(path: Path):
    """``(piece, lines before it)``: the file in whole-line pieces of about :data:`~fccolit.io.text.PARSE_BYTES`
    (the vectorized parser's temporaries stay small), read :data:`~fccolit.io.text.CHUNK_BYTES` at a time."""
    for chunk, line0 in line_chunks(path, "parsing"):
        for start, stop in line_ranges(chunk, text.PARSE_BYTES):
            yield chunk[start:stop], line0
            line0 += chunk.count(b"\n", start, stop)


def _parse(path: Path, num_features: int | None, with_qid: bool, _force_slow: bool = False) -> LetorFile:
    if not is_data_file(path):
        raise FileNotFoundError(f"learning-to-rank file not found: {path}")
    if num_features is not None and int(num_features) < 1:
        raise ValueError(f"num_features must be positive or None, got {num_features}")
    upper = None if num_features is None else int(num_features)
    name = str(path)
    labels, qids, lines, blocks = [], [], [], []
    widest_line, widest = 0, 0  # the line of the largest feature index so far, and that index (1-based)
    for chunk, line0 in _parse_pieces(path):
        part = None
        if not _force_slow:
            text = _COMMENT.sub(b"", chunk) if b"#" in chunk else chunk
            if with_qid:
                found = _QID.findall(text)
                text = _QID.sub(rb"\1", text)
            part = parse_chunk(text, 1, upper)
            if part is not None and with_qid and (len(found) != part.labels.size or b"qid:" in text):
                part = None
            if part is not None and (part.labels < 0).any():
                part = None
            if part is not None and not fits_storage(float(part.labels.max(initial=0.0))):
                part = None
            if part is not None and with_qid and any(not q for _, q in found):
                part = None
        if part is not None:
            labels.append(part.labels.astype(np.float32))
            lines.append(part.lines + line0 + 1)
            block, block_line = _dense(part.labels.size, part.counts, part.indices - 1, part.values, lines[-1], name)
            if with_qid:
                qids.extend(q for _, q in found)
        else:
            lab, qid, lin, rows = _slow_chunk(chunk, name, line0, upper, with_qid)
            counts = np.asarray([len(i) for i, _ in rows], dtype=np.int64)
            idx = np.asarray([j for i, _ in rows for j in i], dtype=np.int64)
            val = np.asarray([v for _, vs in rows for v in vs], dtype=np.float64)
            labels.append(np.asarray(lab, dtype=np.float32))
            lines.append(np.asarray(lin, dtype=np.int64) + line0 + 1)
            block, block_line = _dense(len(lab), counts, idx, val, lines[-1], name)
            qids.extend(qid)
        blocks.append(block)
        if block.shape[1] > widest:
            widest, widest_line = block.shape[1], block_line
    width = upper if upper is not None else max((b.shape[1] for b in blocks), default=0)
    total = sum(b.shape[0] for b in blocks)
    if width != widest:  # the width comes from num_features, not from an index of the file
        widest_line = 0
    features = allocate_dense(total, width, np.float32, name, widest_line, width)
    row = 0
    for b in blocks:
        features[row : row + b.shape[0], : b.shape[1]] = b
        row += b.shape[0]
    relevance = np.concatenate(labels) if labels else np.zeros(0, np.float32)
    line_numbers = np.concatenate(lines) if lines else np.zeros(0, np.int64)
    return LetorFile(relevance, _qid_array(qids) if with_qid else np.zeros(0, np.int64), features, line_numbers)


def _qid_array(qids: list[bytes]) -> np.ndarray:
    raw = np.asarray(qids, dtype=np.bytes_) if qids else np.zeros(0, dtype="S1")
    if raw.size and all(q.isdigit() for q in qids) and max(len(q) for q in qids) <= 18:
        return raw.astype(np.int64)
    return raw


def parse_letor(path: str | os.PathLike, num_features: int | None = None, *, _force_slow: bool = False) -> LetorFile:
    """Parse a LETOR / SVMlight ranking file with ``qid`` (format in the module docstring).

    Args:
        path: the file (e.g. ``MSLR-WEB30K/Fold1/train.txt``, ``set1.train.txt``, ``MQ2007/Fold1/train.txt``).
        num_features: F; an index beyond it is an error. None: the largest index in the file (pass it for Yahoo,
            whose splits use different subsets of the 700 features).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a malformed line, naming file, 1-based line and field (missing or empty ``qid``, a bad label or
            feature, an index beyond ``num_features`` or repeated within a line).
    """
    return _parse(Path(path), num_features, with_qid=True, _force_slow=_force_slow)


def read_query_sizes(path: str | os.PathLike) -> np.ndarray:
    """A LightGBM ``.query`` file: ``[Q]`` int64 group sizes, one positive integer per line (blank lines skipped).

    Raises:
        ValueError: naming the file and line of a value that is not a positive integer.
    """
    path = Path(path)
    if not is_data_file(path):
        raise FileNotFoundError(f"LightGBM query (group size) file not found: {path}")
    sizes = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            if not _DIGITS.fullmatch(text) or int(text) < 1:
                raise ValueError(f"{path} line {n}: group size {shorten(text)!r} is not a positive integer")
            sizes.append(int(text))
    return np.asarray(sizes, dtype=np.int64)


def read_lightgbm_ranking(
    data_path: str | os.PathLike, query_path: str | os.PathLike | None = None, num_features: int | None = None
) -> LetorFile:
    """LightGBM's ranking layout: a LIBSVM file (no ``qid``) and its ``.query`` group sizes.

    Args:
        data_path: e.g. ``rank.train``.
        query_path: the group sizes (default: ``<data_path>.query``).
        num_features: F (None: the largest index in the file).

    Returns:
        a :class:`LetorFile` whose ``qid`` is ``0, 0, …, 1, …``: the group number of each row.

    Raises:
        ValueError: the group sizes do not add up to the number of documents (naming both files).
    """
    data_path = Path(data_path)
    query_path = Path(query_path) if query_path is not None else data_path.with_name(data_path.name + ".query")
    sizes = read_query_sizes(query_path)
    parsed = parse_libsvm(data_path, num_features=num_features)
    if int(sizes.sum()) != parsed.labels.size:
        raise ValueError(
            f"{query_path}: the {sizes.size} group sizes add up to {int(sizes.sum())} documents, but {data_path} "
            f"holds {parsed.labels.size} (the .query file must list the size of every query, in order)"
        )
    if (parsed.labels < 0).any():
        bad = int(np.flatnonzero(parsed.labels < 0)[0])
        raise ValueError(
            f"{data_path} line {int(parsed.lines[bad])}: relevance label {parsed.labels[bad]:g} is negative"
        )
    with np.errstate(over="ignore"):
        too_large = ~np.isfinite(parsed.labels.astype(np.float32))
    if too_large.any():
        bad = int(np.flatnonzero(too_large)[0])
        raise ValueError(
            f"{data_path} line {int(parsed.lines[bad])}: relevance label {parsed.labels[bad]:g} is beyond the float32 "
            "range of the labels (relevance grades are small integers)"
        )
    qid = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    return LetorFile(parsed.labels.astype(np.float32), qid, parsed.to_dense(dtype=np.float32), parsed.lines)


def group_by_query(qid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group documents by query id, queries in order of first appearance, documents in file order within a query.

    Returns:
        ``order [N]`` (the document permutation), ``indptr [Q + 1]`` (offsets in the permuted order) and
        ``query_ids [Q]`` (the raw id of each query).
    """
    qid = np.asarray(qid)
    if qid.size == 0:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), qid[:0]
    uniq, first, inverse = np.unique(qid, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    code = rank[inverse.reshape(-1)]
    order = np.argsort(code, kind="stable")
    indptr = np.zeros(uniq.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(code, minlength=uniq.size), out=indptr[1:])
    return order.astype(np.int64), indptr, uniq[np.argsort(first, kind="stable")]
