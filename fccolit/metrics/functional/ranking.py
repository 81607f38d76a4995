"""Ranking metrics: NDCG@k on padded query lists and full-ranking NDCG@k for recommendation.

Definitions (Qiu et al., ICML 2022, eq. (1)):

* gain ``G(y) = 2**y - 1`` (``gain="exp2"``, the papers' and allRank's choice) or ``G(y) = y``
  (``gain="linear"``, torchmetrics' choice);
* discount ``D(r) = 1 / log2(r + 1)`` for the 1-based rank ``r``, and ``D(r) = 0`` for ``r > k``;
* ``DCG@k = sum_i G(y_i) * D(r_i)``; ``IDCG@k`` is the DCG@k of the query's own targets sorted in
  decreasing order; ``NDCG@k = DCG@k / IDCG@k``.

Everything is computed in float64 and vectorized over queries (sorts, cumulative sums and scatters on
``[Q, L]`` tensors); no Python loop over queries. The functions run on whatever device their inputs are on.

Relation to torchmetrics: ``RetrievalNormalizedDCG(top_k=k)`` uses a linear gain and averages discounts
over tied groups exactly like ``ties="average"`` here, so ``ndcg_at_k(p, y, top_k=k)`` equals it when it is fed
``target = 2**y - 1`` (tested). Its functional ``retrieval_normalized_dcg`` on a ``[Q, L]`` tensor flattens
all queries into one ranking, which is not the per-query mean computed here.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from fccolit._checks import check_choice
from fccolit.metrics.functional._inputs import check_no_nan_scores

__all__ = [
    "ndcg_at_k",
    "full_ranking_ndcg",
    "Gain",
    "EmptyQuery",
    "Ties",
]

#: the gain of a relevance label y: ``2**y - 1`` or ``y``
Gain = Literal["exp2", "linear"]
#: what NDCG counts for a query (or user) without relevant items (ideal DCG 0): 0, 1, or nothing (skipped)
EmptyQuery = Literal["zero", "one", "skip"]
#: how items with equal scores are ranked
Ties = Literal["average", "pessimistic", "optimistic"]

_GAINS = get_args(Gain)
_EMPTY = get_args(EmptyQuery)
_TIES = get_args(Ties)


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
def _check_top_k(top_k: int | None, name: str = "top_k") -> None:
    if top_k is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ValueError(f"{name} must be a positive int or None (full list), got {top_k!r}")
    if top_k < 1:
        raise ValueError(f"{name} must be >= 1 (or None for the full list), got {name}={top_k}")


def _gain(y: Tensor, gain: str) -> Tensor:
    """Gain of float64 relevance ``y``: ``2**y - 1`` or ``y``."""
    if gain == "exp2":
        return torch.exp2(y) - 1.0
    return y


def _discounts(length: int, k: int | None, device: torch.device) -> Tensor:
    """``[length]`` float64 vector of ``1/log2(r+1)`` for ranks ``r = 1..length``, zero past ``k``."""
    ranks = torch.arange(1, length + 1, device=device, dtype=torch.float64)
    d = 1.0 / torch.log2(ranks + 1.0)
    if k is not None and k < length:
        d[k:] = 0.0
    return d


def _apply_empty(value: Tensor, ideal: Tensor, empty: str) -> Tensor:
    """Replace ``value`` where ``ideal == 0`` according to the ``empty`` policy."""
    is_empty = ideal <= 0
    fill = {"zero": 0.0, "one": 1.0, "skip": float("nan")}[empty]
    return torch.where(is_empty, torch.full_like(value, fill), value)


# ----------------------------------------------------------------------------------------------------------
# NDCG@k on padded [Q, L] lists
# ----------------------------------------------------------------------------------------------------------
def ndcg_at_k(
    preds: Tensor,
    target: Tensor,
    top_k: int | None = None,
    mask: Tensor | None = None,
    gain: Gain = "exp2",
    empty_query: EmptyQuery = "zero",
    ties: Ties = "average",
) -> Tensor:
    """Per-query NDCG@k of padded score lists, vectorized over queries.

    Args:
        preds: ``[Q, L]`` scores; a higher score means ranked earlier. Only the order matters. Scores of
            padded positions are ignored (they may be anything, including NaN or -inf).
        target: ``[Q, L]`` relevance labels ``y >= 0`` (int or float, graded allowed). Padded positions are
            ignored.
        top_k: truncation depth (``>= 1``); ``None`` means the full list. ``top_k`` larger than a query's length
            is the same as the full list.
        mask: ``[Q, L]`` bool, ``True`` marks real items and ``False`` padding; ``None`` means every position
            is real. Padded items are neither ranked nor part of the ideal ranking, so padding never
            changes the value.
        gain: ``"exp2"`` for ``G(y) = 2**y - 1`` (Qiu et al., allRank, LibAUC) or ``"linear"`` for
            ``G(y) = y`` (torchmetrics, sklearn).
        empty_query: what a query whose ideal DCG is 0 (no item with positive gain among its real items,
            including a query with no real item at all) scores:

            * ``"zero"``: 0 (torchmetrics' default ``empty_target_action="neg"``);
            * ``"one"``: 1 (allRank / LightGBM convention);
            * ``"skip"``: NaN, so that aggregators drop the query (``NDCGScore`` does; ``torch.nanmean`` does).
        ties: how items with equal scores are ranked:

            * ``"average"``: each item of a tied group gets the mean of the (k-truncated) discounts of the
              positions the group occupies. This is exactly the expected NDCG under uniformly random
              tie-breaking, and it is the tie handling of sklearn ``ndcg_score`` and torchmetrics
              ``RetrievalNormalizedDCG``. A constant scorer therefore gets the NDCG of a random ranking.
            * ``"pessimistic"``: within a tied group, items are placed in increasing order of gain
              (relevant items last); this is the minimum of NDCG over tie-breaking orders.
            * ``"optimistic"``: within a tied group, items are placed in decreasing order of gain; the
              maximum over tie-breaking orders.

    Returns:
        ``[Q]`` float64 tensor of per-query NDCG@k in ``[0, 1]`` (NaN for empty queries under
        ``empty_query="skip"``).

    Raises:
        ValueError: ``preds`` is not ``[Q, L]`` or ``target`` / ``mask`` have another shape, ``top_k`` is not a
            positive int or None, a policy is unknown, or a real item has a NaN score or a NaN / negative relevance.

    Example:
        >>> import torch
        >>> preds = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]])  # two queries of three items
        >>> target = torch.tensor([[1, 0, 0], [0, 0, 2]])
        >>> ndcg_at_k(preds, target, top_k=2)  # query 2's relevant item is ranked 2nd: 1 / log2(3)
        tensor([1.0000, 0.6309], dtype=torch.float64)
        >>> ndcg_at_k(preds, target, mask=torch.tensor([[True, True, True], [True, True, False]]))
        tensor([1., 0.], dtype=torch.float64)
    """
    return _ndcg_lists(preds, target, top_k, mask, gain, empty_query, ties)[0]


def _ndcg_lists(
    preds: Tensor,
    target: Tensor,
    k: int | None,
    mask: Tensor | None,
    gain: str,
    empty: str,
    ties: str,
    prefix_length: int = 0,
) -> tuple[Tensor, Tensor]:
    """:func:`ndcg_at_k` ``[Q]``, and from the same sort NDCG@j for ``j = 1..prefix_length`` ``[Q, prefix_length]``
    (a cut-off past a list's end is its full list; the empty policy as for the value)."""
    check_choice("gain", gain, _GAINS)
    check_choice("empty_query", empty, _EMPTY)
    check_choice("ties", ties, _TIES)
    _check_top_k(k)
    if preds.ndim != 2:
        raise ValueError(f"preds must have shape [Q, L] (queries x list length), got shape {tuple(preds.shape)}")
    if target.shape != preds.shape:
        raise ValueError(
            f"preds and target must have the same shape [Q, L], got {tuple(preds.shape)} and {tuple(target.shape)}"
        )
    if mask is None:
        mask = torch.ones_like(preds, dtype=torch.bool)
    else:
        if mask.shape != preds.shape:
            raise ValueError(f"mask must have the shape of preds {tuple(preds.shape)}, got {tuple(mask.shape)}")
        mask = mask.to(device=preds.device, dtype=torch.bool)
    target = target.to(device=preds.device)

    check_no_nan_scores(preds[mask], "preds")
    y = target.to(torch.float64)
    y_real = y[mask]
    if torch.isnan(y_real).any():
        raise ValueError(f"target contains {int(torch.isnan(y_real).sum())} NaN relevance value(s) on real items")
    if (y_real < 0).any():
        raise ValueError(
            "target must be >= 0 on real items (got a minimum of "
            f"{float(y_real.min())}); mark padding with `mask` instead of negative labels"
        )

    n_queries, length = preds.shape
    device = preds.device
    if n_queries == 0 or length == 0:
        zero = torch.zeros(n_queries, dtype=torch.float64, device=device)
        value = _apply_empty(zero, zero, empty)
        return value, value[:, None].expand(n_queries, prefix_length)

    g = torch.where(mask, _gain(y, gain), torch.zeros_like(y))  # [Q, L], zero on padding
    disc = _discounts(length, k, device)  # [L]

    # Ranking order: real items first, by decreasing score; within ties, by gain for the pessimistic /
    # optimistic policies. Lexicographic order via successive stable sorts (least significant key first).
    p_clean = torch.where(mask, preds, torch.zeros_like(preds))  # NaN padding must not disturb the sort
    order = torch.arange(length, device=device).expand(n_queries, length)
    if ties != "average":
        order = torch.sort(g, dim=1, descending=(ties == "optimistic"), stable=True).indices
    idx = torch.sort(p_clean.gather(1, order), dim=1, descending=True, stable=True).indices
    order = order.gather(1, idx)
    if not bool(mask.all()):  # real items before padding (padding never ties with a real item)
        idx = torch.sort((~mask).gather(1, order).to(torch.uint8), dim=1, stable=True).indices
        order = order.gather(1, idx)

    g_sorted = g.gather(1, order)
    if ties == "average":
        p_sorted = p_clean.gather(1, order)
        m_sorted = mask.gather(1, order)
        # a tie group starts where the score or the real/padding status changes
        new_group = torch.ones_like(m_sorted)
        new_group[:, 1:] = (p_sorted[:, 1:] != p_sorted[:, :-1]) | (m_sorted[:, 1:] != m_sorted[:, :-1])
        # tie groups are contiguous runs: find each position's run [start, end] and average the discounts
        # over it with a cumulative sum of the (shared) discount vector
        pos = torch.arange(length, device=device).expand(n_queries, length)
        start = torch.cummax(torch.where(new_group, pos, torch.zeros_like(pos)), dim=1).values
        is_end = torch.ones_like(new_group)
        is_end[:, :-1] = new_group[:, 1:]
        end_rev = torch.where(is_end, pos, torch.full_like(pos, length)).flip(1)
        end = torch.cummin(end_rev, dim=1).values.flip(1)
        csum = torch.cat([torch.zeros(1, dtype=torch.float64, device=device), torch.cumsum(disc, 0)])
        d_eff = (csum[end + 1] - csum[start]) / (end - start + 1).to(torch.float64)
    else:
        d_eff = disc.expand(n_queries, length)
    dcg = (g_sorted * d_eff).sum(dim=1)

    ideal_gains = torch.sort(g, dim=1, descending=True).values
    idcg = (ideal_gains * disc).sum(dim=1)
    value = dcg / torch.where(idcg > 0, idcg, torch.ones_like(idcg))
    if not prefix_length:
        return _apply_empty(value, idcg, empty), value.new_zeros(n_queries, 0)
    # DCG@j for every j: with tie averaging, each position of a tied group carries the group's mean gain at its own
    # (untruncated) discount, which sums over the group's first positions to the group's gain times its averaged
    # truncated discount; other tie policies rank one by one
    if ties == "average":
        gain_csum = torch.cat([torch.zeros_like(g_sorted[:, :1]), torch.cumsum(g_sorted, 1)], 1)
        g_sorted = (gain_csum.gather(1, end + 1) - gain_csum.gather(1, start)) / (end - start + 1).to(torch.float64)
    full_disc = _discounts(length, None, device)
    last = torch.arange(prefix_length, device=device).clamp_max(length - 1)  # j past the list's end: the full list
    dcg_at = torch.cumsum(g_sorted * full_disc, 1)[:, last]
    idcg_at = torch.cumsum(ideal_gains * full_disc, 1)[:, last]
    prefix = dcg_at / torch.where(idcg_at > 0, idcg_at, torch.ones_like(idcg_at))
    return _apply_empty(value, idcg, empty), _apply_empty(prefix, idcg[:, None], empty)


# ----------------------------------------------------------------------------------------------------------
# Full-ranking NDCG@k for recommendation
# ----------------------------------------------------------------------------------------------------------
def _heldout_gain_lookup(heldout_items: Tensor, gains: Tensor) -> tuple[Tensor, Tensor]:
    """``(keys [U, H], values [U, H])``: the held-out item ids sorted per user and their gains, for
    :func:`_lookup_gains`. Padding (``-1``) sorts first and never matches an item id. For a repeated id the
    largest gain comes first (ids should be distinct; this keeps the result independent of their order)."""
    by_gain = torch.sort(gains, dim=1, descending=True, stable=True).indices
    keys = heldout_items.gather(1, by_gain)
    by_item = torch.sort(keys, dim=1, stable=True).indices
    return keys.gather(1, by_item).contiguous(), gains.gather(1, by_gain).gather(1, by_item)


def _lookup_gains(keys: Tensor, values: Tensor, items: Tensor) -> Tensor:
    """``[U, K]`` gain of each of ``items [U, K]`` (ids in ``[0, I)``): its held-out gain, 0 when not held out.
    Binary search in the sorted ``keys [U, H]``: O(U K log H), no ``[U, I]`` table."""
    if keys.shape[1] == 0:
        return torch.zeros(items.shape, dtype=values.dtype, device=values.device)
    pos = torch.searchsorted(keys, items.contiguous()).clamp_max_(keys.shape[1] - 1)
    return torch.where(keys.gather(1, pos) == items, values.gather(1, pos), torch.zeros((), dtype=values.dtype,
                                                                                      device=values.device))


def _raise_on_nan_scores(scores: Tensor, top_values: Tensor) -> None:
    """Raise if ``scores`` holds a NaN; on CPU by reading only the ``[U, k]`` top values, not all ``U × I``.

    On CPU, the ``amin`` / ``amax`` scatters that exclude items keep a NaN score NaN (NaN propagates), and
    ``torch.topk`` ranks every NaN (either sign) above every number, so any NaN of ``scores`` is in the top k
    (tested in tests/metrics/functional/test_ranking.py). Other devices read every score (CUDA's ``topk`` may rank a NaN with
    the sign bit set last, pytorch issue 117617; the full read is cheap there).
    """
    if scores.device.type == "cpu" and not bool(torch.isnan(top_values).any()):
        return
    check_no_nan_scores(scores, "scores")


def _full_ranking_ndcg_prefix(
    scores: Tensor,
    heldout_items: Tensor,
    heldout_relevance: Tensor,
    exclude_items: Tensor | None,
    k_max: int,
    gain: str,
    workspace: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Shared core: returns (``[U, k_max]`` NDCG@j for ``j = 1..k_max`` before the empty policy (a cut-off past
    the number of items is the full list), ``[U]`` IDCG@1, zero exactly for the users without held-out relevance).

    Cost: one pass over ``scores [U, I]`` for the exclusion (a copy) and one ``topk`` with the largest cut-off;
    everything else is O(U (k + H + E)): the top-k items' gains are looked up in the sorted held-out ids.
    ``workspace``: optional 1-D scratch tensor (``scores``' dtype and device, at least ``U·I`` elements) that
    receives the copy with the excluded items at -inf instead of a fresh ``[U, I]`` allocation (on CPU, the page
    faults of a fresh allocation cost several times the copy itself).
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must have shape [U, I] (users x all items), got {tuple(scores.shape)}")
    n_users, n_items = scores.shape
    if heldout_items.ndim != 2 or heldout_items.shape[0] != n_users:
        raise ValueError(
            f"heldout_items must have shape [U, H] with U={n_users}, got {tuple(heldout_items.shape)}"
        )
    if heldout_relevance.shape != heldout_items.shape:
        raise ValueError(
            "heldout_relevance must have the shape of heldout_items "
            f"{tuple(heldout_items.shape)}, got {tuple(heldout_relevance.shape)}"
        )
    if exclude_items is not None and (exclude_items.ndim != 2 or exclude_items.shape[0] != n_users):
        raise ValueError(
            f"exclude_items must have shape [U, E] with U={n_users}, got {tuple(exclude_items.shape)}"
        )
    _check_top_k(k_max)
    device = scores.device
    heldout_items = heldout_items.to(device=device, dtype=torch.long)
    if exclude_items is not None:
        exclude_items = exclude_items.to(device=device, dtype=torch.long)
    valid = heldout_items >= 0
    rel = heldout_relevance.to(device=device, dtype=torch.float64)
    # one host sync for every input check: the id ranges and the relevance of the non-padded entries
    named = [(n, t) for n, t in (("heldout_items", heldout_items), ("exclude_items", exclude_items))
             if t is not None and t.numel()]
    ranges = [torch.stack(torch.aminmax(t)) for _, t in named]
    bad_relevance = (valid & ~(rel >= 0)).any()  # NaN fails rel >= 0
    checks = torch.cat(ranges + [bad_relevance.reshape(1).long()]).tolist()
    for i, (name, _) in enumerate(named):
        lowest, highest = checks[2 * i], checks[2 * i + 1]
        if highest >= n_items or lowest < -1:
            raise ValueError(
                f"{name} must hold item ids in [0, {n_items}) or -1 for padding, got values in [{lowest}, {highest}]"
            )
    if checks[-1]:
        raise ValueError("heldout_relevance must be >= 0 and not NaN on non-padded entries")
    g = torch.where(valid, _gain(rel, gain), torch.zeros_like(rel))  # [U, H]
    safe_items = heldout_items.clamp_min(0)

    ranked = scores
    if exclude_items is not None and exclude_items.numel():
        if (
            workspace is not None
            and workspace.numel() >= scores.numel()
            and (workspace.dtype, workspace.device) == (scores.dtype, scores.device)
        ):
            ranked = workspace[: scores.numel()].view(n_users, n_items).copy_(scores)
        else:
            ranked = scores.clone()
        # amin with -inf removes an excluded item; padded entries write +inf, a no-op under amin
        inf = torch.tensor(float("inf"), dtype=scores.dtype, device=device)
        removal = torch.where(exclude_items >= 0, -inf, inf)  # [U, E]
        ranked.scatter_reduce_(1, exclude_items.clamp_min(0), removal, reduce="amin")
        # held-out items are evaluation targets: never excluded, even when listed in exclude_items
        # (amax with the item's own score restores it; padded entries write -inf, a no-op)
        own = scores.gather(1, safe_items)
        ranked.scatter_reduce_(1, safe_items, torch.where(valid, own, -inf), reduce="amax")

    ranked_k = min(k_max, n_items)
    if ranked_k == 0:
        return torch.zeros(n_users, k_max, dtype=torch.float64, device=device), g.new_zeros(n_users)
    top = torch.topk(ranked, ranked_k, dim=1, largest=True, sorted=True)
    _raise_on_nan_scores(scores, top.values)
    # excluded items (-inf) reach the top k only when fewer than k items remain; they carry gain 0
    keys, values = _heldout_gain_lookup(torch.where(valid, heldout_items, -1), g)
    top_gain = _lookup_gains(keys, values, top.indices)  # [U, ranked_k]
    disc = _discounts(ranked_k, None, device)
    dcg_at = torch.cumsum(top_gain * disc, dim=1)  # [U, ranked_k]

    h = g.shape[1]
    if h:
        ideal = torch.sort(g, dim=1, descending=True).values
        idcg_cum = torch.cumsum(ideal * _discounts(h, None, device), dim=1)  # [U, H]
        idcg_at = idcg_cum[:, torch.arange(ranked_k, device=device).clamp_max(h - 1)]  # [U, ranked_k]
    else:
        idcg_at = torch.zeros_like(dcg_at)
    prefix = dcg_at / torch.where(idcg_at > 0, idcg_at, torch.ones_like(idcg_at))
    return prefix[:, torch.arange(k_max, device=device).clamp_max(ranked_k - 1)], idcg_at[:, 0]


def full_ranking_ndcg(
    scores: Tensor,
    heldout_items: Tensor,
    heldout_relevance: Tensor,
    exclude_items: Tensor | None = None,
    top_k: int = 10,
    gain: Gain = "exp2",
    empty_query: EmptyQuery = "zero",
) -> Tensor:
    """Per-user NDCG@k of a full ranking over all items (the recommender "all-ranking" protocol).

    Every item the user has not trained on is ranked by its score; the held-out (test or validation)
    items are the relevant ones. ``DCG@k = sum over the top k of G(rel) / log2(rank + 1)``, where items that
    are not held out have gain 0, and ``IDCG@k`` is the DCG@k of the user's held-out relevances sorted in
    decreasing order. With one held-out item of relevance 1 this is ``1[rank <= k] / log2(1 + rank)``. How ties
    and excluded items rank is said after the example.

    Args:
        scores: ``[U, I]`` dense scores of a chunk of ``U`` users over ALL ``I`` items. Feed large user sets
            in chunks. The only ``[U, I]`` work is one copy of ``scores`` with the excluded items at ``-inf``
            (when ``exclude_items`` is given) and one ``topk``; the top-k items' gains are then looked up in the
            user's sorted held-out ids (binary search), so no users × items gain table is built.
        heldout_items: ``[U, H]`` long item ids in ``[0, I)``, padded with ``-1``. Ids must be distinct per user.
        heldout_relevance: ``[U, H]`` relevance ``>= 0`` of the held-out items; padded entries are ignored.
        exclude_items: optional ``[U, E]`` long item ids padded with ``-1``: the user's training items. They
            are removed from the ranking (score set to ``-inf``) so they never occupy a top-k slot; a
            held-out item listed here is nevertheless kept in the ranking with its own score.
        top_k: cut-off (``>= 1``); a ``top_k`` larger than ``I`` is the full list.
        gain: ``"exp2"`` (``2**rel - 1``) or ``"linear"`` (``rel``).
        empty_query: users without held-out relevance (IDCG 0) score 0 (``"zero"``), 1 (``"one"``) or NaN
            (``"skip"``).

    Returns:
        ``[U]`` float64 tensor of NDCG@k.

    Raises:
        ValueError: ``scores`` is not ``[U, I]``, ``heldout_items`` / ``heldout_relevance`` / ``exclude_items``
            have other shapes or ids outside ``[0, I)`` (other than ``-1``), a held-out relevance is negative or
            NaN, ``top_k`` is not a positive int, a choice is unknown, or ``scores`` holds NaN.

    Example:
        >>> import torch
        >>> scores = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.8, 0.7, 0.6, 0.5]])  # two users, four items
        >>> heldout_items, heldout_relevance = torch.tensor([[2], [3]]), torch.ones(2, 1)
        >>> exclude_items = torch.tensor([[-1, -1], [0, 1]])  # user 2 trained on items 0 and 1
        >>> full_ranking_ndcg(scores, heldout_items, heldout_relevance, exclude_items, top_k=2)
        tensor([0.6309, 0.6309], dtype=torch.float64)

    Ties: the top k is taken with ``torch.topk``, so items with equal scores are ordered however
    ``topk`` happens to order them (implementation-defined, may differ between CPU and CUDA). No tie
    averaging is done; models with continuous scores rarely tie. Excluded items (``-inf``) can only enter
    the top k when fewer than k items remain, and they never carry gain.
    """
    check_choice("gain", gain, _GAINS)
    check_choice("empty_query", empty_query, _EMPTY)
    _check_top_k(top_k)
    prefix, ideal = _full_ranking_ndcg_prefix(scores, heldout_items, heldout_relevance, exclude_items, top_k, gain)
    return _apply_empty(prefix[:, top_k - 1], ideal, empty_query)
