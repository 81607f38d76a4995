"""Neighbourhood component analysis (NCA) as an FCCO problem (Wang & Yang, ICML 2022, §4.3, eq. (8)).

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Goldberger et al., "Neighbourhood Components Analysis", NIPS 2004 (NCA itself).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from fccolit._checks import check_choice
from fccolit.objectives.base import FCCOObjective, InnerBatch


class NCALoss(FCCOObjective):
    r"""Neighbourhood component analysis (NCA) as an FCCO objective (Wang & Yang, ICML 2022, §4.3, eq. (8)).

    ``F`` is minus the expected leave-one-out accuracy of the stochastic nearest-neighbour classifier in an
    embedding ``z = A x``:

    .. math::

        F(A) = \frac{1}{n} \sum_{i \in D} f(g_i(A)), \qquad f(u) = -\frac{u_1}{u_2}, \qquad
        g_i(A) = \frac{1}{|S_i|} \sum_{j \in S_i} \big[\, \mathbb{1}(y_j = y_i)\, k_{ij},\; k_{ij} \,\big],
        \qquad k_{ij} = \exp(-\lVert z_i - z_j \rVert^2)

    with ``S_i = D ∖ {x_i}``. One state row per point (``num_samples``, d' = 2). Batch fields: ``y`` ``[B]`` long
    (class labels) and ``index`` ``[B]`` (state row of each point); the scores are the embedding ``[B, k]`` (a ``[B]``
    output is read as k = 1). Every point of a batch is an anchor and its inner set is the rest of the batch,
    ``ĝ_i = (1/(|B| − 1)) Σ_{j∈B, j≠i} [1(y_j = y_i) k_ij, k_ij]``, unbiased for a uniform batch without replacement
    (:class:`~fccolit.samplers.uniform.UniformBatchSampler`); under DDP the batch is gathered.

    Args:
        inner_scale: ``"mean"`` (default: divide the inner sums by ``|S_i| = n − 1``) or ``"sum"`` (the paper's sums;
            needs ``num_samples``). ``f`` is scale-invariant: both give the same objective and the same updates (tested).

    Raises:
        ValueError: ``inner_scale`` not one of the two; in :meth:`inner`, a batch of fewer than 2 points, or
            ``"sum"`` before the data sizes are bound.
        FloatingPointError: in :meth:`inner` on the CPU, an anchor whose every kernel value underflowed to 0 (the
            embedding's distances are too large: ‖z_i − z_j‖² > 745 in float64, > 103 in float32).

    Example:
        >>> import torch
        >>> from fccolit.objectives import NCALoss
        >>> objective = NCALoss()
        >>> batch = {"y": torch.tensor([0, 0, 1, 1]), "index": torch.arange(4)}
        >>> z = torch.tensor([[0.0, 0.0], [0.1, 0.0], [1.0, 1.0], [1.1, 0.9]])
        >>> tuple(objective.inner(z, batch).value.shape)
        (4, 2)
        >>> round(float(objective.exact_value(z, batch)), 4)  # −(expected leave-one-out accuracy)
        -0.7682

    Where this differs from the paper's printed eq. (8) (Wang & Yang, ICML 2022, §4.3): ``C_i = {x_j ∈ S_i : y_j =
    y_i}`` excludes the anchor (as printed, the numerator gets a ``k_ii = 1`` the denominator lacks, and ``−f`` could
    exceed 1; standard NCA has p_ii = 0), and ``F`` is the mean over the points (the paper's sum is n × ours). Any model
    that maps ``batch["x"]`` to ``[B, k]`` works, e.g. ``fccolit.models.MLP(hidden=[], out_features=k)`` (its bias
    cancels in ``z_i − z_j``). There is no validation metric of embeddings in :mod:`fccolit.metrics`:
    ``default_metrics`` is empty and an algorithm logs only ``train/objective``.
    """

    inner_dim: ClassVar[int] = 2
    task: ClassVar[str] = "embedding"
    state_rows: ClassVar[str] = "num_samples"
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "index")
    default_metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, inner_scale: Literal["mean", "sum"] = "mean") -> None:
        super().__init__()
        check_choice("inner_scale", inner_scale, ("mean", "sum"))
        self.inner_scale = inner_scale

    def _scale(self, batch_size: int) -> float:
        """Multiplier of the inner sum over the batch's B − 1 other points."""
        if self.inner_scale == "mean":
            return 1.0 / (batch_size - 1)
        return (self.data_size("num_samples", "inner_scale='sum'") - 1) / (batch_size - 1)

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        z = scores if scores.dim() == 2 else scores.reshape(-1, 1)
        y = batch["y"].reshape(-1)
        b = z.shape[0]
        if b < 2:
            raise ValueError(f"NCALoss needs at least 2 points in a batch (each anchor's inner set is the rest), got {b}")
        diff = z.unsqueeze(1) - z.unsqueeze(0)  # [B, B, k]
        kernel = torch.exp(-diff.square().sum(-1))  # [B, B]: k_ij (the diagonal is excluded below)
        others = ~torch.eye(b, dtype=torch.bool, device=z.device)
        kernel = kernel * others
        same = (y.unsqueeze(1) == y.unsqueeze(0)).to(kernel.dtype)
        value = torch.stack([(kernel * same).sum(1), kernel.sum(1)], dim=-1) * self._scale(b)  # [B, 2]
        if value.device.type == "cpu" and bool((value[:, 1] == 0).any()):
            rows = torch.nonzero(value[:, 1] == 0).flatten()[:10].tolist()
            raise FloatingPointError(
                f"NCALoss: at batch positions {rows} every kernel value exp(−‖z_i − z_j‖²) underflowed to 0 (the "
                "embedding's distances are too large), so u_2 = 0 and f = −u_1/u_2 is undefined: scale down the "
                "features or the initial map A, or lower the learning rate."
            )
        return InnerBatch(index=batch["index"].reshape(-1), value=value)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return -u[:, 0] / u[:, 1]

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.stack([-1.0 / u[:, 1], u[:, 0] / u[:, 1].square()], dim=-1)
