"""Defaults that train on a user's own table: SOX's default optimizer (the README's Python example) and the learning
rates of the binary and multi-label Hugging Face configs, chosen on validation splits, then reported on test splits
against cross-entropy with the same optimizer and budget.

    python benchmarks/own_data_defaults.py            # select, check, report: about 10 minutes on 2 cores
    python benchmarks/own_data_defaults.py --part example    # one part: example, sox_binary, adap_multilabel

Data (:mod:`fccolit.testing.own_data`, scikit-learn's bundled tables, nothing downloaded), raw values written to
Parquet as a user has them: digits "8" vs rest with raw pixels 0–16 (``digits_raw``), the same pixels / 16
(``digits_scaled``), breast cancer with its raw measurements (``breast_cancer_raw``, malignant positive); for the
multi-label config the digits with three tasks ("8", "9", "3" each against the rest). Every run gets a seed ``s``:
``seed_everything(s)`` (the model's initial weights) and the DataModule's ``seed=s`` (the held-out validation and
test splits, 10% each, stratified, and the sampler), so a seed is a new split and a new start.

Protocol (no test number is read until the choice is made):

1. **Select** on validation AP, seeds 100, 101, 102, on the first data set (``digits_raw``; the multi-label digits
   for ``adap_multilabel``): the candidate with the highest mean validation AP of the algorithm wins; candidates
   within 0.005 of it count as tied and the first listed of them wins (the list puts the papers' update rules
   first).
2. **Check** the winner on the second data set (``breast_cancer_raw``; for ``adap_multilabel`` the digits with
   three other tasks, "1", "7" and "4", ``multilabel_check``), validation AP on the same seeds: it must be within 0.01 of the best candidate there. If it is not, rule
   1 is applied again to the candidates that pass the check.
3. **Report** test AP on seeds 0, 1, 2 on every data set: the algorithm with the winner against cross-entropy
   (``fccolit.algorithms.Supervised``) with the same optimizer, model, data, batches and budget; the differences are
   paired per seed (same split, same initial weights).

Parts:

* ``example``: the README's example (``HFClassificationDataModule(path, label=..., features=...)``, ``SOX(LinearScorer(),
  AveragePrecisionSurrogate(), data_sizes=data.sizes)``, ``Trainer(max_epochs=20)``) with each candidate optimizer in
  place of SOX's default; the same candidates for an MLP (hidden 64) as a check that the default suits a deeper
  model too. ``feature_scaling="none"`` with the old default (``Momentum`` lr 0.001) is reported as the issue's
  failing case.
* ``sox_binary``: ``configs/hf/sox_binary.yaml`` as shipped (``fccolit fit`` in this process), its ``Momentum`` lr
  swept.
* ``adap_multilabel``: ``configs/hf/adap_multilabel.yaml`` as shipped, its ``AdaptiveMomentum`` lr swept.

Writes ``benchmarks/results/own_data_defaults.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from timing import machine, write_result  # noqa: E402

SELECTION_SEEDS = (100, 101, 102)
REPORT_SEEDS = (0, 1, 2)
TIE = 0.005
CHECK_MARGIN = 0.01
MARGIN = 0.02  # issue 26: test AP within 0.02 of cross-entropy on every seed
EXAMPLE_EPOCHS = 20

#: SOX's default optimizer: (label, class name, keyword arguments); the papers' Momentum first
EXAMPLE_CANDIDATES = [
    ("Momentum lr 0.001 (the old default)", "Momentum", {"lr": 1e-3, "momentum_weight": 0.1}),
    ("Momentum lr 0.01", "Momentum", {"lr": 1e-2, "momentum_weight": 0.1}),
    ("Momentum lr 0.1", "Momentum", {"lr": 0.1, "momentum_weight": 0.1}),
    ("Momentum lr 1", "Momentum", {"lr": 1.0, "momentum_weight": 0.1}),
    ("Momentum lr 10", "Momentum", {"lr": 10.0, "momentum_weight": 0.1}),
    ("Adam lr 0.001", "AdaptiveMomentum", {"lr": 1e-3, "bias_correction": True}),
    ("Adam lr 0.01", "AdaptiveMomentum", {"lr": 1e-2, "bias_correction": True}),
    ("Adam lr 0.1", "AdaptiveMomentum", {"lr": 0.1, "bias_correction": True}),
]
#: the HF configs: config → (optimizer lr key, lr values (the shipped one marked later), data sets)
CONFIGS = {
    "sox_binary": ("configs/hf/sox_binary.yaml", [0.1, 1.0, 10.0], "digits_raw", "breast_cancer_raw",
                   ["digits_raw", "digits_scaled", "breast_cancer_raw"]),
    "adap_multilabel": ("configs/hf/adap_multilabel.yaml", [1e-3, 1e-2, 1e-1], "multilabel_raw", "multilabel_check",
                        ["multilabel_raw", "multilabel_scaled"]),
}


@contextlib.contextmanager
def quiet() -> Any:
    """No Lightning info lines, warnings or progress output while a run trains."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


