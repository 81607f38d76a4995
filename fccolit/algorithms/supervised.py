"""Plain mini-batch training with a pointwise loss: the cross-entropy baseline, warm-up and pre-training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fccolit.algorithms.base import FCCOModule


class Supervised(FCCOModule):
    """Supervised: plain mini-batch binary cross-entropy on the scores, the baseline (no per-index state).

    Logs ``train/loss`` (the true mini-batch loss, on the steps the logger writes) and ``train/loss_epoch`` (its
    exact mean over the epoch and every rank).

    Same model, data, optimizer and metrics interface as the FCCO algorithms, so it is the baseline every
    benchmark compares against (and the objective of a warm-up phase).

    Multi-label data trains each task's output on the positions of that task (the batches of
    :class:`~fccolit.samplers.MultiLabelSampler`), so it is the baseline of the multi-label configs too.

    Args:
        model: the backbone (scores ``[B]``, or ``[B, T]`` for T tasks).
        pos_weight: weight of the positive class in the BCE (1: unweighted).
        **kwargs: :class:`~fccolit.algorithms.base.FCCOModule`'s arguments (no ``objective``).

    Raises:
        ValueError: ``initial_state`` other than ``"first_estimate"`` (there is no state); and
            :class:`~fccolit.algorithms.base.FCCOModule`'s.
        FloatingPointError: a non-finite gradient or loss in a training step (the step is not taken).

    Example:
        >>> import torch
        >>> from fccolit.algorithms import Supervised
        >>> from fccolit.models import LinearScorer
        >>> module = Supervised(LinearScorer(), pos_weight=2.0, data_sizes={"num_features": 3})
        >>> batch = {"x": torch.randn(4, 3), "y": torch.tensor([1, 0, 0, 1])}
        >>> module.supervised_loss(module(batch), batch).shape  # the mean weighted BCE of the batch
        torch.Size([])
        >>> module.metric_names
        ['ap', 'auroc', 'pauc_0.05_0.5']
    """

    default_metrics = ("ap", "auroc", "pauc_0.05_0.5")
    training_estimate_name = "train/loss"
    tracks_training_estimate = True

    def __init__(self, model: nn.Module, pos_weight: float = 1.0, **kwargs) -> None:
        self.pos_weight = pos_weight
        super().__init__(model, None, **kwargs)

    def supervised_loss(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The mean BCE of the batch. A multi-label training batch (a ``task`` field ``[B]``, scores ``[B, T]``:
        :class:`~fccolit.samplers.MultiLabelSampler`) takes each position's score for its own task."""
        task = batch.get("task")
        if task is not None and scores.dim() == 2:
            scores = scores.gather(1, task.reshape(-1, 1).to(torch.long)).reshape(-1)
        target = batch["y"].reshape(-1).to(scores.dtype)
        weight = None if self.pos_weight == 1.0 else torch.tensor(self.pos_weight, dtype=scores.dtype)
        return F.binary_cross_entropy_with_logits(scores.reshape(-1), target, pos_weight=weight)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss = self.supervised_loss(self(batch), batch)
        self.optimization_step(loss)
        self.log_objective_estimate(loss.detach().reshape(1))
