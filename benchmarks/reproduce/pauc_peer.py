"""AGD-SBCD (PAUCRange, a method built for the FPR range [0.05, 0.5]) against LibAUC 2.0.1's one-way partial-AUC
losses (pAUC_CVaR + SOPA and pAUC_DRO + SOPAs, FPR [0, 0.5]) on the range metric, and which choices explain the
difference: surrogate and score transform, the step sizes c and γ, the outer steps reached (T_k), and the SBCD
output (the average v̄ or the last iterate).

    python benchmarks/reproduce/pauc_peer.py [--quick] [--seeds N] [--selection-seeds N] [--no-variants] [--no-alone]
        [--no-config-budget] [--short-ladder] [--workers 2]

The full protocol is the command without options (reported seeds 0, 1, 2; selection seeds 100, 101, 102); the
other options give a reduced one, which the results file's protocol line names.

Protocol ([assumption] marks what neither paper fixes): the data, splits, batches (I = J = 100 from fccolit's
``DualSampler``), initial linear model, budget and evaluation are those of ``pauc_range.py`` (its docstring), and
the runs are shared with it through the on-disk cache. LibAUC's losses see σ(h(x)) (its documented usage) with
squared hinge of margin 1, pAUC_CVaR with β = 0.5 and η = 1, pAUC_DRO with γ = 0.9 and λ = 1, their optimizers in
Adam mode with LibAUC's defaults (SOPAs: weight decay 10⁻⁵), lr ∈ {10⁻³, 10⁻², 10⁻¹} [assumption: the
grid]; the peer is evaluated at its last iterate. AGD-SBCD's c is chosen from {1, 3, 10, 30} (part of the paper's
E.2 grid) on each row of the factor table; every step size (ours and the peer's) and the reference peer method (Δ)
are chosen by the mean over the **selection** seeds of ``SEEDS`` of the final validation pAUC on FPR [0.05, 0.5];
the chosen setting then runs on the **reported** seeds, whose test pAUC is reported. Verdicts (the config-budget
table) come from ``common.paired_verdict`` on per-seed paired differences.

The factor table is a ladder: each row adds one change to the row above, starting from the paper's reading
(Yao, Lin & Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates", NeurIPS 2022:
ℓ(z) = log(1 + e^{−z}) on raw scores, γ'/μ' = 2, T_k = 50(k+1)², v̄ = the average of the inner iterates).
The last table runs the config's own budget (``configs/libsvm/pauc_agd.yaml``: 20,400 batches).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common as C  # noqa: E402
import pauc_common as P  # noqa: E402
import pauc_range as R  # noqa: E402

SEEDS = R.SEEDS  # the same plan as pauc_range.py: the two scripts share their runs through the cache
AGD = "AGD-SBCD"  # pauc_range's builder for any AGD-SBCD setting
C_GRID = R.AGD_C  # the same grid as pauc_range.py's AGD-SBCD rows (rows 0 and 3 of the ladder are its runs)
CONFIG_STEPS = R.CONFIG_STEPS
PAPER = R.PAPER
LADDER = [
    ("the paper's reading: ℓ logistic on h, γ'/μ' = 2, T_k = 50(k+1)², v̄ = average", {}),
    ("+ score transform σ(h) (score_transform: sigmoid)", {"score": "sigmoid"}),
    ("+ squared hinge of margin 1 (LibAUC's surrogate)", {"surrogate": "squared_hinge"}),
    ("+ γ'/μ' = 1 (the outer step w ← v̄_n)", {"gamma_ratio": 1.0}),
    ("+ T_k capped at 200 (max_inner_steps: more outer steps)", {"schedule": "cap 200"}),
    ("+ the last inner iterate (inner_output: last)", {"output": "last"}),
]
ALONE = [("none (the paper's reading)", {}),
         ("score transform σ(h) (score_transform: sigmoid)", {"score": "sigmoid"}),
         ("squared hinge of margin 1, on raw h (no σ)", {"surrogate": "squared_hinge"}),
         ("squared hinge of margin 1 on σ(h) (LibAUC's loss)", {"surrogate": "squared_hinge", "score": "sigmoid"}),
         ("γ'/μ' = 1 (the outer step w ← v̄_n)", {"gamma_ratio": 1.0}),
         ("T_k capped at 200 (max_inner_steps: more outer steps)", {"schedule": "cap 200"}),
         ("the last inner iterate (inner_output: last)", {"output": "last"})]
PEER_VARIANTS = {
    "Adam (LibAUC's default mode)": lambda lr: {"lr": lr, "mode": "adam"},
    "SGD mode (momentum 0.9)": lambda lr: {"lr": lr, "mode": "sgd"},
    "Adam, loss on raw h (no σ)": lambda lr: {"lr": lr, "mode": "adam", "score": "identity"},
}
PEER_LRS = {"Adam (LibAUC's default mode)": R.LIBAUC_LRS, "SGD mode (momentum 0.9)": (0.1, 1.0, 10.0),
            "Adam, loss on raw h (no σ)": R.LIBAUC_LRS}


def ladder_settings() -> list[tuple[str, dict]]:
    """The ladder's rows: each adds its change to the row above, from the paper's reading."""
    rows, setting = [], dict(PAPER)
    for label, change in LADDER:
        setting = {**setting, **change}
        rows.append((label, setting))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{R.QUICK_STEPS} batches, 2 reported seeds, 1 selection "
                    "seed, reduced grids, no config-budget table (a check that the script runs)")
    ap.add_argument("--seeds", type=int, default=None, help="the first N reported seeds of SEEDS")
    ap.add_argument("--selection-seeds", type=int, default=None, help="the first N selection seeds of SEEDS")
    ap.add_argument("--no-variants", action="store_true", help="LibAUC in its default Adam mode only (reduced)")
    ap.add_argument("--no-alone", action="store_true", help="no 'each factor alone' table (reduced)")
    ap.add_argument("--no-config-budget", action="store_true", help="no table at the config's budget (reduced)")
    ap.add_argument("--short-ladder", action="store_true", help="the ladder's rows 0-3 only, from the paper's reading "
                    "to the shipped objective (reduced)")
    ap.add_argument("--workers", type=int, default=2, choices=(1, 2), help="parallel runs (one torch thread each)")
    args = ap.parse_args()
    P.quiet()
    if not P.libauc_available():
        raise SystemExit("LibAUC is not installed (pip install libauc==2.0.1, a benchmark-only dependency)")
    plan = SEEDS.take(2, 1) if args.quick else SEEDS.take(args.seeds, args.selection_seeds)
    steps = R.QUICK_STEPS if args.quick else R.STEPS
    P.load(plan.reported[0], P.CACHE / "data")  # parse once before the workers fork
    run = R.Runner(steps, workers=args.workers)
    cuts = {"variants": args.no_variants, "alone": args.no_alone, "config_budget": args.no_config_budget,
            "ladder": args.short_ladder}
    lines = report(run, plan, steps, args.quick, cuts)
    name = "pauc_peer_quick" if args.quick else "pauc_peer"
    command = "python benchmarks/reproduce/pauc_peer.py" + (" --quick" if args.quick else "") + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("seeds", args.seeds), ("selection_seeds", args.selection_seeds))
        if v is not None) + "".join(f" --no-{k.replace('_', '-')}" for k, cut in cuts.items() if cut and k != "ladder") + (
        " --short-ladder" if args.short_ladder else "")
    seconds, compute = run.compute()
    protocol = (f"Protocol: `benchmarks/reproduce/pauc_peer.py` docstring. {steps} batches of 100 + 100 per run "
                f"(the config-budget table: {CONFIG_STEPS:,}); test pAUC = normalised partial AUC on FPR [0.05, 0.5] "
                f"of `a9a.t` (clean labels); ± is the sample standard deviation over the reported seeds (ddof = 1). "
                f"Seeds: {plan.describe()}. Every step size (c, the peer's lr) and the reference peer method are "
                "chosen by the mean validation pAUC [0.05, 0.5] over the selection seeds on the same data variant; "
                "the tables use the reported seeds only.")
    reduced = [f"{len(plan.selection)} of the {len(SEEDS.selection)} selection seeds"] * (plan.selection != SEEDS.selection)
    reduced += [f"{len(plan.reported)} of the {len(SEEDS.reported)} reported seeds"] * (plan.reported != SEEDS.reported)
    reduced += ["LibAUC in its default Adam mode only (no SGD-mode and raw-score variants)"] * args.no_variants
    reduced += ["no 'each factor alone' table"] * args.no_alone
    reduced += [f"no table at the config's budget ({CONFIG_STEPS:,} batches)"] * args.no_config_budget
    reduced += ["the ladder's rows 0-3 only (no T_k cap, no last inner iterate)"] * args.short_ladder
    if reduced and not args.quick:
        protocol += (" **Reduced protocol** (the full one, the command without options, did not fit the 2 shared "
                     "cores before the deadline): " + "; ".join(reduced) + ".")
    head = C.header("Partial AUC on FPR [0.05, 0.5]: AGD-SBCD against LibAUC's one-way pAUC losses, and why",
                    command, seconds, plan.reported, compute + protocol)
    C.write_result(name, head + lines)


def report(run: R.Runner, plan: C.SeedPlan, steps: int, quick: bool, cuts: dict[str, bool] | None = None) -> list[str]:
    """The results file's tables; ``cuts`` names the parts a reduced protocol leaves out ("variants", "alone",
    "config_budget", "ladder": rows 0-3 only)."""
    cuts = cuts or {}
    lines: list[str] = []
    datasets = list(R.DATASETS)
    seeds = plan.reported
    test, val = "test/" + R.METRIC, "val/" + R.METRIC
    grid = C_GRID[1:3] if quick else C_GRID
    variants = ["Adam (LibAUC's default mode)"] if quick or cuts.get("variants") else list(PEER_VARIANTS)
    alone = [] if cuts.get("alone") else ALONE
    config_budget = not quick and not cuts.get("config_budget")
    peer_grid = {variant: [PEER_VARIANTS[variant](lr) for lr in (PEER_LRS[variant][1:2] if quick else PEER_LRS[variant])]
                 for variant in variants}
    ladder = LADDER[:4] if cuts.get("ladder") else LADDER
    agd_rows = [s for _, s in ladder_settings()[:len(ladder)]] + [{**PAPER, **change} for _, change in alone]

    # ------------------------------------------------------------------ stage 1: every choice, on the selection seeds
    run.prefetch([(run.job(m, s, data), seed) for data in datasets for m in R.LIBAUC for v in variants
                  for s in peer_grid[v] for seed in plan.selection]
                 + [(run.job(AGD, {**row, "c": c}, data), seed) for data in datasets for row in agd_rows for c in grid
                    for seed in plan.selection])
    peers = {(data, m, v): run.select(m, peer_grid[v], data, plan) for data in datasets for m in R.LIBAUC
             for v in variants}
    agd_chosen = {(data, i): run.select(AGD, [{**row, "c": c} for c in grid], data, plan)
                  for data in datasets for i, row in enumerate(agd_rows)}
    # the reference peer: the LibAUC method (default Adam mode) with the better selection-seed validation pAUC
    best_peer = {data: max(R.LIBAUC, key=lambda m: run.mean(m, peers[(data, m, variants[0])], data, plan.selection, val))
                 for data in datasets}
    config_rows = [("the paper's reading (the former config): ℓ logistic on h, γ'/μ' = 2, c = 10", AGD, {**PAPER, "c": 10.0}),
                   (f"{R.OURS} (the shipped config), c = 10", AGD, R.SHIPPED),
                   ("the shipped config with T_k capped at 200", AGD, {**R.SHIPPED, "schedule": "cap 200"})]
    config_rows += [(m, m, peers[(datasets[0], m, variants[0])]) for m in R.LIBAUC]
    later = [(run.job(m, peers[(data, m, v)], data), seed) for data in datasets for m in R.LIBAUC for v in variants
             for seed in seeds]
    later += [(run.job(AGD, s, data), seed) for s in agd_chosen.values() for data in datasets for seed in seeds]
    if config_budget:
        later += [(run.job(m, s, data, CONFIG_STEPS), seed) for data in datasets for _, m, s in config_rows
                  for seed in seeds]
    run.prefetch(later)

    def values(method: str, s: dict, data: str, key: str = test, budget: int | None = None) -> list[float]:
        return run.values(method, s, data, seeds, key, budget)

    def stats(method: str, s: dict, data: str, key: str = test, budget: int | None = None) -> tuple[float, float]:
        return P.mean_std(values(method, s, data, key, budget))

    # ------------------------------------------------------------------ the peer
    lines += ["### The peer: LibAUC 2.0.1 (one-way pAUC, FPR [0, 0.5]) on the range metric", "",
              "| data | LibAUC method | optimizer mode | lr (chosen on validation) | test pAUC [0.05, 0.5] | "
              "test pAUC [0, 0.5] | val pAUC [0.05, 0.5] | selection val pAUC [0.05, 0.5] |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for data in datasets:
        for method in R.LIBAUC:
            for variant in variants:
                s = peers[(data, method, variant)]
                lines.append(f"| {data} | {method} | {variant} | {s['lr']:g} | {R.pm(stats(method, s, data))} | "
                             f"{R.pm(stats(method, s, data, 'test/pauc_0_0.5'))} | {R.pm(stats(method, s, data, val))} | "
                             f"{C.fmt(run.mean(method, s, data, plan.selection, val))} |")
    lines += ["", "The reference peer of the tables below (Δ) is, per data set, the LibAUC method in Adam mode with the "
              "higher mean validation pAUC over the selection seeds: "
              + ", ".join(f"{d}: {best_peer[d]}" for d in datasets) + ".", ""]

    def delta(s: dict, data: str) -> float:
        """The mean per-seed paired difference AGD-SBCD − the reference peer (reported seeds)."""
        peer = best_peer[data]
        return float(np.mean(np.array(values(AGD, s, data)) - np.array(values(peer, peers[(data, peer, variants[0])], data))))

    # ------------------------------------------------------------------ the ladder
    lines += ["### Why: one factor at a time, added cumulatively (AGD-SBCD; c chosen on validation per row)", "",
              "Δ = the mean per-seed paired difference AGD-SBCD − the reference peer. v̄_n is what Algorithm 2 outputs "
              "(evaluated by default); w is the anchor. Explanatory: no verdict is read off this table.", "",
              "| step | change | " + " | ".join(f"{d}: c | {d}: test pAUC (v̄_n) | {d}: Δ | {d}: test pAUC (w)"
                                               for d in datasets) + " | outer steps reached |",
              "|---|---|" + "---:|" * (4 * len(datasets) + 1)]
    ladder_test: dict[str, list[float]] = {data: [] for data in datasets}
    for i, (label, _) in enumerate(ladder):
        cells = []
        outer = math.nan
        for data in datasets:
            chosen = agd_chosen[(data, i)]
            t = stats(AGD, chosen, data)
            cells += [f"{chosen['c']:g}", R.pm(t), f"{delta(chosen, data):+.4f}", R.pm(stats(AGD, chosen, data, "anchor/" + test))]
            ladder_test[data].append(t[0])
            outer = np.mean(values(AGD, chosen, data, "outer_steps"))
        lines.append(f"| {i} | {label} | " + " | ".join(cells) + f" | {outer:g} |")
    lines += [""]
    effects = []
    for data in datasets:
        steps_ = [(ladder[i][0].lstrip("+ ").split(" (")[0], ladder_test[data][i] - ladder_test[data][i - 1])
                  for i in range(1, len(ladder))]
        big = max(steps_, key=lambda e: abs(e[1]))
        effects.append(f"on {data} the paper's reading is {delta(agd_chosen[(data, 0)], data):+.4f} from the "
                       f"peer and the largest single step is {big[0]} ({big[1]:+.4f}); "
                       + ", ".join(f"{name}: {d:+.4f}" for name, d in steps_))
    lines += ["Read off the ladder: " + "; ".join(effects) + ".", ""]

    # each factor alone, from the paper's reading (so an interaction is visible)
    lines += [] if not alone else ["### Each factor alone, from the paper's reading (c chosen on validation)", "",
              "| change | " + " | ".join(f"{d}: test pAUC (v̄_n) | {d}: Δ" for d in datasets) + " |",
              "|---|" + "---:|" * (2 * len(datasets))]
    for j, (label, _) in enumerate(alone):
        cells = []
        for data in datasets:
            chosen = agd_chosen[(data, len(ladder) + j)]
            cells += [f"{R.pm(stats(AGD, chosen, data))} (c = {chosen['c']:g})", f"{delta(chosen, data):+.4f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [""] if alone else []

    # ------------------------------------------------------------------ the config's budget
    if config_budget:
        lines += [f"### At the config's budget ({CONFIG_STEPS:,} batches)", "",
                  "| data | method | setting | test pAUC [0.05, 0.5] | val pAUC [0.05, 0.5] | test AUROC |",
                  "|---|---|---|---:|---:|---:|"]
        for data in datasets:
            for label, method, s in config_rows:
                lines.append(f"| {data} | {method} | {label if method == AGD else R.describe(method, s)} | "
                             f"{R.pm(stats(method, s, data, budget=CONFIG_STEPS))} | "
                             f"{R.pm(stats(method, s, data, val, CONFIG_STEPS))} | "
                             f"{R.pm(stats(method, s, data, 'test/auroc', CONFIG_STEPS))} |")
        lines += ["", "LibAUC's lr is the one chosen at the 2,600-batch budget on a9a (selection seeds, validation); "
                  "the AGD-SBCD rows run the configs' c = 10 as written.", ""]
        claims = []
        for data in datasets:
            for label, method, s in config_rows[:2]:
                for _, peer, ps in config_rows[-len(R.LIBAUC):]:
                    verdict = C.paired_verdict(values(method, s, data, budget=CONFIG_STEPS),
                                               values(peer, ps, data, budget=CONFIG_STEPS))
                    claims.append(C.Claim(f"{data}: AGD-SBCD, {label} ≥ {peer}, test pAUC [0.05, 0.5]", None,
                                          list(verdict.differences), verdict=verdict.text()))
        lines += ["Paired at the config's budget (not a claim of the paper; the paper's reading first):", ""]
        lines += C.claim_table(claims, "value", digits=4)
        lines += ["", C.VERDICT_RULE, ""]
    return lines


if __name__ == "__main__":
    main()
