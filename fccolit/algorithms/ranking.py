"""Plain mini-batch training of a listwise ranking loss on ranking batches: the LambdaRank, ApproxNDCG and NeuralNDCG
baselines of Qiu et al. (ICML 2022, §7), with the model, data, warm-up and schedule of SONG / K-SONG / SOLC.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import nn

from fccolit.algorithms.base import FCCOModule
from fccolit.algorithms.song import RankingEvaluation
from fccolit.objectives.ranking_batch import list_mask
from fccolit.objectives.ranking_losses import ListwiseRankingLoss

__all__ = ["MiniBatchRanking"]


class MiniBatchRanking(RankingEvaluation, FCCOModule):
    """MiniBatchRanking: plain mini-batch training of a listwise ranking loss on the batch's slates (no state).

    Each step scores the batch's slates (``[B, L]``, :func:`~fccolit.algorithms.song.score_lists`), takes the loss
    ``loss(scores, batch["relevance"], batch["mask"])`` (the mean over the batch's slates with a positive ideal DCG,
    :class:`~fccolit.objectives.ranking_losses.ListwiseRankingLoss`) and one optimizer step on its gradient. The
    loss is the true mini-batch loss: it is logged as ``train/loss`` (on the steps the logger writes) and
    ``train/loss_epoch`` (its exact mean over the epoch's steps and ranks). Under DDP each rank averages its own slates
    and DDP averages the ranks' gradients.

    Everything else is what SONG, K-SONG and SOLC use (:class:`~fccolit.algorithms.song.RankingEvaluation`): the
    ranking batches of the same samplers and DataModules, NDCG evaluation (full ranking for recommendation), Adam lr
    1e-3 by default, and the :class:`~fccolit.callbacks.warmup.WarmUp` callback, whose SOLC steps this module delegates
    to during the warm-up, so a baseline gets the same warm-up, re-initialized head and schedule as the FCCO methods
    (Qiu et al., §7.1: "For all methods, we first pre-train a model by initial warm-up").

    Args:
        model: a list scorer (:class:`~fccolit.models.ltr.ListMLP`, :class:`~fccolit.models.ltr.ContextAwareRanker`)
            or NeuMF-like ``model(query, items)`` with ``score_all(query)`` for full-ranking evaluation.
        loss: the listwise loss (:class:`~fccolit.objectives.LambdaRankLoss`,
            :class:`~fccolit.objectives.ApproxNDCGLoss`, :class:`~fccolit.objectives.NeuralNDCGLoss` or any
            :class:`~fccolit.objectives.ranking_losses.ListwiseRankingLoss`).
        metrics: logged names (default: NDCG@{1,3,5} for learning to rank, NDCG@{10,20,50} for recommendation).
        empty_query: what NDCG counts for a query without relevant items in validation and test (``"zero"``,
            ``"one"``: allRank's, ``"skip"``; see :class:`~fccolit.algorithms.song.RankingSOX`).
        **kwargs: :class:`~fccolit.algorithms.base.FCCOModule`'s arguments (no ``objective``).

    Raises:
        TypeError: ``loss`` not a :class:`~fccolit.objectives.ranking_losses.ListwiseRankingLoss`.
        ValueError: ``empty_query`` not a choice; ``initial_state`` other than ``"first_estimate"`` (there is no
            state); in a step, a batch with neither ``features`` nor ``items``, and the loss's input errors; and
            :class:`~fccolit.algorithms.base.FCCOModule`'s.
        FloatingPointError: a non-finite gradient or loss in a training step (the step is not taken).

    Example:
        >>> from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
        >>> from fccolit.models.ltr import ListMLP
        >>> from fccolit.objectives import LambdaRankLoss
        >>> data = SyntheticRankingDataModule(task="ltr", num_queries=3, num_features=2, list_size=(3, 4), top_k=2,
        ...                                   num_positives=None, num_negatives=None, val_queries=1, test_queries=1)
        >>> data.setup()
        >>> batch = data.full_batch()  # every training query with its whole list
        >>> from fccolit.algorithms import MiniBatchRanking
        >>> module = MiniBatchRanking(ListMLP(hidden=[4]), LambdaRankLoss(), data_sizes=data.sizes)
        >>> module.ranking_loss(module(batch), batch).shape  # the mean LambdaRank loss over the batch's slates
        torch.Size([])
        >>> module.metric_names, module.loss
        (['ndcg@1', 'ndcg@3', 'ndcg@5'], LambdaRankLoss(slope=1.0, gain='exp2'))
    """

    training_estimate_name = "train/loss"
    tracks_training_estimate = True

    def __init__(
        self,
        model: nn.Module,
        loss: ListwiseRankingLoss,
        metrics: Sequence[str] | None = None,
        empty_query: Literal["zero", "one", "skip"] = "zero",
        **kwargs,
    ) -> None:
        if not isinstance(loss, ListwiseRankingLoss):
            raise TypeError(f"MiniBatchRanking trains a ListwiseRankingLoss (LambdaRankLoss, ApproxNDCGLoss, "
                            f"NeuralNDCGLoss, ...), got {type(loss).__name__}")
        metrics = self.ranking_metric_names(metrics, empty_query, kwargs.get("data_sizes"))
        super().__init__(model, None, metrics=metrics, **kwargs)
        self.loss = loss

    def ranking_loss(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss of the batch's slates: ``loss(scores, relevance, mask)`` (no ``mask`` field: no padding)."""
        return self.loss(scores, batch["relevance"], list_mask(batch, batch["relevance"]))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if self.step_delegate is not None:  # the warm-up algorithm's step (WarmUp): FCCOModule's template
            return super().training_step(batch, batch_idx)
        loss = self.ranking_loss(self(batch), batch)
        self.optimization_step(loss)
        self.log_objective_estimate(loss.detach().reshape(1))
