"""Tabular fairness data sets with two demographic groups: UCI Adult (by sex) and ProPublica COMPAS (by race).

Used for AUC maximization under ROC-fairness constraints (seed 004 Appendix F.2,
:class:`~fccolit.objectives.constrained.ROCFairnessAUC`). Files (no download: get them once):

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

Errors name the file, the line and the field. ``write_adult_files`` and ``write_compas_file`` write small files in
the exact real formats (tests, examples).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fccolit.data import binary_fields, binary_sizes
from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.libsvm import fits_storage

from fccolit.datamodules.grouped import GroupedDataModule

__all__ = [
    "FairnessDataModule",
    "ADULT_COLUMNS",
    "COMPAS_COLUMNS",
    "parse_adult",
    "parse_compas",
    "write_adult_files",
    "write_compas_file",
]

ADULT_URL = "https://archive.ics.uci.edu/dataset/2/adult"
COMPAS_URL = "https://github.com/propublica/compas-analysis"
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation", "relationship",
    "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
)
ADULT_CONTINUOUS = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country")
#: The header of ``compas-scores-two-years.csv`` (ProPublica), in order.
COMPAS_COLUMNS = (
    "id", "name", "first", "last", "compas_screening_date", "sex", "dob", "age", "age_cat", "race", "juv_fel_count",
    "decile_score", "juv_misd_count", "juv_other_count", "priors_count", "days_b_screening_arrest", "c_jail_in",
    "c_jail_out", "c_case_number", "c_offense_date", "c_arrest_date", "c_days_from_compas", "c_charge_degree",
    "c_charge_desc", "is_recid", "r_case_number", "r_charge_degree", "r_days_from_arrest", "r_offense_date",
    "r_charge_desc", "r_jail_in", "r_jail_out", "violent_recid", "is_violent_recid", "vr_case_number",
    "vr_charge_degree", "vr_offense_date", "vr_charge_desc", "type_of_assessment", "decile_score", "score_text",
    "screening_date", "v_type_of_assessment", "v_decile_score", "v_score_text", "v_screening_date", "in_custody",
    "out_custody", "priors_count", "start", "end", "event", "two_year_recid",
)
COMPAS_CONTINUOUS = ("age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count")
COMPAS_CATEGORICAL = ("sex", "age_cat", "c_charge_degree", "race")
_COMPAS_FILTER = ("days_b_screening_arrest", "is_recid", "score_text")
_SPLITS = ("train", "val", "test")


class _Table:
    """Parsed rows: ``columns[name]`` (list of str), ``y`` / ``group`` (int8 arrays) and source ``lines``."""

    def __init__(self, columns: dict[str, list[str]], y: list[int], group: list[int], lines: list[int]) -> None:
        self.columns, self.lines = columns, np.asarray(lines, dtype=np.int64)
        self.y, self.group = np.asarray(y, dtype=np.int8), np.asarray(group, dtype=np.int8)

    def __len__(self) -> int:
        return self.y.size


def _missing(path: Path, what: str, url: str) -> FileNotFoundError:
    folder = path.parent
    listing = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    where = f"Files in {folder}: {', '.join(listing) or '(none)'}." if listing is not None else f"{folder} does not exist."
    return FileNotFoundError(f"{what} file not found: {path}. {where} Download it from {url} into {folder}.")


def _number(text: str, path: Path, line: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}, line {line}, field '{field}': cannot read {text!r} as a number") from None
    if not fits_storage(value):  # nan, inf, or beyond the float32 feature matrix (1e300)
        raise ValueError(
            f"{path}, line {line}, field '{field}': {text!r} is not a finite number within the float32 range of the "
            "features (|value| <= 3.4e38)"
        )
    return value


def parse_adult(path: str | os.PathLike, missing: Literal["keep", "drop"] = "keep") -> _Table:
    """Read ``adult.data`` or ``adult.test``: skips ``|`` comment lines and empty lines, strips the test labels'
    period. Continuous fields are checked to be numbers; ``?`` is kept as a category or drops the row."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "UCI Adult", ADULT_URL)
    columns: dict[str, list[str]] = {c: [] for c in ADULT_COLUMNS[:-1]}
    y, group, lines = [], [], []
    with open(path, encoding="utf-8", errors="strict") as f:
        for line_no, line in enumerate(f, start=1):
            text = line.strip()
            if not text or text.startswith("|"):
                continue
            fields = [v.strip() for v in text.split(",")]
            if len(fields) != len(ADULT_COLUMNS):
                raise ValueError(
                    f"{path}, line {line_no}: expected {len(ADULT_COLUMNS)} comma-separated fields "
                    f"({', '.join(ADULT_COLUMNS)}), got {len(fields)}"
                )
            record = dict(zip(ADULT_COLUMNS, fields))
            label = record["income"].rstrip(".")
            if label not in (">50K", "<=50K"):
                raise ValueError(f"{path}, line {line_no}, field 'income': expected '>50K' or '<=50K', got {record['income']!r}")
            for name in ADULT_CONTINUOUS:
                _number(record[name], path, line_no, name)
            if record["sex"] not in ("Male", "Female"):
                raise ValueError(f"{path}, line {line_no}, field 'sex': expected 'Male' or 'Female', got {record['sex']!r}")
            if missing == "drop" and any(record[c] == "?" for c in ADULT_CATEGORICAL):
                continue
            for name in columns:
                columns[name].append(record[name])
            y.append(int(label == ">50K"))
            group.append(int(record["sex"] == "Female"))
            lines.append(line_no)
    if not y:
        raise ValueError(f"{path}: no data rows")
    return _Table(columns, y, group, lines)