class Tables:
    """The Parquet files of every data set, written once into ``folder``."""

    def __init__(self, folder: Path) -> None:
        from fccolit.testing.own_data import TABLES, write_digits_multilabel, write_table

        self.folder = folder
        self.files: dict[str, tuple[Path, Any]] = {}
        for name in TABLES:
            self.files[name] = write_table(name, folder / f"{name}.parquet", layout="list")
        for scaled in (False, True):
            name = f"multilabel_{'scaled' if scaled else 'raw'}"
            self.files[name] = (write_digits_multilabel(folder / f"{name}.parquet", scaled=scaled), None)
        self.files["multilabel_check"] = (write_digits_multilabel(folder / "check.parquet", digits=(1, 7, 4)), None)


def optimizer_factory(kind: str, kwargs: dict[str, Any]) -> Callable[[Any], torch.optim.Optimizer]:
    from fccolit import optim

    return lambda params: getattr(optim, kind)(params, **kwargs)


def run_example(path: Path, features: Any, seed: int, algorithm: str, optimizer: Callable | None, folder: Path,
                hidden: list[int] | None = None, feature_scaling: str = "standard",
                epochs: int = EXAMPLE_EPOCHS) -> dict[str, float]:
    """The README example on ``path`` with ``algorithm`` (``"SOX"``, ``"ADAP"`` or ``"CE"``) and ``optimizer``
    (None: the algorithm's default), seeded by ``seed``; validation and test metrics of the final weights."""
    from lightning.pytorch import Trainer, seed_everything

    from fccolit.algorithms import ADAP, SOX, Supervised
    from fccolit.datamodules import HFClassificationDataModule
    from fccolit.models import MLP, LinearScorer
    from fccolit.objectives import AveragePrecisionSurrogate

    with quiet():
        seed_everything(seed)
        data = HFClassificationDataModule(path, label="label", features=features, seed=seed,
                                          feature_scaling=feature_scaling, cache_dir=folder / "hf")
        backbone = LinearScorer() if hidden is None else MLP(hidden=hidden)
        kwargs = {"data_sizes": data.sizes, "optimizer": optimizer}
        if algorithm == "SOX":
            model = SOX(backbone, AveragePrecisionSurrogate(), **kwargs)
        elif algorithm == "ADAP":
            model = ADAP(backbone, AveragePrecisionSurrogate(project=True), **kwargs)
        else:
            model = Supervised(backbone, **kwargs)
        trainer = Trainer(max_epochs=epochs, use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(folder))
        trainer.fit(model, data)
        out = {}
        for metrics in trainer.validate(model, data, verbose=False) + trainer.test(model, data, verbose=False):
            out.update({k: float(v) for k, v in metrics.items()})
    return out


def run_config(config: str, path: Path, seed: int, folder: Path, model: str | None = None,
               lr: float | None = None) -> dict[str, float]:
    """``fccolit fit --config CONFIG`` on ``path`` with seed ``seed`` (and ``--model MODEL``, the optimizer's
    ``lr``), in this process; the final weights' validation and test metrics."""
    from fccolit.testing.own_data import run_config as run

    args = ["--seed_everything", str(seed), "--data.init_args.seed", str(seed), "--data.init_args.dataset", str(path),
            "--data.init_args.cache_dir", str(folder / "hf")]
    if model is not None:
        args += ["--model", model]
    if lr is not None:
        args += ["--model.init_args.optimizer.init_args.lr", str(lr)]
    if "multilabel" in config:  # the config names the 8 columns of its demo file; the digits are one list column
        args += ["--data.init_args.features", "features"]
    with quiet():
        return run(REPO / config, args, folder)


