"""LibAUC's SONG as a second stage of the MovieLens protocol, so that ``ranking_movielens.py`` compares the shipped
SONG with LibAUC's method at the same budget (the same warm-up, restart, batches, schedule and lr).

LibAUC 2.0.1 (Yuan, Zhu, Qiu, Wang, Guo & Yang, "LibAUC: A Deep Learning Library for X-Risk Optimization", KDD 2023,
arXiv:2306.03065): its ``NDCGLoss`` (SONG's estimator: the moving average u of each (user, item) pair's inner value,
γ0 = ``ema_weight``, squared hinge with margin 1; u updated before the gradient, its "fresh" reading) and its ``SONG``
optimizer (``mode="adam"``: Adam on gradients clipped at ±1). Needs ``pip install --no-deps libauc==2.0.1``
(``make venv`` installs it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fccolit.algorithms.ranking import MiniBatchRanking
from fccolit.objectives import LambdaRankLoss

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libauc_compare import libauc_batch  # noqa: E402  (the field names LibAUC's NDCGLoss reads)


class LibAUCSONG(MiniBatchRanking):
    """The second stage trained by LibAUC's ``NDCGLoss`` on the fccolit MovieLens batches (``MiniBatchRanking``'s
    loop, evaluation and warm-up hooks; its ``loss`` slot is unused).

    Args:
        model: the scorer (NeuMF).
        ema_weight: γ0 of LibAUC's ``NDCGLoss`` (``gamma0``).
        num_positives: the rated items of each user in a batch (the data's ``num_positives``; LibAUC reads the first
            ``num_positives`` columns of a slate as its relevant items).
        margin: the squared hinge's margin.
        **kwargs: :class:`~fccolit.algorithms.ranking.MiniBatchRanking`'s arguments (``data_sizes`` gives the number
            of users, items and pairs that LibAUC's state is sized by).
    """

    def __init__(self, model: nn.Module, ema_weight: float = 0.1, num_positives: int = 10, margin: float = 1.0,
                 **kwargs: Any) -> None:
        from libauc.losses import NDCGLoss

        super().__init__(model, LambdaRankLoss(), **kwargs)
        sizes = kwargs["data_sizes"]
        self.libauc_loss = NDCGLoss(N=sizes["num_pairs"], num_user=sizes["num_users"], num_item=sizes["num_items"],
                                    num_pos=num_positives, gamma0=ema_weight, margin=margin, device="cpu")

    def ranking_loss(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.libauc_loss(scores, libauc_batch(batch))
