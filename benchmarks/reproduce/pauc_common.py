"""What the partial-AUC reproduction scripts share (``pauc_range.py``, ``pauc_peer.py``): the a9a splits and the
second data set of the transfer check (LETOR documents as a binary task, :func:`letor_binary`), one training run of
an fccolit module through ``Trainer.fit`` at a fixed number of steps, one training run of a LibAUC loss + optimizer
in a plain loop over **the same batches**, the metrics, and the cache key and compute line of the runs (the runs
themselves go through ``common.Runner``).

The batches come from fccolit's ``LibSVMDataModule`` (its ``DualSampler``: I = 100 positives and J = 100 negatives
per batch, a seeded permutation of each class); both libraries see the same sequence of batches for a seed because
the DataModule is rebuilt with the same seed for every run. The linear model (``LinearScorer``: w, b) starts from the
same weights on both sides (torch's default ``nn.Linear`` init under ``torch.manual_seed(seed)``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from common import sample_std, shared_data  # noqa: F401  (shared_data re-exported for the scripts)

from lightning.pytorch import Callback, Trainer  # noqa: E402

from fccolit.data import binary_fields, binary_sizes  # noqa: E402
from fccolit.datamodules.libsvm import LibSVMDataModule  # noqa: E402
from fccolit.metrics.functional import ap_score, partial_auc_score  # noqa: E402
from fccolit.models import LinearScorer  # noqa: E402

BATCH, POSITIVES = 200, 100  # I + J, I (Yao, Lin & Yang, NeurIPS 2022, Appendix E.2)
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "benchmarks" / "out" / "pauc_cache"  # git-ignored: one JSON file per run, and the parsed data
# a run's result depends on the library's pAUC code: its content is part of every cache key, so an edit reruns;
# HARNESS_VERSION is bumped by hand when run_fccolit / run_libauc / load change what a run computes
SOURCES = (
    "fccolit/algorithms/double_loop.py",
    *(f"fccolit/algorithms/pauc/{name}.py" for name in ("__init__", "base", "thresholds", "agd_sbcd", "dca", "minibatch")),
    "fccolit/objectives/pauc.py",
)
HARNESS_VERSION = "2"  # 2: runs record ``seconds`` (wall, load to evaluation); second data set (LETOR)


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((REPO / name).read_bytes())
    return h.hexdigest()[:16]


def cache_key(job: tuple) -> str:
    """The on-disk cache key of a ``(setting, seed)`` job of :class:`common.Runner`: the job, the content of the
    library's pAUC code and the harness version, so an edit of either reruns the affected runs."""
    return repr(job) + source_digest() + HARNESS_VERSION


def compute_line(results) -> tuple[float, str]:
    """The compute of the runs a results file uses (the sum of their ``seconds``, whether this invocation ran them
    or read them back from the cache), and the header's sentence about it."""
    seconds = float(sum(r.get("seconds", 0.0) for r in results))
    cpu = float(sum(r.get("cpu_s", 0.0) for r in results))
    return seconds, (f"Compute: {seconds / 60:.1f} min, the sum of the wall seconds of the {len(results)} runs used "
                     f"(one torch thread each, data loading and evaluation included; {cpu / 60:.1f} min of it is the "
                     f"training loops' CPU time, the rest loading, evaluation and waiting for a core on the shared "
                     f"machine; cached under {CACHE.relative_to(REPO)}, so a rerun with nothing changed only rewrites "
                     "the tables). ")


RANGES = {"pauc_0.05_0.5": (0.05, 0.5), "pauc_0_0.5": (0.0, 0.5)}


def quiet() -> None:
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)


#: the data sets a run can start from: a9a (LIBSVM, as distributed; the data the shipped config was tuned on) and
#: a second one for the transfer check, the LightGBM LambdaRank example's LETOR documents read as a binary task
SOURCES_DATA = ("a9a", "letor")
LETOR_RELEVANT = 3  # a document is positive when its relevance grade is at least this (9.7% of rank.train)


