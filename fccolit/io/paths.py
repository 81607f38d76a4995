"""Paths read from data files (a CSV's image column, a JSON's frame names) stay inside their data root.

Why not ``pathlib`` (``resolve()`` then ``is_relative_to``): it resolves against the file system (a path that does not
exist yet, or a symbolic link inside the data set, changes the answer), reads a Windows CSV's backslashes as file
name characters on POSIX, and its error would not say which file, line and field held the path. No timing: one
call per listed path, next to the decoding of the image it names.
"""

from __future__ import annotations

import ntpath
import os
import posixpath

__all__ = ["confined_relative_path"]


def confined_relative_path(relative: str | bytes, root: str | os.PathLike, where: str) -> str:
    """``relative`` as a ``/``-separated path that cannot leave ``root``, or an error naming where it was read.

    Backslashes count as separators (a CSV written on Windows). Rejected: an empty path, an absolute path (``/x``,
    ``C:\\x``, ``C:x``, ``\\\\server\\share``), and any ``..`` component (even one that would come back inside the
    root: the data sets this library reads never write one). ``.`` and repeated separators are dropped.

    Args:
        relative: the path as written in the file.
        root: the folder it is relative to (named in the error).
        where: the file and position it was read from, e.g. ``"train.csv line 12, field 'Path'"``.

    Raises:
        ValueError: ``"<where>: path '<relative>' escapes the data root <root> ..."``.
    """
    text = relative.decode("utf-8", errors="replace") if isinstance(relative, bytes) else str(relative)
    unified = text.replace("\\", "/")
    parts = [p for p in unified.split("/") if p not in ("", ".")]
    absolute = unified.startswith("/") or bool(ntpath.splitdrive(text)[0]) or posixpath.isabs(unified)
    if not parts or absolute or ".." in parts or "\x00" in text:
        reason = (
            "is empty" if not parts else
            "is absolute" if absolute else
            "holds a NUL byte" if "\x00" in text else
            "goes up with '..'"
        )
        raise ValueError(
            f"{where}: path {text!r} {reason}; paths in a data file must stay inside the data root {root} "
            "(relative, without '..')"
        )
    return "/".join(parts)
