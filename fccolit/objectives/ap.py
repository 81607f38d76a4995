"""Average precision (AUPRC) as an FCCO problem (seed 001 §4.1, seed 002 eqs. (2)–(4))."""

from __future__ import annotations

from typing import ClassVar

import torch

from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.surrogates import pairwise_surrogate, surrogate_range


class AveragePrecision(FCCOObjective):
    r"""Smoothed average precision, minimised as ``F = −ÂP``.

    .. math::

        F(w) = \frac{1}{m} \sum_{i \in D_+} f(g_i(w)), \qquad f(u) = -\frac{u_1}{u_2},
        \qquad g_i(w) = \frac{1}{n} \sum_{j=1}^{n} \big[\, \mathbb{1}(y_j = 1)\, ℓ(s_j - s_i),\; ℓ(s_j - s_i) \,\big]

    One state row per positive (``pos_index``), two components: ``u_1`` tracks the surrogate count of positives
    ranked above positive ``i`` and ``u_2`` the surrogate count of all examples ranked above it (both as means
    over the data, so the scale of the state does not grow with n; f and the update are scale-invariant).
    The self pair ``j = i`` is kept in both sums: it gives ``u_2 ≥ ℓ(0)/n > 0``.

    The mini-batch estimate uses every sample of the batch as the inner set of every positive anchor in it, so
    under DDP the batch is gathered (with gradient) and every rank evaluates the global batch.

    Args:
        surrogate: ``"squared_hinge"`` (the papers' choice) or ``"sigmoid"`` (seed 002's logistic), or any name
            of :mod:`fccolit.surrogates`.
        margin: ``γ`` of the squared hinge ``max(0, s_j − s_i + γ)²`` (seed 002; LibAUC uses 1.0).
        scale: slope of the sigmoid / logistic surrogates.
        score_transform: ``"sigmoid"`` maps logits to (0, 1) as the papers do; ``"identity"`` uses raw scores.
        project: project the state onto seed 002's Ω (mean scale): ``u_1 ≤ M·m/n``, ``C/n ≤ u_2 ≤ M``, where
            ``C = ℓ(0)`` and ``M = max ℓ`` over sigmoid scores. Needs sigmoid scores.

    Batch fields: ``y`` ``[B]`` (1 positive, 0 negative) and ``pos_index`` ``[B]`` (row of each positive in the
    state, −1 for negatives).
    """

    inner_dim: ClassVar[int] = 2
    task: ClassVar[str] = "binary"
    state_rows: ClassVar[str] = "num_positives"
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "pos_index")
    default_metrics: ClassVar[tuple[str, ...]] = ("ap", "auroc", "pauc_0.05_0.5")

    def __init__(
        self,
        surrogate: str = "squared_hinge",
        margin: float = 1.0,
        scale: float = 1.0,
        score_transform: str = "sigmoid",
        project: bool = False,
    ) -> None:
        super().__init__()
        if score_transform not in ("sigmoid", "identity"):
            raise ValueError(f"score_transform must be 'sigmoid' or 'identity', got {score_transform!r}")
        if project and score_transform != "sigmoid":
            raise ValueError("project=True derives Ω from sigmoid scores in [0, 1]: use score_transform='sigmoid'")
        self.surrogate, self.margin, self.scale = surrogate, margin, scale
        self.score_transform, self.project = score_transform, project
        self.loss = pairwise_surrogate(surrogate, margin, scale)

    def _scores(self, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.reshape(-1)
        return torch.sigmoid(scores) if self.score_transform == "sigmoid" else scores

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        s = self._scores(scores)
        y = batch["y"].reshape(-1).to(s.dtype)
        anchors = (batch["pos_index"] >= 0).nonzero().flatten()
        ell = self.loss(s.unsqueeze(0) - s.index_select(0, anchors).unsqueeze(1))  # [P, B]: ℓ(s_j − s_i)
        value = ell @ (torch.stack([y, torch.ones_like(y)], dim=-1) / s.shape[0])  # [P, 2]: batch means
        return InnerBatch(index=batch["pos_index"].index_select(0, anchors), value=value)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return -u[:, 0] / u[:, 1]

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.stack([-1.0 / u[:, 1], u[:, 0] / u[:, 1].square()], dim=-1)

    def state_bounds(self, sizes: dict[str, int]) -> tuple[object, object]:
        if not self.project:
            return None, None
        c, m_bound = surrogate_range(self.surrogate, self.margin, self.scale, score_range=1.0)
        m, n = sizes["num_positives"], sizes["num_samples"]
        return (None, c / n), (m_bound * m / n, m_bound)
