"""Cost of a training step of SONG, K-SONG, ADAP, SONEX and PAUCRange (inner step) against a plain supervised step
with the same model, batch, optimizer and DataModule, in one process and under DDP on 2 CPU processes (gloo).

    python benchmarks/fcco_overhead.py [--quick] [--devices 2] [--threads 1]

A step is ``training_step`` as a Lightning Trainer runs it (manual optimization, logging included, data loading
excluded); the state update and, with ``--devices 2``, the all-gather of the state rows are inside it. Plain steps:
:class:`~fccolit.algorithms.Supervised` (BCE) for the classification algorithms; for SONG / K-SONG a listwise
cross-entropy step on the same NeuMF and ranking batches (no state).

One ``fit`` of :class:`timing.PairedSteps` runs the plain and the FCCO module's ``training_step`` on every batch,
alternating which goes first (call-by-call interleaving: the only way to get stable ratios on a shared machine whose
load drifts by a factor of two within seconds); medians per side, their ratio. ``--devices 2``: the same under DDP
(Lightning's launcher, gloo; :class:`timing.PairedDDPStrategy` wraps each module in its own
``DistributedDataParallel``, as Lightning wraps a module trained alone), the larger median of the two ranks per
side; rank 0 prints and writes the JSON.

``--threads`` (default 1) sets torch's intra-op threads: on the 2-core development machine, shared with other
jobs, two threads per process oversubscribe the cores and make every time several times noisier.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning.pytorch import Trainer  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402

from fccolit.algorithms import ADAP, KSONG, SONEX, SONG, PAUCRange, Supervised  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule, SyntheticGroupedDataModule  # noqa: E402
from fccolit.models import MLP, ResNet20  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate, GroupDROCVaRLoss, PartialAUCRangeSurrogate  # noqa: E402
from fccolit.objectives.ndcg import TopKNDCGSurrogate  # noqa: E402
from fccolit.optim import AdaptiveMomentum  # noqa: E402
from timing import PairedDDPStrategy, PairedSteps, machine, write_result  # noqa: E402


class ListwiseCE(SONG):
    """The plain ranking step: mini-batch listwise cross-entropy on the same batch, no per-index state."""

    def training_step(self, batch, batch_idx):
        scores = self(batch)
        anchor = batch["pair_index"] >= 0
        nll = torch.logsumexp(scores.masked_fill(~batch["mask"], float("-inf")), 1, keepdim=True) - scores
        loss = (nll * anchor).sum() / anchor.sum().clamp_min(1)
        self.optimization_step(loss)
        self.log_objective_estimate(loss.detach().reshape(1))  # logged as Supervised logs its loss


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def ranking_pairs() -> dict[str, tuple]:
    """``"SONG"``, ``"K-SONG practical"`` → (plain module factory, FCCO module factory) of a DataModule (or anything
    with the ranking ``sizes``): NeuMF 64/[64] without dropout, Adam lr 1e-3, the plain step :class:`ListwiseCE`.
    The rows of :func:`cases` and ``benchmarks/gpu.py`` (MovieLens-20M tables)."""
    neumf = lambda: NeuMF(embedding_dim=64, layers=[64], dropout=0.0)  # noqa: E731
    plain = lambda d: ListwiseCE(neumf(), optimizer=adam, data_sizes=d.sizes)  # noqa: E731
    return {
        "SONG": (plain, lambda d: SONG(neumf(), optimizer=adam, data_sizes=d.sizes)),
        "K-SONG practical": (
            plain, lambda d: KSONG(neumf(), TopKNDCGSurrogate(top_k=10), optimizer=adam, data_sizes=d.sizes)),
    }


def image_data(image_size: int = 32, positives: int = 32, others: int = 32,
               num_samples: int = 4_000) -> Callable[[], SyntheticBinaryDataModule]:
    """A DataModule factory of flat ``3 × image_size²`` Gaussian images (5% positives), batches of ``positives`` +
    ``others`` (the dual sampler); :func:`image_pairs` unflattens them."""
    return lambda: SyntheticBinaryDataModule(num_samples=num_samples, num_features=3 * image_size**2,
                                             pos_fraction=0.05, batch_size=positives + others,
                                             num_positives=positives, seed=0)


def image_pairs(backbone: Callable[[], nn.Module], image_size: int) -> dict[str, tuple]:
    """``"ADAP"``, ``"PAUCRange"`` (inner step) → (plain BCE module factory, FCCO module factory) for a ``backbone``
    with one output on the flat images of :func:`image_data`: ADAP and its BCE with ``AdaptiveMomentum`` (lr 1e-3);
    PAUCRange (FPR range [0.05, 0.5]) and its BCE with SGD (lr 0.1; PAUCRange sets its own lr every step)."""
    net = lambda: nn.Sequential(nn.Unflatten(1, (3, image_size, image_size)), backbone())  # noqa: E731
    adaptive = lambda p: AdaptiveMomentum(p, lr=1e-3)  # noqa: E731
    sgd = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa: E731
    sup = lambda opt: lambda d: Supervised(net(), optimizer=opt, data_sizes=d.sizes)  # noqa: E731
    return {
        "ADAP": (sup(adaptive),
                 lambda d: ADAP(net(), AveragePrecisionSurrogate(project=True), optimizer=adaptive, data_sizes=d.sizes)),
        "PAUCRange": (sup(sgd), lambda d: PAUCRange(net(), PartialAUCRangeSurrogate(0.05, 0.5), inner_steps=10_000,
                                                    data_sizes=d.sizes)),
    }


def cases(quick: bool, work: Path, hidden: list[int] | None = None):
    """name → (DataModule factory, plain module factory, FCCO module factory).

    ``hidden``: the hidden widths of the classification MLP (default ``[512, 512]``: MLP 256-512-512-1); the case
    names state them (``benchmarks/step_overhead.py`` sweeps them)."""
    hidden = [512, 512] if hidden is None else list(hidden)
    mlp = "MLP " + "-".join(str(w) for w in [256, *hidden, 1])  # 256 = num_features of both DataModules
    binary = lambda: SyntheticBinaryDataModule(num_samples=20_000, num_features=256, pos_fraction=0.05,  # noqa: E731
                                               batch_size=256, num_positives=64, seed=0)
    grouped = lambda: SyntheticGroupedDataModule(num_groups=16, max_group_size=2_000, num_features=256,  # noqa: E731
                                                 groups_per_batch=8, samples_per_group=32, seed=0)

    def ranking():
        from fccolit.datamodules.movielens import MovieLensDataModule
        from fccolit.testing import write_large_movielens_csv

        root = work / "ml-20m"
        if not (root / "ratings.csv").is_file():
            root.mkdir(parents=True, exist_ok=True)
            write_large_movielens_csv(root / "ratings.csv", 3_000 * 144, 3_000, 26_744)
        return MovieLensDataModule(root, cache_dir=work / "cache", queries_per_batch=64, num_positives=10,
                                   num_negatives=300, top_k=10)

    adaptive = lambda p: AdaptiveMomentum(p, lr=1e-3)  # noqa: E731
    sgd = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa: E731  (PAUCRange sets its own lr every step)
    sup = lambda opt: lambda d: Supervised(MLP(hidden=hidden), optimizer=opt, data_sizes=d.sizes)  # noqa: E731
    rank = ranking_pairs()
    return {
        "SONG (NeuMF, 64 users × (10 + 300), vs listwise CE)": (ranking, *rank["SONG"]),
        "K-SONG practical (same)": (ranking, *rank["K-SONG practical"]),
        f"ADAP ({mlp}, B = 256, vs BCE)": (
            binary, sup(adaptive),
            lambda d: ADAP(MLP(hidden=hidden), AveragePrecisionSurrogate(project=True), optimizer=adaptive,
                           data_sizes=d.sizes)),
        f"SONEX GDRO-CVaR ({mlp}, 8 groups × 32, vs BCE)": (
            grouped, sup(adam),
            lambda d: SONEX(MLP(hidden=hidden), GroupDROCVaRLoss(ratio=0.25), optimizer=adam, data_sizes=d.sizes)),
        "↳ SONEX without the MSVR correction (γ' = 0: no forward pass at w_{t−1})": (
            grouped, sup(adam),
            lambda d: SONEX(MLP(hidden=hidden), GroupDROCVaRLoss(ratio=0.25), correction_weight=0.0, optimizer=adam,
                            data_sizes=d.sizes)),
        f"PAUCRange inner step ({mlp}, B = 256, vs BCE)": (
            binary, sup(sgd),
            lambda d: PAUCRange(MLP(hidden=hidden), PartialAUCRangeSurrogate(0.05, 0.5), inner_steps=10_000,
                                data_sizes=d.sizes)),
    }


def deep_cases() -> dict[str, tuple]:
    """The papers' deep model for image data, as :func:`cases`: ResNet-20 on 3 × 32 × 32 inputs (CIFAR-10-LT), batches
    of 32 positives + 32 others (the deep pAUC runs of Yao, Lin & Yang, NeurIPS 2022: batch 32 per sampler). A step
    takes a quarter of a second on one CPU thread, so these rows run on fewer batches (:func:`deep_steps`)."""
    images = image_data(image_size=32, positives=32, others=32, num_samples=4_000)
    resnet = image_pairs(lambda: ResNet20(num_outputs=1), image_size=32)
    return {
        "ResNet-20 (3 × 32 × 32 images, B = 32 positives + 32 others): ADAP vs BCE": (images, *resnet["ADAP"]),
        "↳ ResNet-20 (same): PAUCRange inner step vs BCE": (images, *resnet["PAUCRange"]),
    }


def deep_steps(steps: int) -> int:
    """Paired batches of the :func:`deep_cases` rows for ``steps`` of the others."""
    return max(24, steps * 3 // 8)


def trainer(devices: int, max_steps: int, callbacks: list | None = None, paired: bool = False,
            accelerator: str = "cpu", precision: str = "32-true") -> Trainer:
    """The benchmarks' Trainer: no logger, checkpoints, progress bar or validation; DDP (gloo) over ``devices`` > 1
    CPU processes. ``accelerator`` / ``precision``: Lightning's (``benchmarks/gpu.py``: ``"gpu"``, ``"bf16-mixed"``)."""
    strategy = "auto"
    if devices > 1:
        kind = PairedDDPStrategy if paired else DDPStrategy
        strategy = kind(process_group_backend="gloo", broadcast_buffers=False)
    return Trainer(accelerator=accelerator, devices=devices, strategy=strategy, max_steps=max_steps, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   limit_val_batches=0, num_sanity_val_steps=0, use_distributed_sampler=False,
                   callbacks=callbacks or [], precision=precision)


