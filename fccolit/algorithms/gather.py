"""The global batch of an objective that pools the batch (AP's, pAUC's) under DDP: every rank's scores (with
gradient) and batch fields, gathered in one collective.

An objective with ``needs_global_batch`` compares each sample with the whole global batch (all positives against all
negatives), so under DDP every rank evaluates it on the gathered batch, identically; :func:`global_batch` does the
gathering for :meth:`~fccolit.algorithms.FCCOModule.objective_inputs`.
"""

from __future__ import annotations

from typing import Any

import torch

from fccolit import distributed
from fccolit.objectives.base import FCCOObjective

__all__ = ["global_batch"]


def _packable(scores: torch.Tensor, fields: list[torch.Tensor]) -> bool:
    """Whether the scores and batch fields can travel as float64 columns of one tensor without changing a value:
    floating scores and fields with the scores' leading dimension B, floating, bool or integer (batch fields hold
    labels and row indices, far below the 2^53 up to which float64 holds every integer; no value is read here,
    so the check costs no host-device synchronization)."""
    if not scores.is_floating_point() or scores.dim() == 0 or scores.device.type == "mps":  # MPS: no float64
        return False
    return all(t.dim() > 0 and t.shape[0] == scores.shape[0] and not t.is_complex() for t in fields)


class _GatherForReplicatedLoss(torch.autograd.Function):
    """All-gather ``[B, C] → [W·B, C]`` (ordered by rank) for a loss that every rank computes identically from it.

    Backward: this rank's slice of the incoming gradient times W, with no communication. The generic all-gather
    backward (``all_gather_with_grad``) sums the W ranks' gradients into each slice (a reduce-scatter; gloo emulates
    it with W scatters); when every rank evaluates the same loss on the same gathered tensor, as the objectives of
    the global batch are evaluated (``needs_global_batch``), those W gradients are equal and their sum is W times
    this rank's own. Same result, without the collectives (and the wait for the slowest rank) in the backward.
    """

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor) -> torch.Tensor:
        ctx.world, ctx.start, ctx.rows = distributed.world_size(), distributed.rank() * local.shape[0], local.shape[0]
        return distributed.all_gather_equal(local)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad[ctx.start : ctx.start + ctx.rows] * ctx.world


def _gather_packed(
    scores: torch.Tensor, fields: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The global batch's scores (with gradient) and fields in one all-gather instead of one per tensor.

    The scores ``[B, ...]`` and each field ``[B, ...]`` become float64 columns of one ``[B, C]`` tensor (exact for
    float32 / float64 values, bools and integers below 2^53), gathered with gradient, then split and cast back to
    ``[W·B, ...]`` each (the fields detached), ordered by rank as ``all_gather_with_grad`` / ``all_gather_equal``
    give them; the backward needs no collective (:class:`_GatherForReplicatedLoss`). Each collective is a rendezvous
    of the ranks: their number, not their bytes, is what a small step pays.
    """
    parts = [scores] + list(fields.values())
    columns = [t.reshape(t.shape[0], -1).to(torch.float64) for t in parts]
    columns[1:] = [c.detach() for c in columns[1:]]
    gathered = _GatherForReplicatedLoss.apply(torch.cat(columns, 1))
    out, start = [], 0
    for t, c in zip(parts, columns):
        piece = gathered[:, start : start + c.shape[1]]
        piece = piece.to(t.dtype).reshape(gathered.shape[0], *t.shape[1:])
        out.append(piece if t is scores else piece.detach())
        start += c.shape[1]
    return out[0], dict(zip(fields, out[1:]))


def global_batch(
    objective: FCCOObjective, scores: torch.Tensor, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
    """``(scores, batch, synced)`` as ``objective`` sees them: under DDP, for an objective that pools the batch
    (``needs_global_batch``), the global batch's scores (with gradient) and the fields it reads (``synced`` True:
    identical on every rank); otherwise the local ones (``synced`` False)."""
    if objective.needs_global_batch and distributed.is_distributed():
        batch = objective.local_fields(batch)
        fields = tuple(k for k in objective.batch_fields + ("task",) if k in batch)
        if _packable(scores, [batch[k] for k in fields]):
            return (*_gather_packed(scores, {k: batch[k] for k in fields}), True)
        gathered = {k: distributed.all_gather_equal(batch[k]) for k in fields}
        return distributed.all_gather_with_grad(scores), gathered, True
    return scores, batch, False
