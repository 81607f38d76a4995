"""Ranking data pipeline on a MovieLens-20M-sized ratings file: parse, cache load, sampler throughput.

    python benchmarks/ranking_data.py [--quick] [--rows N] [--keep DIR]

1. Generates a ratings file in ML-20M's exact format (``userId,movieId,rating,timestamp`` header, rows sorted by
   user then movie, half-star ratings, Unix timestamps, sparse movie ids up to 131,262): 20,000,263 ratings of
   138,493 users (each with at least 20) over 26,744 movies, popularity Zipf-like; ``--quick``: 2M ratings of
   13,849 users. It goes to a temporary folder (deleted at the end unless ``--keep``).
2. Times, in one process: the raw parse (:func:`fccolit.io.ratings.read_movielens_ratings`); a cold
   ``MovieLensDataModule(...)`` (parse + leave-one-out split + CSR / pair ids / ideal DCGs + atomic cache write);
   and a warm ``MovieLensDataModule(...)`` + ``setup()`` (hash the file's edges, memory-map the cache, build the
   datasets): the cache load. Target: cache load at least 20× faster than parsing.
3. Sampler throughput: the training DataLoader (QueryBatchSampler + the batched ``__getitems__``, no workers) with
   256 users per batch, 10 positives and M = 300 / 1000 unrated items, against a reference SONG step with a
   NeuMF-sized model (ReChorus/LibAUC NeuMF: GMF and MLP embeddings of 64, MLP [64], dropout 0.2; squared-hinge
   inner estimate over the batch's items, per-pair state update with :class:`fccolit.state.IndexedState`, Adam),
   interleaved batch by batch. Target: the sampler is never the bottleneck (sampler time < step time).

4. LibAUC's MovieLens data path, when ``import libauc`` works (``pip install --no-deps libauc==2.0.1``, a
   benchmark-only dependency), on a smaller generated file (``--libauc-users``, default 2,000 with ``--quick`` and
   13,849 without) zipped as LibAUC expects (``ml-20m.zip`` holding ``ml-20m/ratings.csv``, so it never downloads):
   ``MoiveLens(root)`` cold (its ``preprocess_movielens``: parse, re-index, leave-out split, 2 × 1,000 sampled
   negatives per user in a Python loop, CSV writes, then the training set's ``dok_matrix`` tables) and warm (CSV
   read, one ``eval`` per user), against our cold / warm ``MovieLensDataModule`` on the same file; then LibAUC's
   ``TriSampler`` in ranking mode (it takes the labels as a dense items × users array: built here from the
   dataset's sparse targets) + ``DataLoader(collate_fn=collate_batch)`` against our training loader, both 256
   users × (10 + 300) items, batches interleaved. The work is not identical (LibAUC also samples evaluation
   negatives; ours computes CSR tables, pair ids and ideal DCGs and writes a memory-mapped cache), so the rows give
   each path's end-to-end cost, not a kernel-for-kernel ratio. LibAUC's ``libauc.datasets`` package imports
   OpenCV for its image datasets; its ``movielens.py`` module is loaded from its file instead.

Results go to ``benchmarks/results/ranking_data.md`` (no plot: matplotlib is not installed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.datamodules.movielens import MovieLensDataModule  # noqa: E402
from fccolit.io.ratings import read_movielens_ratings  # noqa: E402
from fccolit.state import IndexedState  # noqa: E402
from fccolit.testing import write_large_movielens_csv  # noqa: E402
from timing import machine, write_result  # noqa: E402

LIBAUC_INSTALL = "pip install --no-deps libauc==2.0.1"
ML20M = {"rows": 20_000_263, "users": 138_493, "items": 26_744}


# ------------------------------------------------------------------------------------------------ reference step
class NeuMF(nn.Module):
    """NeuMF as in ReChorus / LibAUC (emb 64, MLP [64], dropout 0.2): scores ``[B, L]`` of users × item lists."""

    def __init__(self, num_users: int, num_items: int, emb: int = 64, hidden: int = 64, dropout: float = 0.2):
        super().__init__()
        self.mf_user, self.mf_item = nn.Embedding(num_users, emb), nn.Embedding(num_items, emb)
        self.mlp_user, self.mlp_item = nn.Embedding(num_users, emb), nn.Embedding(num_items, emb)
        for e in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(e.weight, std=0.01)
        self.mlp = nn.Sequential(nn.Linear(2 * emb, hidden), nn.ReLU(), nn.Dropout(dropout))
        self.predict = nn.Linear(emb + hidden, 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        b, length = items.shape
        mf = self.mf_user(users)[:, None, :] * self.mf_item(items)
        mlp_in = torch.cat([self.mlp_user(users)[:, None, :].expand(b, length, -1), self.mlp_item(items)], dim=-1)
        return self.predict(torch.cat([mf, self.mlp(mlp_in)], dim=-1)).squeeze(-1)


def song_step(model, state, optimizer, batch, num_positives: int, gamma: float = 0.1) -> None:
    """One SONG step (Qiu et al., ICML 2022, Alg. 1, squared hinge c = 1, γ0 = 0.1) as a timing reference."""
    scores = model(batch["query"], batch["items"])  # [B, L]
    mask = batch["mask"]
    pos = scores[:, :num_positives]
    hinge = torch.relu(scores[:, None, :] - pos[:, :, None] + 1.0) ** 2 * mask[:, None, :]
    g = hinge.sum(-1) / mask.sum(-1, keepdim=True).clamp_min(1)  # [B, P]
    valid = batch["pair_index"][:, :num_positives] >= 0
    update = state.update(batch["pair_index"][:, :num_positives][valid], g[valid][:, None].detach(), ema_weight=gamma)
    u = update.previous[:, 0].to(g.dtype)
    y = batch["relevance"][:, :num_positives][valid]
    n = batch["num_items"][:, None].expand_as(valid)[valid]
    z = batch["ideal_dcg"][:, None].expand_as(valid)[valid]
    log2 = torch.log2(n * u + 1.0)
    weight = (2.0**y - 1.0) * n / (z * math.log(2.0) * (n * u + 1.0) * log2**2)
    loss = (weight.detach() * g[valid]).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


# ------------------------------------------------------------------------------------------------ measurements
_COLD = """
import json, sys, time
sys.path.insert(0, {repo!r})
from fccolit.datamodules.movielens import MovieLensDataModule


