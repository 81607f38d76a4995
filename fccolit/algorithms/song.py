"""SONG, K-SONG and SOLC (Qiu et al., ICML 2022): stochastic optimization of NDCG, top-K NDCG and listwise
cross-entropy.

All three are SOX (one moving average per relevant (query, item) pair, selective update, gradient
``mean_i ∇f_i(u_i) ∇ĝ_i``) on a ranking objective, with the ranking batch schema as input:

* :class:`SONG` (Algorithm 1): SOX on :class:`~fccolit.objectives.ndcg.NDCGSurrogate`;
* :class:`KSONG` (Algorithm 2 / 5): adds the per-query threshold λ_q (one SGD step on the smoothed lower level
  per visit) and the selector ψ; the *theoretical* estimator (eq. (11), sign corrected) keeps the per-query
  moving average s_q of ``∂²_λ L_q`` for the implicit gradient; the *practical* one (eq. (8)) stops the gradient
  through ψ and needs no s_q. The attribute :attr:`KSONG.estimator` switches between them
  (:class:`fccolit.callbacks.stop_gradient.StopGradientSwitch` flips it during training);
* :class:`SOLC` (Algorithm 3): SOX on :class:`~fccolit.objectives.listwise.SOLCListwiseCELoss` with the freshly updated
  u and a log-domain state; the warm-up of the other two (:class:`fccolit.callbacks.warmup.WarmUp`).

Evaluation: learning-to-rank batches (``features``, ``relevance``, ``mask``) are scored list by list and feed
``{stage}/ndcg@k`` (FCCOModule's metrics); recommendation batches with ``heldout_items`` are scored against every
item (``model.score_all``) and feed :class:`~fccolit.metrics.FullRankingNDCGScore`, one more metric of the same
:class:`~fccolit.metrics.EvaluationMetrics`, logged under the same names.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

import math
from typing import Iterable, Literal, Sequence

import torch
from torch import nn

from fccolit.algorithms.sox import SOX
from fccolit.metrics import EvaluationMetrics, FullRankingNDCGScore, NDCGScore
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.listwise import SOLCListwiseCELoss
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate
from fccolit.state import StateUpdate

#: Default metrics (Qiu et al., §7.1 and §7.2): NDCG@{1,3,5} for learning to rank, @{10,20,50} for recommendation.
LTR_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5")
EMPTY_QUERY_POLICIES = ("zero", "one", "skip")
RECOMMENDATION_METRICS = ("ndcg@10", "ndcg@20", "ndcg@50")
ESTIMATORS = ("practical", "theoretical")


def score_lists(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Scores ``[B, L]`` of a ranking batch: ``model(features [B, L, F], mask)`` for learning to rank,
    ``model(query [B], items [B, L])`` for recommendation."""
    if "features" in batch:
        return model(batch["features"], batch.get("mask"))
    if "items" in batch:
        return model(batch["query"], batch["items"])
    raise ValueError(
        f"{type(model).__name__} scores ranking batches, which hold 'features' [B, L, F] (learning to rank) or 'query' "
        f"[B] and 'items' [B, L] (recommendation); this batch has {sorted(batch)}: train a ranking algorithm (SONG, "
        "K-SONG, SOLC) on a ranking DataModule, or a classification one (SOX, SOAP, ...) on this data"
    )


def _ndcg_cutoff(name: str, num_items: int) -> int:
    key = name.strip().lower().rsplit("/", 1)[-1]
    if key == "ndcg":
        return num_items
    if key.startswith("ndcg@") and key[5:].isdigit():
        return int(key[5:])
    raise ValueError(f"recommendation data is evaluated by full-ranking NDCG: metric names must be 'ndcg@K' or "
                     f"'ndcg', got {name!r}")


