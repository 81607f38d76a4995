"""SONG, K-SONG and SOLC against listwise cross-entropy and a popularity ranking on MovieLens, with the shipped configs
(Qiu, Hu, Zhong, Zhang & Yang, "Large-scale Stochastic Optimization of NDCG Surrogates for Deep Learning with
Provable Convergence", ICML 2022, arXiv:2202.12183: Table 6 and Table 1's recommendation columns).

    python benchmarks/reproduce/ranking_movielens.py [--quick] [--workers N]

Protocol ([open]: the paper leaves it open; [budget]: scaled to fit this CPU; [data]: not the paper's data):

* data [data]: MovieLens ``ml-latest-small`` (610 users, 9,724 rated movies, 100,836 ratings) from
  ``../shared/data``; the paper uses MovieLens-20M. The paper's protocol (``protocol: paper``): leave-one-out by
  time, graded relevance (gain 2^rating − 1), full-ranking NDCG@k over every item the user has not rated in
  training (the validation ranking also leaves out the user's test item).
* every method runs its shipped config (``configs/movielens/{solc,song,ksong}.yaml``: NeuMF 64 / [64] with dropout
  0.2, Adam, 256 users × 10 rated items per batch, SOLC warm-up of 20 epochs at lr 1e-3 then the last layer
  re-initialized, 120 epochs of the method at lr 4e-4 with × 0.25 after 60) with three overrides:
  ``num_batches`` (an epoch is N steps instead of the config's 541, sized for MovieLens-20M) [budget],
  ``num_negatives`` 300 (the authors' scripts; the paper says 1000) [budget], and validation every 10 epochs.
  Every method has the same warm-up, restart and schedule (the paper's §7.1: "For all methods, we first
  pre-train"): 20 epochs of SOLC, the last layer re-initialized, then 120 epochs of the method with the same lr and
  decay. The listwise cross-entropy of the warm-up (γ0 = 1: mini-batch, LibAUC's "ListNet", which ignores the
  grades) and SOLC (γ0 = 0.1) are the second stage from ``configs/movielens/listwise_ce.yaml`` (song.yaml with only
  the second stage's algorithm changed); ListNet (allRank's: softmax of the ratings as the target), LambdaRank,
  ApproxNDCG and NeuralNDCG (the paper's baselines, Table 6) are the second stage trained by ``MiniBatchRanking`` on
  their loss, from ``configs/movielens/{listnet,lambdarank,approxndcg,neuralndcg}.yaml`` (same warm-up and schedule;
  the losses' options at allRank's defaults, untuned).
* the budget rule [budget]: the configs' fine-tuning lr (4e-4, × 0.25 after 60 epochs) was sized for MovieLens-20M's
  75,740 steps. For the budget run here it is chosen the way a user does on their own data: ``fccolit sweep
  --sampler grid`` over ``spaces/movielens_lr.yaml`` (4e-4, 1e-3, 2.5e-3) for SONG and for SOLC (one method of each
  family) on the selection seed, by validation NDCG@5 at its best validation; every method (the baselines too) then
  runs at the lr with the best mean of the two, so the warm-up, restart and schedule stay the same for all
  (``--configs-lr``: the configs' lr, no sweep).
* LibAUC's SONG (``libauc_song.py``, ``configs/movielens_libauc_song.yaml``): LibAUC 2.0.1's ``NDCGLoss`` and
  ``SONG`` optimizer as the second stage after the same warm-up, at SONG's budget lr (not swept for LibAUC).
* selection: the test NDCG is read at the checkpoint with the best validation NDCG@5 (the configs' ModelCheckpoint)
  and at the last step. The K-SONG variants (one knob at a time) run on the selection seed, not a reported one
  (``SEEDS``).
* verdicts: :func:`common.paired_verdict` on the per-seed paired test NDCG differences of the reported seeds; the
  popularity ranking has no seed, so its comparison is against one number (its interval holds the training
  seeds' spread only, not the test users' sampling error, which the table's standard error shows).
* popularity: items ranked by their number of training ratings (no seed).
* K-SONG's threshold: after training, for every user whose λ was visited, the number of items the final model
  scores above λ_q over the whole catalogue (the quantity λ_q estimates to be K), against K = 300.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common as C  # noqa: E402

DATA = "movielens-ml-latest-small"
CUTOFFS = (5, 10, 20, 50)
# Table 6 (MovieLens-20M, test NDCG@{10, 20, 50}, 3 seeds) for the methods we run
PAPER = {
    "ListNet": (0.0660, 0.0875, 0.1227),
    "SONG": (0.0748, 0.0969, 0.1326),
    "K-SONG": (0.0747, 0.0973, 0.1340),
    "LambdaRank": (0.0697, 0.0913, 0.1259),
    "ApproxNDCG": (0.0735, 0.0938, 0.1284),
    "NeuralNDCG": (0.0692, 0.0901, 0.1232),
}


@dataclasses.dataclass(frozen=True)
class Method:
    """One run's config (a file of the budget's ``configs/<config_dir>/``) and its command-line overrides."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()


