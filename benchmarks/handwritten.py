"""The hand-written pieces against the well-kept libraries that could replace them (issue 18 §5), side by side.

    python benchmarks/handwritten.py [--quick] [--write]

For each module of ``fccolit/optim.py``, ``fccolit/samplers/``, ``fccolit/io/`` (except the LIBSVM reader and
the CSR kernels, benchmarked elsewhere) and ``fccolit/datasets/images.py`` whose question is speed, the module and
the library doing the same work run in one process on the same input, interleaved call by call
(:func:`timing.interleaved_medians`, medians reported), so the machine's load hits both alike:

* ``optim``: one ``step()`` of ``Momentum`` / ``AdaptiveMomentum(bias_correction=True)`` against the equal
  ``torch.optim.SGD`` / ``Adam`` (the mapped hyper-parameters) on ResNet-20's parameters; ``LazyAdam`` against
  ``SparseAdam`` + ``Adam`` (two optimizers) on a NeuMF-sized embedding with sparse gradients plus an MLP;
* ``samplers``: one epoch of batch index lists of rank 0 of 2: ``UniformBatchSampler`` against
  ``BatchSampler(DistributedSampler(drop_last=True))`` (the same global batches, see the test) and
  ``SequentialShardSampler`` against ``BatchSampler(DistributedSampler(shuffle=False))``; and how many samples
  ``DistributedSampler`` repeats as padding;
* ``io.ratings``: the MovieLens reader against a plain ``pandas.read_csv`` (C and pyarrow engines) on the real
  ml-latest-small ``ratings.csv`` (``/work/shared/data``, when present) and a generated ML-20M-format file;
* ``io.letor``: ``read_lightgbm_ranking`` on the real LightGBM lambdarank sample and ``parse_letor`` on a generated
  MSLR-format file against scikit-learn's ``load_svmlight_file`` (when installed; densified like fccolit's);
* ``io.chexpert`` / ``io.fairness``: the CSV readers against ``pandas.read_csv`` (CheXpert's 223,414-row
  ``train.csv`` generated; the real UCI ``adult.data`` when present);
* ``io.cifar`` and ``datasets.images``: the five CIFAR-10 training pickles against ``torchvision.datasets.CIFAR10``
  (its MD5 check skipped: the files are generated), and a training batch of 128 with crop + flip from
  ``ImageArrayDataset`` against torchvision's ``CIFAR10`` with ``RandomCrop`` / ``RandomHorizontalFlip`` per image
  plus ``default_collate``;
* ``io.jsonstream``: BDD100K's attributes streamed from a generated labels JSON against ``json.load``: time, and
  peak Python memory (``tracemalloc``, a separate call of each);
* ``io.cache``: loading a cached entry (memory-mapped ``.npy`` after the SHA-256 check) against
  ``datasets.load_from_disk`` of the same array (Arrow, memory-mapped, unchecked) and a bare ``np.load``.

``--write`` writes ``benchmarks/results/handwritten.md`` (``benchmarks/collect.py`` puts it into RESULTS.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from timing import interleaved_medians, machine, write_result  # noqa: E402

import fccolit.io.text  # noqa: E402

from fccolit.datasets.images import ImageArrayDataset  # noqa: E402
from fccolit.io.bdd100k import ATTRIBUTE_VALUES, ATTRIBUTES, read_bdd100k_attributes  # noqa: E402
from fccolit.io.cache import cached_arrays  # noqa: E402
from fccolit.io.chexpert import COMPETITION_LABELS, read_chexpert_csv  # noqa: E402
from fccolit.io.cifar import CIFAR_SPECS, read_cifar_batch  # noqa: E402
from fccolit.io.fairness import ADULT_COLUMNS, parse_adult  # noqa: E402
from fccolit.io.letor import parse_letor, read_lightgbm_ranking  # noqa: E402
from fccolit.io.ratings import read_movielens_ratings  # noqa: E402
from fccolit.models.vision import ResNet20  # noqa: E402
from fccolit.optim import AdaptiveMomentum, LazyAdam, Momentum  # noqa: E402
from fccolit.samplers import SampledBatch, SequentialShardSampler, UniformBatchSampler  # noqa: E402
from fccolit.testing import write_chexpert_csv, write_cifar  # noqa: E402
from fccolit.testing.ranking import write_large_movielens_csv  # noqa: E402

SHARED = Path("/work/shared/data")
Row = dict[str, Any]


def pair(module: str, library: str, workload: str, ours: Callable[[], Any], theirs: Callable[[], Any], repeats: int,
         note: str = "") -> Row:
    """Median ms of ``ours()`` and ``theirs()``, interleaved call by call over ``repeats`` rounds (one warm-up)."""
    gc.collect()
    times = interleaved_medians({"ours": lambda _: ours(), "theirs": lambda _: theirs()}, [None], repeats)
    row = dict(module=module, library=library, workload=workload, ours=times["ours"], theirs=times["theirs"], note=note)
    print(f"{module:22s} {library:48s} ours {row['ours']:9.2f} ms  library {row['theirs']:9.2f} ms  "
          f"ours/library {row['ours'] / row['theirs']:.2f}", flush=True)
    return row


# ------------------------------------------------------------------------------------------------ optim
def _with_grads(params: list[torch.nn.Parameter], seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


def optim_rows(quick: bool) -> list[Row]:
    repeats = 30 if quick else 100
    lr, beta, beta2 = 0.1, 0.1, 0.001
    rows = []
    make = lambda: _with_grads([p for p in ResNet20(num_outputs=10).parameters()], 0)  # noqa: E731
    count = sum(p.numel() for p in make())
    ours, theirs = Momentum(make(), lr=lr, momentum_weight=beta), torch.optim.SGD(make(), lr=lr * beta, momentum=1 - beta)
    rows.append(pair("optim.Momentum", "torch.optim.SGD(lr·β, momentum=1−β)", f"ResNet-20 step ({count:,} weights)",
                     ours.step, theirs.step, repeats, "torch on CPU: per-tensor loop (foreach is its CUDA default)"))
    foreach = torch.optim.SGD(make(), lr=lr * beta, momentum=1 - beta, foreach=True)
    rows.append(pair("optim.Momentum", "torch.optim.SGD(..., foreach=True)", f"ResNet-20 step ({count:,} weights)",
                     ours.step, foreach.step, repeats, "the multi-tensor path torch takes on GPUs, here on CPU"))
    ours = AdaptiveMomentum(make(), lr=lr, momentum_weight=beta, second_moment_weight=beta2, bias_correction=True)
    theirs = torch.optim.Adam(make(), lr=lr, betas=(1 - beta, 1 - beta2))
    rows.append(pair("optim.AdaptiveMomentum", "torch.optim.Adam(betas=(1−β1, 1−β′))", f"ResNet-20 step ({count:,} weights)",
                     ours.step, theirs.step, repeats, "bias_correction=True (torch has no uncorrected Adam)"))
    foreach = torch.optim.Adam(make(), lr=lr, betas=(1 - beta, 1 - beta2), foreach=True)
    rows.append(pair("optim.AdaptiveMomentum", "torch.optim.Adam(..., foreach=True)", f"ResNet-20 step ({count:,} weights)",
                     ours.step, foreach.step, repeats, "the multi-tensor path torch takes on GPUs, here on CPU"))

    # LazyAdam: a NeuMF-sized embedding (sparse gradient of a batch's rows) and a dense MLP in one optimizer,
    # against torch's SparseAdam (embedding) + Adam (MLP)
    num_rows, dim, touched = (200_000, 64, 4096) if quick else (1_000_000, 64, 8192)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(num_rows, (touched,), generator=gen)

    def model():
        emb = torch.nn.Parameter(torch.randn(num_rows, dim, generator=torch.Generator().manual_seed(2)))
        emb.grad = torch.sparse_coo_tensor(ids[None], torch.randn(touched, dim, generator=torch.Generator().manual_seed(3)),
                                           (num_rows, dim), check_invariants=False)
        mlp = _with_grads([torch.nn.Parameter(torch.randn(2 * dim, 256)), torch.nn.Parameter(torch.randn(256, 1))], 4)
        return emb, mlp

    emb, mlp = model()
    lazy = LazyAdam([emb, *mlp], lr=1e-3)
    emb2, mlp2 = model()
    sparse, dense = torch.optim.SparseAdam([emb2], lr=1e-3), torch.optim.Adam(mlp2, lr=1e-3)
    rows.append(pair("optim.LazyAdam", "torch.optim.SparseAdam + Adam", f"{num_rows:,}×{dim} embedding, {touched} rows "
                     "touched, + MLP", lazy.step, lambda: (sparse.step(), dense.step()), repeats,
                     "one optimizer for the config's optimizer entry"))
    return rows


# ------------------------------------------------------------------------------------------------ samplers
def sampler_rows(quick: bool) -> tuple[list[Row], str]:
    from torch.utils.data import BatchSampler, DistributedSampler

    n, batch, world = (200_000, 512, 2) if quick else (1_000_000, 512, 2)
    repeats = 5 if quick else 9
    data = range(n)

    def uniform_theirs():
        sampler = DistributedSampler(data, num_replicas=world, rank=0, shuffle=True, seed=0, drop_last=True)
        return list(BatchSampler(sampler, batch // world, drop_last=True))

    def sequential_theirs():
        sampler = DistributedSampler(data, num_replicas=world, rank=0, shuffle=False)
        return list(BatchSampler(sampler, batch // world, drop_last=False))

    rows = [
        pair("samplers.UniformBatchSampler", "BatchSampler(DistributedSampler(drop_last))", f"epoch, n={n:,}, B={batch}, "
             "rank 0 of 2", lambda: list(UniformBatchSampler(n, batch, seed=0, rank=0, world_size=world)),
             uniform_theirs, repeats, "ours also carries each batch's seed and positions (SampledBatch)"),
        pair("samplers.SequentialShardSampler", "BatchSampler(DistributedSampler(shuffle=False))",
             f"eval epoch, n={n:,}, B={batch}, rank 0 of 2",
             lambda: list(SequentialShardSampler(n, batch, rank=0, world_size=world)), sequential_theirs, repeats),
    ]
    # padding: DistributedSampler(drop_last=False) repeats samples so that every rank gets as many
    n_pad, w_pad = 10_007, 8
    drawn = [i for r in range(w_pad) for i in DistributedSampler(range(n_pad), num_replicas=w_pad, rank=r, shuffle=False)]
    ours = [i for r in range(w_pad) for b in SequentialShardSampler(n_pad, 256, rank=r, world_size=w_pad) for i in b]
    padding = (f"Padding: on n = {n_pad:,} samples and 8 processes, `DistributedSampler` (drop_last=False, what "
               f"Lightning injects for evaluation) hands out {len(drawn):,} indices, {len(drawn) - len(set(drawn))} of "
               f"them a repeat, so a sum over the gathered batches counts a sample twice; `SequentialShardSampler` "
               f"hands out {len(ours):,}, each once.")
    return rows, padding


# ------------------------------------------------------------------------------------------------ io: ratings, letor
def ratings_rows(quick: bool, work: Path) -> list[Row]:
    rows = []
    dtypes = {"userId": np.int64, "movieId": np.int64, "rating": np.float32, "timestamp": np.int64}
    files = []
    real = SHARED / "movielens-ml-latest-small" / "ratings.csv"
    if real.is_file():
        files.append((real, "real ml-latest-small (100,836 ratings)", 15 if quick else 30))
    size = 2_000_000 if quick else 5_000_000
    large = work / "ml-20m" / "ratings.csv"
    large.parent.mkdir(parents=True)
    write_large_movielens_csv(large, size, users=size // 144, items=min(26_744, size // 20))
    files.append((large, f"generated ML-20M format ({size:,} ratings, {large.stat().st_size / 2**20:.0f} MiB)",
                  3))
    for path, what, repeats in files:
        for engine in ("c", "pyarrow"):
            rows.append(pair("io.ratings", f"pandas.read_csv(engine={engine!r})", what,
                             lambda path=path: read_movielens_ratings(path),
                             lambda path=path, engine=engine: pd.read_csv(path, dtype=dtypes, engine=engine),
                             repeats, "ours checks every field, names file/line/field on error"))
    return rows


def letor_rows(quick: bool, work: Path) -> list[Row]:
    try:
        from sklearn.datasets import load_svmlight_file
    except ImportError:
        print("scikit-learn not installed: io.letor rows skipped")
        return []
    rows = []
    real = SHARED / "letor-lightgbm-lambdarank" / "rank.train"
    if real.is_file():
        def sklearn_lightgbm():
            x, y = load_svmlight_file(str(real), dtype=np.float32)
            return x.toarray(), y, np.loadtxt(str(real) + ".query", dtype=np.int64)

        rows.append(pair("io.letor", "sklearn load_svmlight_file + np.loadtxt", "real LightGBM rank.train "
                         f"({real.stat().st_size / 2**20:.1f} MiB)", lambda: read_lightgbm_ranking(real),
                         sklearn_lightgbm, 5 if quick else 11, "both densified to float32"))
    docs, features = (8_000, 136) if quick else (50_000, 136)
    rng = np.random.default_rng(0)
    path = work / "mslr" / "train.txt"
    path.parent.mkdir(parents=True)
    labels = rng.integers(0, 5, docs)
    qids = np.repeat(np.arange(1, docs // 20 + 2), 20)[:docs]
    values = np.abs(rng.normal(size=(docs, features))) * 10
    with open(path, "w") as f:
        for d in range(docs):
            f.write(f"{labels[d]} qid:{qids[d]} " + " ".join(f"{j + 1}:{v:.4g}" for j, v in enumerate(values[d])) + "\n")

    def sklearn_letor():
        x, y, q = load_svmlight_file(str(path), dtype=np.float32, query_id=True)
        return x.toarray(), y, q

    rows.append(pair("io.letor", "sklearn load_svmlight_file(query_id=True)", f"generated MSLR format ({docs:,} docs × "
                     f"{features}, {path.stat().st_size / 2**20:.0f} MiB)", lambda: parse_letor(path), sklearn_letor,
                     3 if quick else 5, "both densified to float32"))
    return rows


# ------------------------------------------------------------------------------------------------ io: CSV readers
def csv_rows(quick: bool, work: Path) -> list[Row]:
    rows = []
    num = 50_000 if quick else 223_414  # CheXpert-v1.0-small's train.csv
    path = write_chexpert_csv(work / "CheXpert-v1.0-small" / "train.csv", num)
    columns = ["Path", "Frontal/Lateral", *COMPETITION_LABELS]
    rows.append(pair("io.chexpert", "pandas.read_csv(usecols=...)", f"generated train.csv ({num:,} rows)",
                     lambda: read_chexpert_csv(path, COMPETITION_LABELS),
                     lambda: pd.read_csv(path, usecols=columns, dtype={c: np.float32 for c in COMPETITION_LABELS}),
                     3 if quick else 5, "ours checks every Path and label, names file/line/field"))
    adult = SHARED / "uci-adult" / "adult.data"
    if adult.is_file():
        rows.append(pair("io.fairness", "pandas.read_csv(skipinitialspace=True)", "real UCI adult.data (32,561 rows)",
                         lambda: parse_adult(adult),
                         lambda: pd.read_csv(adult, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True),
                         5 if quick else 11, "ours checks every field, names file/line/field"))
    return rows


# ------------------------------------------------------------------------------------------------ io.cifar, images
def cifar_rows(quick: bool, work: Path) -> list[Row]:
    import torchvision
    from torch.utils.data import default_collate
    from torchvision import transforms

    per_class = 1000 if quick else 5000
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), per_class)
    images = rng.integers(0, 256, (labels.size, 32, 32, 3), dtype=np.uint8)
    folder = write_cifar(work, images, labels, images[:100], labels[:100])
    spec = CIFAR_SPECS["cifar10"]

    class Unchecked(torchvision.datasets.CIFAR10):
        """torchvision's CIFAR10 without its MD5 checks (the files are generated, the MD5s are the release's)."""

        def _check_integrity(self) -> bool:
            return True

        def _load_meta(self) -> None:
            checked = torchvision.datasets.cifar.check_integrity
            torchvision.datasets.cifar.check_integrity = lambda *args, **kwargs: True
            try:
                super()._load_meta()
            finally:
                torchvision.datasets.cifar.check_integrity = checked

    def ours_load():
        parts = [read_cifar_batch(folder / name) for name in spec["train"]]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    rows = [pair("io.cifar", "torchvision.datasets.CIFAR10 (MD5 check skipped)", f"5 training pickles "
                 f"({labels.size:,} images)", ours_load, lambda: Unchecked(str(work), train=True), 5 if quick else 9)]
    mean, std = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
    tv = Unchecked(str(work), train=True, transform=transforms.Compose([
        transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(mean, std)]))
    ours = ImageArrayDataset(images, np.arange(labels.size), {"y": torch.from_numpy(labels)}, augment=True, mean=mean,
                             std=std)
    idx = rng.choice(labels.size, 128, replace=False).tolist()
    batch = SampledBatch(idx, seed=7, positions=range(128))
    rows.append(pair("datasets.images", "torchvision CIFAR10 + RandomCrop/Flip per image + default_collate",
                     "training batch of 128, crop+flip, normalized", lambda: ours.__getitems__(batch),
                     lambda: default_collate([tv[i] for i in idx]), 20 if quick else 50,
                     "ours: one batched crop/flip keyed by the batch"))
    return rows


# ------------------------------------------------------------------------------------------------ io.jsonstream
def json_rows(quick: bool, work: Path) -> tuple[list[Row], str]:
    frames = 10_000 if quick else 70_000  # the 2018 training labels: 69,863 frames
    rng = np.random.default_rng(0)
    path = work / "bdd100k_labels_images_train.json"
    with open(path, "w") as f:
        f.write("[")
        for k in range(frames):
            boxes = [{"category": "car", "attributes": {"occluded": False, "truncated": False},
                      "box2d": {c: round(float(v), 3) for c, v in zip(("x1", "y1", "x2", "y2"), rng.uniform(0, 1280, 4))},
                      "id": k * 100 + b} for b in range(20)]
            frame = {"name": f"{k:08x}-{k:08x}.jpg", "attributes": {a: str(rng.choice(ATTRIBUTE_VALUES[a]))
                                                                    for a in ATTRIBUTES}, "timestamp": 10000, "labels": boxes}
            f.write(("," if k else "") + json.dumps(frame))
        f.write("]")

    def theirs():
        with open(path) as f:
            data = json.load(f)
        return [(d["name"], [d["attributes"][a] for a in ATTRIBUTES]) for d in data]

    mib = path.stat().st_size / 2**20
    rows = [pair("io.jsonstream", "json.load", f"generated BDD100K labels ({frames:,} frames, {mib:.0f} MiB)",
                 lambda: read_bdd100k_attributes(path), theirs, 3 if quick else 5, "peak memory below")]
    peaks = []
    for fn in (lambda: read_bdd100k_attributes(path), theirs):
        gc.collect()
        tracemalloc.start()
        fn()
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    text = (f"Peak Python memory (tracemalloc) reading the {mib:.0f} MiB labels file: streamed {peaks[0]:.0f} MiB, "
            f"`json.load` {peaks[1]:.0f} MiB ({peaks[1] / peaks[0]:.0f}×); the real 2018 training file is about 1.5 GB.")
    print(text)
    return rows, text


# ------------------------------------------------------------------------------------------------ io.cache
def cache_rows(quick: bool, work: Path) -> list[Row]:
    import datasets

    datasets.disable_progress_bars()
    n, width = (50_000, 128) if quick else (400_000, 128)
    x = np.random.default_rng(0).standard_normal((n, width), dtype=np.float32)
    cache = work / "cache"
    cached_arrays(cache, "entry", lambda: {"x": x})
    hf = work / "hf"
    datasets.Dataset.from_dict({"x": x}).with_format("numpy").save_to_disk(str(hf))

    def theirs():
        return datasets.load_from_disk(str(hf)).with_format("numpy")[:128]["x"]

    mib = x.nbytes / 2**20
    rows = [
        pair("io.cache", "datasets.load_from_disk (no check)", f"load a {mib:.0f} MiB entry, read a batch",
             lambda: cached_arrays(cache, "entry", lambda: {"x": x})["x"][:128], theirs, 5 if quick else 9,
             "ours verifies the SHA-256 of every file at each load"),
        pair("io.cache", "np.load(mmap_mode='r') (no check)", f"load a {mib:.0f} MiB entry, read a batch",
             lambda: cached_arrays(cache, "entry", lambda: {"x": x})["x"][:128],
             lambda: np.load(cache / "entry" / "x.npy", mmap_mode="r")[:128], 5 if quick else 9,
             "the cost of the check alone"),
    ]
    return rows


# ------------------------------------------------------------------------------------------------ report
def _ms(value: float) -> str:
    """Milliseconds for the table: three significant digits, no exponent."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def report(rows: list[Row], notes: list[str], command: str) -> str:
    lines = [
        "## Hand-written pieces against the libraries (issue 18 §5)",
        "",
        f"Command: `{command}`. Machine: {machine()}.",
        "Each pair runs in one process on the same input, interleaved call by call; medians in milliseconds. "
        "ours / library < 1: fccolit's piece is faster. The verdicts (kept, and why) are in each module's docstring.",
        "",
        "| module | library | workload | fccolit (ms) | library (ms) | fccolit / library | note |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| `{r['module']}` | {r['library']} | {r['workload']} | {_ms(r['ours'])} | {_ms(r['theirs'])} | "
                     f"{r['ours'] / r['theirs']:.2f} | {r['note']} |")
    lines += [""] + [f"{n}\n" for n in notes]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (about 2 minutes on 2 cores)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/handwritten.md")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the machines are shared: two threads on two loaded cores make timings erratic
    fccolit.io.text.PROGRESS_BYTES = 1 << 62  # no progress bars between the rows
    rows, notes = [], []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fccolit-handwritten-") as tmp:
        work = Path(tmp)
        rows += optim_rows(args.quick)
        sampler, padding = sampler_rows(args.quick)
        rows += sampler
        notes.append(padding)
        rows += ratings_rows(args.quick, work)
        rows += letor_rows(args.quick, work)
        rows += csv_rows(args.quick, work)
        rows += cifar_rows(args.quick, work)
        js, memory = json_rows(args.quick, work)
        rows += js
        notes.append(memory)
        rows += cache_rows(args.quick, work)
    command = "python benchmarks/handwritten.py" + " --quick" * args.quick + " --write" * args.write
    text = report(rows, notes, command)
    print(text)
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.write:
        print(f"wrote {write_result('handwritten', text)}")


if __name__ == "__main__":
    main()
