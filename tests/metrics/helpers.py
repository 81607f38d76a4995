"""Data the metric tests share: binary scores with and without ties, padded ranking lists and full-ranking chunks,
and a plain full-ranking NDCG reference."""

from __future__ import annotations

import math

import torch


def binary_data(seed: int, n: int = 300, p_pos: float = 0.3, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < p_pos).long()
    y[0], y[1] = 1, 0  # both classes always present
    s = torch.randn(n, generator=g, dtype=torch.float64) + 0.8 * y
    if ties:
        s = torch.round(s * 2) / 2  # few distinct values: many ties within and across classes
    return s, y


def tied_binary(seed, n=400):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < 0.2).long()
    s = torch.round(torch.randn(n, generator=g, dtype=torch.float64) * 2 + y) / 2  # many ties across classes
    return s, y


def ranking_lists(seed, queries=40, length=12):
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, 4, (queries, length), generator=g).double()  # ties
    y = torch.randint(0, 3, (queries, length), generator=g)
    y[3] = 0  # an empty query
    mask = torch.rand(queries, length, generator=g) > 0.3
    mask[7, 2:] = False  # a list shorter than the cut-off
    return p, y, mask


def recsys_chunk(seed, U=9, I=40, H=4, E=12):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(U, I, generator=g, dtype=torch.float64)
    heldout = torch.full((U, H), -1, dtype=torch.long)
    rel = torch.zeros(U, H)
    exclude = torch.full((U, E), -1, dtype=torch.long)
    for u in range(U):
        items = torch.randperm(I, generator=g)
        nh = u % (H + 1)  # user 0 has no held-out item
        ne = (3 * u) % (E + 1)
        heldout[u, :nh] = items[:nh]
        rel[u, :nh] = torch.randint(1, 5, (nh,), generator=g).float()
        exclude[u, :ne] = items[nh : nh + ne]
        scores[u, items[nh : nh + ne]] += 5.0  # training items score high: they must never count
    exclude[2, 0] = heldout[2, 0]  # a held-out item listed as excluded is still ranked
    exclude[3, 1] = 0 if 0 not in heldout[3].tolist() else exclude[3, 1]
    return scores, heldout, rel, exclude


def full_ranking_problem(seed, users=23, items=60, max_heldout=6, max_exclude=30, tie_levels=None, dtype=torch.float64):
    """Random chunk: uneven held-out / excluded counts (some users with none), graded relevance (zeros included),
    held-out items listed as excluded too, and, with ``tie_levels``, scores on a few levels (many ties)."""
    g = torch.Generator().manual_seed(seed)
    if tie_levels:
        scores = torch.randint(tie_levels, (users, items), generator=g).to(dtype)
    else:
        scores = torch.randn(users, items, generator=g, dtype=torch.float64).to(dtype)
    heldout = torch.full((users, max_heldout), -1, dtype=torch.long)
    rel = torch.zeros(users, max_heldout)
    exclude = torch.full((users, max_exclude), -1, dtype=torch.long)
    for u in range(users):
        perm = torch.randperm(items, generator=g)
        nh = int(torch.randint(max_heldout + 1, (), generator=g)) if u % 5 else 0
        ne = int(torch.randint(max_exclude + 1, (), generator=g))
        slots = torch.randperm(max_heldout, generator=g)[:nh]  # padding anywhere in the row
        heldout[u, slots] = perm[:nh]
        rel[u, slots] = torch.randint(0, 4, (nh,), generator=g).float()  # relevance 0 allowed
        exclude[u, torch.randperm(max_exclude, generator=g)[:ne]] = perm[nh : nh + ne]
        if nh and ne and u % 3 == 0:
            exclude[u, (exclude[u] >= 0).nonzero()[0]] = perm[0]  # a held-out item listed as excluded
        scores[u, perm[nh : nh + ne]] += 2  # training items score high: they must not count
    return scores, heldout, rel, exclude


def dense_full_ranking_ndcg(scores, heldout, rel, exclude, k, gain="exp2", empty="zero"):
    """``[U]`` NDCG@k with a dense gain table and a Python loop over users for the ideal DCG."""
    n_users, n_items = scores.shape
    g = (2.0 ** rel.double() - 1.0) if gain == "exp2" else rel.double()
    table = torch.zeros(n_users, n_items, dtype=torch.float64)
    ranked = scores.clone()
    for u in range(n_users):
        for i, v in zip(heldout[u].tolist(), g[u].tolist()):
            if i >= 0:
                table[u, i] = max(table[u, i].item(), v)
        if exclude is not None:
            for i in exclude[u].tolist():
                if i >= 0 and i not in heldout[u].tolist():
                    ranked[u, i] = -math.inf
    kk = min(k, n_items)
    top = torch.topk(ranked, kk, dim=1, largest=True, sorted=True).indices
    out = []
    for u in range(n_users):
        dcg = sum(table[u, top[u, r]].item() / math.log2(r + 2) for r in range(kk))
        gains = sorted((v for i, v in zip(heldout[u].tolist(), g[u].tolist()) if i >= 0), reverse=True)[:k]
        idcg = sum(v / math.log2(r + 2) for r, v in enumerate(gains))
        if idcg > 0:
            out.append(dcg / idcg)
        else:
            out.append({"zero": 0.0, "one": 1.0, "skip": math.nan}[empty])
    return torch.tensor(out, dtype=torch.float64)