def letor_binary(cache: Path) -> Path:
    """A binary LIBSVM copy of ``../shared/data/letor-lightgbm-lambdarank`` (the LightGBM repository's LambdaRank
    example: ``rank.train``, 3,005 documents of 201 queries, ``rank.test``, 768 documents of 50 queries, 300
    features in [0, 1], relevance grades 0–4): each document is one example, labelled 1 when its grade is at least
    :data:`LETOR_RELEVANT` ("highly relevant", 291 of 3,005 training and 54 of 768 test documents), 0 otherwise; the
    query grouping is not used. Written once under ``cache`` (git-ignored, never into the repository); returns the
    folder holding ``letor_rel3`` and ``letor_rel3.t``."""
    source = shared_data("letor-lightgbm-lambdarank")
    folder = cache / f"letor-rel{LETOR_RELEVANT}"
    for split, name in (("rank.train", f"letor_rel{LETOR_RELEVANT}"), ("rank.test", f"letor_rel{LETOR_RELEVANT}.t")):
        target = folder / name
        if target.is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for line in (source / split).read_text().splitlines():
            if not line.strip():
                continue
            grade, _, features = line.partition(" ")
            lines.append(f"{int(float(grade) >= LETOR_RELEVANT)} {features}")
        tmp = target.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(target)
    return folder


def load(seed: int, cache: Path, transform: Callable[[dict], torch.Tensor] | None = None,
         source: str = "a9a") -> tuple[LibSVMDataModule, dict]:
    """``source``'s training file with a seeded stratified 20% validation split and its test file (``a9a.t``;
    LETOR: ``rank.test``, see :func:`letor_binary`), batches of 100 + 100.

    ``transform(splits)`` returns new **training** labels (e.g. label noise, :func:`flip_top_positives`); the
    DataModule's training split, sizes and sampler are rebuilt from them, so the batches, ``pos_index`` and the
    per-positive state sizes follow. Validation and test labels are never changed."""
    if source == "a9a":
        root, name = shared_data("libsvm-a9a"), "a9a"
    elif source == "letor":
        root, name = letor_binary(cache), f"letor_rel{LETOR_RELEVANT}"
    else:
        raise ValueError(f"unknown data source {source!r}: one of {SOURCES_DATA}")
    data = LibSVMDataModule(root, name, val_fraction=0.2, batch_size=BATCH, num_positives=POSITIVES, seed=seed,
                            cache_dir=cache)
    data.setup("fit")
    splits = {s: {"x": getattr(data, f"{s}_dataset").fields["x"], "y": getattr(data, f"{s}_dataset").fields["y"]}
              for s in ("train", "val", "test")}
    if transform is not None:
        y = transform(splits).long()
        fields = binary_fields(splits["train"]["x"], y)
        data._splits["train"] = fields  # the DataModule's own splits: set_datasets and the sampler read them
        data.set_datasets(data._splits)
        data.sizes = binary_sizes(fields)
        data._train_sampler = None
        splits["train"] = {"x": fields["x"], "y": fields["y"]}
    return data, splits


def reference_scores(x: torch.Tensor, y: torch.Tensor, iterations: int = 100) -> torch.Tensor:
    """Scores of an L2-regularised logistic regression fitted on ``(x, y)`` by L-BFGS (float64, deterministic)."""
    x = x.double()
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w[:-1] + w[-1], y.double()) + 1e-4 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return x @ w[:-1] + w[-1]


def flip_top_positives(share: float) -> Callable[[dict], torch.Tensor]:
    """Label noise where the top of the FPR range matters (the motivation of Yao, Lin & Yang, NeurIPS 2022, for
    excluding FPR < α): the ``share`` of training positives that a clean logistic regression scores highest are
    labelled negative. They become the highest-scored "negatives", i.e. the top of every positive's negative
    ranking (with share 0.1 on a9a: about 3% of the training negatives, inside FPR [0, 0.05])."""

    memo: dict[bytes, torch.Tensor] = {}

    def transform(splits: dict) -> torch.Tensor:
        x, y = splits["train"]["x"], splits["train"]["y"]
        fingerprint = hashlib.sha256(y.numpy().tobytes() + x.sum(1).numpy().tobytes()).digest()
        if fingerprint in memo:
            return memo[fingerprint].clone()
        scores = reference_scores(x, y)
        positives = (y == 1).nonzero().flatten()
        count = int(round(share * positives.numel()))
        top = positives[torch.argsort(scores[positives], descending=True)[:count]]
        noisy = y.clone()
        noisy[top] = 0
        memo[fingerprint] = noisy
        return noisy.clone()

    return transform


