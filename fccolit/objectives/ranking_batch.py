"""The ranking batch: its fields, the anchors of a batch and the weights of the inner and outer averages.

Every ranking objective (:mod:`fccolit.objectives.ndcg`, :mod:`fccolit.objectives.listwise`) reads the ranking batch
schema (see :mod:`fccolit.samplers.ranking` and ``fccolit.datamodules.synthetic_ranking``): scores ``[B, L]`` (B query
rows, each a list of L entries), and the batch fields ``query`` ``[B]``, ``relevance`` ``[B, L]``, ``pair_index``
``[B, L]`` (row of the per-pair state of each relevant entry, −1 elsewhere), ``mask`` ``[B, L]`` (real entries),
``num_items`` ``[B]`` (N_q), ``num_relevant`` ``[B]`` (N_q^+), ``ideal_dcg`` ``[B]`` (Z_q) and, for top-K,
``ideal_dcg_at_k`` ``[B]`` (Z_q^K). One FCCO term per relevant (query, item) pair: the anchors of a batch are its
entries with ``pair_index ≥ 0``.

Two choices every ranking objective shares are implemented here:

* **which average the inner estimate is** (``inner_estimator``, :data:`INNER_ESTIMATORS`): ``"list_mean"``
  (Algorithm 1 of Qiu et al.: the mean over the query's list B_q; exact when the list is the whole S_q, unbiased
  when it is a uniform sample of S_q) or ``"stratified"`` (unbiased when the list holds P_q of the query's relevant
  items and M_q of its other items, each a uniform sample, as the ranking sampler draws them; the anchor's own term
  counted once): :func:`anchor_item_weights`, :func:`query_item_weights`.
* **which normalization F has** (``normalization``, :data:`NORMALIZATIONS`): ``"per_query"`` (default):
  ``F = (1/N) Σ_q Σ_{i∈S_q^+} f_{q,i}``, the NDCG definition averaged over queries (what the paper's code and LibAUC
  optimize), estimated without bias from a batch of uniformly drawn queries with uniformly drawn relevant items; or
  ``"pairs"``: ``F = (1/|S|) Σ_{(q,i)∈S} f_{q,i}``, eq. (3) as printed, estimated by the plain mean over the batch's
  pairs (unbiased when the pairs are drawn uniformly from S); or ``"query_mean"``: ``F = (1/N) Σ_q
  mean_{i∈S_q^+} f_{q,i}``, every query weighted equally whatever its number of relevant items (SOLC's Algorithm
  3; for listwise cross-entropy, whose f has no 1/N_q^+, ``"per_query"`` weights a user by the number of items they
  rated instead). :func:`row_weights` gives the row weights that implement either; an objective puts them in ``f``
  (context ``"weight"``), so an algorithm's mean over the rows is the estimator and ``exact_value`` is F.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from fccolit import distributed

__all__ = [
    "NORMALIZATIONS", "INNER_ESTIMATORS", "Normalization", "InnerEstimator", "field", "list_mask", "anchors",
    "anchor_item_weights", "query_item_weights", "row_weights",
]

#: how a ranking objective's F is normalized over queries and pairs (:func:`row_weights`)
Normalization = Literal["per_query", "pairs", "query_mean"]
#: which average of the list a ranking objective's inner estimate is (:func:`anchor_item_weights`)
InnerEstimator = Literal["list_mean", "stratified"]
NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)
INNER_ESTIMATORS: tuple[str, ...] = get_args(InnerEstimator)


def field(batch: dict[str, torch.Tensor], key: str, who: str) -> torch.Tensor:
    """``batch[key]`` or a KeyError naming the field, its user and the fields present."""
    if key not in batch:
        raise KeyError(
            f"{who} needs the ranking batch field '{key}', but the batch only has {sorted(batch)} (see the ranking "
            "batch schema in fccolit.datamodules.synthetic_ranking)"
        )
    return batch[key]


def list_mask(batch: dict[str, torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool of the real entries (all True when the batch has no ``mask``)."""
    mask = batch.get("mask")
    return torch.ones_like(like, dtype=torch.bool) if mask is None else mask.to(torch.bool)


