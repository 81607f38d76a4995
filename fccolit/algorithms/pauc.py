r"""Partial AUC on an FPR range and the sum of ranked range (seed 003): AGD-SBCD, SoRR, DCA, proximal DCA, and
mini-batch baselines.

The problem (:mod:`fccolit.objectives.pauc`) is the DC program ``F = f^n − f^m`` with ``f^l = Σ_i φ_l(S_i)``.
AGD-SBCD (seed 003 Algorithms 1–2) smooths both parts by their Moreau envelopes and descends on
``F^μ = f^n_μ − f^m_μ`` with ``∇F^μ(w) = (v_{μf^m}(w) − v_{μf^n}(w))/μ``; each prox point ``v_{μf^l}(w)`` is
approximated by stochastic block coordinate descent (SBCD) on the joint (v, λ) problem (13) with one threshold
``λ_i`` per positive from the threshold form (12).

Units. Every hyper-parameter is in the paper's **scale-free** form (seed 003 note §2.3), which does not depend on
the data size: with ``N₊N₋`` pairs (``N`` samples for SoRR),

==================  ===================================  ==============================================
argument            paper                                meaning
==================  ===================================  ==============================================
``mu``              μ' = μ·N₊N₋  (E.2: 10² or 10³)       Moreau smoothing; ``c/μ'`` is the pull to w
``gamma``           γ' = γ·N₊N₋  (E.2: 2·10³, 5·10³)     outer step; only γ'/μ' = γ/μ matters
``lr``              c   (η_t = c/((k+1)N₊N₋))            step on the mean masked pair-loss gradient
``lambda_lr``       c   (θ_t = c/((k+1)N₋))              step of the thresholds (default: ``lr``)
``inner_steps``     C   (T_k = C(k+1)², C = 50)           SBCD steps per prox point at outer step k
==================  ===================================  ==============================================

One SBCD step (Algorithm 1, steps 4–8), with ``ĝ`` the gradient of the mean over the batch's ``I × J`` pairs of
``s_ij · 1(s_ij > λ_i)`` and ``p̂_i`` the share of the batch's negatives with ``s_ij > λ_i``::

    v   ← v − (μ'c_k/(μ'+c_k)) · [ĝ + (v − w)/μ']          (the closed form of the prox step (14))
    λ_i ← λ_i + θ'_k (p̂_i − l/N₋)                          (eq. (15), a stochastic quantile tracker)

with ``c_k = c/(k+1)`` (``step_decay``). The v step is taken by the module's optimizer: plain ``torch.optim.SGD``
(the default) receives the gradient ``ĝ + (v − w)/μ'`` and the learning rate ``μ'c_k/(μ'+c_k)``, which is exactly the
closed form. Another optimizer (momentum, Adam for deep backbones) gets the same gradient and learning rate; that
is an extension, not the paper's method.

Lightning's loop runs one batch per step, so the double loop is a state machine: every training batch is one SBCD
step, the branch (m, then n) switches after ``T_k`` steps, and the outer update happens after both branches. The
loop position (k, t, branch) is part of the module's state dict (``get_extra_state``), and the anchor ``w``, the
running sums and the averaged prox points are persistent buffers, so checkpoints resume mid-branch exactly.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import torch
from torch import nn

from fccolit import distributed
from fccolit.algorithms.base import FCCOModule
from fccolit.objectives.pauc import (
    PartialAUCRange,
    RankedRangeBatch,
    RankedRangeObjective,
    SumOfRankedRange,
    ranked_range_mean,
    threshold_interval,
)
from fccolit.state import IndexedState

__all__ = [
    "ThresholdTracker",
    "prox_sgd_step",
    "PAUCRange",
    "SoRR",
    "DCA",
    "ProximalDCA",
    "MiniBatchPAUC",
    "PairwiseAUC",
]


def prox_sgd_step(v: torch.Tensor, anchor: torch.Tensor, grad: torch.Tensor, eta: float, mu: float) -> torch.Tensor:
    """The closed form of seed 003 eq. (14): ``argmin_x Gᵀx + ‖x − w‖²/(2μ) + ‖x − v‖²/(2η)``.

    ``= (η w + μ v − μη G)/(μ + η) = v − (μη/(μ+η)) · [G + (v − w)/μ]``: one gradient step with learning rate
    ``μη/(μ+η)`` on ``Gᵀx + ‖x − w‖²/(2μ)``, which is how the modules take it. Works in paper units (μ, η, G_v) and in
    scale-free units (μ', c_k, ĝ) alike.
    """
    return v - (mu * eta / (mu + eta)) * (grad + (v - anchor) / mu)


# ----------------------------------------------------------------------------------------------------------
# the per-row thresholds λ
# ----------------------------------------------------------------------------------------------------------
class ThresholdTracker(nn.Module):
    r"""One threshold ``λ_r`` per row (per positive for pAUC, one for SoRR) for one level ``l``, and the running sum
    that gives SBCD's averaged output ``λ̄ = (1/T) Σ_{t<T} λ^{(t)}``.

    The thresholds live in an :class:`~fccolit.state.IndexedState` (rows start unvisited, NaN), which also keeps them
    identical on every DDP rank. On its first visit a row starts at ``lambda_init``: ``"batch"`` (the default, an
    assumption: the paper does not say) takes the batch's estimate of the optimal threshold, the upper end of
    :func:`~fccolit.objectives.pauc.threshold_interval` over the batch's columns, i.e. the entry at the level's
    quantile; a float starts every row there. The running sum counts a row first visited at step ``t`` as if it had
    held its initial value since step 0.

    The running sum is lazy, so that a step costs O(batch), not O(num_rows). A row's λ only changes when the row is
    in the batch, so between two visits it is constant: per row, ``total[r]`` holds ``Σ λ_r^{(s)}`` over the steps
    ``s < mark[r]`` of the current SBCD call, and the steps from ``mark[r]`` on all hold the current λ_r. The true
    running sum after ``T`` steps is therefore ``total[r] + (T − mark[r]) λ_r``. :meth:`accumulate` settles only the
    batch's rows (their held value times the steps since their mark, plus this step) before they change, and
    :meth:`average_` settles every row once per SBCD call. The result equals the eager ``total += λ`` at every step
    up to float rounding (``c·λ`` instead of ``λ + … + λ``). ``total`` and ``mark`` are persistent buffers, so a
    checkpoint taken mid-call resumes exactly.

    Args:
        num_rows: rows (``num_positives`` for pAUC, 1 for SoRR).
        dtype: storage dtype (float64 by default in the modules).
        name: state name (errors, TensorBoard).
    """

    def __init__(self, num_rows: int, dtype: torch.dtype = torch.float64, name: str = "lambda") -> None:
        super().__init__()
        self.state = IndexedState(num_rows, 1, dtype=dtype, name=name)
        # Σ_{s < mark[r]} λ_r^{(s)} over the current SBCD call, and the step up to which it is settled
        self.register_buffer("total", torch.zeros(num_rows, dtype=dtype))
        self.register_buffer("mark", torch.zeros(num_rows, dtype=torch.long))

    @property
    def values(self) -> torch.Tensor:
        """``[num_rows]`` the current λ (NaN for unvisited rows)."""
        return self.state.value[:, 0]

    def read(
        self, rr: RankedRangeBatch, share: float, init: str | float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(λ [R], first_visit [R], losses [R, J])`` for the batch's rows, in the state's dtype (detached)."""
        losses = rr.losses.detach().to(self.state.value.dtype)
        lam = self.values.index_select(0, rr.index)
        first = torch.isnan(lam)
        if bool(first.any()):
            if init == "batch":
                weights = None if rr.weights is None else rr.weights.to(losses.dtype)
                total = losses.shape[-1] if weights is None else float(weights.sum())
                _, start = threshold_interval(losses, share * total, weights)
                start = torch.where(torch.isfinite(start), start, losses.max(-1).values)
            else:
                start = torch.full_like(lam, float(init))
            lam = torch.where(first, start, lam)
        return lam, first, losses

    @torch.no_grad()
    def accumulate(self, index: torch.Tensor, lam: torch.Tensor, first: torch.Tensor, step: int) -> None:
        """Add ``λ^{(t)}`` (every row, before this step's update) to the running sum; ``step`` is t.

        Lazy (O(batch)): only the batch's rows ``index [R]`` are settled, as their value ``lam [R]`` (from
        :meth:`read`) has been held since their mark: ``total[r] += (t + 1 − mark[r]) λ_r``, ``mark[r] = t + 1``. A
        row first visited now has ``total = 0`` and ``mark = 0``, so it gets ``(t + 1) λ_r``: t earlier steps at its
        initial value, plus this one (``first`` is implied by the NaN value and kept for the caller's symmetry).
        Every row whose λ changes at this step must be in ``index`` (the modules pass the global batch, which
        :meth:`update` then writes). A row that occurs twice has the same value in both places, so the copy is
        order-independent. No host sync.
        """
        held = (step + 1) - self.mark.index_select(0, index)  # [R] steps since the row's mark, this one included
        settled = self.total.index_select(0, index) + held.to(self.total.dtype) * lam.to(self.total.dtype)
        self.total.index_copy_(0, index, settled)
        self.mark.index_fill_(0, index, step + 1)

    @torch.no_grad()
    def update(
        self, index: torch.Tensor, lam: torch.Tensor, exceed: torch.Tensor, share: float, lr: float, synced: bool
    ) -> None:
        """``λ_r ← λ_r + θ (p̂_r − l/N)`` for the batch's rows (duplicates: one update with their mean)."""
        if not synced and distributed.is_distributed():
            raise RuntimeError(
                f"ThresholdTracker '{self.state.name}': under DDP the thresholds must be updated from the global batch "
                "(synced=True): the lazy running sum settles only the rows this rank accumulated. Ranked-range "
                "objectives set needs_global_batch, which gives synced=True."
            )
        new = lam + lr * (exceed.to(lam.dtype) - share)
        self.state.update(index, new.unsqueeze(-1), ema_weight=1.0, synced=synced)

    @torch.no_grad()
    def restart_sum_(self) -> None:
        """End of an SBCD call that outputs its last iterate: keep λ as it is, reset the running sum."""
        self.total.zero_()
        self.mark.zero_()

    @torch.no_grad()
    def average_(self, steps: int) -> None:
        """End of an SBCD call: ``λ ← λ̄ = (total + (T − mark) λ) / T`` on visited rows (the next call's warm start);
        reset the sum. O(num_rows), once per call of ``T`` steps."""
        current = self.values
        visited = ~torch.isnan(current)
        held = (steps - self.mark).to(current.dtype)
        self.state.value[:, 0] = torch.where(visited, (self.total + held * current) / steps, current)
        self.total.zero_()
        self.mark.zero_()


# ----------------------------------------------------------------------------------------------------------
# shared machinery
# ----------------------------------------------------------------------------------------------------------
class _RankedRangeModule(FCCOModule):
    """What the seed-003 modules share: a ranked-range objective, the trainable parameters as flat vectors, the
    count of gradient evaluations, the loop position in the state dict, and validation of chosen parameters."""

    #: the objective used when none is given
    default_objective: type[RankedRangeObjective] = PartialAUCRange
    #: keys of the loop position kept in ``get_extra_state`` (python ints: no device sync per step)
    loop_keys: tuple[str, ...] = ("grad_evals",)

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, **kwargs: Any) -> None:
        objective = objective if objective is not None else self.default_objective()
        if not isinstance(objective, RankedRangeObjective):
            raise TypeError(
                f"{type(self).__name__} solves ranked-range problems: pass a fccolit.objectives.pauc objective "
                f"(PartialAUCRange, SumOfRankedRange), got {type(objective).__name__}"
            )
        kwargs.setdefault("state_dtype", "float64")
        if kwargs.get("scheduler") is not None and self.owns_learning_rate:
            raise ValueError(
                f"{type(self).__name__} sets the learning rate of every step itself (from lr, mu and the outer step); "
                "a scheduler would fight it: remove the scheduler and use step_decay / lr instead."
            )
        self.loop = {key: 0 for key in self.loop_keys}
        super().__init__(model, objective, **kwargs)

    owns_learning_rate = True

    # ------------------------------------------------------------------ state
    def configure_state(self) -> None:
        self.objective.bind_sizes(self.data_sizes)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError(f"{type(self).__name__}: the model has no trainable parameters")
        dtypes = {p.dtype for _, p in named}
        if len(dtypes) != 1:
            raise TypeError(f"{type(self).__name__} keeps flat copies of the parameters and needs one dtype, got {dtypes}")
        self._param_names = [n for n, _ in named]
        self._param_shapes = [p.shape for _, p in named]
        self._param_numels = [p.numel() for _, p in named]
        self.num_parameters = sum(self._param_numels)

    def make_rows(self) -> int:
        if not self.data_sizes:
            raise ValueError(
                f"{type(self).__name__} needs data_sizes to size its thresholds: run it through the fccolit CLI "
                "(which links them from the DataModule) or pass data_sizes=datamodule.sizes."
            )
        return self.objective.num_rows(self.data_sizes)

    def flat_buffer(self, name: str, fill: float) -> None:
        """Register a persistent ``[d]`` buffer (d = trainable parameters) in the parameters' dtype."""
        dtype = next(p for p in self.model.parameters() if p.requires_grad).dtype
        self.register_buffer(name, torch.full((self.num_parameters,), fill, dtype=dtype))

    def get_extra_state(self) -> dict[str, int]:
        return dict(self.loop)

    def set_extra_state(self, state: dict[str, int]) -> None:
        missing = set(self.loop_keys) - set(state)
        if missing:
            raise KeyError(f"{type(self).__name__}: the saved loop position lacks {sorted(missing)}")
        self.loop = {key: int(state[key]) for key in self.loop_keys}
        self._anchor_ready = False  # re-check the loaded anchor at the next training step

    # ------------------------------------------------------------------ the parameters as one vector
    def trainable(self) -> list[nn.Parameter]:
        params = dict(self.model.named_parameters())
        return [params[n] for n in self._param_names]

    def flat(self) -> torch.Tensor:
        """``[d]`` the current (live) trainable parameters."""
        return torch.cat([p.detach().reshape(-1) for p in self.trainable()])

    @torch.no_grad()
    def assign_(self, vector: torch.Tensor) -> None:
        """Set the live parameters to ``vector``."""
        for p, part in zip(self.trainable(), vector.split(self._param_numels)):
            p.copy_(part.view_as(p))

    def as_parameters(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """``vector`` as a ``{name: tensor}`` dict for :func:`torch.func.functional_call`."""
        return {n: part.view(s) for n, s, part in zip(self._param_names, self._param_shapes, vector.split(self._param_numels))}

    def pieces(self, vector: torch.Tensor) -> list[torch.Tensor]:
        """``vector`` split into views shaped like the trainable parameters."""
        return [part.view(s) for s, part in zip(self._param_shapes, vector.split(self._param_numels))]

    def _grads(self) -> list[torch.Tensor]:
        params = self.trainable()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return [p.grad for p in params]

    @torch.no_grad()
    def add_distance_gradient(self, vector: torch.Tensor, weight: float) -> None:
        """``.grad += weight · (v − vector)``: the gradient of ``(weight/2)‖v − vector‖²`` w.r.t. the live parameters
        ``v``, added in closed form (fused per parameter, no graph); for :meth:`optimization_step`'s
        ``add_to_gradient``."""
        grads = self._grads()
        torch._foreach_add_(grads, [p.detach() for p in self.trainable()], alpha=weight)  # no temporary difference
        torch._foreach_add_(grads, self.pieces(vector), alpha=-weight)

    @torch.no_grad()
    def add_linear_gradient(self, vector: torch.Tensor, weight: float) -> None:
        """``.grad += weight · vector``: the gradient of ``weight · ⟨vector, v⟩``, in closed form."""
        torch._foreach_add_(self._grads(), self.pieces(vector), alpha=weight)

    @torch.no_grad()
    def accumulate_(self, vector: torch.Tensor) -> None:
        """``vector += v`` (the live parameters), without materializing ``v`` as one ``[d]`` tensor."""
        torch._foreach_add_(self.pieces(vector), [p.detach() for p in self.trainable()])

    # ------------------------------------------------------------------ the step pieces
    def default_optimizer(self, params: Any) -> torch.optim.Optimizer:
        """Plain SGD: the module sets its learning rate at every step (the closed-form prox step)."""
        return torch.optim.SGD(params, lr=1.0)

    def set_learning_rate(self, lr: float) -> None:
        opt = self.optimizers()
        for group in getattr(opt, "optimizer", opt).param_groups:
            group["lr"] = lr

    def ranked_batch(self, batch: dict[str, torch.Tensor]) -> tuple[RankedRangeBatch, bool, int]:
        """The global batch's loss matrix, whether it is identical on every rank, and the global batch size."""
        scores, obj_batch, synced = self.objective_inputs(self(batch), batch)
        rr = self.objective.losses(scores, obj_batch)
        if rr.index.numel() == 0 or rr.losses.shape[-1] == 0:
            raise ValueError(
                f"{type(self).__name__}: a training batch gave an empty loss matrix ({tuple(rr.losses.shape)}): pAUC "
                "needs positives and negatives in every batch (use a DualSampler-based DataModule with num_positives "
                ">= the number of devices)."
            )
        return rr, synced, int(scores.shape[0])

    def masked_loss(
        self, tracker: ThresholdTracker, rr: RankedRangeBatch, share: float, init: str | float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L, p̂ [R], λ [R], first_visit [R])``: ``∇L = ĝ``, the gradient of the mean over the batch's ``R × J``
        entries of ``w_j s_rj 1(s_rj > λ_r)`` (Algorithm 1, step 5, divided by ``N₊N₋``), and ``p̂_r`` the
        (weighted) share of row r's entries above its threshold (step 7: ``G_λ = N₋(l/N₋ − p̂)``)."""
        lam, first, detached = tracker.read(rr, share, init)
        above = detached > lam.unsqueeze(-1)
        weight = above.to(rr.losses.dtype)
        exceed = above.to(lam.dtype)
        if rr.weights is not None:
            weight = weight * rr.weights.to(weight.dtype)
            exceed = exceed * rr.weights.to(lam.dtype)
        return (rr.losses * weight).mean(), exceed.mean(-1), lam, first

    def count(self, evaluations: int) -> None:
        self.loop["grad_evals"] += int(evaluations)

    # ------------------------------------------------------------------ evaluation
    def evaluation_parameters(self) -> dict[str, torch.Tensor] | None:
        """The parameters validation / test / predict evaluate (None: the live parameters)."""
        return None

    def alternative_evaluation(self) -> tuple[str, dict[str, torch.Tensor] | None] | None:
        """A second set of parameters also evaluated, as ``(tag, parameters)`` (logged as ``{stage}_{tag}/...``)."""
        return None

    def evaluation_scores(self, batch: dict[str, torch.Tensor], parameters: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Scores ``[B]`` of ``batch`` under ``parameters`` (default: :meth:`evaluation_parameters`)."""
        parameters = self.evaluation_parameters() if parameters is None else parameters
        if parameters is None:
            return self(batch)
        return torch.func.functional_call(self.model, parameters, (batch[self.input_key],))

    def _eval_step(self, stage: str, batch: dict[str, torch.Tensor]) -> None:
        super()._eval_step(stage, batch)
        alternative = self.alternative_evaluation()
        if alternative is not None:  # its metrics are the group {stage}_{tag} of self.metrics
            tag, parameters = alternative
            scores = self(batch) if parameters is None else self.evaluation_scores(batch, parameters)
            self.metrics[f"{stage}_{tag}"].update_from_batch(scores, batch)

    def _eval_epoch_end(self, stage: str) -> None:
        super()._eval_epoch_end(stage)
        alternative = self.alternative_evaluation()
        if alternative is not None:
            self.log_evaluation_metrics(f"{stage}_{alternative[0]}")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.evaluation_scores(batch)

    def log_loop(self, always: bool = False, **values: float) -> None:
        """Log loop counters as ``train/<key>`` on the steps the logger writes (``log_every_n_steps``): a
        ``self.log`` call costs about a millisecond, as much as a linear model's whole step."""
        if always or self.logs_this_step:
            for key, value in values.items():
                self.log(f"train/{key}", float(value), on_step=True, on_epoch=False)


def _inner_steps(base: int, growth: float, outer: int) -> int:
    """``T_k = ⌈C (k+1)^p⌉``."""
    return max(1, math.ceil(base * (outer + 1) ** growth))


def _check_common(lr: float, lambda_lr: float | None, inner_steps: int, inner_growth: float, lambda_init: Any) -> None:
    if not (math.isfinite(lr) and lr >= 0.0):
        raise ValueError(f"lr (c) must be a finite number >= 0, got {lr}")
    if lambda_lr is not None and not (math.isfinite(lambda_lr) and lambda_lr >= 0.0):
        raise ValueError(f"lambda_lr (c of θ) must be a finite number >= 0 or None, got {lambda_lr}")
    if int(inner_steps) < 1:
        raise ValueError(f"inner_steps (C of T_k = C(k+1)^p) must be >= 1, got {inner_steps}")
    if not inner_growth >= 0.0:
        raise ValueError(f"inner_growth (p of T_k = C(k+1)^p) must be >= 0, got {inner_growth}")
    if lambda_init != "batch" and not isinstance(lambda_init, (int, float)):
        raise ValueError(f"lambda_init must be 'batch' or a number, got {lambda_init!r}")


# ----------------------------------------------------------------------------------------------------------
# AGD-SBCD
# ----------------------------------------------------------------------------------------------------------
class PAUCRange(_RankedRangeModule):
    r"""AGD-SBCD (seed 003 Algorithms 1–2): pAUC on the FPR range [α, β] through the Moreau envelopes of its DC
    program.

    Outer step k (Algorithm 2): ``v̄_m = SBCD(w, λ_m, T_k, μ, m)``, ``v̄_n = SBCD(w, λ_n, T_k, μ, n)``, then
    ``w ← w − (γ/μ)(v̄_m − v̄_n)``. Each SBCD call restarts v at the anchor w, takes ``T_k`` steps (one per training
    batch; see the module docstring for the step) and returns the averages ``v̄ = (1/T) Σ_{t<T} v^{(t)}`` (including
    ``v^{(0)} = w``, excluding the last iterate) and ``λ̄``, which is the next call's starting λ (warm start).

    α = 0: ``f^0 ≡ 0``, so ``v_{μf^0}(w) = w`` exactly; the m-branch is skipped and ``w ← w + (γ/μ)(v̄_n − w)``
    (with γ = μ, ``w ← v̄_n``: an inexact proximal-point step).

    State: the anchor ``w`` (buffer ``anchor``), the running sum ``v_sum``, ``v_bar_m`` (kept while the n-branch
    runs), ``prox_point`` (``v̄_n`` of the last completed outer step), and ``lambda_m`` / ``lambda_n``
    (:class:`ThresholdTracker`, one row per positive, indexed by ``pos_index``); the live model parameters are the
    inner iterate ``v``. About four parameter copies and ``4 N₊`` floats in all.

    Evaluation. Algorithm 2 outputs ``v̄_n^{(k̄)}``; ``evaluate="prox"`` (the default) evaluates ``v̄_n`` of the last
    completed outer step as ``val/<metric>`` and the anchor ``w`` as ``val_anchor/<metric>``;
    ``evaluate="anchor"`` swaps them (``val_prox/<metric>`` for ``v̄_n``). Before the first outer step completes
    there is no ``v̄_n`` and both tags evaluate ``w^{(0)}``. (The paper selects "the best model across all
    iterations" on validation without saying which vector; this is an assumption.) Batch-norm statistics are the
    single set updated by the forward passes of v (an assumption; the paper is silent).

    Args:
        model: the scorer ``h_w`` (``LinearScorer``, an MLP, a vision backbone, ...).
        objective: a :class:`~fccolit.objectives.pauc.PartialAUCRange` (default: FPR [0.05, 0.5], logistic ℓ).
        mu: μ' = μ·N₊N₋ (default 10³, the paper's deep-model value and one of its linear-model values).
        gamma: γ' = γ·N₊N₋ (default 2·10³: γ/μ = 2, the smallest E.2 ratio; the note's CPU run found γ/μ = 2 stable
            and γ/μ = 20 unstable).
        lr: c, the step on the mean masked pair-loss gradient (η_t = c/((k+1)N₊N₋)); the paper tunes it in
            {0.1, 1, 5, 10, 20, 30} (linear) or {10⁻⁵ … 1} (deep); default 1.0 is an assumption.
        lambda_lr: c of the threshold step θ_t = c/((k+1)N₋) (None: ``lr``, as in the paper).
        inner_steps: C in ``T_k = C(k+1)^p`` (default 50, the paper's).
        inner_growth: p (default 2, the paper's; 0 gives a constant T).
        max_inner_steps: an upper bound on ``T_k`` (None, the default: the paper's unbounded ``C(k+1)^p``). With
            the paper's schedule a budget of S batches reaches only about ``(3S/(2C))^{1/3}`` outer steps (3 in
            2,600 batches at C = 50), so the anchor w moves only a few times; a cap keeps outer steps coming at a
            fixed budget. An option, not the paper's schedule.
        step_decay: ``c_k = c/(k+1)`` (the paper's) or a constant c.
        lambda_init: ``"batch"`` or a number (see :class:`ThresholdTracker`).
        inner_output: what an SBCD call returns as the prox point ``v̄`` and the next warm start ``λ̄``:
            ``"average"`` (the default, Algorithm 1's output ``(1/T) Σ_{t<T} (v^{(t)}, λ^{(t)})``) or ``"last"``
            (the last iterate ``(v^{(T)}, λ^{(T)})``, as DCA's Algorithm 4 outputs). The average starts at
            ``v^{(0)} = w``, so with few outer steps it lags the iterates by about T/2 steps; the last iterate does
            not, but carries the last steps' noise. An option, not the paper's method.
        evaluate: ``"prox"`` or ``"anchor"`` (see above).
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. The optimizer defaults to plain SGD (the
            paper's step); the module sets its learning rate, so no scheduler is accepted. The thresholds are
            float64 unless ``state_dtype`` says otherwise.

    Logged: ``train/objective`` (the mini-batch ranked-range estimate of objective (3) at the live v, not the
    surrogate), ``train/outer_step``, ``train/grad_evals`` (samples whose gradient was computed so far) and, at
    every outer step, ``train/moreau_grad_norm`` = ‖v̄_m − v̄_n‖/μ' (the estimate of ‖∇F^μ(w)‖ in scale-free units).
    """

    loop_keys = ("grad_evals", "outer_step", "inner_step", "branch")
    M_BRANCH, N_BRANCH = 0, 1

    def __init__(
        self,
        model: nn.Module,
        objective: RankedRangeObjective | None = None,
        mu: float = 1e3,
        gamma: float = 2e3,
        lr: float = 1.0,
        lambda_lr: float | None = None,
        inner_steps: int = 50,
        inner_growth: float = 2.0,
        step_decay: bool = True,
        lambda_init: str | float = "batch",
        evaluate: str = "prox",
        max_inner_steps: int | None = None,
        inner_output: str = "average",
        **kwargs: Any,
    ) -> None:
        if not (math.isfinite(mu) and mu > 0.0):
            raise ValueError(f"mu (μ' = μ·N₊N₋) must be a finite number > 0, got {mu}")
        if not (math.isfinite(gamma) and gamma > 0.0):
            raise ValueError(f"gamma (γ' = γ·N₊N₋) must be a finite number > 0, got {gamma}")
        _check_common(lr, lambda_lr, inner_steps, inner_growth, lambda_init)
        if evaluate not in ("prox", "anchor"):
            raise ValueError(f"evaluate must be 'prox' (v̄_n, Algorithm 2's output) or 'anchor' (w), got {evaluate!r}")
        if max_inner_steps is not None and int(max_inner_steps) < 1:
            raise ValueError(f"max_inner_steps (the cap on T_k) must be >= 1 or None, got {max_inner_steps}")
        if inner_output not in ("average", "last"):
            raise ValueError(f"inner_output must be 'average' (Algorithm 1's output) or 'last', got {inner_output!r}")
        self.max_inner_steps = None if max_inner_steps is None else int(max_inner_steps)
        self.inner_output = inner_output
        self.mu, self.gamma, self.lr = float(mu), float(gamma), float(lr)
        self.lambda_lr = float(lr if lambda_lr is None else lambda_lr)
        self.inner_steps, self.inner_growth, self.step_decay = int(inner_steps), float(inner_growth), bool(step_decay)
        self.lambda_init, self.evaluate = lambda_init, evaluate
        super().__init__(model, objective, **kwargs)
        tag = self.alternative_evaluation()[0]  # the second evaluation's metrics, logged as {stage}_{tag}/...
        self.metrics.update({f"{stage}_{tag}": self.build_metrics() for stage in ("val", "test")})

    @property
    def has_m_branch(self) -> bool:
        return self.objective.alpha > 0.0

    def configure_state(self) -> None:
        super().configure_state()
        rows = self.make_rows()
        if self.has_m_branch:
            self.lambda_m = ThresholdTracker(rows, self.state_dtype, name="lambda_m")
        self.lambda_n = ThresholdTracker(rows, self.state_dtype, name="lambda_n")
        self.flat_buffer("anchor", math.nan)  # w; NaN until the first training step copies the model
        self.flat_buffer("v_sum", 0.0)
        self.flat_buffer("v_bar_m", math.nan)
        self.flat_buffer("prox_point", math.nan)  # v̄_n of the last completed outer step
        self.loop["branch"] = self.M_BRANCH if self.has_m_branch else self.N_BRANCH

    # ------------------------------------------------------------------ schedule
    def inner_steps_at(self, outer: int) -> int:
        """T_k (at most ``max_inner_steps`` when it is set)."""
        steps = _inner_steps(self.inner_steps, self.inner_growth, outer)
        cap = getattr(self, "max_inner_steps", None)
        return steps if cap is None else min(steps, cap)

    def step_sizes(self, outer: int) -> tuple[float, float]:
        """``(c_k, θ'_k)``: the v and λ step sizes at outer step k (scale-free)."""
        decay = 1.0 / (outer + 1) if self.step_decay else 1.0
        return self.lr * decay, self.lambda_lr * decay

    # ------------------------------------------------------------------ training
    @torch.no_grad()
    def _ensure_anchor(self) -> None:
        """w^(0) := the model's parameters at the first training step (not at construction, so weights loaded
        into the model after building the module count); a restored checkpoint already has its anchor."""
        if getattr(self, "_anchor_ready", False):
            return
        if bool(torch.isnan(self.anchor[:1]).any()):
            self.anchor.copy_(self.flat())
        self._anchor_ready = True

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._ensure_anchor()
        k, t, branch = self.loop["outer_step"], self.loop["inner_step"], self.loop["branch"]
        on_m = branch == self.M_BRANCH
        tracker = self.lambda_m if on_m else self.lambda_n
        share = self.objective.alpha if on_m else self.objective.beta
        c_k, theta_k = self.step_sizes(k)

        rr, synced, size = self.ranked_batch(batch)
        loss, exceed, lam, first = self.masked_loss(tracker, rr, share, self.lambda_init)
        self.accumulate_(self.v_sum)  # v^{(t)}, before this step's update
        tracker.accumulate(rr.index, lam, first, t)
        self.set_learning_rate(self.mu * c_k / (self.mu + c_k))
        # the step on ĝ + (v − w)/μ: the proximal term's gradient in closed form
        self.optimization_step(loss, add_to_gradient=lambda: self.add_distance_gradient(self.anchor, 1.0 / self.mu))
        tracker.update(rr.index, lam, exceed, share, theta_k, synced)
        self.count(size)

        with torch.no_grad():
            estimate = ranked_range_mean(rr.losses.detach(), self.objective.alpha, self.objective.beta, rr.weights)
        self.log_objective_estimate(estimate)
        self.log_loop(outer_step=k, grad_evals=self.loop["grad_evals"])
        self.loop["inner_step"] = t + 1
        if t + 1 >= self.inner_steps_at(k):
            self._finish_branch(t + 1)

    @torch.no_grad()
    def _finish_branch(self, steps: int) -> None:
        """End of an SBCD call: average (or keep the last iterate, ``inner_output``), then switch branch or take the
        outer step; restart v at the anchor."""
        last = self.inner_output == "last"
        v_bar = self.flat() if last else self.v_sum / steps

        def finish(tracker: ThresholdTracker) -> None:
            if last:
                tracker.restart_sum_()
            else:
                tracker.average_(steps)

        if self.loop["branch"] == self.M_BRANCH:
            finish(self.lambda_m)
            self.v_bar_m.copy_(v_bar)
            self.loop["branch"] = self.N_BRANCH
        else:
            finish(self.lambda_n)
            v_m = self.v_bar_m if self.has_m_branch else self.anchor  # α = 0: v_{μf^0}(w) = w
            difference = v_m - v_bar
            self.log_loop(always=True, moreau_grad_norm=float(difference.norm()) / self.mu)
            self.anchor -= (self.gamma / self.mu) * difference
            self.prox_point.copy_(v_bar)
            self.loop["outer_step"] += 1
            self.loop["branch"] = self.M_BRANCH if self.has_m_branch else self.N_BRANCH
        self.v_sum.zero_()
        self.loop["inner_step"] = 0
        self.assign_(self.anchor)

    # ------------------------------------------------------------------ evaluation
    def _vectors(self) -> dict[str, torch.Tensor | None]:
        anchor = None if bool(torch.isnan(self.anchor[:1]).any()) else self.anchor
        prox = None if bool(torch.isnan(self.prox_point[:1]).any()) else self.prox_point
        return {"anchor": anchor, "prox": prox if prox is not None else anchor}

    def evaluation_parameters(self) -> dict[str, torch.Tensor] | None:
        vector = self._vectors()[self.evaluate]
        return None if vector is None else self.as_parameters(vector)

    def alternative_evaluation(self) -> tuple[str, dict[str, torch.Tensor] | None]:
        other = "anchor" if self.evaluate == "prox" else "prox"
        vector = self._vectors()[other]
        return other, (None if vector is None else self.as_parameters(vector))


class SoRR(PAUCRange):
    r"""AGD for the sum of ranked range (seed 003 Appendix A: Algorithm 2 with Algorithm 3 as the inner solver).

    The same machinery as :class:`PAUCRange` with one scalar threshold per branch (``N₊ = 1``, ``N₋ = N``):
    Algorithm 3 is Algorithm 1 with a single row. Scale-free units use ``N`` in place of ``N₊N₋`` and ``N₋``
    (E.1: μ ∈ {2·10², 10³}/N, γ ∈ {2·10², …, 2·10⁴}/N, η_t = θ_t = c/((k+1)N), T_k = C(k+1)², C ∈ {30, 50, 100}).
    Algorithm 3 prints ``λ_i`` and ``η_t`` in the threshold step; λ is a scalar and θ_t is meant (equal to η_t in
    E.1), which is what ``lambda_lr`` (default ``lr``) gives.

    Args: as :class:`PAUCRange`; ``objective`` must be a :class:`~fccolit.objectives.pauc.SumOfRankedRange`
    (default: the shares [0.05, 0.5] of the losses, BCE-with-logits loss, reweighted stratified batches).
    """

    default_objective = SumOfRankedRange

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, **kwargs: Any) -> None:
        if objective is not None and not isinstance(objective, SumOfRankedRange):
            raise TypeError(f"SoRR needs a SumOfRankedRange objective, got {type(objective).__name__}")
        super().__init__(model, objective, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# DCA baselines (seed 003 Appendix E.4, E.5)
# ----------------------------------------------------------------------------------------------------------
class DCA(_RankedRangeModule):
    r"""DCA for the ranked-range DC program (seed 003 Appendix E.4, Algorithm 4; Hu et al. 2020).

    Outer step k: a deterministic subgradient ``ξ^{(k)} ∈ ∂f^m(w^{(k)})`` from one pass over the whole training set
    (the ``m`` highest-scored negatives are the same for every positive, so it is
    ``Σ_i Σ_{j ∈ Top_m} ∇s_ij(w^{(k)})``), then ``T_k`` SBCD steps on the linearised problem (37)::

        w   ← w − η_t [ĝ_n − ξ + L(w − w^{(k)})]          (ĝ_n: masked at the n-level thresholds λ_n)
        λ_i ← λ_i + θ_t (p̂_i − n/N₋)

    and the **last** iterate ``(w^{(T)}, λ^{(T)})`` is the output (Algorithm 4, step 11). ``L = prox_weight``;
    ``L = 0`` is DCA, ``L > 0`` proximal DCA (subproblem (38)), whose quadratic term is taken in closed form like
    Algorithm 1's prox step (``lr = c_k/(1 + c_k L)``; the paper only says "a SBCD method similar to Algorithm 1").
    λ is warm-started across outer steps (an assumption: the paper does not say). Scale-free units as
    :class:`PAUCRange` (η_t = c_k/(N₊N₋) ⇒ the step on ĝ is ``c_k``; ``ξ`` and L are divided by N₊N₋ too).
    E.2: T_k = C(k+1)² with C ∈ {100, 200, 500}, η_t and θ_t as for AGD-SBCD ("DCA.Changing.lr").

    The pass for ξ uses the model in eval mode (a deterministic function of w) in chunks of
    ``subgradient_batch_size``; it reads the training set from the trainer's DataModule (``train_dataset``) or
    training DataLoader. It counts ``N`` gradient evaluations. Under DDP every rank computes ξ on the whole training
    set (identical on every rank; a baseline, not optimised). Validation evaluates the live (last) iterate.

    Args:
        model, objective: as :class:`PAUCRange` (PartialAUCRange or SumOfRankedRange).
        lr, lambda_lr, inner_steps, inner_growth, step_decay, lambda_init: as :class:`PAUCRange` (default C = 100,
            the smallest of E.2's grid).
        prox_weight: L in scale-free units (L_paper / (N₊N₋)); 0 for DCA.
        subgradient_batch_size: samples per forward pass when computing ξ.
    """

    loop_keys = ("grad_evals", "outer_step", "inner_step")

    def __init__(
        self,
        model: nn.Module,
        objective: RankedRangeObjective | None = None,
        lr: float = 1.0,
        lambda_lr: float | None = None,
        inner_steps: int = 100,
        inner_growth: float = 2.0,
        step_decay: bool = True,
        lambda_init: str | float = "batch",
        prox_weight: float = 0.0,
        subgradient_batch_size: int = 4096,
        **kwargs: Any,
    ) -> None:
        _check_common(lr, lambda_lr, inner_steps, inner_growth, lambda_init)
        if not (math.isfinite(prox_weight) and prox_weight >= 0.0):
            raise ValueError(f"prox_weight (L) must be a finite number >= 0, got {prox_weight}")
        if int(subgradient_batch_size) < 1:
            raise ValueError(f"subgradient_batch_size must be >= 1, got {subgradient_batch_size}")
        self.lr = float(lr)
        self.lambda_lr = float(lr if lambda_lr is None else lambda_lr)
        self.inner_steps, self.inner_growth, self.step_decay = int(inner_steps), float(inner_growth), bool(step_decay)
        self.lambda_init, self.prox_weight = lambda_init, float(prox_weight)
        self.subgradient_batch_size = int(subgradient_batch_size)
        super().__init__(model, objective, **kwargs)

    def configure_state(self) -> None:
        super().configure_state()
        self.lambda_n = ThresholdTracker(self.make_rows(), self.state_dtype, name="lambda_n")
        self.flat_buffer("anchor", math.nan)  # w^{(k)}
        self.flat_buffer("xi", 0.0)  # ξ^{(k)} (scale-free)

    inner_steps_at = PAUCRange.inner_steps_at
    step_sizes = PAUCRange.step_sizes

    # ------------------------------------------------------------------ ξ = ∇f̃^m(w) on the whole training set
    def _training_dataset(self) -> Any:
        trainer = self.trainer
        dataset = getattr(getattr(trainer, "datamodule", None), "train_dataset", None)
        if dataset is None:
            loader = trainer.train_dataloader
            dataset = getattr(loader, "dataset", None)
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__} computes a full-data subgradient every outer step and could not find the "
                "training set: fit with a DataModule that has train_dataset, or a DataLoader over a Dataset."
            )
        return dataset

    def _chunks(self, dataset: Any) -> Iterator[dict[str, torch.Tensor]]:
        size = len(dataset)
        for start in range(0, size, self.subgradient_batch_size):
            indices = list(range(start, min(start + self.subgradient_batch_size, size)))
            if hasattr(dataset, "__getitems__"):
                chunk = dataset.__getitems__(indices)
            else:
                chunk = torch.utils.data.default_collate([dataset[i] for i in indices])
            yield {k: v.to(self.device) for k, v in chunk.items()}

    def _cast(self, chunk: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        dtype = self.anchor.dtype
        return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in chunk.items()}

    def full_subgradient(self) -> tuple[torch.Tensor, int]:
        """``(ξ, N)``: ``∇f̃^m`` at the live parameters over the whole training set (scale-free), and N."""
        dataset = self._training_dataset()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                parts = [self._cast(c) for c in self._chunks(dataset)]
                scores = torch.cat([self.model(c[self.input_key]).reshape(-1) for c in parts])
            fields = {k: torch.cat([c[k] for c in parts]) for k in self.objective.batch_fields}
            coefficients = self.objective.component_score_gradient(scores, fields, self.objective.alpha)
            xi = torch.zeros_like(self.anchor)
            params = self.trainable()
            offset = 0
            for c in parts:
                size = c[self.input_key].shape[0]
                with torch.enable_grad():
                    out = self.model(c[self.input_key]).reshape(-1)
                    grads = torch.autograd.grad((out * coefficients[offset : offset + size].to(out.dtype)).sum(), params)
                xi += torch.cat([g.reshape(-1) for g in grads])
                offset += size
        finally:
            self.model.train(was_training)
        return xi, int(scores.shape[0])

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        k, t = self.loop["outer_step"], self.loop["inner_step"]
        if t == 0:  # a new outer step: w^{(k)} and ξ^{(k)}
            with torch.no_grad():
                self.anchor.copy_(self.flat())
            if self.objective.alpha > 0.0:
                xi, n = self.full_subgradient()
                self.xi.copy_(xi)
                self.count(n)
            else:  # f^0 ≡ 0
                self.xi.zero_()
        c_k, theta_k = self.step_sizes(k)
        share = self.objective.beta
        rr, synced, size = self.ranked_batch(batch)
        loss, exceed, lam, first = self.masked_loss(self.lambda_n, rr, share, self.lambda_init)
        self.set_learning_rate(c_k / (1.0 + c_k * self.prox_weight))

        def linear_and_proximal_terms() -> None:  # the gradient of −⟨ξ, w⟩ + (L/2)‖w − w^{(k)}‖², in closed form
            self.add_linear_gradient(self.xi, -1.0)
            if self.prox_weight > 0.0:
                self.add_distance_gradient(self.anchor, self.prox_weight)

        self.optimization_step(loss, add_to_gradient=linear_and_proximal_terms)
        self.lambda_n.update(rr.index, lam, exceed, share, theta_k, synced)
        self.count(size)
        with torch.no_grad():
            estimate = ranked_range_mean(rr.losses.detach(), self.objective.alpha, self.objective.beta, rr.weights)
        self.log_objective_estimate(estimate)
        self.log_loop(outer_step=k, grad_evals=self.loop["grad_evals"])
        if t + 1 >= self.inner_steps_at(k):
            self.loop["outer_step"], self.loop["inner_step"] = k + 1, 0
        else:
            self.loop["inner_step"] = t + 1


