"""Per-index state of the FCCO algorithms.

Every algorithm in fccolit keeps, for each outer index ``i`` (a positive example, a (query, relevant item)
pair, a constraint, ...), an estimate ``u_i`` of the inner value ``g_i(w)``. :class:`IndexedState` is that
table and the one place where it is updated:

* storage: a persistent buffer ``value`` of shape ``[num_rows, dim]`` (it moves with the module and is in
  every checkpoint), indexed by a flat id. Never a dense users × items table.
* first visit (``initial``): rows start as NaN (the sentinel of "never written", so the table costs exactly
  ``dim`` floats per row). With ``initial="first_estimate"`` (the default) the first visit sets ``u_i`` to that
  step's estimate. The papers' algorithms instead start every row from a given U₁ and apply the ordinary update
  on the first visit (Wang & Yang, ICML 2022, Alg. 1; Wang et al., AISTATS 2022, Alg. 1–3): ``initial="zero"``
  (U₁ = 0), ``"projected_zero"`` (U₁ = Π_Ω[0]) or a value per component. The first step's ``u`` is then
  ``Π_Ω[(1 − γ) U₁ + γ s ĝ_i]``, so γ (and s) matter even for rows visited once.
* update rules (one formula, every paper a special case)::

      u_i ← Π_Ω[ (1 − γ) u_i + γ · s · ĝ_i + γ' · (ĝ_i − ĝ_i^prev) ]     for sampled i
      u_j ← Π_Ω[ (1 − γ) u_j ]      for unsampled j, only when ``decay_unsampled`` (MOAP, MOAP-V2, ADAP)
      u_j ← u_j                     for unsampled j otherwise (selective update: SOX, SOAP, SONG, SONEX)

  with γ = ``ema_weight`` (γ in SOX / SONG, β0 in MOAP / ADAP), s = ``sample_scale`` (n/B1 in MOAP, m/B in
  MOAP-V2 and ADAP), γ' = ``correction_weight`` (the MSVR correction of SONEX; ĝ^prev is the same batch
  evaluated at the previous parameters) and Π_Ω the projection onto the box ``[lower, upper]``.
* lazy decay: the decay of unsampled rows is never applied eagerly. A running sum of ``log(1 − γ)`` and, per
  row, its value at the row's last update make a row's pending decay one multiplication when the row is next
  read. For boxes whose upper bounds are ≥ 0 and with rows that stay non-negative, k projected decays equal
  one projected decay by the product of the factors, so the lazy result equals the eager one (to rounding).
* duplicates: an index that occurs several times in one step (in one batch or across ranks) gets the mean of
  its estimates and one update. The result does not depend on the order of occurrence.
* DDP: every rank all-gathers the (index, estimate) pairs of the step without gradient and applies the same
  in-place update, so the table is identical on every rank (Lightning does not keep buffers consistent under
  manual optimization). When the estimates are already identical on every rank (an objective evaluated on
  the gathered global batch), pass ``synced=True`` and the gather is skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from fccolit import distributed

Bound = float | Sequence[float] | None
InitialState = str | float | Sequence[float]
INITIAL_STATES = ("first_estimate", "zero", "projected_zero")
_EXACT_FLOAT64_INTEGERS = 2**53  # every integer up to this is exact in float64 (the packed all-gather of an update)


@dataclass
class StateUpdate:
    """The batch's state rows before and after one :meth:`IndexedState.update`, aligned with its ``index``.

    Args:
        previous: ``[B, dim]`` u before this step's update (u^{t−1} in SOX; for a first visit, the estimate).
        current: ``[B, dim]`` u after this step's update (the "fresh" u of SOAP / LibAUC / SONEX).
        first_visit: ``[B]`` bool, the row had never been visited before this step.

    Raises:
        Nothing (a plain record, returned by :meth:`IndexedState.update`).

    Example:
        >>> import torch
        >>> from fccolit.state import IndexedState
        >>> state = IndexedState(num_rows=3)  # the first visit sets u_i to the estimate
        >>> update = state.update(torch.tensor([1, 2]), torch.tensor([[2.0], [4.0]]), ema_weight=0.5)
        >>> update.first_visit.tolist(), update.current.flatten().tolist()
        ([True, True], [2.0, 4.0])
        >>> update = state.update(torch.tensor([1]), torch.tensor([[0.0]]), ema_weight=0.5)
        >>> update.first_visit.tolist(), update.previous.item(), update.current.item()  # (1 − γ)·2 + γ·0
        ([False], 2.0, 1.0)
    """

    previous: torch.Tensor
    current: torch.Tensor
    first_visit: torch.Tensor


def _bound_tensor(bound: Bound, dim: int, fill: float) -> torch.Tensor:
    if bound is None:
        return torch.full((dim,), fill, dtype=torch.float64)
    if isinstance(bound, (int, float)):
        return torch.full((dim,), float(bound), dtype=torch.float64)
    values = [fill if b is None else float(b) for b in bound]
    if len(values) != dim:
        raise ValueError(f"a bound needs one value per state component: got {len(values)} for dim={dim}")
    return torch.tensor(values, dtype=torch.float64)


class IndexedState(nn.Module):
    """A table ``u ∈ R^{num_rows × dim}`` of moving estimates, one row per outer index.

    Args:
        num_rows: number of outer indices n (e.g. positives for AP, relevant (query, item) pairs for NDCG).
        dim: components of each row (d' in the papers: 1 for NDCG, 2 for AP).
        lower: lower bound(s) of the projection box Ω (a float, one value per component, or None).
        upper: upper bound(s) of Ω.
        dtype: storage dtype (float32 keeps 4 bytes per row and component; float64 for exactness tests).
        decay_unsampled: keep the bookkeeping for the lazy decay of unsampled rows (MOAP / MOAP-V2 / ADAP).
            Costs 8 more bytes per row.
        name: used in error messages and TensorBoard tags.
        initial: how a row starts (U₁ in the papers). ``"first_estimate"`` (default): the first visit sets
            ``u_i := ĝ_i`` (no division by a zero state in AP or NCA; MOAP's s = n/B1 factor is not applied on that
            visit). ``"zero"``: U₁ = 0; ``"projected_zero"``: U₁ = Π_Ω[0] (Wang et al. 2022's reading of
            "Initialize U₁"); a float or one float per component: U₁ = that value (taken as given, not projected).
            With any of these the first visit applies the ordinary update to U₁ (decayed like any row when
            ``decay_unsampled``).

    Shapes: ``update(index [B], estimate [B, dim])``; ``values()`` → ``[num_rows, dim]``.

    Example:
        >>> import torch
        >>> from fccolit.state import IndexedState
        >>> state = IndexedState(num_rows=4, dim=1, initial="zero")
        >>> record = state.update(torch.tensor([2]), torch.tensor([[1.0]]), ema_weight=0.5)
        >>> record.previous.item(), record.current.item()  # (1 − γ)·0 + γ·1
        (0.0, 0.5)
        >>> state.visited().tolist()
        [False, False, True, False]
        >>> record = state.update(torch.tensor([2, 0]), torch.tensor([[2.0], [4.0]]), ema_weight=0.5)
        >>> state.values().flatten().tolist()  # row 2: 0.5·0.5 + 0.5·2; row 0: 0.5·0 + 0.5·4; others untouched
        [2.0, 0.0, 1.25, 0.0]
    """

    def __init__(
        self,
        num_rows: int,
        dim: int = 1,
        *,
        lower: Bound = None,
        upper: Bound = None,
        dtype: torch.dtype = torch.float32,
        decay_unsampled: bool = False,
        name: str = "u",
        initial: InitialState = "first_estimate",
    ) -> None:
        super().__init__()
        if int(num_rows) <= 0:
            raise ValueError(f"state '{name}' needs num_rows > 0, got {num_rows}: are the data sizes linked?")
        self.num_rows = int(num_rows)
        self.dim = int(dim)
        self.name = name
        self.decay_unsampled = decay_unsampled
        self.register_buffer("value", torch.full((self.num_rows, self.dim), math.nan, dtype=dtype))
        lo, hi = _bound_tensor(lower, self.dim, -math.inf), _bound_tensor(upper, self.dim, math.inf)
        if bool((lo > hi).any()):
            raise ValueError(f"state '{name}': lower bound {lo.tolist()} exceeds upper bound {hi.tolist()}")
        self.register_buffer("lower", lo.to(dtype), persistent=False)
        self.register_buffer("upper", hi.to(dtype), persistent=False)
        self.has_bounds = bool(torch.isfinite(lo).any() or torch.isfinite(hi).any())
        self.initial = initial if isinstance(initial, str) else [float(v) for v in torch.tensor(initial).reshape(-1)]
        start = self._initial_row(initial, lo, hi)
        # the U₁ row of unvisited rows (None: the first estimate); not persistent: it follows from the options
        self.register_buffer("initial_value", None if start is None else start.to(dtype), persistent=False)
        if decay_unsampled:
            # Σ_s log(1 − γ_s) over all steps so far, and its value when each row was last written.
            self.register_buffer("log_decay_total", torch.zeros((), dtype=torch.float64))
            self.register_buffer("log_decay_mark", torch.zeros(self.num_rows, dtype=torch.float64))

    def _initial_row(self, initial: InitialState, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor | None:
        """U₁ as a ``[dim]`` float64 row (None for ``"first_estimate"``)."""
        if isinstance(initial, str):
            if initial not in INITIAL_STATES:
                raise ValueError(
                    f"state '{self.name}': initial must be one of {', '.join(map(repr, INITIAL_STATES))} or a value, "
                    f"got {initial!r}"
                )
            if initial == "first_estimate":
                return None
            zero = torch.zeros(self.dim, dtype=torch.float64)
            return torch.clamp(zero, lo, hi) if initial == "projected_zero" else zero
        row = torch.as_tensor(initial, dtype=torch.float64).reshape(-1)
        if row.numel() == 1:
            row = row.expand(self.dim).clone()
        if row.numel() != self.dim or not bool(torch.isfinite(row).all()):
            raise ValueError(
                f"state '{self.name}': initial needs one finite value or {self.dim} (one per component), got {initial!r}"
            )
        return row

    # ------------------------------------------------------------------ reading
    def extra_repr(self) -> str:
        return (f"name={self.name}, num_rows={self.num_rows}, dim={self.dim}, decay_unsampled={self.decay_unsampled}, "
                f"initial={self.initial!r}")

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        if not self.has_bounds:
            return x
        if x.dtype == self.lower.dtype:
            return torch.clamp(x, self.lower, self.upper)
        return torch.clamp(x, self.lower.to(x.dtype), self.upper.to(x.dtype))

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """``[R, dim]``: the current value of ``rows`` (``[R]`` long) with any pending lazy decay applied (unvisited
        rows: U₁ decayed like any row, or NaN with ``initial="first_estimate"``)."""
        return self._settled(self._stored_rows(rows), rows)

    def _settled(self, u: torch.Tensor, rows: torch.Tensor, unvisited: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`read` from the stored rows ``u = value[rows]`` (``unvisited``: ``isnan(u)`` when already known)."""
        if self.initial_value is not None:
            u = torch.where(torch.isnan(u) if unvisited is None else unvisited, self.initial_value, u)
        if self.decay_unsampled:
            factor = torch.exp(self.log_decay_total - self.log_decay_mark.index_select(0, rows))
            u = self._project(u * factor.to(u.dtype).unsqueeze(-1))
        return u

    def values(self) -> torch.Tensor:
        """The whole table ``[num_rows, dim]`` with pending decay applied (unvisited rows: U₁, or NaN with
        ``initial="first_estimate"``; :meth:`visited` tells them apart)."""
        return self.read(torch.arange(self.num_rows, device=self.value.device))

    def visited(self) -> torch.Tensor:
        """``[num_rows]`` bool: rows that have been written at least once."""
        return ~torch.isnan(self.value[:, 0])

    @torch.no_grad()
    def share_at_bounds(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(at_lower [dim], at_upper [dim])``: the share of ``rows`` (``[R, dim]`` values, e.g. a step's updated rows;
        default: every visited row as read now) whose component sits at Ω's lower / upper bound (0 for an infinite
        bound; 0 for no row). A large share says the projection, not the estimate, sets those rows (e.g. MOAP-V2 /
        ADAP with β0·m/B > 1). Unsampled rows of a decaying state drift off the caps, so a step's own rows show what
        the gradient used."""
        u = self.read(torch.nonzero(self.visited()).flatten()) if rows is None else rows
        if u.shape[0] == 0:
            zero = torch.zeros(self.dim, dtype=torch.float64)
            return zero, zero.clone()
        at_lower = (u <= self.lower) & torch.isfinite(self.lower)
        at_upper = (u >= self.upper) & torch.isfinite(self.upper)
        return at_lower.double().mean(0).cpu(), at_upper.double().mean(0).cpu()

    @torch.no_grad()
    def reset(self) -> None:
        """Forget everything: every row becomes unvisited again (used when switching objectives)."""
        self.value.fill_(math.nan)
        if self.decay_unsampled:
            self.log_decay_total.zero_()
            self.log_decay_mark.zero_()

    # ------------------------------------------------------------------ checks
    def _check(self, index: torch.Tensor, estimate: torch.Tensor) -> None:
        if index.dim() != 1:
            raise ValueError(f"state '{self.name}': index must be 1-D, got shape {tuple(index.shape)}")
        if index.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"state '{self.name}': index must be an integer tensor, got {index.dtype}")
        if estimate.shape != (index.shape[0], self.dim):
            raise ValueError(
                f"state '{self.name}': estimate must have shape [B, {self.dim}] = {(index.shape[0], self.dim)}, "
                f"got {tuple(estimate.shape)}"
            )
        if index.numel() == 0:
            return
        if index.device.type == "cpu":
            # the index range is checked where the rows are read (:meth:`_stored_rows`: index_select raises on CPU);
            # a sum is NaN or ±inf when any value is (in float64: no float32 overflow), one reduction and one read;
            # a float64 sum that overflows on finite values is told apart on that rare path only
            if not math.isfinite(float(estimate.sum(dtype=torch.float64))) and not bool(torch.isfinite(estimate).all()):
                raise FloatingPointError(
                    f"state '{self.name}': the inner estimate has non-finite values at batch positions "
                    f"{torch.nonzero(~torch.isfinite(estimate).all(-1)).flatten()[:10].tolist()}: the model produced "
                    "NaN/inf scores (learning rate too large, or bad input features)."
                )
        else:  # never synchronize with the host in the training step of an accelerator
            torch._assert_async(
                ((index >= 0) & (index < self.num_rows)).all(), f"state '{self.name}': index out of range"
            )

    def _stored_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """``value[rows]``; on CPU an index outside ``[0, num_rows)`` raises an ``IndexError`` that says where the
        state size comes from (the range is checked here, by the read itself, rather than by a reduction and two
        host reads at every step)."""
        try:
            return self.value.index_select(0, rows)
        except IndexError:  # CPU only: an accelerator's index_select fails on the device instead
            lo, hi = (int(v) for v in torch.aminmax(rows))
            if lo >= 0 and hi < self.num_rows:
                raise
            raise IndexError(
                f"state '{self.name}' has {self.num_rows} rows but the batch holds index {lo if lo < 0 else hi}. The "
                "state size comes from the DataModule's sizes (linked to the model by the CLI): check that the model "
                "was built for this data, and that the batch field holding the index is the right one."
            ) from None

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def update(
        self,
        index: torch.Tensor,
        estimate: torch.Tensor,
        *,
        ema_weight: float | torch.Tensor,
        sample_scale: float = 1.0,
        correction: torch.Tensor | None = None,
        correction_weight: float = 0.0,
        synced: bool = False,
    ) -> StateUpdate:
        """Apply one step of the update rule to the rows in ``index``.

        Args:
            index: ``[B]`` long, the outer indices of this rank's batch.
            estimate: ``[B, dim]`` the inner estimate ĝ_i(w_t; B_{i,2}) (detached).
            ema_weight: γ, weight of the new estimate (γ in SOX / SONG / SONEX, β0 in MOAP / ADAP).
            sample_scale: s, multiplies the new estimate (n/B1 for MOAP, m/B for MOAP-V2 and ADAP).
            correction: ``[B, dim]`` the same inner batch evaluated at the previous parameters (MSVR).
            correction_weight: γ', weight of ``estimate − correction`` (0 disables the MSVR term).
            synced: the inputs are identical on every rank already; skip the all-gather.

        Returns:
            :class:`StateUpdate` with the rows before and after the update, aligned with ``index``.
        """
        estimate = estimate.detach()
        self._check(index, estimate)
        index = index.long()
        tensors = [index, estimate] + ([correction.detach()] if correction is not None else [])
        local_start, local_size = 0, index.shape[0]
        if not synced and distributed.is_distributed():
            packable = index.device.type != "mps" and self.num_rows <= _EXACT_FLOAT64_INTEGERS  # MPS: no float64
            if packable and all(t.is_floating_point() for t in tensors[1:]):
                # one collective for all of them: float64 columns hold every index < 2^53 and every float32 / float64
                # value exactly (each collective is a rendezvous of the ranks: its latency, not its bytes, is the cost)
                packed = torch.cat([index.to(torch.float64).unsqueeze(1)] + [t.to(torch.float64) for t in tensors[1:]], 1)
                (packed,), offsets = distributed.all_gather_rows(packed)
                tensors = [packed[:, 0].long(), *packed[:, 1:].split(self.dim, dim=1)]
            else:
                tensors, offsets = distributed.all_gather_rows(*tensors)
            r = distributed.rank()
            local_start, local_size = int(offsets[r]), int(offsets[r + 1] - offsets[r])
        all_index, all_est = tensors[0], tensors[1].to(self.value.dtype)
        all_corr = tensors[2].to(self.value.dtype) if correction is not None else None

        rows, inverse = torch.unique(all_index, sorted=False, return_inverse=True)
        if rows.shape[0] == all_index.shape[0]:
            # no duplicates (the common case): work in the batch's own order
            rows, est, corr, local = all_index, all_est, all_corr, None
        else:  # duplicates: one update per row with the mean of its estimates (independent of their order)
            counts = torch.zeros(rows.shape[0], 1, dtype=all_est.dtype, device=all_est.device)
            counts.index_add_(0, inverse, torch.ones_like(all_est[:, :1]))
            est = torch.zeros(rows.shape[0], self.dim, dtype=all_est.dtype, device=all_est.device)
            est = est.index_add_(0, inverse, all_est) / counts
            corr = None if all_corr is None else torch.zeros_like(est).index_add_(0, inverse, all_corr) / counts
            local = inverse

        stored = self._stored_rows(rows)
        unvisited = torch.isnan(stored)  # rows are NaN in every component or in none
        old = self._settled(stored, rows, unvisited)  # unvisited: U₁ (decayed), or NaN for the first estimate
        first_estimate = self.initial_value is None
        if first_estimate:
            old = torch.where(unvisited, est, old)  # first visit: u^{t−1} := ĝ_i
        target = est if sample_scale == 1.0 else sample_scale * est
        weight = ema_weight.to(old.dtype) if isinstance(ema_weight, torch.Tensor) else ema_weight
        new = torch.lerp(old, target, weight)  # (1 − γ)u + γ s ĝ, and exactly ĝ on a first visit when s = 1
        if corr is not None and correction_weight != 0.0:
            new.add_(est - corr, alpha=correction_weight)
        if first_estimate and (sample_scale != 1.0 or corr is not None):
            new = torch.where(unvisited, est, new)  # first visit: u_i := ĝ_i
        new = self._project(new)
        self.value.index_copy_(0, rows, new)
        if self.decay_unsampled:
            # exp(-1000) is exactly 0 in float64: a step with γ = 1 erases every unsampled row.
            if isinstance(ema_weight, torch.Tensor):
                gamma = ema_weight.to(device=self.value.device, dtype=torch.float64)
                self.log_decay_total.add_(torch.log1p(-gamma).clamp_min(-1000.0))
            else:
                self.log_decay_total.add_(max(math.log1p(-ema_weight), -1000.0) if ema_weight < 1.0 else -1000.0)
            # index_copy_ of the expanded total: index_fill_ with a tensor value reads it on the host (a device sync)
            self.log_decay_mark.index_copy_(0, rows, self.log_decay_total.expand(rows.shape[0]))

        if local is None and local_size == all_index.shape[0]:
            return StateUpdate(previous=old, current=new, first_visit=unvisited[:, 0])
        positions = (inverse if local is not None else torch.arange(all_index.shape[0], device=rows.device))
        positions = positions[local_start : local_start + local_size]
        return StateUpdate(
            previous=old.index_select(0, positions),
            current=new.index_select(0, positions),
            first_visit=unvisited[:, 0].index_select(0, positions),
        )
