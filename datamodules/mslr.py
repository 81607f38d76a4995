"""Learning to rank on LETOR-format data: MSLR-WEB30K / WEB10K, Yahoo! LTR, LETOR 4.0, and LightGBM's layout.

Where to get the data (all need a manual download; none may be redistributed, so there is no ``download``):

* MSLR-WEB30K / WEB10K: https://www.microsoft.com/en-us/research/project/mslr/ : ``MSLR-WEB30K.zip``, extracted to
  ``Fold1/`` … ``Fold5/``, each with ``train.txt``, ``vali.txt``, ``test.txt`` (136 features, labels 0–4; WEB30K
  has 31,531 queries and 3,771,126 documents over the three files of a fold).
* Yahoo! Learning to Rank Challenge (C14, Webscope, licence needed): ``set1.train.txt``, ``set1.valid.txt``,
  ``set1.test.txt`` (and ``set2.*``): 700 features (pass ``num_features=700``), labels 0–4.
* LETOR 4.0 (MQ2007 / MQ2008): ``Fold1/`` … with ``train.txt``, ``vali.txt``, ``test.txt``; 46 features, labels
  0–2, lines end with ``#docid = …`` comments.
* LightGBM's layout (e.g. its ``examples/lambdarank``): ``rank.train`` + ``rank.train.query``, ``rank.test`` +
  ``rank.test.query`` (and ``rank.vali`` + ``rank.vali.query`` when there is one).

Layouts found in ``root`` (first match): ``Fold{fold}/train.txt`` · ``train.txt`` (``root`` is a fold) ·
``set{yahoo_set}.train.txt`` · ``rank.train``. Formats: :mod:`fccolit.io.letor`. A layout without a validation
file (LightGBM's example) validates on the test file, as that example's config does.

Protocol (Qiu et al., ICML 2022, arXiv:2202.12183, §7.1 and App. D.2; allRank's reproducibility scripts,
https://github.com/allegro/allRank):

* features normalized per fold with training statistics (``normalize="allrank"``): features are negated when
  listed in ``negative_features`` (allRank's 0-based MSLR list 110–120, 123, 124), then transformed as
  ``log(x + 0.01)`` unless listed in ``no_log_features`` (allRank's list: 5–9, 15, 19, 57, 58, 62, 75, 79, 85,
  95–104, 121, 122, 127, 129, 130) or negative somewhere in the train / validation / test files (allRank's rule),
  then standardized as ``(x − mean) / (std + 1e−6)`` with the training mean and (population) std. The lists refer
  to MSLR's 136 features: for other data pass your own lists, ``normalize="standard"`` (standardization only) or
  None. The transform runs in float64 on the float32 features;
* training slates of ``slate_length`` documents (paper: 100 for MSLR, 40 for Yahoo): ``num_positives`` relevant
  documents first, then uniformly from the rest of the list; shorter lists are padded (schema in
  :mod:`fccolit.datasets.ranking`); evaluation on full lists, NDCG@{1, 3, 5};
* N_q (``num_items``) is the query's full list length (the paper's |S_q|; the paper's code uses the slate length).

Queries without a relevant document (about 3% of MSLR's): they have no (query, relevant document) pair, so they
are never drawn for training (they keep their query ids). In evaluation they are kept by default
(``empty_queries="keep"``, counted in :attr:`empty_queries`): the metric's own policy scores them (0 with
:class:`fccolit.metrics.NDCGScore`'s default ``empty_query="zero"``, 1 with allRank's convention ``empty_query="one"``);
``empty_queries="drop"`` removes them from the evaluation batches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from fccolit._checks import check_choice
from fccolit.datasets.letor import ListEvalDataset, ListwiseTrainDataset, ltr_pair_arrays
from fccolit.io.cache import folder_listing
from fccolit.io.letor import LetorFile, group_by_query, parse_letor, read_lightgbm_ranking
from fccolit.io.paths import is_data_file

from fccolit.datamodules.ranking import RankingDataModule

MSLR_PAGE = "https://www.microsoft.com/en-us/research/project/mslr/"

#: allRank's ``normalize_features.py`` lists (0-based feature indices of MSLR-WEB's 136 features).
ALLRANK_NO_LOG_FEATURES = (5, 6, 7, 8, 9, 15, 19, 57, 58, 62, 75, 79, 85, *range(95, 105), 121, 122, 127, 129, 130)
ALLRANK_NEGATIVE_FEATURES = (*range(110, 121), 123, 124)
_LOG_EPS, _STD_EPS = 1e-2, 1e-6
_SPLITS = ("train", "val", "test")


def detect_letor_layout(
    root: str | os.PathLike, fold: int = 1, yahoo_set: int = 1
) -> tuple[str, dict[str, tuple[Path, Path | None]]]:
    """``(layout, {split: (data file, LightGBM .query file or None)})`` of the data in ``root``.

    Layouts: ``"fold"`` (``Fold{fold}/{train,vali,test}.txt``), ``"flat"`` (``{train,vali,test}.txt``),
    ``"yahoo"`` (``set{n}.{train,valid,test}.txt``), ``"lightgbm"`` (``rank.{train,vali,test}`` + ``.query``). The
    ``"val"`` entry is missing when the layout has no validation file.

    Raises:
        FileNotFoundError: no known layout, or its training or test file is missing (the message lists ``root``).
    """
    root = Path(root)
    candidates = [
        ("fold", root / f"Fold{fold}", {"train": "train.txt", "val": "vali.txt", "test": "test.txt"}, False),
        ("flat", root, {"train": "train.txt", "val": "vali.txt", "test": "test.txt"}, False),
        ("yahoo", root, {s: f"set{yahoo_set}.{n}.txt" for s, n in zip(_SPLITS, ("train", "valid", "test"))}, False),
        ("lightgbm", root, {"train": "rank.train", "val": "rank.vali", "test": "rank.test"}, True),
    ]
    for layout, folder, names, grouped in candidates:
        if not is_data_file(folder / names["train"]):
            continue
        files: dict[str, tuple[Path, Path | None]] = {}
        for split, name in names.items():
            path = folder / name
            alternative = folder / "valid.txt"
            if split == "val" and layout in ("flat", "fold") and not is_data_file(path) and is_data_file(alternative):
                path = alternative
            if is_data_file(path):
                files[split] = (path, path.with_name(path.name + ".query") if grouped else None)
        if "test" not in files:
            raise FileNotFoundError(
                f"{folder / names['train']} has no test file {folder / names['test']} beside it. {folder_listing(folder)}"
            )
        return layout, files
    raise FileNotFoundError(
        f"no learning-to-rank data in {root}: expected Fold{fold}/train.txt (MSLR-WEB10K/30K, LETOR 4.0), train.txt, "
        f"set{yahoo_set}.train.txt (Yahoo! LTR) or rank.train + rank.train.query (LightGBM). {folder_listing(root)} "
        f"MSLR-WEB30K comes from {MSLR_PAGE}: extract MSLR-WEB30K.zip into {root}."
    )


def normalization(
    splits: dict[str, np.ndarray], mode: str | None, no_log: Sequence[int], negative: Sequence[int]
) -> dict[str, np.ndarray]:
    """Normalize the ``[N_s, F]`` float32 feature matrices of ``splits`` **in place** (see the module docstring).

    Returns the parameters: ``norm_negate`` / ``norm_log`` ``[F]`` bool, ``norm_mean`` / ``norm_scale`` ``[F]``
    float64 (the transform is ``(t(x) − mean) / scale`` with ``scale = std + 1e−6``).
    """
    width = splits["train"].shape[1]
    negate = np.zeros(width, dtype=bool)
    log = np.zeros(width, dtype=bool)
    mean, scale = np.zeros(width), np.ones(width)
    if mode is None:
        return {"norm_negate": negate, "norm_log": log, "norm_mean": mean, "norm_scale": scale}
    if mode == "allrank":
        negate[list(negative)] = True
        log[:] = True
        log[list(no_log)] = False
    block = 16
    for lo in range(0, width, block):
        cols = slice(lo, min(lo + block, width))
        parts = {s: x[:, cols].astype(np.float64) for s, x in splits.items()}
        sign = np.where(negate[cols], -1.0, 1.0)
        for s in parts:
            parts[s] *= sign
        nonneg = np.ones(cols.stop - cols.start, dtype=bool)
        for p in parts.values():
            if p.size:
                nonneg &= (p >= 0).all(axis=0)
        log[cols] &= nonneg
        take = log[cols]
        for s in parts:
            parts[s][:, take] = np.log(parts[s][:, take] + _LOG_EPS)
        train = parts["train"]
        mean[cols] = train.mean(axis=0) if train.shape[0] else 0.0
        scale[cols] = (train.std(axis=0) if train.shape[0] else 0.0) + _STD_EPS
        for s, p in parts.items():
            splits[s][:, cols] = ((p - mean[cols]) / scale[cols]).astype(np.float32)
    return {"norm_negate": negate, "norm_log": log, "norm_mean": mean, "norm_scale": scale}


class MSLRDataModule(RankingDataModule):
    """Learning to rank on MSLR-WEB30K / WEB10K (and Yahoo! LTR, LETOR 4.0, LightGBM's layout).

    See the module docstring for the files, the normalization and the policy for queries without relevant
    documents.

    Parsing, normalization and grouping happen in ``__init__`` through the atomic cache (``<cache_dir>/letor-…/``:
    one float32 ``.npy`` of features per split, memory-mapped afterwards), keyed by the split files and every
    option below that changes the arrays; :attr:`sizes` (``num_queries`` (training queries), ``num_features``,
    ``num_pairs`` (relevant training documents), and ``top_k`` when set) exist right after construction.

    Args:
        root: the data folder (e.g. ``MSLR-WEB30K/``, holding ``Fold1/`` …).
        fold: the fold of a ``Fold{k}`` layout.
        yahoo_set: 1 or 2 for Yahoo's ``set{n}.*.txt``.
        num_features: F (None: the widest file; pass 700 for Yahoo).
        normalize: ``"allrank"``, ``"standard"`` or None.
        no_log_features, negative_features: 0-based feature lists of ``"allrank"`` (None: allRank's MSLR lists,
            which need F = 136).
        slate_length: L, documents per training list (paper: 100 MSLR, 40 Yahoo).
        num_positives: P, relevant documents drawn first per list (paper: "a few (e.g., 10)").
        queries_per_batch: queries per global training batch (paper: 64).
        num_batches: training batches per epoch (None: one pass over the queries with a relevant document).
        top_k: K of ``ideal_dcg_at_k`` (K-SONG: 10 in the paper for LTR).
        empty_queries: ``"keep"`` or ``"drop"`` queries without a relevant document from evaluation.
        seed: seeds the training stream.
        num_workers, eval_batch_size: DataLoader workers and queries per evaluation batch.
        cache_dir: cache location (None: the user cache folder,
            ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``: :func:`~fccolit.io.default_cache_dir`).

    Raises:
        FileNotFoundError: ``root`` holds no LETOR layout for ``fold`` / ``yahoo_set``, or a LightGBM data file
            lacks its ``.query`` file.
        ValueError: ``normalize`` or ``empty_queries`` is not one of the listed values; ``slate_length < 1``; a
            split file holds no document; no training query has a relevant document; ``normalize="allrank"`` with
            the default feature lists on data that has not 136 features, or feature indices out of range; the
            checks of :class:`~fccolit.datamodules.ranking.RankingDataModule`.

    Example:
        >>> import pathlib, tempfile
        >>> from fccolit.testing.ranking import write_mslr_fold
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_mslr_fold(pathlib.Path(folder))  # a small Fold1/ of train, vali and test.txt, 136 features
        ...     MSLRDataModule(folder, cache_dir=folder).sizes
        {'num_queries': 30, 'num_features': 136, 'num_pairs': 304}
    """

    def __init__(
        self,
        root: str | os.PathLike,
        fold: int = 1,
        yahoo_set: int = 1,
        num_features: int | None = None,
        normalize: Literal["allrank", "standard"] | None = "allrank",
        no_log_features: Sequence[int] | None = None,
        negative_features: Sequence[int] | None = None,
        slate_length: int = 100,
        num_positives: int = 10,
        queries_per_batch: int = 64,
        num_batches: int | None = None,
        top_k: int | None = None,
        empty_queries: Literal["keep", "drop"] = "keep",
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 64,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(
            queries_per_batch, num_positives, num_batches, top_k, seed, num_workers, eval_batch_size, cache_dir
        )
        check_choice("normalize", normalize, ("allrank", "standard", None))
        check_choice("empty_queries", empty_queries, ("keep", "drop"))
        if int(slate_length) < 1:
            raise ValueError(f"slate_length must be positive, got {slate_length}")
        self.root, self.fold = Path(root), int(fold)
        self.layout, self.files = detect_letor_layout(self.root, self.fold, int(yahoo_set))
        self.val_is_test = "val" not in self.files
        self.slate_length, self.empty_queries_policy = int(slate_length), empty_queries
        self.normalize = normalize
        self._num_features = num_features
        self._no_log = tuple(ALLRANK_NO_LOG_FEATURES if no_log_features is None else no_log_features)
        self._negative = tuple(ALLRANK_NEGATIVE_FEATURES if negative_features is None else negative_features)
        self._default_lists = no_log_features is None or negative_features is None

        raw_files = [p for path, query in self.files.values() for p in (path, query) if p is not None]
        options = {
            "reader": "letor",
            "layout": self.layout,
            "num_features": num_features,
            "normalize": normalize,
            "no_log_features": list(self._no_log) if normalize == "allrank" else None,
            "negative_features": list(self._negative) if normalize == "allrank" else None,
        }
        prefix = f"letor-{self.layout}-{self.root.name}"
        self._arrays = self._cached(self.root, raw_files, options, prefix, self._build)
        a = self._arrays
        self.train_num_relevant = np.diff(np.asarray(a["pos_indptr"]))
        self._set_sizes(
            {
                "num_queries": int(a["train_indptr"].shape[0] - 1),
                "num_features": int(a["train_features"].shape[1]),
                "num_pairs": int(a["pos_docs"].shape[0]),
            }
        )
        self.empty_queries = {s: int((self._num_relevant(s) == 0).sum()) for s in _SPLITS}
        self.num_documents = {s: int(self._split(s, "relevance").shape[0]) for s in _SPLITS}

    # ------------------------------------------------------------------ building the arrays (cache miss)
    def _read(self, split: str) -> LetorFile:
        path, query = self.files[split]
        if self.layout == "lightgbm":
            if query is None or not is_data_file(query):
                raise FileNotFoundError(f"{path} needs its group sizes in {query} (LightGBM's ranking layout)")
            return read_lightgbm_ranking(path, query, num_features=self._num_features)
        return parse_letor(path, num_features=self._num_features)

    def _build(self) -> dict[str, np.ndarray]:
        grouped: dict[str, dict[str, np.ndarray]] = {}
        for split in (s for s in _SPLITS if s in self.files):  # one split in memory twice at most
            p = self._read(split)
            order, indptr, qids = group_by_query(p.qid)
            contiguous = bool((order == np.arange(order.size)).all())  # the usual case: no copy
            x = p.features if contiguous else p.features[order]
            grouped[split] = {"features": x, "relevance": p.relevance[order], "indptr": indptr, "qid": qids}
            del p, x
        width = self._num_features or max(g["features"].shape[1] for g in grouped.values())
        for g in grouped.values():
            if g["features"].shape[1] < width:  # a split without the highest feature index (Yahoo)
                g["features"] = np.pad(g["features"], ((0, 0), (0, width - g["features"].shape[1])))
        for split, g in grouped.items():
            if g["indptr"].size <= 1:
                role = {"train": "training", "val": "validation", "test": "test"}[split]
                raise ValueError(
                    f"{self.files[split][0]}: the {role} file holds no document (is it empty or truncated?); "
                    f"extract it again from the data set's archive"
                )
        if not (grouped["train"]["relevance"] > 0).any():
            raise ValueError(
                f"{self.files['train'][0]}: no query of the training file has a relevant document (every relevance "
                f"label of its {grouped['train']['relevance'].size} documents is 0); training draws (query, relevant "
                "document) pairs, so it needs labels > 0 (is the label column right, or is this an evaluation file?)"
            )
        if self.normalize == "allrank" and self._default_lists and width != 136:
            raise ValueError(
                f"{self.files['train'][0]}: normalize='allrank' uses allRank's MSLR feature lists, which need 136 "
                f"features, but the data has {width}; pass no_log_features= and negative_features= for this data, "
                "or normalize='standard' (standardization only) or None"
            )
        for name, values in (("no_log_features", self._no_log), ("negative_features", self._negative)):
            if self.normalize == "allrank" and any(not 0 <= int(v) < width for v in values):
                raise ValueError(f"{name} must hold 0-based feature indices below {width}, got {sorted(values)}")
        params = normalization(
            {s: g["features"] for s, g in grouped.items()}, self.normalize, self._no_log, self._negative
        )
        arrays: dict[str, np.ndarray] = dict(params)
        for split, g in grouped.items():
            for name, value in g.items():
                arrays[f"{split}_{name}"] = value
        arrays.update(ltr_pair_arrays(grouped["train"]["indptr"], grouped["train"]["relevance"]))
        return arrays

    # ------------------------------------------------------------------ access
    def _split(self, split: str, name: str) -> np.ndarray:
        if split == "val" and self.val_is_test:
            split = "test"
        return self._arrays[f"{split}_{name}"]

    def _num_relevant(self, split: str) -> np.ndarray:
        indptr = np.asarray(self._split(split, "indptr"))
        relevant = (np.asarray(self._split(split, "relevance")) > 0).astype(np.int64)
        csum = np.concatenate([[0], np.cumsum(relevant)])
        return csum[indptr[1:]] - csum[indptr[:-1]]

    def query_ids(self, split: str = "train") -> np.ndarray:
        """The raw query id (``qid``) of each query of ``split``."""
        return np.asarray(self._split(split, "qid"))

    def _eval_dataset(self, split: str) -> ListEvalDataset:
        queries = None
        if self.empty_queries_policy == "drop":
            queries = np.flatnonzero(self._num_relevant(split) > 0)
        return ListEvalDataset(
            self._split(split, "features"), self._split(split, "relevance"), self._split(split, "indptr"), queries
        )

    def setup(self, stage: str | None = None) -> None:
        a = self._arrays
        if self.train_dataset is None:
            pairs = {k: a[k] for k in ("pos_indptr", "pos_docs", "pair_of_doc", "ideal_dcg")}
            self.train_dataset = ListwiseTrainDataset(
                a["train_features"], a["train_relevance"], a["train_indptr"], pairs,
                self.slate_length, self.num_positives, self.top_k,
            )
        self.val_dataset = self._eval_dataset("val")
        self.test_dataset = self._eval_dataset("test")

    def build_train_sampler(self):
        if self.train_dataset is None:
            self.setup("fit")
        return super().build_train_sampler()
