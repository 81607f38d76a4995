"""Readers of explicit-feedback rating files: every MovieLens release and the Netflix Prize.

MovieLens (https://grouplens.org/datasets/movielens/), one rating per line:

=================  ==========================================  =========================================
file               line format                                  releases
=================  ==========================================  =========================================
``u.data``         ``user id \\t item id \\t rating \\t timestamp``  ml-100k (no header; integer ratings 1–5)
``ratings.dat``    ``UserID::MovieID::Rating::Timestamp``       ml-1m (integer ratings), ml-10m
                                                                (``ml-10M100K/``, half stars)
``ratings.csv``    header ``userId,movieId,rating,timestamp``   ml-20m, ml-25m, ml-32m, ml-latest,
                   then ``1,2,3.5,1112486027``                  ml-latest-small (half stars 0.5–5.0)
=================  ==========================================  =========================================

Timestamps are Unix seconds (UTC). Ids are positive integers with gaps; the DataModules remap them.

Netflix Prize (the Kaggle repackaging ``combined_data_1.txt`` … ``combined_data_4.txt``, or the original
``training_set/mv_0000001.txt`` … ``mv_0017770.txt``): blocks of one header line ``<MovieID>:`` followed by lines
``<CustomerID>,<Rating>,<YYYY-MM-DD>`` (ratings are integers 1–5, dates have day resolution). ``probe.txt`` has
the same blocks with ``<CustomerID>`` lines only (no rating, no date).

Both readers handle CRLF line endings, a missing final newline and blank lines, parse in chunks of whole lines
with pandas' C tokenizer (hundreds of MB/s) and show a tqdm progress bar for files over 32 MiB. A chunk that the
fast path rejects is re-read line by line by a Python parser, the specification, which raises a ``ValueError``
naming the file, the 1-based line and the offending field, e.g.
``ratings.csv line 17: field 'rating' = 'abc' is not a number``.

Why not a plain ``pandas.read_csv``: it is the fast path already; what this module adds is the check of every field
(ids non-negative integers, ratings finite, within the scale, within float32), the line-numbered error where pandas
says ``could not convert string to float`` (or silently reads a fifth column as an index), the ``::`` separator of
ml-1m / ml-10m without the slow Python engine, and the Netflix block format, which no CSV reader parses. The checks
cost a few times a bare ``read_csv`` (``benchmarks/handwritten.py``, timings in
``benchmarks/results/handwritten.md``), once per raw file: the DataModules cache the arrays.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from fccolit.io.text import lf_line_ends, line_chunks, shorten
from fccolit.io.paths import is_data_file

__all__ = [
    "MOVIELENS_FORMATS",
    "NETFLIX_SCALE",
    "Ratings",
    "read_movielens_ratings",
    "read_netflix_ratings",
    "read_netflix_probe",
]

#: file name → (field separator, header line or None)
MOVIELENS_FORMATS: dict[str, tuple[bytes, bytes | None]] = {
    "u.data": (b"\t", None),
    "ratings.dat": (b"::", None),
    "ratings.csv": (b",", b"userId,movieId,rating,timestamp"),
}
_FIELDS = ("user", "item", "rating", "timestamp")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: The Netflix Prize's rating scale (integer stars).
NETFLIX_SCALE = (1.0, 5.0)
_INT = re.compile(r"[+]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Ratings(NamedTuple):
    """Parsed ratings, one entry per rating line, in file order (the order breaks ties in time).

    Returned by :func:`read_movielens_ratings` and :func:`read_netflix_ratings`; ``len()`` is the number of
    ratings N.

    Args:
        user: ``[N]`` int64 raw user ids as in the file.
        item: ``[N]`` int64 raw item (movie) ids.
        rating: ``[N]`` float32 ratings.
        time: ``[N]`` int64: Unix seconds (MovieLens) or days since 1970-01-01 (Netflix).

    Raises:
        Nothing itself (a plain record); the readers raise ``FileNotFoundError`` for a missing file and
        ``ValueError`` naming the file, line and field for a malformed line.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fccolit.io.ratings import read_movielens_ratings
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "ratings.csv"
        ...     _ = path.write_text("userId,movieId,rating,timestamp\\n1,31,2.5,1260759144\\n7,1029,3.0,1260759179\\n")
        ...     ratings = read_movielens_ratings(path)
        >>> len(ratings), ratings.user.tolist(), ratings.item.tolist(), ratings.rating.tolist()
        (2, [1, 7], [31, 1029], [2.5, 3.0])
        >>> ratings.time.tolist()
        [1260759144, 1260759179]
    """

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    time: np.ndarray

    def __len__(self) -> int:  # type: ignore[override]
        return int(self.user.shape[0])


def _concat(parts: list[Ratings]) -> Ratings:
    if not parts:
        return Ratings(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64))
    return Ratings(*(np.concatenate([getattr(p, f) for p in parts]) for f in Ratings._fields))


# ------------------------------------------------------------------------------------------------ MovieLens
def _scale_error(where: str, field: str, value: str, scale: tuple[float, float]) -> ValueError:
    return ValueError(
        f"{where}: field '{field}' = {shorten(value)!r} is outside the rating scale [{scale[0]:g}, {scale[1]:g}] "
        "(a rating far outside it would overflow the gain 2^y - 1; fix the line, or pass the data's own scale "
        "as rating_scale)"
    )


def _out_of_scale(rating: np.ndarray, scale: tuple[float, float] | None) -> bool:
    return scale is not None and bool(((rating < scale[0]) | (rating > scale[1])).any())


def _movielens_slow(
    chunk: bytes, sep: bytes, name: str, line0: int, scale: tuple[float, float] | None = None
) -> Ratings:
    """Line-by-line parse with precise errors: the specification the fast path must agree with."""
    cols: list[list] = [[], [], [], []]
    sep_text = sep.decode()
    for n, raw in enumerate(chunk.split(b"\n")):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        where = f"{name} line {line0 + n + 1}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{where}: the line is not UTF-8 text: {shorten(line)!r}") from None
        fields = [f.strip().strip('"') for f in text.split(sep_text)]
        if len(fields) != 4:
            hint = " (is the file truncated?)" if len(fields) < 4 else ""
            raise ValueError(
                f"{where}: expected 4 fields separated by {sep_text!r} (user, item, rating, timestamp), found "
                f"{len(fields)}: {shorten(text)!r}{hint}"
            )
        for k, (field, value) in enumerate(zip(_FIELDS, fields)):
            if field == "rating":
                if not _FLOAT.fullmatch(value):
                    raise ValueError(f"{where}: field 'rating' = {shorten(value)!r} is not a number")
                number = float(value)
                if not np.isfinite(number) or number < 0:
                    raise ValueError(f"{where}: field 'rating' = {shorten(value)!r} must be a finite number >= 0")
                if scale is not None and not scale[0] <= number <= scale[1]:
                    raise _scale_error(where, "rating", value, scale)
                if number > _FLOAT32_MAX:
                    raise ValueError(f"{where}: field 'rating' = {shorten(value)!r} is beyond the float32 range of the ratings")
                cols[k].append(number)
            else:
                if not _INT.fullmatch(value):
                    raise ValueError(f"{where}: field '{field}' = {shorten(value)!r} is not a non-negative integer")
                number = int(value)
                if number >= 2**63:
                    raise ValueError(f"{where}: field '{field}' = {shorten(value)!r} does not fit in 64 bits")
                cols[k].append(number)
    return Ratings(
        np.asarray(cols[0], dtype=np.int64),
        np.asarray(cols[1], dtype=np.int64),
        np.asarray(cols[2], dtype=np.float32),
        np.asarray(cols[3], dtype=np.int64),
    )


_ML_DTYPES = {"user": np.int64, "item": np.int64, "rating": np.float64, "timestamp": np.int64}


def _movielens_fast(chunk: bytes, sep: bytes, scale: tuple[float, float] | None = None) -> Ratings | None:
    """pandas' C tokenizer on a chunk; None when anything is off (the slow path then explains what)."""
    if sep == b"::":
        if b"\t" in chunk:
            return None
        chunk, sep = chunk.replace(b"::", b"\t"), b"\t"
    try:
        frame = pd.read_csv(
            io.BytesIO(chunk),
            sep=sep.decode(),
            header=None,
            names=list(_FIELDS),
            dtype=_ML_DTYPES,
            engine="c",
            skip_blank_lines=True,
            quoting=3,  # csv.QUOTE_NONE: a quote is an error here, the slow path decides
            na_filter=True,
        )
    except (ValueError, pd.errors.ParserError, OverflowError):
        return None
    if chunk.count(sep) != 3 * len(frame):  # pandas would silently turn a 5th column into an index
        return None
    rating = frame["rating"].to_numpy()
    if not np.isfinite(rating).all() or (rating < 0).any() or _out_of_scale(rating, scale):
        return None
    if rating.size and rating.max() > _FLOAT32_MAX:
        return None
    user, item, ts = (frame[c].to_numpy() for c in ("user", "item", "timestamp"))
    if (user < 0).any() or (item < 0).any() or (ts < 0).any():
        return None
    return Ratings(user.astype(np.int64), item.astype(np.int64), rating.astype(np.float32), ts.astype(np.int64))


