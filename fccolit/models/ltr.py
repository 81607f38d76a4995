"""Learning-to-rank scorers on feature lists ``[B, L, F]`` with a padding mask ``[B, L]``."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fccolit.models.mlp import SizedModel


class ListMLP(SizedModel):
    """A pointwise MLP scorer applied to every entry of every list: ``[B, L, F] -> [B, L]``.

    ``forward(features, mask=None)``: the mask ``[B, L]`` is accepted for a uniform interface; entries are scored
    independently, so padding cannot change the scores of real entries.

    Args:
        in_features: F (None: the DataModule's ``num_features``, set by :meth:`~SizedModel.bind_sizes`).
        hidden: widths of the hidden layers.
        dropout: dropout after each hidden activation.

    Raises:
        ValueError: :meth:`~SizedModel.bind_sizes` with a ``num_features`` other than an explicit ``in_features``.
        RuntimeError: ``forward`` before the layers exist (``in_features=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import ListMLP
        >>> model = ListMLP(in_features=5, hidden=[8])
        >>> model(torch.randn(2, 4, 5), torch.ones(2, 4, dtype=torch.bool)).shape
        torch.Size([2, 4])
    """

    def __init__(self, in_features: int | None = None, hidden: Sequence[int] = (64, 32), dropout: float = 0.0) -> None:
        self.hidden, self.dropout = tuple(hidden), dropout
        super().__init__(in_features)

    def build(self, in_features: int) -> None:
        layers: list[nn.Module] = []
        width = in_features
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if self.dropout:
                layers.append(nn.Dropout(self.dropout))
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(features)

    def last_layer(self) -> nn.Linear:
        return self.net[-1]

    def reset_last_layer(self) -> None:
        self.last_layer().reset_parameters()


class ContextAwareRanker(SizedModel):
    """Context-aware list scorer ``[B, L, F] -> [B, L]`` (Pobrotyn et al. 2020), Qiu et al.'s (ICML 2022) LTR backbone.

    Qiu et al., arXiv:2202.12183, §7.1. Every entry's score depends on the whole list through self-attention over
    its real entries.

    ``features [B, L, F] → Linear(F, d) + ReLU → N × TransformerEncoderLayer(d, heads, d_ff, pre-norm) →
    LayerNorm → Linear(d, 1) → scores [B, L]``. No positional encoding: the scores are equivariant to
    permutations of the list, and padded entries (``mask`` False) are excluded from the attention, so padding
    never changes the scores of real entries.

    Args:
        in_features: F (None: the DataModule's ``num_features``).
        d_model: width of the input projection and of the encoder (96 in the authors' configs).
        num_layers: N encoder blocks (2).
        num_heads: attention heads (1).
        dim_feedforward: d_ff (384).
        dropout: dropout in the encoder (0.1).

    ``forward(features [B, L, F], mask [B, L] | None) -> [B, L]``.

    Raises:
        ValueError: ``d_model`` not divisible by ``num_heads``; :meth:`~SizedModel.bind_sizes` with a
            ``num_features`` other than an explicit ``in_features``.
        RuntimeError: ``forward`` before the layers exist (``in_features=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import ContextAwareRanker
        >>> model = ContextAwareRanker(in_features=5, d_model=8, num_layers=1, dim_feedforward=16).eval()
        >>> features, mask = torch.randn(2, 4, 5), torch.tensor([[True] * 4, [True, True, False, False]])
        >>> scores = model(features, mask)
        >>> scores.shape
        torch.Size([2, 4])
        >>> features[1, 2:] = 100.0  # padded entries do not change the scores of real ones
        >>> torch.allclose(model(features, mask)[1, :2], scores[1, :2])
        True
    """

    def __init__(
        self,
        in_features: int | None = None,
        d_model: int = 96,
        num_layers: int = 2,
        num_heads: int = 1,
        dim_feedforward: int = 384,
        dropout: float = 0.1,
    ) -> None:
        self.d_model, self.num_layers, self.num_heads = int(d_model), int(num_layers), int(num_heads)
        self.dim_feedforward, self.dropout = int(dim_feedforward), float(dropout)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        super().__init__(in_features)

    def build(self, in_features: int) -> None:
        self.input = nn.Sequential(nn.Linear(in_features, self.d_model), nn.ReLU())
        layer = nn.TransformerEncoderLayer(
            self.d_model, self.num_heads, self.dim_feedforward, self.dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, self.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(self.d_model)
        self.output = nn.Linear(self.d_model, 1)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.in_features is None:
            raise RuntimeError("ContextAwareRanker has no layers yet: pass in_features, or build it through an fccolit "
                               "module with the DataModule's sizes.")
        padding = None
        if mask is not None:
            padding = ~mask.to(torch.bool)
            padding = padding & ~padding.all(1, keepdim=True)  # a list with no real entry: attend to all (ignored)
        x = self.encoder(self.input(features), src_key_padding_mask=padding)
        return self.output(self.norm(x)).squeeze(-1)

    def last_layer(self) -> nn.Linear:
        return self.output

    def reset_last_layer(self) -> None:
        self.output.reset_parameters()
