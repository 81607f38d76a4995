r"""Mini-batch baselines of the ranked-range objectives: the naive mini-batch method and the pairwise AUC
surrogate."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fccolit.algorithms.pauc.base import RankedRangeModule
from fccolit.objectives.pauc import PartialAUCRangeSurrogate, ranked_range_mean

__all__ = ["MiniBatchPAUC", "PairwiseAUC"]


class MiniBatchPAUC(RankedRangeModule):
    r"""MB: SGD on each batch's ranked-range mean, the mini-batch baseline of Yao, Lin & Yang (NeurIPS 2022).

    The naive mini-batch method (after Kar et al. 2014) as compared by Yao Yao, Qihang Lin and Tianbao Yang,
    "Large-scale Optimization of Partial AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505:
    the ranked-range mean of each batch is objective (3) with the batch's own negatives ranked (a biased estimate
    for α > 0).

    With ``alpha = 0, beta = 1`` this is plain pairwise AUC-surrogate minimisation (:class:`PairwiseAUC`).

    Args:
        model, objective: as :class:`~fccolit.algorithms.pauc.PAUCRange`.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`; the optimizer defaults to ``SGD(lr=0.1)``
            (an assumption), and schedulers are allowed.

    Logged: ``train/objective``, the batch's ranked-range mean (the loss it descends; for [0, 1] an unbiased
    estimate of the pairwise surrogate objective), and ``train/grad_evals``.

    Raises:
        TypeError: ``objective`` not a :class:`~fccolit.objectives.pauc.RankedRangeObjective`.
        ValueError: a model without trainable parameters; in a training step, a batch without positives or
            negatives (an empty loss matrix); and :class:`~fccolit.algorithms.base.FCCOModule`'s.

    Example:
        >>> from fccolit.algorithms.pauc import MiniBatchPAUC
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = MiniBatchPAUC(LinearScorer(), data_sizes=data.sizes)
        >>> module.loop, type(module.configure_optimizers()).__name__
        ({'grad_evals': 0}, 'SGD')
        >>> data.setup("fit")
        >>> losses, synced, size = module.ranked_batch(next(iter(data.train_dataloader())))
        >>> tuple(losses.losses.shape), size  # the batch's 2 positives × 6 negatives, of 8 samples
        ((2, 6), 8)
    """

    def default_optimizer(self, params: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        rr, _, size = self.ranked_batch(batch)
        rows = ranked_range_mean(rr.losses, self.objective.alpha, self.objective.beta, rr.weights)
        self.optimization_step(rows.mean())
        self.count(size)
        self.log_objective_estimate(rows.detach())
        self.log_loop(grad_evals=self.loop["grad_evals"])


class PairwiseAUC(MiniBatchPAUC):
    r"""The pairwise AUC surrogate baseline: SGD over each batch's (positive, negative) pairs (Yao, Lin & Yang, 2022).

    A baseline of Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False
    Positive Rates", NeurIPS 2022, arXiv:2203.01505.

    SGD on ``mean_{i∈+, j∈−} ℓ(h(x_i) − h(x_j))`` over each batch's (positive, negative) pairs
    (:class:`MiniBatchPAUC` with the FPR range [0, 1]).

    Args:
        model: the scorer.
        surrogate, margin, scale: ℓ (default the paper's logistic ``log(1 + e^{−z})``).
        (the rest): see :class:`MiniBatchPAUC`. Default metrics: ``auroc`` and ``pauc_0.05_0.5``.

    Raises:
        ValueError: ``surrogate`` not a known pairwise surrogate (:func:`~fccolit.surrogates.pairwise_surrogate`);
            and :class:`MiniBatchPAUC`'s.

    Example:
        >>> from fccolit.algorithms.pauc import PairwiseAUC
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = PairwiseAUC(LinearScorer(), data_sizes=data.sizes)
        >>> module.objective.alpha, module.objective.beta  # the whole FPR range: every pair counts
        (0.0, 1.0)
    """

    def __init__(
        self, model: nn.Module, surrogate: str = "logistic", margin: float = 1.0, scale: float = 1.0, **kwargs: Any
    ) -> None:
        kwargs.setdefault("metrics", ["auroc", "pauc_0.05_0.5"])
        super().__init__(model, PartialAUCRangeSurrogate(0.0, 1.0, surrogate, margin, scale), **kwargs)