def read_movielens_ratings(
    path: str | os.PathLike,
    fmt: str | None = None,
    *,
    rating_scale: tuple[float, float] | None = None,
    _force_slow: bool = False,
) -> Ratings:
    """Parse a MovieLens ratings file (any release; formats in the module docstring).

    Args:
        path: ``u.data``, ``ratings.dat`` or ``ratings.csv``.
        fmt: one of :data:`MOVIELENS_FORMATS` (default: the file's name).
        rating_scale: ``(lowest, highest)``: a rating outside it is an error naming the file, line and value
            (None: any finite rating >= 0). MovieLens publishes 0.5-5 stars (1-5 in ml-100k and ml-1m).

    Returns:
        :class:`Ratings` in file order (time = Unix seconds).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: unknown format; a missing / wrong header (``ratings.csv``); a rating outside ``rating_scale``;
            a malformed line, naming the file,
            the 1-based line and the field, e.g. ``ratings.csv line 5: field 'item' = '1.5' is not a non-negative
            integer`` or ``ratings.dat line 9: expected 4 fields ... found 2: '1::2' (is the file truncated?)``.
    """
    path = Path(path)
    fmt = fmt or path.name
    if fmt not in MOVIELENS_FORMATS:
        raise ValueError(f"{path}: unknown MovieLens ratings format {fmt!r}; expected one of {list(MOVIELENS_FORMATS)}")
    if not is_data_file(path):
        raise FileNotFoundError(f"MovieLens ratings file not found: {path}")
    sep, header = MOVIELENS_FORMATS[fmt]
    start, header_lines = 0, 0
    if header is not None:
        with open(path, "rb") as f:
            first = f.readline()
        text = first.rstrip(b"\r\n").lstrip(b"\xef\xbb\xbf")
        if text.replace(b'"', b"").replace(b" ", b"") != header:
            raise ValueError(
                f"{path} line 1: expected the header {header.decode()!r}, found {shorten(text)!r} "
                f"(a {fmt} file starts with that header line)"
            )
        start, header_lines = len(first), 1
    name = str(path)
    parts = []
    for chunk, line0 in line_chunks(path, "parsing", start):
        part = None if _force_slow else _movielens_fast(lf_line_ends(chunk), sep, rating_scale)
        if part is None:
            part = _movielens_slow(chunk, sep, name, line0 + header_lines, rating_scale)
        parts.append(part)
    return _concat(parts)


