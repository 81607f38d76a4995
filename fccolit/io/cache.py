"""On-disk cache of parsed arrays, shared by the DataModules.

An entry is a directory ``<cache_dir>/<key>/`` holding one ``<name>.npy`` per array and a ``meta.json``, so every
array loads with ``np.load(..., mmap_mode="r")`` (an ``.npz`` cannot be memory-mapped). The key (:func:`cache_key`)
hashes the **whole content** of every raw file (SHA-256, streamed: far cheaper than parsing the file) and the
preprocessing options: any edited byte, whatever the file's size and modification time, gives a new entry and never a
stale one. Neither the modification time nor the folder is part of the key, so a copied or touched file keeps its
entry.

``meta.json`` records the size and SHA-256 of every array file; a load checks them (in time proportional to the
entry's size), so a corrupt entry (a truncated or overwritten ``.npy``, a damaged ``meta.json``) is never served: it
is moved aside with a warning and rebuilt.

Entries are written to a temporary directory next to the final one and renamed into place when complete, so no
reader ever sees a half-written entry; when several processes (e.g. DDP ranks) build the same key at once, the
first rename wins and the others discard their copy and load the winner's.

Why not the ``datasets`` cache (``load_dataset`` / ``save_to_disk``): it keys a local file by its path and
modification time, so an edit that keeps both serves the old rows (``tests/data/test_cache_vs_datasets.py``), and
``load_from_disk`` maps its Arrow files without checking them. The check is this cache's whole cost: loading an entry
takes many times as long as ``datasets.load_from_disk`` or a bare ``np.load(mmap_mode="r")``
(``benchmarks/handwritten.py``, timings in ``benchmarks/results/handwritten.md``), once per DataModule set-up.
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
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

__all__ = [
    "CACHE_DIRNAME", "CacheUse", "cache_key", "cached_arrays", "content_sha256", "default_cache_dir", "folder_listing",
    "recording_cache_uses",
]

#: The folder that earlier versions created under a data set's root for its cache entries; the DataModules skip it
#: when they list a data folder's files.
CACHE_DIRNAME = ".fccolit-cache"
#: Environment variable naming the cache folder (see :func:`default_cache_dir`).
CACHE_DIR_VARIABLE = "FCCOLIT_CACHE_DIR"
#: Bumped when the layout of an entry changes, so old entries are not read with new code.
CACHE_FORMAT = 2
_HASH_BLOCK = 8 << 20  # bytes read at a time while hashing a file
_STALE_SECONDS = 24 * 3600  # temporary directories this old are leftovers of a crashed writer


def content_sha256(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of the whole content of the file ``path``, read in blocks of 8 MiB (bounded memory)."""
    h = hashlib.sha256()
    buffer = bytearray(_HASH_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buffer)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def _file_digest(path: Path) -> dict[str, object]:
    if not path.is_file():
        raise FileNotFoundError(f"cache_key: no file at {path}")
    return {"name": path.name, "size": path.stat().st_size, "sha256": content_sha256(path)}


