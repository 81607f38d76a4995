"""The Netflix Prize data as a ranking problem (every user is a query over all movies): SONG's second recommendation
benchmark (Qiu et al., ICML 2022, arXiv:2202.12183, App. D.2: users with at least 100 ratings; 236,117 users, 17,770
movies, 89,973,534 ratings after that filter).

Get the data from Kaggle, https://www.kaggle.com/datasets/netflix-inc/netflix-prize-data (the original release
is no longer distributed by Netflix; there is no ``download``: the files need a Kaggle login and may not be
redistributed). Put into ``root`` (or ``root/netflix-prize-data/``) either

* the Kaggle repackaging ``combined_data_1.txt`` … ``combined_data_4.txt`` (optionally ``probe.txt``), or
* the original ``training_set/mv_0000001.txt`` … ``mv_0017770.txt`` (optionally ``probe.txt``).

Format (:mod:`fccolit.io.ratings`): blocks of a ``<MovieID>:`` header line and ``<CustomerID>,<Rating>,<Date>``
lines; 100,480,507 ratings of 17,770 movies by 480,189 customers.

Quirks handled: the header lines interleaved with the ratings (not a CSV: parsed by a streaming block parser, with
a progress bar); sparse customer ids (1..2,649,429, renumbered); dates of day resolution, so many ratings of a
user tie in time: ties keep the file order (movie id order), a stable sort; CRLF line endings, blank lines and a
missing final newline; a (user, movie) pair listed twice keeps its latest rating; ``probe.txt`` lists
(movie, customer) pairs without ratings, a subset of the training ratings: with ``holdout="probe"`` they become
the test set.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fccolit._checks import check_choice
from fccolit.io.cache import CACHE_DIRNAME
from fccolit.io.ratings import NETFLIX_SCALE, Ratings, read_netflix_probe, read_netflix_ratings
from fccolit.io.paths import is_data_file

from fccolit.datamodules.ranking import RecommendationDataModule

NETFLIX_PAGE = "https://www.kaggle.com/datasets/netflix-inc/netflix-prize-data"
_NUMBER = re.compile(r"(\d+)")


def _numbered(paths: list[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: int(_NUMBER.findall(p.name)[-1]))


def find_netflix_files(root: str | os.PathLike) -> tuple[list[Path], Path | None]:
    """``(rating files in order, probe.txt or None)`` under ``root`` or ``root/netflix-prize-data``.

    Raises:
        FileNotFoundError: neither ``combined_data_*.txt`` nor ``training_set/mv_*.txt`` (the message lists the
            folder and where to get the data).
    """
    root = Path(root)
    for folder in (root, root / "netflix-prize-data"):
        combined = _numbered(list(folder.glob("combined_data_*.txt")))
        movies = _numbered(list((folder / "training_set").glob("mv_*.txt")) or list(folder.glob("mv_*.txt")))
        files = combined or movies
        if files:
            probe = folder / "probe.txt"
            return files, probe if is_data_file(probe) else None
    if root.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.name != CACHE_DIRNAME)
        listing = f"Files in {root}: {', '.join(present[:30]) or '(none)'}."
    else:
        listing = f"The folder {root} does not exist."
    raise FileNotFoundError(
        f"no Netflix Prize ratings in {root}: expected combined_data_1.txt … combined_data_4.txt (Kaggle) or "
        f"training_set/mv_0000001.txt … (original release). {listing} Download them from {NETFLIX_PAGE}."
    )


def probe_mask(ratings: Ratings, probe_user: np.ndarray, probe_item: np.ndarray) -> np.ndarray:
    """``[N]`` bool: the ratings whose (customer, movie) pair is listed in ``probe.txt``."""
    width = int(max(ratings.item.max(initial=0), probe_item.max(initial=0))) + 1
    keys = ratings.user.astype(np.int64) * width + ratings.item
    probe = np.unique(probe_user.astype(np.int64) * width + probe_item)
    return np.isin(keys, probe, assume_unique=False, kind="sort")


def _probe_test_mask(ratings: Ratings, probe_path: Path) -> np.ndarray:
    """The test split of ``holdout="probe"``: the ratings listed in ``probe.txt``."""
    return probe_mask(ratings, *read_netflix_probe(probe_path))


class NetflixDataModule(RecommendationDataModule):
    """Netflix Prize ratings as per-user ranking lists (batch schema in :mod:`fccolit.datasets.ranking`).

    Ratings must be on the Netflix scale 1–5 (:data:`~fccolit.io.ratings.NETFLIX_SCALE`); another value is an error
    naming the file, line and value.

    Args:
        root: the folder holding the files (see the module docstring).
        min_ratings: keep the users with at least this many ratings (the paper: 100). Applied before the split;
            movies left without a rating are dropped from the item set.
        holdout: ``"time"``: the last ``num_test`` ratings of each user (by date, ties in file order) are the
            test items; ``"probe"``: the pairs of ``probe.txt`` are (a user's first rating always stays in
            training), and the validation items are the last ``num_val`` of the remaining ratings.
        **kwargs: the split and sampling protocol, as for
            :class:`~fccolit.datamodules.movielens.MovieLensDataModule` (``protocol``, ``num_test``, ``relevance``,
            ``queries_per_batch``, ``num_negatives``, ``top_k``, ``cache_dir``, ...): see
            :class:`~fccolit.datamodules.ranking.RecommendationDataModule`.

    Parsing takes minutes for the full data (about 2 GB of text); it happens once, in ``__init__``, and the
    result is cached (``<cache_dir>/netflix-…/``, keyed by every rating file, ``probe.txt`` when used, and the
    options).

    Raises:
        FileNotFoundError: ``root`` holds no Netflix rating file, or ``holdout="probe"`` without ``probe.txt``.
        ValueError: ``holdout`` is not ``"time"`` or ``"probe"``; the rating files hold no rating; the checks of
            :class:`~fccolit.datamodules.ranking.RecommendationDataModule` (e.g. no user with ``min_ratings``).

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.ranking import write_netflix
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_netflix(pathlib.Path(folder))  # small combined_data_*.txt files: 50 users, 80 movies
        ...     NetflixDataModule(folder, min_ratings=1, cache_dir=folder).sizes
        {'num_users': 50, 'num_items': 80, 'num_queries': 50, 'num_pairs': 1132}
    """

    def __init__(
        self,
        root: str | os.PathLike,
        min_ratings: int = 100,
        holdout: Literal["time", "probe"] = "time",
        **kwargs: Any,
    ) -> None:
        super().__init__(min_ratings=min_ratings, **kwargs)
        check_choice("holdout", holdout, ("time", "probe"))
        self.root = Path(root)
        self.rating_files, self.probe_file = find_netflix_files(self.root)
        self.holdout = holdout
        files = list(self.rating_files)
        test_mask = None
        if holdout == "probe":
            if self.probe_file is None:
                raise FileNotFoundError(
                    f"holdout='probe' needs probe.txt beside {self.rating_files[0]} (it comes with the Kaggle data, "
                    f"{NETFLIX_PAGE}); use holdout='time' without it"
                )
            files.append(self.probe_file)
            test_mask = functools.partial(_probe_test_mask, probe_path=self.probe_file)

        def read() -> Ratings:
            ratings = read_netflix_ratings(self.rating_files, rating_scale=NETFLIX_SCALE)
            if len(ratings) == 0:
                names = ", ".join(str(p) for p in self.rating_files)
                raise ValueError(
                    f"{names}: the rating files hold no rating (are they empty or truncated?); download them again "
                    f"from {NETFLIX_PAGE}"
                )
            return ratings

        extra = {"holdout": holdout, "files": [p.name for p in self.rating_files], "rating_scale": list(NETFLIX_SCALE)}
        self._load(self.root, files, read, "netflix", extra, test_mask)
