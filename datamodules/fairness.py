"""Tabular fairness data sets with two demographic groups: UCI Adult (by sex) and ProPublica COMPAS (by race).

Used for AUC maximization under ROC-fairness constraints (Chen et al., NeurIPS 2025, arXiv:2506.02504, Appendix F.2,
:class:`~fccolit.objectives.constrained.ROCFairnessAUCObjective`). Files (no download: get them once):

* **Adult** — ``adult.data`` and ``adult.test`` from the UCI repository, https://archive.ics.uci.edu/dataset/2/adult
  (32,561 and 16,281 rows). Format: 15 comma-separated fields with a space after each comma (age, workclass,
  fnlwgt, education, education-num, marital-status, occupation, relationship, race, sex, capital-gain,
  capital-loss, hours-per-week, native-country, income); ``?`` marks a missing value; ``adult.test`` starts with
  the line ``|1x3 Cross validator`` and its labels end with a period (``>50K.``); both files end with an empty line.
* **COMPAS** — ``compas-scores-two-years.csv`` from ProPublica, https://github.com/propublica/compas-analysis
  (7,214 rows, 53 columns; the header repeats ``decile_score`` and ``priors_count``: the first occurrence is used).
  A CSV with quoted fields (charge descriptions hold commas).

Preprocessing (cached, keyed by the raw files and every option below):

* Adult: label ``y = 1`` for ``>50K``; group 1 = Female, 0 = Male; continuous fields standardized (statistics of
  the training split), categorical fields one-hot over the values of ``adult.data`` (``?`` is a category of its
  own with ``missing="keep"``, the default, which keeps all 32,561 / 16,281 rows; ``missing="drop"`` drops rows
  with a ``?``); a value seen only in ``adult.test`` gets an all-zero block. The validation split is
  ``val_fraction`` of ``adult.data`` (stratified by label); the test split is ``adult.test``.
* COMPAS: ProPublica's filter (``propublica_filter=True``: ``|days_b_screening_arrest| ≤ 30``, ``is_recid ≠ −1``,
  ``c_charge_degree ≠ "O"``, ``score_text ≠ "N/A"``; 6,172 rows of the real file); label ``y = two_year_recid``;
  group 0 = Caucasian, 1 = every other race; features: age, juv_fel_count, juv_misd_count, juv_other_count,
  priors_count (standardized) and one-hot sex, age_cat, c_charge_degree, race. COMPAS scores (decile_score,
  score_text) and outcomes (is_recid, ...) are not features. Stratified train / validation / test splits.
* ``include_group_feature=False`` drops the protected attribute (sex / race) from the features.

Readers: :mod:`fccolit.io.fairness` (errors name the file, the line and the field). Small files in the exact real
formats: :func:`fccolit.testing.write_adult_files` and :func:`fccolit.testing.write_compas_file`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fccolit._checks import check_choice
from fccolit.data import binary_fields, binary_sizes
from fccolit.datasets.splits import class_splits
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.fairness import (
    ADULT_CATEGORICAL, ADULT_CONTINUOUS, ADULT_URL, COMPAS_CATEGORICAL, COMPAS_CONTINUOUS, COMPAS_URL, Table,
    missing_file_error, parse_adult, parse_compas,
)
from fccolit.io.paths import is_data_file

from fccolit.datamodules.grouped import GroupedDataModule

__all__ = ["FairnessDataModule"]

_SPLITS = ("train", "val", "test")


class FairnessDataModule(GroupedDataModule):
    """UCI Adult or ProPublica COMPAS with a binary label ``y`` and a binary ``group`` (see the module docstring).

    Batch fields: ``x`` ``[B, D]`` float32, ``y`` ``[B]`` long in {0, 1}, ``group`` ``[B]`` long in {0, 1}, and
    ``index``, ``pos_index``, ``neg_index`` (:func:`fccolit.data.binary_fields`). Sizes (available right after
    construction, for the CLI's links): ``num_samples``, ``num_positives``, ``num_negatives``, ``num_features``
    (training split) and ``num_groups`` = 2. Training batches are shuffled batches of ``batch_size`` (the paper's
    128) unless ``groups_per_batch`` is set (:class:`~fccolit.datamodules.grouped.GroupedDataModule`).

    Args:
        root: folder with ``adult.data`` and ``adult.test``, or with ``compas-scores-two-years.csv``.
        dataset: ``"adult"`` or ``"compas"``.
        val_fraction: share of the training file (Adult) or of the data (COMPAS) used for validation.
        test_fraction: share of the data used for testing (COMPAS only; Adult has ``adult.test``).
        missing: Adult's ``?`` values: ``"keep"`` (a category of its own) or ``"drop"`` (drop the row).
        include_group_feature: keep the protected attribute among the features.
        propublica_filter: apply ProPublica's row filter to COMPAS.
        cache_dir: where the parsed arrays are cached (None: the user cache folder,
            ``$FCCOLIT_CACHE_DIR`` or ``~/.cache/fccolit``: :func:`~fccolit.io.default_cache_dir`).
        stratify_by_cell: batches stratified by (group × class) cell, every cell in every batch (and in each half
            of it; see :class:`~fccolit.datamodules.grouped.GroupedDataModule`). Plain shuffled batches of 128 cut
            in ALEXR2's two halves of 64 miss Adult's rarest cell (women with income > 50K) in one half of about
            18% of the steps, and those TPR constraints then sit that step out.
        batch_size, groups_per_batch, samples_per_group, paired, num_batches, seed, num_workers, eval_batch_size:
            see :class:`~fccolit.datamodules.grouped.GroupedDataModule`.

    Raises:
        ValueError: ``dataset`` or ``missing`` not one of the listed values; ``val_fraction`` (and, for COMPAS,
            ``test_fraction``) leaving no training data; a training split without both labels and both groups; the
            checks of :class:`~fccolit.datamodules.grouped.GroupedDataModule`.
        FileNotFoundError: the data set's files are not in ``root`` (the error lists the folder and the download
            page).

    Example:
        >>> import tempfile
        >>> from fccolit.testing.tabular import write_adult_files
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_adult_files(folder, num_train=60, num_test=30)  # small adult.data and adult.test
        ...     FairnessDataModule(folder, cache_dir=folder).sizes
        {'num_samples': 54, 'num_positives': 26, 'num_negatives': 28, 'num_features': 50, 'num_groups': 2}
    """

    def __init__(
        self,
        root: str | os.PathLike,
        dataset: Literal["adult", "compas"] = "adult",
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        missing: Literal["keep", "drop"] = "keep",
        include_group_feature: bool = True,
        propublica_filter: bool = True,
        batch_size: int = 128,
        groups_per_batch: int | None = None,
        samples_per_group: int = 32,
        paired: bool = False,
        num_batches: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        eval_batch_size: int = 4096,
        cache_dir: str | os.PathLike | None = None,
        stratify_by_cell: bool = False,
    ) -> None:
        super().__init__(
            batch_size=batch_size, groups_per_batch=groups_per_batch, samples_per_group=samples_per_group,
            paired=paired, num_batches=num_batches, seed=seed, num_workers=num_workers, eval_batch_size=eval_batch_size,
            stratify_by_cell=stratify_by_cell,
        )
        check_choice("dataset", dataset, ("adult", "compas"))
        check_choice("missing", missing, ("keep", "drop"))
        held_out = test_fraction if dataset == "compas" else 0.0
        if not (0.0 <= val_fraction < 1.0 and 0.0 <= held_out < 1.0 and val_fraction + held_out < 1.0):
            raise ValueError(f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must leave training data")
        self.root, self.dataset = Path(root), dataset
        self.val_fraction, self.test_fraction = float(val_fraction), float(held_out)
        self.missing, self.include_group_feature, self.propublica_filter = missing, include_group_feature, propublica_filter
        if dataset == "adult":
            self.files = [self.root / "adult.data", self.root / "adult.test"]
            for f in self.files:
                if not is_data_file(f):
                    raise missing_file_error(f, "UCI Adult", ADULT_URL)
        else:
            self.files = [self.root / "compas-scores-two-years.csv"]
            if not is_data_file(self.files[0]):
                raise missing_file_error(self.files[0], "ProPublica COMPAS", COMPAS_URL)
        options = {
            "reader": f"fairness-{dataset}",
            "version": 1,
            "val_fraction": self.val_fraction,
            "test_fraction": self.test_fraction,
            "missing": missing if dataset == "adult" else None,
            "propublica_filter": propublica_filter if dataset == "compas" else None,
            "include_group_feature": bool(include_group_feature),
            "seed": int(seed),
        }
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_key = cache_key(self.files, options, prefix=f"fairness-{dataset}")
        self._arrays = cached_arrays(self.cache_dir, self.cache_key, self._build)
        self.feature_names = [str(n) for n in self._arrays["feature_names"]]
        self.sizes = {
            **binary_sizes({"x": self._arrays["x_train"], "y": self._arrays["y_train"]}),
            "num_groups": 2,
        }

    # ------------------------------------------------------------------ building the arrays (cache miss)
    def _build(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([int(self.seed), 0xFA1])
        if self.dataset == "adult":
            train = parse_adult(self.files[0], self.missing)
            test = parse_adult(self.files[1], self.missing)
            parts = class_splits(train.y, {"val": self.val_fraction}, rng)
            tables = {"train": (train, parts["train"]), "val": (train, parts["val"]), "test": (test, np.arange(len(test)))}
            continuous, categorical, vocab_source = ADULT_CONTINUOUS, ADULT_CATEGORICAL, train
            protected = "sex"
        else:
            data = parse_compas(self.files[0], self.propublica_filter)
            parts = class_splits(data.y, {"val": self.val_fraction, "test": self.test_fraction}, rng)
            tables = {s: (data, parts[s]) for s in _SPLITS}
            continuous, categorical, vocab_source = COMPAS_CONTINUOUS, COMPAS_CATEGORICAL, data
            protected = "race"
        if not self.include_group_feature:
            categorical = tuple(c for c in categorical if c != protected)
        vocab = {c: sorted(set(vocab_source.columns[c])) for c in categorical}
        names = list(continuous) + [f"{c}={v}" for c in categorical for v in vocab[c]]

        def encode(table: Table, rows: np.ndarray) -> np.ndarray:
            numeric = np.asarray([[float(table.columns[c][r]) for c in continuous] for r in rows], dtype=np.float64)
            blocks = [numeric.reshape(len(rows), len(continuous))]
            for c in categorical:
                lookup = {v: i for i, v in enumerate(vocab[c])}
                onehot = np.zeros((len(rows), len(vocab[c])), dtype=np.float64)
                for k, r in enumerate(rows):
                    i = lookup.get(table.columns[c][r])
                    if i is not None:
                        onehot[k, i] = 1.0
                blocks.append(onehot)
            return np.concatenate(blocks, axis=1)

        encoded = {s: encode(table, rows) for s, (table, rows) in tables.items()}
        train_numeric = encoded["train"][:, : len(continuous)]
        mean, std = train_numeric.mean(axis=0), train_numeric.std(axis=0)
        std[std == 0] = 1.0
        arrays: dict[str, np.ndarray] = {"feature_names": np.asarray(names), "norm_mean": mean, "norm_std": std}
        for split, (table, rows) in tables.items():
            x = encoded[split]
            x[:, : len(continuous)] = (x[:, : len(continuous)] - mean) / std
            y, group = table.y[rows], table.group[rows]
            if split == "train" and not (0 < int(y.sum()) < y.size and 0 < int(group.sum()) < group.size):
                raise ValueError(
                    f"{self.files[0]}: the training split needs both labels and both groups "
                    f"({int(y.sum())} positives and {int(group.sum())} rows of group 1 among {y.size})"
                )
            arrays[f"x_{split}"] = x.astype(np.float32)
            arrays[f"y_{split}"], arrays[f"group_{split}"] = y, group
            arrays[f"line_{split}"] = table.lines[rows]
        return arrays

    def split_source(self, split: str) -> str | None:
        """``adult.data`` (``adult.test`` for the test split) or the COMPAS CSV; the validation split (and COMPAS'
        test split) held out of it."""
        if split == "train" or (split == "test" and len(self.files) > 1):
            return str(self.files[0] if split == "train" else self.files[1])
        return f"held out of {self.files[0]}"

    def setup(self, stage: str | None = None) -> None:
        if not self._splits:
            for s in _SPLITS:
                x = torch.from_numpy(np.array(self._arrays[f"x_{s}"], dtype=np.float32))
                y = torch.from_numpy(np.asarray(self._arrays[f"y_{s}"], dtype=np.int64))
                group = torch.from_numpy(np.asarray(self._arrays[f"group_{s}"], dtype=np.int64))
                self._splits[s] = {**binary_fields(x, y), "group": group}
        super().setup(stage)
