"""Readers of the tabular fairness data sets: UCI Adult and ProPublica COMPAS.

* **Adult** — ``adult.data`` and ``adult.test`` from the UCI repository, https://archive.ics.uci.edu/dataset/2/adult
  (32,561 and 16,281 rows). Format: 15 comma-separated fields with a space after each comma (age, workclass,
  fnlwgt, education, education-num, marital-status, occupation, relationship, race, sex, capital-gain,
  capital-loss, hours-per-week, native-country, income); ``?`` marks a missing value; ``adult.test`` starts with
  the line ``|1x3 Cross validator`` and its labels end with a period (``>50K.``); both files end with an empty line.
* **COMPAS** — ``compas-scores-two-years.csv`` from ProPublica, https://github.com/propublica/compas-analysis
  (7,214 rows, 53 columns; the header repeats ``decile_score`` and ``priors_count``: the first occurrence is used).
  A CSV with quoted fields (charge descriptions hold commas).

Errors name the file, the line and the field.

Why not ``pandas.read_csv``: it reads the real ``adult.data`` about ten times faster than this reader
(``benchmarks/handwritten.py``, timings in ``benchmarks/results/handwritten.md``), but it checks nothing (a
non-numeric age, an unknown income or sex label, a value beyond float32), and ``adult.test``'s header line,
period-suffixed labels and COMPAS's repeated column names need handling either way. These files have 32,561 and 7,214
rows and are parsed once per raw file (the DataModule caches the arrays).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Literal

import numpy as np

from fccolit.io.libsvm import fits_storage
from fccolit.io.paths import is_data_file

__all__ = [
    "ADULT_CATEGORICAL", "ADULT_COLUMNS", "ADULT_CONTINUOUS", "ADULT_URL", "COMPAS_CATEGORICAL", "COMPAS_COLUMNS",
    "COMPAS_CONTINUOUS", "COMPAS_URL", "Table", "missing_file_error", "parse_adult", "parse_compas",
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
COMPAS_FILTER_COLUMNS = ("days_b_screening_arrest", "is_recid", "score_text")


class Table:
    """Parsed rows of :func:`parse_adult` / :func:`parse_compas`: feature columns, label, group and source line.

    ``len()`` is the number of rows N; ``y``, ``group`` and ``lines`` are numpy arrays (int8, int8, int64).

    Args:
        columns: ``{name: [N] list of str}``, the feature fields as written (continuous ones checked to be numbers).
        y: ``[N]`` labels in {0, 1} (Adult: income ``>50K``; COMPAS: ``two_year_recid``).
        group: ``[N]`` protected group in {0, 1} (Adult: female; COMPAS: not Caucasian).
        lines: ``[N]`` 1-based line of each row in the file.

    Raises:
        Nothing itself; the readers raise ``FileNotFoundError`` for a missing file (naming where to download it)
        and ``ValueError`` naming the file, line and field for a malformed row.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fccolit.io.fairness import parse_adult
        >>> rows = ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, "
        ...         "2174, 0, 40, United-States, <=50K\\n"
        ...         "31, Private, 45781, Masters, 14, Never-married, Prof-specialty, Not-in-family, White, Female, "
        ...         "14084, 0, 50, United-States, >50K\\n")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "adult.data"
        ...     _ = path.write_text(rows)
        ...     table = parse_adult(path)
        >>> len(table), table.y.tolist(), table.group.tolist(), table.lines.tolist()
        (2, [0, 1], [0, 1], [1, 2])
        >>> table.columns["education"]
        ['Bachelors', 'Masters']
    """

    def __init__(self, columns: dict[str, list[str]], y: list[int], group: list[int], lines: list[int]) -> None:
        self.columns, self.lines = columns, np.asarray(lines, dtype=np.int64)
        self.y, self.group = np.asarray(y, dtype=np.int8), np.asarray(group, dtype=np.int8)

    def __len__(self) -> int:
        return self.y.size


def missing_file_error(path: Path, what: str, url: str) -> FileNotFoundError:
    """The error for a data file that is not there: names it, lists its folder and says where to get it."""
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


def parse_adult(path: str | os.PathLike, missing: Literal["keep", "drop"] = "keep") -> Table:
    """Read ``adult.data`` or ``adult.test``: skips ``|`` comment lines and empty lines, strips the test labels'
    period. Continuous fields are checked to be numbers; ``?`` is kept as a category or drops the row."""
    path = Path(path)
    if not is_data_file(path):
        raise missing_file_error(path, "UCI Adult", ADULT_URL)
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
    return Table(columns, y, group, lines)


def parse_compas(path: str | os.PathLike, propublica_filter: bool = True) -> Table:
    """Read ``compas-scores-two-years.csv`` (columns found by name, first occurrence of a repeated name)."""
    path = Path(path)
    if not is_data_file(path):
        raise missing_file_error(path, "ProPublica COMPAS", COMPAS_URL)
    needed = COMPAS_CONTINUOUS + COMPAS_CATEGORICAL + ("two_year_recid",) + (COMPAS_FILTER_COLUMNS if propublica_filter else ())
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
    return Table(columns, y, group, lines)