def mean(values: list[float]) -> float:
    return statistics.fmean(values)


def pick(scores: dict[Any, list[float]]) -> Any:
    """The first candidate within :data:`TIE` of the best mean."""
    best = max(mean(v) for v in scores.values())
    return next(k for k, v in scores.items() if mean(v) >= best - TIE)


def choose(selection: dict[Any, list[float]], check: dict[Any, list[float]],
           label: Callable[[Any], str] = str) -> tuple[Any, str]:
    """Rule 1 on ``selection``, checked on ``check`` (rule 2); the choice and a sentence saying how it was made
    (``label`` names a candidate)."""
    first = pick(selection)
    floor = max(mean(v) for v in check.values()) - CHECK_MARGIN
    if mean(check[first]) >= floor:
        return first, (f"{label(first)} has the highest mean on the selection data (ties within {TIE} go to the first "
                       f"listed) and is within {CHECK_MARGIN} of the best on the check data.")
    passing = {k: v for k, v in selection.items() if mean(check[k]) >= floor}
    chosen = pick(passing)
    return chosen, (f"{label(first)} has the highest mean on the selection data but is {floor + CHECK_MARGIN - mean(check[first]):.4f} "
                    f"below the best on the check data, more than {CHECK_MARGIN}; among the candidates within "
                    f"{CHECK_MARGIN} there, {label(chosen)} has the highest mean on the selection data (ties within {TIE} "
                    "go to the first listed).")


def seeds_cell(values: list[float]) -> str:
    return f"{mean(values):.4f} ({', '.join(f'{v:.3f}' for v in values)})"


def diff_cell(a: list[float], b: list[float]) -> str:
    diffs = [x - y for x, y in zip(a, b)]
    return f"{mean(diffs):+.4f} ({', '.join(f'{d:+.3f}' for d in diffs)})"


def within(a: list[float], b: list[float]) -> str:
    """How many seeds have ``a`` at most :data:`MARGIN` below ``b`` (issue 26's criterion)."""
    return f"{sum(x >= y - MARGIN for x, y in zip(a, b))} of {len(a)}"


