"""Small collective helpers used by the per-index state and the algorithms.

Every function degrades to the identity when ``torch.distributed`` is not initialized or the world has
one process, so single-device code pays nothing.
"""

from __future__ import annotations

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


def all_gather_rows(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Concatenate tensors of every rank along dim 0, without gradient.

    The tensors of one rank must share their first dimension ``B_r``; ``B_r`` may differ between ranks
    (shards are padded for the collective and the padding is dropped again).

    Returns:
        (gathered, offsets): ``gathered[k]`` has shape ``[Σ_r B_r, ...]`` ordered by rank, and
        ``offsets`` (long, ``[world + 1]``) gives rank ``r``'s rows as ``offsets[r]:offsets[r + 1]``.
    """
    local = tensors[0].shape[0]
    if not is_distributed():
        return list(tensors), torch.tensor([0, local])
    world = dist.get_world_size()
    device = tensors[0].device
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([local], dtype=torch.long, device=device))
    sizes_t = torch.cat(sizes).cpu()
    largest = int(sizes_t.max())
    offsets = torch.zeros(world + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(sizes_t, 0)
    gathered = []
    for t in tensors:
        t = t.detach()
        if t.shape[0] < largest:
            pad = t.new_zeros((largest - t.shape[0], *t.shape[1:]))
            t = torch.cat([t, pad])
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        gathered.append(torch.cat([p[: int(n)] for p, n in zip(parts, sizes_t)]))
    return gathered, offsets


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
