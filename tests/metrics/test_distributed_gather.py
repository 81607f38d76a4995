"""``fccolit.distributed.all_gather_rows`` on 2 gloo processes: exact rows and offsets for unequal, changing and
empty shards, and one collective per call once the shared capacity holds every rank's rows."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from builders import free_port

from fccolit import distributed

WORLD = 2
# rows of each rank at each call: unequal, growing past the capacity, empty, shrinking
SIZES = [(3, 1), (0, 4), (5, 5), (2, 0), (7, 2), (2, 3), (2, 3)]


def _rows(rank: int, call: int, n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    base = torch.arange(n * width, dtype=torch.float64).reshape(n, width)
    return (base + 1000 * rank + 100 * call + 0.25).to(dtype)


def _worker(rank: int, port: int, outdir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    calls = {"n": 0}
    original = dist.all_gather

    def counting(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    dist.all_gather = counting
    try:
        if rank == 0:  # history from an earlier DDP run in this process only: the fit-start reset forgets it
            distributed._row_capacity[(3, torch.float64, "cpu")] = 50
        distributed.reset_row_capacity()
        out = []
        for call, sizes in enumerate(SIZES):
            n = sizes[rank]
            packed = _rows(rank, call, n, 3, torch.float64)  # the state's packed (index, estimates) path
            flat = _rows(rank, call, n, 1, torch.float32).reshape(n)  # 1-D
            index = torch.arange(n, dtype=torch.long) + 10 * rank  # several tensors: sizes first, then each
            before = calls["n"]
            (g_packed,), off_packed = distributed.all_gather_rows(packed)
            one_call = calls["n"] - before
            (g_flat,), off_flat = distributed.all_gather_rows(flat)
            (g_index, g_values), off_pair = distributed.all_gather_rows(index, packed)
            out.append({
                "packed": g_packed, "flat": g_flat, "index": g_index, "values": g_values,
                "offsets": (off_packed, off_flat, off_pair), "collectives": one_call,
            })
        torch.save(out, Path(outdir, f"rank{rank}.pt"))
    finally:
        dist.all_gather = original
        dist.destroy_process_group()


@pytest.mark.ddp
@pytest.mark.timeout(120)
def test_all_gather_rows_exact_with_unequal_changing_and_empty_shards(tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    capacity = 0
    for rank in range(WORLD):
        results = torch.load(tmp_path / f"rank{rank}.pt")
        capacity = 0
        for call, (sizes, got) in enumerate(zip(SIZES, results)):
            expected = torch.cat([_rows(r, call, sizes[r], 3, torch.float64) for r in range(WORLD)])
            offsets = torch.tensor([0, sizes[0], sizes[0] + sizes[1]])
            assert torch.equal(got["packed"], expected), (rank, call)
            assert torch.equal(got["values"], expected), (rank, call)
            assert got["flat"].dtype == torch.float32 and got["flat"].shape == (sum(sizes),)
            assert torch.equal(got["flat"], torch.cat([_rows(r, call, sizes[r], 1, torch.float32).reshape(-1)
                                                       for r in range(WORLD)]))
            assert torch.equal(got["index"], torch.cat([torch.arange(sizes[r]) + 10 * r for r in range(WORLD)]))
            for off in got["offsets"]:
                assert torch.equal(off, offsets), (rank, call)
            # one collective while the capacity (largest count seen before) holds every rank's rows, two otherwise
            assert got["collectives"] == (1 if max(sizes) <= capacity else 2), (rank, call, capacity)
            capacity = max(capacity, max(sizes))
