"""The lazy running sum of :class:`fccolit.algorithms.pauc.ThresholdTracker` equals the eager one.

The eager reference is the original rule: at every step t, ``total += λ^{(t)}`` over the whole table (unvisited rows
add 0), then rows first visited at t are back-filled to ``(t + 1) λ_init``; ``λ̄ = total / T`` on visited rows.
"""

from __future__ import annotations

import math

import pytest
import torch

from fccolit.algorithms.pauc import ThresholdTracker

RTOL = 1e-12


class EagerTracker(ThresholdTracker):
    """The O(num_rows)-per-step reference (the pre-lazy implementation)."""

    @torch.no_grad()
    def accumulate(self, index, lam, step):
        current = self.values
        first = torch.isnan(current.index_select(0, index))  # before this step's update: a first visit
        self.total += torch.where(torch.isnan(current), torch.zeros_like(current), current)
        backfilled = torch.where(first, lam * (step + 1), self.total.index_select(0, index))
        self.total.index_copy_(0, index, backfilled)

    @torch.no_grad()
    def average_(self, steps):
        visited = self.state.visited()
        self.state.value[:, 0] = torch.where(visited, self.total / steps, self.values)
        self.total.zero_()


def _read(tracker: ThresholdTracker, index: torch.Tensor, init: torch.Tensor) -> torch.Tensor:
    """λ [R] of the batch's rows (``init`` on a first visit, as ``read`` with a float / batch start)."""
    lam = tracker.values.index_select(0, index)
    return torch.where(torch.isnan(lam), init, lam)


def _sbcd_call(trackers, steps, generator, num_rows, batch, weights, share=0.3, lr=0.2):
    """One SBCD call of ``steps`` steps on every tracker with the same batches; returns the batches' indices."""
    seen = []
    for t in range(steps):
        index = torch.multinomial(weights, batch, replacement=True, generator=generator)  # uneven, with duplicates
        init = torch.randn(num_rows, generator=generator, dtype=torch.float64).index_select(0, index)
        # a duplicated row gets one start value (as read() gives: the same losses row)
        exceed = torch.rand(batch, generator=generator, dtype=torch.float64)
        for tracker in trackers:
            lam = _read(tracker, index, init)
            tracker.accumulate(index, lam, t)
            tracker.update(index, lam, exceed, share, lr, synced=False)
        seen.append(index)
    return seen


def _true_sum(tracker: ThresholdTracker, steps: int) -> torch.Tensor:
    """Σ_{t<steps} λ^{(t)} of the lazy tracker, settled for every row (0 for unvisited rows)."""
    current = tracker.values
    return torch.where(torch.isnan(current), torch.zeros_like(current),
                       tracker.total + (steps - tracker.mark).to(current.dtype) * current)


@pytest.mark.parametrize("num_rows,batch", [(1, 3), (37, 5), (500, 16)])
def test_lazy_running_sum_equals_eager_over_many_steps(num_rows, batch):
    generator = torch.Generator().manual_seed(num_rows)
    weights = torch.rand(num_rows, generator=generator, dtype=torch.float64) ** 4 + 1e-3  # very uneven sampling
    weights[: max(1, num_rows // 10)] = 0.0 if num_rows > 1 else 1.0  # some rows are never visited
    lazy, eager = ThresholdTracker(num_rows), EagerTracker(num_rows)
    for steps in (1, 7, 60, 3, 200):  # several SBCD calls: averaged, then warm-started
        _sbcd_call([lazy, eager], steps, generator, num_rows, batch, weights)
        torch.testing.assert_close(_true_sum(lazy, steps), eager.total, rtol=RTOL, atol=RTOL)
        lazy.average_(steps)
        eager.average_(steps)
        assert torch.equal(torch.isnan(lazy.values), torch.isnan(eager.values))
        torch.testing.assert_close(lazy.values, eager.values, rtol=RTOL, atol=RTOL, equal_nan=True)
        assert not bool(lazy.total.any()) and not bool(lazy.mark.any())
    if num_rows > 1:
        assert bool(torch.isnan(lazy.values).any()) and bool((~torch.isnan(lazy.values)).sum() > 1)


def test_accumulate_touches_only_the_batch_rows():
    """O(batch) per step: accumulate and update write the batch's rows and nothing else."""
    num_rows = 1000
    tracker = ThresholdTracker(num_rows)
    generator = torch.Generator().manual_seed(3)
    _sbcd_call([tracker], 5, generator, num_rows, 8, torch.ones(num_rows, dtype=torch.float64))
    before = {k: v.clone() for k, v in tracker.state_dict().items()}
    index = torch.tensor([3, 999, 3, 500])
    lam = _read(tracker, index, torch.full((4,), 0.5, dtype=torch.float64))
    tracker.accumulate(index, lam, 5)
    tracker.update(index, lam, torch.full((4,), 0.25, dtype=torch.float64), 0.3, 0.2, synced=False)
    untouched = torch.ones(num_rows, dtype=torch.bool)
    untouched[index] = False
    for key, value in tracker.state_dict().items():
        assert torch.equal(value[untouched].nan_to_num(-1.0), before[key][untouched].nan_to_num(-1.0)), key
    assert torch.equal(tracker.mark[index], torch.full((4,), 6))


def test_lazy_sum_survives_a_state_dict_round_trip_mid_call():
    num_rows, batch = 50, 4
    weights = torch.linspace(0.0, 1.0, num_rows, dtype=torch.float64) ** 3
    straight, eager = ThresholdTracker(num_rows), EagerTracker(num_rows)
    gen_a, gen_b = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    _sbcd_call([straight, eager], 11, gen_a, num_rows, batch, weights)
    resumed = ThresholdTracker(num_rows)
    resumed.load_state_dict(straight.state_dict())  # a checkpoint after step 10 of the call
    assert set(straight.state_dict()) == {"state.value", "total", "mark"}
    # continue the call (steps 11..29) on all three with the same batches
    for t in range(11, 30):
        index = torch.multinomial(weights, batch, replacement=True, generator=gen_b)
        init = torch.full((batch,), math.pi, dtype=torch.float64)
        exceed = torch.rand(batch, generator=gen_b, dtype=torch.float64)
        for tracker in (straight, eager, resumed):
            lam = _read(tracker, index, init)
            tracker.accumulate(index, lam, t)
            tracker.update(index, lam, exceed, 0.5, 0.1, synced=False)
    for tracker in (straight, eager, resumed):
        tracker.average_(30)
    assert torch.equal(straight.values.nan_to_num(-1.0), resumed.values.nan_to_num(-1.0))
    torch.testing.assert_close(straight.values, eager.values, rtol=RTOL, atol=RTOL, equal_nan=True)
