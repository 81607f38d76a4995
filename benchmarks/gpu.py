"""One prepared GPU benchmark: FCCO / plain step ratios, LibAUC side by side, peak memory, AMP (bf16) on and off.

    python benchmarks/gpu.py            # one CUDA device (192 s on an H200; results/gpu_nvidia_h200.md); writes
                                        # benchmarks/results/gpu_<device>.md (then: python benchmarks/collect.py)
    python benchmarks/gpu.py --quick    # tiny shapes, a few steps, on the CPU when there is no GPU (seconds)
    python benchmarks/gpu.py --profile resnet20 neumf --precision 32-true --out DIR/x
                                        # torch.profiler tables of these workloads' fits (device time, host time)
                                        # and where the host waits for the device, into DIR

Two companions judge a change within one lease: ``benchmarks/gpu_ab.py TREE_A TREE_B`` (these ratio rows for two
source trees, alternately) and ``benchmarks/gpu_host_wait.py TREE ...`` (how long a state update blocks the host).

``python benchmarks/run.py --gpu`` runs it and assembles RESULTS.md. Nothing is downloaded and nothing needs
editing: every model is built with random weights and every batch is generated.

Workloads (the papers' settings, shapes only; :data:`WORKLOADS`):

* ResNet-20 on 3 × 32 × 32 images (CIFAR-10-LT), batches of 32 positives + 32 others: ADAP and PAUCRange (inner
  step) against BCE; LibAUC's SOAP against fccolit's :class:`~fccolit.algorithms.SOAP`.
* DenseNet-121 (torchvision, random weights) on 3 × 224 × 224 images (CheXpert), 16 positives + 16 others: the same.
* NeuMF 64/[64] at MovieLens-20M scale: 138,493 users × 26,744 items, a per-pair state of 19,942,992 pairs (144 per
  user; generated ids, :func:`ranking_batches`), batches of 256 users × (10 + 300) items: SONG and K-SONG against
  a listwise cross-entropy step; LibAUC's ``NDCGLoss`` (SONG, and K-SONG with ``topk=10``) side by side.
* CLIP ViT-B/32 image tower (transformers' ``CLIPConfig`` defaults, random weights; a one-layer text tower, unused
  by the linear head) on 3 × 224 × 224 images, 8 groups × 16: ALEXR2 (GDRO-CVaR) against BCE. LibAUC has no ALEXR2.

Each row runs twice: fp32 (``precision="32-true"``) and AMP bf16 (``"bf16-mixed"``: Lightning's autocast for the
ratio rows, ``torch.autocast`` around forward and loss for the LibAUC rows).

* Ratio rows: one Lightning fit of :class:`timing.PairedSteps` alternates the plain and the FCCO module's
  ``training_step`` call by call on the same batches (already on the device, :class:`timing.FixedBatches`; each
  call bracketed by ``torch.cuda.synchronize``), medians per side.
* Peak memory: ``torch.cuda.max_memory_allocated`` of a short fit of each module alone (its parameters, gradients,
  optimizer and FCCO state, activations; the batches on the device included), counters reset before the fit.
* LibAUC rows: each side's raw step (forward, loss, backward, optimizer step; no Lightning) on the same batches,
  interleaved call by call (:func:`timing.interleaved_medians`), steps per second = 1 / the median call.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fcco_overhead  # noqa: E402
import libauc_compare  # noqa: E402
from timing import RESULTS_DIR, FixedBatches, interleaved_medians, machine  # noqa: E402

from fccolit.algorithms import ALEXR2, KSONG, SOAP, SONG, Supervised  # noqa: E402
from fccolit.datamodules import SyntheticGroupedDataModule  # noqa: E402
from fccolit.models import ResNet20  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.models.vision import CLIPClassifier, TorchvisionBackbone  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate, GroupDROCVaRLoss  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate  # noqa: E402

PRECISIONS = ("32-true", "bf16-mixed")
#: ``--quick`` / the full run: batches per ratio row (the first 3 not timed), steps of a memory fit, LibAUC rounds
STEPS = {True: (4, 2, 1), False: (30, 3, 5)}


# ---------------------------------------------------------------------------------------------- the workloads
@dataclass
class Workload:
    """One model and data shape: its batches (on the device), the ratio rows and the LibAUC rows.

    ``pairs``: row label → (plain module factory, FCCO module factory), factories of the data (``d.sizes``).
    ``libauc``: row label → ``make(data, autocast) -> {"fccolit": step, "libauc": step}``, steps of a batch."""

    title: str
    data: Callable[[torch.device], FixedBatches]
    pairs: dict[str, tuple[Callable, Callable]]
    libauc: dict[str, Callable] = field(default_factory=dict)


def adam(params):
    return torch.optim.Adam(params, lr=1e-3)


def soap_pair(net: Callable[[], nn.Module]) -> Callable:
    """``make(data, autocast)``: fccolit's SOAP (AP, squared hinge margin 1, γ = 0.9, Adam lr 1e-3) and LibAUC's
    ``APLoss`` + ``SOAP(mode="adam")`` on copies of one ``net()``, each a step of a binary batch."""
    def make(data: FixedBatches, autocast) -> dict[str, Callable]:
        device = data.batches[0]["x"].device
        base = net().to(device)
        ours = SOAP(copy.deepcopy(base), AveragePrecisionSurrogate(margin=1.0), ema_weight=0.9, data_sizes=data.sizes).to(device)
        step = libauc_compare.fcco_batch_step(ours, adam(ours.parameters()), autocast)
        _, _, theirs = libauc_compare.libauc_ap(copy.deepcopy(base), data.sizes["num_positives"], device=device)
        return {"fccolit": step, "libauc": lambda b: theirs(b["x"], b["y"], b["pos_index"], autocast)}
    return make


def ndcg_pair(top_k: int | None) -> Callable:
    """``make(data, autocast)``: fccolit's SONG (``top_k`` None; γ0 = 0.1, fresh u) or K-SONG (practical, K =
    ``top_k``) and LibAUC's ``NDCGLoss`` (``topk`` −1 or K) + ``SONG(mode="adam")``, Adam lr 1e-3, NeuMF 64/[64]."""
    def make(data: FixedBatches, autocast) -> dict[str, Callable]:
        first = data.batches[0]
        device, sizes = first["query"].device, data.sizes
        positives = int((first["pair_index"][0] >= 0).sum())
        base = NeuMF(sizes["num_users"], sizes["num_items"], embedding_dim=64, layers=[64], dropout=0.0).to(device)
        if top_k is None:
            ours = SONG(copy.deepcopy(base), NDCGSurrogate(), ema_weight=0.1, u_for_gradient="fresh", data_sizes=sizes)
        else:
            ours = KSONG(copy.deepcopy(base), TopKNDCGSurrogate(top_k=top_k), data_sizes=sizes)
        ours = ours.to(device)
        step = libauc_compare.fcco_batch_step(ours, adam(ours.parameters()), autocast)
        model = copy.deepcopy(base)
        loss_fn, opt = libauc_compare.libauc_ndcg(model, sizes["num_pairs"], sizes, positives, device=device,
                                                  topk=-1 if top_k is None else top_k)

        def theirs(b):
            opt.zero_grad()
            with autocast if autocast is not None else contextlib.nullcontext():
                loss = loss_fn(model(b["query"], b["items"]), libauc_compare.libauc_batch(b))
            loss.backward()
            opt.step()
        return {"fccolit": step, "libauc": theirs}
    return make


