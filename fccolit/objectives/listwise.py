"""Listwise cross-entropy (ListNet top-one) as an FCCO problem (Wang & Yang, ICML 2022, §5; SOLC's objective, Qiu
et al., ICML 2022, §6 and App. B).

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fccolit.objectives.base import FCCOObjective, InnerBatch

WEIGHTS = ("linear", "uniform", "none")


class ListwiseCE(FCCOObjective):
    r"""ListNet's top-one cross-entropy, one FCCO term per relevant (query, item) pair.

    .. math::

        F(w) = \frac{1}{|D|} \sum_{(q,i) \in D} f_{q,i}(g_{q,i}(w)), \qquad
        g_{q,i}(w) = \frac{1}{N_q} \sum_{x \in S_q} \exp(h(x) - h(x_i)), \qquad
        f_{q,i}(u) = P_q(y_i)\,(\log u + \log N_q)

    with D the relevant pairs (``P_q(y_i) > 0``), S_q the N_q items of query q and ``P_q(y_i)`` the target
    top-one probability of item i. Since ``log g_{q,i} + log N_q = −log softmax_i(h over S_q)``::

        |D| · F = Σ_q ( − Σ_{i∈S_q^+} P_q(y_i) log softmax_i ) = Σ_q ListNet_q

    exactly: the paper's ``f = log u`` (Wang & Yang, §5) drops the weight ``P_q(y_i)`` and the constant
    ``log N_q``; both are kept here (the constant has no gradient but makes F the cross-entropy). ``∇f = P/u``.

    Target weights (``relevance_weight``):

    * ``"linear"`` (default, Wang & Yang's example ``P ∝ y``): ``P_q(y_i) = y_i / Σ_{j∈S_q^+} y_j``;
    * ``"uniform"``: ``P_q(y_i) = 1/N_q^+`` (every relevant item alike; equals ``"linear"`` for binary relevance);
    * ``"none"``: ``P = 1``, one cross-entropy term per relevant pair (SOLC's shape; Qiu et al.'s §6 scales it
      further by 1/N_q per query, which a subclass can put in :meth:`pair_weight`).

    The per-query normalizers come from the batch: ``relevance_sum`` ``[B]`` (``Σ_{j∈S_q^+} y_j``) when the
    DataModule provides it, and ``num_relevant`` ``[B]`` (N_q^+); otherwise from the list itself, which must then
    hold every relevant item of its query (checked on the CPU when ``num_relevant`` is present).

    Inner estimates (``inner_estimator``), for a list of P_q relevant and M_q other items of query q (the
    ranking batch schema: relevant entries have ``pair_index ≥ 0``), each relevant entry an anchor:

    * ``"list_mean"`` (default; what SONG / SOLC compute): ``ĝ_{q,i} = mean_{x in the list} exp(h(x) − h(x_i))``.
      **Exact when the list is the whole S_q** (every item, mask marking the real entries), so the SOX estimator
      is then the true gradient; unbiased when the list is a uniform sample of S_q.
    * ``"stratified"``: unbiased when the list's relevant items are a uniform sample (without replacement) of the
      query's N_q^+ relevant items and its other items a uniform sample of its N_q − N_q^+ non-relevant items::

          ĝ_{q,i} = ( 1 + ((N_q^+ − 1)/(P_q − 1)) Σ_{x rel, x≠i} e_x + ((N_q − N_q^+)/M_q) Σ_{x other} e_x ) / N_q

      with ``e_x = exp(h(x) − h(x_i))`` and the anchor's own term ``e_i = 1`` counted once (the anchor is always
      in its own list: as for :class:`~fccolit.objectives.ap.AveragePrecision`'s ``"reweighted"``). It is
      exact for full lists too. Needs ``num_items`` and ``num_relevant``.

    Sampling of the pairs: the rows of a batch are its relevant entries and algorithms average over them, so
    the step estimates ∇F when the batch's pairs are a uniform sample of D (e.g. every query contributes the
    same number of pairs per relevant item it has); a query-level sampler with a fixed number of relevant items
    per query weights queries equally instead (as the experiments of Qiu et al., §7, sample "a few (e.g., 10)
    relevant items" per query).

    Numerics: ``exp(h(x) − h(x_i))`` overflows for score gaps above ~88 (float32); the state is linear, not
    log-domain, so keep the scores bounded. A per-batch shift of the exponent cannot be used (the state must
    stay on one scale across steps).

    Batch fields (the ranking schema): scores ``[B, L]``; ``relevance`` ``[B, L]`` (0 for non-relevant and
    padding); ``pair_index`` ``[B, L]`` (state row of each relevant entry, −1 elsewhere); ``mask`` ``[B, L]``
    (real entries; optional, default all); ``num_items`` ``[B]`` (N_q); ``num_relevant`` ``[B]`` (N_q^+);
    optional ``relevance_sum`` ``[B]``. State rows: ``num_pairs``; d' = 1.
    """

    inner_dim: ClassVar[int] = 1
    task: ClassVar[str] = "ranking"
    state_rows: ClassVar[str] = "num_pairs"
    needs_global_batch: ClassVar[bool] = False  # a query's list is one row of the batch: no coupling across rows
    batch_fields: ClassVar[tuple[str, ...]] = ("relevance", "pair_index", "mask", "num_items", "num_relevant")
    default_metrics: ClassVar[tuple[str, ...]] = ("ndcg@10", "ndcg")

    def __init__(self, relevance_weight: str = "linear", inner_estimator: str = "list_mean") -> None:
        super().__init__()
        if relevance_weight not in WEIGHTS:
            raise ValueError(f"relevance_weight must be one of {', '.join(WEIGHTS)}, got {relevance_weight!r}")
        if inner_estimator not in ("list_mean", "stratified"):
            raise ValueError(f"inner_estimator must be 'list_mean' or 'stratified', got {inner_estimator!r}")
        self.relevance_weight, self.inner_estimator = relevance_weight, inner_estimator

    # ------------------------------------------------------------------ per-row quantities
    @staticmethod
    def _field(batch: dict[str, torch.Tensor], key: str, why: str) -> torch.Tensor:
        if key not in batch:
            raise KeyError(f"ListwiseCE({why}) needs the batch field '{key}' [B]; the batch has {sorted(batch)}")
        return batch[key]

    def _check_full_relevant(self, relevant: torch.Tensor, batch: dict[str, torch.Tensor], why: str) -> None:
        """The list must hold every relevant item of its query when a normalizer is computed from the list."""
        if "num_relevant" in batch and relevant.device.type == "cpu":
            in_list = relevant.sum(1)
            bad = torch.nonzero(in_list != batch["num_relevant"].to(in_list.dtype)).flatten()
            if bad.numel():
                r = int(bad[0])
                raise ValueError(
                    f"ListwiseCE({why}): batch row {r} holds {int(in_list[r])} of its query's "
                    f"{int(batch['num_relevant'][r])} relevant items, so the weight's normalizer cannot be taken from "
                    "the list: add the batch field 'relevance_sum' (Σ of the query's relevance) or use full lists"
                )

    def pair_weight(self, batch: dict[str, torch.Tensor], relevant: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` target probability ``P_q(y_i)`` of every entry (only relevant entries are read)."""
        rel = batch["relevance"].to(torch.float64)
        if self.relevance_weight == "none":
            return torch.ones_like(rel)
        if self.relevance_weight == "uniform":
            if "num_relevant" in batch:
                count = batch["num_relevant"].to(rel.dtype)
            else:
                count = relevant.sum(1).to(rel.dtype)
            return torch.ones_like(rel) / count.clamp_min(1.0).unsqueeze(1)
        if "relevance_sum" in batch:
            total = batch["relevance_sum"].to(rel.dtype)
        else:
            self._check_full_relevant(relevant, batch, "relevance_weight='linear'")
            total = (rel * relevant).sum(1)
        return rel / total.clamp_min(torch.finfo(rel.dtype).tiny).unsqueeze(1)

    # ------------------------------------------------------------------ FCCO interface
    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        if scores.dim() != 2:
            raise ValueError(f"ListwiseCE expects scores [B, L] (one score per list entry), got {tuple(scores.shape)}")
        pair_index = batch["pair_index"]
        mask = batch.get("mask")
        mask = torch.ones_like(pair_index, dtype=torch.bool) if mask is None else mask.bool()
        relevant = mask & (batch["relevance"] > 0)
        rows = torch.nonzero(pair_index >= 0)  # [R, 2]: (list, position) of each anchor
        q, a = rows[:, 0], rows[:, 1]
        s = scores.index_select(0, q)  # [R, L]
        real = mask.index_select(0, q)
        # e_x = exp(h(x) − h(x_i)), exactly 0 on padding (whose scores may be anything: never exponentiated)
        e = torch.exp(torch.where(real, s - s.gather(1, a.unsqueeze(1)), torch.zeros_like(s))) * real
        num_items = self._field(batch, "num_items", "the log N_q constant").to(scores.dtype).index_select(0, q)
        if self.inner_estimator == "list_mean":
            value = e.sum(1) / real.sum(1).to(scores.dtype)
        else:
            n_rel = self._field(batch, "num_relevant", "inner_estimator='stratified'").to(scores.dtype).index_select(0, q)
            rel_q = relevant.index_select(0, q).to(scores.dtype)
            other_q = (mask & ~relevant).index_select(0, q).to(scores.dtype)
            own = torch.zeros_like(e).scatter_(1, a.unsqueeze(1), 1.0)  # the anchor's own position
            p_q, m_q = rel_q.sum(1), other_q.sum(1)
            w_rel = torch.where(p_q > 1, (n_rel - 1) / (p_q - 1).clamp_min(1.0), torch.zeros_like(p_q))
            w_other = torch.where(m_q > 0, (num_items - n_rel) / m_q.clamp_min(1.0), torch.zeros_like(m_q))
            weight = own + (1 - own) * (rel_q * w_rel.unsqueeze(1) + other_q * w_other.unsqueeze(1))
            value = (e * weight).sum(1) / num_items
        context = {
            "weight": self.pair_weight(batch, relevant)[q, a].to(scores.dtype),
            "log_num_items": torch.log(num_items),
        }
        return InnerBatch(index=pair_index[q, a], value=value.unsqueeze(-1), context=context)

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return context["weight"] * (torch.log(u[:, 0]) + context["log_num_items"])

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        return (context["weight"] / u[:, 0]).unsqueeze(-1)