#: SONG's warm-up loss run alone (SOLC with γ0 = 1): LibAUC's "ListNet", binary over the relevant items
LISTWISE_CE = "listwise CE (γ0 = 1)"
METHODS = {
    "ListNet": Method("ListNet", "listnet.yaml"),
    LISTWISE_CE: Method(LISTWISE_CE, "listwise_ce.yaml"),
    "SOLC": Method("SOLC", "listwise_ce.yaml", ("--model.init_args.ema_weight", "0.1")),
    "SONG": Method("SONG", "song.yaml"),
    "K-SONG": Method("K-SONG", "ksong.yaml"),
    "LambdaRank": Method("LambdaRank", "lambdarank.yaml"),
    "ApproxNDCG": Method("ApproxNDCG", "approxndcg.yaml"),
    "NeuralNDCG": Method("NeuralNDCG", "neuralndcg.yaml"),
    # LibAUC's SONG at the same budget (the shipped protocol against LibAUC's method; libauc_song.py)
    "LibAUC SONG": Method("LibAUC SONG", "benchmarks/reproduce/configs/movielens_libauc_song.yaml"),
}
#: the paper's methods; every other entry of METHODS is a baseline they are claimed to beat
OURS = ("SONG", "K-SONG")
SEEDS = C.SeedPlan(reported=(0, 1, 2), selection=(100,))
KSONG_VARIANTS = {  # one knob at a time around the shipped K-SONG (the selection seed)
    "shipped config": (),
    "λ₀ = 0, η0 = 0.01 (Algorithm 2 as printed)": ("--model.init_args.lambda_init", "0.0"),
    "ψ(s) = max(s, 0)² (Lemma 5.2)": ("--model.init_args.objective.init_args.selector", "squared_hinge"),
    # λ moves only when its user is in a batch: at η0 = 0.01 it lags the scores (TrainingHealth says so); 0.08 is
    # the λ step's stability bound 2/(τ2 + 1/(4τ1)) here
    "λ step η0 = 0.08 (its stability bound)": ("--model.init_args.lambda_lr", "0.08"),
}


#: the budget rule's knob: the fine-tuning lr (the configs' 4e-4 was sized for MovieLens-20M's 75,740 steps), chosen
#: for the budget by ``fccolit sweep`` over this grid on the selection seed
LR_SPACE = HERE / "spaces" / "movielens_lr.yaml"
LR_KEY = "model.init_args.optimizer.init_args.lr"
#: the methods the lr is swept for, one of each family (the FCCO estimator, listwise cross-entropy), and the methods
#: that take each one's lr (its family); a method of neither family takes the lr with the best mean of the two
LR_SWEPT = ("SONG", "SOLC")
LR_FAMILY = {"SONG": "SONG", "K-SONG": "SONG", "LibAUC SONG": "SONG", "SOLC": "SOLC", LISTWISE_CE: "SOLC"}


