"""MovieLens as a ranking problem (every user is a query over all movies): SONG / K-SONG's recommendation data.

Get the data from GroupLens, https://grouplens.org/datasets/movielens/ (free for research; see each release's
README for the terms), or pass ``download=True`` to fetch the zip from
``https://files.grouplens.org/datasets/movielens/<release>.zip`` into ``root``. Every release is read as
distributed (file formats in :mod:`fccolit.io.ratings`):

===================  ============================  ==========================================================
release              ratings file                  published size
===================  ============================  ==========================================================
``ml-100k``          ``ml-100k/u.data``            100,000 ratings, 943 users, 1,682 movies
``ml-1m``            ``ml-1m/ratings.dat``         1,000,209 ratings, 6,040 users
``ml-10m``           ``ml-10M100K/ratings.dat``    10,000,054 ratings
``ml-20m``           ``ml-20m/ratings.csv``        20,000,263 ratings, 138,493 users, 26,744 rated movies
``ml-25m``           ``ml-25m/ratings.csv``        25,000,095 ratings
``ml-32m``           ``ml-32m/ratings.csv``        see its README
``ml-latest-small``  ``ml-latest-small/ratings.csv``  100,836 ratings, 610 users, 9,724 rated movies (the README's
                                                   9,742 counts ``movies.csv``, which includes movies that only
                                                   have tags)
``ml-latest``        ``ml-latest/ratings.csv``     changes over time (a development release)
===================  ============================  ==========================================================

``root`` may be the release folder itself (holding the ratings file), its parent (holding ``ml-20m/`` or
``ml-20m.zip``), or a folder holding a bare ``ratings.csv`` / ``ratings.dat`` / ``u.data``. The release is
detected from the files when ``version`` is None. Numbers of items count the movies that have a rating (LibAUC's
and the paper's 26,744 for ML-20M).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.request
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from fccolit.io.cache import folder_listing
from fccolit.io.ratings import MOVIELENS_FORMATS, Ratings, read_movielens_ratings
from fccolit.io.paths import is_data_file

from fccolit.datamodules.ranking import RecommendationDataModule

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens/"
MOVIELENS_PAGE = "https://grouplens.org/datasets/movielens/"

#: release → (folder inside the zip, ratings file name)
MOVIELENS_RELEASES: dict[str, tuple[str, str]] = {
    "ml-100k": ("ml-100k", "u.data"),
    "ml-1m": ("ml-1m", "ratings.dat"),
    "ml-10m": ("ml-10M100K", "ratings.dat"),
    "ml-20m": ("ml-20m", "ratings.csv"),
    "ml-25m": ("ml-25m", "ratings.csv"),
    "ml-32m": ("ml-32m", "ratings.csv"),
    "ml-latest-small": ("ml-latest-small", "ratings.csv"),
    "ml-latest": ("ml-latest", "ratings.csv"),
}
_FILES = ("u.data", "ratings.dat", "ratings.csv")

#: MD5 of each release's zip as GroupLens publishes it beside the zip (``<release>.zip.md5``, e.g. the line
#: ``MD5 (ml-20m.zip) = cd245b17a1ae2cc31bb14903e1204af3``). Releases missing here (ml-32m, and ml-latest /
#: ml-latest-small, which GroupLens regenerates over time) are checked against the ``.md5`` file fetched from
#: GroupLens at download time.
MOVIELENS_MD5: dict[str, str] = {
    "ml-100k": "0e33842e24a9c977be4e0107933c0723",
    "ml-1m": "c4d9eecfca2ab87c1945afe126590906",
    "ml-10m": "ce571fd55effeba0271552578f2648bd",
    "ml-20m": "cd245b17a1ae2cc31bb14903e1204af3",
    "ml-25m": "6b51fb2759a8657d3bfcbfc42b592ada",
}
#: The rating scale of each release (its README): whole stars 1-5 in ml-100k and ml-1m, half stars 0.5-5.0 from
#: ml-10m on. A file not named by its release (a bare ``ratings.csv`` / ``ratings.dat``) gets the widest, 0.5-5.
MOVIELENS_SCALES: dict[str, tuple[float, float]] = {
    "ml-100k": (1.0, 5.0),
    "ml-1m": (1.0, 5.0),
}
DEFAULT_SCALE = (0.5, 5.0)


def _release_of_folder(name: str) -> str | None:
    lowered = name.lower()
    for version, (folder, _) in MOVIELENS_RELEASES.items():
        if lowered == folder.lower():
            return version
    return None


def detect_movielens(root: str | os.PathLike) -> tuple[str, Path]:
    """``(release or file format, ratings file)`` found in ``root`` (see the module docstring for the layouts).

    The release is named when the folder says it (``ml-20m/``, ``ml-10M100K/``, or ``root`` itself is such a
    folder) and ``u.data`` (only in ml-100k); a bare ``ratings.csv`` / ``ratings.dat`` elsewhere is reported by its
    file name.

    Raises:
        FileNotFoundError: no ratings file (the message lists the folder and says where to get the data).
        ValueError: several releases in ``root`` (pass ``version``).
    """
    root = Path(root)
    found: list[tuple[str, Path]] = []
    own = _release_of_folder(root.name)
    for name in _FILES:
        if is_data_file(root / name):
            guess = own if own and MOVIELENS_RELEASES[own][1] == name else ("ml-100k" if name == "u.data" else name)
            found.append((guess, root / name))
    for version, (folder, name) in MOVIELENS_RELEASES.items():
        if is_data_file(root / folder / name):
            found.append((version, root / folder / name))
    if not found:
        zips = [v for v in MOVIELENS_RELEASES if is_data_file(root / f"{v}.zip")]
        if len(zips) == 1:
            return zips[0], root / f"{zips[0]}.zip"
        raise FileNotFoundError(
            f"no MovieLens ratings file (u.data, ratings.dat or ratings.csv) in {root} or its release folders. "
            f"{folder_listing(root)} Download a release from {MOVIELENS_PAGE} into {root} (or pass version='ml-20m' and "
            "download=True)."
        )
    if len(found) > 1:
        names = ", ".join(f"{v} ({p})" for v, p in found)
        raise ValueError(f"several MovieLens releases in {root}: {names}; pass version= to choose one")
    return found[0]


def file_md5(path: str | os.PathLike) -> str:
    """MD5 (hex) of a file's whole content, read 8 MiB at a time."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _published_md5(version: str) -> str:
    """The MD5 GroupLens publishes in ``<version>.zip.md5`` (``MD5 (<version>.zip) = <hex>`` or ``<hex>  <name>``)."""
    url = f"{GROUPLENS_URL}{version}.zip.md5"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            text = response.read(4096).decode("ascii", errors="replace")
    except OSError as err:
        raise RuntimeError(
            f"cannot fetch the published checksum {url} ({err}), so the download of {version}.zip cannot be "
            f"verified; download the zip and its .md5 by hand from {MOVIELENS_PAGE}"
        ) from err
    found = re.findall(r"\b[0-9a-fA-F]{32}\b", text)
    if len(found) != 1:
        raise RuntimeError(f"{url} does not hold one MD5 checksum: {text[:200]!r}")
    return found[0].lower()


