"""The ranking DataModules' bases: :class:`RankingDataModule` (query batches, the cache, sizes) and
:class:`RecommendationDataModule` (explicit ratings split per user by time: every argument of the split and
sampling protocol, declared once for MovieLens and Netflix).

The batch schema is in :mod:`fccolit.datasets.ranking`; the datasets that produce it in
:mod:`fccolit.datasets.recommendation` and :mod:`fccolit.datasets.letor`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from fccolit._checks import check_choice
from fccolit.datasets.recommendation import (
    FullRankingEvalDataset, RecommendationTrainDataset, SampledCandidatesEvalDataset, build_recommendation_arrays,
)
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.ratings import Ratings
from fccolit.samplers import RankAwareBatchSampler
from fccolit.samplers.ranking import QueryBatchSampler

from fccolit.datamodules.base import FCCODataModule

__all__ = ["PROTOCOLS", "RankingDataModule", "RecommendationDataModule"]


class RankingDataModule(FCCODataModule):
    """Base of the ranking DataModules: the query batch sampler, the cache, and the sizes as attributes.

    Subclasses fill :attr:`sizes`, set :attr:`train_num_relevant` (``[num_queries]``, to pick the eligible
    queries) and build the datasets in ``setup``.

    Args:
        queries_per_batch: global number of queries per training batch (a multiple of the number of devices).
        num_positives: P, relevant items per query in a training batch.
        num_batches: training batches per epoch (None: one pass over the eligible queries).
        top_k: K of the ``ideal_dcg_at_k`` field (None: the field is absent).
        seed: seeds the training stream (queries and items).
        num_workers, eval_batch_size: DataLoader workers and queries per evaluation batch.
        cache_dir: where the parsed arrays are cached (None: the user cache folder,
            ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``: :func:`~fccolit.io.default_cache_dir`).

    Raises:
        ValueError: ``queries_per_batch`` or ``num_positives`` below 1, or ``top_k`` below 1 (not None).

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.datamodules import MSLRDataModule
        >>> from fccolit.testing.ranking import write_mslr_fold
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_mslr_fold(pathlib.Path(folder))
        ...     MSLRDataModule(folder, num_positives=0, cache_dir=folder)
        Traceback (most recent call last):
        ...
        ValueError: num_positives must be positive, got 0
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    summary_unit = "queries"

    def __init__(
        self,
        queries_per_batch: int,
        num_positives: int,
        num_batches: int | None,
        top_k: int | None,
        seed: int,
        num_workers: int,
        eval_batch_size: int,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        if int(queries_per_batch) < 1:
            raise ValueError(f"queries_per_batch must be positive, got {queries_per_batch}")
        if int(num_positives) < 1:
            raise ValueError(f"num_positives must be positive, got {num_positives}")
        if top_k is not None and int(top_k) < 1:
            raise ValueError(f"top_k must be positive or None, got {top_k}")
        self.queries_per_batch, self.num_positives = int(queries_per_batch), int(num_positives)
        self.num_batches, self.top_k, self.seed = num_batches, top_k, int(seed)
        self._cache_dir = cache_dir
        self.train_num_relevant: np.ndarray | None = None

    def _cached(self, root: Path, files: Sequence[Path], options: Mapping[str, Any], prefix: str,
                build: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The arrays of ``build`` through the atomic cache, keyed by ``files`` and ``options``."""
        self.cache_dir = Path(self._cache_dir) if self._cache_dir is not None else default_cache_dir()
        self.cache_key = cache_key(files, options, prefix=prefix)
        return cached_arrays(self.cache_dir, self.cache_key, build)

    def _set_sizes(self, sizes: Mapping[str, int]) -> None:
        """:attr:`sizes` (and one attribute per size); ``top_k`` joins them when set, so an algorithm can check
        that its K is the K of the batches' ``ideal_dcg_at_k``."""
        self.sizes = {k: int(v) for k, v in sizes.items()}
        if self.top_k is not None:
            self.sizes["top_k"] = int(self.top_k)
        for name, value in self.sizes.items():
            setattr(self, name, value)

    @property
    def eligible_queries(self) -> np.ndarray:
        """Query ids with at least one relevant training item (those the training sampler draws)."""
        return np.flatnonzero(np.asarray(self.train_num_relevant) > 0)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        return QueryBatchSampler(
            self.eligible_queries, self.queries_per_batch, num_batches=self.num_batches, seed=self.seed
        )

    def prepare_data(self) -> None:
        """Nothing left to do: the cache entry was written (or found) in ``__init__``."""


#: protocol → (num_test, num_val, eval_negatives)
PROTOCOLS = {
    "paper": (1, 1, None),
    "libauc": (5, 5, 1000),
}


class RecommendationDataModule(RankingDataModule):
    """Explicit-feedback recommendation as ranking: every user is a query over all items.

    Protocols (``protocol``; ``num_test``, ``num_val`` and ``eval_negatives`` override its numbers):

    * ``"paper"`` (Qiu et al., ICML 2022, arXiv:2202.12183, §7.2): leave-one-out by time: each user's latest rating is
      the test item, the one before it the validation item, the rest train; evaluation ranks **all** items the user
      did not rate before (full ranking, training items excluded), NDCG@{10, 20, 50}.
    * ``"libauc"`` (LibAUC's MovieLens pipeline, ``libauc/datasets/movielens.py``): the last 5 ratings are the test
      items, the 5 before them the validation items, and a user's first rating always stays in training; evaluation
      ranks the held-out items among 1000 items the user never rated, drawn once with ``eval_negatives_seed`` (fixed
      in the cache).

    Users with fewer ratings than ``num_test + num_val + 1`` follow ``short_users`` (default ``"partial"``: they
    keep one training rating and hold out what is left, test first; ``"drop"``: removed; ``"train"``: all their
    ratings train). Relevance: ``"graded"`` (y = rating, gain 2^y − 1, the papers' and LibAUC's choice) or
    ``"binary"`` (y = 1 for a rating ≥ ``relevance_threshold``, else 0; an assumption of this library, for
    ReChorus-style evaluation). Training draws P relevant items and M items the user has not rated in training
    (paper: "1000 sampled unrated items"; the paper code uses 10 positives and 300 negatives).

    Sizes (:attr:`sizes`, also attributes): ``num_users``, ``num_items``, ``num_queries`` (= ``num_users``),
    ``num_pairs`` (relevant training (user, item) pairs: the rows of SONG's state), ``top_k`` when set, and
    ``eval_negatives`` when evaluation ranks sampled candidates (absent: full ranking over all items), so that a
    model builds only the metrics its evaluation batches feed.

    Subclasses (:class:`~fccolit.datamodules.movielens.MovieLensDataModule`,
    :class:`~fccolit.datamodules.netflix.NetflixDataModule`) take their own file arguments and forward every other
    keyword argument here (``**kwargs``: the CLI lists them under the subclass too), then find and parse their files
    and call :meth:`_load` from their ``__init__``.

    Args:
        protocol: ``"paper"`` (leave-one-out by time, full-ranking evaluation) or ``"libauc"`` (last 5 test, 5
            before them validation, 1000 sampled unrated evaluation negatives).
        num_test: ratings held out per user for testing (None: the protocol's, 1 or 5).
        num_val: ratings held out per user for validation (None: the protocol's, 1 or 5).
        short_users: users with fewer than ``num_test + num_val + 1`` ratings: ``"partial"``, ``"drop"`` or
            ``"train"``.
        relevance: ``"graded"`` (y = rating) or ``"binary"`` (y = 1[rating ≥ relevance_threshold]).
        relevance_threshold: threshold of binary relevance (4.0: an assumption, ReChorus' MovieLens notebook).
        min_ratings: drop users with fewer ratings (MovieLens releases already keep users with ≥ 20).
        eval_negatives: sampled evaluation candidates per user (None: the protocol's; 0: full ranking).
        eval_negatives_seed: seed of those candidates (LibAUC's ``random_seed=123``).
        queries_per_batch: users per global training batch (paper: 256).
        num_positives: P, relevant items per user in a training batch (paper: "a few (e.g., 10)").
        num_negatives: M, items the user has not rated, per user (paper: 1000; the paper's code: 300).
        num_batches: training batches per epoch (None: one pass over the users with a relevant training item).
        top_k: K of ``ideal_dcg_at_k`` (K-SONG: 300 in the paper).
        seed: seeds the training stream.
        num_workers: DataLoader workers.
        eval_batch_size: users per evaluation batch (full ranking scores ``[eval_batch_size, num_items]`` at once).
        cache_dir: cache location (None: the user cache folder,
            ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``: :func:`~fccolit.io.default_cache_dir`).

    Raises:
        ValueError: the checks of :class:`RankingDataModule`; then, in :meth:`_load` (when the subclass has found its
            files): ``protocol``, ``short_users`` or ``relevance`` not one of the listed values; ``num_negatives``,
            ``num_test`` or ``num_val`` below 0; no rating; no user with ``min_ratings`` ratings; no relevant
            training (user, item) pair.

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.datamodules import MovieLensDataModule
        >>> from fccolit.testing.ranking import write_movielens_csv
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_movielens_csv(pathlib.Path(folder))
        ...     MovieLensDataModule(folder, num_negatives=-1, cache_dir=folder)
        Traceback (most recent call last):
        ...
        ValueError: num_negatives must be >= 0, got -1
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    def __init__(
        self,
        protocol: Literal["paper", "libauc"] = "paper",
        num_test: int | None = None,
        num_val: int | None = None,
        short_users: Literal["partial", "drop", "train"] = "partial",
        relevance: Literal["graded", "binary"] = "graded",
        relevance_threshold: float = 4.0,
        min_ratings: int = 1,
        eval_negatives: int | None = None,
        eval_negatives_seed: int = 123,
        queries_per_batch: int = 256,
        num_positives: int = 10,
        num_negatives: int = 1000,
        num_batches: int | None = None,
        top_k: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 256,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(
            queries_per_batch, num_positives, num_batches, top_k, seed, num_workers, eval_batch_size, cache_dir
        )
        self.protocol, self.short_users, self.relevance = protocol, short_users, relevance
        self.relevance_threshold, self.min_ratings = relevance_threshold, min_ratings
        self.eval_negatives_seed = eval_negatives_seed
        # resolved against the protocol (and checked) in _load, once the subclass found its files
        self._num_test, self._num_val, self._eval_negatives = num_test, num_val, eval_negatives
        self._num_negatives = num_negatives

    def _load(
        self,
        root: Path,
        files: Sequence[Path],
        read: Callable[[], Ratings],
        prefix: str,
        extra_options: Mapping[str, Any] | None = None,
        test_mask: Callable[[Ratings], np.ndarray] | None = None,
    ) -> None:
        """Split and cache the ratings of ``files`` (``read`` parses them; ``prefix`` names the cache entry), fill
        :attr:`sizes`; a subclass calls it from its ``__init__`` once it found its files.

        Raises:
            ValueError: the training split has no relevant (user, item) pair (named after ``files[0]``).
        """
        check_choice("protocol", self.protocol, sorted(PROTOCOLS))
        default_test, default_val, default_negatives = PROTOCOLS[self.protocol]
        self.num_test = default_test if self._num_test is None else int(self._num_test)
        self.num_val = default_val if self._num_val is None else int(self._num_val)
        given = self._eval_negatives
        self.eval_negatives = default_negatives if given is None else (int(given) or None)
        if int(self._num_negatives) < 0:
            raise ValueError(f"num_negatives must be >= 0, got {self._num_negatives}")
        self.num_negatives = int(self._num_negatives)
        options = {
            "reader": prefix,
            "num_test": self.num_test,
            "num_val": self.num_val,
            "short_users": self.short_users,
            "relevance": self.relevance,
            "relevance_threshold": float(self.relevance_threshold) if self.relevance == "binary" else None,
            "min_ratings": int(self.min_ratings),
            "eval_negatives": self.eval_negatives,
            "eval_negatives_seed": int(self.eval_negatives_seed) if self.eval_negatives else None,
            **dict(extra_options or {}),
        }

        def build() -> dict[str, np.ndarray]:
            ratings = read()
            return build_recommendation_arrays(
                ratings,
                num_test=self.num_test,
                num_val=self.num_val,
                short_users=self.short_users,
                relevance=self.relevance,
                relevance_threshold=self.relevance_threshold,
                min_ratings=self.min_ratings,
                eval_negatives=self.eval_negatives,
                eval_negatives_seed=self.eval_negatives_seed,
                test_mask=None if test_mask is None else test_mask(ratings),
            )

        self._arrays = self._cached(root, files, options, prefix, build)
        a = self._arrays
        self.train_num_relevant = np.diff(np.asarray(a["pos_indptr"]))
        num_users = int(a["user_raw"].shape[0])
        self._set_sizes(
            {
                "num_users": num_users,
                "num_items": int(a["item_raw"].shape[0]),
                "num_queries": num_users,
                "num_pairs": int(a["pos_items"].shape[0]),
                # sampled-candidate evaluation (LibAUC's protocol): says so to the model, which then builds the
                # metrics of candidate lists only (SONG's full-ranking NDCG reads batches these splits do not have)
                **({"eval_negatives": int(self.eval_negatives)} if self.eval_negatives else {}),
            }
        )
        self.num_ratings = {s: int(a[f"{s}_items"].shape[0]) for s in ("train", "val", "test")}
        self.num_duplicates = int(a["info_duplicates"])
        self.num_dropped_users = int(a["info_dropped_users"])
        self._require_relevant_pairs(files[0])

    def _require_relevant_pairs(self, path: Path) -> None:
        """Raise, naming ``path``, when the training split has no relevant (user, item) pair (SONG's state and the
        training sampler need at least one)."""
        if self.sizes["num_pairs"] > 0:
            return
        why = (
            f"with relevance='binary' no training rating reaches relevance_threshold={self.relevance_threshold:g}"
            if self.relevance == "binary"
            else "every training rating is 0"
        )
        raise ValueError(
            f"{path}: no relevant training (user, item) pair: {why}; training draws relevant pairs, so lower the "
            "threshold or use relevance='graded'"
        )

    @property
    def user_ids(self) -> np.ndarray:
        """``[num_users]`` raw user id of each user index."""
        return np.asarray(self._arrays["user_raw"])

    @property
    def item_ids(self) -> np.ndarray:
        """``[num_items]`` raw item id of each item index."""
        return np.asarray(self._arrays["item_raw"])

    def setup(self, stage: str | None = None) -> None:
        a = self._arrays
        if self.train_dataset is None:
            self.train_dataset = RecommendationTrainDataset(a, self.num_positives, self.num_negatives, self.top_k)
        if self.eval_negatives:
            width = {s: int(np.diff(np.asarray(a[f"{s}_indptr"])).max(initial=0)) for s in ("val", "test")}
            self.val_dataset = SampledCandidatesEvalDataset(a, "val", width["val"])
            self.test_dataset = SampledCandidatesEvalDataset(a, "test", width["test"])
        else:
            self.val_dataset = FullRankingEvalDataset(a, "val")
            self.test_dataset = FullRankingEvalDataset(a, "test")

    def build_train_sampler(self) -> RankAwareBatchSampler:
        if self.train_dataset is None:
            self.setup("fit")
        return super().build_train_sampler()