def paired_times(plain, fcco, data, steps: int, devices: int, accelerator: str = "cpu",
                 precision: str = "32-true") -> tuple[list[float], list[float]]:
    """Seconds of each plain and FCCO ``training_step`` of one fit that runs both on every batch."""
    torch.manual_seed(0)
    plain_module = plain(data)
    torch.manual_seed(0)
    pair = PairedSteps(plain_module, fcco(data))
    # two optimizer steps per batch
    trainer(devices, 2 * steps, paired=True, accelerator=accelerator, precision=precision).fit(pair, datamodule=data)
    return pair.times["plain"], pair.times["fcco"]


def run(quick: bool, devices: int, steps: int, work: Path,
        only: list[str] | None = None) -> dict[str, tuple[float, float, float]]:
    """case → (plain ms, FCCO ms, ratio of the medians)."""
    out = {}
    every = [(name, case, steps) for name, case in cases(quick, work).items()]
    every += [(name, case, deep_steps(steps)) for name, case in deep_cases().items()]
    for name, (make_data, plain, fcco), batches in every:
        if only and not any(o in name for o in only):
            continue
        plain_t, fcco_t = paired_times(plain, fcco, make_data(), batches, devices)
        p, f = statistics.median(plain_t), statistics.median(fcco_t)
        if devices > 1:  # the slower rank sets the pace: the largest median over ranks
            both = torch.tensor([p, f], dtype=torch.float64)
            torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX)
            p, f = both.tolist()
        out[name] = (p * 1e3, f * 1e3, f / p)
        if int(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0) == 0:
            print(f"{name}: plain {out[name][0]:.2f} ms, FCCO {out[name][1]:.2f} ms, ratio {out[name][2]:.3f}",
                  file=sys.stderr, flush=True)
    return out


