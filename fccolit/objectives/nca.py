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
    r"""NCA: learn an embedding ``z = A x`` in which each point's stochastic nearest neighbour has its class.

    .. math::

        F(A) = \frac{1}{n} \sum_{i \in D} f(g_i(A)), \qquad f(u) = -\frac{u_1}{u_2}, \qquad
        g_i(A) = \frac{1}{|S_i|} \sum_{j \in S_i} \big[\, \mathbb{1}(y_j = y_i)\, k_{ij},\; k_{ij} \,\big],
        \qquad k_{ij} = \exp(-\lVert z_i - z_j \rVert^2)

    with ``S_i = D ∖ {x_i}``: ``−f(g_i)`` is the probability that the stochastic neighbour of ``x_i`` (drawn
    with probability ∝ ``k_ij`` among the other points) has the class of ``x_i``, and ``F`` is minus the
    expected leave-one-out accuracy of that classifier.

    Choices, and where they differ from the paper's printed eq. (8):

    * ``C_i = {x_j ∈ S_i : y_j = y_i}`` **excludes the anchor**. As printed, C_i = {x_j ∈ D : y_j = y_i}
      contains x_i itself, so the numerator would get a ``k_ii = 1`` term that the denominator (over
      S_i = D∖{x_i}) lacks and ``−f`` could exceed 1; standard NCA (p_ii = 0) excludes it.
    * ``F`` is the mean over the points (the FCCO form). The paper's eq. (8) sums them: its value is n × ours.
    * ``inner_scale="mean"`` (default) divides the inner sums by ``|S_i| = n − 1``; ``"sum"`` keeps the paper's
      sums. ``f`` is scale-invariant and ``∇f(c·u) = ∇f(u)/c``, so both give the same objective and the same
      updates of every algorithm (tested); ``"sum"`` needs ``num_samples``
      (:meth:`bind_sizes`).

    Mini-batch estimate: every point of the batch is an anchor, and its inner set is the rest of the batch
    (``B ∖ {anchor}``, the "widely used" minibatch NCA of the paper)::

        ĝ_i = (1/(|B| − 1)) Σ_{j∈B, j≠i} [ 1(y_j = y_i) k_ij , k_ij ]         (× (n − 1) for "sum")

    unbiased for ``g_i`` when the batch is a uniform sample without replacement (the other members of the batch
    are then a uniform sample of D∖{x_i}; :class:`~fccolit.samplers.uniform.UniformBatchSampler`). The anchor
    is excluded by its position in the batch. The inner set couples the batch, so the objective needs the
    global batch under DDP.

    Model: NCA learns a linear map A (``z = A x``); any model that maps ``batch["x"]`` to an embedding ``[B, k]``
    works (e.g. ``fccolit.models.MLP(hidden=[], out_features=k)``: its bias cancels in ``z_i − z_j`` and gets
    zero gradient). A ``[B]`` output is read as ``k = 1``.

    Numerics: ``k_ij`` underflows to 0 for far-apart points (‖z_i − z_j‖² > 745 in float64, > 103 in float32);
    when it does for every other point of the batch, ``ĝ_i2 = 0`` and ``f`` is undefined. On the CPU this is an
    error naming the cause; keep the embedding's distances O(1) at initialisation (scale A or the features).
    A per-batch shift of the exponent cannot help: the state must stay on one scale across steps.

    Metrics: there is no validation metric of embeddings in :mod:`fccolit.metrics`, so ``default_metrics`` is
    empty and an algorithm logs only ``train/objective`` (the plug-in ``mean_i f(u_i)``); :meth:`exact_value`
    on a whole split gives the true F.

    Batch fields: ``y`` ``[B]`` long (class labels) and ``index`` ``[B]`` (row of the point in the state).
    State rows: ``num_samples``; d' = 2.
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
