"""fccolit's evaluation metrics against torchmetrics, and what the validation pictures cost.

    python benchmarks/metrics_compare.py [--quick] [--previous-ranking PATH/TO/old_ranking.py]

One torch thread, every pair timed interleaved call by call (``timing.interleaved_medians``), medians in ms:

1. AP, AUROC and pAUC on 100,000 and 1,000,000 scores (5% positives): ``fccolit.metrics`` (float64, one sort per
   metric that also yields the ROC vertices of the pictures) against torchmetrics' ``BinaryAveragePrecision`` and
   ``BinaryAUROC`` (float32; pAUC only as McClish's ``max_fpr``), with the largest difference of the values;
2. NDCG@10 of 2,000 lists of 100 items (graded relevance 0..2, gain 2^y − 1): ``NDCG`` against
   ``RetrievalNormalizedDCG`` fed ``2^y − 1`` and query indexes;
3. top-1 accuracy of 200,000 × 10 scores, overall and per class: ``AccuracyScore`` against torchmetrics'
   ``MulticlassAccuracy`` twice (``average="micro"`` and ``average=None``);
4. the validation pictures on 100,000 scores: ``compute()`` of AP + AUROC + pAUC (what a validation costs already)
   against the PR and ROC figures and the PR-curve plugin written to a ``SummaryWriter``; the NDCG@k figure;
5. the cost of keeping NDCG@j for every j <= k: ``NDCGScore(top_k=10).update`` and ``FullRankingNDCGScore((5, 10, 20, 50)).update``
   (1,024 users × 20,000 items, 50 excluded each) against the same metrics of ``--previous-ranking`` (a former
   ``fccolit/metrics/ranking.py``, e.g. ``git show 4c1383b~1:fccolit/metrics/ranking.py``), skipped without it.

Writes ``benchmarks/results/metrics_compare.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torchmetrics  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from fccolit.metrics import AccuracyScore, APScore, AUROCScore, FullRankingNDCGScore, NDCGScore, PartialAUCScore  # noqa: E402
from fccolit.metrics.figures import log_curve_figures  # noqa: E402
from timing import interleaved_medians, machine, write_result  # noqa: E402


def timed(steps: dict, repeats: int) -> dict[str, float]:
    return interleaved_medians(steps, [None], repeats)


def filled(metric, *inputs):
    metric.update(*inputs)
    return metric


def binary(n: int, repeats: int, g: torch.Generator) -> list[str]:
    y = (torch.rand(n, generator=g) < 0.05).long()
    s = torch.randn(n, generator=g) + y
    pairs = {
        "AP": (lambda: APScore(), lambda: torchmetrics.classification.BinaryAveragePrecision()),
        "AUROC": (lambda: AUROCScore(), lambda: torchmetrics.classification.BinaryAUROC()),
        "pAUC [0, 0.1], McClish": (lambda: PartialAUCScore(0.0, 0.1, "mcclish"),
                                   lambda: torchmetrics.classification.BinaryAUROC(max_fpr=0.1)),
    }
    rows = []
    for name, (ours, theirs) in pairs.items():
        t = timed({"ours": lambda _: filled(ours(), s, y).compute(),
                   "tm": lambda _: filled(theirs(), s, y).compute()}, repeats)
        diff = abs(float(filled(ours(), s, y).compute()) - float(filled(theirs(), s, y).compute()))
        rows.append(f"| {name}, {n:,} scores | {t['ours']:.1f} | {t['tm']:.1f} | {t['tm'] / t['ours']:.2f} | {diff:.1e} |")
    return rows


def ranking_lists(repeats: int, g: torch.Generator) -> str:
    q, length = 2000, 100
    p = torch.randn(q, length, generator=g)
    rel = torch.randint(0, 3, (q, length), generator=g)
    index = torch.arange(q)[:, None].expand(q, length).reshape(-1)
    gains = (2 ** rel - 1).reshape(-1)
    ours = lambda _: filled(NDCGScore(top_k=10), p, rel).compute()  # noqa: E731
    theirs = lambda _: filled(torchmetrics.retrieval.RetrievalNormalizedDCG(top_k=10), p.reshape(-1), gains,  # noqa: E731
                              index).compute()
    t = timed({"ours": ours, "tm": theirs}, repeats)
    diff = abs(float(ours(None)) - float(theirs(None)))
    return f"| NDCG@10, {q:,} lists of {length} | {t['ours']:.1f} | {t['tm']:.1f} | {t['tm'] / t['ours']:.2f} | {diff:.1e} |"


def accuracy(repeats: int, g: torch.Generator) -> str:
    n, c = 200_000, 10
    scores, labels = torch.randn(n, c, generator=g), torch.randint(0, c, (n,), generator=g)

    def ours(_):
        metric = filled(AccuracyScore(c), scores, labels)
        return metric.compute(), metric.per_task

    def theirs(_):
        overall = filled(torchmetrics.classification.MulticlassAccuracy(c, average="micro"), scores, labels)
        per_class = filled(torchmetrics.classification.MulticlassAccuracy(c, average=None), scores, labels)
        return overall.compute(), per_class.compute()

    t = timed({"ours": ours, "tm": theirs}, repeats)
    diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(ours(None), theirs(None)))
    return f"| accuracy overall + per class, {n:,} × {c} | {t['ours']:.1f} | {t['tm']:.1f} | {t['tm'] / t['ours']:.2f} | {diff:.1e} |"


def pictures(repeats: int, g: torch.Generator) -> list[str]:
    n = 100_000
    y = (torch.rand(n, generator=g) < 0.05).long()
    s = torch.randn(n, generator=g) + y
    metrics = [APScore(), AUROCScore(), PartialAUCScore(0.05, 0.5)]
    for m in metrics:
        for start in range(0, n, 1024):
            m.update(s[start:start + 1024], y[start:start + 1024])
    ndcg = filled(NDCGScore(top_k=10), torch.randn(500, 50, generator=g), torch.randint(0, 3, (500, 50), generator=g))
    ndcg.compute()
    with tempfile.TemporaryDirectory() as logs:
        writer = SummaryWriter(logs)

        def compute(_):
            for m in metrics:
                m._computed = None  # torchmetrics caches compute(); a validation computes once
                m.compute()

        t = timed({"compute": compute,
                   "figures": lambda _: log_curve_figures(writer, "val", metrics[0].named_curves(), 0),
                   "ndcg": lambda _: log_curve_figures(writer, "val", ndcg.named_curves(), 0)}, repeats)
        writer.close()
    return [f"| compute() of AP + AUROC + pAUC, {n:,} scores (every validation) | {t['compute']:.0f} |",
            f"| PR and ROC figures + PR-curve plugin from the kept ROC vertices | {t['figures']:.0f} |",
            f"| NDCG@k figure | {t['ndcg']:.0f} |"]


def curve_states(previous: str | None, repeats: int, g: torch.Generator) -> list[str]:
    if previous is None:
        return []
    spec = importlib.util.spec_from_file_location("previous_ranking", previous)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    p, rel = torch.randn(2000, 100, generator=g), torch.randint(0, 3, (2000, 100), generator=g)
    users, items = 1024, 20_000
    scores = torch.randn(users, items, generator=g)
    heldout, relevance = torch.randint(0, items, (users, 1), generator=g), torch.ones(users, 1)
    exclude = torch.randint(0, items, (users, 50), generator=g)
    lists = timed({"old": lambda _: filled(old.NDCG(k=10), p, rel), "new": lambda _: filled(NDCGScore(top_k=10), p, rel)},
                  repeats)
    full = timed({"old": lambda _: filled(old.FullRankingNDCG((5, 10, 20, 50)), scores, heldout, relevance, exclude),
                  "new": lambda _: filled(FullRankingNDCGScore((5, 10, 20, 50)), scores, heldout, relevance, exclude)},
                 repeats)
    return [f"| `NDCGScore(top_k=10).update`, 2,000 lists of 100 | {lists['old']:.1f} | {lists['new']:.1f} | "
            f"{lists['new'] / lists['old']:.2f} |",
            f"| `FullRankingNDCGScore((5, 10, 20, 50)).update`, {users:,} users × {items:,} items | {full['old']:.1f} | "
            f"{full['new']:.1f} | {full['new'] / full['old']:.2f} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 7, no 1,000,000-score row")
    ap.add_argument("--previous-ranking", default=None, help="a former fccolit/metrics/ranking.py (section 5)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    repeats = 3 if args.quick else 7
    g = torch.Generator().manual_seed(0)
    command = "python benchmarks/metrics_compare.py" + " --quick" * args.quick + (
        " --previous-ranking <ranking.py before 4c1383b>" if args.previous_ranking else "")
    rows = binary(100_000, repeats, g) + ([] if args.quick else binary(1_000_000, repeats, g))
    rows += [ranking_lists(repeats, g), accuracy(repeats, g)]
    lines = [
        "## fccolit's metrics against torchmetrics; what the validation pictures cost",
        "",
        f"`{command}` — {machine()}. Median ms per call, interleaved call by call.",
        "",
        f"| metric, input | fccolit ms | torchmetrics {torchmetrics.__version__} ms | torchmetrics / fccolit | "
        "largest difference of the values |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "| a validation's picture work | ms |",
        "|---|---|",
        *pictures(repeats, g),
    ]
    before_after = curve_states(args.previous_ranking, repeats, g)
    if before_after:
        lines += ["", "Keeping NDCG@j for every j <= k beside the value (before / after, the logged values unchanged):",
                  "", "| update | before ms | after ms | after / before |", "|---|---|---|---|", *before_after]
    text = "\n".join(lines)
    print(text)
    write_result("metrics_compare", text)


if __name__ == "__main__":
    main()
