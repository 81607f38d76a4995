"""Tables 3–4 of Wang & Yang, "Finite-Sum Coupled Compositional Stochastic Optimization: Theory and
Applications" (ICML 2022): SOX against BSGD, SOAP and MOAP on the p-norm push of a linear model, on LIBSVM a9a.

    python benchmarks/reproduce/sox_pnorm.py [--quick] [--workers 2]

The paper's tables are on covtype and ijcnn1, which are not in ../shared/data (they need downloads): the numbers
are not comparable, so the table compares the *claims*, which are orderings: "SOX consistently beats BSGD and MOAP
in test loss, beats SOAP on covtype and ties it on ijcnn1" (Table 4), and "γ = 1 is not best" (Figure 5(b)).

Protocol (the paper's §4.2 and the SOX authors' public p-norm push scripts; [open] where neither says):

* data: a9a (training file) and a9a.t (test file), min-max scaled features; as the authors' scripts do, the label −1
  (the larger class, 24,720 rows) is the inner set S_+ and +1 (7,841 rows) the outer set S_− with one state row each
  (``positive_label=-1``).
* p-norm push, p = 4, ℓ = exp (:class:`~fccolit.objectives.pnorm_push.PNormPushLoss`), linear model ``<w, x>`` without
  bias, torch's default init, seeded; weight decay 1e-3 (the authors' scripts); B = 64 with B1 = B2 = 32;
  T = 10,000 iterations (``--quick``: 3,000); constant step size [open].
* methods (:mod:`fccolit.algorithms.sox`): BSGD (γ = 1, β = 1), SOAP (γ, β = 1), MOAP (γ, β; the randomized
  coordinate update with the n/B1 factor), SOX (γ, β = 0.1, the previous u in ∇f).
* tuning [open: the paper gives no grid]: η ∈ {0.03, 0.01, 0.003} × γ ∈ {0.5, 0.1} (BSGD: η only; MOAP also
  β ∈ {0.1, 0.5} and γ ∈ {0.1, 0.01, 0.004}, down to B1/n, since its n/B1 factor makes larger γ diverge), selected
  by the final *training* objective of the selection seed 100 (``SEEDS``: no reported seed and no test number takes
  part); then the reported seeds 0–4 at the selected setting.
  Test loss = the p-norm push objective on a9a.t (mean ± sample std over seeds).
* verdicts: :func:`common.paired_verdict` on the per-seed paired test-loss differences (lower is better).
* the γ claim: SOX at the selected η and β with γ ∈ {1, 0.5, 0.1}, the reported seeds each, paired.

Writes ``benchmarks/reproduce/results/sox_pnorm.md`` (``sox_pnorm_quick.md`` with ``--quick``) and a plot of the test
loss against iterations.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import common
from common import Runner, Stopwatch, header, sample_std, save_plot, shared_data, write_result  # noqa: I001

from fccolit.algorithms.sox import BSGD, MOAP, SOAP, SOX
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.models import LinearScorer
from fccolit.objectives.pnorm_push import PNormPushLoss
from fccolit.optim import Momentum

WEIGHT_DECAY = 1e-3
METHODS = ("BSGD", "SOAP", "MOAP", "SOX")
PAPER_TABLE_4 = {  # test loss (covtype, ijcnn1): for the ordering only, a9a is another data set
    "BSGD": (0.625, 0.202), "SOAP": (0.523, 0.128), "MOAP": (0.559, 0.147), "SOX": (0.516, 0.128),
}
LRS = (0.03, 0.01, 0.003)
GAMMAS = (0.5, 0.1)
MOAP_BETAS = (0.1, 0.5)
# MOAP multiplies a sampled row's estimate by n/B1 = 7841/32 ≈ 245, so its update overshoots and diverges unless
# γ·n/B1 ≲ 1: its γ grid reaches down to B1/n ≈ 0.004 (with γ ∈ {0.5, 0.1} every η diverged on a9a).
MOAP_GAMMAS = (0.1, 0.01, 0.004)
SEEDS = common.SeedPlan(reported=(0, 1, 2, 3, 4), selection=(100,))
SOX_BETA = 0.1
STATE: dict = {}  # data paths, steps and the splits, set before the workers fork


@dataclass(frozen=True)
class Setting:
    method: str
    lr: float
    gamma: float = 1.0
    beta: float = 1.0


def datamodule(seed: int) -> LibSVMDataModule:
    return LibSVMDataModule(STATE["data"], "a9a", val_fraction=0.0, normalize="minmax", positive_label=-1.0,
                            batch_size=64, num_positives=32, seed=seed, cache_dir=STATE["cache"])


def build(setting: Setting, sizes: dict[str, int]):
    model, objective = LinearScorer(bias=False), PNormPushLoss(p=4.0)
    opt = lambda ps: Momentum(ps, lr=setting.lr, momentum_weight=setting.beta, weight_decay=WEIGHT_DECAY)  # noqa: E731
    common = {"optimizer": opt, "data_sizes": sizes}
    if setting.method == "BSGD":
        return BSGD(model, objective, **common)
    if setting.method == "SOAP":
        return SOAP(model, objective, ema_weight=setting.gamma, mode="sgd", **common)
    if setting.method == "MOAP":
        return MOAP(model, objective, ema_weight=setting.gamma, **common)
    return SOX(model, objective, ema_weight=setting.gamma, u_for_gradient="previous", **common)


def objective_on(module, split: str) -> float:
    full = STATE[split]
    with torch.no_grad():
        return float(module.objective.exact_value(module(full), full))


def run(setting: Setting, seed: int) -> dict:
    data = datamodule(seed)
    data.setup("fit")
    torch.manual_seed(seed)
    module = build(setting, data.sizes)
    opt = module.configure_optimizers()
    steps, every = STATE["steps"], STATE["steps"] // 10
    curve, clock = [], Stopwatch()
    loader = data.train_dataloader()

    def epochs():
        for epoch in range(10**9):
            loader.batch_sampler.set_epoch(epoch)
            yield from loader

    diverged = {"train": float("nan"), "test": float("nan"), "curve": curve, "seconds": 0.0}
    for t, batch in zip(range(1, steps + 1), epochs()):
        try:
            loss, _ = module.compositional_loss(module(batch), batch)
        except FloatingPointError:  # the state refuses non-finite estimates: this setting diverged
            return {**diverged, "seconds": clock.seconds}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if t % every == 0:
            if not all(bool(torch.isfinite(p).all()) for p in module.parameters()):
                return {"train": float("nan"), "test": float("nan"), "curve": curve, "seconds": clock.seconds}
            curve.append(objective_on(module, "test"))
    return {"train": objective_on(module, "train"), "test": objective_on(module, "test"), "curve": curve,
            "seconds": clock.seconds}


def grid(method: str) -> list[Setting]:
    if method == "BSGD":
        return [Setting("BSGD", lr) for lr in LRS]
    if method == "SOAP":
        return [Setting("SOAP", lr, g) for lr in LRS for g in GAMMAS]
    if method == "MOAP":
        return [Setting("MOAP", lr, g, b) for lr in LRS for g in MOAP_GAMMAS for b in MOAP_BETAS]
    return [Setting("SOX", lr, g, SOX_BETA) for lr in LRS for g in GAMMAS]


def load(data_dir: Path, cache: Path, steps: int) -> None:
    STATE.update(data=data_dir, cache=cache, steps=steps)
    data = datamodule(0)
    data.setup("fit")
    for split, dataset in (("train", data.train_dataset), ("test", data.test_dataset)):
        STATE[split] = dict(dataset.fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3,000 iterations, 2 seeds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "fccolit-sox-pnorm-runs"),
                    help="each run's result is kept here, so a rerun only writes the tables")
    args = ap.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    plan = SEEDS.take(2) if args.quick else SEEDS
    seeds = list(plan.reported)
    with tempfile.TemporaryDirectory() as tmp:
        load(shared_data("libsvm-a9a"), Path(tmp), 3000 if args.quick else 10_000)
        runner = Runner(run, args.workers, cache=Path(args.cache) / ("quick" if args.quick else "full"))
        chosen, tuning = {}, {}
        for method in METHODS:
            settings = grid(method)
            best, results = runner.tune(settings, lambda r: -r["train"], plan, metric="-training objective (final)")
            chosen[method], tuning[method] = best, [(s, float(np.mean([r["train"] for r in results[s]])))
                                                    for s in settings]
            print(f"{method}: {best} train F = {dict(tuning[method])[best]:.4f}", flush=True)
        final = {m: runner.many([(chosen[m], s) for s in seeds]) for m in METHODS}
        sox = chosen["SOX"]
        gammas = {g: runner.many([(Setting("SOX", sox.lr, g, sox.beta), s) for s in seeds]) for g in (1.0, 0.5, 0.1)}
        compute = sum(r["seconds"] for r in runner.done.values()) / 60
    write(final, chosen, tuning, gammas, plan, compute * 60, args.quick, compute, args.cache)


def write(final, chosen, tuning, gammas, plan, seconds, quick, compute: float, cache: str) -> None:
    seeds = list(plan.reported)
    name = "sox_pnorm_quick" if quick else "sox_pnorm"
    command = "python benchmarks/reproduce/sox_pnorm.py" + (" --quick" if quick else "")
    steps = STATE["steps"]
    lines = header("Wang & Yang 2022 (ICML), Tables 3–4 and Figure 5(b): SOX on the p-norm push, linear model, a9a",
                   command, seconds, seeds,
                   f"Compute: {compute:.1f} min of runs (one torch thread each; cached in {cache}, so a rerun "
                   "only writes the tables). "
                   f"Protocol: script docstring; p = 4, ℓ = exp, B1 = B2 = 32, weight decay {WEIGHT_DECAY:g}, T = {steps}, "
                   f"each method's η (and γ, β) tuned on the final training objective of the selection seed(s) "
                   f"{', '.join(map(str, plan.selection))}. The paper's tables are on "
                   "covtype and ijcnn1 (not available here): its numbers are shown for the ordering only.")
    test = {m: np.array([r["test"] for r in final[m]]) for m in METHODS}
    train = {m: np.array([r["train"] for r in final[m]]) for m in METHODS}
    mean = {m: float(np.nanmean(test[m])) for m in METHODS}
    sox_wins = {m: int(np.sum(test["SOX"] < test[m])) for m in METHODS if m != "SOX"}
    lines += ["| method | selected (η, γ, β) | training objective (mean ± std) | test loss, a9a (mean ± std) | "
              "paper: covtype | paper: ijcnn1 | SOX < method on seeds (test) |", "|---|---|---:|---:|---:|---:|---:|"]
    for m in METHODS:
        s = chosen[m]
        wins = "—" if m == "SOX" else f"{sox_wins[m]}/{len(seeds)}"
        lines.append(f"| {m} | ({s.lr:g}, {s.gamma:g}, {s.beta:g}) | {np.nanmean(train[m]):.4f} ± "
                     f"{sample_std(train[m]):.4f} | {mean[m]:.4f} ± {sample_std(test[m]):.4f} | "
                     f"{PAPER_TABLE_4[m][0]:.3f} | {PAPER_TABLE_4[m][1]:.3f} | {wins} |")
    spread = max(np.nanmean(train[m]) for m in METHODS) - min(np.nanmean(train[m]) for m in METHODS)
    gap = float(np.mean([np.nanmean(test[m]) - np.nanmean(train[m]) for m in METHODS]))
    lines += ["", f"Why the orderings differ from the paper's: on a9a the four methods reach training objectives "
              f"within {spread:.4f} of each other, while every method's test loss is {gap:.3f} above its training "
              f"objective (the exp-loss push overfits a9a at T = {steps}); the test-loss ranking then follows the "
              "seed-to-seed spread of that overfitting (std up to "
              f"{max(sample_std(test[m]) for m in METHODS):.3f}) more than the optimizer. The paper's covtype "
              "(581k rows) and ijcnn1 (50k) are larger and not available here."]
    ours = " < ".join(sorted(METHODS, key=lambda m: mean[m]))
    gamma_tests = {g: [r["test"] for r in rs] for g, rs in gammas.items()}
    claims = [(f"SOX beats {m}", common.paired_verdict(test["SOX"], test[m], higher_is_better=False))
              for m in ("BSGD", "MOAP", "SOAP")]
    claims += [(f"SOX with γ = {g:g} beats γ = 1 (Figure 5(b): γ = 1 is not best)",
                common.paired_verdict(gamma_tests[g], gamma_tests[1.0], higher_is_better=False))
               for g in gammas if g != 1.0]
    lines += ["", f"Test loss ordering of the means here (lower is better): {ours}. Paper (Table 4): covtype SOX < "
              "SOAP < MOAP < BSGD; ijcnn1 SOX = SOAP < MOAP < BSGD (so \"SOX beats SOAP\" is the covtype claim; "
              "\"not separable\" is what ijcnn1's tie would show).", ""]
    lines += common.verdict_table(claims, "test loss (lower is better, signed so + favours the claim)")
    if not quick:
        common.write_headlines(name, [{
            "claim": "SOX beats BSGD, MOAP and SOAP in test loss; γ = 1 is not best (Wang & Yang ICML 2022, Table 4, "
                     "Figure 5(b))",
            "data": f"a9a, {len(seeds)}", "paper": "covtype / ijcnn1 (not available here)",
            "ours": "test loss " + ", ".join(f"{m} {mean[m]:.4f}" for m in sorted(METHODS, key=lambda m: mean[m])),
            "verdict": "; ".join(f"{label}: {v.text()}" for label, v in claims)}])
    gamma_means = {g: float(np.nanmean(v)) for g, v in gamma_tests.items()}
    lines += ["", f"SOX at η = {chosen['SOX'].lr:g}, β = {chosen['SOX'].beta:g} against γ (test loss, mean ± std over "
              "seeds):", "", "| γ | " + " | ".join(f"{g:g}" for g in gammas) + " |", "|---|" + "---:|" * len(gammas),
              "| test loss | " + " | ".join(
                  f"{gamma_means[g]:.4f} ± {sample_std(gamma_tests[g]):.4f}" for g in gammas) + " |"]
    lines += ["", f"Tuning (selection seed(s) {', '.join(map(str, plan.selection))}, final training objective; nan = "
              "diverged; bold = selected):", "", "| method | η | γ | β | training F |", "|---|---:|---:|---:|---:|"]
    for m in METHODS:
        for s, train_f in tuning[m]:
            mark = "**" if s == chosen[m] else ""
            lines.append(f"| {m} | {s.lr:g} | {s.gamma:g} | {s.beta:g} | {mark}{train_f:.4f}{mark} |")
    every = steps // 10
    xs = [every * (i + 1) for i in range(10)]

    def draw(plt):
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in METHODS:
            curves = [r["curve"] for r in final[m] if len(r["curve"]) == 10]
            if curves:
                ax.plot(xs, np.mean(curves, axis=0), label=m)
        ax.set_xlabel("iteration")
        ax.set_ylabel("test p-norm push loss (mean over seeds)")
        ax.set_yscale("log")
        ax.set_title("a9a, linear model, p = 4")
        ax.legend()
        return fig

    lines += ["", save_plot(name, draw)]
    write_result(name, lines)


if __name__ == "__main__":
    main()