def verify_movielens_zip(archive: str | os.PathLike, version: str, expected: str | None = None) -> None:
    """Check ``archive`` against the MD5 GroupLens publishes for ``version`` (:data:`MOVIELENS_MD5`, or
    ``expected`` when given).

    Raises:
        ValueError: the MD5 differs (names the file, both checksums and what to do).
    """
    expected = (expected or MOVIELENS_MD5[version]).lower()
    actual = file_md5(archive)
    if actual != expected:
        raise ValueError(
            f"{archive}: MD5 {actual} differs from the checksum GroupLens publishes for {version}.zip ({expected}): "
            f"the file is corrupt or incomplete; delete it and download it again from {GROUPLENS_URL}{version}.zip"
        )


def _extract(archive: Path, root: Path, version: str) -> Path:
    """Extract the release folder of ``archive`` into ``root`` (atomically: a temporary folder, then a rename)."""
    folder, name = MOVIELENS_RELEASES[version]
    target = root / folder
    if (target / name).is_file():
        return target / name
    if version in MOVIELENS_MD5:  # a zip put there by hand is checked too (the download checked its own)
        verify_movielens_zip(archive, version)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder}.extract-", dir=root))
    try:
        with zipfile.ZipFile(archive) as z:
            member = f"{folder}/{name}"
            if member not in z.namelist():
                raise ValueError(f"{archive}: the archive has no {member} (is it the {version} zip from GroupLens?)")
            z.extractall(tmp)
        try:
            os.rename(tmp / folder, target)
        except OSError:
            if not (target / name).is_file():
                raise
    except zipfile.BadZipFile as err:
        raise ValueError(f"{archive} is not a valid zip file ({err}); delete it and download it again") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target / name


def download_movielens(root: str | os.PathLike, version: str) -> Path:
    """Download ``<version>.zip`` from GroupLens into ``root`` (to a temporary name, renamed when complete and
    verified against the published MD5: :data:`MOVIELENS_MD5`, else the ``.md5`` file GroupLens serves beside the
    zip) and extract it. Returns the ratings file.

    Raises:
        ValueError: the downloaded zip does not match the published MD5 (nothing is kept).
        RuntimeError: the download (or, for a release without an embedded checksum, the ``.md5`` file) failed.
    """
    if version not in MOVIELENS_RELEASES:
        raise ValueError(f"unknown MovieLens release {version!r}; known: {sorted(MOVIELENS_RELEASES)}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    archive = root / f"{version}.zip"
    if not archive.is_file():
        url = f"{GROUPLENS_URL}{version}.zip"
        fd, tmp = tempfile.mkstemp(prefix=f".{version}.zip.", dir=root)
        os.close(fd)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out, length=1 << 20)
            expected = MOVIELENS_MD5.get(version) or _published_md5(version)
            try:
                verify_movielens_zip(tmp, version, expected)
            except ValueError:
                raise ValueError(
                    f"the download of {url} does not match the checksum GroupLens publishes ({expected}; got "
                    f"{file_md5(tmp)}): it is corrupt or incomplete, and was deleted; try again"
                ) from None
            os.replace(tmp, archive)
        except OSError as err:
            raise RuntimeError(
                f"downloading {url} into {root} failed ({err}); download it by hand from {MOVIELENS_PAGE}"
            ) from err
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return _extract(archive, root, version)


