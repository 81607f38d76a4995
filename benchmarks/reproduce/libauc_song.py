"""LibAUC's SONG as a second stage of the ranking protocols, so that ``ranking_movielens.py`` and
``ranking_letor.py`` compare the shipped SONG with LibAUC's method at the same budget (the same warm-up, restart,
batches, schedule and lr).

LibAUC 2.0.1 (Yuan, Zhu, Qiu, Wang, Guo & Yang, "LibAUC: A Deep Learning Library for X-Risk Optimization", KDD 2023,
arXiv:2306.03065): its ``NDCGLoss`` (SONG's estimator: the moving average u of each (user, item) pair's inner value,
γ0 = ``ema_weight``, squared hinge with margin 1; u updated before the gradient, its "fresh" reading) and its ``SONG``
optimizer (``mode="adam"``: Adam on gradients clipped at ±1). Needs ``pip install --no-deps libauc==2.0.1``
(``make bench`` installs it).

LibAUC's loss reads a fixed layout: each row's first ``num_pos`` columns are relevant items (its ``TriSampler``
repeats a user's relevant items when it has fewer), and every column of the row is a comparison item, with
``num_item`` × the row's mean surrogate as the item's rank estimate. The MovieLens batches have that layout
(``layout="positives_first"``). Learning-to-rank slates do not (shuffled, padded, graded relevance, fewer relevant
documents than ``num_pos``): ``layout="lists"`` builds it from them (:func:`libauc_list_predictions`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from fccolit.algorithms.ranking import MiniBatchRanking
from fccolit.objectives import LambdaRankLoss

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libauc_compare import libauc_batch  # noqa: E402  (the field names LibAUC's NDCGLoss reads)

#: the score given to a padded comparison column: the squared hinge ``max(0, c − (s_pos − s))²`` is 0 there
PADDING_SCORE = -1e4


def libauc_list_predictions(scores: torch.Tensor, batch: dict[str, torch.Tensor],
                            num_positives: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """LibAUC's layout of learning-to-rank slates: ``[B, P + L]`` predictions and their LibAUC batch fields.

    Columns ``0..P−1`` are the row's relevant documents (relevance > 0) in slate order, repeated cyclically when the
    row has fewer than P (as LibAUC's ``TriSampler`` repeats a user's positives); columns ``P..P+L−1`` are the slate's
    other real documents at their scores and every other column :data:`PADDING_SCORE` (no surrogate, no gradient).
    So ``(P + L)`` × a row's mean squared hinge is its sum over the slate's documents (each relevant document once per
    slot it fills): with ``num_item = P + L``, LibAUC's rank estimate of a list no longer than L is the list's own.

    Args:
        scores: ``[B, L]`` the model's scores of the slates.
        batch: the slates' fields (``relevance``, ``mask``, ``pair_index``, ``query``, ``num_relevant``,
            ``ideal_dcg``); every row has a relevant document (training queries do).
        num_positives: P.

    Returns:
        ``([B, P + L]`` predictions, the LibAUC batch: ``rating`` and ``user_item_id`` ``[B, P + L]``, of which
        LibAUC reads the first P columns).
    """
    mask, relevance = batch["mask"].to(torch.bool), batch["relevance"]
    relevant = mask & (relevance > 0)
    count = relevant.sum(1, keepdim=True).clamp_min(1)
    first = torch.argsort((~relevant).to(torch.int8), dim=1, stable=True)  # relevant columns first, in slate order
    slots = first.gather(1, torch.arange(num_positives, device=scores.device).unsqueeze(0) % count)  # [B, P]
    in_slots = relevant & (relevant.cumsum(1) <= num_positives)  # the relevant columns that fill a slot
    rest = torch.where(mask & ~in_slots, scores, torch.full_like(scores, PADDING_SCORE))
    predictions = torch.cat([scores.gather(1, slots), rest], dim=1)
    zeros = torch.zeros_like(rest)
    fields = libauc_batch({**batch, "relevance": torch.cat([relevance.gather(1, slots), zeros], dim=1),
                           "pair_index": torch.cat([batch["pair_index"].gather(1, slots),
                                                    zeros.to(batch["pair_index"].dtype)], dim=1)})
    return predictions, fields


class LibAUCSONG(MiniBatchRanking):
    """The second stage trained by LibAUC's ``NDCGLoss`` on fccolit ranking batches (``MiniBatchRanking``'s loop,
    evaluation and warm-up hooks; its ``loss`` slot is unused).

    Args:
        model: the scorer (NeuMF, or the context-aware ranker of the learning-to-rank configs).
        ema_weight: γ0 of LibAUC's ``NDCGLoss`` (``gamma0``).
        num_positives: P, the relevant items LibAUC reads at the start of each row (the data's ``num_positives``).
        margin: the squared hinge's margin.
        layout: ``"positives_first"`` (MovieLens batches: P rated items, then unrated ones; LibAUC's ``num_item`` is
            the catalogue size) or ``"lists"`` (learning-to-rank slates, :func:`libauc_list_predictions`;
            ``num_item`` is P + ``slate_length``).
        slate_length: L of the learning-to-rank slates (``layout="lists"`` only).
        **kwargs: :class:`~fccolit.algorithms.ranking.MiniBatchRanking`'s arguments (``data_sizes`` gives the number
            of users or queries, items and pairs that LibAUC's state is sized by).
    """

    def __init__(self, model: nn.Module, ema_weight: float = 0.1, num_positives: int = 10, margin: float = 1.0,
                 layout: Literal["positives_first", "lists"] = "positives_first", slate_length: int = 100,
                 **kwargs: Any) -> None:
        from libauc.losses import NDCGLoss

        if layout not in ("positives_first", "lists"):
            raise ValueError(f"LibAUCSONG: layout must be 'positives_first' or 'lists', got {layout!r}")
        super().__init__(model, LambdaRankLoss(), **kwargs)
        sizes = kwargs["data_sizes"]
        self.layout, self.num_positives = layout, int(num_positives)
        num_items = sizes["num_items"] if layout == "positives_first" else self.num_positives + int(slate_length)
        num_users = sizes["num_users"] if "num_users" in sizes else sizes["num_queries"]
        self.libauc_loss = NDCGLoss(N=sizes["num_pairs"], num_user=num_users, num_item=num_items,
                                    num_pos=num_positives, gamma0=ema_weight, margin=margin, device="cpu")

    def ranking_loss(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.layout == "lists":
            return self.libauc_loss(*libauc_list_predictions(scores, batch, self.num_positives))
        return self.libauc_loss(scores, libauc_batch(batch))
