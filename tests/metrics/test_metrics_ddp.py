"""The metrics are exact under DDP: two CPU processes (gloo) with UNEQUAL shards give, after compute()
(torchmetrics syncs automatically once torch.distributed is initialized), the single-process value on the
full data. The binary shards are ordered by label so that rank 0 alone sees only negatives: a per-rank
value would be undefined there, only the gathered one exists."""

from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from builders import free_port

from fccolit.metrics import (
    AUROCScore,
    NDCGScore,
    APScore,
    EvaluationMetrics,
    FullRankingNDCGScore,
    AccuracyScore,
    PartialAUCScore,
)

WORLD = 2


def _data():
    g = torch.Generator().manual_seed(1234)
    # ranking: 23 queries of 9 items, ties and padding, two empty queries
    p = torch.randint(0, 5, (23, 9), generator=g).double()
    y = torch.randint(0, 3, (23, 9), generator=g)
    y[4] = 0
    y[17] = 0
    mask = torch.rand(23, 9, generator=g) > 0.15
    # binary: 301 samples with ties, ordered by label (negatives first)
    t = (torch.rand(301, generator=g) < 0.3).long()
    s = torch.round(torch.randn(301, generator=g, dtype=torch.float64) * 3 + t) / 3
    order = torch.argsort(t, stable=True)
    s, t = s[order], t[order]
    # recommendation: 13 users x 30 items
    scores = torch.randn(13, 30, generator=g, dtype=torch.float64)
    heldout = torch.randint(0, 30, (13, 1), generator=g)
    heldout[3] = -1
    rel = torch.ones(13, 1)
    # multi-task: 40 samples x 3 tasks, some entries unlabeled (-1); multi-class: 50 samples of 4 classes
    mt_scores = torch.randn(40, 3, generator=g, dtype=torch.float64)
    mt_labels = (torch.rand(40, 3, generator=g) < 0.4).long()
    mt_labels[torch.rand(40, 3, generator=g) < 0.1] = -1
    mc_scores = torch.randn(50, 4, generator=g, dtype=torch.float64)
    mc_labels = torch.randint(0, 4, (50,), generator=g)
    return (p, y, mask), (s, t), (scores, heldout, rel), (mt_scores, mt_labels), (mc_scores, mc_labels)


def _metrics():
    return {
        "ndcg@5": NDCGScore(top_k=5),
        "ndcg_skip": NDCGScore(top_k=None, empty_query="skip", ties="pessimistic"),
        "ap": APScore(),
        "auroc": AUROCScore(),
        "pauc_0.05_0.5": PartialAUCScore(0.05, 0.5),
        "pauc_0_0.3_mcclish": PartialAUCScore(0.0, 0.3, "mcclish"),
        "full": FullRankingNDCGScore(top_ks=(5, 10)),
        "ap_tasks": APScore(),
        "accuracy": AccuracyScore(4),
    }


def _feed(metrics, rank_slices):
    """Update every metric with the given (ranking, binary, recsys) slices, in two calls each."""
    (p, y, mask), (s, t), (scores, heldout, rel), (mt_scores, mt_labels), (mc_scores, mc_labels) = _data()
    q_sl, n_sl, u_sl, m_sl, c_sl = rank_slices
    for sl in _split(q_sl):
        metrics["ndcg@5"].update(p[sl], y[sl], mask[sl])
        metrics["ndcg_skip"].update(p[sl], y[sl], mask=mask[sl])
    for sl in _split(n_sl):
        for name in ("ap", "auroc", "pauc_0.05_0.5", "pauc_0_0.3_mcclish"):
            metrics[name].update(s[sl], t[sl])
    for sl in _split(u_sl):
        metrics["full"].update(scores[sl], heldout[sl], rel[sl])
    for sl in _split(m_sl):
        metrics["ap_tasks"].update(mt_scores[sl], mt_labels[sl])
    for sl in _split(c_sl):
        if sl.stop > sl.start:  # a rank without evaluation batches never calls update
            metrics["accuracy"].update(mc_scores[sl], mc_labels[sl])


