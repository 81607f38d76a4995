r"""The per-row thresholds λ of the ranked-range algorithms and their running sums."""

from __future__ import annotations

import torch
from torch import nn

from fccolit import distributed
from fccolit.objectives.pauc import RankedRangeBatch, threshold_interval
from fccolit.state import IndexedState

__all__ = ["ThresholdTracker"]


class ThresholdTracker(nn.Module):
    r"""The per-row thresholds λ of the SBCD steps and their lazy running sums (Yao, Lin & Yang, NeurIPS 2022).

    One threshold ``λ_r`` per row (per positive for pAUC, one for SoRR) for one level ``l``, and the running sum that
    gives SBCD's averaged output ``λ̄ = (1/T) Σ_{t<T} λ^{(t)}`` (Algorithm 1 of Yao Yao, Qihang Lin and Tianbao
    Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates", NeurIPS 2022,
    arXiv:2203.01505).

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

    Raises:
        ValueError: ``num_rows`` < 1 (the DataModule's sizes not linked).
        RuntimeError: :meth:`update` with ``synced=False`` under DDP (the thresholds must follow the global batch).

    Example:
        One SBCD call of two steps at level ``l/N₋ = 0.5`` on rows 0 and 2 of three (row 1 is never visited):

        >>> import torch
        >>> from fccolit.algorithms.pauc import ThresholdTracker
        >>> from fccolit.objectives.pauc import RankedRangeBatch
        >>> tracker = ThresholdTracker(3, name="lambda_n")
        >>> batch = RankedRangeBatch(index=torch.tensor([0, 2]),
        ...                          losses=torch.tensor([[0.1, 0.4, 0.9, 0.2], [0.3, 0.8, 0.5, 0.7]]))
        >>> lam, losses = tracker.read(batch, share=0.5, init="batch")  # first visit: the batch's median entry
        >>> lam
        tensor([0.4000, 0.7000], dtype=torch.float64)
        >>> tracker.accumulate(batch.index, lam, step=0)  # λ^{(0)} into the running sum
        >>> exceed = (losses > lam.unsqueeze(-1)).double().mean(-1)  # p̂_r: the share above λ_r
        >>> tracker.update(batch.index, lam, exceed, share=0.5, lr=1.0, synced=True)  # λ ← λ + θ (p̂ − 0.5)
        >>> tracker.values
        tensor([0.1500,    nan, 0.4500], dtype=torch.float64)
        >>> tracker.average_(2)  # end of the call: λ̄ = (λ^{(0)} + λ^{(1)}) / 2, the next call's warm start
        >>> tracker.values
        tensor([0.2750,    nan, 0.5750], dtype=torch.float64)
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

    def read(self, rr: RankedRangeBatch, share: float, init: str | float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(λ [R], losses [R, J])`` for the batch's rows: λ in the state's dtype, the losses detached in their own
        (a comparison with λ promotes them exactly, without a float64 copy of the matrix at every step); a row
        visited for the first time gets its start value (see the class docstring)."""
        detached = rr.losses.detach()
        lam = self.values.index_select(0, rr.index)
        first = torch.isnan(lam)
        if bool(first.any()):
            losses = detached.to(lam.dtype)
            if init == "batch":
                weights = None if rr.weights is None else rr.weights.to(losses.dtype)
                total = losses.shape[-1] if weights is None else float(weights.sum())
                _, start = threshold_interval(losses, share * total, weights)
                start = torch.where(torch.isfinite(start), start, losses.max(-1).values)
            else:
                start = torch.full_like(lam, float(init))
            lam = torch.where(first, start, lam)
        return lam, detached

    @torch.no_grad()
    def accumulate(self, index: torch.Tensor, lam: torch.Tensor, step: int) -> None:
        """Add ``λ^{(t)}`` (every row, before this step's update) to the running sum; ``step`` is t.

        Lazy (O(batch)): only the batch's rows ``index [R]`` are settled, as their value ``lam [R]`` (from
        :meth:`read`) has been held since their mark: ``total[r] += (t + 1 − mark[r]) λ_r``, ``mark[r] = t + 1``. A
        row first visited now has ``total = 0`` and ``mark = 0``, so it gets ``(t + 1) λ_r``: t earlier steps at its
        initial value, plus this one. Every row whose λ changes at this step must be in ``index`` (the modules pass
        the global batch, which :meth:`update` then writes). A row that occurs twice has the same value in both
        places, so the copy is order-independent. No host sync.
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