def parse_compas(path: str | os.PathLike, propublica_filter: bool = True) -> _Table:
    """Read ``compas-scores-two-years.csv`` (columns found by name, first occurrence of a repeated name)."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path, "ProPublica COMPAS", COMPAS_URL)
    needed = COMPAS_CONTINUOUS + COMPAS_CATEGORICAL + ("two_year_recid",) + (_COMPAS_FILTER if propublica_filter else ())
    columns: dict[str, list[str]] = {c: [] for c in COMPAS_CONTINUOUS + COMPAS_CATEGORICAL}
    y, group, lines = [], [], []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: the file is empty (expected the header line of {COMPAS_URL}'s CSV)")
        position: dict[str, int] = {}
        for i, name in enumerate(header):
            position.setdefault(name.strip(), i)
        absent = [c for c in needed if c not in position]
        if absent:
            raise ValueError(f"{path}, line 1: the header has no column {', '.join(repr(c) for c in absent)}")
        for row in reader:
            line_no = reader.line_num
            if not row or all(not v.strip() for v in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}, line {line_no}: expected {len(header)} fields as in the header, got {len(row)}")
            record = {c: row[position[c]].strip() for c in needed}
            if propublica_filter:
                days = record["days_b_screening_arrest"]
                if days in ("", "NA") or abs(_number(days, path, line_no, "days_b_screening_arrest")) > 30:
                    continue
                if _number(record["is_recid"], path, line_no, "is_recid") == -1:
                    continue
                if record["c_charge_degree"] == "O" or record["score_text"] == "N/A":
                    continue
            label = record["two_year_recid"]
            if label not in ("0", "1"):
                raise ValueError(f"{path}, line {line_no}, field 'two_year_recid': expected 0 or 1, got {label!r}")
            for name in COMPAS_CONTINUOUS:
                _number(record[name], path, line_no, name)
            for name in columns:
                columns[name].append(record[name])
            y.append(int(label))
            group.append(int(record["race"] != "Caucasian"))
            lines.append(line_no)
    if not y:
        raise ValueError(f"{path}: no data rows" + (" left after ProPublica's filter" if propublica_filter else ""))
    return _Table(columns, y, group, lines)


def _stratified(y: np.ndarray, fractions: dict[str, float], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Row indices per split: each class shuffled and cut by ``fractions``; the rest is ``"train"``."""
    parts: dict[str, list[np.ndarray]] = {"train": [], **{s: [] for s in fractions}}
    for cls in (0, 1):
        members = np.flatnonzero(y == cls)
        members = members[rng.permutation(members.size)]
        start = 0
        for split, fraction in fractions.items():
            count = round(fraction * members.size)
            parts[split].append(members[start : start + count])
            start += count
        parts["train"].append(members[start:])
    return {s: np.sort(np.concatenate(p)) for s, p in parts.items()}


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
        cache_dir: where the parsed arrays are cached (None: ``root/.fccolit-cache``, or ``~/.cache/fccolit`` when
            ``root`` is read-only).
        stratify_by_cell: batches stratified by (group × class) cell, every cell in every batch (and in each half
            of it; see :class:`~fccolit.datamodules.grouped.GroupedDataModule`). Plain shuffled batches of 128 cut
            in ALEXR2's two halves of 64 miss Adult's rarest cell (women with income > 50K) in one half of about
            18% of the steps, and those TPR constraints then sit that step out.
        (the rest): see :class:`~fccolit.datamodules.grouped.GroupedDataModule`.
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
        if dataset not in ("adult", "compas"):
            raise ValueError(f"dataset must be 'adult' or 'compas', got {dataset!r}")
        if missing not in ("keep", "drop"):
            raise ValueError(f"missing must be 'keep' or 'drop', got {missing!r}")
        held_out = test_fraction if dataset == "compas" else 0.0
        if not (0.0 <= val_fraction < 1.0 and 0.0 <= held_out < 1.0 and val_fraction + held_out < 1.0):
            raise ValueError(f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must leave training data")
        self.root, self.dataset = Path(root), dataset
        self.val_fraction, self.test_fraction = float(val_fraction), float(held_out)
        self.missing, self.include_group_feature, self.propublica_filter = missing, include_group_feature, propublica_filter
        if dataset == "adult":
            self.files = [self.root / "adult.data", self.root / "adult.test"]
            for f in self.files:
                if not f.is_file():
                    raise _missing(f, "UCI Adult", ADULT_URL)
        else:
            self.files = [self.root / "compas-scores-two-years.csv"]
            if not self.files[0].is_file():
                raise _missing(self.files[0], "ProPublica COMPAS", COMPAS_URL)
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
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(self.root)
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
            parts = _stratified(train.y, {"val": self.val_fraction}, rng)
            tables = {"train": (train, parts["train"]), "val": (train, parts["val"]), "test": (test, np.arange(len(test)))}
            continuous, categorical, vocab_source = ADULT_CONTINUOUS, ADULT_CATEGORICAL, train
            protected = "sex"
        else:
            data = parse_compas(self.files[0], self.propublica_filter)
            parts = _stratified(data.y, {"val": self.val_fraction, "test": self.test_fraction}, rng)
            tables = {s: (data, parts[s]) for s in _SPLITS}
            continuous, categorical, vocab_source = COMPAS_CONTINUOUS, COMPAS_CATEGORICAL, data
            protected = "race"
        if not self.include_group_feature:
            categorical = tuple(c for c in categorical if c != protected)
        vocab = {c: sorted(set(vocab_source.columns[c])) for c in categorical}
        names = list(continuous) + [f"{c}={v}" for c in categorical for v in vocab[c]]

        def encode(table: _Table, rows: np.ndarray) -> np.ndarray:
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

    def setup(self, stage: str | None = None) -> None:
        if not self._splits:
            for s in _SPLITS:
                x = torch.from_numpy(np.array(self._arrays[f"x_{s}"], dtype=np.float32))
                y = torch.from_numpy(np.asarray(self._arrays[f"y_{s}"], dtype=np.int64))
                group = torch.from_numpy(np.asarray(self._arrays[f"group_{s}"], dtype=np.int64))
                self._splits[s] = {**binary_fields(x, y), "group": group}
        super().setup(stage)


# ---------------------------------------------------------------------- small files in the real formats
_ADULT_VALUES = {
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov", "?"],
    "education": ["Bachelors", "HS-grad", "11th", "Masters", "Some-college", "Assoc-voc", "Doctorate"],
    "marital-status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty", "?"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "native-country": ["United-States", "Mexico", "Philippines", "Germany", "India", "?"],
}


def _adult_rows(count: int, rng: np.random.Generator, test: bool) -> list[str]:
    rows = []
    for _ in range(count):
        female = rng.random() < 0.33
        age = int(rng.integers(17, 80))
        edu_num = int(rng.integers(1, 17))
        hours = int(rng.integers(10, 80))
        gain = int(rng.choice([0, 0, 0, int(rng.integers(1000, 20000))]))
        latent = 0.08 * (age - 40) + 0.45 * (edu_num - 10) + 0.04 * (hours - 40) + 0.0002 * gain - 1.0 * female
        rich = rng.random() < 1.0 / (1.0 + np.exp(-(latent - 1.0)))
        pick = {c: str(rng.choice(v)) for c, v in _ADULT_VALUES.items()}
        label = (">50K" if rich else "<=50K") + ("." if test else "")
        fields = [
            str(age), pick["workclass"], str(int(rng.integers(20000, 500000))), pick["education"], str(edu_num),
            pick["marital-status"], pick["occupation"], pick["relationship"], pick["race"],
            "Female" if female else "Male", str(gain), str(int(rng.choice([0, 0, 1902]))), str(hours),
            pick["native-country"], label,
        ]
        rows.append(", ".join(fields))
    return rows


def write_adult_files(root: str | os.PathLike, num_train: int = 300, num_test: int = 150, seed: int = 0) -> Path:
    """Write ``adult.data`` / ``adult.test`` with generated rows in the exact UCI format (test header line, labels
    with a period, ``?`` values, trailing empty line). Labels depend on age, education, hours, gain and sex."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    (root / "adult.data").write_text("\n".join(_adult_rows(num_train, rng, test=False)) + "\n\n")
    (root / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(_adult_rows(num_test, rng, test=True)) + "\n\n")
    return root


def write_compas_file(root: str | os.PathLike, num_rows: int = 400, seed: int = 0) -> Path:
    """Write ``compas-scores-two-years.csv`` with ProPublica's 53-column header and generated rows (quoted charge
    descriptions with commas, empty and out-of-range ``days_b_screening_arrest``, ``is_recid = -1``, ``"O"``
    charges and ``N/A`` score texts, so the filter has work to do)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    races = ["African-American", "Caucasian", "Hispanic", "Other", "Asian", "Native American"]
    path = root / "compas-scores-two-years.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COMPAS_COLUMNS)
        for i in range(num_rows):
            age = int(rng.integers(18, 70))
            priors = int(rng.poisson(3))
            race = str(rng.choice(races, p=[0.5, 0.34, 0.09, 0.05, 0.01, 0.01]))
            recid = int(rng.random() < 1.0 / (1.0 + np.exp(-(0.25 * priors - 0.04 * (age - 35) - 0.6))))
            days = "" if rng.random() < 0.03 else str(int(rng.choice([-1, 0, -1, 1, -45, 60])))
            row = {c: "" for c in COMPAS_COLUMNS}
            row.update({
                "id": str(i + 1), "name": f"person {i}", "first": "person", "last": str(i),
                "compas_screening_date": "2013-08-14", "sex": "Female" if rng.random() < 0.2 else "Male",
                "dob": "1969-04-19", "age": str(age),
                "age_cat": "Less than 25" if age < 25 else ("Greater than 45" if age > 45 else "25 - 45"),
                "race": race, "juv_fel_count": str(int(rng.poisson(0.1))), "decile_score": str(int(rng.integers(1, 11))),
                "juv_misd_count": str(int(rng.poisson(0.1))), "juv_other_count": str(int(rng.poisson(0.1))),
                "priors_count": str(priors), "days_b_screening_arrest": days,
                "c_charge_degree": str(rng.choice(["F", "M", "F", "M", "O"], p=[0.4, 0.3, 0.1, 0.15, 0.05])),
                "c_charge_desc": "Battery, Domestic" if rng.random() < 0.3 else "Grand Theft (Motor Vehicle)",
                "is_recid": "-1" if rng.random() < 0.02 else str(recid),
                "score_text": "N/A" if rng.random() < 0.01 else str(rng.choice(["Low", "Medium", "High"])),
                "two_year_recid": str(recid), "type_of_assessment": "Risk of Recidivism",
            })
            writer.writerow([row[c] for c in COMPAS_COLUMNS])
    return path