def cache_key(files: Iterable[str | os.PathLike], options: Mapping[str, object], prefix: str = "") -> str:
    """Key of a cache entry: a hash of each file's name, size and whole content (SHA-256), plus ``options``.

    Every byte of every file is read, so an edit anywhere in a file changes the key even when the size and the
    modification time are kept; the modification time itself is not part of the key.

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


def default_cache_dir() -> Path:
    """The user's cache folder for fccolit, never a data folder: ``$FCCOLIT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fccolit``, else ``~/.cache/fccolit``. Keys hash the files' contents, so one folder serves
    every copy of a data set, wherever it lies."""
    if os.environ.get(CACHE_DIR_VARIABLE):
        return Path(os.environ[CACHE_DIR_VARIABLE]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "fccolit"


@dataclass(frozen=True)
class CacheUse:
    """One call of :func:`cached_arrays`: the entry's folder and whether it was found or built.

    Collected by :func:`recording_cache_uses`; :meth:`describe` says it in words (the DataModules log it).

    Args:
        entry: the entry's folder ``<cache_dir>/<key>``.
        hit: the entry was found and loaded (False: it was built by ``build_fn``).
        stored: a built entry was written (False: the cache folder could not be written and the arrays were used
            uncached).

    Raises:
        Nothing: a frozen record (assigning a field raises ``dataclasses.FrozenInstanceError``).

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from fccolit.io.cache import cached_arrays, recording_cache_uses
        >>> with tempfile.TemporaryDirectory() as folder, recording_cache_uses() as uses:
        ...     for _ in range(2):
        ...         _ = cached_arrays(folder, "demo", lambda: {"x": np.arange(3)}, mmap=False)
        ...     print([use.hit for use in uses], uses[1].describe().startswith("cache hit"))
        [False, True] True
    """

    entry: Path
    hit: bool
    stored: bool = True

    def describe(self) -> str:
        """``"cache hit <entry>"``, ``"cache miss, built <entry>"`` or ``"cache miss, not stored (<folder>)"``."""
        if self.hit:
            return f"cache hit {self.entry}"
        return f"cache miss, built {self.entry}" if self.stored else f"cache miss, not stored ({self.entry.parent})"


_cache_uses: ContextVar[list[CacheUse] | None] = ContextVar("fccolit_cache_uses", default=None)


@contextmanager
def recording_cache_uses() -> Iterator[list[CacheUse]]:
    """Collect the :class:`CacheUse` of every :func:`cached_arrays` call made inside the ``with`` block (a nested
    block shares the outer block's list)."""
    uses = _cache_uses.get()
    if uses is not None:
        yield uses
        return
    uses = []
    token = _cache_uses.set(uses)
    try:
        yield uses
    finally:
        _cache_uses.reset(token)


def _record(entry: Path, hit: bool, stored: bool = True) -> None:
    uses = _cache_uses.get()
    if uses is not None:
        uses.append(CacheUse(entry, hit, stored))


class CorruptCacheEntry(RuntimeError):
    """Error: a cache entry whose files do not match its ``meta.json`` (or whose ``meta.json`` is unreadable).

    Raised inside :func:`cached_arrays` when it loads an entry (a file's size or SHA-256 differs from
    ``meta.json``, another format version, an array of another dtype or shape); :func:`cached_arrays` catches it,
    sets the entry aside with a warning and rebuilds it, so callers see it only as that warning.

    Args:
        message: what does not match (the ``RuntimeError`` message).

    Raises:
        Nothing itself: it is the exception.

    Example:
        >>> import tempfile, warnings
        >>> from pathlib import Path
        >>> import numpy as np
        >>> from fccolit.io.cache import cached_arrays
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = cached_arrays(folder, "demo", lambda: {"x": np.arange(3)}, mmap=False)
        ...     _ = (Path(folder) / "demo" / "x.npy").write_bytes(b"damaged")
        ...     with warnings.catch_warnings(record=True) as caught:
        ...         warnings.simplefilter("always")
        ...         x = cached_arrays(folder, "demo", lambda: {"x": np.arange(3)}, mmap=False)["x"]
        >>> x.tolist(), "is corrupt" in str(caught[0].message)
        ([0, 1, 2], True)
    """


def _load(entry: Path, mmap: bool) -> dict[str, np.ndarray]:
    """The arrays of a complete entry, after checking every file's size and SHA-256 against ``meta.json``."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT:
            raise CorruptCacheEntry(f"meta.json has format {meta.get('format')!r}, this code writes {CACHE_FORMAT}")
        if set(meta["files"]) != set(meta["arrays"]):
            raise CorruptCacheEntry("meta.json lists different arrays under 'arrays' and 'files'")
        for name, info in meta["files"].items():
            file = entry / f"{name}.npy"
            size = file.stat().st_size
            if size != info["bytes"]:
                raise CorruptCacheEntry(f"{file.name} holds {size} bytes, meta.json says {info['bytes']}")
            if content_sha256(file) != info["sha256"]:
                raise CorruptCacheEntry(f"{file.name} does not match its SHA-256 in meta.json")
        arrays = {
            name: np.load(entry / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
            for name in meta["arrays"]
        }
        for name, info in meta["arrays"].items():
            if str(arrays[name].dtype) != info["dtype"] or list(arrays[name].shape) != info["shape"]:
                raise CorruptCacheEntry(f"{name}.npy is {arrays[name].dtype} {list(arrays[name].shape)}, meta.json "
                                        f"says {info['dtype']} {info['shape']}")
        return arrays
    except CorruptCacheEntry:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptCacheEntry(f"{type(err).__name__}: {err}") from err


def _write(tmp: Path, key: str, arrays: Mapping[str, np.ndarray]) -> None:
    files = {}
    for name, array in arrays.items():
        with open(tmp / f"{name}.npy", "wb") as f:
            np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        files[name] = {"bytes": (tmp / f"{name}.npy").stat().st_size, "sha256": content_sha256(tmp / f"{name}.npy")}
    meta = {
        "key": key,
        "format": CACHE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "arrays": {name: {"dtype": str(a.dtype), "shape": list(a.shape)} for name, a in arrays.items()},
        "files": files,  # name → {"bytes", "sha256"} of <name>.npy, checked at every load
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))


def _identity(entry: Path) -> tuple[int, int] | None:
    """(device, inode) of the entry directory, None when there is none."""
    try:
        st = entry.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if os.path.isdir(entry) else None


def _set_aside(entry: Path, identity: tuple[int, int] | None) -> None:
    """Move a corrupt entry out of the way (atomically: a rename) and delete it; only if it is still the entry
    that was found corrupt (``identity`` = its directory's (device, inode)): another process may have replaced it
    with a good one meanwhile."""
    try:
        st = entry.stat()
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            return
        aside = Path(tempfile.mkdtemp(prefix=f".{entry.name}.corrupt-", dir=entry.parent))
        os.rename(entry, aside / "entry")
    except OSError:  # gone already (another process set it aside), or the folder is read-only
        return
    shutil.rmtree(aside, ignore_errors=True)


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
        ``build_fn`` are returned uncached, with a warning. An existing entry whose files fail the size / SHA-256
        check of its ``meta.json`` is set aside with a warning and rebuilt.
    """
    cache_dir = Path(cache_dir)
    entry = cache_dir / key
    for _ in range(3):  # a corrupt entry is set aside and rebuilt; a concurrent writer may replace it meanwhile
        identity = _identity(entry)
        if identity is None:
            break
        try:
            arrays = _load(entry, mmap)
            _record(entry, hit=True)
            return arrays
        except CorruptCacheEntry as err:
            warnings.warn(f"cache entry {entry} is corrupt ({err}); rebuilding it", stacklevel=2)
            _set_aside(entry, identity)
            if _identity(entry) == identity:  # still there: this process may not move it (a read-only cache)
                raise RuntimeError(
                    f"cache entry {entry} is corrupt ({err}) and cannot be removed; delete that directory and it "
                    "will be rebuilt"
                ) from err
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
        _record(entry, hit=False, stored=False)
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
        _record(entry, hit=False, stored=False)
        return arrays
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        arrays_back = _load(entry, mmap)
        _record(entry, hit=False)
        return arrays_back
    except CorruptCacheEntry as err:  # the winner of a race wrote a bad entry, or the disk lost it: ours is good
        warnings.warn(f"cache entry {entry} is corrupt right after writing ({err}); using the arrays uncached",
                      stacklevel=2)
        _record(entry, hit=False, stored=False)
        return arrays


def folder_listing(root: Path) -> str:
    """One sentence for an error message: the files of the data folder ``root`` (its cache folder left out; at most
    30 names), or that it does not exist."""
    if not root.is_dir():
        return f"The folder {root} does not exist."
    present = sorted(p.name for p in root.iterdir() if p.name != CACHE_DIRNAME)
    shown = ", ".join(present[:30]) + (f", ... ({len(present)} in all)" if len(present) > 30 else "")
    return f"Files in {root}: {shown or '(none)'}."
