"""Full-ranking NDCG@{10,20,50} evaluation on a MovieLens-20M-sized problem: the metric alone, fccolit against LibAUC.

    python benchmarks/ndcg_eval.py [--quick] [--previous PATH/TO/old_ranking.py]

The problem has the sizes and item layout of ``benchmarks/libauc_compare.py`` (section 3), generated with seed 0:
138,493 users × 26,744 items, 5 held-out items per user with graded relevance 1..5, 100 training items per user
excluded from the ranking. Scores are those of a matrix-factorization model with random 64-d factors (one
``[U, 64] @ [64, I]`` product per chunk): NeuMF's ``score_all`` costs about 30 ms / user on this 2-core CPU, which
would make scoring all users take over an hour, and the metric's cost does not depend on where the scores come
from. Scoring is shared by both paths and not timed; only the metric is.

* fccolit: :class:`fccolit.metrics.FullRankingNDCGScore` ``update`` on chunks of 1,024 users (all users; 8,192 with
  ``--quick``): one ``topk`` per chunk and a binary search of the top-k items in the user's held-out ids.
* LibAUC 2.0.1: the same scores in its evaluation layout (held-out items first, then the non-excluded candidates)
  and ``libauc.metrics.ndcg_at_k`` per cut-off, on chunks of 256 of the first users (4,096; 512 with ``--quick``);
  its per-user cost does not depend on the user, so ms / user compare directly. The layout code is the one of
  ``libauc_compare.py``. These chunks are all scored first, then LibAUC and fccolit each evaluate all of them
  (neither finds the scores in cache, as in ``libauc_compare.py``). Values are compared on those users.
* ``--previous``: a former ``fccolit/metrics/ranking.py`` loaded from a file and timed on the same chunks,
  interleaved with the current one (before / after of a change; e.g. ``git show <commit>:fccolit/metrics/ranking.py
  > /tmp/ranking_previous.py``); values must be identical.

Writes ``benchmarks/results/ndcg_eval.md``. LibAUC is optional (``pip install --no-deps libauc==2.0.1``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.metrics import FullRankingNDCGScore  # noqa: E402
from timing import machine, write_result  # noqa: E402

USERS, ITEMS, HELDOUT, TRAIN_PER_USER = 138_493, 26_744, 5, 100
KS = (10, 20, 50)


class FactorScores:
    """Matrix-factorization scores ``score_all(users [B]) -> [B, I]`` float32 from random 64-d factors."""

    def __init__(self, generator: torch.Generator, dim: int = 64) -> None:
        self.users = torch.randn(USERS, dim, generator=generator) / dim**0.5
        self.items_t = (torch.randn(ITEMS, dim, generator=generator)).t().contiguous()

    def score_all(self, users: torch.Tensor) -> torch.Tensor:
        return self.users[users] @ self.items_t


def problem() -> tuple[FactorScores, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(model, held [U, 5], relevance [U, 5], exclude [U, 100])``: distinct items per user, no dense table."""
    g = torch.Generator().manual_seed(0)
    per_user = HELDOUT + TRAIN_PER_USER
    offset = torch.randint(ITEMS, (USERS, 1), generator=g)
    stride = torch.randint(1, 50, (USERS, 1), generator=g) * 2 + 1  # odd strides < items: distinct items
    chosen = (offset + stride * torch.arange(per_user)) % ITEMS
    relevance = torch.randint(1, 6, (USERS, HELDOUT), generator=g).double()
    return FactorScores(g), chosen[:, :HELDOUT], relevance, chosen[:, HELDOUT:]


