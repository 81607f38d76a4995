"""Small collective helpers used by the per-index state and the algorithms.

Every function degrades to the identity when ``torch.distributed`` is not initialized or the world has
one process, so single-device code pays nothing.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True when a process group with more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


# Rows per rank that the one-collective path of all_gather_rows reserves, keyed by (columns, dtype, device): the
# largest count seen so far, identical on every rank (each rank updates it from the same gathered counts) as long as
# every rank started from the same history: FCCOModule.on_fit_start resets it on every rank (a process that took part
# in an earlier DDP run must not pad differently from ranks started afresh).
_row_capacity: dict[tuple[int, torch.dtype, str], int] = {}


def reset_row_capacity() -> None:
    """Forget the capacities of :func:`all_gather_rows` (call it on every rank at the same point, e.g. a fit's
    start)."""
    _row_capacity.clear()


def all_gather_rows(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Concatenate tensors of every rank along dim 0, without gradient.

    The tensors of one rank must share their first dimension ``B_r``; ``B_r`` may differ between ranks
    (shards are padded for the collective and the padding is dropped again).

    A single floating tensor (the per-index state packs its index and estimates into one) travels in one
    collective: each rank sends its row count in a header row followed by its rows padded to a capacity that every
    rank knows (the largest count seen before); only when some rank has more rows than that is there a second
    round, after which the capacity is raised on every rank alike. Several tensors: one collective for the sizes,
    then one per tensor.

    Returns:
        (gathered, offsets): ``gathered[k]`` has shape ``[Σ_r B_r, ...]`` ordered by rank, and
        ``offsets`` (long, ``[world + 1]``) gives rank ``r``'s rows as ``offsets[r]:offsets[r + 1]``.
    """
    local = tensors[0].shape[0]
    if not is_distributed():
        return list(tensors), torch.tensor([0, local])
    one = tensors[0]  # the path must not depend on this rank's row count: every rank has to take the same one
    if len(tensors) == 1 and one.dtype in (torch.float32, torch.float64) and math.prod(one.shape[1:]) > 0:
        return _all_gather_rows_one_collective(tensors[0])
    world = dist.get_world_size()
    device = tensors[0].device
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([local], dtype=torch.long, device=device))
    sizes_t = torch.cat(sizes).cpu()
    largest = int(sizes_t.max())
    gathered = []
    for t in tensors:
        t = t.detach()
        if t.shape[0] < largest:
            pad = t.new_zeros((largest - t.shape[0], *t.shape[1:]))
            t = torch.cat([t, pad])
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        gathered.append(torch.cat([p[: int(n)] for p, n in zip(parts, sizes_t)]))
    return gathered, _offsets(sizes_t)


def _offsets(sizes: torch.Tensor) -> torch.Tensor:
    offsets = torch.zeros(sizes.shape[0] + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(sizes, 0)
    return offsets


def _all_gather_rows_one_collective(t: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """:func:`all_gather_rows` of one floating tensor ``[B_r, ...]``: header row (the count) + rows padded to the
    shared capacity, one ``all_gather`` while no rank exceeds the capacity (float32 / float64: the count is exact
    below 2^24)."""
    world = dist.get_world_size()
    rows = t.detach().reshape(t.shape[0], math.prod(t.shape[1:]))
    key = (rows.shape[1], rows.dtype, str(rows.device))
    local = rows.shape[0]
    capacity = _row_capacity.get(key, 0)
    while True:
        send = rows.new_zeros((capacity + 1, rows.shape[1]))
        send[0, 0] = local
        if local <= capacity:
            send[1 : local + 1] = rows
        parts = [torch.empty_like(send) for _ in range(world)]
        dist.all_gather(parts, send)
        sizes = torch.stack([p[0, 0] for p in parts]).long().cpu()
        largest = int(sizes.max())
        if largest <= capacity:
            break
        capacity = _row_capacity[key] = largest  # the same on every rank: they all read the same counts
    gathered = torch.cat([p[1 : int(n) + 1] for p, n in zip(parts, sizes)])
    return [gathered.reshape(-1, *t.shape[1:])], _offsets(sizes)


def all_gather_with_grad(t: torch.Tensor) -> torch.Tensor:
    """Concatenate ``t`` of every rank along dim 0, keeping the autograd graph to the local part.

    Every rank must pass the same shape. The backward pass sums the incoming gradients of all ranks into
    each rank's slice, so when every rank computes the same scalar from the gathered tensor and DDP then
    averages the parameter gradients, the result is the gradient of that scalar over the global batch.
    """
    if not is_distributed():
        return t
    from torch.distributed.nn.functional import all_gather

    with warnings.catch_warnings():  # deprecated in favour of a private API; still the supported autograd path
        warnings.simplefilter("ignore", FutureWarning)
        return torch.cat(all_gather(t.contiguous()), dim=0)


def all_gather_equal(t: torch.Tensor) -> torch.Tensor:
    """Concatenate same-shaped tensors of every rank along dim 0, without gradient."""
    if not is_distributed():
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.detach().contiguous())
    return torch.cat(parts, dim=0)