def evaluate(score: Callable[[torch.Tensor], torch.Tensor], splits: dict, which=("val", "test")) -> dict[str, float]:
    """pAUC on FPR [0.05, 0.5] and [0, 0.5] (normalised), AUROC and AP on each split in ``which``."""
    out: dict[str, float] = {}
    for split in which:
        with torch.no_grad():
            s = score(splits[split]["x"]).reshape(-1).double()
        y = splits[split]["y"]
        if not bool(torch.isfinite(s).all()):
            out.update({f"{split}/{k}": math.nan for k in (*RANGES, "auroc", "ap")})
            continue
        for key, (lo, hi) in RANGES.items():
            out[f"{split}/{key}"] = float(partial_auc_score(s, y, lo, hi))
        out[f"{split}/auroc"] = float(partial_auc_score(s, y, 0.0, 1.0))
        out[f"{split}/ap"] = float(ap_score(s, y))
    return out


def initial_model(seed: int, in_features: int, init: str = "default") -> LinearScorer:
    """The linear scorer both libraries start from: torch's ``nn.Linear`` init under ``torch.manual_seed(seed)``
    (``"default"``) or all zeros (``"zero"``: every score 0, a model that ranks nothing yet)."""
    torch.manual_seed(seed)
    model = LinearScorer(in_features)
    if init == "zero":
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
    elif init != "default":
        raise ValueError(init)
    return model