class ProximalDCA(DCA):
    r"""Proximal DCA (seed 003 Appendix E.5; Wen et al. 2018): :class:`DCA` with the proximal term
    ``(L/2)‖w − w^{(k)}‖²`` in every subproblem (38).

    Args: as :class:`DCA`; ``prox_weight`` (L, scale-free: L_paper/(N₊N₋)) must be > 0. Default 10⁻³ = 1/μ' of
    :class:`PAUCRange`'s default, an assumption: the paper tunes L ∈ {10⁻⁵ … 1} in its own units, which after
    dividing by N₊N₋ (≈ 10⁸ on a9a) makes the term vanish, and its Table 2 shows proximal DCA ≈ DCA.
    """

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, prox_weight: float = 1e-3, **kwargs: Any) -> None:
        if not prox_weight > 0.0:
            raise ValueError(f"ProximalDCA needs prox_weight (L) > 0, got {prox_weight}; prox_weight=0 is DCA")
        super().__init__(model, objective, prox_weight=prox_weight, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# mini-batch baselines
# ----------------------------------------------------------------------------------------------------------
class MiniBatchPAUC(_RankedRangeModule):
    r"""The naive mini-batch method ("MB", Kar et al. 2014, as compared in seed 003): SGD on the ranked-range mean
    of each batch, i.e. objective (3) with the batch's own negatives ranked (a biased estimate for α > 0).

    With ``alpha = 0, beta = 1`` this is plain pairwise AUC-surrogate minimisation (:class:`PairwiseAUC`).

    Args:
        model, objective: as :class:`PAUCRange`.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`; the optimizer defaults to ``SGD(lr=0.1)``
            (an assumption), and schedulers are allowed.

    Logged: ``train/objective``, the batch's ranked-range mean (the loss it descends; for [0, 1] an unbiased
    estimate of the pairwise surrogate objective), and ``train/grad_evals``.
    """

    owns_learning_rate = False

    def default_optimizer(self, params: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        rr, _, size = self.ranked_batch(batch)
        rows = ranked_range_mean(rr.losses, self.objective.alpha, self.objective.beta, rr.weights)
        self.optimization_step(rows.mean())
        self.count(size)
        self.log_objective_estimate(rows.detach())
        self.log_loop(grad_evals=self.loop["grad_evals"])


class PairwiseAUC(MiniBatchPAUC):
    r"""The plain pairwise AUC surrogate baseline: SGD on ``mean_{i∈+, j∈−} ℓ(h(x_i) − h(x_j))`` over each batch's
    (positive, negative) pairs (:class:`MiniBatchPAUC` with the FPR range [0, 1]).

    Args:
        model: the scorer.
        surrogate, margin, scale: ℓ (default the paper's logistic ``log(1 + e^{−z})``).
        (the rest): see :class:`MiniBatchPAUC`. Default metrics: ``auroc`` and ``pauc_0.05_0.5``.
    """

    def __init__(
        self, model: nn.Module, surrogate: str = "logistic", margin: float = 1.0, scale: float = 1.0, **kwargs: Any
    ) -> None:
        kwargs.setdefault("metrics", ["auroc", "pauc_0.05_0.5"])
        super().__init__(model, PartialAUCRange(0.0, 1.0, surrogate, margin, scale), **kwargs)