def load_previous(path: str):
    spec = importlib.util.spec_from_file_location("previous_ranking", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FullRankingNDCG


def libauc_values(scores: torch.Tensor, held: torch.Tensor, relevance: torch.Tensor, exclude: torch.Tensor) -> dict:
    """LibAUC's evaluation of one chunk: ``{k: mean NDCG@k}`` (the layout of ``libauc_compare.py``)."""
    from libauc.metrics import ndcg_at_k

    scores = scores.clone()
    scores.scatter_(1, exclude, float("-inf"))  # training items out of the ranking, as ours
    held_scores = scores.gather(1, held)
    rest = scores.scatter(1, held, float("nan"))
    candidates = rest[~torch.isnan(rest)].view(len(held), ITEMS - HELDOUT)
    predictions = torch.cat([held_scores, candidates], 1).numpy()  # LibAUC's layout: ground truth first
    return {k: ndcg_at_k(relevance.numpy(), predictions, k) for k in KS}


def run(quick: bool, previous: str | None) -> dict:
    model, held, relevance, exclude = problem()
    ours_users = 8_192 if quick else USERS
    libauc_users = 512 if quick else 4_096
    chunk, libauc_chunk = 1_024, 256
    result = {"ours_users": ours_users, "libauc_users": libauc_users, "scoring_s": 0.0, "ours_s": 0.0}
    metric = FullRankingNDCGScore(KS)
    old_metric = load_previous(previous)(KS) if previous else None
    result["previous_s"] = 0.0
    with torch.no_grad():
        for start in range(0, ours_users, chunk):
            q = torch.arange(start, min(start + chunk, ours_users))
            t0 = time.perf_counter()
            scores = model.score_all(q)
            result["scoring_s"] += time.perf_counter() - t0
            order = [("ours_s", metric), ("previous_s", old_metric)]
            if (start // chunk) % 2:  # interleave: alternate which implementation runs first
                order.reverse()
            for key, m in order:
                if m is None:
                    continue
                t0 = time.perf_counter()
                m.update(scores, held[q], relevance[q], exclude[q])
                result[key] += time.perf_counter() - t0
        result["values_ours"] = {k: float(v) for k, v in metric.compute().items()}
        if old_metric is not None:
            result["values_previous"] = {k: float(v) for k, v in old_metric.compute().items()}
        try:
            import libauc  # noqa: F401
        except ImportError as err:
            result["skip"] = f"LibAUC skipped: `import libauc` failed ({err})"
            return result
        totals = {k: 0.0 for k in KS}
        subset = FullRankingNDCGScore(KS)
        chunks = [torch.arange(s, s + libauc_chunk) for s in range(0, libauc_users, libauc_chunk)]
        scored = [model.score_all(q) for q in chunks]
        t0 = time.perf_counter()
        for q, scores in zip(chunks, scored):
            values = libauc_values(scores, held[q], relevance[q], exclude[q])
            for k in KS:  # ndcg_at_k averages over its rows: weight by the chunk size
                totals[k] += values[k] * len(q)
        result["libauc_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for q, scores in zip(chunks, scored):
            subset.update(scores, held[q], relevance[q], exclude[q])
        result["ours_subset_s"] = time.perf_counter() - t0
    result["values_libauc"] = {k: totals[k] / libauc_users for k in KS}
    result["values_ours_subset"] = {k: float(v) for k, v in subset.compute().items()}
    result["max_abs_diff"] = max(abs(result["values_libauc"][k] - result["values_ours_subset"][k]) for k in KS)
    return result


def report(r: dict, command: str) -> str:
    ms = lambda seconds, users: seconds / users * 1e3  # noqa: E731
    fmt = lambda v: " / ".join(f"{v[k]:.6f}" for k in KS)  # noqa: E731
    ours = ms(r["ours_s"], r["ours_users"])
    lines = [
        "## Full-ranking NDCG@k evaluation (metric only) against LibAUC",
        "",
        f"Command: `{command}`. Machine: {machine()}. Problem: {USERS:,} users × {ITEMS:,} items (MovieLens-20M "
        f"sized, generated, seed 0), {HELDOUT} held-out items with relevance 1..5 and {TRAIN_PER_USER} excluded "
        "training items per user, scores of random 64-d user and item factors; the scoring is shared by both "
        f"paths and not timed (it costs {ms(r['scoring_s'], r['ours_users']):.3f} ms / user here).",
        "",
        "| metric on the same scores | users timed | seconds | ms / user | NDCG@10 / @20 / @50 |",
        "|---|---:|---:|---:|---|",
        f"| fccolit `FullRankingNDCGScore`, chunks of 1,024 users | {r['ours_users']:,} | {r['ours_s']:.2f} | "
        f"{ours:.4f} | {fmt(r['values_ours'])} |",
    ]
    if "values_previous" in r:
        lines.append(f"| previous `FullRankingNDCG` (`--previous`), same chunks, interleaved | {r['ours_users']:,} | "
                     f"{r['previous_s']:.2f} | {ms(r['previous_s'], r['ours_users']):.4f} | "
                     f"{fmt(r['values_previous'])} |")
    if "skip" in r:
        lines.append(f"| LibAUC | {r['skip']} | | | |")
        return "\n".join(lines)
    libauc = ms(r["libauc_s"], r["libauc_users"])
    ours_subset = ms(r["ours_subset_s"], r["libauc_users"])
    lines += [
        f"| LibAUC 2.0.1 layout + `ndcg_at_k`, chunks of 256 users | {r['libauc_users']:,} | {r['libauc_s']:.2f} | "
        f"{libauc:.4f} | {fmt(r['values_libauc'])} |",
        f"| fccolit on the same users and chunks | {r['libauc_users']:,} | {r['ours_subset_s']:.2f} | "
        f"{ours_subset:.4f} | {fmt(r['values_ours_subset'])} |",
        "",
        f"Speed-up of the metric: {libauc / ours:.1f}× (LibAUC ms / user over fccolit's on all timed users; "
        f"{libauc / ours_subset:.1f}× on LibAUC's chunks of 256). Largest difference of the mean NDCG values on the "
        f"common users: {r['max_abs_diff']:.1e}.",
    ]
    if "values_previous" in r:
        same = r["values_previous"] == r["values_ours"]
        lines.append(f"Previous / current implementation: {ms(r['previous_s'], r['ours_users']) / ours:.2f}× "
                     f"the time; values {'identical' if same else 'DIFFERENT'}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="8,192 users for fccolit, 512 for LibAUC")
    ap.add_argument("--previous", default=None, help="a former fccolit/metrics/ranking.py to time side by side")
    args = ap.parse_args()
    result = run(args.quick, args.previous)
    command = "python benchmarks/ndcg_eval.py" + (" --quick" if args.quick else "")
    command += f" --previous {args.previous}" if args.previous else ""
    text = report(result, command)
    print(text)
    write_result("ndcg_eval", text)


if __name__ == "__main__":
    main()
