"""On-disk cache of parsed arrays, shared by the DataModules.

An entry is a directory ``<cache_dir>/<key>/`` holding one ``<name>.npy`` per array and a ``meta.json``, so every
array loads with ``np.load(..., mmap_mode="r")`` (an ``.npz`` cannot be memory-mapped). The key
(:func:`cache_key`) hashes the raw files (size, mtime, first and last MiB) and the preprocessing options, so a
changed file or option gives a new entry and never a stale one.

Entries are written to a temporary directory next to the final one and renamed into place when complete, so no
reader ever sees a half-written entry; when several processes (e.g. DDP ranks) build the same key at once, the
first rename wins and the others discard their copy and load the winner's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

__all__ = ["CACHE_DIRNAME", "cache_key", "cached_arrays", "default_cache_dir"]

#: Folder created under a data set's root for its cache entries.
CACHE_DIRNAME = ".fccolit-cache"
#: Bumped when the layout of an entry changes, so old entries are not read with new code.
CACHE_FORMAT = 1
_EDGE_BYTES = 1 << 20  # hash this much of the start and of the end of each file
_STALE_SECONDS = 24 * 3600  # temporary directories this old are leftovers of a crashed writer


def _file_digest(path: Path) -> dict[str, object]:
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_EDGE_BYTES))
        if st.st_size > _EDGE_BYTES:
            f.seek(max(_EDGE_BYTES, st.st_size - _EDGE_BYTES))
            h.update(f.read(_EDGE_BYTES))
    return {"name": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "edges": h.hexdigest()}


def cache_key(files: Iterable[str | os.PathLike], options: Mapping[str, object], prefix: str = "") -> str:
    """Key of a cache entry: a hash of each file's name, size, mtime and first / last MiB, plus ``options``.

    Args:
        files: the raw files the arrays are built from (order matters; all must exist).
        options: every option that changes the arrays (JSON-serialisable; other values go through ``str``).
        prefix: a readable start of the key (e.g. the data set's name); reduced to ``[A-Za-z0-9._-]``.

    Returns:
        ``"<prefix>-<24 hex digits>"`` (or just the hex digits without a prefix), usable as a directory name.
    """
    payload = {
        "format": CACHE_FORMAT,
        "files": [_file_digest(Path(f)) for f in files],
        "options": dict(options),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    prefix = "".join(c if c.isalnum() or c in "._-" else "_" for c in prefix).lstrip(".")
    return f"{prefix}-{digest}" if prefix else digest


def _writable(folder: Path) -> bool:
    """Writable, and not marked read-only (root passes ``os.access`` even on an ``r-xr-xr-x`` folder)."""
    try:
        return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)
    except OSError:
        return False


def default_cache_dir(root: str | os.PathLike) -> Path:
    """``<root>/.fccolit-cache``, or, when ``root`` is read-only (e.g. a shared data folder),
    ``$FCCOLIT_CACHE`` / ``$XDG_CACHE_HOME/fccolit`` / ``~/.cache/fccolit`` (keys hash the file contents, so one
    cache can serve several roots)."""
    root = Path(root)
    local = root / CACHE_DIRNAME
    if (local.is_dir() and _writable(local)) or (not local.exists() and _writable(root)):
        return local
    if os.environ.get("FCCOLIT_CACHE"):
        return Path(os.environ["FCCOLIT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fccolit"


def _load(entry: Path, mmap: bool) -> dict[str, np.ndarray]:
    try:
        meta = json.loads((entry / "meta.json").read_text())
        return {
            name: np.load(entry / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
            for name in meta["arrays"]
        }
    except (OSError, ValueError, KeyError) as err:
        raise RuntimeError(
            f"cache entry {entry} is unreadable ({err}); delete that directory and it will be rebuilt"
        ) from err


def _write(tmp: Path, key: str, arrays: Mapping[str, np.ndarray]) -> None:
    for name, array in arrays.items():
        with open(tmp / f"{name}.npy", "wb") as f:
            np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
    meta = {
        "key": key,
        "format": CACHE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "arrays": {name: {"dtype": str(a.dtype), "shape": list(a.shape)} for name, a in arrays.items()},
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))


def _remove_stale(cache_dir: Path, key: str) -> None:
    for old in cache_dir.glob(f".{key}.tmp-*"):
        try:
            if time.time() - old.stat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def cached_arrays(
    cache_dir: str | os.PathLike,
    key: str,
    build_fn: Callable[[], Mapping[str, np.ndarray]],
    mmap: bool = True,
) -> dict[str, np.ndarray]:
    """Load the entry ``<cache_dir>/<key>/``, or build it with ``build_fn`` and store it atomically.

    Args:
        cache_dir: folder of the entries (created if missing).
        key: the entry's name, normally from :func:`cache_key`.
        build_fn: returns ``{name: array}`` (names usable as file names; no object arrays). Called only when the
            entry does not exist; if it raises, nothing is written.
        mmap: load the arrays memory-mapped read-only (``np.load(mmap_mode="r")``); else read them into memory.

    Returns:
        ``{name: array}`` as loaded back from the entry. If the cache folder cannot be written, the arrays of
        ``build_fn`` are returned uncached, with a warning.
    """
    cache_dir = Path(cache_dir)
    entry = cache_dir / key
    if entry.is_dir():
        return _load(entry, mmap)
    arrays = {str(k): np.asarray(v) for k, v in build_fn().items()}
    for name, array in arrays.items():
        if array.dtype.hasobject or not name or "/" in name or name.startswith("."):
            raise ValueError(f"cached_arrays: cannot store array {name!r} of dtype {array.dtype}")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale(cache_dir, key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=cache_dir))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the entry should be as readable as its folder
    except OSError as err:
        warnings.warn(f"cannot write the cache in {cache_dir} ({err}); using the arrays uncached", stacklevel=2)
        return arrays
    try:
        _write(tmp, key, arrays)
        try:
            os.rename(tmp, entry)  # atomic; fails if another writer's complete entry is already there
        except OSError:
            if not entry.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # lost the race: the winner's entry is identical
    except OSError as err:  # disk full, permissions, ...: never leave a partial entry, carry on uncached
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"cannot write the cache entry {entry} ({err}); using the arrays uncached", stacklevel=2)
        return arrays
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _load(entry, mmap)
