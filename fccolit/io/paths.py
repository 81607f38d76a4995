"""Paths read from data files (a CSV's image column, a JSON's frame names) stay inside their data root; a data file
that is there but is no regular file (a symbolic link loop, a link to a device) is named for what it is
(:func:`is_data_file`), not reported as missing.

Why not ``pathlib`` (``resolve()`` then ``is_relative_to``): it resolves against the file system (a path that does not
exist yet, or a symbolic link inside the data set, changes the answer), reads a Windows CSV's backslashes as file
name characters on POSIX, and its error would not say which file, line and field held the path. No timing: one
call per listed path, next to the decoding of the image it names.
"""

from __future__ import annotations

import errno
import ntpath
import os
import posixpath
import stat

__all__ = ["confined_relative_path", "data_file_problem", "is_data_file"]


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


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def data_file_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with ``path`` as a data file to read, or None: None for a regular file (or a link to one) and
    when nothing is there at all (not even a broken link); otherwise a phrase to follow the path in an error:
    ``"is a symbolic link loop"``, ``"is a broken symbolic link (to 'x', which does not exist)"``, ``"is a folder,
    not a file"``, ``"is not a regular file (a character device, through the symbolic link to '/dev/zero')"``.

    ``Path.is_file()`` answers False for all of these, so a reader that takes False for "missing" reports a file
    that its own folder listing shows; and a reader that opened a link to ``/dev/zero`` would never end."""
    path = os.fspath(path)
    try:
        link = os.lstat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:  # a folder on the way is a link loop
            return "lies under a symbolic link loop"
        return None  # nothing there (or a parent that is not a folder): missing
    target = os.readlink(path) if stat.S_ISLNK(link.st_mode) else None
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"is a symbolic link loop (it points to {target!r}, which leads back to itself)"
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"is a broken symbolic link (to {target!r}, which does not exist)"
        return f"cannot be read ({err.strerror})"
    if stat.S_ISREG(mode):
        return None
    via = f", through the symbolic link to {target!r}" if target is not None else ""
    if stat.S_ISDIR(mode):
        return f"is a folder, not a file{via}"
    return f"is not a regular file ({_kind(mode)}{via})"


def is_data_file(path: str | os.PathLike, what: str = "data file") -> bool:
    """True when ``path`` is a regular file (or a link to one), False when nothing is there; raises ``ValueError``
    saying what is there otherwise (:func:`data_file_problem`: a link loop, a broken link, a folder, a device ...),
    so that a finder probing candidate names never reports as missing a name that the folder lists, and never
    opens a device. ``what`` names the file in the error (e.g. ``"MovieLens ratings file"``)."""
    problem = data_file_problem(path)
    if problem is not None:
        raise ValueError(f"{what} {os.fspath(path)} {problem}: replace it with the file itself, or a link to it")
    return os.path.isfile(path)
