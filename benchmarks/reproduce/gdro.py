"""Group DRO with the CVaR divergence on UCI Adult (Chen, Wang, Yang, Lin, Yang, "Stochastic Momentum Methods for
Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025, §6 and Appendix F.1): SONEX
against SONX, SOX on the same objective, and plain ERM, with the paper's open knobs swept.

    python benchmarks/reproduce/gdro.py [--quick] [--epochs E] [--seeds S] [--jobs J]

Problem (the paper's eq. (10)): ``min_{θ,s} F(θ, s) = s + (1/n) Σ_g (1/r) [L_g(θ) − s]_+``, the mean logistic loss
of the k = r·n worst groups, r = 0.15 (the paper's, "α = 0.15").

Protocol ([open]: the paper leaves it open or its setting does not apply here; [budget]: shortened for a CPU):

* data: ``adult.data`` (10% held out for validation, stratified by label, per seed) and ``adult.test`` from
  ../shared/data/uci-adult; n = 20 groups = sex × race (5 values) × income label, as the paper's CelebA groups
  cross attributes with the label [open: the paper has no tabular GDRO task; its sets (Camelyon17, Amazon, CelebA)
  are image / text sets we do not have]; group sizes 10 to 17,000 training rows;
* model: linear logistic (``LinearScorer``) on Adult's 108 one-hot / standardized features, so F is convex and the
  optimum F* is computed (L-BFGS on the Moreau-smoothed ``F_λ``, λ continued down to 1e-4, float64; if any
  run's iterate is lower, that value is used) [open: the paper fine-tunes pretrained deep nets];
* batches: B1 = 8 groups × B2 = 32 rows (the paper's Camelyon17 "256 (8)"), one epoch = one pass over the rows;
  10 epochs (Camelyon17's budget), every step size ×0.3 every 3 epochs (Camelyon17's step decay); no weight decay
  [open: the paper's 0.01 would change the objective whose optimum we report against];
* methods: SONEX (Moreau-smoothed outer gradient, MSVR tracking, momentum-type update β = 0.1: the paper's update on
  Camelyon17 and CelebA); SONX (the un-smoothed subgradient, MSVR, plain SGD: Hu, Zhu & Yang, ICML 2023); SOX on
  the CVaR objective (``PenaltySOX``: moving average without MSVR correction, the previous u, momentum β = 0.1;
  Wang & Yang, ICML 2022) [open: the paper's third baseline, OOA, is not in the library]; ERM (the mean logistic
  loss over rows, shuffled batches of 256, momentum SGD β = 0.1, in a plain loop: not an FCCO method);
* open knobs swept (the paper's grids where they apply; learning rates on a grid for a linear model, since the
  paper's {1e-5, …, 5e-3} is for fine-tuning deep nets): SONEX η × λ at γ = 0.5, γ' = 0.1, then
  γ ∈ {0.2, 0.5, 0.8} × γ' ∈ {0.01, 0.1} at the best (η, λ); SONX and SOX η × γ; ERM η;
* the paper's reading first: the headline SONEX row picks λ inside the paper's grid {1, 0.1, 0.01}; a separate row
  labelled "ours: λ = 1e-3 allowed" picks (η, λ) on the grid extended below the paper's (the smoothing bias
  λ/(2r²) of λ = 0.01 is 0.22 at r = 0.15), with its own γ × γ' sweep and its own verdicts;
* seeds and selection, fixed before any run: every knob is the smallest mean final training F (the paper's
  reported metric is the training loss; no validation or test number enters) over the selection seeds
  100 and 101, which are never reported; every method then runs at its selected setting on the reported seeds
  0, 1, 2 (the paper: 3 seeds; a seed draws the validation split, the batches and the initialization;
  s starts at 0);
* reported: the exact training F(θ_t, s_t) − F* after every epoch (the paper's Figure 1 curves) and at the end,
  min_s F(θ, s) − F* (the CVaR of the group losses at θ, independent of how well s was tracked), test accuracy
  and test worst-group accuracy (the paper reports test accuracy on one set).

The paper gives no numbers for GDRO, only an ordering ("SONEX performs better than SONX and OOA"): the claims below
are orderings, each checked on every metric we report (training F, the training CVaR min_s F, test accuracy, test
worst-group accuracy, test CVaR) with the suite's one paired rule, whichever way it comes out. Runs drive the library's modules through ``Trainer.fit`` and are cached in
``--cache`` (default: a folder under the system's temp directory). Writes ``benchmarks/reproduce/results/gdro.md``
(``gdro_quick.md`` with ``--quick``) and ``gdro.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize

import common as C
from common import Claim, Runner, Stopwatch, claim_table, fmt, grid_table, header, save_plot, shared_data, write_result  # noqa: I001

from lightning.pytorch import Callback, Trainer, seed_everything

from fccolit.algorithms.sonex import SONEX, SONX, PenaltySOX
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.datamodules.grouped import GroupedDataModule
from fccolit.models import LinearScorer
from fccolit.objectives.constrained import GroupDROCVaRLoss
from fccolit.optim import Momentum

NAME = "gdro"
#: reported seeds (tables and verdicts) and selection seeds (every knob), disjoint
SEEDS = C.SeedPlan(reported=(0, 1, 2), selection=(100, 101))
RATIO = 0.15
RACES = ("Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White")
ROOT = None  # set in main (workers inherit it through fork)
#: what configs/synthetic/gdro_sonex.yaml ships for SONEX's smoothing and tracking (marked in the tables)
SHIPPED = dict(lam=0.01, gamma=0.5, gamma_prime=0.1)
PAPER_LAMS = (1.0, 0.1, 0.01)  # the paper's λ grid (F.1)
OURS_LAMS = PAPER_LAMS + (0.001,)  # ours: one value below it
LABELS = {"sonex": "SONEX (λ-smoothed, momentum; λ in the paper's grid)",
          "sonex_ours": "ours: SONEX with λ = 1e-3 allowed", "sonx": "SONX (subgradient, SGD)",
          "sox": "SOX (CVaR objective, momentum; in place of the paper's OOA)", "erm": "ERM (mean loss, momentum SGD)"}


@dataclasses.dataclass(frozen=True)
class Setting:
    method: str
    lr: float
    lam: float = 0.0
    gamma: float = 0.5
    gamma_prime: float = 0.1
    epochs: int = 10


# ---------------------------------------------------------------------------------------------------- data
class AdultGroupsDataModule(GroupedDataModule):
    """UCI Adult with 20 groups: sex × race × income label (``group = 4·race + 2·female + y``)."""

    def __init__(self, root: str, seed: int, groups_per_batch: int | None = 8, samples_per_group: int = 32,
                 batch_size: int = 256) -> None:
        super().__init__(batch_size=batch_size, groups_per_batch=groups_per_batch, samples_per_group=samples_per_group,
                         seed=seed)
        base = FairnessDataModule(root, "adult", val_fraction=0.1, seed=seed)
        base.setup("fit")
        race_cols = [base.feature_names.index(f"race={r}") for r in RACES]
        for split, fields in base._splits.items():
            race = fields["x"][:, race_cols].argmax(1)
            female = fields["group"].long()  # FairnessDataModule: group 1 = female
            y = fields["y"].reshape(-1).long()
            self._splits[split] = {**fields, "group": 4 * race + 2 * female + y}
        self.sizes = {**base.sizes, "num_groups": 4 * len(RACES)}


def group_stats(objective: GroupDROCVaRLoss, scores: torch.Tensor, fields: dict) -> tuple[torch.Tensor, torch.Tensor]:
    groups, means = objective.group_means(scores, fields)
    return groups, means


def cvar(means: torch.Tensor, ratio: float = RATIO) -> float:
    """``min_s s + (1/(r n)) Σ_g [L_g − s]_+``: attained at s = the ⌈k⌉-th largest group loss."""
    k = ratio * means.numel()
    top = means.sort(descending=True).values
    s = top[int(math.ceil(k)) - 1]
    return float(s + (top - s).clamp_min(0).sum() / k)


def exact_objective(s: float, means: torch.Tensor, ratio: float = RATIO) -> float:
    return float(s + (means - s).clamp_min(0).mean() / ratio)


def reference_optimum(fields: dict) -> float:
    """``min F`` (up to about 1e-4): L-BFGS over (θ, bias, s) on the Moreau-smoothed ``F_λ``, float64, with λ
    continued 1e-2 → 1e-3 → 1e-4 (each stage warm-started; F_λ ≤ F ≤ F_λ + λ/(2r²)); the best exact F or
    CVaR at the iterates."""
    x, d = fields["x"].double(), fields["x"].shape[1]
    objective = GroupDROCVaRLoss(ratio=RATIO).double()
    best, vec = math.inf, np.r_[np.zeros(d + 1), 0.5]
    for lam in (1e-2, 1e-3, 1e-4):
        def fun(v, lam=lam):
            w = torch.tensor(v, dtype=torch.float64, requires_grad=True)
            _, means = objective.group_means(x @ w[:d] + w[d], fields)
            value = w[d + 1] + objective.outer_fn.envelope((means - w[d + 1]).unsqueeze(-1), lam).mean()
            (grad,) = torch.autograd.grad(value, w)
            return float(value.detach()), grad.numpy()

        vec = minimize(fun, vec, jac=True, method="L-BFGS-B", options={"maxiter": 400, "gtol": 1e-9}).x
        w = torch.tensor(vec)
        with torch.no_grad():
            _, means = objective.group_means(x @ w[:d] + w[d], fields)
        best = min(best, exact_objective(float(w[d + 1]), means), cvar(means))
    return best


def evaluate(scores: torch.Tensor, fields: dict, s: float) -> dict:
    objective = GroupDROCVaRLoss(ratio=RATIO)
    with torch.no_grad():
        groups, means = objective.group_means(scores, fields)
        pred = (scores.reshape(-1) > 0).long()
        correct = (pred == fields["y"].reshape(-1).long()).float()
        g = fields["group"].reshape(-1)
        accs = torch.stack([correct[g == k].mean() for k in groups])
    return {"F": exact_objective(s, means), "cvar": cvar(means), "acc": float(correct.mean()),
            "worst_acc": float(accs.min()), "mean_group_loss": float(means.mean())}


# ---------------------------------------------------------------------------------------------------- one run
class Curves(Callback):
    def __init__(self, fields: dict) -> None:
        self.fields, self.rows = fields, []

    def record(self, pl_module) -> None:
        with torch.no_grad():
            scores = pl_module.model(self.fields["x"])
        self.rows.append(evaluate(scores, self.fields, float(pl_module.objective.threshold)))

    def on_train_start(self, trainer, pl_module) -> None:
        self.record(pl_module)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.record(pl_module)


def milestones(epochs: int) -> list[int]:
    return list(range(3, epochs, 3)) or [max(1, epochs)]


def run(setting: Setting, seed: int) -> dict:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    start, cpu_start = time.perf_counter(), time.process_time()
    if setting.method == "erm":
        return run_erm(setting, seed, start, cpu_start)
    data = AdultGroupsDataModule(ROOT, seed)
    data.setup("fit")
    seed_everything(seed, verbose=False)
    objective = GroupDROCVaRLoss(ratio=RATIO)
    common = dict(data_sizes=data.sizes, metrics=[], scheduler_interval="epoch",
                  scheduler=lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, milestones(setting.epochs), 0.3))
    lr = setting.lr
    if setting.method == "sonex":
        module = SONEX(LinearScorer(), objective, smoothing=setting.lam, ema_weight=setting.gamma,
                       correction_weight=setting.gamma_prime,
                       optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=0.1), **common)
    elif setting.method == "sonx":
        module = SONX(LinearScorer(), objective, ema_weight=setting.gamma, correction_weight=setting.gamma_prime,
                      optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=1.0), **common)
    else:
        module = PenaltySOX(LinearScorer(), objective, ema_weight=setting.gamma,
                            optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=0.1), **common)
    curves = Curves(data._splits["train"])
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=setting.epochs, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      use_distributed_sampler=False, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[curves])
    trainer.fit(module, datamodule=data)
    with torch.no_grad():
        s = float(module.objective.threshold)
        test = evaluate(module.model(data._splits["test"]["x"]), data._splits["test"], s)
        val = evaluate(module.model(data._splits["val"]["x"]), data._splits["val"], s)
    return {"curves": curves.rows, "test": test, "val": val, "steps": trainer.global_step,
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start}


def run_erm(setting: Setting, seed: int, start: float, cpu_start: float) -> dict:
    """The mean logistic loss over rows, shuffled batches of 256, momentum SGD (β = 0.1) with the same decay; s
    is then set to its best value for the CVaR objective (F is reported as min_s F)."""
    data = AdultGroupsDataModule(ROOT, seed)
    data.setup("fit")
    seed_everything(seed, verbose=False)
    train = data._splits["train"]
    model = LinearScorer(in_features=train["x"].shape[1])
    opt = Momentum(model.parameters(), lr=setting.lr, momentum_weight=0.1)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones(setting.epochs), 0.3)
    gen = torch.Generator().manual_seed(seed)
    n, rows = train["x"].shape[0], []
    objective = GroupDROCVaRLoss(ratio=RATIO)

    def record():
        with torch.no_grad():
            scores = model(train["x"])
            r = evaluate(scores, train, 0.0)
        r["F"] = r["cvar"]
        rows.append(r)

    record()
    steps = 0
    for _ in range(setting.epochs):
        for idx in torch.randperm(n, generator=gen).split(256):
            loss = objective.sample_losses(model(train["x"][idx]), {"y": train["y"][idx]}).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        sched.step()
        record()
    with torch.no_grad():
        test = evaluate(model(data._splits["test"]["x"]), data._splits["test"], 0.0)
        val = evaluate(model(data._splits["val"]["x"]), data._splits["val"], 0.0)
    return {"curves": rows, "test": test, "val": val, "steps": steps, "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - cpu_start}


# ---------------------------------------------------------------------------------------------------- main
def mean_std(values, digits: int = 4) -> str:
    values = list(values)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {C.sample_std(values):.{digits}f}"


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 epochs, 1 selection seed, 2 reported seeds, small grids")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None, help=f"the first N reported seeds of {SEEDS.reported}")
    ap.add_argument("--jobs", type=int, default=1, help="processes (one torch thread each)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "fccolit-gdro-runs"))
    ap.add_argument("--root", default=None, help="folder with adult.data / adult.test (default ../shared/data)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    ROOT = args.root or str(shared_data("uci-adult"))
    default_epochs = 3 if args.quick else 10
    epochs = args.epochs or default_epochs
    plan = SEEDS.take(args.seeds or (2 if args.quick else None), 1 if args.quick else None)
    seeds = list(plan.reported)
    watch = Stopwatch()
    AdultGroupsDataModule(ROOT, 0)  # build the cached arrays before forking
    runner = Runner(run, workers=args.jobs, cache=Path(args.cache),
                    key=lambda job: f"{job[0]!r}|{job[1]}|{Path(ROOT).resolve()}")

    def final_f(r: dict) -> float:
        value = r["curves"][-1]["F"]
        return value if math.isfinite(value) else math.inf

    def select(settings: list[Setting]) -> tuple[Setting, dict]:
        """The smallest mean final training F over the plan's selection seeds (``Runner.tune``)."""
        chosen, results = runner.tune(settings, lambda r: -final_f(r), seeds=plan, metric="-F (final training objective)")
        return chosen, {s: statistics.mean(final_f(r) for r in rs) for s, rs in results.items()}

    lrs = (0.1, 1.0) if args.quick else (0.03, 0.1, 0.3, 1.0)
    lams = (0.01, 0.001) if args.quick else OURS_LAMS
    paper_lams = [lam for lam in lams if lam in PAPER_LAMS]
    gammas = (0.5,) if args.quick else (0.2, 0.5, 0.8)
    gprimes = (0.1,) if args.quick else (0.01, 0.1)

    # SONEX: η × λ at γ = 0.5, γ' = 0.1, then γ × γ' at the best (η, λ): the paper's λ grid (headline), and ours
    grid1 = [Setting("sonex", lr, lam=lam, epochs=epochs) for lr in lrs for lam in lams]
    _, score1 = select(grid1)
    best1 = min((st for st in grid1 if st.lam in PAPER_LAMS), key=score1.__getitem__)
    best1_ours = min(grid1, key=score1.__getitem__)
    sonex, score2 = select([dataclasses.replace(best1, gamma=g, gamma_prime=gp) for g in gammas for gp in gprimes])
    sonex_ours, score2_ours = select([dataclasses.replace(best1_ours, gamma=g, gamma_prime=gp)
                                      for g in gammas for gp in gprimes])
    # SONX and SOX: η × γ; ERM: η
    sonx, score_sonx = select([Setting("sonx", lr, gamma=g, epochs=epochs) for lr in lrs for g in gammas])
    sox, score_sox = select([Setting("sox", lr, gamma=g, epochs=epochs) for lr in lrs for g in (gammas if args.quick else (0.1, 0.5, 0.8))])
    erm, score_erm = select([Setting("erm", lr, epochs=epochs) for lr in lrs])
    chosen = {"sonex": sonex, "sonx": sonx, "sox": sox, "erm": erm, "sonex_ours": sonex_ours}
    finals = {m: runner.many([(s, seed) for seed in seeds]) for m, s in chosen.items()}
    references, reference_seconds = {}, 0.0
    for seed in seeds:  # cached beside the runs
        path = Path(args.cache) / f"reference-seed{seed}.json"
        if path.is_file() and "seconds" in json.loads(path.read_text()):
            stored = json.loads(path.read_text())
            references[seed], reference_seconds = stored["F*"], reference_seconds + stored["seconds"]
            continue
        start = time.perf_counter()
        data = AdultGroupsDataModule(ROOT, seed)
        data.setup("fit")
        references[seed] = reference_optimum(data._splits["train"])
        seconds = time.perf_counter() - start
        reference_seconds += seconds
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"F*": references[seed], "seconds": seconds}))
    for m in finals:  # a run below the reference means the reference is not yet the optimum: use the best seen
        for r, seed in zip(finals[m], seeds):
            references[seed] = min(references[seed], min(c["F"] for c in r["curves"]), min(c["cvar"] for c in r["curves"]))
    run_seconds = sum(r["seconds"] for r in runner.done.values())
    cpu = [r.get("cpu_seconds") for r in runner.done.values()]
    cpu_text = (f"{sum(cpu) / 60:.1f} min of CPU time in the runs" if None not in cpu else
                "the runs' CPU time was not recorded (cached before it was)")
    compute = run_seconds + reference_seconds

    def gap(r: dict, seed: int, e: int = -1, key: str = "F") -> float:
        return r["curves"][e][key] - references[seed]

    def gaps(m: str, e: int = -1, key: str = "F") -> list[float]:
        return [gap(r, s, e, key) for r, s in zip(finals[m], seeds)]

    #: every metric a comparison is made on: (what, value of a run, higher is better)
    metrics = [
        ("final training F", lambda r: r["curves"][-1]["F"], False),
        ("training CVaR of the group losses (min_s F)", lambda r: r["curves"][-1]["cvar"], False),
        ("test accuracy", lambda r: r["test"]["acc"], True),
        ("test worst-group accuracy", lambda r: r["test"]["worst_acc"], True),
        ("test CVaR of the group losses", lambda r: r["test"]["cvar"], False),
    ]

    def compare(a: str, b: str, prefix: str, claim: str = "", only: tuple[str, ...] = ()) -> list[Claim]:
        """One row per metric: A − B per reported seed and the paired verdict for "A is better than B"."""
        rows = []
        for what, value, higher in metrics:
            if only and what not in only:
                continue
            va, vb = [value(r) for r in finals[a]], [value(r) for r in finals[b]]
            paired = C.paired_verdict(va, vb, higher_is_better=higher)
            better = "higher" if higher else "lower"
            rows.append(Claim(f"{prefix}, {what} ({better} is better){claim if not rows else ''}", None,
                              [x - y for x, y in zip(va, vb)], verdict=paired.text()))
        return rows

    claims = (compare("sonex", "sonx", "SONEX − SONX", " — §6: \"SONEX performs better than SONX\"")
              + compare("sonex", "sox", "SONEX − SOX (CVaR objective)")
              + compare("sonex", "erm", "SONEX − ERM", " — GDRO's motivation (F.1)"))
    ours_claims = (compare("sonex_ours", "sonx", "ours: SONEX (λ = 1e-3 allowed) − SONX")
                   + compare("sonex_ours", "sonex", "ours: SONEX (λ = 1e-3 allowed) − SONEX (the paper's λ grid)"))

    def tally(rows: list[Claim]) -> str:
        counts = {v: sum(c.verdict.startswith(v) for c in rows) for v in ("reproduced", "reversed", "not separable")}
        return f"{counts['reproduced']} reproduced, {counts['reversed']} reversed, {counts['not separable']} not separable"

    def plain(rows: list[Claim], a: str, b: str) -> str:
        """The comparison in words: which metrics favour A, which B, which do not separate."""
        def what(c: Claim) -> str:
            return c.label.split(", ", 1)[1].split(" (", 1)[0]
        groups = {v: [what(c) for c in rows if c.verdict.startswith(v)] for v in ("reproduced", "reversed", "not separable")}
        parts = [f"{a} better on {', '.join(groups['reproduced'])}" if groups["reproduced"] else f"{a} better on none",
                 f"{b} better on {', '.join(groups['reversed'])}" if groups["reversed"] else f"{b} better on none"]
        if groups["not separable"]:
            parts.append(f"not separable on {', '.join(groups['not separable'])}")
        return "; ".join(parts)

    protocol = (__doc__.split("Protocol", 1)[1].split("The paper gives no numbers")[0]).strip()
    command = "python benchmarks/reproduce/gdro.py" + (" --quick" if args.quick else "") + \
        (f" --epochs {epochs}" if args.epochs else "") + (f" --seeds {len(seeds)}" if args.seeds else "") + \
        (f" --jobs {args.jobs}" if args.jobs > 1 else "")
    sizes = torch.bincount(AdultGroupsDataModule(ROOT, 0)._splits["train"]["group"], minlength=20)
    select_seeds = ", ".join(map(str, plan.selection))
    lines = header("Group DRO (CVaR, r = 0.15) on UCI Adult: SONEX vs SONX, SOX and ERM (NeurIPS 2025 non-smooth "
                   "FCCO, F.1)", command, compute, seeds,
                   f"Protocol {protocol}\n\nSeeds: {plan.describe()}. Training group sizes (seed 0, group = "
                   f"4·race + 2·female + y, races {', '.join(RACES)}): {', '.join(str(int(v)) for v in sizes)}. "
                   f"Compute: {run_seconds / 60:.1f} min, the sum of the runs' wall-clock times ({len(runner.done)} "
                   f"runs of {finals['sonex'][0]['steps']} steps, selection seeds included, each in one process of "
                   f"one thread, {args.jobs} at a time; {cpu_text}) + {reference_seconds / 60:.1f} min for the "
                   f"reference optima F*. The machine is shared: its load average was {os.getloadavg()[0]:.1f} on "
                   f"{os.cpu_count()} cores when this file was written, so wall-clock times overstate the CPU cost "
                   f"(this invocation: {watch.seconds:.0f} s of wall time, cached runs read back; runs cached in "
                   f"`{Path(args.cache).name}/`). "
                   f"F* per seed: {', '.join(f'{references[s]:.4f}' for s in seeds)}.")
    lines += ["### Paper vs ours", "",
              "The paper reports training-loss curves and test accuracy (its Figure 1) and no numbers, only the "
              "ordering \"SONEX performs better than SONX and OOA\". Each comparison is therefore checked on every "
              "metric we report, whichever way it comes out. The \"ours\" column is A − B per reported seed as "
              "measured (mean ± std); the verdict's interval is signed so that > 0 favours A (SONEX).", "",
              "The paper's reading: SONEX with λ inside the paper's grid.", ""]
    lines += claim_table(claims, "difference")
    lines += ["", C.VERDICT_RULE, "",
              f"In words: SONEX vs SONX: {plain(claims[:5], 'SONEX', 'SONX')}. SONEX vs SOX: "
              f"{plain(claims[5:10], 'SONEX', 'SOX')}. SONEX vs ERM: {plain(claims[10:], 'SONEX', 'ERM')}.", "",
              "### Ours: SONEX with λ below the paper's grid (λ ∈ {1, 0.1, 0.01, 0.001}, then its own γ × γ')", "",
              f"Selected: {describe(sonex_ours)} (the paper's reading: {describe(sonex)})"
              + (": the same setting — λ = 1e-3 was not selected, so the rows below repeat the headline's and the "
                 "comparison with the paper's reading is identically 0." if sonex_ours == sonex else "."), ""]
    lines += claim_table(ours_claims, "difference")
    lines += ["", f"In words: ours vs SONX: {plain(ours_claims[:5], 'ours', 'SONX')}. Ours vs the paper's-grid SONEX: "
              f"{plain(ours_claims[5:], 'ours', 'the paper-grid SONEX')}.", ""]
    lines += ["", "### Every method at its selected setting", "",
              f"| method | setting (selected on seeds {select_seeds}) | final F − F* | final min_s F − F* (CVaR at θ) | "
              "test accuracy | test worst-group accuracy | test CVaR of group losses |", "|---|---|---:|---:|---:|---:|---:|"]
    for m, st in chosen.items():
        lines.append(f"| {LABELS[m]} | {describe(st)} | {mean_std(gaps(m))} | {mean_std(gaps(m, key='cvar'))} | "
                     f"{mean_std(r['test']['acc'] for r in finals[m])} | "
                     f"{mean_std(r['test']['worst_acc'] for r in finals[m])} | "
                     f"{mean_std(r['test']['cvar'] for r in finals[m])} |")
    lines += ["", "ERM has no s: its F is min_s F (the CVaR of its group losses). Standard deviations: ddof = 1.", ""]
    lines += [f"### Sweep 1: SONEX η × λ (γ = 0.5, γ' = 0.1; mean final training F over selection seeds "
              f"{select_seeds}; bold: the selected cell inside the paper's λ grid)", ""]
    by1 = {(st.lr, st.lam): v for st, v in score1.items()}
    lines += grid_table("η", "λ", lrs, lams, lambda r, c: by1[(r, c)], mark=(best1.lr, best1.lam))
    lines += ["", f"The paper's reading (λ ∈ {{{', '.join(f'{v:g}' for v in paper_lams)}}}): η = {best1.lr:g}, "
              f"λ = {best1.lam:g} (mean F {score1[best1]:.4f}). Ours (λ = 1e-3 allowed): η = {best1_ours.lr:g}, "
              f"λ = {best1_ours.lam:g} (mean F {score1[best1_ours]:.4f}). The envelope f_λ sits up to λ/(2r²) below f "
              "(0.22 at λ = 0.01, r = 0.15) and its minimizer is not F's, so on this convex, linear problem with about "
              "a thousand steps less smoothing can help; the paper tunes λ for deep nets.", ""]
    for title, st0, score, chosen_st in (("the paper's reading", best1, score2, sonex),
                                         ("ours", best1_ours, score2_ours, sonex_ours)):
        lines += [f"### Sweep 2 ({title}): SONEX γ × γ' at η = {st0.lr:g}, λ = {st0.lam:g} (bold: the shipped "
                  "config's γ, γ')", ""]
        by2 = {(st.gamma, st.gamma_prime): v for st, v in score.items()}
        lines += grid_table("γ", "γ'", gammas, gprimes, lambda r, c: by2[(r, c)],
                            mark=(SHIPPED["gamma"], SHIPPED["gamma_prime"]))
        lines += ["", f"Selected: γ = {chosen_st.gamma:g}, γ' = {chosen_st.gamma_prime:g}. " + shipped_note(chosen_st), ""]
    lines += [f"### Sweep 3: the baselines' η × γ (mean final training F over selection seeds {select_seeds})", ""]
    for m, score, gs in (("sonx", score_sonx, gammas), ("sox", score_sox, gammas if args.quick else (0.1, 0.5, 0.8))):
        by = {(s.lr, s.gamma): v for s, v in score.items()}
        lines += [f"{LABELS[m]}:", ""]
        lines += grid_table("η", "γ", lrs, gs, lambda r, c: by[(r, c)], mark=(chosen[m].lr, chosen[m].gamma))
        lines += [""]
    lines += [f"{LABELS['erm']}: " + ", ".join(f"η = {s.lr:g}: {v:.4f}" for s, v in score_erm.items())
              + " (min_s F).", ""]
    lines += ["### Curves (the paper's Figure 1): training F(θ_t, s_t) − F* after each epoch, mean over seeds", "",
              "| epoch | " + " | ".join(LABELS[m] for m in chosen) + " |", "|---:|" + "---:|" * len(chosen)]
    for e in range(epochs + 1):
        lines.append(f"| {e} | " + " | ".join(fmt(statistics.mean(gaps(m, e))) for m in chosen) + " |")

    def draw(plt):
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in chosen:
            ax.semilogy(range(epochs + 1), [max(statistics.mean(gaps(m, e)), 1e-6) for e in range(epochs + 1)],
                        label=LABELS[m])
        ax.set_xlabel("epoch")
        ax.set_ylabel("training F(θ, s) − F*")
        ax.set_title("GDRO-CVaR (r = 0.15) on UCI Adult, 20 groups")
        ax.legend(fontsize=7)
        return fig

    name = NAME + ("_quick" if args.quick else "") + ("" if epochs == default_epochs else f"_{epochs}epochs")
    lines += ["", save_plot(name, draw)]
    write_result(name, lines)
    if not args.quick and name == NAME:  # README's rows: SONEX against SONX on every metric
        C.write_headlines(name, [{
            "claim": f"SONEX performs better than SONX on group DRO (Chen et al. NeurIPS 2025, §6, F.1), {reading}",
            "data": f"UCI Adult, 20 groups (linear model), {len(seeds)}", "paper": "— (curves only)",
            "ours": f"SONEX: training F − F* {statistics.mean(gaps(m)):.4f} vs SONX {statistics.mean(gaps('sonx')):.4f}; "
                    f"test worst-group accuracy {statistics.mean(r['test']['worst_acc'] for r in finals[m]):.4f} vs "
                    f"{statistics.mean(r['test']['worst_acc'] for r in finals['sonx']):.4f}",
            "verdict": "; ".join(c.label.split(", ", 1)[1].split(" —")[0] + ": " + c.verdict for c in rows)}
            for m, reading, rows in (("sonex", "λ in the paper's grid", claims[:5]),
                                     ("sonex_ours", "ours: λ = 1e-3 allowed", ours_claims[:5]))])


def describe(s: Setting) -> str:
    if s.method == "sonex":
        return f"η={s.lr:g}, λ={s.lam:g}, γ={s.gamma:g}, γ'={s.gamma_prime:g}"
    if s.method == "sonx":
        return f"η={s.lr:g}, γ={s.gamma:g}, γ'={s.gamma_prime:g}"
    if s.method == "sox":
        return f"η={s.lr:g}, γ={s.gamma:g}"
    return f"η={s.lr:g}"


def shipped_note(s: Setting) -> str:
    same = (s.lam, s.gamma, s.gamma_prime) == (SHIPPED["lam"], SHIPPED["gamma"], SHIPPED["gamma_prime"])
    return ("configs/synthetic/gdro_sonex.yaml ships these λ, γ, γ' (its η is sized for its synthetic data)." if same
            else f"configs/synthetic/gdro_sonex.yaml ships λ = {SHIPPED['lam']:g}, γ = {SHIPPED['gamma']:g}, "
                 f"γ' = {SHIPPED['gamma_prime']:g} for its synthetic data; this sweep is on Adult's groups.")


if __name__ == "__main__":
    main()