def report(single: dict, ddp: dict | None, command: str, steps: int, threads: int = 1) -> str:
    lines = [
        "## FCCO step overhead: SONG, K-SONG, ADAP, SONEX, PAUCRange versus a plain step (Lightning, CPU)",
        "",
        f"Command: `{command}`. Machine: {machine(threads)}, the threads of each timed process. Each step is the "
        "module's own `training_step` (with its "
        "`on_train_batch_start` / `_end` hooks) under a Lightning Trainer: state update, all-gather under DDP and "
        "logging included, data loading excluded. Plain = the same model, batch, optimizer and DataModule with BCE "
        "(classification) or listwise cross-entropy (ranking). Plain and FCCO steps alternate call by call on the "
        f"same {steps} batches of one fit ({deep_steps(steps)} for the ResNet-20 rows; `timing.PairedSteps`, "
        "first 3 dropped), medians per side. DDP × 2: 2 CPU "
        "processes (gloo, 1 thread each), each module in its own `DistributedDataParallel` "
        "(`timing.PairedDDPStrategy`), the slower rank's median. Target ≤ 1.05.",
        "",
        "| case | plain ms | FCCO ms | ratio | DDP×2 plain ms | DDP×2 FCCO ms | DDP ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (p, f, r) in single.items():
        d = ddp.get(name) if ddp else None
        dd = f"{d[0]:.2f} | {d[1]:.2f} | {d[2]:.3f}" if d else "not run | | "
        lines.append(f"| {name} | {p:.2f} | {f:.2f} | {r:.3f} | {dd} |")
    lines += [
        "",
        "Where a ratio exceeds 1.05, the extra time is work the algorithm defines, not bookkeeping (profiled with "
        "torch.profiler and cProfile; the state update of a batch costs 0.1–0.2 ms):",
        "",
        "* SONEX: the MSVR correction γ'(ĝ(w_t) − ĝ(w_{t−1})) evaluates the batch a second time, at the previous "
        "parameters (one more forward pass of the MLP, about a third of a plain step); the ↳ row without it "
        "(γ' = 0) is the rest of SONEX's machinery.",
        "* PAUCRange (inner step, `fccolit/algorithms/pauc/agd_sbcd.py`): its optimizer step "
        "(`double_loop.proximal_step_`) takes the proximal term ‖v − w_k‖²/(2μ) in closed form, as a move of v "
        "towards w_k (`torch._foreach_lerp_`), then the gradient step, and adds v to the running sum of the iterates "
        "in the same step (`torch._foreach_add_`): two parameter-sized passes beyond the SGD step's one. The rest is "
        "the ranked range: the loss matrix and its backward, the thresholds' read, running sum and update (a state "
        "update), and the ranking of the batch's losses for the logged estimate (the epoch's exact mean needs every "
        "step's; one sort of the negatives' scores orders every row): 63 tensor operations a step beyond the plain "
        "step's (`op_count.py`, the next section; 86, then 68, before the logged estimate read the ranked row "
        "directly and by the negatives' order), and the logistic loss's log1p over the 64 × 192 pairs, about 0.1 ms "
        "(torch's CPU log1p is not vectorized). An operation that takes a few microseconds back to back takes "
        "several times that inside a step, after the model's matrix products (`cold_ops.py`). That is mostly fixed "
        "work a step, so the ratio reaches 1.05 only from width 2048 (`step_overhead.py`), not 512.",
        "* ADAP: the AP surrogate's P × B pairs (64 × 256 here; one autograd node with a closed-form backward), the "
        "state update and the estimator: 70 small tensor operations a step beyond the plain step's (`op_count.py`) "
        "at a few microseconds each on this CPU, a fixed cost of roughly 1 ms. Its sigmoid scores are clamped at log √tiny "
        "(`fccolit.surrogates.sigmoid_scores`): unclamped, the negatives' logits fall below −87 within 20 steps, "
        "float32's σ and σ' there are subnormal, and on this machine's Xeon every matrix product of the backward pass "
        "that meets them slowed ADAP's step to 2.7× the plain step (25 ms against 9 ms; the code before the redesign, "
        "a7284db, the same), where the previous machine showed 1.1×.",
        "* DDP × 2: each collective inside a step waits for the slower rank, and on this 2-core machine shared with "
        "other jobs the ranks are rarely in step. A plain DDP step has one synchronization (the gradient all-reduce); "
        "an FCCO step adds one: the state's all-gather (row counts, indices and estimates in one packed tensor, padded "
        "to a capacity every rank knows) or, for objectives of the global batch (AP, pAUC), the all-gather of scores "
        "and fields, whose backward needs no communication. The isolated collective costs 0.2–0.4 ms here; the rest "
        "is waiting.",
        "* The ResNet-20 rows are the papers' deep setting for image data (CIFAR-10-LT: the AP experiments of "
        "Wang et al., AISTATS 2022 and the pAUC experiments of Yao, Lin & Yang, NeurIPS 2022, batches of 32 + 32): "
        "there the fixed cost of the estimator and PAUCRange's passes over the 0.27 M parameters are small next to "
        "the convolutions.",
        "* How the ratio depends on the model: `python benchmarks/step_overhead.py` sweeps the MLP width (128 … 2048) "
        "for ADAP, PAUCRange, SONEX and SOX, with a plot: the extra of ADAP / SOX / SONEX without MSVR is roughly "
        "fixed (about 1 ms of small tensor operations on this CPU), so their ratio falls under 1.05 as the plain step "
        "grows; PAUCRange's and SONEX's extras grow with the model (parameter-sized vectors, a second forward pass).",
    ]
    return "\n".join(lines)


def default_steps(quick: bool) -> int:
    """Paired batches per case (``--quick`` and the full run)."""
    return 80 if quick else 200


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None, help="paired batches per case")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--only", nargs="*", default=None, help="case names (prefixes) to run")
    ap.add_argument("--work", type=Path, default=None, help="folder for generated data (default: a temporary one)")
    ap.add_argument("--json", type=Path, default=None, help="write the medians here (rank 0)")
    args = ap.parse_args()
    steps = args.steps or default_steps(args.quick)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="fccolit-overhead-") as tmp:
        work = args.work or Path(tmp)
        result = run(args.quick, args.devices, steps, work, args.only)
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    if rank == 0 and args.json:
        args.json.write_text(json.dumps(result))
    if rank == 0 and args.devices == 1 and not args.json:
        text = report(result, None, "python benchmarks/fcco_overhead.py" + " ".join([""] + sys.argv[1:]), steps,
                      args.threads)
        print(text)
        write_result("fcco_overhead", text)


if __name__ == "__main__":
    main()
