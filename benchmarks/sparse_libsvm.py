"""Sparse LIBSVM data (issue 18 §2): memory and step time of ``LibSVMDataModule(layout="sparse")``, and our reader
against scikit-learn's ``load_svmlight_file``.

    python benchmarks/sparse_libsvm.py [--rows 20000 --features 1360000 --density 3e-4] [--write]

1. Reader: :func:`fccolit.io.parse_libsvm` and ``sklearn.datasets.load_svmlight_file`` on a9a / a9a.t (from
   ``../shared/data/libsvm-a9a``) and on a generated news20.binary-shaped file (20k rows × 1.36M features, 0.03%
   stored, about 408 values per row): best-of-3 seconds, tracemalloc peak, and whether both return the same CSR
   arrays.
2. Memory: a fresh process builds the DataModule on the generated file (``layout="auto"`` picks sparse) and trains
   SOX (configs/libsvm/sox_ap.yaml's settings, LinearScorer) for 200 steps; its peak RSS, against the same
   process that only imports torch and Lightning, and against the 109 GB the dense matrix would take.
3. Step time: SOX's ``training_step`` on a9a with dense and with sparse batches (the same rows), interleaved
   batch by batch in one fit (:class:`timing.PairedSteps`), medians; and the sparse step on the generated file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning.pytorch import Trainer  # noqa: E402

from fccolit.algorithms import SOX  # noqa: E402
from fccolit.datamodules import LibSVMDataModule  # noqa: E402
from fccolit.io import parse_libsvm  # noqa: E402
from fccolit.models import LinearScorer  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402
from timing import PairedSteps, StepTimer, machine, write_result  # noqa: E402

A9A = Path(__file__).resolve().parents[2] / "shared" / "data" / "libsvm-a9a"


def write_news20_like(path: Path, rows: int, features: int, density: float, seed: int = 0) -> int:
    """A LIBSVM file shaped like news20.binary: ``rows`` lines of about ``density · features`` distinct sorted
    1-based columns with 4-decimal positive values (tf-idf-like), labels ±1 (30% positive) from a hidden linear
    score. Returns the number of stored values."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=features)
    per_row = max(1, round(density * features))
    nnz = 0
    with open(path, "w") as f:
        for lo in range(0, rows, 1000):
            n = min(1000, rows - lo)
            counts = rng.integers(per_row // 2, per_row * 3 // 2 + 1, size=n)
            row = np.repeat(np.arange(n), counts)
            key = np.unique(row * features + rng.integers(0, features, size=row.size))  # sorted, distinct per row
            row, col = key // features, key % features
            value = rng.integers(1, 10_000, size=key.size)
            score = np.bincount(row, weights=hidden[col] * value, minlength=n)
            label = np.where(score > np.quantile(score, 0.7), "+1", "-1")
            tokens = np.char.add(np.char.add((col + 1).astype(str), ":0."), np.char.zfill(value.astype(str), 4))
            bounds = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n))])
            f.write("".join(f"{label[i]} {' '.join(tokens[bounds[i]:bounds[i + 1]])}\n" for i in range(n)))
            nnz += key.size
    return nnz


def time_reader(fn, path: Path, repeats: int) -> tuple[float, int, object]:
    """(best seconds, tracemalloc peak bytes of one call, result)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(path)
        best = min(best, time.perf_counter() - start)
        del result
    tracemalloc.start()
    result = fn(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak, result


def reader_rows(files: list[Path], repeats: int) -> list[str]:
    from sklearn.datasets import load_svmlight_file

    rows = []
    for path in files:
        ours_s, ours_peak, ours = time_reader(parse_libsvm, path, repeats)
        sk_s, sk_peak, (x, y) = time_reader(lambda p: load_svmlight_file(str(p)), path, repeats)
        same = (np.array_equal(ours.indptr, x.indptr) and np.array_equal(ours.indices, x.indices)
                and np.array_equal(ours.values, x.data) and np.array_equal(ours.labels, y))
        size = path.stat().st_size
        rows.append(f"| {path.name} | {size / 2**20:.1f} | {ours.indices.size:,} | {ours_s:.3f} | {sk_s:.3f} | "
                    f"{ours_s / sk_s:.2f} | {ours_peak / 2**20:.0f} | {sk_peak / 2**20:.0f} | {'yes' if same else 'NO'} |")
        print(rows[-1], flush=True)
    return rows


def sox(data_sizes: dict[str, int]) -> SOX:
    """configs/libsvm/sox_ap.yaml's SOX on a LinearScorer."""
    return SOX(LinearScorer(), AveragePrecisionSurrogate(surrogate="squared_hinge", margin=0.5), ema_weight=0.1,
               u_for_gradient="previous", data_sizes=data_sizes,
               optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=0.1, weight_decay=2e-4))


def trainer(steps: int, callbacks=()) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, max_steps=steps, limit_val_batches=0, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   callbacks=list(callbacks), num_sanity_val_steps=0)


