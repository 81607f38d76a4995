"""Small files in the real formats of the tabular data sets: LIBSVM, UCI Adult, ProPublica COMPAS, plain CSV."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import torch

from fccolit.io.fairness import COMPAS_COLUMNS

__all__ = [
    "write_adult_files", "write_binary_csv", "write_compas_file", "write_csv", "write_large_libsvm", "write_libsvm",
]


def write_libsvm(folder: Path, name: str = "toy", rows: int = 300, test_rows: int = 120, features: int = 12,
                 seed: int = 5) -> None:
    """A small a9a-like LIBSVM pair (``name``, ``name.t``): labels ±1 (about a third positive), sparse 1-based
    binary features, four active per row."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, generator=g)
    for fname, count in ((name, rows), (f"{name}.t", test_rows)):
        lines = []
        for _ in range(count):
            active = sorted(torch.randperm(features, generator=g)[:4].tolist())
            score = float(w[active].sum()) + 0.5 * float(torch.randn(1, generator=g))
            label = "+1" if score > 1.0 else "-1"
            lines.append(label + " " + " ".join(f"{j + 1}:1" for j in active))
        (folder / fname).write_text("\n".join(lines) + "\n")


def write_large_libsvm(path: Path, rows: int = 150_000, seed: int = 0) -> None:
    """A LIBSVM file of several MiB (so its middle is more than 1 MiB from both ends), labels ±1 of equal width."""
    rng = np.random.default_rng(seed)
    labels = np.where(rng.random(rows) < 0.3, "+1", "-1")
    cols = np.sort(rng.choice(20, size=(rows, 3), replace=True), axis=1)
    cols[:, 1] = np.maximum(cols[:, 1], cols[:, 0] + 1)
    cols[:, 2] = np.maximum(cols[:, 2], cols[:, 1] + 1)
    lines = [f"{y} {a + 1}:1 {b + 1}:0.5 {c + 1}:0.25" for y, a, b, c in zip(labels, *cols.T)]
    path.write_text("\n".join(lines) + "\n")


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """A CSV file (``\\n`` line ends, quoting as needed) of a header and rows of cell texts, e.g. a hand-made
    CheXpert ``train.csv``."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def write_binary_csv(path: Path, num_rows: int = 3000, num_features: int = 8, seed: int = 0) -> None:
    """A CSV of binary classification (header ``f0, …, f<D−1>, label``; 5-decimal features, 0/1 labels): an
    imbalanced problem (about 8% positives) whose label depends on the features (``examples/new_datamodule.py``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_rows, num_features, generator=g)
    latent = x[:, 0] + 0.5 * x[:, 1] - 0.5 * x[:, 2] + 0.3 * torch.randn(num_rows, generator=g)
    y = (latent > torch.quantile(latent, 0.92)).long()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"f{j}" for j in range(num_features)] + ["label"])
        writer.writerows([[f"{v:.5f}" for v in row] + [int(label)] for row, label in zip(x.tolist(), y)])


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