class RankingEvaluation:
    """Mixin of the ranking modules: scoring ranking batches, NDCG metrics, full-ranking evaluation, Adam lr 1e-3.

    What every module trained on ranking batches shares, whatever its loss (:class:`RankingSOX` and its SONG, K-SONG,
    SOLC; :class:`~fccolit.algorithms.ranking.MiniBatchRanking`): ``forward`` scores a batch list by list
    (:func:`score_lists`), the default metrics are NDCG@{1,3,5} for learning to rank and NDCG@{10,20,50} for
    recommendation (told apart by ``num_users`` in ``data_sizes``; :meth:`ranking_metric_names`), recommendation is
    evaluated by full ranking, NDCG counts an empty query as ``empty_query`` says, and the default optimizer is the
    papers' (Adam with default betas, lr 1e-3; Qiu et al., §7 and §7.1).

    Args:
        None: a mixin without a constructor; the host calls :meth:`ranking_metric_names` before
            :class:`~fccolit.algorithms.base.FCCOModule`'s constructor, which builds the metrics.

    Raises:
        ValueError: from :meth:`ranking_metric_names`, ``empty_query`` not one of ``"zero"``, ``"one"``, ``"skip"``;
            a recommendation metric name other than ``"ndcg@K"`` / ``"ndcg"``; in evaluation, a full-ranking batch
            (``heldout_items``) for a module built without ``num_users`` in ``data_sizes``.
        TypeError: in evaluation, a full-ranking batch for a model without ``score_all``.

    Example:
        >>> from fccolit.algorithms import SONG
        >>> from fccolit.models.ltr import ListMLP
        >>> module = SONG(ListMLP(), data_sizes={"num_queries": 3, "num_features": 2, "num_pairs": 4}, empty_query="one")
        >>> isinstance(module, RankingEvaluation), module.empty_query, module.metric_names
        (True, 'one', ['ndcg@1', 'ndcg@3', 'ndcg@5'])
    """

    def ranking_metric_names(
        self, metrics: Sequence[str] | None, empty_query: str, data_sizes: dict[str, int] | None
    ) -> Sequence[str]:
        """Check and keep ``empty_query``; the metric names: ``metrics``, or the default for the data (NDCG@{10,20,50}
        for recommendation data_sizes with ``num_users``, NDCG@{1,3,5} otherwise)."""
        if empty_query not in EMPTY_QUERY_POLICIES:
            raise ValueError(f"empty_query must be one of {', '.join(EMPTY_QUERY_POLICIES)}, got {empty_query!r}")
        self.empty_query = empty_query
        if metrics is not None:
            return metrics
        return RECOMMENDATION_METRICS if "num_users" in (data_sizes or {}) else LTR_METRICS

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return score_lists(self.model, batch)

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """Adam, lr 1e-3, default betas (the experiments of Qiu et al., §7, §7.1 and Table 4's protocol)."""
        return torch.optim.Adam(params, lr=1e-3)

    # ------------------------------------------------------------------ evaluation
    def build_metrics(self) -> EvaluationMetrics:
        """NDCG@k of candidate lists (``relevance``, ``mask``) counting an empty query as ``empty_query`` says,
        and, with recommendation ``data_sizes`` (``num_users``) evaluated by full ranking (no ``eval_negatives``:
        sampled candidates are lists, for the NDCG@k above), one :class:`~fccolit.metrics.FullRankingNDCGScore` for the
        full-ranking batches (``heldout_items``), logged under the same names (one ``topk`` serves every cut-off).
        Each batch feeds the metrics that read its fields."""
        metrics = super().build_metrics()
        for _, metric in metrics.named_metrics():
            if isinstance(metric, NDCGScore):
                metric.empty_query = self.empty_query
        if "num_users" in self.data_sizes and not self.data_sizes.get("eval_negatives") and self.metric_names:
            cutoffs = [_ndcg_cutoff(n, int(self.data_sizes["num_items"])) for n in self.metric_names]
            metrics.add("full_ranking_ndcg", FullRankingNDCGScore(cutoffs, empty_query=self.empty_query, names=self.metric_names))
        return metrics

    def evaluation_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """A full-ranking batch (``heldout_items``) is scored against every item, ``model.score_all(query)`` ``[U, I]``;
        any other batch list by list (:func:`score_lists`)."""
        if "heldout_items" not in batch:
            return self(batch)
        if "num_users" not in self.data_sizes:
            raise ValueError(
                "a full-ranking evaluation batch (heldout_items) needs a module built with recommendation data_sizes "
                "(num_users, num_items)"
            )
        if not hasattr(self.model, "score_all"):
            raise TypeError(f"{type(self.model).__name__} has no score_all(query): it cannot rank every item")
        return self.model.score_all(batch["query"])