class MovieLensDataModule(RecommendationDataModule):
    """MovieLens ratings as per-user ranking lists (batch schema in :mod:`fccolit.datasets.ranking`).

    Parsing and splitting happen in ``__init__`` through the atomic cache (``<cache_dir>/movielens-…/``, keyed by
    the ratings file and every option that changes the arrays), so :attr:`sizes` exist right after construction
    and a second construction (another process, a resumed run) only memory-maps the arrays.

    Args:
        root: where the release is (see the module docstring).
        version: the release (``"ml-20m"``, ...; None: detected from the files).
        download: fetch the release zip from GroupLens when it is not in ``root`` (needs ``version``).
        rating_scale: ``(lowest, highest)`` rating; one outside it is an error naming the file, line and value
            (a rating far outside the scale would overflow the gain 2^y − 1). None: the release's published scale
            (:data:`MOVIELENS_SCALES`: 1–5 for ml-100k and ml-1m, else 0.5–5). Pass your data's scale for a
            ratings file that is not MovieLens'.
        **kwargs: the split and sampling protocol (``protocol``, ``num_test``, ``relevance``, ``queries_per_batch``,
            ``num_negatives``, ``top_k``, ``cache_dir``, ...): see
            :class:`~fccolit.datamodules.ranking.RecommendationDataModule`.

    Raises:
        FileNotFoundError: ``root`` holds no ratings file (nor one release zip), or not the ``version`` asked for.
        ValueError: several releases in ``root`` and no ``version``; an unknown ``version``; a ``rating_scale``
            that is not ``0 <= lowest <= highest``; a ratings file without any rating; a corrupt release zip; the
            checks of :class:`~fccolit.datamodules.ranking.RecommendationDataModule`.
        RuntimeError: ``download=True`` and the download or its checksum fails.

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.ranking import write_movielens_csv
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_movielens_csv(pathlib.Path(folder))  # a small ratings.csv: 60 users, 120 movies
        ...     MovieLensDataModule(folder, cache_dir=folder).sizes
        {'num_users': 60, 'num_items': 120, 'num_queries': 60, 'num_pairs': 1521}
    """

    def __init__(
        self,
        root: str | os.PathLike,
        version: str | None = None,
        download: bool = False,
        rating_scale: tuple[float, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.root = Path(root)
        self.version, self.ratings_file = self._find(version, download)
        fmt = self.ratings_file.name
        if rating_scale is None:
            rating_scale = MOVIELENS_SCALES.get(self.version, DEFAULT_SCALE)
        low, high = (float(v) for v in rating_scale)
        if not (np.isfinite(low) and np.isfinite(high) and 0 <= low <= high):
            raise ValueError(f"rating_scale must be (lowest, highest) with 0 <= lowest <= highest, got {rating_scale}")
        self.rating_scale = (low, high)

        def read() -> Ratings:
            ratings = read_movielens_ratings(self.ratings_file, fmt, rating_scale=self.rating_scale)
            if len(ratings) == 0:
                content = "only its header line" if MOVIELENS_FORMATS[fmt][1] is not None else "no rating line"
                raise ValueError(
                    f"{self.ratings_file}: the ratings file holds no rating ({content}); is it truncated? Extract "
                    f"it again from the release zip ({MOVIELENS_PAGE})"
                )
            return ratings

        extra = {"format": fmt, "rating_scale": list(self.rating_scale)}
        self._load(self.root, [self.ratings_file], read, f"movielens-{self.version}", extra)

    def _find(self, version: str | None, download: bool) -> tuple[str, Path]:
        """``(release or format name, ratings file)``."""
        root = self.root
        if version is None:
            if download:
                warnings.warn("download=True needs version=...; looking for files already in root", stacklevel=3)
            found_version, path = detect_movielens(root)
            if path.suffix == ".zip":
                return found_version, _extract(path, root, found_version)
            return found_version, path
        if version not in MOVIELENS_RELEASES:
            raise ValueError(f"unknown MovieLens release {version!r}; known: {sorted(MOVIELENS_RELEASES)}")
        folder, name = MOVIELENS_RELEASES[version]
        for candidate in (root / folder / name, root / name):
            if is_data_file(candidate):
                return version, candidate
        if is_data_file(root / f"{version}.zip"):
            return version, _extract(root / f"{version}.zip", root, version)
        if download:
            return version, download_movielens(root, version)
        raise FileNotFoundError(
            f"MovieLens {version} not found: expected {root / folder / name} (or {root / name}). {folder_listing(root)} "
            f"Download {GROUPLENS_URL}{version}.zip from {MOVIELENS_PAGE} and extract it into {root}, or pass "
            "download=True."
        )