# ------------------------------------------------------------------------------------------------ Netflix
def _days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray | None:
    """Days since 1970-01-01 of valid calendar dates; None if some date is invalid."""
    if ((month < 1) | (month > 12) | (day < 1) | (year < 1000) | (year > 9999)).any():
        return None
    months = ((year - 1970) * 12 + (month - 1)).astype("datetime64[M]")
    first = months.astype("datetime64[D]")
    length = (months + 1).astype("datetime64[D]") - first
    if (day > length.astype(np.int64)).any():
        return None
    return first.astype(np.int64) + (day - 1)


def _netflix_date(text: str) -> int | None:
    m = re.fullmatch(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})", text)
    if not m:
        return None
    days = _days(*(np.asarray([int(g)], dtype=np.int64) for g in m.groups()))
    return None if days is None else int(days[0])


def _netflix_slow(
    chunk: bytes, movie: int | None, probe: bool, name: str, line0: int, scale: tuple[float, float] | None = None
):
    """Line-by-line parse with precise errors. Returns (columns, movie at the end of the chunk)."""
    users, movies, ratings, times = [], [], [], []
    expected = "'<CustomerID>'" if probe else "'<CustomerID>,<Rating>,<YYYY-MM-DD>'"
    for n, raw in enumerate(chunk.split(b"\n")):
        line = raw.strip()
        if not line:
            continue
        where = f"{name} line {line0 + n + 1}"
        text = line.decode("utf-8", errors="replace")
        if text.endswith(":"):
            if not _INT.fullmatch(text[:-1].strip()):
                raise ValueError(f"{where}: movie header {shorten(text)!r} is not '<MovieID>:' with an integer id")
            movie = int(text[:-1])
            continue
        if movie is None:
            raise ValueError(
                f"{where}: rating line {shorten(text)!r} before any '<MovieID>:' header (a block starts with its "
                "movie's header line)"
            )
        fields = [f.strip() for f in text.split(",")]
        if len(fields) != (1 if probe else 3):
            hint = " (is the file truncated?)" if len(fields) < (1 if probe else 3) else ""
            raise ValueError(f"{where}: expected {expected}, found {shorten(text)!r}{hint}")
        if not _INT.fullmatch(fields[0]):
            raise ValueError(f"{where}: field 'CustomerID' = {shorten(fields[0])!r} is not a non-negative integer")
        users.append(int(fields[0]))
        movies.append(movie)
        if not probe:
            if not _INT.fullmatch(fields[1]):
                raise ValueError(
                    f"{where}: field 'Rating' = {shorten(fields[1])!r} is not an integer (Netflix ratings are 1-5)"
                )
            if scale is not None and not scale[0] <= int(fields[1]) <= scale[1]:
                raise _scale_error(where, "Rating", fields[1], scale)
            if abs(int(fields[1])) > _FLOAT32_MAX:
                raise ValueError(f"{where}: field 'Rating' = {shorten(fields[1])!r} is beyond the float32 range of the ratings")
            day = _netflix_date(fields[2])
            if day is None:
                raise ValueError(f"{where}: field 'Date' = {shorten(fields[2])!r} is not a valid date YYYY-MM-DD")
            ratings.append(int(fields[1]))
            times.append(day)
    cols = (
        np.asarray(users, dtype=np.int64),
        np.asarray(movies, dtype=np.int64),
        np.asarray(ratings, dtype=np.float32),
        np.asarray(times, dtype=np.int64),
    )
    return cols, movie