def log(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------- the example
def part_example(tables: Tables, work: Path) -> str:
    lines = []
    selection: dict[str, dict[str, list[float]]] = {}
    for data_name in ("digits_raw", "breast_cancer_raw"):
        path, features = tables.files[data_name]
        selection[data_name] = {}
        for label, kind, kwargs in EXAMPLE_CANDIDATES:
            aps = [run_example(path, features, s, "SOX", optimizer_factory(kind, kwargs), work)["val/ap"]
                   for s in SELECTION_SEEDS]
            selection[data_name][label] = aps
            log(f"example select {data_name} {label}: {seeds_cell(aps)}")
    mlp = {}
    path, features = tables.files["digits_raw"]
    for label, kind, kwargs in EXAMPLE_CANDIDATES:
        mlp[label] = [run_example(path, features, s, "SOX", optimizer_factory(kind, kwargs), work, hidden=[64])["val/ap"]
                      for s in SELECTION_SEEDS]
        log(f"example select MLP digits_raw {label}: {seeds_cell(mlp[label])}")
    check = selection["breast_cancer_raw"]
    winner, how = choose(selection["digits_raw"], check)
    lines.append(f"Selection: validation AP of SOX (README example, `LinearScorer`, {EXAMPLE_EPOCHS} epochs), mean over "
                 f"seeds {', '.join(map(str, SELECTION_SEEDS))} (each seed's value in parentheses); the MLP column is "
                 "the same example with `MLP(hidden=[64])`.\n")
    lines.append("| SOX's optimizer | digits raw (selection) | breast cancer raw (check) | digits raw, MLP (check) |")
    lines.append("|---|---:|---:|---:|")
    for label, _, _ in EXAMPLE_CANDIDATES:
        mark = " **(chosen)**" if label == winner else ""
        lines.append(f"| {label}{mark} | {seeds_cell(selection['digits_raw'][label])} | {seeds_cell(check[label])} | "
                     f"{seeds_cell(mlp[label])} |")
    lines.append(f"\nChosen: {winner}. {how}\n")

    kind, kwargs = next((k, a) for l, k, a in EXAMPLE_CANDIDATES if l == winner)
    factory = optimizer_factory(kind, kwargs)
    lines.append("After the choice, on the same validation splits: SOX with it against cross-entropy with it (paired "
                 "per seed), for the spread of the difference on splits of this size.\n")
    lines.append("| data | SOX validation AP | cross-entropy validation AP | SOX − CE (per seed) |")
    lines.append("|---|---:|---:|---:|")
    for data_name in ("digits_raw", "breast_cancer_raw"):
        path, features = tables.files[data_name]
        ce = [run_example(path, features, s, "CE", factory, work)["val/ap"] for s in SELECTION_SEEDS]
        sox = selection[data_name][winner]
        lines.append(f"| {data_name} | {seeds_cell(sox)} | {seeds_cell(ce)} | {diff_cell(sox, ce)} |")
        log(lines[-1])
    lines.append("")
    lines.append(f"Report: test AP, seeds {', '.join(map(str, REPORT_SEEDS))}, the final weights after "
                 f"{EXAMPLE_EPOCHS} epochs; cross-entropy (`Supervised`) with the same optimizer; difference = SOX − "
                 "cross-entropy per seed. The first row is the issue's failing case: features unscaled, the old "
                 "default optimizer.\n")
    lines.append("| data | setting | SOX test AP | cross-entropy test AP | SOX − CE (per seed) | seeds within 0.02 |")
    lines.append("|---|---|---:|---:|---:|---:|")
    old = optimizer_factory("Momentum", {"lr": 1e-3, "momentum_weight": 0.1})
    rows = [("breast_cancer_raw", "unscaled, Momentum lr 0.001 (before)", old, "none")]
    rows += [(name, f"standardized, {winner}", factory, "standard") for name in
             ("digits_raw", "digits_scaled", "breast_cancer_raw")]
    for data_name, setting, opt, scaling in rows:
        path, features = tables.files[data_name]
        sox = [run_example(path, features, s, "SOX", opt, work, feature_scaling=scaling)["test/ap"] for s in REPORT_SEEDS]
        ce = [run_example(path, features, s, "CE", opt, work, feature_scaling=scaling)["test/ap"] for s in REPORT_SEEDS]
        lines.append(f"| {data_name} | {setting} | {seeds_cell(sox)} | {seeds_cell(ce)} | {diff_cell(sox, ce)} | "
                     f"{within(sox, ce)} |")
        log(lines[-1])
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- the configs
def part_config(name: str, tables: Tables, work: Path) -> str:
    config, lrs, select_on, check_on, report_on = CONFIGS[name]
    algorithm = "ADAP" if "adap" in name else "SOX"
    selection: dict[str, dict[float, list[float]]] = {}
    for data_name in (select_on, check_on):
        path = tables.files[data_name][0]
        selection[data_name] = {}
        for lr in lrs:
            aps = [run_config(config, path, s, work, lr=lr)["val/ap"] for s in SELECTION_SEEDS]
            selection[data_name][lr] = aps
            log(f"{name} select {data_name} lr {lr}: {seeds_cell(aps)}")
    check = selection[check_on]
    winner, how = choose(selection[select_on], check, label=lambda lr: f"lr {lr:g}")
    lines = [f"Selection: validation AP of {algorithm} with `{config}` as shipped but for the lr, the final weights, "
             f"mean over seeds {', '.join(map(str, SELECTION_SEEDS))}.\n",
             f"| lr | {select_on} (selection) | {check_on} (check) |", "|---:|---:|---:|"]
    for lr in lrs:
        mark = " **(chosen)**" if lr == winner else ""
        lines.append(f"| {lr:g}{mark} | {seeds_cell(selection[select_on][lr])} | {seeds_cell(check[lr])} |")
    lines.append(f"\nChosen: lr {winner:g}. {how}\n")
    lines.append(f"After the choice, on the same validation splits: {algorithm} against cross-entropy with lr "
                 f"{winner:g} (paired per seed).\n")
    lines.append(f"| data | {algorithm} validation AP | cross-entropy validation AP | {algorithm} − CE (per seed) |")
    lines.append("|---|---:|---:|---:|")
    for data_name in (select_on, check_on):
        path = tables.files[data_name][0]
        ce = [run_config(config, path, s, work, model="fccolit.algorithms.Supervised", lr=winner)["val/ap"]
              for s in SELECTION_SEEDS]
        ours = selection[data_name][winner]
        lines.append(f"| {data_name} | {seeds_cell(ours)} | {seeds_cell(ce)} | {diff_cell(ours, ce)} |")
        log(lines[-1])
    lines.append("")
    lines.append(f"Report: test AP, seeds {', '.join(map(str, REPORT_SEEDS))}, `{config}` with lr {winner:g}; "
                 "cross-entropy = the same config with `--model fccolit.algorithms.Supervised` (same model, optimizer, "
                 f"batches and budget); difference = {algorithm} − cross-entropy per seed.\n")
    lines.append(f"| data | {algorithm} test AP | cross-entropy test AP | {algorithm} − CE (per seed) | seeds within 0.02 |")
    lines.append("|---|---:|---:|---:|---:|")
    for data_name in report_on:
        path = tables.files[data_name][0]
        ours = [run_config(config, path, s, work, lr=winner)["test/ap"] for s in REPORT_SEEDS]
        ce = [run_config(config, path, s, work, model="fccolit.algorithms.Supervised", lr=winner)["test/ap"]
              for s in REPORT_SEEDS]
        lines.append(f"| {data_name} | {seeds_cell(ours)} | {seeds_cell(ce)} | {diff_cell(ours, ce)} | "
                     f"{within(ours, ce)} |")
        log(lines[-1])
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", nargs="*", default=["example", "sox_binary", "adap_multilabel"],
                    choices=["example", "sox_binary", "adap_multilabel"])
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and the machine is shared
    start = time.perf_counter()
    sections = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        tables = Tables(work / "data")
        titles = {"example": "The README example: SOX's default optimizer",
                  "sox_binary": "`configs/hf/sox_binary.yaml`: its learning rate",
                  "adap_multilabel": "`configs/hf/adap_multilabel.yaml`: its learning rate"}
        for part in args.part:
            body = part_example(tables, work) if part == "example" else part_config(part, tables, work)
            sections.append(f"### {titles[part]}\n\n{body}")
    minutes = (time.perf_counter() - start) / 60
    command = "python benchmarks/own_data_defaults.py" + ("" if len(args.part) == 3 else f" --part {' '.join(args.part)}")
    text = f"""## Defaults that train on your own data (scikit-learn's digits and breast cancer tables, raw features)

Command: `{command}` ({minutes:.0f} minutes). Machine: {machine()}. Data: scikit-learn's bundled `load_digits`
("8" vs rest, 9.7% positives; raw pixels 0–16, and the same / 16) and `load_breast_cancer` (malignant positive, 37%;
raw measurements), written to Parquet by `fccolit.testing.own_data` (nothing downloaded; the features as one list
column: one scalar column per feature gives the same batches, `tests/data/test_own_data.py`, and reads them several
times slower); the multi-label table is the digits with three tasks ("8", "9", "3" each against the rest;
`multilabel_check`: "1", "7", "4"). Each seed `s` seeds the initial weights
(`seed_everything(s)`) and the DataModule (`seed=s`: its held-out 10% validation and 10% test splits and the
sampler). Features are standardized with the training split's statistics (the DataModules' default
`feature_scaling="standard"`) unless a row says otherwise. Candidates are chosen on validation AP over seeds
{', '.join(map(str, SELECTION_SEEDS))} and checked on a second data set before any test split is evaluated; the test
rows use seeds {', '.join(map(str, REPORT_SEEDS))}, and every comparison with cross-entropy is paired per seed.
Dividing by 16 is exact in floating point and standardization removes it, so the `digits_scaled` rows train on
bit-identical batches and repeat the `digits_raw` rows exactly (as do `multilabel_scaled` and `multilabel_raw`).

""" + "\n\n".join(sections) + """

Reading the tables: issue 26 asks for test AP within 0.02 of cross-entropy on every seed (the last column). A test
split of these tables is small (digits: 179 rows, 17 positives; breast cancer: 57 rows, 21 positives), so one
positive ranked a few places lower moves AP by 0.01–0.04; the validation tables after each choice show how far the
paired difference scatters per seed between two equally trained models. `tests/data/test_own_data.py` checks the
shipped configs and the README example against cross-entropy on the same seeds.
"""
    print(write_result("own_data_defaults", text))


if __name__ == "__main__":
    main()