class RankingSOX(RankingEvaluation, SOX):
    """SOX on a per-pair ranking objective, with ranking batches as input and NDCG evaluation (Qiu et al., ICML 2022).

    Everything SONG, K-SONG and SOLC share besides their objective and state rule (the ranking part from
    :class:`RankingEvaluation`): scoring a batch (:func:`score_lists`), the default metrics (NDCG@{1,3,5} for
    learning to rank, NDCG@{10,20,50} for recommendation, told apart by ``num_users`` in ``data_sizes``),
    full-ranking evaluation for recommendation, and the papers' optimizer (Adam with default betas, lr 1e-3; Qiu et
    al., §7 and §7.1).

    Args:
        model: a list scorer (:class:`~fccolit.models.ltr.ListMLP`, :class:`~fccolit.models.ltr.ContextAwareRanker`)
            or NeuMF-like ``model(query, items)`` with ``score_all(query)`` for full-ranking evaluation.
        objective: a ranking objective (one state row per ``num_pairs``).
        ema_weight: γ0, weight of the new inner estimate.
        u_for_gradient: ``"previous"`` (u^t, Algorithms 1, 2, 4, 5) or ``"fresh"`` (u^{t+1}, Algorithm 3, the
            authors' code, LibAUC). The first visit of a pair sets u to the estimate (the
            algorithms start from u = 0, where ∇f is infinite), so neither divides by zero.
        metrics: logged names (default above).
        empty_query: what NDCG counts for a query with no relevant item (ideal DCG 0) in validation and test:
            ``"zero"`` (default, torchmetrics' convention), ``"one"`` (allRank's, the learning-to-rank harness that Qiu
            et al., ICML 2022 ran their MSLR / Yahoo experiments in) or ``"skip"`` (left out of
            the mean). MSLR-WEB30K has about 3% of such queries, so the choice moves NDCG@k by up to 0.03.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`.

    Raises:
        ValueError: ``empty_query`` not one of ``"zero"``, ``"one"``, ``"skip"``; a recommendation metric name other
            than ``"ndcg@K"`` / ``"ndcg"``; ``ema_weight`` (γ0) outside (0, 1] or ``u_for_gradient`` other than
            ``"previous"`` / ``"fresh"``; in a step, a batch with neither ``features`` nor ``items``; in evaluation, a
            full-ranking batch (``heldout_items``) for a module built without ``num_users`` in ``data_sizes``.
        TypeError: in evaluation, a full-ranking batch for a model without ``score_all``.

    Example:
        The default metrics follow the data: NDCG@{1,3,5} for learning to rank, @{10,20,50} for recommendation.

        >>> from fccolit.algorithms import RankingSOX
        >>> from fccolit.models.ltr import ListMLP
        >>> from fccolit.models.neumf import NeuMF
        >>> from fccolit.objectives.ndcg import NDCGSurrogate
        >>> RankingSOX(ListMLP(), NDCGSurrogate(), data_sizes={"num_queries": 3, "num_features": 2, "num_pairs": 4}
        ...            ).metric_names
        ['ndcg@1', 'ndcg@3', 'ndcg@5']
        >>> RankingSOX(NeuMF(), NDCGSurrogate(), data_sizes={"num_users": 3, "num_items": 5, "num_queries": 3,
        ...                                                  "num_pairs": 4}).metric_names
        ['ndcg@10', 'ndcg@20', 'ndcg@50']
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.1,
        u_for_gradient: Literal["previous", "fresh"] = "previous",
        metrics: Sequence[str] | None = None,
        empty_query: Literal["zero", "one", "skip"] = "zero",
        **kwargs,
    ) -> None:
        metrics = self.ranking_metric_names(metrics, empty_query, kwargs.get("data_sizes"))
        super().__init__(model, objective, ema_weight=ema_weight, u_for_gradient=u_for_gradient, metrics=metrics, **kwargs)


class SONG(RankingSOX):
    r"""SONG: stochastic optimization of the NDCG surrogate (Qiu et al., ICML 2022, arXiv:2202.12183, Algorithm 1).

    For every relevant pair (q, i) of the batch (others unchanged)::

        ĝ_{q,i} = mean_{x'∈B_q} ℓ(h_q(x') − h_q(x_i))            (the objective's inner estimate)
        u_{q,i} ← (1 − γ0) u_{q,i} + γ0 ĝ_{q,i}                   (first visit: u_{q,i} ← ĝ_{q,i})
        G = mean_{(q,i)} ∇f_{q,i}(u_{q,i}^{t}) ∇ĝ_{q,i}           (old u, as Algorithm 1; "fresh" optional)

    then Adam (the experiments) or heavy-ball momentum (Algorithm 1 as printed: pass
    ``fccolit.optim.Momentum(lr=η, momentum_weight=1 − β1)``). The state is one float per relevant training pair,
    rows ``num_pairs``, indexed by the batch field ``pair_index``.

    Args:
        model: see :class:`RankingSOX`.
        objective: default :class:`~fccolit.objectives.ndcg.NDCGSurrogate` (squared hinge, margin 1).
        ema_weight: γ0 (Table 4: 0.1 on MovieLens-20M, 0.3 on Netflix, MSLR-WEB30K and Yahoo; 0.1 is best "in
            most cases", App. D.3, and is the default).
        u_for_gradient: ``"previous"`` (Algorithm 1, default) or ``"fresh"``.
        (the rest): see :class:`RankingSOX`.

    Raises:
        ValueError: ``ema_weight`` (γ0) outside (0, 1]; and :class:`RankingSOX`'s.
        TypeError: see :class:`RankingSOX`.
        FloatingPointError: a non-finite inner estimate, gradient or loss in a training step (the step is not taken).

    Example:
        >>> from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
        >>> from fccolit.models.ltr import ListMLP
        >>> data = SyntheticRankingDataModule(task="ltr", num_queries=3, num_features=2, list_size=(3, 4), top_k=2,
        ...                                   num_positives=None, num_negatives=None, val_queries=1, test_queries=1)
        >>> data.setup()
        >>> batch = data.full_batch()  # every training query with its whole list
        >>> from fccolit.algorithms import SONG
        >>> module = SONG(ListMLP(hidden=[4]), data_sizes=data.sizes)
        >>> module.state  # one u per relevant (query, item) pair
        IndexedState(name=u, num_rows=4, dim=1, decay_unsampled=False, initial='first_estimate')
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> loss.shape, f_u.shape, bool(module.state.visited().all())
        (torch.Size([]), torch.Size([4]), True)
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective | None = None,
        ema_weight: float = 0.1,
        u_for_gradient: Literal["previous", "fresh"] = "previous",
        **kwargs,
    ) -> None:
        super().__init__(model, objective if objective is not None else NDCGSurrogate(), ema_weight, u_for_gradient, **kwargs)


class KSONG(SONG):
    r"""K-SONG: stochastic optimization of top-K NDCG (Qiu et al., ICML 2022, arXiv:2202.12183, Algorithms 2 and 5).

    Per step, with the old values u^t, λ^t, s^t in the gradient (Algorithm 5)::

        λ_q ← λ_q − η0 ∂_λ L_q(λ_q; w; B_q)                               every query of the batch
        s_q ← (1 − γ0') s_q + γ0' ∂²_λ L_q(λ_q; w; B_q)                   theoretical estimator only
        u_{q,i} ← (1 − γ0) u_{q,i} + γ0 ĝ_{q,i}                           every relevant pair of the batch
        practical   (eq. (8)):  G = mean ψ(h_i − λ_q) ∇f(u) ∇ĝ            ψ at the detached score
        theoretical (eq. (11)): G = mean [ ψ(h_i − λ_q) ∇f(u) ∇ĝ + ψ'(h_i − λ_q) f(u) (∇h_i − ∇λ̂_q) ],
                                ∇λ̂_q = Σ_j c_j σ'(z_j)/τ1 ∇h_j / s_q

    Eq. (7) of the main text adds ∇λ̂ instead of subtracting it; that sign is wrong (the implicit function theorem
    gives the score's gradient *minus* the threshold's, and a finite-difference check agrees) and the App. E sign is
    used. λ_q and s_q are per-query states (rows ``num_queries``, indexed by ``query``), synchronized under DDP like
    u. First visits: λ starts at ``lambda_init`` (0 in Algorithm 2), s at its first
    estimate (Algorithm 2 gives no s^0, and s = 0 would divide by zero).

    Args:
        model: see :class:`RankingSOX`.
        objective: default :class:`~fccolit.objectives.ndcg.TopKNDCGSurrogate` (K = 10); the DataModule's
            ``top_k`` (which computes ``ideal_dcg_at_k``) must be the objective's K.
        ema_weight: γ0 (Table 4, see :class:`SONG`).
        estimator: ``"practical"`` (stop-gradient through ψ: the version in all of the paper's tables, default) or
            ``"theoretical"``. A plain attribute: switch it at any time.
        lambda_lr: η0, the λ step size (not given in the paper; 0.01 as the authors' code and LibAUC). The step
            is stable for η0 < 2/(τ2 + 1/(4τ1)).
        hessian_ema_weight: γ0', weight of the new ∂²_λ L estimate in s_q (not given; 0.9 as the authors' code and
            LibAUC).
        lambda_init: the first-visit λ: a number (0.0, Algorithm 2) or ``"solve"`` (the exact minimizer of the
            first batch's lower level, not in the paper: λ then starts at the batch's top-K threshold instead of
            walking there by η0-steps, one per epoch per query; the shipped configs use it, as a λ started at 0
            with η0 = 0.01 stays far below the (K+1)-th score for the whole run).
        u_for_gradient: ``"previous"`` (Algorithm 5, default) or ``"fresh"``.
        (the rest): see :class:`SONG`.

    Raises:
        TypeError: an objective that is not a :class:`~fccolit.objectives.ndcg.TopKNDCGSurrogate`.
        ValueError: ``estimator`` not ``"practical"`` / ``"theoretical"``; ``lambda_lr`` (η0) ≤ 0;
            ``hessian_ema_weight`` (γ0') outside (0, 1]; a string ``lambda_init`` other than ``"solve"``;
            ``data_sizes["top_k"]`` other than the objective's K; and :class:`RankingSOX`'s.

    Example:
        >>> from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
        >>> from fccolit.models.ltr import ListMLP
        >>> data = SyntheticRankingDataModule(task="ltr", num_queries=3, num_features=2, list_size=(3, 4), top_k=2,
        ...                                   num_positives=None, num_negatives=None, val_queries=1, test_queries=1)
        >>> data.setup()
        >>> batch = data.full_batch()  # every training query with its whole list
        >>> from fccolit.algorithms import KSONG
        >>> from fccolit.objectives.ndcg import TopKNDCGSurrogate
        >>> module = KSONG(ListMLP(hidden=[4]), TopKNDCGSurrogate(top_k=2), data_sizes=data.sizes)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.threshold.visited()  # λ_q of every query took one step
        tensor([True, True, True])
        >>> KSONG(ListMLP(), data_sizes=data.sizes)  # the default objective's K = 10
        Traceback (most recent call last):
        ...
        ValueError: the DataModule computes ideal_dcg_at_k for top_k=2 but the objective's K is 10: ...

    Logged on logging steps: ``train/share_above_lambda`` against ``train/top_k_share`` (see
    :meth:`log_threshold_share`), which tells whether λ tracks the top-K threshold.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective | None = None,
        ema_weight: float = 0.1,
        estimator: Literal["practical", "theoretical"] = "practical",
        lambda_lr: float = 0.01,
        hessian_ema_weight: float = 0.9,
        lambda_init: float | Literal["solve"] = 0.0,
        u_for_gradient: Literal["previous", "fresh"] = "previous",
        **kwargs,
    ) -> None:
        objective = objective if objective is not None else TopKNDCGSurrogate()
        if not isinstance(objective, TopKNDCGSurrogate):
            raise TypeError(f"KSONG needs a TopKNDCGSurrogate objective (threshold λ and selector ψ), got {type(objective).__name__}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if not lambda_lr > 0:
            raise ValueError(f"lambda_lr (η0) must be > 0, got {lambda_lr}")
        if not 0.0 < hessian_ema_weight <= 1.0:
            raise ValueError(f"hessian_ema_weight (γ0') must be in (0, 1], got {hessian_ema_weight}")
        if isinstance(lambda_init, str) and lambda_init != "solve":
            raise ValueError(f"lambda_init must be a number or 'solve', got {lambda_init!r}")
        sizes = kwargs.get("data_sizes") or {}
        if "top_k" in sizes and int(sizes["top_k"]) != objective.top_k:
            raise ValueError(
                f"the DataModule computes ideal_dcg_at_k for top_k={sizes['top_k']} but the objective's K is "
                f"{objective.top_k}: set both to the same K"
            )
        self.estimator = estimator
        self.lambda_lr, self.hessian_ema_weight, self.lambda_init = float(lambda_lr), float(hessian_ema_weight), lambda_init
        super().__init__(model, objective, ema_weight, u_for_gradient, **kwargs)

    def configure_state(self) -> None:
        super().configure_state()
        self.threshold = self.make_state(1, name="lambda", rows_key="num_queries")
        self.curvature = self.make_state(1, name="s", rows_key="num_queries")

    def _threshold_before(self, query: torch.Tensor, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """λ^t of the batch's queries ``[B]``, with the first-visit value where a query was never visited."""
        lam = self.threshold.read(query)[:, 0].to(scores.dtype)
        unvisited = torch.isnan(lam)
        if self.lambda_init == "solve":
            if bool(unvisited.any()):
                lam = torch.where(unvisited, self.objective.solve_threshold(scores, batch).to(scores.dtype), lam)
            return lam
        return torch.where(unvisited, torch.full_like(lam, float(self.lambda_init)), lam)

    def log_threshold_share(self, scores: torch.Tensor, batch: dict[str, torch.Tensor], lam: torch.Tensor) -> None:
        """On the steps the logger writes: ``train/share_above_lambda``, the estimated share of each list above its
        λ_q (``Σ_j c_j 1(h_j > λ_q)`` with the lower level's item weights c, mean over the batch's queries), beside
        ``train/top_k_share``, the share a top-K threshold leaves above it (mean ``K/N_q``). A λ that tracks the
        (K+1)-th score keeps the two close; a λ far below it (a small ``lambda_lr`` after a start at 0) leaves most
        of the list above, and ψ then selects nearly everything (K-SONG ≈ SONG with a soft weight)."""
        if not self.logs_this_step or self._trainer is None or scores.shape[0] == 0:
            return
        with torch.no_grad():
            share, target = self.objective.share_above(scores, batch, lam)
        self.log("train/share_above_lambda", float(share.mean()), on_step=True, on_epoch=False)
        self.log("train/top_k_share", float(target.mean()), on_step=True, on_epoch=False)

    def inner_estimates(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """The threshold steps of the batch's queries (λ, and s for the theoretical estimator), then the pairs'
        estimates with the per-row context K-SONG's weights need: ``margin`` ``h_i − λ_q`` (detached) and, for the
        theoretical estimator, ``implicit_threshold`` (``λ̂_q`` written so that its gradient is ∇λ̂_q)."""
        objective: TopKNDCGSurrogate = self.objective
        query = batch["query"]
        lam = self._threshold_before(query, scores.detach(), batch)
        lower = objective.lower_level(scores, batch, lam)
        self.log_threshold_share(scores.detach(), batch, lam)
        self.threshold.update(
            query, (lam - self.lambda_lr * lower.grad).unsqueeze(1), ema_weight=1.0, synced=self.synced
        )
        if self.estimator == "theoretical":
            s = self.curvature.update(
                query, lower.hess.unsqueeze(1), ema_weight=self.hessian_ema_weight, synced=self.synced
            )
            implicit = objective.threshold_score(scores, lower.weights) / s.previous[:, 0].to(scores.dtype)
        inner = objective.inner(scores, batch)
        row = inner.context["row"]
        inner.context["margin"] = inner.context["anchor_score"].detach() - lam.index_select(0, row)
        if self.estimator == "theoretical":
            inner.context["implicit_threshold"] = implicit.index_select(0, row)  # ∇(this) = ∇λ̂_q
        return inner

    def estimator_weights(self, u: torch.Tensor, inner: InnerBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Practical (eq. (8)): ``ψ(h_i − λ_q) ∇f(u)`` on ``ĝ``; theoretical (eq. (11)) adds the column
        ``ψ'(h_i − λ_q) f(u)`` on ``h_i − λ̂_q``."""
        objective: TopKNDCGSurrogate = self.objective
        ctx = inner.context
        weights = objective.selector(ctx["margin"]) * objective.outer_grad(u, ctx)[:, 0]
        if "implicit_threshold" not in ctx:
            return weights.unsqueeze(1), inner.value[:, :1]
        implicit_weight = objective.selector_grad(ctx["margin"]) * objective.outer(u, ctx)
        return (torch.stack([weights, implicit_weight], 1),
                torch.stack([inner.value[:, 0], ctx["anchor_score"] - ctx["implicit_threshold"]], 1))

    def plug_in_estimate(self, u: torch.Tensor, inner: InnerBatch) -> torch.Tensor:
        """``ψ(h_i − λ_q) f(u_i)``: the pair's share of the top-K objective."""
        objective: TopKNDCGSurrogate = self.objective
        return objective.selector(inner.context["margin"]) * objective.outer(u, inner.context)


class SOLC(RankingSOX):
    r"""SOLC: stochastic optimization of listwise cross-entropy (Qiu et al., ICML 2022, arXiv:2202.12183, Algorithm 3).

    The warm-up of SONG and K-SONG (:class:`fccolit.callbacks.warmup.WarmUp`).

    Qiu et al.'s Algorithm 3 of App. B. For every relevant pair (q, i) of the batch::

        ĝ_{q,i} = mean_{x_j∈B_q} exp(h_j − h_i)
        u_{q,i} ← (1 − γ0) u_{q,i} + γ0 ĝ_{q,i}              (first visit: u ← ĝ)
        G = mean_{(q,i)} ∇f(u_{q,i}^{t+1}) ∇ĝ_{q,i},  ∇f(u) = weight/u    (the fresh u, as Algorithm 3)

    Algorithm 3 as printed drops the factor exp(h_j − h_i) from G; G here is the chain rule's (it has the factor).
    The state holds **ln u** (rows ``num_pairs``), updated as ``ln u ← logaddexp(ln(1 − γ0) + ln u, ln γ0 + ln ĝ)``
    with ``ln ĝ`` a log-sum-exp, so large score gaps never overflow (a per-batch shift of the exponent would put u on
    a different scale every step, as LibAUC's implementation does). The step's loss is
    ``mean weight · exp(ln ĝ(w) − ln u)``, whose gradient is ``G``.

    ``ema_weight=1`` is plain mini-batch listwise cross-entropy (ListNet on the sampled lists).

    Args:
        model: see :class:`RankingSOX`.
        objective: default :class:`~fccolit.objectives.listwise.SOLCListwiseCELoss` (needs ``log_inner``).
        ema_weight: γ0 (0.1: the authors' warm-up γ0 and the best of Fig. 11's left panels).
        u_for_gradient: ``"fresh"`` (Algorithm 3, default) or ``"previous"``.
        (the rest): see :class:`RankingSOX`.

    Raises:
        TypeError: an objective without ``log_inner`` / ``outer_log`` (SOLC keeps ln u).
        ValueError: ``initial_state`` other than ``"first_estimate"`` (the log-domain state has its own first
            visit); and :class:`RankingSOX`'s.

    Example:
        >>> from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
        >>> from fccolit.models.ltr import ListMLP
        >>> data = SyntheticRankingDataModule(task="ltr", num_queries=3, num_features=2, list_size=(3, 4), top_k=2,
        ...                                   num_positives=None, num_negatives=None, val_queries=1, test_queries=1)
        >>> data.setup()
        >>> batch = data.full_batch()  # every training query with its whole list
        >>> from fccolit.algorithms import SOLC
        >>> module = SOLC(ListMLP(hidden=[4]), data_sizes=data.sizes)
        >>> module.state  # ln u per relevant pair
        IndexedState(name=log_u, num_rows=4, dim=1, decay_unsampled=False, initial='first_estimate')
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> f_u.shape, bool(module.state.visited().all())
        (torch.Size([4]), True)
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective | None = None,
        ema_weight: float = 0.1,
        u_for_gradient: Literal["fresh", "previous"] = "fresh",
        **kwargs,
    ) -> None:
        objective = objective if objective is not None else SOLCListwiseCELoss()
        if not hasattr(objective, "log_inner"):
            raise TypeError(f"SOLC keeps ln u and needs an objective with log_inner / outer_log (SOLCListwiseCELoss), got "
                            f"{type(objective).__name__}; run SOX for the linear-state version")
        super().__init__(model, objective, ema_weight, u_for_gradient, **kwargs)

    def configure_state(self) -> None:
        self.state = self.make_state(1, name="log_u")

    def inner_estimates(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """``ln ĝ`` of every relevant pair (a log-sum-exp: large score gaps never overflow)."""
        return self.objective.log_inner(scores, batch)

    def update_state(self, inner: InnerBatch) -> StateUpdate:
        """The moving average in the log domain: ``ln u ← logaddexp(ln(1 − γ0) + ln u, ln γ0 + ln ĝ)`` (first
        visit: ``ln u ← ln ĝ``)."""
        log_g = inner.value.detach()
        state = self.state
        old = state.read(inner.index).to(log_g.dtype)
        gamma = self.ema_weight
        if gamma >= 1.0:
            new = log_g
        else:
            mixed = torch.logaddexp(old + math.log1p(-gamma), log_g + math.log(gamma))
            new = torch.where(torch.isnan(old), log_g, mixed)
        return state.update(inner.index, new, ema_weight=1.0, synced=self.synced)

    def estimator_weights(self, u: torch.Tensor, inner: InnerBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``weight`` on ``ĝ(w)/u = exp(ln ĝ(w) − ln u)`` (value 1 at u = ĝ): its gradient is ``weight/u ∇ĝ``."""
        ratio = torch.exp(inner.value[:, :1] - u[:, :1].detach().to(inner.value.dtype))
        return inner.context["weight"].reshape(-1, 1), ratio

    def plug_in_estimate(self, u: torch.Tensor, inner: InnerBatch) -> torch.Tensor:
        """``f(u)`` from ``ln u``: the pair's listwise cross-entropy term."""
        return self.objective.outer_log(u.to(inner.value.dtype), inner.context)