_HEADER = re.compile(rb"[ \t]*([0-9]+)[ \t]*:[ \t]*")


def _netflix_fast(chunk: bytes, movie: int | None, probe: bool, scale: tuple[float, float] | None = None):
    """Vectorized parse of a chunk of whole LF lines; None when anything is off (the slow path explains)."""
    chunk = lf_line_ends(chunk)
    if b"\n\n" in chunk:
        chunk = re.sub(rb"\n{2,}", b"\n", chunk)
    chunk = chunk.lstrip(b"\n")
    if b"\r" in chunk:
        return None
    # header lines are the only ones with a ':'; split the chunk into per-movie segments of rating lines
    segments, movies = [], []
    pos = 0
    colon = chunk.find(b":")
    while colon >= 0:
        start = chunk.rfind(b"\n", 0, colon) + 1
        end = chunk.find(b"\n", colon)
        match = _HEADER.fullmatch(chunk, start, end)
        if match is None:
            return None
        if start > pos:
            if movie is None:
                return None
            segments.append(chunk[pos:start])
            movies.append(movie)
        movie = int(match.group(1))
        pos = end + 1
        colon = chunk.find(b":", pos)
    if pos < len(chunk):
        if movie is None:
            return None
        segments.append(chunk[pos:])
        movies.append(movie)
    counts = np.asarray([s.count(b"\n") for s in segments], dtype=np.int64)
    body = b"".join(segments)
    empty = np.zeros(0, dtype=np.int64)
    if not body:
        return (empty, empty, np.zeros(0, np.float32), empty), movie
    names = ["user"] if probe else ["user", "rating", "year", "month", "day"]
    if not probe:
        body = body.replace(b"-", b",")
    try:
        frame = pd.read_csv(
            io.BytesIO(body), header=None, names=names, dtype=np.int64, engine="c", quoting=3, skip_blank_lines=False
        )
    except (ValueError, pd.errors.ParserError, OverflowError):
        return None
    if len(frame) != int(counts.sum()) or body.count(b",") != (len(names) - 1) * len(frame):
        return None
    user = frame["user"].to_numpy()
    if (user < 0).any():
        return None
    item = np.repeat(np.asarray(movies, dtype=np.int64), counts)
    if probe:
        return (user, item, np.zeros(user.size, np.float32), np.zeros(user.size, np.int64)), movie
    days = _days(frame["year"].to_numpy(), frame["month"].to_numpy(), frame["day"].to_numpy())
    if days is None or _out_of_scale(frame["rating"].to_numpy(), scale):
        return None
    return (user, item, frame["rating"].to_numpy().astype(np.float32), days), movie


