"""Per-index state at Netflix scale: bytes per row and time per batch update as the number of rows n grows.

    python benchmarks/state_scale.py [--quick] [--max-rows N]

For n = 10^5, 10^6, 10^7, 10^8 (``--quick``: the same sizes, fewer timed updates; 10^8 rows take 0.4 GB) builds the per-pair state of SONG
(:class:`fccolit.state.IndexedState`, one float32 per relevant (query, item) pair) and K-SONG's per-query
states (λ_q, s_q: one float32 each per query, n / 100 queries), then times one update of a batch of
B = 256 queries × 10 pairs = 2,560 rows (random distinct rows, fresh each step, γ = 0.1) and of the 256 queries'
λ. Target: the state costs ≤ 4 bytes per pair plus O(#queries), and the time per update stays flat in n (O(B),
never O(n)). Medians of ``--steps`` updates after 5 warm-up updates.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.state import IndexedState  # noqa: E402
from timing import machine, write_result  # noqa: E402

PAIRS_PER_QUERY = 100  # Netflix: about 100M ratings of 480k users, ~200 per user
BATCH_QUERIES, PAIRS_PER_BATCH_QUERY = 256, 10


def measure(num_rows: int, steps: int, seed: int = 0) -> dict[str, float]:
    g = torch.Generator().manual_seed(seed)
    num_queries = max(BATCH_QUERIES, num_rows // PAIRS_PER_QUERY)
    start = time.perf_counter()
    pairs = IndexedState(num_rows, 1, lower=0.0, name="u")
    threshold = IndexedState(num_queries, 1, name="lambda")
    build = time.perf_counter() - start
    b = BATCH_QUERIES * PAIRS_PER_BATCH_QUERY
    batches = []
    for _ in range(steps + 5):
        rows = torch.randint(num_rows, (b,), generator=g)  # random rows; the rare duplicates take the mean path
        queries = torch.randint(num_queries, (BATCH_QUERIES,), generator=g)
        batches.append((rows, torch.rand(b, 1, generator=g), queries, torch.randn(BATCH_QUERIES, 1, generator=g)))
    times = []
    for i, (rows, est, queries, lam) in enumerate(batches):
        t0 = time.perf_counter()
        pairs.update(rows, est, ema_weight=0.1)
        threshold.update(queries, lam, ema_weight=1.0)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    state_bytes = sum(t.numel() * t.element_size() for t in pairs.state_dict().values())
    query_bytes = sum(t.numel() * t.element_size() for t in threshold.state_dict().values())
    out = {
        "rows": num_rows, "queries": num_queries, "build_s": build, "update_ms": statistics.median(times) * 1e3,
        "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))] * 1e3,
        "bytes_per_pair": state_bytes / num_rows, "query_bytes_per_query": 2 * query_bytes / num_queries,
        "total_mib": (state_bytes + 2 * query_bytes) / 2**20,
    }
    del pairs, threshold, batches
    gc.collect()
    return out


def run(quick: bool, max_rows: int | None = None, steps: int = 50) -> list[dict[str, float]]:
    sizes = [10**5, 10**6, 10**7, 10**8]  # building even the largest takes under a second: --quick keeps them all
    steps = min(steps, 20) if quick else steps
    if max_rows:
        sizes = [n for n in sizes if n <= max_rows]
    results = []
    for n in sizes:
        r = measure(n, steps)
        results.append(r)
        print(f"n = {n:>11,}: update {r['update_ms']:.3f} ms (p90 {r['p90_ms']:.3f}), {r['bytes_per_pair']:.2f} B/pair, "
              f"{r['total_mib']:.0f} MiB, built in {r['build_s']:.2f} s", flush=True)
    return results


def report(results: list[dict[str, float]], command: str) -> str:
    flat = results[-1]["update_ms"] / results[0]["update_ms"]
    lines = [
        "## Per-index state at scale: bytes per pair and time per update versus n",
        "",
        f"Command: `{command}`. Machine: {machine()}.",
        f"SONG's per-pair state (`IndexedState`, float32, one row per relevant pair) and K-SONG's per-query λ and s "
        f"(n / {PAIRS_PER_QUERY} queries, as Netflix's ~200 ratings per user), one update of a batch of "
        f"{BATCH_QUERIES} queries × {PAIRS_PER_BATCH_QUERY} pairs plus the {BATCH_QUERIES} queries' λ; medians. "
        "Targets: ≤ 4 bytes per pair + O(#queries), update time flat in n.",
        "",
        "| pairs n | queries | bytes / pair | bytes / query (λ, s) | state MiB | update ms (median) | p90 ms | build s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['rows']:,} | {r['queries']:,} | {r['bytes_per_pair']:.2f} | {r['query_bytes_per_query']:.0f} | "
        f"{r['total_mib']:,.0f} | {r['update_ms']:.3f} | {r['p90_ms']:.3f} | {r['build_s']:.2f} |"
        for r in results
    ]
    lines += [
        "",
        f"Update time at n = {results[-1]['rows']:,} over n = {results[0]['rows']:,}: {flat:.2f}× for "
        f"{results[-1]['rows'] // results[0]['rows']:,}× the rows (the update is O(batch); what varies between sizes is "
        "noise and cache misses of random rows in a table larger than the CPU caches). MOAP / MOAP-V2 / ADAP "
        "(`decay_unsampled=True`) keep 8 more bytes per row (the float64 lazy-decay mark); their rows are positives of a "
        "classification set, not Netflix-sized pair sets.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer timed updates per size")
    ap.add_argument("--max-rows", type=int, default=None)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    results = run(args.quick, args.max_rows, args.steps)
    text = report(results, "python benchmarks/state_scale.py" + " ".join([""] + sys.argv[1:]))
    print(text)
    write_result("state_scale", text)


if __name__ == "__main__":
    main()