def ranking_batches(num_users: int, num_items: int, pairs_per_user: int, queries: int, positives: int,
                    negatives: int, count: int, top_k: int = 10, seed: int = 0,
                    device: torch.device | str = "cpu") -> FixedBatches:
    """``count`` generated batches in the ranking batch schema (``fccolit.datamodules.synthetic_ranking``) for
    ``num_users`` users who each rated ``pairs_per_user`` of ``num_items`` items (ratings 1..5; the per-pair state
    has ``num_users · pairs_per_user`` rows, user q's at ``q · pairs_per_user + j``), ``queries`` users per batch,
    each ``positives`` of its rated items (first) and ``negatives`` uniform items: the shapes of MovieLens-20M without
    building its users × items tables.

    Example:
        >>> data = ranking_batches(50, 40, 6, queries=4, positives=2, negatives=5, count=1)
        >>> sorted(data.sizes.items())
        [('num_items', 40), ('num_pairs', 300), ('num_queries', 50), ('num_users', 50), ('top_k', 10)]
        >>> data.batches[0]["items"].shape, bool((data.batches[0]["pair_index"][:, 2:] == -1).all())
        (torch.Size([4, 7]), True)
    """
    gen = torch.Generator().manual_seed(seed)
    width = positives + negatives
    discount = 1.0 / torch.log2(torch.arange(2, pairs_per_user + 2, dtype=torch.float64))
    batches = []
    for _ in range(count):
        query = torch.randperm(num_users, generator=gen)[:queries]
        ratings = torch.randint(1, 6, (queries, pairs_per_user), generator=gen).double()  # each user's whole list
        gains = (2.0 ** ratings.sort(1, descending=True).values - 1.0) * discount
        chosen = torch.rand(queries, pairs_per_user, generator=gen).argsort(1)[:, :positives]
        relevance = torch.zeros(queries, width)
        relevance[:, :positives] = ratings.gather(1, chosen).float()
        pair_index = torch.full((queries, width), -1, dtype=torch.long)
        pair_index[:, :positives] = query[:, None] * pairs_per_user + chosen
        batch = {
            "query": query, "items": torch.randint(0, num_items, (queries, width), generator=gen),
            "relevance": relevance, "pair_index": pair_index, "mask": torch.ones(queries, width, dtype=torch.bool),
            "num_items": torch.full((queries,), float(num_items)), "ideal_dcg": gains.sum(1).float(),
            "num_relevant": torch.full((queries,), pairs_per_user, dtype=torch.long),
            "ideal_dcg_at_k": gains[:, :top_k].sum(1).float(),
        }
        batches.append({k: v.to(device) for k, v in batch.items()})
    sizes = {"num_users": num_users, "num_items": num_items, "num_queries": num_users,
             "num_pairs": num_users * pairs_per_user, "top_k": top_k}
    return FixedBatches(batches, sizes)