class StopAt(Callback):
    """Stops ``Trainer.fit`` after ``steps`` optimizer steps (whatever the epoch length)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


def run_fccolit(build: Callable[[LinearScorer, dict], Any], seed: int, steps: int, cache: Path,
                transform: Callable | None = None, init: str = "default",
                extra: Callable[[Any, dict], dict] | None = None, source: str = "a9a") -> dict:
    """``build(model, sizes)`` returns an fccolit module; it trains ``steps`` batches through ``Trainer.fit``.

    Returns the metrics of what the module evaluates (``evaluation_scores``: AGD-SBCD's v̄_n, DCA's last iterate, the
    SGD baselines' live weights), of AGD-SBCD's anchor w (``anchor/...``) and of the live iterate (``live/...``), plus
    the outer steps reached, the CPU seconds of training (``cpu_s``) and the wall seconds of the whole run, data
    loading and evaluation included (``seconds``)."""
    began = time.perf_counter()
    data, splits = load(seed, cache, transform, source)
    model = initial_model(seed, splits["train"]["x"].shape[1], init)
    module = build(model, data.sizes)
    trainer = Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      limit_val_batches=0, callbacks=[StopAt(steps)])
    start = time.process_time()
    try:
        trainer.fit(module, datamodule=data)
    except FloatingPointError:  # the state refuses non-finite estimates: the run diverged
        return {**{f"{split}/{k}": math.nan for split in ("val", "test") for k in (*RANGES, "auroc", "ap")},
                "outer_steps": math.nan, "steps": trainer.global_step, "cpu_s": time.process_time() - start,
                "seconds": time.perf_counter() - began, "diverged": True}
    seconds = time.process_time() - start
    module.eval()
    if hasattr(module, "evaluation_scores"):
        out = evaluate(lambda x: module.evaluation_scores({"x": x}), splits)
    else:
        out = evaluate(lambda x: module({"x": x}), splits)
    alternative = module.alternative_evaluation() if hasattr(module, "alternative_evaluation") else None
    if alternative is not None and alternative[1] is not None:
        out.update({f"{alternative[0]}/{k}": v for k, v in
                    evaluate(lambda x: module.evaluation_scores({"x": x}, alternative[1]), splits).items()})
    out.update({f"live/{k}": v for k, v in evaluate(lambda x: module({"x": x}), splits).items()})
    loop = getattr(module, "loop", {})
    out.update({"outer_steps": loop.get("outer_step", math.nan), "steps": trainer.global_step, "cpu_s": seconds})
    if extra is not None:
        out.update(extra(module, splits))
    out["seconds"] = time.perf_counter() - began
    return out


# ----------------------------------------------------------------------------------------------------------
# LibAUC, in a plain loop over the same batches
# ----------------------------------------------------------------------------------------------------------
def libauc_available() -> bool:
    try:
        import libauc  # noqa: F401

        return True
    except ImportError:
        return False


def build_libauc(kind: str, setting: dict, sizes: dict[str, int], params) -> tuple[Any, Any]:
    """LibAUC 2.0.1's loss and optimizer for ``kind``: ``"pAUC_CVaR"`` (+ SOPA), ``"pAUC_DRO"`` (+ SOPAs) or
    ``"AP"`` (APLoss + SOAP), with their documented defaults except what ``setting`` names. The per-positive
    state is indexed by the DataModule's ``pos_index`` (data_len = number of training positives), as LibAUC's
    pAUC tutorial does with its ``pos_index_map``."""
    from libauc.losses import APLoss, pAUC_CVaR_Loss, pAUC_DRO_Loss
    from libauc.optimizers import SOAP, SOPA, SOPAs

    n_pos = int(sizes["num_positives"])
    cpu = torch.device("cpu")
    margin = setting.get("margin", 1.0)
    mode = setting.get("mode", "adam")
    if kind == "pAUC_CVaR":
        loss = pAUC_CVaR_Loss(data_len=n_pos, pos_len=n_pos, margin=margin, beta=setting.get("beta", 0.5),
                              eta=setting.get("eta", 1.0), device=cpu)
        opt = SOPA(params, mode=mode, lr=setting["lr"], weight_decay=setting.get("weight_decay", 0.0))
    elif kind == "pAUC_DRO":
        loss = pAUC_DRO_Loss(data_len=n_pos, gamma=setting.get("gamma", 0.9), margin=margin,
                             Lambda=setting.get("Lambda", 1.0), device=cpu)
        opt = SOPAs(params, mode=mode, lr=setting["lr"], weight_decay=setting.get("weight_decay", 1e-5))
    elif kind == "AP":
        loss = APLoss(data_len=n_pos, gamma=setting.get("gamma", 0.9), margin=margin, device=cpu)
        opt = SOAP(params, mode=mode, lr=setting["lr"], weight_decay=setting.get("weight_decay", 1e-5))
    else:
        raise ValueError(kind)
    return loss, opt


def run_libauc(kind: str, setting: dict, seed: int, steps: int, cache: Path, transform: Callable | None = None,
               score_transform: str = "sigmoid", init: str = "default", source: str = "a9a") -> dict:
    """LibAUC's ``loss(score, y, pos_index)`` → backward → its optimizer, ``steps`` batches of the DataModule.

    ``score_transform="sigmoid"`` feeds ``σ(h(x))`` to the loss (LibAUC's examples: "the model's output should
    pass through a sigmoid"); the metrics are rank-based, so they are the same on h and σ(h). ``seconds``: wall
    seconds of the whole run (loading and evaluation included)."""
    began = time.perf_counter()
    data, splits = load(seed, cache, transform, source)
    model = initial_model(seed, splits["train"]["x"].shape[1], init)
    loss_fn, opt = build_libauc(kind, setting, data.sizes, model.parameters())
    start = time.process_time()
    step = 0
    while step < steps:
        for batch in data.train_dataloader():
            score = model(batch["x"]).reshape(-1)
            if score_transform == "sigmoid":
                score = torch.sigmoid(score)
            y = batch["y"].reshape(-1).float()
            index = batch["pos_index"].reshape(-1).clamp_min(0)  # LibAUC keeps the positives' entries
            loss = loss_fn(score, y, index)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= steps:
                break
    seconds = time.process_time() - start
    model.eval()
    out = evaluate(lambda x: model(x), splits)
    out.update({"outer_steps": math.nan, "steps": step, "cpu_s": seconds, "seconds": time.perf_counter() - began})
    return out


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1, :func:`common.sample_std`) of the finite values."""
    vals = [v for v in values if v == v]
    if not vals:
        return math.nan, math.nan
    return sum(vals) / len(vals), sample_std(vals)