def _split(sl: slice):
    mid = sl.start + (sl.stop - sl.start) // 2
    return [slice(sl.start, mid), slice(mid, sl.stop)]


def _values(metrics):
    out = {}
    for name, metric in metrics.items():
        v = metric.compute()
        if isinstance(v, dict):
            out.update({f"{name}@{k}": float(x) for k, x in v.items()})
        else:
            out[name] = float(v)
    return out


def _worker(rank: int, port: int, outdir: str, job=None) -> None:
    """Feeds this rank's shards to the metrics and writes their values (``job(rank, outdir)``: something else)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        if job is not None:
            return job(rank, outdir)
        # unequal shards: rank 0 gets fewer queries/users and only negatives of the binary data
        # (and no multi-class batch at all)
        cuts = {"q": 7, "n": 120, "u": 4, "m": 15, "c": 0}
        sizes = {"q": 23, "n": 301, "u": 13, "m": 40, "c": 50}
        shards = tuple(
            slice(0, cuts[key]) if rank == 0 else slice(cuts[key], sizes[key]) for key in ("q", "n", "u", "m", "c")
        )
        metrics = _metrics()
        _feed(metrics, shards)
        values = _values(metrics)
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(values))
    finally:
        dist.destroy_process_group()


@pytest.mark.ddp
@pytest.mark.timeout(120)
def test_metrics_exact_under_ddp_with_unequal_shards(tmp_path):
    _, (s, t), *_ = _data()
    assert int(t[:120].sum()) == 0  # rank 0 sees only negatives

    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)

    reference = _metrics()
    _feed(reference, (slice(0, 23), slice(0, 301), slice(0, 13), slice(0, 40), slice(0, 50)))
    expected = _values(reference)
    assert not any(math.isnan(v) for v in expected.values())
    for rank in range(WORLD):
        got = json.loads(Path(tmp_path, f"rank{rank}.json").read_text())
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, abs=1e-12), (rank, name)


def _group_job(rank: int, outdir: str) -> None:
    """Both ranks feed binary batches, only rank 1 feeds ranking lists, no rank feeds full-ranking batches."""
    group = _group()
    for batch in _group_batches(rank):
        group.update_from_batch(*batch)
    values = {name: float(v) for name, v in group.named_values().items()}
    Path(outdir, f"group{rank}.json").write_text(json.dumps(values))


def _group():
    return EvaluationMetrics({"auroc": AUROCScore(), "ndcg@5": NDCGScore(top_k=5), "full": FullRankingNDCGScore(top_ks=(5,), names=("full@5",))})


def _group_batches(rank):
    (p, y, mask), (s, t), *_ = _data()
    if rank == 0:
        return [(s[:120], {"y": t[:120]})]
    return [(s[120:], {"y": t[120:]}), (p[7:], {"relevance": y[7:], "mask": mask[7:]})]


@pytest.mark.ddp
@pytest.mark.timeout(120)
def test_evaluation_metrics_log_what_some_rank_fed(tmp_path):
    """EvaluationMetrics.named_values on every rank: the metrics fed on any rank (NDCG only on rank 1), with their
    global values; the full-ranking metric, fed nowhere, is not logged (every rank takes the same path)."""
    mp.spawn(_worker, args=(free_port(), str(tmp_path), _group_job), nprocs=WORLD, join=True)
    reference = _group()
    for batch in _group_batches(0) + _group_batches(1):
        reference.update_from_batch(*batch)
    expected = {name: float(v) for name, v in reference.named_values().items()}
    assert set(expected) == {"auroc", "ndcg@5"}
    for rank in range(WORLD):
        got = json.loads(Path(tmp_path, f"group{rank}.json").read_text())
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, abs=1e-12), (rank, name)