def _read_netflix_blocks(
    paths: Sequence[str | os.PathLike],
    probe: bool,
    _force_slow: bool = False,
    scale: tuple[float, float] | None = None,
) -> Ratings:
    parts = []
    for path in paths:
        path = Path(path)
        if not is_data_file(path):
            raise FileNotFoundError(f"Netflix Prize file not found: {path}")
        movie = None  # every file starts with a header
        for chunk, line0 in line_chunks(path, "parsing"):
            result = None if _force_slow else _netflix_fast(chunk, movie, probe, scale)
            if result is None:
                result = _netflix_slow(chunk, movie, probe, str(path), line0, scale)
            (user, item, rating, time), movie = result
            parts.append(Ratings(user, item, rating, time))
    return _concat(parts)


def read_netflix_ratings(
    paths: Sequence[str | os.PathLike],
    *,
    rating_scale: tuple[float, float] | None = None,
    _force_slow: bool = False,
) -> Ratings:
    """Parse Netflix Prize rating files (``combined_data_*.txt`` or ``mv_*.txt``), concatenated in the given order.

    ``rating_scale``: ``(lowest, highest)``; a rating outside it is an error naming the file, line and value
    (None: any integer; the Netflix Prize's scale is :data:`NETFLIX_SCALE`, 1-5).

    Returns:
        :class:`Ratings`; ``item`` is the MovieID of the enclosing block, ``time`` the date in days since
        1970-01-01.

    Raises:
        ValueError: naming file, 1-based line and field: a rating line before the file's first ``<MovieID>:``
            header, a wrong number of fields (e.g. a truncated last line), a non-integer id or rating, a rating
            outside ``rating_scale``, an invalid date (e.g. ``2005-02-30``).
    """
    return _read_netflix_blocks(paths, probe=False, _force_slow=_force_slow, scale=rating_scale)


def read_netflix_probe(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Parse ``probe.txt`` (``<MovieID>:`` blocks of ``<CustomerID>`` lines).

    Returns:
        ``(user, item)``: ``[N]`` int64 raw CustomerIDs and MovieIDs in file order.
    """
    parsed = _read_netflix_blocks([path], probe=True)
    return parsed.user, parsed.item