@dataclasses.dataclass(frozen=True)
class Budget:
    """The data and budget overrides every method of a table shares (the fields key the run cache; the class
    attributes say which configs and data they apply to). ``lr``: the fine-tuning lr of every method (None: the
    configs')."""

    num_batches: int
    num_negatives: int = 300
    val_every: int = 10
    lr: float | None = None
    config_dir = "movielens"
    max_epochs = 140

    def data_args(self) -> list[str]:
        return ["--data.init_args.root", str(C.shared_data(DATA)), "--data.init_args.cache_dir", str(CACHE / "data"),
                "--data.init_args.num_batches", str(self.num_batches),
                "--data.init_args.num_negatives", str(self.num_negatives)]

    def args(self) -> list[str]:
        """Every run's overrides: the data's, the length, CPU, quiet, and the fine-tuning lr when set."""
        return [*self.data_args(), "--trainer.max_epochs", str(self.max_epochs), "--trainer.check_val_every_n_epoch", str(self.val_every),
                "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
                "--trainer.enable_model_summary", "false", *([f"--{LR_KEY}", repr(self.lr)] if self.lr else [])]

    def config(self, method: Method) -> Path:
        """A method's config: a file of ``configs/<config_dir>/``, or a path from the repository root."""
        path = Path(method.config)
        return C.REPO / path if len(path.parts) > 1 else C.REPO / "configs" / self.config_dir / path


def job_key(job: tuple[tuple[Method, Budget], int]) -> str:
    """A run's cache key: the setting, the seed and the content of the config it runs as parsed (an edited value
    reruns; an edited comment does not)."""
    import hashlib

    import yaml

    (method, budget), _ = job
    content = json.dumps(yaml.safe_load(budget.config(method).read_text()), sort_keys=True)
    return f"{job!r} {hashlib.sha256(content.encode()).hexdigest()}"


def run(job: tuple[Method, Budget], seed: int) -> dict:
    """Fit one config through the ``fccolit`` CLI (the budget's data and length overrides, then the method's),
    then test the best-validation and the last model."""
    from lightning.pytorch import Callback

    from fccolit.cli import main

    method, budget = job
    work = Path(tempfile.mkdtemp(prefix="fccolit-ranking-"))
    args = ["--config", str(budget.config(method)), "--seed_everything", str(seed), *budget.args(),
            "--data.init_args.seed", str(seed), "--trainer.default_root_dir", str(work),
            "--trainer.logger.init_args.save_dir", str(work), *method.overrides]
    cli = main(args, run=False)

    curve: list[tuple[int, float]] = []

    class Curve(Callback):
        def on_validation_end(self, trainer, pl_module):
            if not trainer.sanity_checking and "val/ndcg@10" in trainer.callback_metrics:
                curve.append((trainer.global_step, float(trainer.callback_metrics["val/ndcg@10"])))

    try:
        cli.trainer.callbacks.append(Curve())
        clock = C.Stopwatch()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        seconds = clock.seconds
        result: dict = {"steps": int(cli.trainer.global_step), "seconds": seconds, "curve": curve}
        full_ranking = hasattr(cli.model, "threshold") and hasattr(cli.model.model, "score_all")
        result["threshold"] = threshold_report(cli.model, cli.datamodule) if full_ranking else None
        last = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)[0]
        best = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best", verbose=False)[0]
        result["last"] = {k: float(v) for k, v in last.items()}
        result["best"] = {k: float(v) for k, v in best.items()}
        result["best_val"] = float(cli.trainer.checkpoint_callback.best_model_score)
    finally:  # the run's checkpoints and logs: its numbers are in the result
        shutil.rmtree(work, ignore_errors=True)
    return result


@torch.no_grad()
def threshold_report(module, datamodule) -> dict:
    """Items scored above λ_q by the final model over the whole catalogue, for every visited user: with the model in
    eval mode (dropout off, as evaluation scores) and in train mode (dropout on, as the scores λ tracked during
    training were computed; one dropout draw, seeded)."""
    lam = module.threshold.value[:, 0]
    visited = torch.nonzero(~torch.isnan(lam)).flatten()
    k = module.objective.top_k
    out = {"visited": int(visited.numel()), "users": int(lam.numel()), "k": k}
    for mode in ("eval", "train"):
        module.train(mode == "train")
        torch.manual_seed(0)
        counts = []
        for chunk in visited.split(128):
            scores = module.model.score_all(chunk)
            counts.append((scores > lam[chunk].unsqueeze(1).to(scores.dtype)).sum(1))
        counts = torch.cat(counts).double()
        prefix = "" if mode == "eval" else "train_"
        out.update({f"{prefix}within_k1": float((counts <= k + 1).double().mean()),
                    f"{prefix}within_2k": float((counts <= 2 * k).double().mean()), f"{prefix}median": float(counts.median()),
                    f"{prefix}q10": float(counts.quantile(0.1)), f"{prefix}q90": float(counts.quantile(0.9))})
    module.eval()
    return out


