"""Reader for the LIBSVM / SVMlight sparse text format (classification files, no query ids).

Format (one example per line)::

    <label> <index>:<value> <index>:<value> ... [# comment]

* ``label``: a number (``-1``/``+1``, ``0``/``1``, ``1``/``2``, ... for binary data sets);
* ``index``: a decimal integer, 1-based unless ``zero_based=True``; LIBSVM writes them in ascending order (not
  required here, but an index repeated within a line is an error);
* ``value``: a finite decimal number within float32's range (|value| <= 3.4e38: the feature matrices are
  float32); features not listed are 0;
* tokens are separated by spaces or tabs; ``#`` starts a comment that runs to the end of the line; blank lines
  are skipped; CRLF line endings are fine; ``.gz``, ``.bz2`` and ``.xz`` files are decompressed on the fly.

The LIBSVM binary-classification data sets (a9a, w8a, ijcnn1, mushrooms, phishing, covtype, ...) are listed at
https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html.

Ranking files (``<rel> qid:<q> ...``, LETOR / MSLR / Yahoo) are rejected with an error: they need a loader that
keeps the query groups.

Speed: the file is parsed in chunks of whole lines with numpy (token boundaries, ``:`` checks and decimal
conversion run over the raw bytes, exactly as ``float()`` rounds). A chunk that fails any check is re-read by a
line-by-line Python parser, which produces the error message (file, 1-based line, offending field).

Why not scikit-learn's ``load_svmlight_file`` (measured by ``benchmarks/sparse_libsvm.py``, timings and peak memory in
``benchmarks/results/sparse_libsvm.md``): on a9a, a9a.t and a generated news20.binary-shaped file both return
identical CSR arrays and labels in about the same time, so speed is no reason either way; sklearn needs less peak
memory (our 4 MiB chunks cost temporaries). We keep this reader because scikit-learn (with SciPy) would be a new
runtime dependency for no gain in speed, and for what it does not do: its errors name neither the file nor the line
(``could not convert string to float: b'abc'`` against ``a9a line 2: feature '3:abc' is not <index>:<value>``); it
accepts values beyond float32 (``1e300``) that become ``inf`` in the float32 feature matrix; it reads a LETOR file
with ``qid:`` tokens as classification data, dropping the query groups silently; it guesses 0- or 1-based indices from
the file (``0:1`` here is an error naming the ``zero_based`` option); and it refuses rows whose indices are not in
ascending order, which LIBSVM itself does not require.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fccolit.io import text
from fccolit.io.text import line_ranges, progress_bar

__all__ = [
    "LibSVMFile", "ParsedChunk", "allocate_dense", "dense_size_error", "fits_storage", "parse_chunk", "parse_libsvm",
    "read_libsvm", "MAX_INDEX",
]

#: Largest feature index accepted (a dense matrix wider than this could not be allocated anyway).
MAX_INDEX = 2**31 - 2

_WHITESPACE = b" \t\r\v\f"  # within a line; bytes.split() splits on exactly these plus \n
_COMMENT = re.compile(rb"#[^\n]*")
_INT = re.compile(rb"[0-9]+")
_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _table(chars: bytes) -> np.ndarray:
    t = np.zeros(256, dtype=bool)
    t[np.frombuffer(chars, dtype=np.uint8)] = True
    return t


_IS_DIGIT = _table(b"0123456789")
# Bytes the fast path handles; anything else (letters, '_', ',', non-ASCII, ...) sends the chunk to the slow path.
_FAST_BYTES = _table(b"0123456789+-.eE:" + _WHITESPACE + b"\n")
_COLON_TO_SPACE = bytes.maketrans(b":", b" ")


class LibSVMFile(NamedTuple):
    """A parsed LIBSVM file (:func:`parse_libsvm`) in CSR form: row ``i`` is ``indices[indptr[i]:indptr[i+1]]``.

    Args:
        labels: ``[N]`` float64, one per non-blank line, in file order.
        indptr: ``[N + 1]`` int64 row offsets into ``indices`` / ``values``.
        indices: ``[nnz]`` int64 **0-based** column of each stored value.
        values: ``[nnz]`` float64.
        num_features: D (``num_features`` if given, else the largest column seen + 1).
        lines: ``[N]`` int64 1-based line number of each row in the file (blank and comment lines are skipped).
        path: the file it was read from (named by the errors of :meth:`to_dense`).

    Raises:
        Nothing at construction (a plain record). :meth:`to_dense`: ``ValueError`` for a ``num_features``
        narrower than the file's, ``MemoryError`` when the dense matrix would not fit in memory.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fccolit.io.libsvm import parse_libsvm
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "a9a"
        ...     _ = path.write_text("+1 1:0.5 3:1\\n-1 2:2 # a comment\\n")
        ...     parsed = parse_libsvm(path)
        >>> parsed.labels.tolist(), parsed.indptr.tolist(), parsed.indices.tolist(), parsed.num_features
        ([1.0, -1.0], [0, 2, 3], [0, 2, 1], 3)
        >>> parsed.to_dense(num_features=4).tolist()
        [[0.5, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
    """

    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    num_features: int
    lines: np.ndarray
    path: str = "<LIBSVM data>"

    def widest_feature(self) -> tuple[int, int]:
        """``(1-based line, 0-based column)`` of the largest feature index of the file ((0, −1) without any)."""
        if self.indices.size == 0:
            return 0, -1
        k = int(np.argmax(self.indices))
        row = int(np.searchsorted(self.indptr, k, side="right")) - 1
        return int(self.lines[row]), int(self.indices[k])

    def to_dense(self, num_features: int | None = None, dtype: np.dtype = np.float32) -> np.ndarray:
        """``[N, D]`` dense matrix (``D = num_features`` or :attr:`num_features`; wider pads with zero columns).

        Raises:
            MemoryError: the matrix would not fit in this machine's memory (checked before allocating); the
                message names the file, the line of the largest feature index and what to do.
        """
        width = self.num_features if num_features is None else int(num_features)
        if width < self.num_features:
            raise ValueError(f"num_features={width} is narrower than the file's {self.num_features} features")
        line, column = self.widest_feature()
        if column + 1 != width:  # the width comes from num_features, not from an index of the file
            line, column = 0, width - 1
        x = allocate_dense(self.labels.size, width, dtype, self.path, line, column + 1)
        rows = np.repeat(np.arange(self.labels.size), np.diff(self.indptr))
        x[rows, self.indices] = self.values
        return x


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


def dense_size_error(
    num_rows: int, width: int, dtype: np.dtype, path: str | os.PathLike, line: int, index: int, reason: str = ""
) -> MemoryError | None:
    """The error for a dense ``[num_rows, width]`` feature matrix read from ``path`` that is larger than this
    machine's physical memory (None when it fits), or, with ``reason``, for one whose allocation failed.

    Args:
        num_rows, width, dtype: the matrix.
        path: the file whose feature index set the width.
        line, index: the 1-based line and the feature index (as written in the file) that set the width; 0 when
            the width was set by ``num_features`` instead.
        reason: why the allocation failed (default: compare with the physical memory).
    """
    size = int(num_rows) * int(width) * np.dtype(dtype).itemsize
    if not reason:
        memory = physical_memory()
        if memory is None or size <= memory:
            return None
        reason = f"more than this machine's {_bytes_text(memory)} of memory"
    where = f"{path} line {line}: feature index {index}" if line > 0 else f"{path}: num_features={width}"
    return MemoryError(
        f"{where} makes the dense feature matrix {num_rows:,} × {width:,} {np.dtype(dtype).name} = "
        f"{_bytes_text(size)}, {reason}. If that index is a typo, fix the line; if the data really has "
        f"{width:,} features, read it sparse (LibSVMDataModule(layout='sparse'); fccolit.io.parse_libsvm returns "
        "CSR arrays), or pass num_features to reject the indices beyond it"
    )


def allocate_dense(
    num_rows: int, width: int, dtype: np.dtype, path: str | os.PathLike, line: int, index: int
) -> np.ndarray:
    """``np.zeros((num_rows, width), dtype)`` for a dense feature matrix read from ``path``, after checking that it
    fits in physical memory (arguments as :func:`dense_size_error`).

    Raises:
        MemoryError: the matrix is larger than this machine's physical memory, or its allocation fails; the
            message names the file, the line and the feature index, and says what to do.
    """
    error = dense_size_error(num_rows, width, dtype, path, line, index)
    if error is not None:
        raise error
    try:
        return np.zeros((int(num_rows), int(width)), dtype=dtype)
    except MemoryError:
        raise dense_size_error(num_rows, width, dtype, path, line, index, "which cannot be allocated") from None


def _read_bytes(path: Path) -> bytes:
    openers = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
    opener = openers.get(path.suffix.lower(), open)
    with opener(path, "rb") as f:
        return f.read()


class ParsedChunk(NamedTuple):
    """LIBSVM lines parsed by :func:`parse_chunk` (sparse rows, as written: indices not yet shifted to 0-based).

    Args:
        labels: ``[n]`` float64, one per non-blank line.
        lines: ``[n]`` int64, 0-based line within the chunk.
        counts: ``[n]`` int64 features per row.
        indices: ``[nnz]`` int64 as written in the file.
        values: ``[nnz]`` float64.

    Raises:
        Nothing (a plain record; :func:`parse_chunk` returns None instead of one when a line looks off).

    Example:
        >>> from fccolit.io.libsvm import parse_chunk
        >>> chunk = parse_chunk(b"1 1:0.5 4:2\\n0 2:1\\n", lower=1, upper=None)
        >>> chunk.labels.tolist(), chunk.lines.tolist(), chunk.counts.tolist(), chunk.indices.tolist()
        ([1.0, 0.0], [0, 1], [2, 1], [1, 4, 2])
        >>> parse_chunk(b"1 1:abc\\n", lower=1, upper=None) is None  # left to the line-by-line parser
        True
    """

    labels: np.ndarray
    lines: np.ndarray
    counts: np.ndarray
    indices: np.ndarray
    values: np.ndarray


_POW10_INT = 10 ** np.arange(19, dtype=np.int64)
_POW10_FLOAT = 10.0 ** np.arange(23)


def _decimals(data: bytes, buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Vectorised ``float(data[start[j]:end[j]])`` for non-empty, disjoint, ordered spans of ``[0-9+-.eE]`` bytes.

    Plain decimals (``[+-]digits[.digits]``) with at most 15 significant digits and 22 decimals become
    ``mantissa / 10**decimals``: one correctly rounded division of exact numbers, so the result equals
    ``float()``'s. Spans with an exponent or more digits go through ``float()`` one by one. None: some span is
    not a number.
    """
    count = start.size
    if count == 0:
        return np.zeros(0)
    digit = (buf - np.uint8(ord("0"))) < 10
    digits_before = np.zeros(buf.size + 1, dtype=np.int32)  # digits_before[i] = digits in buf[:i]
    np.cumsum(digit, out=digits_before[1:])
    num_digits = digits_before[end] - digits_before[start]
    if (num_digits == 0).any():
        return None
    is_start = np.zeros(buf.size, dtype=bool)
    is_start[start] = True
    span_of = np.cumsum(is_start, dtype=np.int32) - 1  # span of each byte (between spans: the previous one)
    dots = np.flatnonzero(buf == ord("."))
    signs = np.flatnonzero((buf == ord("+")) | (buf == ord("-")))
    exponent = np.zeros(count, dtype=bool)
    exponent[span_of[np.flatnonzero((buf == ord("e")) | (buf == ord("E")))]] = True
    if (np.bincount(span_of[dots], minlength=count) > 1)[~exponent].any():
        return None
    if (~is_start[signs] & ~exponent[span_of[signs]]).any():  # a sign that does not open its span
        return None
    dot_at = np.full(count, -1, dtype=np.int64)
    dot_at[span_of[dots]] = dots
    decimals = np.where(dot_at >= 0, digits_before[end] - digits_before[np.maximum(dot_at, 0)], 0)
    slow = exponent | (num_digits > 15) | (decimals > 22)

    where = np.flatnonzero(digit)
    owner = span_of[where]
    right = np.minimum(digits_before[end[owner]] - digits_before[where] - 1, 18)  # digits after this one
    contribution = (buf[where] - ord("0")).astype(np.int64) * _POW10_INT[right]
    mantissa = np.add.reduceat(contribution, digits_before[start])
    values = mantissa.astype(np.float64) / _POW10_FLOAT[np.minimum(decimals, 22)]
    values[buf[start] == ord("-")] *= -1.0
    for j in np.flatnonzero(slow):
        token = data[start[j] : end[j]]
        if not _NUMBER.fullmatch(token):
            return None
        values[j] = float(token)
    return values


def parse_chunk(data: bytes, lower: int, upper: int | None) -> ParsedChunk | None:
    """Vectorised parse of whole LIBSVM lines (``data`` ends with a newline), feature indices checked to lie in
    ``[lower, upper]`` (``upper`` None: :data:`MAX_INDEX`).

    Returns None when anything looks off: then the line-by-line parser re-reads the chunk and its error names the
    line and the field (also used by :mod:`fccolit.io.letor` once the ``qid`` tokens are cut out).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    empty = np.zeros(0, dtype=np.int64)
    if not np.take(_FAST_BYTES, buf).all():
        return None
    space = buf <= ord(" ")  # the only bytes <= 32 left are the whitespace ones
    word = ~space
    is_start = word.copy()
    is_start[1:] &= space[:-1]
    is_end = word.copy()
    is_end[:-1] &= space[1:]
    starts = np.flatnonzero(is_start)
    ends = np.flatnonzero(is_end) + 1
    if starts.size == 0:
        return ParsedChunk(np.zeros(0), empty, empty, empty, np.zeros(0))
    token_line = np.cumsum(buf == ord("\n"), dtype=np.int32)[starts]  # 0-based line in the chunk
    first = np.ones(starts.size, dtype=bool)
    first[1:] = token_line[1:] != token_line[:-1]

    # Structure: the label has no ':'; every other token exactly one, with non-empty digit-only index and value.
    colons = np.flatnonzero(buf == ord(":"))
    colon_token = np.cumsum(is_start, dtype=np.int32)[colons] - 1
    per_token = np.bincount(colon_token, minlength=starts.size)
    feature = ~first
    if (per_token[first] != 0).any() or (per_token[feature] != 1).any():
        return None
    f_starts, f_ends = starts[feature], ends[feature]  # colons[k] lies in feature token k (one each, in order)
    if (colons == f_starts).any() or (colons + 1 == f_ends).any():
        return None
    in_index = np.zeros(buf.size, dtype=np.int8)  # +1 at each index's first byte, −1 at its colon
    in_index[f_starts] = 1
    in_index[colons] = -1
    in_index = np.cumsum(in_index, dtype=np.int8).view(bool)
    if not np.take(_IS_DIGIT, buf[in_index]).all():
        return None

    # One number per label, two per feature (index, value), in file order.
    position = np.arange(starts.size) + np.cumsum(feature) - feature  # first number of each token
    span_start = np.empty(starts.size + f_starts.size, dtype=np.int64)
    span_end = np.empty_like(span_start)
    span_start[position] = starts
    span_end[position[first]] = ends[first]
    span_end[position[feature]] = colons
    span_start[position[feature] + 1] = colons + 1
    span_end[position[feature] + 1] = f_ends
    numbers = _decimals(data, buf, span_start, span_end)
    if numbers is None:
        return None
    labels = numbers[position[first]]
    indices_f = numbers[position[feature]]
    values = numbers[position[feature] + 1]
    if not (np.isfinite(labels).all() and np.isfinite(values).all()):
        return None
    with np.errstate(over="ignore"):
        if values.size and not np.isfinite(values.astype(np.float32)).all():  # finite in float64, inf in float32
            return None
    if indices_f.size and (indices_f.min() < lower or indices_f.max() > (MAX_INDEX if upper is None else upper)):
        return None
    indices = indices_f.astype(np.int64)
    row = np.cumsum(first)[feature] - 1
    counts = np.bincount(row, minlength=int(first.sum())).astype(np.int64)
    if indices.size > 1:
        same_row = row[1:] == row[:-1]
        unsorted = same_row & (indices[1:] <= indices[:-1])
        if unsorted.any():  # rare: rows not in ascending order; check those for a repeated index
            suspects = np.isin(row, row[1:][unsorted])
            key = row[suspects] * (MAX_INDEX + 2) + indices[suspects]
            if np.unique(key).size != key.size:
                return None
    return ParsedChunk(labels, token_line[first].astype(np.int64), counts, indices, values)


#: Storage dtype of the feature values (the dense matrices of :meth:`LibSVMFile.to_dense` and the caches).
STORAGE_DTYPE = np.float32
_STORAGE_MAX = float(np.finfo(STORAGE_DTYPE).max)


#: the smallest magnitude a float64 rounds to ±inf in float32: halfway between float32's largest value
#: (2^128 − 2^104 ≈ 3.4028235e38) and 2^128 (round half to even goes up to 2^128, which is inf)
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def fits_storage(value: float) -> bool:
    """True when ``value`` stays finite once stored as float32 (|value| up to about 3.4e38). Plain float
    comparisons (a numpy conversion per value made parsing UCI Adult three times slower)."""
    return math.isfinite(value) and abs(value) < FLOAT32_OVERFLOW


def _finite(token: bytes) -> bool:
    """False for a spelling ``float()`` reads as nan / ±inf (``nan``, ``inf``, ``1e999``); True otherwise."""
    try:
        return bool(np.isfinite(float(token)))
    except ValueError:
        return True


def _slow_chunk(data: bytes, lower: int, upper: int | None, zero_based: bool, name: str, line0: int) -> ParsedChunk:
    """Line-by-line parse with precise errors; the specification the fast path must agree with."""
    labels, lines, counts, indices, values = [], [], [], [], []
    base = "0-based" if zero_based else "1-based; pass zero_based=True for a 0-based file"
    for n, line in enumerate(data.split(b"\n")):
        tokens = line.split()
        if not tokens:
            continue
        where = f"{name} line {line0 + n + 1}"

        def text(token: bytes) -> str:
            return token.decode("utf-8", errors="replace")

        if tokens[0].startswith(b"qid:") or any(t.startswith(b"qid:") for t in tokens[1:]):
            qid = next(t for t in tokens if t.startswith(b"qid:"))
            raise ValueError(
                f"{where}: found '{text(qid)}': this is a ranking (LETOR / SVMlight with query ids) file, not a "
                "LIBSVM classification file; read it with a ranking loader that keeps the query groups"
            )
        label = tokens[0]
        if not (_NUMBER.fullmatch(label) and _finite(label)):
            raise ValueError(
                f"{where}: label '{text(label)}' is not a finite number (every line starts with its label)"
            )
        seen: set[int] = set()
        for token in tokens[1:]:
            index, colon, value = token.partition(b":")
            if colon and _INT.fullmatch(index) and not _finite(value):
                raise ValueError(f"{where}: feature '{text(token)}' has a value that is not finite")
            if not (colon and _INT.fullmatch(index) and _NUMBER.fullmatch(value)):
                raise ValueError(f"{where}: feature '{text(token)}' is not <index>:<value>")
            if not fits_storage(float(value)):
                raise ValueError(
                    f"{where}: feature '{text(token)}' has a value beyond the float32 range of the feature matrix "
                    f"(|value| <= {_STORAGE_MAX:.7g}); rescale the feature or fix the value"
                )
            i = int(index)
            if i < lower:
                raise ValueError(f"{where}: feature '{text(token)}' has index {i} < {lower} (indices are {base})")
            if upper is not None and i > upper:
                raise ValueError(
                    f"{where}: feature '{text(token)}' has index {i}, beyond num_features={upper + 1 - lower}"
                )
            if i > MAX_INDEX:
                raise ValueError(f"{where}: feature '{text(token)}' has index {i}, larger than {MAX_INDEX}")
            if i in seen:
                raise ValueError(f"{where}: feature '{text(token)}' repeats index {i} within the line")
            seen.add(i)
            indices.append(i)
            values.append(float(value))
        labels.append(float(label))
        lines.append(n)
        counts.append(len(tokens) - 1)
    as64 = lambda a, t: np.asarray(a, dtype=t).reshape(-1)  # noqa: E731
    return ParsedChunk(as64(labels, np.float64), as64(lines, np.int64), as64(counts, np.int64),
                  as64(indices, np.int64), as64(values, np.float64))


def parse_libsvm(
    path: str | os.PathLike, num_features: int | None = None, zero_based: bool = False, *, _force_slow: bool = False
) -> LibSVMFile:
    """Parse a LIBSVM file into CSR arrays (see :class:`LibSVMFile`); the sparse sibling of :func:`read_libsvm`.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a malformed line; the message names the file, the 1-based line and the offending field, e.g.
            ``a9a line 17: feature '3:abc' is not <index>:<value>`` or ``a9a line 3: feature '3:1e300' has a value
            beyond the float32 range of the feature matrix``.
    """
    path = Path(path)
    if num_features is not None and int(num_features) < 0:
        raise ValueError(f"num_features must be >= 0, got {num_features}")
    lower = 0 if zero_based else 1
    upper = None if num_features is None else int(num_features) - 1 + lower  # largest index allowed
    data = _read_bytes(path)
    name = str(path)
    parts: list[ParsedChunk] = []
    line0 = 0
    bar = progress_bar(path, len(data), "parsing")  # a bar for files of 32 MiB and more
    for start, stop in line_ranges(data, text.PARSE_BYTES):
        if bar is not None:
            bar.update(stop - start)
        chunk = data[start:stop]
        if b"#" in chunk:
            chunk = _COMMENT.sub(b"", chunk)
        part = None if _force_slow else parse_chunk(chunk, lower, upper)
        if part is None:
            part = _slow_chunk(chunk, lower, upper, zero_based, name, line0)
        parts.append(part._replace(lines=part.lines + line0 + 1))
        line0 += chunk.count(b"\n")
    if bar is not None:
        bar.close()
    cat = lambda field, dtype: (  # noqa: E731
        np.concatenate([getattr(p, field) for p in parts]) if parts else np.zeros(0, dtype=dtype)
    )
    labels, lines, counts = cat("labels", np.float64), cat("lines", np.int64), cat("counts", np.int64)
    indices, values = cat("indices", np.int64) - lower, cat("values", np.float64)
    indptr = np.zeros(labels.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    width = int(indices.max()) + 1 if num_features is None and indices.size else int(num_features or 0)
    return LibSVMFile(labels, indptr, indices, values, width, lines, name)


def read_libsvm(
    path: str | os.PathLike, num_features: int | None = None, zero_based: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Read a LIBSVM classification file into dense arrays.

    Args:
        path: the file (format in the module docstring; ``.gz`` / ``.bz2`` / ``.xz`` are decompressed).
        num_features: D; an index beyond it is an error. None: the largest index seen (a separate test file may
            then come out narrower, e.g. a9a.t has 122 features against a9a's 123: pass D explicitly).
        zero_based: the file's indices start at 0 (LIBSVM's own files are 1-based).

    Returns:
        ``x`` ``[N, D]`` float32 (dense; absent features are 0) and ``labels`` ``[N]`` float64, one row per
        non-blank line in file order.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a malformed line, naming file, 1-based line number and field, e.g.
            ``a9a line 17: feature '3:abc' is not <index>:<value>``; a ``qid:`` token (a ranking file).
    """
    parsed = parse_libsvm(path, num_features=num_features, zero_based=zero_based)
    return parsed.to_dense(), parsed.labels
