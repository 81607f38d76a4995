"""The curves the metrics keep are global under DDP, as their values: two CPU processes (gloo) with the unequal
shards of ``test_metrics_ddp`` (rank 0 sees only negatives) give the single-process ROC vertices and NDCG@j."""

import json
from pathlib import Path

import pytest
import torch.multiprocessing as mp
from builders import free_port
from .test_metrics_ddp import WORLD, _data, _feed, _metrics, _worker

SHARDS = {"q": (23, 7), "n": (301, 120), "u": (13, 4), "m": (40, 15), "c": (50, 0)}  # (size, rank 0's share)


def _shards(rank):
    return tuple(slice(0, cut) if rank == 0 else slice(cut, size) for size, cut in SHARDS.values())


def _curves(metrics):
    """``{metric/curve: fps + tps (ROC vertices) or NDCG@1..k}`` after compute()."""
    out = {}
    for name, metric in metrics.items():
        metric.compute()
        for key, curve in metric.named_curves().items():
            out[f"{name}/{key}"] = curve.fps.tolist() + curve.tps.tolist() if hasattr(curve, "fps") else curve.tolist()
    return out


def _curves_job(rank, outdir):
    metrics = _metrics()
    _feed(metrics, _shards(rank))
    Path(outdir, f"curves{rank}.json").write_text(json.dumps(_curves(metrics)))


@pytest.mark.ddp
@pytest.mark.timeout(120)
def test_curves_are_global_under_ddp(tmp_path):
    _, (s, t), *_ = _data()
    assert int(t[:120].sum()) == 0  # rank 0 alone has no ROC curve
    mp.spawn(_worker, args=(free_port(), str(tmp_path), _curves_job), nprocs=WORLD, join=True)
    reference = _metrics()
    _feed(reference, tuple(slice(0, size) for size, _ in SHARDS.values()))
    expected = _curves(reference)
    assert {"ap/roc", "ndcg@5/ndcg@k", "full/full_ranking_ndcg@k", "ap_tasks/roc/0"} <= set(expected)
    for rank in range(WORLD):
        got = json.loads(Path(tmp_path, f"curves{rank}.json").read_text())
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, abs=1e-12), (rank, key)
