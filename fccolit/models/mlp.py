"""Scorers on feature vectors: a linear model (the papers' LIBSVM experiments) and an MLP.

Both take dense ``[B, D]`` inputs or ``torch.sparse_csr`` ones (the batches of
``LibSVMDataModule(layout="sparse")``): their first layer, :class:`SparseInputLinear`, is an ``nn.Linear`` whose
sparse branch is an embedding bag (one weighted sum of weight columns per row) costing O(B + nnz · out) instead of
O(B · D · out). The parameters and the checkpoints are the same in both layouts.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class SizedModel(nn.Module):
    """A backbone whose input width can come from the data: a base class, subclasses implement :meth:`build`.

    The algorithm module calls :meth:`bind_sizes` with the DataModule's ``sizes`` (linked by the CLI). A model
    built with ``in_features=None`` creates its layers then; one built with an explicit width checks that the
    data agrees and otherwise names both numbers. ``forward(x) = self.net(x).squeeze(-1)``.

    Args:
        in_features: input width (None: ``sizes[size_key]`` of the data, ``"num_features"`` by default).

    Raises:
        ValueError: :meth:`bind_sizes` with a width other than an explicit ``in_features``.
        RuntimeError: ``forward`` before the layers exist (``in_features=None`` and no sizes bound yet).
        NotImplementedError: a subclass without :meth:`build`.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from fccolit.models import SizedModel
        >>> class Linear(SizedModel):
        ...     def build(self, in_features):
        ...         self.net = nn.Linear(in_features, 1)
        >>> model = Linear(None)  # no layers yet
        >>> model.bind_sizes({"num_features": 3})
        >>> model(torch.randn(4, 3)).shape
        torch.Size([4])
        >>> model.bind_sizes({"num_features": 5})
        Traceback (most recent call last):
        ...
        ValueError: Linear was configured with in_features=3 but the data has num_features=5: ...
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    size_key = "num_features"

    def __init__(self, in_features: int | None) -> None:
        super().__init__()
        self.in_features = in_features
        if in_features is not None:
            self.build(int(in_features))

    def build(self, in_features: int) -> None:
        raise NotImplementedError

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        if self.size_key not in sizes:
            return
        width = int(sizes[self.size_key])
        if self.in_features is None:
            self.in_features = width
            self.build(width)
        elif int(self.in_features) != width:
            raise ValueError(
                f"{type(self).__name__} was configured with in_features={self.in_features} but the data has "
                f"{self.size_key}={width}: remove in_features from the model config (it is taken from the data) "
                "or fix it."
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_features is None:
            raise RuntimeError(
                f"{type(self).__name__} has no layers yet: pass in_features, or build it through an fccolit module "
                "with the DataModule's sizes."
            )
        return self.net(x).squeeze(-1)


class SparseInputLinear(nn.Linear):
    """``nn.Linear`` that also takes a sparse CSR input ``[B, in_features]``, computed as an embedding bag.

    Dense inputs go through ``nn.Linear.forward`` unchanged. For a ``torch.sparse_csr`` input row ``b`` with
    stored columns ``j`` and values ``x_bj``, the output is ``Σ_j x_bj · W[:, j] + bias``: a gather of the
    ``nnz`` weight columns and an ``index_add`` into ``[out, B]``, O(B + nnz · out) forward and backward (the
    weight's gradient stays a dense ``[out, in_features]`` tensor, as every torch optimizer expects). The input's
    values must have the weight's dtype, as for a dense input. On CUDA, ``index_add_`` sums in an arbitrary order
    unless ``torch.use_deterministic_algorithms(True)``.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.

    Raises:
        ValueError: a sparse input that is not 2-D or is not ``in_features`` wide.

    Example:
        >>> import torch
        >>> from fccolit.models import SparseInputLinear
        >>> layer = SparseInputLinear(4, 2)
        >>> dense = torch.tensor([[0.0, 1.5, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0]])
        >>> layer(dense.to_sparse_csr()).shape
        torch.Size([2, 2])
        >>> torch.allclose(layer(dense.to_sparse_csr()), layer(dense))  # the same map in both layouts
        True
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.layout != torch.sparse_csr:
            return super().forward(x)
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__}: sparse input of shape {tuple(x.shape)}, expected [B, {self.in_features}]"
            )
        crow, columns, values = x.crow_indices(), x.col_indices(), x.values()
        rows = torch.repeat_interleave(torch.arange(x.shape[0], device=values.device), crow.diff())
        terms = self.weight.index_select(1, columns) * values  # [out, nnz]
        out = terms.new_zeros(self.out_features, x.shape[0]).index_add_(1, rows, terms).t()
        return out if self.bias is None else out + self.bias


class LinearScorer(SizedModel):
    """Linear scorer ``s(x) = ⟨w, x⟩ + b``: input ``[B, in_features]`` (dense or sparse CSR), output ``[B]``.

    Args:
        in_features: input width D (None: the DataModule's ``num_features``, set by :meth:`~SizedModel.bind_sizes`).
        bias: learn the offset ``b``.

    Raises:
        ValueError: :meth:`~SizedModel.bind_sizes` with a ``num_features`` other than an explicit ``in_features``;
            a sparse input of another width (:class:`SparseInputLinear`).
        RuntimeError: ``forward`` before the layers exist (``in_features=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> model = LinearScorer(in_features=3)
        >>> model(torch.randn(4, 3)).shape
        torch.Size([4])
    """

    def __init__(self, in_features: int | None = None, bias: bool = True) -> None:
        self.bias = bias
        super().__init__(in_features)

    def build(self, in_features: int) -> None:
        self.net = SparseInputLinear(in_features, 1, bias=self.bias)


class MLP(SizedModel):
    """Multi-layer perceptron scorer ``[B, in_features] -> [B]`` (or ``[B, out_features]``).

    Input ``[B, in_features]`` (dense or sparse CSR: the first layer is a :class:`SparseInputLinear`, an embedding
    bag on sparse rows), output ``[B]`` (or ``[B, out_features]``).

    Args:
        in_features: input width (None: taken from the data).
        hidden: widths of the hidden layers.
        out_features: 1 for a scorer.
        dropout: dropout after each hidden activation.

    Raises:
        ValueError: :meth:`~SizedModel.bind_sizes` with a ``num_features`` other than an explicit ``in_features``;
            a sparse input of another width (:class:`SparseInputLinear`).
        RuntimeError: ``forward`` before the layers exist (``in_features=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import MLP
        >>> MLP(in_features=3, hidden=[8])(torch.randn(4, 3)).shape
        torch.Size([4])
        >>> MLP(in_features=3, hidden=[8], out_features=2)(torch.randn(4, 3)).shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        in_features: int | None = None,
        hidden: Sequence[int] = (64,),
        out_features: int = 1,
        dropout: float = 0.0,
    ) -> None:
        self.hidden, self.out_features, self.dropout = tuple(hidden), out_features, dropout
        super().__init__(in_features)

    def build(self, in_features: int) -> None:
        layers: list[nn.Module] = []
        width = in_features
        for h in self.hidden:
            layers += [(SparseInputLinear if not layers else nn.Linear)(width, h), nn.ReLU()]
            if self.dropout:
                layers.append(nn.Dropout(self.dropout))
            width = h
        layers.append((SparseInputLinear if not layers else nn.Linear)(width, self.out_features))
        self.net = nn.Sequential(*layers)
