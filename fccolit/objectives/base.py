"""The FCCO problem description shared by every algorithm.

An objective is ``F(w) = (1/n) Σ_i f_i(g_i(w))`` with an inner value ``g_i ∈ R^{d'}`` that is an average over a
large set tied to the outer index ``i``. An objective says three things, and nothing about how it is solved:

* :meth:`FCCOObjective.inner`: from the scores of a batch, the outer indices present and a differentiable
  mini-batch estimate ``ĝ_i(w) ∈ R^{d'}`` for each of them (plus per-row context that ``f_i`` needs);
* :meth:`FCCOObjective.outer` / :meth:`FCCOObjective.outer_grad`: ``f_i(u)`` and ``∇f_i(u)``;
* :meth:`FCCOObjective.exact_value`: the true ``F`` when the batch holds all the data (tests, validation).

Any algorithm (SOX, SOAP, MOAP, ...) then forms ``mean_i stop_grad(∇f_i(u_i)) · ĝ_i(w)`` and steps on it. A user
with a new task writes one objective and gets every algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn


@dataclass
class InnerBatch:
    """The inner estimates of one batch.

    Attributes:
        index: ``[B1]`` long, outer indices (rows of the per-index state).
        value: ``[B1, d']`` mini-batch estimate ĝ_i(w) of the inner value, differentiable w.r.t. the scores.
        context: per-row tensors (first dimension B1) that ``f_i`` depends on (e.g. relevance, list size).
        correction: ``[B1, d']`` the same estimate at the previous parameters (the MSVR correction of SONEX /
            ALEXR2; set by the algorithm, not the objective), or None.

    Example:
        >>> import torch
        >>> from fccolit.objectives import InnerBatch
        >>> inner = InnerBatch(index=torch.tensor([4, 7, 9]), value=torch.tensor([[0.1], [0.2], [0.3]]))
        >>> inner.select(torch.tensor([0, 2])).index.tolist()
        [4, 9]
    """

    index: torch.Tensor
    value: torch.Tensor
    context: dict[str, torch.Tensor] = field(default_factory=dict)
    correction: torch.Tensor | None = None

    def select(self, keep: torch.Tensor) -> "InnerBatch":
        """The rows at positions ``keep`` (``[R]`` long) of the index, value, context and correction."""
        return InnerBatch(
            index=self.index.index_select(0, keep),
            value=self.value.index_select(0, keep),
            context={k: v.index_select(0, keep) for k, v in self.context.items()},
            correction=None if self.correction is None else self.correction.index_select(0, keep),
        )


class FCCOObjective(nn.Module):
    """Base class of the FCCO problems. Subclasses set the class attributes and implement ``inner``/``outer``.

    Class attributes:
        inner_dim: d', the number of components of ``g_i``.
        task: ``"binary"`` or ``"ranking"``, selects the default validation metrics and the batch fields.
        state_rows: the DataModule size that counts the outer indices (a key of ``datamodule.sizes``).
        needs_global_batch: the inner estimate of a row uses other rows' samples (e.g. AP: every sample of the
            batch competes with every positive), so under DDP the scores are all-gathered with gradient and
            every rank evaluates the objective on the global batch.
        batch_fields: the batch fields ``inner`` reads (those present are gathered across ranks when
            ``needs_global_batch``; :meth:`local_fields` may add fields computed from this rank's inputs first).
        default_metrics: metric names logged at validation and test when the module is not told otherwise.
        multi_task: the objective takes multi-task batches: a ``task`` field ``[B]`` (gathered with
            ``batch_fields``), each position's score for its task, and inner sets restricted to one task.

    Raises:
        KeyError: in :meth:`num_rows`, data sizes without ``state_rows``.
        ValueError: in :meth:`data_size`, a size the objective needs before the sizes are bound (:meth:`bind_sizes`).

    Example:
        A new problem is one subclass, ``F = mean_i (mean_j s_j − s_i)²`` here (one state row per sample):

        >>> import torch
        >>> from fccolit.objectives import FCCOObjective, InnerBatch
        >>> class SpreadAroundTheMean(FCCOObjective):
        ...     batch_fields = ("index",)
        ...     def inner(self, scores, batch):  # ĝ_i = mean_j s_j − s_i over the batch
        ...         return InnerBatch(index=batch["index"], value=(scores.mean() - scores).unsqueeze(1))
        ...     def outer(self, u, context):  # f(u) = u²
        ...         return u[:, 0].square()
        >>> objective = SpreadAroundTheMean()
        >>> scores, batch = torch.tensor([1.0, 2.0, 3.0]), {"index": torch.arange(3)}
        >>> round(float(objective.exact_value(scores, batch)), 4)
        0.6667
        >>> objective.outer_grad(torch.tensor([[0.5]]), {}).tolist()  # ∇f by autograd unless overridden
        [[1.0]]
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    inner_dim: ClassVar[int] = 1
    task: ClassVar[str] = "binary"
    state_rows: ClassVar[str] = "num_samples"
    needs_global_batch: ClassVar[bool] = False
    batch_fields: ClassVar[tuple[str, ...]] = ()
    default_metrics: ClassVar[tuple[str, ...]] = ()
    multi_task: ClassVar[bool] = False

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        raise NotImplementedError

    def local_fields(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Under DDP with ``needs_global_batch``: ``batch`` plus fields ``[B, ...]`` the objective computes from this
        rank's inputs before the global batch is gathered (e.g. a frozen model's scores of the images, which are not
        gathered themselves). Default: ``batch`` unchanged."""
        return batch

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``f_i(u_i)`` for each row: ``u`` is ``[B1, d']``, returns ``[B1]``."""
        raise NotImplementedError

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``∇f_i(u_i)``, ``[B1, d']``. The default differentiates :meth:`outer`; override with the closed form."""
        with torch.enable_grad():
            u = u.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.outer(u, context).sum(), u)
        return grad

    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[str, int] = {}

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        """Receive the DataModule's sizes before the state is built (called by the algorithm module when it is built).

        The default keeps them in ``self.sizes`` for objectives whose estimator needs data counts (e.g. the
        class-reweighted AP estimator needs n and m), read with :meth:`data_size`.
        """
        self.sizes = {k: int(v) for k, v in sizes.items()}

    def data_size(self, key: str, why: str) -> int:
        """The bound size ``key`` (e.g. ``"num_samples"``); ``why`` names the option that needs it in the error.

        Raises:
            ValueError: the sizes were not bound or lack ``key``.
        """
        if key not in self.sizes:
            raise ValueError(
                f"{type(self).__name__}({why}) needs the training data's '{key}': build it through an fccolit module "
                "with the DataModule's sizes (data_sizes), or call bind_sizes(sizes)"
            )
        return self.sizes[key]

    def state_bounds(self, sizes: dict[str, int]) -> tuple[object, object]:
        """Projection box Ω for the state rows as ``(lower, upper)`` (None: no projection)."""
        return None, None

    def bind_model(self, model: nn.Module) -> None:
        """Receive the backbone once it is built for the data (called by the algorithm module after
        :meth:`bind_sizes`). Objectives that need it, e.g. a frozen copy ``w_old`` for non-forgetting constraints
        (:class:`~fccolit.objectives.ContinualLearningObjective`), take it here. The default does nothing."""

    def num_rows(self, sizes: dict[str, int]) -> int:
        """Number of outer indices, read from the DataModule's sizes."""
        if self.state_rows not in sizes:
            raise KeyError(
                f"{type(self).__name__} keeps one state row per '{self.state_rows}', but the DataModule sizes only "
                f"have {sorted(sizes)}: use a DataModule that provides it, or pass data_sizes explicitly."
            )
        return int(sizes[self.state_rows])

    def exact_value(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """True ``F`` when ``batch`` is the whole data set (every outer index and its whole inner set)."""
        inner = self.inner(scores, batch)
        return self.outer(inner.value, inner.context).mean()