def image_workload(title: str, backbone: Callable[[], nn.Module], image_size: int, positives: int, others: int,
                   count: int) -> Workload:
    """ADAP and PAUCRange (inner step) against BCE (``fcco_overhead.image_pairs``) and SOAP against LibAUC's on
    ``count`` batches of Gaussian ``3 × image_size²`` images, ``positives`` + ``others`` each."""
    make_data = fcco_overhead.image_data(image_size, positives, others, num_samples=max(400, 20 * positives))
    pairs = fcco_overhead.image_pairs(backbone, image_size)
    net = lambda: nn.Sequential(nn.Unflatten(1, (3, image_size, image_size)), backbone())  # noqa: E731
    return Workload(title, lambda device: FixedBatches.from_datamodule(make_data(), count, device),
                    {"ADAP vs BCE": pairs["ADAP"], "PAUCRange inner step vs BCE": pairs["PAUCRange"]},
                    {"AP: SOAP": soap_pair(net)})


def clip_config(quick: bool, image_size: int) -> dict:
    """``CLIPConfig`` keyword arguments: the vision tower of ViT-B/32 (``CLIPVisionConfig``'s defaults: width 768,
    12 layers, 12 heads, patch 32) or, ``quick``, a two-layer one of width 32 and patch 8; a one-layer text tower of
    width 32 (the linear head does not use it)."""
    text = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": 16, "bos_token_id": 98, "eos_token_id": 99,
            "pad_token_id": 0}
    vision = {"image_size": image_size, "patch_size": 32}
    if quick:
        vision = {"image_size": image_size, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 2}
    return {"text_config": text, "vision_config": vision, "projection_dim": 32 if quick else 512}


def clip_workload(quick: bool, count: int) -> Workload:
    size, groups, per_group = (16, 4, 4) if quick else (224, 8, 16)
    features = 3 * size * size
    net = lambda: nn.Sequential(  # noqa: E731
        nn.Unflatten(1, (3, size, size)), CLIPClassifier(config=clip_config(quick, size), head="linear", num_outputs=1))
    make_data = lambda: SyntheticGroupedDataModule(  # noqa: E731
        num_groups=groups, max_group_size=4 * per_group, num_features=features, groups_per_batch=groups,
        samples_per_group=per_group, seed=0)
    pairs = {"ALEXR2 (GDRO-CVaR) vs BCE": (
        lambda d: Supervised(net(), optimizer=adam, data_sizes=d.sizes),
        lambda d: ALEXR2(net(), GroupDROCVaRLoss(ratio=0.25), optimizer=adam, data_sizes=d.sizes))}
    title = (f"CLIP ViT-B/32 image tower (random weights), 3 × {size}² images, {groups} groups × {per_group}"
             if not quick else f"CLIP (2 layers of width 32), 3 × {size}², {groups} groups × {per_group}")
    return Workload(title, lambda device: FixedBatches.from_datamodule(make_data(), count, device), pairs)