def anchors(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(row [R], position [R])`` of every relevant entry with a state row (``pair_index ≥ 0``), row-major."""
    rows = torch.nonzero(batch["pair_index"] >= 0)
    return rows[:, 0], rows[:, 1]


def anchor_item_weights(
    batch: dict[str, torch.Tensor], q: torch.Tensor, a: torch.Tensor, estimator: str, dtype: torch.dtype, who: str
) -> torch.Tensor:
    """``c [R, L]``: ``Σ_x c_x φ(x)`` estimates ``(1/N_q) Σ_{x∈S_q} φ(x)`` for the anchor ``(q, a)`` of each row.

    ``"list_mean"``: ``c_x = 1/|B_q|`` on the real entries of the list. ``"stratified"``: the anchor's own entry
    ``1/N_q``, the list's other relevant entries ``(N_q^+ − 1)/((P_q − 1) N_q)`` and its non-relevant entries
    ``(N_q − N_q^+)/(M_q N_q)`` (P_q, M_q: relevant / other real entries in the list). Zero on padding.
    """
    mask = list_mask(batch, batch["pair_index"]).index_select(0, q)
    if estimator == "list_mean":
        return mask.to(dtype) / mask.sum(1, keepdim=True).clamp_min(1).to(dtype)
    n = field(batch, "num_items", who).to(dtype).index_select(0, q)
    n_rel = field(batch, "num_relevant", who).to(dtype).index_select(0, q)
    rel = (batch["relevance"] > 0).index_select(0, q) & mask
    other = mask & ~rel
    p, m = rel.sum(1).to(dtype), other.sum(1).to(dtype)
    w_rel = torch.where(p > 1, (n_rel - 1) / (p - 1).clamp_min(1.0), torch.zeros_like(p))
    w_other = torch.where(m > 0, (n - n_rel) / m.clamp_min(1.0), torch.zeros_like(m))
    own = torch.zeros(mask.shape, dtype=dtype, device=mask.device).scatter_(1, a.unsqueeze(1), 1.0)
    weight = own + (1 - own) * (rel.to(dtype) * w_rel.unsqueeze(1) + other.to(dtype) * w_other.unsqueeze(1))
    return weight / n.unsqueeze(1)


def query_item_weights(batch: dict[str, torch.Tensor], estimator: str, dtype: torch.dtype, who: str) -> torch.Tensor:
    """``[B, L]``: ``Σ_x c_x φ(x)`` estimates ``(1/N_q) Σ_{x∈S_q} φ(x)`` for each query row (no anchor).

    ``"list_mean"``: ``1/|B_q|`` on the real entries; ``"stratified"``: ``N_q^+/(P_q N_q)`` on relevant entries and
    ``(N_q − N_q^+)/(M_q N_q)`` on the others (the list mean where the list has no relevant or no other entry).
    """
    mask = list_mask(batch, batch["pair_index"])
    mean = mask.to(dtype) / mask.sum(1, keepdim=True).clamp_min(1).to(dtype)
    if estimator == "list_mean":
        return mean
    n = field(batch, "num_items", who).to(dtype)
    n_rel = field(batch, "num_relevant", who).to(dtype)
    rel = (batch["relevance"] > 0) & mask
    other = mask & ~rel
    p, m = rel.sum(1).to(dtype), other.sum(1).to(dtype)
    strat = (rel.to(dtype) * (n_rel / (p.clamp_min(1.0) * n)).unsqueeze(1)
             + other.to(dtype) * ((n - n_rel) / (m.clamp_min(1.0) * n)).unsqueeze(1))
    usable = ((p > 0) & (m > 0)).unsqueeze(1)
    return torch.where(usable, strat, mean)


def row_weights(batch: dict[str, torch.Tensor], q: torch.Tensor, normalization: str, dtype: torch.dtype) -> torch.Tensor:
    """``[R]`` weights such that the mean over the batch's anchor rows of ``weight · f`` estimates F.

    ``"per_query"``: ``(R/B) · N_q^+ / P_q`` (P_q: anchors of the row's query in this batch), so the mean is
    ``(1/B) Σ_q N_q^+ · mean_{i} f_{q,i}``, an unbiased estimate of ``(1/N) Σ_q Σ_{i∈S_q^+} f_{q,i}`` for uniformly
    drawn queries and anchors; with every query and pair in the batch it is exactly that sum. Under DDP each
    rank's mean over its own B/W queries, averaged by DDP, is the global estimate.

    ``"query_mean"``: ``(R/B) / P_q``, so the mean is ``(1/B) Σ_q mean_{i} f_{q,i}``, an unbiased estimate of
    ``(1/N) Σ_q mean_{i∈S_q^+} f_{q,i}`` (every query weighted equally; the same DDP argument as ``"per_query"``).

    ``"pairs"``: 1 (the plain mean over pairs, eq. (3)); under DDP ``W · R_r / R`` so that DDP's average of the
    ranks' means is the mean over all R anchors of the global batch.
    """
    r = q.numel()
    if normalization in ("per_query", "query_mean"):
        b = batch["pair_index"].shape[0]
        # anchors per query by index_add_ (bincount sizes its output by q's maximum: a host sync on an accelerator)
        per_row = torch.zeros(b, dtype=dtype, device=q.device).index_add_(0, q, torch.ones_like(q, dtype=dtype))
        per_row = per_row.index_select(0, q)
        if normalization == "query_mean":
            return (r / b) / per_row
        n_rel = field(batch, "num_relevant", "normalization='per_query'").to(dtype).index_select(0, q)
        return (r / b) * n_rel / per_row
    weight = torch.ones(r, dtype=dtype, device=q.device)
    if distributed.is_distributed():
        total = torch.tensor([float(r)], dtype=torch.float64, device=q.device)
        torch.distributed.all_reduce(total)
        weight = weight * (distributed.world_size() * r / total.clamp_min(1.0)).to(dtype)
    return weight
