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

__all__ = ["CHUNK_BYTES", "PROGRESS_BYTES", "line_chunks", "progress_bar", "shorten"]

#: bytes :func:`line_chunks` reads at a time (read at every call, so tests can make it small)
CHUNK_BYTES = 64 << 20
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


def shorten(token: bytes | str, limit: int = 60) -> str:
    """``token`` as text (bytes decoded as UTF-8, bad bytes replaced), cut to ``limit`` characters plus ``...``."""
    s = token.decode("utf-8", errors="replace") if isinstance(token, bytes) else token
    return s if len(s) <= limit else s[:limit] + "..."