def neumf_workload(quick: bool, count: int) -> Workload:
    users, items, per_user, queries, pos, neg = ((300, 200, 12, 8, 3, 20) if quick
                                                else (138_493, 26_744, 144, 256, 10, 300))
    rank = fcco_overhead.ranking_pairs()
    title = (f"NeuMF 64/[64], {users:,} users × {items:,} items, state of {users * per_user:,} pairs, "
             f"B = {queries} × ({pos} + {neg})")
    return Workload(title, lambda device: ranking_batches(users, items, per_user, queries, pos, neg, count,
                                                          device=device),
                    {"SONG vs listwise CE": rank["SONG"], "K-SONG practical vs listwise CE": rank["K-SONG practical"]},
                    {"SONG": ndcg_pair(None), "K-SONG practical (K = 10)": ndcg_pair(10)})


def densenet_backbone(quick: bool) -> nn.Module:
    """DenseNet-121 with one output (``TorchvisionBackbone``); ``quick``: torchvision's ``DenseNet`` with two blocks
    of one layer, growth 4 (a step of DenseNet-121 takes seconds on a loaded CPU)."""
    if not quick:
        return TorchvisionBackbone("densenet121", num_outputs=1)
    from torchvision.models import DenseNet

    return nn.Sequential(DenseNet(growth_rate=4, block_config=(1, 1), num_init_features=8, bn_size=2, num_classes=1),
                         nn.Flatten(0))


def workloads(quick: bool, count: int) -> dict[str, Workload]:
    """name → :class:`Workload` (``--only`` picks names)."""
    image = (8, 2, 2) if quick else None
    resnet = image_workload(
        "ResNet-20, 3 × 32² images (CIFAR-10-LT), B = 32 positives + 32 others" if not quick
        else "ResNet-20, 3 × 8² images, B = 2 + 2", lambda: ResNet20(num_outputs=1),
        *(image or (32, 32, 32)), count)
    densenet = image_workload(
        "DenseNet-121 (torchvision, random weights), 3 × 224² images (CheXpert), B = 16 positives + 16 others"
        if not quick else "a two-block DenseNet of growth 4 (torchvision), 3 × 8² images, B = 2 + 2",
        lambda: densenet_backbone(quick), *((8, 2, 2) if quick else (224, 16, 16)), count)
    return {"resnet20": resnet, "densenet121": densenet, "neumf": neumf_workload(quick, count),
            "clip": clip_workload(quick, count)}


