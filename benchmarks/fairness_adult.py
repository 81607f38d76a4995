"""AUC maximization under ROC-fairness constraints on UCI Adult (seed 004 Appendix F.2): ALEXR2 (smoothed hinge),
SONX (hinge) and SOX (squared hinge), each at its best penalty ρ from a small grid, over several seeds.

    python benchmarks/fairness_adult.py [--quick] [--root ../shared/data/uci-adult] [--epochs E] [--seeds S]

Protocol (a shortened version of the paper's, which ran 60 epochs on a GPU):

* data: ``adult.data`` (10% held out for validation, stratified) and ``adult.test``; groups by sex; 14 constraints
  (TPR and FPR gaps at Γ = {−3, …, 3}, κ = 0.005); a 2-hidden-layer MLP 108-64-32-1; batches of 128;
* methods, as compared in the paper: ALEXR2 with the Adam-type outer step on the hinge penalty smoothed with
  λ ∈ {2e-3, 2e-4} (ν = 0.1, η = 0.1, K = 5, γ̂ = 0.8, θ = 0.125); SONX (MSVR γ = 0.8, γ' = 0.1, plain SGD) on
  the hinge; SOX (γ = 0.1, previous u, Adam-type step) on the squared hinge. Learning rates: ALEXR2 α = 3e-2,
  SONX 0.1, SOX 1e-2 (each picked once by validation AUROC and violation after 2 epochs at ρ = 10 / 100, seed 0:
  ALEXR2 from {1e-2, 3e-2} at λ = 2e-4 after {1e-2, 1e-3} at λ = 2e-3, SOX from {1e-2, 1e-3}, SONX from {0.1, 1e-2});
  every learning rate ×0.1 at 50% and 75% of the epochs, as in the paper;
* ρ (and λ for ALEXR2): the grid below, run with seed 0; the best setting is the one with the highest validation
  AUROC among those whose validation max violation is ≤ 0.01 (if none, the smallest violation); then all seeds;
* reported: test AUROC, test max violation ``max_i h_i`` (h = |gap| − κ, sigmoid surrogate as in the paper; ≤ 0
  is feasible), test constraints violated, and per-epoch curves (training AUROC — the paper's "objective AUC
  value" —, training max violation, the plug-in penalized objective estimate ``train/objective_epoch``).

Writes ``benchmarks/results/fairness_adult.md`` (and ``fairness_adult.png`` when matplotlib is installed). Runs
with one intra-op thread by default (``--threads``): on a shared CPU, oversubscribed threads are far slower.
"""

from __future__ import annotations

import argparse
import logging
import math
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lightning.pytorch import Callback, Trainer, seed_everything  # noqa: E402

from fccolit.algorithms.alexr2 import ALEXR2  # noqa: E402
from fccolit.algorithms.sonex import SONX, PenaltySOX  # noqa: E402
from fccolit.callbacks.constraints import ConstraintViolationLogger  # noqa: E402
from fccolit.datamodules.fairness import FairnessDataModule  # noqa: E402
from fccolit.metrics import auroc  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives.constrained import ROCFairnessAUC  # noqa: E402
from fccolit.optim import AdaptiveMomentum, Momentum  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
VIOLATION_TOLERANCE = 0.01

# the grid of each method: (ρ, λ) for ALEXR2 (λ: its smoothing), ρ for the others; the quick run takes the middle
METHODS = {
    "ALEXR2 (smoothed hinge)": dict(
        penalty="hinge", grid=[(rho, lam) for lam in (2e-3, 2e-4) for rho in (4.0, 10.0, 40.0)], quick=(10.0, 2e-4)
    ),
    "SONX (hinge)": dict(penalty="hinge", grid=[(4.0, None), (10.0, None), (40.0, None)], quick=(10.0, None)),
    "SOX (squared hinge)": dict(
        penalty="squared_hinge", grid=[(10.0, None), (100.0, None), (1000.0, None)], quick=(100.0, None)
    ),
}


def label(setting: tuple[float, float | None]) -> str:
    rho, lam = setting
    return f"ρ={rho:g}" + ("" if lam is None else f", λ={lam:g}")


