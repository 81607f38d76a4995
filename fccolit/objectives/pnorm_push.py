"""The p-norm push (Rudin 2009) as an FCCO problem, in the corrected form of Wang & Yang (ICML 2022), §4.2.

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Rudin 2009: Cynthia Rudin, "The P-Norm Push: A Simple Convex Ranking Algorithm that Concentrates at the Top
      of the List", JMLR 10, 2009.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.surrogates import SurrogateName, pairwise_surrogate


class PNormPushLoss(FCCOObjective):
    r"""The p-norm push (Rudin 2009) as an FCCO objective (Wang & Yang, ICML 2022, §4.2).

    It pushes every negative below the positives, with a p-norm that concentrates on the negatives ranked highest:

    .. math::

        F(w) = \frac{1}{|S_-|} \sum_{i \in S_-} f(g_i(w)), \qquad f(u) = u^p,
        \qquad g_i(w) = \frac{1}{|S_+|} \sum_{j \in S_+} ℓ(s_i - s_j)

    with ``i`` a negative, ``j`` a positive and ``ℓ = exp``. One state row per negative (``num_negatives``, d' = 1).
    Batch fields: ``y`` ``[B]`` (1 positive, 0 negative) and ``neg_index`` ``[B]`` (state row of each negative, −1 for
    positives), as :func:`fccolit.data.binary_fields` makes them; scores ``[B]``. The inner estimate is the mean over the
    batch's positives, unbiased when they are a uniform sample of S_+ (a :class:`~fccolit.samplers.DualSampler`
    batch); they are shared by every negative, so under DDP the batch is gathered.

    Args:
        p: the norm's exponent p > 1 (the paper uses p = 4).
        surrogate: ℓ, ``"exp"`` (Rudin's and the paper's) or any name of :mod:`fccolit.surrogates` (non-negative ones
            keep ``u^p`` meaningful for non-integer p).
        scale: the slope c of ``exp(c·d)`` (and of the logistic / sigmoid surrogates). Default 1 (the paper).
        margin: the margin of the hinge-type surrogates (unused by ``"exp"``).

    Raises:
        ValueError: ``p ≤ 1`` or an unknown surrogate; in :meth:`inner` on the CPU, a batch without a positive.

    Example:
        >>> import torch
        >>> from fccolit.objectives import PNormPushLoss
        >>> objective = PNormPushLoss(p=4.0)
        >>> batch = {"y": torch.tensor([1, 0, 1, 0]), "neg_index": torch.tensor([-1, 0, -1, 1])}
        >>> scores = torch.tensor([1.0, 0.5, 0.8, -0.5])
        >>> inner = objective.inner(scores, batch)  # one row per negative
        >>> inner.index.tolist(), [round(v, 4) for v in inner.value[:, 0].tolist()]
        ([0, 1], [0.6737, 0.2478])
        >>> round(float(objective.exact_value(scores, batch)), 4)
        0.1049

    This is the "Rudin-correct" reading of Wang & Yang (ICML 2022), §4.2: their text says D = S_+ and S_i = S_−,
    and their formula has ``ℓ(s_j − s_i)``, which would penalize positives ranked *above* negatives; the formula's outer
    sum over S_− and the authors' evaluation code agree with the form above. ``f`` is convex and increasing, so for a
    linear model and convex ℓ the problem is in the convex class of SOX's Theorem 3; the plug-in (BSGD) estimator is
    biased for p > 1 (Jensen), the bias floor SOX removes (``benchmarks/bias_floor.py``). With ``surrogate="exp"`` the
    pairwise sum factorizes and is evaluated in the log domain in O(|B|). The scores are used as they are (the papers'
    linear model); ``exp(·)^p`` overflows easily in float32: scale the features and keep the step size small.
    """

    inner_dim: ClassVar[int] = 1
    task: ClassVar[str] = "binary"
    state_rows: ClassVar[str] = "num_negatives"
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "neg_index")
    default_metrics: ClassVar[tuple[str, ...]] = ("ap", "auroc", "pauc_0_0.1")

    def __init__(self, p: float = 4.0, surrogate: SurrogateName = "exp", scale: float = 1.0, margin: float = 1.0) -> None:
        super().__init__()
        if not p > 1.0:
            raise ValueError(f"PNormPushLoss needs p > 1 (the paper uses p = 4), got p={p}")
        self.p, self.surrogate, self.scale, self.margin = float(p), surrogate, float(scale), float(margin)
        self.loss = pairwise_surrogate(surrogate, margin, scale)

    # ------------------------------------------------------------------ the inner values
    def _inner_values(self, s_neg: torch.Tensor, s_pos: torch.Tensor) -> torch.Tensor:
        """``[N_−]`` means over ``s_pos`` of ``ℓ(s_i − s_j)`` for every ``s_i`` in ``s_neg``."""
        if self.surrogate == "exp":
            log_mean = torch.logsumexp(-self.scale * s_pos, dim=0) - torch.log(
                torch.tensor(float(s_pos.numel()), dtype=s_pos.dtype, device=s_pos.device)
            )
            return torch.exp(self.scale * s_neg + log_mean)
        return self.loss(s_neg.unsqueeze(1) - s_pos.unsqueeze(0)).mean(dim=1)

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        s = scores.reshape(-1)
        positive = batch["y"].reshape(-1) == 1
        if s.device.type == "cpu" and not bool(positive.any()):
            raise ValueError(
                "PNormPushLoss: the batch holds no positive example, so no negative has an inner sample; use a batch "
                "sampler that puts positives in every batch (fccolit.samplers.DualSampler)."
            )
        anchors = (batch["neg_index"].reshape(-1) >= 0).nonzero().flatten()
        value = self._inner_values(s.index_select(0, anchors), s[positive])
        return InnerBatch(index=batch["neg_index"].reshape(-1).index_select(0, anchors), value=value.unsqueeze(-1))

    # ------------------------------------------------------------------ the outer function
    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return u[:, 0].pow(self.p)

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.p * u.pow(self.p - 1.0)