def peak_rss() -> int:
    """Bytes: this process's peak resident set (VmHWM; unlike ``getrusage``'s ``ru_maxrss``, not inherited from
    the parent across fork and exec)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024


def memory_child(path: str, cache: str, steps: int) -> None:
    """Run in a fresh process: build the DataModule, train SOX, print JSON (peak RSS, layout, step ms)."""
    torch.set_num_threads(1)
    tracemalloc.start()
    start = time.perf_counter()
    data = LibSVMDataModule(Path(path).parent, Path(path).name, cache_dir=cache, val_fraction=0.1, normalize="minmax",
                            batch_size=64, num_positives=32)
    build_s, build_peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    timer = StepTimer()
    torch.manual_seed(0)
    trainer(steps, [timer]).fit(sox(data.sizes), datamodule=data)
    print(json.dumps({"layout": data.layout, "rss": peak_rss(), "build_s": build_s, "build_peak": build_peak, "sizes": data.sizes,
                      "step_ms": 1e3 * statistics.median(timer.times[10:])}))


def baseline_child() -> None:
    print(json.dumps({"rss": peak_rss()}))


def paired_a9a(steps: int, cache: Path) -> tuple[float, float]:
    """Median ms of SOX's training_step on a9a, dense batches against sparse batches of the same rows."""
    kw = dict(cache_dir=cache, val_fraction=0.1, normalize="minmax", batch_size=64, num_positives=32)
    dense, sparse = LibSVMDataModule(A9A, "a9a", layout="dense", **kw), LibSVMDataModule(A9A, "a9a", layout="sparse", **kw)
    dense.setup("fit")
    sparse.setup("fit")
    for split in dense._splits:  # every batch carries both layouts: x (dense) and x_sparse
        dense._splits[split]["x_sparse"] = sparse._splits[split]["x"]
    dense.set_datasets(dense._splits)
    torch.manual_seed(0)
    first = sox(dense.sizes)
    torch.manual_seed(0)
    second = sox(dense.sizes)
    second.input_key = "x_sparse"
    pair = PairedSteps(first, second, names=("dense", "sparse"))
    trainer(2 * steps).fit(pair, datamodule=dense)
    assert torch.allclose(first.model.net.weight, second.model.net.weight, rtol=1e-4, atol=1e-6)  # same trajectory
    return statistics.median(pair.times["dense"]) * 1e3, statistics.median(pair.times["sparse"]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=1_360_000)
    parser.add_argument("--density", type=float, default=3e-4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/sparse_libsvm.md")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        return baseline_child()
    if args.child:
        return memory_child(args.child[0], args.child[1], int(args.child[2]))
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big = work / "news20like"
        start = time.perf_counter()
        nnz = write_news20_like(big, args.rows, args.features, args.density)
        file_mib = big.stat().st_size / 2**20
        print(f"generated {file_mib:.0f} MiB, {nnz:,} values in {time.perf_counter() - start:.0f} s")
        readers = reader_rows([A9A / "a9a", A9A / "a9a.t", big], repeats=3)

        runs = {}
        for name, extra in (("baseline", ["--baseline"]), ("sparse", ["--child", str(big), str(work / "cache"), str(args.steps)])):
            out = subprocess.run([sys.executable, __file__, *extra], check=True, capture_output=True, text=True).stdout
            runs[name] = json.loads(out.strip().splitlines()[-1])
        child = runs["sparse"]
        print(runs)
        dense_a9a, sparse_a9a = paired_a9a(args.steps, work / "cache")
        print(f"a9a SOX step: dense {dense_a9a:.3f} ms, sparse {sparse_a9a:.3f} ms")

    dense_bytes = args.rows * args.features * 4
    command = "python benchmarks/sparse_libsvm.py" + (" --write" if args.write else "")
    if (args.rows, args.features, args.density) != (20_000, 1_360_000, 3e-4):
        command += f" --rows {args.rows} --features {args.features} --density {args.density}"
    text = f"""## Sparse LIBSVM data: memory O(nnz), step time, reader against scikit-learn

Command: `{command}`. Machine: {machine()}. Generated file: news20.binary's shape, {args.rows:,} rows ×
{args.features:,} features, {nnz:,} stored values ({nnz / (args.rows * args.features):.4%}), {file_mib:.0f} MiB of text.

**Memory.** `LibSVMDataModule(layout="auto", normalize="minmax")` on the generated file chooses
`{child['layout']}`; building it (parse, split, scale, cache write) peaks at {child['build_peak'] / 2**20:.0f} MiB of
numpy allocations (tracemalloc) in {child['build_s']:.1f} s, and the whole process after training SOX (LinearScorer,
B = 64) for {args.steps} steps peaks at {child['rss'] / 2**20:.0f} MiB RSS, of which {runs['baseline']['rss'] / 2**20:.0f} MiB is
importing torch and Lightning. The dense float32 matrix would take {dense_bytes / 1e9:.0f} GB. The cached CSR arrays take
8 bytes per stored value ({nnz * 8 / 2**20:.0f} MiB). Median SOX step on it: {child['step_ms']:.2f} ms (the
weight gradient and the optimizer step stay dense, O(D) = {args.features:,} floats a step).

**Step time on a9a** (SOX, LinearScorer, B = 64, minmax features, one fit of `timing.PairedSteps` alternating the
dense and the sparse module on the same rows, {args.steps} batches): dense {dense_a9a:.3f} ms, sparse
{sparse_a9a:.3f} ms per step (ratio {sparse_a9a / dense_a9a:.2f}); `layout="auto"` keeps a9a dense.

**Reader.** `fccolit.io.parse_libsvm` against `sklearn.datasets.load_svmlight_file` (scikit-learn
{__import__('sklearn').__version__}), best of 3; peak = tracemalloc peak of one call; "same" = identical CSR arrays and labels.

| file | MiB | stored values | ours s | sklearn s | ours / sklearn | ours peak MiB | sklearn peak MiB | same |
|---|---:|---:|---:|---:|---:|---:|---:|:-:|
""" + "\n".join(readers) + "\n"
    print(text)
    if args.write:
        print("wrote", write_result("sparse_libsvm", text))


if __name__ == "__main__":
    main()
