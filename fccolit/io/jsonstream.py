"""Streaming reader of JSON files whose top level is a list (e.g. BDD100K's 1.5 GB labels file): one element at a
time, never the whole list in memory as Python objects.

Why not ``json.load``: it holds the whole list as Python objects, a peak of 1,258 MiB for a generated 226 MiB labels
file of 70,000 frames against 86 MiB streamed (15×); the stream's peak is a chunk plus one element whatever the
file's size (the real 2018 training labels are about 1.5 GB), and it took 0.32–0.34× the time of ``json.load``
(``benchmarks/handwritten.py``). A streaming parser such as ``ijson`` is not a dependency, and
this one is ``json``'s own decoder applied element by element.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from fccolit.io.text import progress_bar

__all__ = ["iter_json_array"]


def iter_json_array(path: str | os.PathLike, chunk_chars: int = 1 << 24) -> Iterator[tuple[int, Any]]:
    """Stream the elements of a JSON file whose top level is a list: yields ``(position, element)``.

    Memory stays at one chunk plus one element, whatever the file size. Errors name the file, the element and
    the character offset.
    """
    path = Path(path)
    decoder = json.JSONDecoder()
    bar = progress_bar(path, path.stat().st_size, "reading")  # the 2018 training labels are about 1.5 GB
    with open(path, encoding="utf-8") as f:
        buf, pos, offset, eof = "", 0, 0, False  # offset: characters of the file before buf

        def fill() -> bool:
            nonlocal buf, pos, offset, eof
            if eof:
                if bar is not None:
                    bar.close()
                return False
            more = f.read(chunk_chars)
            if bar is not None:
                bar.update(len(more))  # characters, about bytes for these ASCII files
            eof = not more
            offset += pos
            buf, pos = buf[pos:] + more, 0
            return bool(more)

        def skip_ws() -> str:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf) or not fill():
                    return buf[pos] if pos < len(buf) else ""

        if skip_ws() != "[":
            raise ValueError(f"{path}: expected a JSON list of frames ('[' at the start), found {buf[pos:pos + 20]!r}")
        pos += 1
        k = 0
        if skip_ws() == "]":
            return
        while True:
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as err:
                    if not eof:  # the element may continue in the next chunk
                        fill()
                        continue
                    raise ValueError(f"{path}: invalid JSON in element {k} at character {offset + err.pos}: {err.msg}") from err
                if end == len(buf) and not eof:  # a number or literal may continue: decode again with more text
                    fill()
                    continue
                break
            yield k, obj
            k += 1
            pos = end
            sep = skip_ws()
            if sep == "]":
                return
            if sep != ",":
                raise ValueError(f"{path}: expected ',' or ']' after element {k - 1} at character {offset + pos}, found {sep!r}")
            pos += 1
            skip_ws()
