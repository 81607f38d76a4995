"""Every speed benchmark in one command: ``python benchmarks/run.py [--quick]`` (``make bench`` runs ``--quick``).

``python benchmarks/run.py --gpu [--quick]`` instead runs ``benchmarks/gpu.py`` (the prepared GPU benchmark: one CUDA
device, sized to take under 8 minutes on an H100; ``--quick``: tiny shapes on the CPU) and assembles RESULTS.md.

``python benchmarks/run.py --reproduce [--quick]`` instead runs every paper-reproduction script of
``benchmarks/reproduce/`` (their ``--quick`` modes with ``--quick``) and assembles ``benchmarks/REPRODUCTION.md``.

Runs, each writing its ``benchmarks/results/<name>.md``, then assembles ``benchmarks/RESULTS.md``
(``benchmarks/collect.py``):

* ``fcco_overhead.py``: SONG, K-SONG, ADAP, SONEX, PAUCRange steps versus a plain step, one process and DDP × 2;
* ``op_count.py``: the same cases' tensor operations per step, FCCO against plain (machine-independent);
* ``cold_ops.py``: a small operation's cost inside a step (after the model's products) against back to back;
* ``libauc_compare.py``: against LibAUC (AP + dual sampler, SONG + NeuMF, full-ranking NDCG@k), when installed;
* ``ndcg_eval.py``: the full-ranking NDCG@k metric alone against LibAUC's ``ndcg_at_k``;
* ``state_scale.py``: per-index state bytes per pair and update time for n = 10^5 … 10^8;
* ``ranking_data.py``: MovieLens-20M-sized parse / cache load, sampler-versus-step throughput, LibAUC's MovieLens
  data path (when installed);
* ``step_overhead.py``: ADAP, PAUCRange, SONEX (with / without MSVR) and SOX step versus plain step over MLP widths
  128 … 2048 (Lightning, table and plot); ``song_step.py``: SONG / K-SONG / SOLC (raw, at MovieLens-20M table sizes);
* ``neuralndcg_step.py``: NeuralNDCG's loss step against the plain autograd of its Sinkhorn loop;
* ``finite_check.py``: the finite check before each optimizer step against the inf-norm check it replaced;
* ``health_overhead.py``: the same run with and without the ``TrainingHealth`` callback, side by side (its per-step
  cost);
* ``feature_scaling.py``: what standardizing a user's feature columns costs the HF DataModules (building, batches);
* ``handwritten.py``: the hand-written optimizers, samplers and readers against torch.optim, DistributedSampler, pandas,
  scikit-learn, torchvision, json and datasets on the same work.
* ``sparse_libsvm.py`` (full runs only: its one size is the news20-shaped file): sparse LIBSVM memory and step time.

``--quick`` uses reduced sizes (under 10 minutes on the 2-core development machine); without it, full sizes. The last
line printed is ``summary: fcco_overhead_max=<x> pauc_inner_ratio_at_512=<p> libauc_speedup_min=<y>
fcco_extra_ops_max=<n>``: the worst FCCO / plain step ratio of ``fcco_overhead.py`` (one process and DDP), its
PAUCRange inner step / plain step ratio (one process, MLP 256-512-512-1: width 512), the smallest fccolit / LibAUC
speed-up of ``libauc_compare.py`` and the most operations an FCCO step issues beyond its plain step
(``op_count.py``) (``nan`` when LibAUC is not installed or a benchmark was skipped).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def sub(args: list[str], required: bool = True) -> None:
    """Run ``python <args>`` from the repository root; a failure stops everything unless not ``required``."""
    start = time.perf_counter()
    print(f"$ python {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, *args], check=required, cwd=HERE.parent)
    status = "" if done.returncode == 0 else f", FAILED with exit status {done.returncode}: its results file is stale"
    print(f"  ({time.perf_counter() - start:.0f} s{status})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (under 10 minutes on 2 cores)")
    ap.add_argument("--skip", nargs="*", default=[], help="benchmark names to leave out")
    ap.add_argument("--reproduce", action="store_true",
                    help="run the paper-reproduction scripts of benchmarks/reproduce/ instead, then write REPRODUCTION.md")
    ap.add_argument("--gpu", action="store_true",
                    help="run benchmarks/gpu.py instead (one CUDA device), then assemble RESULTS.md")
    args = ap.parse_args()
    if args.gpu:
        sub(["benchmarks/gpu.py", *(["--quick"] if args.quick else [])])
        sub(["benchmarks/collect.py"])
        return
    if args.reproduce:
        reproduce(args.quick, args.skip)
        return
    quick = ["--quick"] if args.quick else []
    command = "python benchmarks/run.py" + " --quick" * args.quick
    start = time.perf_counter()
    ratios: list[float] = []
    speedups: list[float] = []
    pauc_at_512: list[float] = []
    extra_ops: list[float] = []

    import fcco_overhead
    import libauc_compare
    import op_count
    import state_scale

    with tempfile.TemporaryDirectory(prefix="fccolit-bench-") as tmp:
        tmp = Path(tmp)
        if "fcco_overhead" not in args.skip:
            single, ddp = tmp / "single.json", tmp / "ddp.json"
            sub(["benchmarks/fcco_overhead.py", *quick, "--work", str(tmp / "data"), "--json", str(single)])
            sub(["benchmarks/fcco_overhead.py", *quick, "--devices", "2", "--work", str(tmp / "data"),
                 "--json", str(ddp)])
            one, two = json.loads(single.read_text()), json.loads(ddp.read_text())
            text = fcco_overhead.report(one, two, command, fcco_overhead.default_steps(args.quick))
            print(text)
            fcco_overhead.write_result("fcco_overhead", text)
            # the target algorithms' rows (the "↳" rows are diagnostics, e.g. SONEX without its MSVR pass)
            ratios += [r for table in (one, two) for name, (_, _, r) in table.items() if not name.startswith("↳")]
            pauc_at_512 += [r for name, (_, _, r) in one.items() if name.startswith("PAUCRange inner step (MLP 256-512-")]
        if "op_count" not in args.skip:
            counts = op_count.run(args.quick, tmp / "data")
            op_count.write_result("op_count", op_count.report(counts, command))
            extra_ops += [f - p for name, (p, f) in counts.items() if not name.startswith("↳")]
        if "cold_ops" not in args.skip:  # why the step ratios follow the operation count: an operation inside a step
            sub(["benchmarks/cold_ops.py", *quick, "--write"])
        if "libauc_compare" not in args.skip:
            results = libauc_compare.run(args.quick)
            text = libauc_compare.report(results, command)
            print(text)
            libauc_compare.write_result("libauc_compare", text)
            speedups += list(libauc_compare.speedups(results).values())
        if "ndcg_eval" not in args.skip:  # the evaluation metric alone against LibAUC (another session's script)
            sub(["benchmarks/ndcg_eval.py", *quick], required=False)
        if "state_scale" not in args.skip:
            res = state_scale.run(args.quick)
            state_scale.write_result("state_scale", state_scale.report(res, command))
        if "ranking_data" not in args.skip:
            sub(["benchmarks/ranking_data.py", *quick, "--steps", "6" if args.quick else "20"])
        if "step_overhead" not in args.skip:
            sub(["benchmarks/step_overhead.py", *quick, "--write"])
        if "song_step" not in args.skip:
            sub(["benchmarks/song_step.py", *quick])
        if "neuralndcg_step" not in args.skip:  # NeuralNDCG's vector-form Sinkhorn against plain autograd
            sub(["benchmarks/neuralndcg_step.py", *quick])
        if "finite_check" not in args.skip:  # the per-step finite check, a sum against the old inf-norm
            sub(["benchmarks/finite_check.py", *(["--repeats", "5"] if args.quick else [])])
        if "health_overhead" not in args.skip:  # the TrainingHealth callback's per-step cost, with / without it
            sub(["benchmarks/health_overhead.py", *quick])
        if "feature_scaling" not in args.skip:  # the HF DataModules' feature statistics and scaled batches
            sub(["benchmarks/feature_scaling.py", *(["--rows", "20000"] if args.quick else [])])
        if "metrics_compare" not in args.skip:  # fccolit's metrics against torchmetrics, the validation pictures
            sub(["benchmarks/metrics_compare.py", *quick])
        if "handwritten" not in args.skip:
            sub(["benchmarks/handwritten.py", *quick, "--write"], required=False)
        if "sparse_libsvm" not in args.skip and not args.quick:
            sub(["benchmarks/sparse_libsvm.py", "--write"], required=False)
    sub(["benchmarks/collect.py"])
    print(f"all benchmarks: {time.perf_counter() - start:.0f} s")
    fmt = lambda xs, f: f"{f(xs):.3f}" if xs else "nan"  # noqa: E731
    # fcco_overhead_max: the largest FCCO / plain step ratio of fcco_overhead.py (one process and DDP × 2);
    # pauc_inner_ratio_at_512: its PAUCRange inner step / BCE step ratio, one process, MLP 256-512-512-1 (issue 29:
    # target <= 1.05); libauc_speedup_min: the smallest fccolit / LibAUC speed-up of libauc_compare.py (nan without
    # LibAUC); fcco_extra_ops_max: the most tensor operations an FCCO step of op_count.py issues beyond its plain
    # step. The data path ratios of ranking_data.py (different work on each side) are reported there, not here.
    print(f"summary: fcco_overhead_max={fmt(ratios, max)} pauc_inner_ratio_at_512={fmt(pauc_at_512, max)} "
          f"libauc_speedup_min={fmt(speedups, min)} fcco_extra_ops_max={fmt(extra_ops, max)}")


def reproduce(quick: bool, skip: list[str]) -> None:
    """Every script of benchmarks/reproduce/ in collect.py's order (a failure is reported, the others still run)."""
    sys.path.insert(0, str(HERE / "reproduce"))
    from collect import SCRIPTS

    start = time.perf_counter()
    for name in SCRIPTS:
        if name not in skip and (HERE / "reproduce" / f"{name}.py").exists():
            sub([f"benchmarks/reproduce/{name}.py", *(["--quick"] if quick else [])], required=False)
    sub(["benchmarks/reproduce/collect.py"])
    print(f"all reproduction scripts: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
