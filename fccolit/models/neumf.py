"""NeuMF (He et al. 2017), the recommendation backbone of Qiu et al. (ICML 2022, §7.2), sized from the data.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
    * He et al. 2017: Xiangnan He, Lizi Liao, Hanwang Zhang, Liqiang Nie, Xia Hu and Tat-Seng Chua, "Neural
      Collaborative Filtering", WWW 2017.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class NeuMF(nn.Module):
    """Neural matrix factorization scorer of (user, item) pairs: ``forward(query [B], items [B, L]) -> [B, L]``.

    A GMF branch and an MLP branch on user and item embeddings, and one linear prediction layer on their concatenation (the "last layer" that the warm-up protocol
    re-initializes).

    ``score(u, i) = wᵀ [ p_u ⊙ q_i ; MLP([p'_u ; q'_i]) ] + b``

    Args:
        num_users, num_items: table sizes (None: taken from the DataModule's ``sizes`` by :meth:`bind_sizes`).
        embedding_dim: width of each of the four embedding tables (64 in the authors' RS scripts).
        layers: widths of the MLP branch (``[64]`` in the authors' scripts).
        dropout: dropout after every MLP layer (0.2 in the authors' scripts).
        init_std: standard deviation of the normal initialization of the embeddings (0.01, He et al.).
        sparse_embeddings: sparse gradients for the four embedding tables, so that an optimizer that updates only
            the batch's rows (:class:`fccolit.optim.LazyAdam`) costs O(batch) instead of O(users + items) per step
            (timings: ``benchmarks/results/libauc_compare.md``). Takes an optimizer that accepts sparse gradients,
            and no gradient clipping by norm.

    Shapes: ``forward(query [B], items [B, L]) -> [B, L]``; ``score_all(query [U]) -> [U, num_items]``. Item ids
    of −1 (padding) are scored as item 0; callers mask them.

    Raises:
        ValueError: empty ``layers``; :meth:`bind_sizes` with other sizes than explicit ``num_users`` /
            ``num_items``.
        KeyError: :meth:`bind_sizes` with sizes lacking ``num_users`` or ``num_items`` (not a recommendation
            DataModule).
        RuntimeError: ``forward`` / ``score_all`` / ``last_layer`` before the tables exist.

    Example:
        >>> import torch
        >>> from fccolit.models import NeuMF
        >>> model = NeuMF(embedding_dim=4, layers=[8])
        >>> model.bind_sizes({"num_users": 5, "num_items": 7})
        >>> model(torch.tensor([0, 3]), torch.tensor([[1, 2, -1], [6, 0, 5]])).shape
        torch.Size([2, 3])
        >>> model.score_all(torch.tensor([0, 1, 4])).shape
        torch.Size([3, 7])
    """

    def __init__(
        self,
        num_users: int | None = None,
        num_items: int | None = None,
        embedding_dim: int = 64,
        layers: Sequence[int] = (64,),
        dropout: float = 0.2,
        init_std: float = 0.01,
        sparse_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.sparse_embeddings = bool(sparse_embeddings)
        self.num_users, self.num_items = num_users, num_items
        self.embedding_dim, self.layers, self.dropout, self.init_std = int(embedding_dim), tuple(layers), dropout, init_std
        if not self.layers:
            raise ValueError("NeuMF needs at least one MLP layer")
        if num_users is not None and num_items is not None:
            self.build(int(num_users), int(num_items))

    def build(self, num_users: int, num_items: int) -> None:
        d = self.embedding_dim
        self.num_users, self.num_items = num_users, num_items
        sparse = self.sparse_embeddings
        self.gmf_user, self.gmf_item = nn.Embedding(num_users, d, sparse=sparse), nn.Embedding(num_items, d, sparse=sparse)
        self.mlp_user, self.mlp_item = nn.Embedding(num_users, d, sparse=sparse), nn.Embedding(num_items, d, sparse=sparse)
        mlp: list[nn.Module] = []
        width = 2 * d
        for h in self.layers:
            mlp += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(self.dropout)]
            width = h
        self.mlp = nn.Sequential(*mlp)
        self.predict = nn.Linear(d + width, 1)
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, std=self.init_std)

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        """Build the tables from ``sizes["num_users"]`` and ``sizes["num_items"]`` (or check them)."""
        missing = [k for k in ("num_users", "num_items") if k not in sizes]
        if missing:
            raise KeyError(f"NeuMF is sized by the DataModule's {missing}, but its sizes are {sorted(sizes)}: use a "
                           "recommendation DataModule (users × items)")
        users, items = int(sizes["num_users"]), int(sizes["num_items"])
        if not hasattr(self, "predict"):
            self.build(users, items)
        elif (self.num_users, self.num_items) != (users, items):
            raise ValueError(
                f"NeuMF was built for {self.num_users} users × {self.num_items} items but the data has "
                f"{users} × {items}: remove num_users / num_items from the model config (they come from the data)"
            )

    def _check_built(self) -> None:
        if not hasattr(self, "predict"):
            raise RuntimeError("NeuMF has no tables yet: pass num_users and num_items, or build it through an fccolit "
                               "module with the DataModule's sizes")

    def forward(self, query: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        self._check_built()
        items = items.clamp_min(0)
        user = query.unsqueeze(1).expand_as(items)
        gmf = self.gmf_user(user) * self.gmf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(items)], dim=-1))
        return self.predict(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)

    @torch.no_grad()
    def score_all(self, query: torch.Tensor, chunk_elements: int = 1 << 22) -> torch.Tensor:
        """Scores of every item for each user, ``[U, num_items]`` (full-ranking evaluation).

        The first MLP layer on ``[p'_u ; q'_i]`` is split into its user and item halves, computed once per user
        and once per item; the rest runs on ``[U, C, ·]`` item chunks holding about ``chunk_elements`` values.
        """
        self._check_built()
        first = self.mlp[0]
        d = self.embedding_dim
        gu, mu = self.gmf_user(query), self.mlp_user(query)  # [U, d]
        user_part = mu @ first.weight[:, :d].T + first.bias  # [U, h1]
        all_items = torch.arange(self.num_items, device=query.device)
        gi, mi = self.gmf_item(all_items), self.mlp_item(all_items)
        item_part = mi @ first.weight[:, d:].T  # [I, h1]
        width = max(d, max(self.layers))
        chunk = max(1, chunk_elements // max(1, query.numel() * width))
        out = []
        for start in range(0, self.num_items, chunk):
            sl = slice(start, start + chunk)
            h = user_part.unsqueeze(1) + item_part[sl].unsqueeze(0)  # [U, C, h1]
            h = self.mlp[1:](h)
            gmf = gu.unsqueeze(1) * gi[sl].unsqueeze(0)
            out.append(self.predict(torch.cat([gmf, h], dim=-1)).squeeze(-1))
        return torch.cat(out, dim=1)

    def last_layer(self) -> nn.Linear:
        """The prediction layer (re-initialized after the warm-up, Qiu et al. §7.2)."""
        self._check_built()
        return self.predict

    def reset_last_layer(self) -> None:
        self.last_layer().reset_parameters()