def high_water_mib():  # VmHWM: the peak RSS of this process image (ru_maxrss would include the parent's, via fork)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


base = high_water_mib()
start = time.perf_counter()
dm = MovieLensDataModule({root!r}, cache_dir={cache!r})
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "import_mib": base, "peak_mib": high_water_mib(), "sizes": dm.sizes}}))
"""


def cold_build(root: Path, cache: Path) -> dict:
    """The first ``MovieLensDataModule(...)`` (parse + split + cache write) in a fresh process: time and peak RSS."""
    code = _COLD.format(repo=str(Path(__file__).resolve().parents[1]), root=str(root), cache=str(cache))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def libauc_movielens():
    """LibAUC's ``MoiveLens`` class and ``TriSampler``, or the reason they cannot be imported."""
    import importlib.util

    try:
        import libauc
        from libauc.sampler import TriSampler
    except ImportError as err:
        return None, None, f"`import libauc` failed ({err}); install it with `{LIBAUC_INSTALL}`"
    spec = importlib.util.spec_from_file_location(
        "libauc_movielens", os.path.join(os.path.dirname(libauc.__file__), "datasets", "movielens.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not ``libauc.datasets``: its package imports OpenCV for image datasets
    return module.MoiveLens, TriSampler, None


def compare_libauc(work: Path, users: int, steps: int) -> dict:
    """LibAUC's MovieLens data path against ours on the same generated file (module docstring, item 4)."""
    import contextlib
    import io
    import zipfile

    MoiveLens, TriSampler, skip = libauc_movielens()
    if skip:
        return {"skip": skip}
    rows = users * 144  # ML-20M's ratings per user
    root = work / "libauc-ml"
    root.mkdir(parents=True, exist_ok=True)
    write_large_movielens_csv(root / "ratings.csv", rows, users, ML20M["items"])
    with zipfile.ZipFile(root / "ml-20m.zip", "w", compression=zipfile.ZIP_STORED) as archive:
        archive.write(root / "ratings.csv", "ml-20m/ratings.csv")  # what MoiveLens looks for (else it downloads)
    with contextlib.redirect_stdout(io.StringIO()):  # LibAUC prints its statistics
        t_lib_cold, _ = timed(lambda: MoiveLens(str(root), phase="train", topk=10, random_seed=0))
    with contextlib.redirect_stdout(io.StringIO()):
        t_lib_warm, dataset = timed(lambda: MoiveLens(str(root), phase="train", topk=10, random_seed=0))
    cache = root / "cache"
    ours_cold = cold_build(root, cache)["seconds"]
    t_ours_warm, dm = timed(lambda: MovieLensDataModule(root, cache_dir=cache, queries_per_batch=256,
                                                        num_positives=10, num_negatives=300))
    t_setup, _ = timed(lambda: dm.setup("fit"))
    t_ours_warm += t_setup

    def libauc_sampler():
        labels = dataset.targets.toarray().T  # [items, users]: one "task" per user, as TriSampler's ranking mode
        return TriSampler(dataset, batch_size_per_task=310, num_sampled_tasks=256, sampling_rate=None, num_pos=10,
                          mode="ranking", labels=labels, random_seed=0), labels.nbytes

    t_lib_sampler, (sampler, label_bytes) = timed(libauc_sampler)
    lib_loader = torch.utils.data.DataLoader(dataset, batch_size=256, sampler=sampler,
                                             collate_fn=dataset.collate_batch)

    def endless(loader):
        while True:
            yield from loader

    theirs, ours = endless(lib_loader), endless(dm.train_dataloader())
    next(theirs), next(ours)  # warm-up
    lib_times, our_times = [], []
    for _ in range(steps):
        lib_times.append(timed(lambda: next(theirs))[0])
        our_times.append(timed(lambda: next(ours))[0])
    return {
        "users": users, "rows": rows, "items": dataset.n_items,
        "libauc_cold": t_lib_cold, "libauc_warm": t_lib_warm, "ours_cold": ours_cold, "ours_warm": t_ours_warm,
        "libauc_sampler_init": t_lib_sampler, "libauc_label_bytes": label_bytes,
        "libauc_batch": statistics.median(lib_times), "ours_batch": statistics.median(our_times),
    }


def libauc_lines(r: dict, steps: int) -> list[str]:
    head = ["### Against LibAUC's MovieLens data path (`MoiveLens` + `TriSampler`)", ""]
    if "skip" in r:
        return head + [f"Skipped: {r['skip']}.", ""]
    scale = ML20M["users"] / r["users"]
    full_labels = ML20M["items"] * ML20M["users"] * r["libauc_label_bytes"] / (r["items"] * r["users"])
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return head + [
        f"Same generated `ratings.csv` ({r['rows']:,} ratings of {r['users']:,} users, ML-20M's ratings per user), "
        f"256 users × (10 + 300) items per batch, DataLoader without workers, medians of {steps} interleaved "
        "batches. Module docstring, item 4, for what each path does.",
        "",
        "| step | LibAUC (s) | fccolit (s) | LibAUC / fccolit |",
        "|---|---:|---:|---:|",
        f"| cold: first dataset build from the raw file | {r['libauc_cold']:.2f} | {r['ours_cold']:.2f} | "
        f"{r['libauc_cold'] / r['ours_cold']:.0f}x |",
        f"| warm: dataset from its prepared files (ours: + `setup()`) | {r['libauc_warm']:.2f} | {r['ours_warm']:.3f} | "
        f"{r['libauc_warm'] / r['ours_warm']:.0f}x |",
        f"| sampler construction (LibAUC: dense labels + `TriSampler`) | {r['libauc_sampler_init']:.2f} | — | |",
        f"| one training batch | {r['libauc_batch']:.4f} | {r['ours_batch']:.4f} | "
        f"{r['libauc_batch'] / r['ours_batch']:.1f}x |",
        "",
        f"At ML-20M's size ({scale:.0f}× the users) LibAUC's cold build grows at least linearly in the users (its "
        "negative sampling and CSV writing loop over them in Python: about "
        f"{r['libauc_cold'] * scale / 60:.0f} minutes by linear extrapolation, not measured), and `TriSampler`'s "
        f"dense items × users label array alone needs {full_labels / 2**30:.1f} GiB (measured here: "
        f"{r['libauc_label_bytes'] / 2**20:.0f} MiB), and its label checks make same-shaped temporaries; this "
        f"machine has {total_gib:.0f} GiB of memory in all, shared with other jobs, so LibAUC's data path was not run "
        "at ML-20M's size (ours: the sections above).",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2M ratings of 13,849 users instead of ML-20M's size")
    parser.add_argument("--rows", type=int, default=None, help="ratings to generate (overrides the size)")
    parser.add_argument("--steps", type=int, default=20, help="interleaved sampler / step measurements per M")
    parser.add_argument("--keep", type=Path, default=None, help="generate into this folder and keep it")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write the results file")
    parser.add_argument("--libauc-users", type=int, default=None,
                        help="users of LibAUC's comparison file (default 2,000 with --quick, 13,849 without; 0: skip)")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = args.rows or (2_000_000 if args.quick else ML20M["rows"])
    users = max(1, round(ML20M["users"] * rows / ML20M["rows"]))
    items = ML20M["items"]

    work = args.keep or Path(tempfile.mkdtemp(prefix="fccolit-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        root = work / "ml-20m"
        root.mkdir(exist_ok=True)
        path = root / "ratings.csv"
        if not path.is_file():
            t_gen, _ = timed(lambda: write_large_movielens_csv(path, rows, users, items))
            print(f"generated {rows:,} ratings ({path.stat().st_size / 2**20:.0f} MiB) in {t_gen:.1f} s")
        size_mib = path.stat().st_size / 2**20

        t_parse, parsed = timed(lambda: read_movielens_ratings(path))
        assert len(parsed) == rows
        del parsed
        cache = work / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        cold = cold_build(root, cache)
        t_cold, sizes = cold["seconds"], cold["sizes"]
        cache_mib = sum(f.stat().st_size for f in cache.rglob("*.npy")) / 2**20
        warm = []
        for _ in range(5):
            t, dm = timed(lambda: MovieLensDataModule(root, cache_dir=cache))
            t_setup, _ = timed(lambda: dm.setup("fit"))
            warm.append(t + t_setup)
        t_warm = statistics.median(warm)

        # sampler throughput versus the reference SONG step, interleaved
        model = NeuMF(sizes["num_users"], sizes["num_items"])
        state = IndexedState(sizes["num_pairs"], 1)
        optimizer = torch.optim.Adam(model.parameters(), lr=4e-4, weight_decay=1e-7)
        sampler_rows = []
        for m in (300, 1000):
            dm = MovieLensDataModule(root, cache_dir=cache, queries_per_batch=256, num_positives=10, num_negatives=m)
            dm.setup("fit")
            loader = iter(dm.train_dataloader())
            batch = next(loader)
            song_step(model, state, optimizer, batch, 10)  # warm-up
            load_times, step_times = [], []
            for _ in range(args.steps):
                t_load, batch = timed(lambda: next(loader))
                t_step, _ = timed(lambda: song_step(model, state, optimizer, batch, 10))
                load_times.append(t_load)
                step_times.append(t_step)
            load, step = statistics.median(load_times), statistics.median(step_times)
            sampler_rows.append((m, load, 256 / load, step, load / step, max(load_times), min(step_times)))
        libauc_users = args.libauc_users if args.libauc_users is not None else (2_000 if args.quick else 13_849)
        libauc = (compare_libauc(work, libauc_users, args.steps) if libauc_users
                  else {"skip": "not run (--libauc-users 0)"})
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    cmd = "python benchmarks/ranking_data.py" + (" --quick" if args.quick else "")
    cmd += f" --rows {args.rows}" if args.rows else ""
    cmd += f" --steps {args.steps}"
    lines = [
        "## Ranking data: MovieLens-20M-sized parse, cache load and sampler throughput",
        "",
        f"Command: `{cmd}`. Machine: {machine()} (shared with other jobs: timings are noisy; "
        "ratios are taken within this one run). Data: generated in ML-20M's exact `ratings.csv` format, "
        f"{rows:,} ratings ({size_mib:.0f} MiB), {users:,} users, {sizes['num_items']:,} movies; seeds: data 0, "
        "sampler 0, model `torch.manual_seed(0)`.",
        "",
        "### Parse versus cache load (target: cache load at least 20x faster than parsing)",
        "",
        "| step | time (s) | ratio to the cache load |",
        "|---|---:|---:|",
        f"| raw parse (`read_movielens_ratings`) | {t_parse:.2f} | {t_parse / t_warm:.0f}x |",
        f"| cold `MovieLensDataModule` (parse + split + CSR + cache write; fresh process) | {t_cold:.2f} "
        f"| {t_cold / t_warm:.0f}x |",
        f"| warm `MovieLensDataModule` + `setup()` (cache load, median of 5) | {t_warm:.3f} | 1x |",
        "",
        f"Sizes after the paper's leave-one-out split: {sizes}. Peak memory of the cold build's process: "
        f"{cold['peak_mib']:,.0f} MiB, of which {cold['import_mib']:,.0f} MiB after the imports (torch, lightning), "
        f"so about {(cold['peak_mib'] - cold['import_mib']) * 2**20 / rows:.0f} bytes per rating for parsing and "
        f"splitting; cache entry on disk: {cache_mib:,.0f} MiB.",
        "",
        "### Sampler throughput versus a SONG step with NeuMF (target: the sampler is never the bottleneck)",
        "",
        "256 users per batch, P = 10 positives, M unrated items per user, DataLoader without workers (the sampler "
        f"runs inline, the worst case). Medians of {args.steps} interleaved batch / step pairs.",
        "",
        "| M | sampler ms / batch | queries / s | SONG+NeuMF step ms | sampler / step | worst sampler ms "
        "| best step ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, load, qps, step, ratio, worst, best in sampler_rows:
        lines.append(
            f"| {m} | {load * 1e3:.1f} | {qps:,.0f} | {step * 1e3:.1f} | {ratio:.2f} | {worst * 1e3:.1f} "
            f"| {best * 1e3:.1f} |"
        )
    lines += [
        "",
        "On this CPU the step dwarfs the sampler. A GPU was not available for this measurement; there a NeuMF step "
        "at this batch size is expected to take milliseconds, so the inline sampler would become the bottleneck: "
        "use DataLoader workers (`num_workers`), each adding about the queries / s above (the batch keys travel "
        "to the workers with the index lists, so the stream stays the same; tested).",
        "",
    ]
    lines += libauc_lines(libauc, args.steps)
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        print(f"written to {write_result('ranking_data', text)}")


if __name__ == "__main__":
    main()