@dataclasses.dataclass
class LrSweep:
    """What :func:`sweep_lr` found: the chosen lr of each swept method and ``"mean"`` (the best mean over them), each
    method's value by lr, the seconds of the sweeps' runs, and each run's validation NDCG@10 curve by (method, lr)."""

    chosen: dict[str, float]
    values: dict[str, dict[float, float]]
    seconds: float
    curves: dict[tuple[str, float], list[tuple[int, float]]]


def sweep_lr(budget: Budget, plan: C.SeedPlan, jobs: int) -> LrSweep:
    """The budget rule: ``fccolit sweep`` (grid :data:`LR_SPACE`) of the fine-tuning lr for each of :data:`LR_SWEPT`
    at this budget on the selection seed, validation NDCG@5 at its best validation (the checkpoint the test reads).
    Returns an :class:`LrSweep`."""
    from concurrent.futures import ThreadPoolExecutor

    # the data's sampling seed follows the (single) selection seed, as a reported run's follows its seed
    data_seed = ["--data.init_args.seed", str(plan.selection[0])] if len(plan.selection) == 1 else []

    seconds: list[float] = []
    curves: dict[tuple[str, float], list[tuple[int, float]]] = {}

    def sweep(name: str) -> dict[float, float]:
        method = METHODS[name]
        study = CACHE / "sweeps" / f"{name}-{budget.num_batches}-batches"
        rows = C.config_sweep(budget.config(method), LR_SPACE, plan, study, "val/ndcg@5",
                              [*budget.args(), *data_seed, *method.overrides], jobs=max(1, jobs // len(LR_SWEPT)),
                              threads=1)
        seconds.extend(float(r["seconds"]) for r in rows if r["seconds"])
        complete = [r for r in rows if r["state"] == "COMPLETE"]
        for r in complete:  # the first selection seed's learning curve (MetricHistory's lines)
            history = study / "trials" / r["number"] / f"seed_{plan.selection[0]}" / "history.jsonl"
            lines = [json.loads(line) for line in history.read_text().splitlines()]
            curves[name, float(r[LR_KEY])] = [(line["step"], line["metrics"]["val/ndcg@10"]) for line in lines
                                              if "val/ndcg@10" in line["metrics"]]
        return {float(r[LR_KEY]): float(r["value"]) for r in complete}

    with ThreadPoolExecutor(len(LR_SWEPT)) as pool:  # the studies side by side, each its share of the workers
        values = dict(zip(LR_SWEPT, pool.map(sweep, LR_SWEPT)))
    grid = sorted(set.intersection(*(set(v) for v in values.values())))
    chosen = {m: max(v, key=v.__getitem__) for m, v in values.items()}
    chosen["mean"] = max(grid, key=lambda lr: float(np.mean([values[m][lr] for m in LR_SWEPT])))
    return LrSweep(chosen, values, sum(seconds), curves)


def popularity() -> dict:
    """Test / validation NDCG@k of ranking the items by their number of training ratings."""
    from fccolit.datamodules.movielens import MovieLensDataModule
    from fccolit.metrics import FullRankingNDCGScore

    dm = MovieLensDataModule(root=C.shared_data(DATA), cache_dir=CACHE / "data", protocol="paper", relevance="graded")
    dm.setup()
    counts = torch.from_numpy(np.bincount(np.asarray(dm._arrays["train_items"]), minlength=dm.num_items).astype(np.float32))
    out = {}
    for split, loader in (("val", dm.val_dataloader()), ("test", dm.test_dataloader())):
        metric, per_user = FullRankingNDCGScore(CUTOFFS), []
        for batch in loader:
            metric.update(counts.expand(batch["query"].numel(), -1), batch["heldout_items"], batch["heldout_relevance"],
                          batch["exclude_items"])
            for u in range(batch["query"].numel()):  # one user at a time: the spread of the per-user values
                one = FullRankingNDCGScore((10,))
                one.update(counts[None], batch["heldout_items"][u:u + 1], batch["heldout_relevance"][u:u + 1],
                           batch["exclude_items"][u:u + 1])
                per_user.append(float(one.compute()[10]))
        out.update({f"{split}/ndcg@{k}": float(v) for k, v in metric.compute().items()})
        out[f"{split}/ndcg@10_standard_error"] = C.sample_std(per_user) / float(np.sqrt(len(per_user)))
    return out


def mean_std(values) -> str:
    return f"{np.mean(values):.4f} ± {C.sample_std(values):.4f}"


def headline(by: dict[str, list[dict]], k: int, claim: str, data: str, paper: str,
             fixed: dict[str, dict[int, float]] | None = None) -> dict[str, str]:
    """The README's row for a ranking table: every method's mean test NDCG@k and SONG's / K-SONG's verdicts
    against each baseline at k (the paper's baselines: rows of our own checks, such as LibAUC's SONG, are left out)."""
    by = {m: runs for m, runs in by.items() if not m.startswith("LibAUC")}
    means = {m: float(np.mean([r["best"][f"test/ndcg@{k}"] for r in runs])) for m, runs in by.items()}
    means.update({b: v[k] for b, v in (fixed or {}).items()})
    claims = [(label, v) for label, v in ordering_claims(by, (k,), fixed) if not label.startswith("K-SONG > SONG")]
    tally = {}
    for label, v in claims:
        tally.setdefault(v.verdict, []).append(label.split(",")[0])
    return {"claim": claim, "data": data, "paper": paper,
            "ours": f"NDCG@{k}: " + ", ".join(f"{m} {v:.4f}" for m, v in sorted(means.items(), key=lambda mv: -mv[1])),
            "verdict": "; ".join(f"{verdict}: {', '.join(labels)}" for verdict, labels in tally.items())}


def libauc_note(lr: str) -> str:
    """What the LibAUC SONG rows of a ranking table are, and how LibAUC's SONG differs from ours (``lr``: the lr
    both ran at)."""
    return ("The LibAUC SONG rows are not a claim of the paper: they pair the shipped protocol with LibAUC's method "
            f"(its `NDCGLoss` and `SONG` optimizer, `libauc_song.py`) at the same budget, warm-up and lr ({lr}; "
            "LibAUC's own lr was not swept). The implementations differ in how u is read (LibAUC: after its update, "
            "from u = 0 on a pair's first visit), in LibAUC's per-user weights (num_pos_items / ideal_dcg) and its "
            "gradient clipping at ±1.")


def ordering_claims(by: dict[str, list[dict]], ks: tuple[int, ...], fixed: dict[str, float] | None = None
                    ) -> list[tuple[str, C.Paired]]:
    """The paper's claims "SONG / K-SONG beat every baseline" at each cutoff, as :func:`common.paired_verdict`
    verdicts on test NDCG at the best-validation checkpoint; ``fixed``: seedless baselines (name → test NDCG@k by
    k, e.g. popularity)."""
    test = lambda runs, k: [r["best"][f"test/ndcg@{k}"] for r in runs]  # noqa: E731
    claims = []
    for k in ks:
        for a in OURS:
            for b in [m for m in by if m not in OURS]:
                claims.append((f"{a} > {b}, NDCG@{k}", C.paired_verdict(test(by[a], k), test(by[b], k))))
            for b, values in (fixed or {}).items():
                claims.append((f"{a} > {b}, NDCG@{k}", C.paired_verdict(test(by[a], k), [values[k]] * len(by[a]))))
        claims.append((f"K-SONG > SONG, NDCG@{k}", C.paired_verdict(test(by["K-SONG"], k), test(by["SONG"], k))))
    return claims


def main() -> None:
    global CACHE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 step an epoch (140 steps), two seeds, no K-SONG variants")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=len(SEEDS.reported), help="the first N reported seeds")
    ap.add_argument("--num-batches", type=int, default=4, help="steps an epoch (the configs: 541)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "fccolit-ranking-movielens"))
    ap.add_argument("--methods", nargs="*", choices=list(METHODS), default=None,
                    help="a subset of the methods (default: all; NeuralNDCG's Sinkhorn sort over 310-item lists costs "
                         "about 2.6 s a step on one CPU thread, benchmarks/results/neuralndcg_step.md: 25 min a run)")
    ap.add_argument("--variants", nargs="*", choices=list(KSONG_VARIANTS), default=None,
                    help="a subset of the K-SONG variants (default: all)")
    ap.add_argument("--configs-lr", action="store_true",
                    help="every method at the configs' fine-tuning lr (no budget sweep; the default with --quick)")
    args = ap.parse_args()
    CACHE = Path(args.cache)
    methods = {m: METHODS[m] for m in (args.methods or METHODS)}
    budget = Budget(1 if args.quick else args.num_batches)
    plan = SEEDS.take(2 if args.quick else args.seeds)
    seeds = list(plan.reported)
    name = "ranking_movielens_quick" if args.quick else "ranking_movielens"
    torch.set_num_threads(1)
    pop = popularity()
    lr_sweep = None
    budgets = {m: budget for m in [*METHODS, "K-SONG variants"]}  # each method's budget (its fine-tuning lr)
    if not (args.quick or args.configs_lr):
        lr_sweep = sweep_lr(budget, plan, args.workers)
        budgets = {m: dataclasses.replace(budget, lr=lr_sweep.chosen[LR_FAMILY.get(m, "mean")]) for m in METHODS}
        budgets["K-SONG variants"] = budgets["K-SONG"]
    runner = C.Runner(run, workers=args.workers, cache=CACHE / "runs", key=job_key)
    jobs = [((m, budgets[name]), s) for s in seeds for name, m in methods.items()]
    variants = {} if args.quick else {
        label: Method(f"K-SONG {label}", "ksong.yaml", override) for label, override in KSONG_VARIANTS.items()
        if args.variants is None or label in args.variants}
    jobs += [((v, budgets["K-SONG variants"]), plan.selection[0]) for v in variants.values()]
    results = dict(zip(jobs, runner.many(jobs)))
    by = {m: [results[(methods[m], budgets[m]), s] for s in seeds] for m in methods}

    steps = by["SONG"][0]["steps"]
    lines = C.header(
        "Qiu et al. 2022 (ICML), Table 6: SONG / K-SONG / SOLC against listwise cross-entropy on MovieLens",
        "python benchmarks/reproduce/ranking_movielens.py" + "".join(f" {a!r}" if " " in a else f" {a}" for a in sys.argv[1:]),
        sum(r["seconds"] for r in results.values()), seeds,
        f"Compute: {sum(r['seconds'] for r in results.values()) / 60:.1f} min of runs (one torch thread each; "
        f"every run's result is cached in {args.cache}, so a rerun only writes the tables). "
        f"Protocol: the script's docstring. Budget: the configs' 140 epochs of {budget.num_batches} steps = {steps} "
        f"steps (the configs: 541 steps an epoch = 75,740 steps on MovieLens-20M) [budget], {budget.num_negatives} "
        "sampled unrated items per user [budget], validation every 10 epochs. Data: ml-latest-small, not the paper's "
        "MovieLens-20M [data], so the paper's numbers are for orientation; the claims are the orderings."
        + (f" Not run here: {', '.join(m for m in METHODS if m not in methods)} (`--methods`)."
           if len(methods) < len(METHODS) else ""))
    if lr_sweep is not None:
        swept, chosen = lr_sweep.values, lr_sweep.chosen
        lines += [f"### The budget rule: the fine-tuning lr for {steps} steps (`fccolit sweep`, selection seed "
                  f"{plan.selection[0]})", "",
                  "The configs' fine-tuning lr (4e-4, × 0.25 after 60 epochs) was sized for MovieLens-20M's 75,740 "
                  f"steps. For this budget it is chosen as a user would: `fccolit sweep --sampler grid` over "
                  f"`{LR_SPACE.relative_to(C.REPO)}` for {' and '.join(LR_SWEPT)} (one of each family), validation "
                  "NDCG@5 at its best validation (the checkpoint the test reads). Each family runs at its own "
                  f"method's best lr ({', '.join(f'{m}: {f}' for m, f in LR_FAMILY.items() if m != f)}); the "
                  "plain-loss baselines at the best mean of the two. The warm-up, restart and lr schedule's shape "
                  f"are the same for all. The studies: {CACHE / 'sweeps'} ({sum(len(v) for v in swept.values())} "
                  f"runs, {lr_sweep.seconds / 60:.1f} min, not in the compute above).", "",
                  "| fine-tuning lr | " + " | ".join(f"{m}: val NDCG@5" for m in LR_SWEPT) + " | mean |",
                  "|---:|" + "---:|" * (len(LR_SWEPT) + 1)]
        for lr in sorted(swept[LR_SWEPT[0]]):
            row = [swept[m].get(lr, float("nan")) for m in LR_SWEPT]
            mark = "".join(f" ({name}'s)" if name in LR_SWEPT else " (best mean)"
                           for name, best in chosen.items() if lr == best)
            lines.append(f"| {lr:g}{mark} | " + " | ".join(f"{v:.4f}" for v in row) + f" | {np.mean(row):.4f} |")
        configs_lr = min(swept[LR_SWEPT[0]])
        lines += ["", f"Reading: at the configs' lr ({configs_lr:g}) the swept methods end near the popularity ranking "
                  f"(validation NDCG@5 {', '.join(f'{m} {swept[m][configs_lr]:.4f}' for m in LR_SWEPT)}; popularity "
                  f"{pop['val/ndcg@5']:.4f}): at {steps} steps that lr under-trains, which is why the previous run "
                  "(all methods at 4e-4) did not separate the methods. "
                  + ("SONG's best lr is the grid's largest: a larger one may do better still, which would widen "
                     "SONG's lead, not close it. " if chosen["SONG"] == max(swept["SONG"]) else "")
                  + "The learning curves of every swept run are the plot's right panel.", ""]
    test = lambda runs, k, which="best": [r[which][f"test/ndcg@{k}"] for r in runs]  # noqa: E731
    claims = []
    for m in [m for m in PAPER if m in by]:
        for i, k in enumerate((10, 20, 50)):
            claims.append(C.Claim(f"{m} test NDCG@{k}", PAPER[m][i], test(by[m], k), "[data] other data and budget"))
    lines += ["### Paper (MovieLens-20M) vs ours (ml-latest-small)", "", *C.claim_table(claims, "NDCG"), ""]

    pop_by_k = {k: pop[f"test/ndcg@{k}"] for k in CUTOFFS}
    lines += ["### Orderings, paired over the reported seeds (the paper: SONG and K-SONG ahead of every baseline, "
              "Table 6)", "",
              f"Each of the {by['SONG'][0].get('users', 610)} users holds out one test item: a mean test NDCG@10 has "
              f"a standard error of about {pop['test/ndcg@10_standard_error']:.4f} over the users (the popularity "
              "ranking's per-user spread), a sampling error the seeds' interval does not hold.", "",
              *C.verdict_table(ordering_claims(by, (10, 20), {"popularity": pop_by_k}), "test NDCG"), ""]
    if "LibAUC SONG" in by:
        lines += [libauc_note("SONG's budget lr"), ""]
    if not args.quick:
        C.write_headlines(name, [headline(by, 10, "the same on recommendation (Table 6)",
                                          f"MovieLens ml-latest-small, {len(seeds)}",
                                          "NDCG@10 over ListNet: +0.009 (MovieLens-20M)", {"popularity": pop_by_k})])

    lines += ["### Every method: test NDCG at the best validation NDCG@5 checkpoint (mean ± std over seeds)", "",
              "| method | " + " | ".join(f"NDCG@{k}" for k in CUTOFFS) + " | val NDCG@5 (best) | test NDCG@10 at the last step | steps | minutes a run |",
              "|---|" + "---:|" * (len(CUTOFFS) + 4)]
    lines.append("| popularity | " + " | ".join(f"{pop[f'test/ndcg@{k}']:.4f}" for k in CUTOFFS)
                 + f" | {pop['val/ndcg@5']:.4f} | — | — | — |")
    for m, runs in by.items():
        lines.append(f"| {m} | " + " | ".join(mean_std(test(runs, k)) for k in CUTOFFS)
                     + f" | {mean_std([r['best_val'] for r in runs])} | {mean_std(test(runs, 10, 'last'))} | "
                     f"{runs[0]['steps']} | {np.mean([r['seconds'] for r in runs]) / 60:.1f} |")
    lines.append("")

    def threshold_row(label: str, r: dict) -> str:
        t = r["threshold"]
        train = (f"{t['train_median']:.0f} ({t['train_q10']:.0f} – {t['train_q90']:.0f})" if "train_median" in t
                 else "—")
        return (f"| {label} | {t['visited']} / {t['users']} | {t['median']:.0f} | {t['q10']:.0f} – {t['q90']:.0f} | "
                f"{train} | {t['within_k1']:.2f} | {t['within_2k']:.2f} | {r['best']['test/ndcg@10']:.4f} |")

    lines += [f"### K-SONG's threshold λ at the end (K = 300) and one knob at a time (selection seed {plan.selection[0]}, "
              "K-SONG's budget lr)",
              "",
              "Items the final model scores above λ_q over the whole catalogue (9,724 items) for the visited users: "
              "λ_q estimates the top-K threshold from the sampled list (10 rated + 300 unrated items, weighted to the "
              "catalogue), so even an exact λ on the sample lands at K ± a sampling error of tens of items.", "",
              "| K-SONG | users visited | items above λ (median, eval mode) | 10%–90% | the same with dropout on: median "
              "(10%–90%) | share with ≤ K+1 above | share with ≤ 2K above | test NDCG@10 |",
              "|---|---:|---:|---:|---:|---:|---:|---:|",
              threshold_row(f"shipped config at the budget's lr, reported seed {seeds[0]}", by["K-SONG"][0])]
    for label, v in variants.items():
        lines.append(threshold_row(label, results[(v, budgets["K-SONG variants"]), plan.selection[0]]))
    fast = next((label for label in variants if "η0 = 0.08" in label), None)
    if "shipped config" in variants and fast is not None:
        t0, t1 = (results[(variants[label], budgets["K-SONG variants"]), plan.selection[0]]["threshold"]
                  for label in ("shipped config", fast))
        lines += ["", f"Reading: λ_q moves only when its user is in a batch. At the config's η0 = 0.01 the items above "
                  f"λ spread over {t0['q10']:.0f}–{t0['q90']:.0f} (10%–90%; {t0['within_2k']:.0%} within 2K); at its "
                  f"stability bound η0 = 0.08, over {t1['q10']:.0f}–{t1['q90']:.0f} ({t1['within_2k']:.0%} within 2K). "
                  "Eval and train mode (dropout) give the same counts, so λ's step size, not dropout, is why λ strays "
                  f"from K. Test NDCG@10: {results[(variants['shipped config'], budgets['K-SONG variants']), plan.selection[0]]['best']['test/ndcg@10']:.4f} "
                  f"at η0 = 0.01, {results[(variants[fast], budgets['K-SONG variants']), plan.selection[0]]['best']['test/ndcg@10']:.4f} at "
                  "0.08 (one selection seed)."]
    lines.append("")

    def draw(plt):
        panels = 2 if lr_sweep is not None else 1
        fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4), squeeze=False)
        ax = axes[0, 0]
        for m, runs in by.items():
            xs = [s for s, _ in runs[0]["curve"]]
            ys = np.mean([[v for _, v in r["curve"]] for r in runs], axis=0)
            ax.plot(xs, ys, marker="o", ms=3, label=m)
        ax.axhline(pop["val/ndcg@10"], color="grey", ls="--", label="popularity")
        ax.set_xlabel("step")
        ax.set_ylabel("validation NDCG@10 (mean over seeds)")
        ax.set_title("reported seeds, each method at its budget's lr")
        ax.legend()
        if lr_sweep is not None:
            right = axes[0, 1]
            for (m, lr), curve in sorted(lr_sweep.curves.items()):
                right.plot(*zip(*curve), marker="o", ms=3, ls="-" if m == "SONG" else "--", label=f"{m}, lr {lr:g}")
            right.axhline(pop["val/ndcg@10"], color="grey", ls=":", label="popularity")
            right.set_xlabel("step")
            right.set_ylabel("validation NDCG@10")
            right.set_title(f"the lr sweep (selection seed {plan.selection[0]})")
            right.legend(fontsize=8)
        return fig

    lines += ["Validation NDCG@10 against steps:", "", C.save_plot(name, draw)]
    C.write_result(name, lines)


CACHE = Path(tempfile.gettempdir()) / "fccolit-ranking-movielens"

if __name__ == "__main__":
    main()
