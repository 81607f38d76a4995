"""What the text readers share: whole-line chunks of a file, a progress bar for large files, and short quotes of
offending tokens for error messages.

Why not ``pandas.read_csv(chunksize=...)``: its chunks count rows, not lines, so a chunk that a reader's checks
reject could not be re-read line by line with the file's line numbers; whole-line byte chunks can, and each of them
still goes through pandas' C tokenizer in :mod:`fccolit.io.ratings` (whose figures include this chunking).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

try:  # tqdm comes with datasets / transformers; the readers work without it
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover
    tqdm = None

__all__ = [
    "CHUNK_BYTES", "PARSE_BYTES", "PROGRESS_BYTES",
    "lf_line_ends", "line_chunks", "line_ranges", "progress_bar", "shorten",
]

#: bytes :func:`line_chunks` reads at a time (read at every call, so tests can make it small)
CHUNK_BYTES = 64 << 20
#: bytes (whole lines) the vectorized parsers work on at a time: bounds their per-byte temporaries (several int64
#: arrays as long as the text) and keeps them in cache: a 60 MiB MSLR-format file took 3.6–8.0 s to parse in one
#: piece, 2.0–2.2 s in 4 MiB pieces (scikit-learn's load_svmlight_file: 1.5 s). Read at every call (tests shrink it).
PARSE_BYTES = 4 << 20
#: files at least this large get a progress bar
PROGRESS_BYTES = 32 << 20


def progress_bar(path: Path, total: int, desc: str):
    """A tqdm bar of `total` bytes for reading `path` (None for files under 32 MiB or without tqdm)."""
    if tqdm is None or total < PROGRESS_BYTES:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"{desc} {path.name}", leave=False)


def line_chunks(path: Path, desc: str, start: int = 0) -> Iterator[tuple[bytes, int]]:
    """``(chunk, lines before it)``: whole lines of ``path`` from byte ``start``, about :data:`CHUNK_BYTES` at a
    time; every chunk ends with ``\\n`` (one is added after a final line without it)."""
    size = path.stat().st_size
    bar = progress_bar(path, size, desc)
    lines_before = 0
    carry = b""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            if bar is not None:
                bar.update(start)
            while True:
                block = f.read(CHUNK_BYTES)
                if bar is not None:
                    bar.update(len(block))
                if not block:
                    break
                data = carry + block
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no newline yet: one very long line
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
                yield chunk, lines_before
                lines_before += chunk.count(b"\n")
            if carry:
                yield carry + b"\n", lines_before
    finally:
        if bar is not None:
            bar.close()


def lf_line_ends(chunk: bytes) -> bytes:
    """``chunk`` with CRLF line ends turned into LF; the chunk itself (no copy) when it holds no CR."""
    return chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk


def shorten(token: bytes | str, limit: int = 60) -> str:
    """``token`` as text (bytes decoded as UTF-8, bad bytes replaced), cut to ``limit`` characters plus ``...``."""
    s = token.decode("utf-8", errors="replace") if isinstance(token, bytes) else token
    return s if len(s) <= limit else s[:limit] + "..."


def line_ranges(data: bytes, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` byte ranges of ``data`` of at most ``size`` bytes that end after a newline (or at the end
    of ``data``); a line longer than ``size`` is one range of its own."""
    start = 0
    while start < len(data):
        stop = len(data) if len(data) - start <= size else data.rfind(b"\n", start, start + size) + 1
        if stop <= start:  # one line longer than the chunk size: take it whole
            stop = data.find(b"\n", start + size)
            stop = len(data) if stop < 0 else stop + 1
        yield start, stop
        start = stop