# ---------------------------------------------------------------------------------------------- measuring
def peak_memory_mib(factory: Callable, data: FixedBatches, accelerator: str, precision: str, steps: int) -> float:
    """``torch.cuda.max_memory_allocated`` (MiB) of a ``steps``-step fit of ``factory(data)`` alone (NaN off CUDA)."""
    if accelerator != "gpu":  # no device memory to measure (--quick on the CPU)
        return math.nan
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    fcco_overhead.trainer(1, steps, accelerator=accelerator, precision=precision).fit(factory(data), datamodule=data)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def autocast_of(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16-mixed" else None


def run(quick: bool, only: list[str] | None = None, log=print, after_workload=None, libauc: bool = True) -> dict:
    """Every row: ``{"ratio": [...], "libauc": [...], "device": str, "seconds": float}``; ``after_workload(result)``
    is called with the rows so far after each workload (``main`` rewrites the results file: a run cut short keeps
    the workloads it finished); ``libauc`` False: the ratio rows only."""
    cuda = torch.cuda.is_available()
    if not (cuda or quick):
        raise SystemExit("benchmarks/gpu.py needs a CUDA device (or --quick, which runs tiny shapes on the CPU)")
    device = torch.device("cuda:0" if cuda else "cpu")
    accelerator = "gpu" if cuda else "cpu"
    batches, mem_steps, rounds = STEPS[quick]
    if cuda:
        torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    out = {"ratio": [], "libauc": [], "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    for name, work in workloads(quick, batches).items():
        if only and name not in only:
            continue
        data = work.data(device)
        for precision in PRECISIONS:
            for label, (plain, fcco) in work.pairs.items():
                plain_t, fcco_t = fcco_overhead.paired_times(plain, fcco, data, batches, 1,
                                                             accelerator=accelerator, precision=precision)
                p, f = statistics.median(plain_t) * 1e3, statistics.median(fcco_t) * 1e3
                mem = [peak_memory_mib(m, data, accelerator, precision, mem_steps) for m in (plain, fcco)]
                row = {"workload": work.title, "case": label, "precision": precision, "plain_ms": p, "fcco_ms": f,
                       "ratio": f / p, "plain_mib": mem[0], "fcco_mib": mem[1]}
                out["ratio"].append(row)
                log(f"[{time.perf_counter() - start:5.0f} s] {name} {label} {precision}: plain {p:.2f} ms, "
                    f"FCCO {f:.2f} ms, ratio {f / p:.3f}, peak {mem[0]:.0f} / {mem[1]:.0f} MiB")
            for label, make in (work.libauc if libauc else {}).items():
                skip = libauc_compare.libauc_available()
                row = {"workload": work.title, "case": label, "precision": precision}
                steps = None
                if skip is None:
                    torch.manual_seed(0)
                    steps = make(data, autocast_of(device, precision))
                    timed = data.batches[:2] if quick else data.batches
                    ms = interleaved_medians(steps, timed, repeats=rounds, warmup=1, device=device)
                    row.update(ours=1e3 / ms["fccolit"], theirs=1e3 / ms["libauc"],
                               speedup=ms["libauc"] / ms["fccolit"])
                    log(f"[{time.perf_counter() - start:5.0f} s] {name} LibAUC {label} {precision}: "
                        f"fccolit {row['ours']:.1f} steps/s, LibAUC {row['theirs']:.1f} steps/s")
                else:
                    row["skip"] = skip
                out["libauc"].append(row)
                del steps
        del data
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        out["seconds"] = time.perf_counter() - start
        if after_workload is not None:
            after_workload(out)
    out["seconds"] = time.perf_counter() - start
    return out


def sync_sources(fit: Callable[[], None], depth: int = 4) -> str:
    """Run ``fit()`` under ``torch.cuda.set_sync_debug_mode("warn")`` and list the places that made the host wait
    for the device (a read of a device value, a synchronizing copy), each by the ``depth`` innermost frames of the
    fccolit package (else of any code outside torch, e.g. Lightning's) that led there, most frequent first."""
    import traceback
    import warnings

    import fccolit

    if not torch.cuda.is_available():
        return "(no CUDA device: nothing to wait for)"
    package = str(Path(fccolit.__file__).resolve().parent)  # the library's frames, else the innermost others
    counts: dict[str, int] = {}

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):  # another warning of the fit (Lightning's, say): not a wait
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename
                  and "/warnings.py" not in f.filename]
        ours = [f for f in frames if str(Path(f.filename).resolve()).startswith(package)] or frames
        key = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(ours[-depth:]))
        counts[key] = counts.get(key, 0) + 1

    previous = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fit()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = previous
    lines = [f"{'waits':>6}  where (innermost first)"]
    lines += [f"{n:6d}  {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def profile(name: str, quick: bool, folder: Path, log=print, steps: int = 10,
            precisions: tuple[str, ...] = PRECISIONS) -> list[Path]:
    """``torch.profiler`` tables of a ``steps``-step fit of each side (plain, FCCO) of workload ``name`` in each
    of ``precisions``: ``<folder>/profile_<name>_<case>_<side>_<precision>.txt``, the 25 operators with the
    largest self time on the device (self CPU time off CUDA), the 25 with the largest host (CPU) time, and the
    places that made the host wait for the device in a second such fit (:func:`sync_sources`), so
    a ratio row can be explained operator by operator."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    accelerator = "gpu" if cuda else "cpu"
    work = workloads(quick, steps)[name]
    data = work.data(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for precision in precisions:
        for case, (label, factories) in enumerate(work.pairs.items()):
            for side, factory in zip(("plain", "fcco"), factories):
                torch.manual_seed(0)
                module = factory(data)
                with torch_profile(activities=activities) as prof:
                    fcco_overhead.trainer(1, steps, accelerator=accelerator, precision=precision).fit(
                        module, datamodule=data)

                def fit_again() -> None:  # a fresh module (built only where there is a device to wait for)
                    torch.manual_seed(0)
                    fcco_overhead.trainer(1, steps, accelerator=accelerator, precision=precision).fit(
                        factory(data), datamodule=data)

                waits = sync_sources(fit_again)
                averages = prof.key_averages()
                tables = [f"{label}, {side}, {precision}, {steps} steps ({work.title})"]
                if cuda:
                    tables += ["device time:", averages.table(sort_by="self_cuda_time_total", row_limit=25)]
                tables += ["host time:", averages.table(sort_by="self_cpu_time_total", row_limit=25),
                           f"host waits for the device ({steps} steps):", waits]
                path = folder / f"profile_{name}_{case}_{side}_{precision}.txt"
                path.write_text("\n".join(tables) + "\n")
                written.append(path)
                log(f"profiled {name} {label} {side} {precision}: {path}")
    return written


# ---------------------------------------------------------------------------------------------- the report
def device_slug(name: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` → ``"nvidia_h100_80gb_hbm3"`` (the results file's name).

    Example:
        >>> device_slug("NVIDIA H100 80GB HBM3")
        'nvidia_h100_80gb_hbm3'
    """
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def report(result: dict, command: str) -> str:
    mib = lambda x: "n/a" if math.isnan(x) else f"{x:,.0f}"  # noqa: E731
    lines = [
        f"## GPU: FCCO step overhead, LibAUC side by side, peak memory, AMP ({result['device']})",
        "",
        f"Command: `{command}` ({result['seconds']:.0f} s). Machine: {machine()}. Every row of this section ran on "
        f"this device ({result['device']}); the other sections of RESULTS.md name their own machines. Batches "
        "are generated and already on the device (no data path); fp32 = `precision=\"32-true\"`, bf16 = "
        "`\"bf16-mixed\"` (autocast); fp32 matrix products without TF32. Ratio rows: `timing.PairedSteps` alternates the plain and the FCCO module's "
        "`training_step` under one Lightning fit, `torch.cuda.synchronize()` around every call, medians per side. "
        "Peak MiB: `torch.cuda.max_memory_allocated()` of a short fit of that module alone. LibAUC rows: each "
        "side's raw step (forward, loss, backward, optimizer step) on the same batches, interleaved call by call.",
        "",
        "| workload | case | precision | plain ms | FCCO ms | ratio | plain peak MiB | FCCO peak MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["ratio"]:
        lines.append(f"| {r['workload']} | {r['case']} | {r['precision']} | {r['plain_ms']:.2f} | {r['fcco_ms']:.2f} "
                     f"| {r['ratio']:.3f} | {mib(r['plain_mib'])} | {mib(r['fcco_mib'])} |")
    if result["libauc"]:
        lines += ["", "| workload | LibAUC method | precision | fccolit steps/s | LibAUC steps/s | speed-up |",
                  "|---|---|---|---:|---:|---:|"]
        for r in result["libauc"]:
            cells = (f"{r['ours']:.1f} | {r['theirs']:.1f} | {r['speedup']:.2f}×" if "skip" not in r
                     else f"{r['skip']} | | ")
            lines.append(f"| {r['workload']} | {r['case']} | {r['precision']} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shapes, a few steps (the CPU when there is no GPU)")
    ap.add_argument("--only", nargs="*", default=None, choices=["resnet20", "densenet121", "neumf", "clip"])
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default: benchmarks/results/gpu_<device>.md on a GPU, none with --quick)")
    ap.add_argument("--profile", nargs="+", choices=["resnet20", "densenet121", "neumf", "clip"], default=None,
                    help="instead of the ratios: torch.profiler tables of these workloads' plain and FCCO fits "
                         "(device time, host time, where the host waits for the device), written beside --out "
                         "(default: benchmarks/out/)")
    ap.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS),
                    help="with --profile: the precisions to profile")
    args = ap.parse_args(argv)
    torch.set_float32_matmul_precision("highest")
    if args.profile:
        folder = args.out.parent if args.out is not None else Path(__file__).resolve().parent / "out"
        for name in args.profile:
            for path in profile(name, args.quick, folder, log=lambda s: print(s, file=sys.stderr, flush=True),
                                precisions=tuple(args.precision)):
                print(path.read_text())
        return
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # --quick on the CPU: these tiny models gain nothing from more threads
    command = "python benchmarks/gpu.py" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    out = args.out
    if out is None and not args.quick and torch.cuda.is_available():
        out = RESULTS_DIR / f"gpu_{device_slug(torch.cuda.get_device_name(0))}.md"

    def write(result: dict) -> None:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(report(result, command).rstrip() + "\n")

    result = run(args.quick, args.only, log=lambda s: print(s, file=sys.stderr, flush=True), after_workload=write)
    write(result)
    print(report(result, command))
    if out is not None:
        print(f"written: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