def make_module(method: str, setting: tuple[float, float | None], sizes: dict, epochs: int):
    rho, lam = setting
    objective = ROCFairnessAUC(penalty=METHODS[method]["penalty"], rho=rho)
    milestones = sorted({max(1, epochs // 2), max(1, math.ceil(0.75 * epochs))})
    common = dict(
        data_sizes=sizes, metrics=["auroc"], scheduler_interval="epoch",
        scheduler=lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1),
    )
    model = MLP(hidden=[64, 32])
    if method.startswith("ALEXR2"):
        return ALEXR2(model, objective, lam=lam, nu=0.1, inner_lr=0.1, inner_steps=5, ema_weight=0.8,
                      extrapolation=0.125, optimizer=lambda p: AdaptiveMomentum(p, lr=3e-2, bias_correction=True),
                      **common)
    if method.startswith("SONX"):
        return SONX(model, objective, ema_weight=0.8, correction_weight=0.1,
                    optimizer=lambda p: Momentum(p, lr=0.1, momentum_weight=1.0), **common)
    return PenaltySOX(model, objective, ema_weight=0.1,
                      optimizer=lambda p: AdaptiveMomentum(p, lr=1e-2, bias_correction=True), **common)


class Curves(Callback):
    """Per epoch: training AUROC on the whole training split (eval mode), and what the other callbacks logged
    (``train/objective_epoch`` is logged by the module after the callbacks' epoch end: read at the next epoch's
    start, or at the end of training)."""

    def __init__(self, train_x: torch.Tensor, train_y: torch.Tensor) -> None:
        self.train_x, self.train_y, self.rows = train_x, train_y, []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        was_training = pl_module.training
        pl_module.eval()
        with torch.no_grad():
            scores = pl_module({"x": self.train_x})
        pl_module.train(was_training)
        metrics = trainer.callback_metrics
        self.rows.append({
            "train_auroc": float(auroc(scores, self.train_y)),
            "train_max_violation": float(metrics["train/max_violation"]),
            "val_auroc": float(metrics.get("val/auroc", float("nan"))),
        })

    def _objective(self, trainer) -> None:
        if self.rows and "objective" not in self.rows[-1]:
            self.rows[-1]["objective"] = float(trainer.callback_metrics.get("train/objective_epoch", float("nan")))

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._objective(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._objective(trainer)


def make_data(root: str, seed: int) -> FairnessDataModule:
    """Adult with this seed's validation split and batch stream (parsed once: the arrays are cached)."""
    return FairnessDataModule(root, "adult", val_fraction=0.1, batch_size=128, seed=seed)


def run(method: str, setting: tuple[float, float | None], seed: int, root: str, epochs: int) -> dict:
    data = make_data(root, seed)
    seed_everything(seed, verbose=False)
    module = make_module(method, setting, data.sizes, epochs)
    data.setup("fit")
    train = data._splits["train"]
    curves = Curves(train["x"], train["y"])
    logger_cb = ConstraintViolationLogger(stages=("train", "val", "test"))
    trainer = Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
        num_sanity_val_steps=0, callbacks=[logger_cb, curves],
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    seconds = time.perf_counter() - start
    val = dict(logger_cb.last["val"])
    val_auroc = float(trainer.callback_metrics["val/auroc"])
    trainer.test(module, datamodule=data, verbose=False)
    test = trainer.callback_metrics
    return {
        "method": method, "setting": setting, "seed": seed, "seconds_per_epoch": seconds / epochs,
        "val_auroc": val_auroc, "val_max_violation": val["val/max_violation"],
        "test_auroc": float(test["test/auroc"]), "test_max_violation": float(test["test/max_violation"]),
        "test_num_violated": float(test["test/num_violated"]), "curves": curves.rows,
    }


def best_setting(results: list[dict]) -> dict:
    feasible = [r for r in results if r["val_max_violation"] <= VIOLATION_TOLERANCE]
    if feasible:
        return max(feasible, key=lambda r: r["val_auroc"])
    return min(results, key=lambda r: r["val_max_violation"])


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def plot(final: dict[str, list[dict]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for method, runs in final.items():
        epochs = range(1, len(runs[0]["curves"]) + 1)
        for ax, key in zip(axes, ("train_auroc", "train_max_violation", "objective")):
            ax.plot(epochs, [statistics.mean(r["curves"][e - 1][key] for r in runs) for e in epochs], label=method)
            ax.set_xlabel("epoch")
            ax.set_title(key)
    axes[1].axhline(0.0, color="grey", lw=0.5)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "uci-adult"))
    ap.add_argument("--quick", action="store_true", help="2 epochs, 2 seeds, no ρ grid (the middle value)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    epochs = args.epochs or (2 if args.quick else 10)
    seeds = list(range(args.seeds or (2 if args.quick else 5)))
    data = make_data(args.root, 0)
    started = time.perf_counter()

    selection: dict[str, list[dict]] = {}
    final: dict[str, list[dict]] = {}
    for method, spec in METHODS.items():
        grid = [spec["quick"]] if args.quick else spec["grid"]
        selection[method] = [run(method, setting, seeds[0], args.root, epochs) for setting in grid]
        for r in selection[method]:
            print(f"[select] {method:26s} {label(r['setting']):16s} val AUROC {r['val_auroc']:.4f}  "
                  f"val max violation {r['val_max_violation']:+.4f}", flush=True)
        chosen = best_setting(selection[method])
        final[method] = [chosen] + [run(method, chosen["setting"], s, args.root, epochs) for s in seeds[1:]]
    total = time.perf_counter() - started

    lines = [
        "## ROC-fairness AUC maximization on UCI Adult (seed 004 F.2)",
        "",
        f"Command: `python benchmarks/fairness_adult.py{' --quick' if args.quick else ''}`"
        f"{'' if args.epochs is None else f' --epochs {args.epochs}'}{'' if args.seeds is None else f' --seeds {args.seeds}'}. "
        f"Machine: {platform.machine()}, {torch.get_num_threads()} torch thread(s) on a shared CPU, torch {torch.__version__}. "
        f"Total {total / 60:.1f} min.",
        "",
        f"Real `adult.data` / `adult.test` (seed 0: train {data.sizes['num_samples']}, validation "
        f"{len(data._arrays['y_val'])}, test {len(data._arrays['y_test'])} rows; {data.sizes['num_features']} "
        f"features), groups by sex, 14 constraints (Γ = {{−3..3}}, κ = 0.005), MLP 108-64-32-1, batch 128, "
        f"{epochs} epochs (the paper: 60), lr ×0.1 at 50% / 75%, seeds {seeds}. ρ (and ALEXR2's λ) chosen on seed 0 by validation "
        f"AUROC among ρ with validation max violation ≤ {VIOLATION_TOLERANCE}; each seed has its own validation split, batches and initialization. Violation = max_i h_i with "
        "h = |gap| − κ of the sigmoid-surrogate TPR / FPR gaps (≤ 0: every constraint met), as in the paper.",
        "",
        "| method | grid, seed 0 (val AUROC / val max violation) | chosen | test AUROC | test max violation | test constraints violated (of 14) | s / epoch |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for method, runs in final.items():
        grid = "; ".join(f"{label(r['setting'])}: {r['val_auroc']:.4f} / {r['val_max_violation']:+.4f}" for r in selection[method])
        lines.append(
            f"| {method} | {grid} | {label(runs[0]['setting'])} | {mean_std([r['test_auroc'] for r in runs])} | "
            f"{mean_std([r['test_max_violation'] for r in runs])} | {mean_std([r['test_num_violated'] for r in runs])} | "
            f"{statistics.mean(r['seconds_per_epoch'] for r in runs):.1f} |"
        )
    lines += ["", "Per-epoch curves (mean over seeds; training split): AUROC / max violation / penalized objective estimate.", ""]
    header = "| epoch | " + " | ".join(final) + " |"
    lines += [header, "|---:|" + "---|" * len(final)]
    for e in range(epochs):
        cells = []
        for runs in final.values():
            c = [r["curves"][e] for r in runs]
            cells.append(f"{statistics.mean(x['train_auroc'] for x in c):.4f} / "
                         f"{statistics.mean(x['train_max_violation'] for x in c):+.4f} / "
                         f"{statistics.mean(x['objective'] for x in c):+.4f}")
        lines.append(f"| {e + 1} | " + " | ".join(cells) + " |")
    if not args.no_write:
        OUT.mkdir(parents=True, exist_ok=True)
        made = plot(final, OUT / "fairness_adult.png")
        lines += ["", "![test AUROC and max violation per epoch on Adult](fairness_adult.png)" if made else "No plot: matplotlib is not installed (the curves are the table above)."]
        (OUT / "fairness_adult.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
