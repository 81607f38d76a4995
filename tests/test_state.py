"""The per-index state: first visit, EMA, projection, duplicates, lazy decay, MSVR, bad input."""

import math

import pytest
import torch

from fccolit.state import IndexedState

f64 = torch.float64


def make(rows=6, dim=2, **kw):
    return IndexedState(rows, dim, dtype=f64, **kw)


def test_first_visit_sets_the_estimate_and_previous():
    s = make()
    est = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=f64)
    rec = s.update(torch.tensor([4, 1]), est, ema_weight=0.3)
    assert torch.equal(rec.current, est) and torch.equal(rec.previous, est)
    assert rec.first_visit.tolist() == [True, True]
    assert torch.equal(s.value[[4, 1]], est)
    assert torch.isnan(s.value[[0, 2, 3, 5]]).all()  # unvisited rows untouched
    assert s.visited().tolist() == [False, True, False, False, True, False]


def test_ema_update_and_selective_update():
    s = make()
    s.update(torch.tensor([0, 1]), torch.ones(2, 2, dtype=f64), ema_weight=0.5)
    before = s.value.clone()
    est = torch.tensor([[3.0, 5.0]], dtype=f64)
    rec = s.update(torch.tensor([1]), est, ema_weight=0.25)
    assert torch.equal(rec.previous, torch.ones(1, 2, dtype=f64))
    assert torch.allclose(rec.current, 0.75 * 1.0 + 0.25 * est)
    assert not rec.first_visit.any()
    assert torch.equal(s.value[0], before[0])  # not sampled: bit-identical


def test_sample_scale_multiplies_the_new_estimate():
    s = make(dim=1)
    s.update(torch.tensor([2]), torch.tensor([[1.0]], dtype=f64), ema_weight=0.5)
    rec = s.update(torch.tensor([2]), torch.tensor([[2.0]], dtype=f64), ema_weight=0.5, sample_scale=3.0)
    assert rec.current.item() == pytest.approx(0.5 * 1.0 + 0.5 * 3.0 * 2.0)


def test_projection_onto_a_box():
    s = make(lower=[None, 0.5], upper=[1.0, 2.0])
    rec = s.update(torch.tensor([0, 1]), torch.tensor([[5.0, 0.1], [-3.0, 9.0]], dtype=f64), ema_weight=1.0)
    assert rec.current.tolist() == [[1.0, 0.5], [-3.0, 2.0]]
    with pytest.raises(ValueError, match="exceeds upper"):
        make(lower=2.0, upper=1.0)


def test_duplicates_get_one_update_with_the_mean_estimate_in_any_order():
    est = torch.tensor([[1.0], [5.0], [2.0], [4.0]], dtype=f64)
    idx = torch.tensor([3, 3, 0, 3])
    results = []
    for perm in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        s = make(dim=1)
        s.update(torch.tensor([3, 0]), torch.tensor([[10.0], [10.0]], dtype=f64), ema_weight=1.0)
        rec = s.update(idx[perm], est[perm], ema_weight=0.5)
        results.append(s.value.clone())
        # every occurrence of row 3 sees the same single update
        rows3 = rec.current[idx[perm] == 3]
        assert torch.allclose(rows3, torch.full_like(rows3, 0.5 * 10 + 0.5 * (1 + 5 + 4) / 3))
    assert all(torch.equal(results[0].nan_to_num(-1), r.nan_to_num(-1)) for r in results[1:])


def test_duplicates_on_first_visit_take_the_mean():
    s = make(dim=1)
    rec = s.update(torch.tensor([2, 2]), torch.tensor([[1.0], [3.0]], dtype=f64), ema_weight=0.1)
    assert rec.current.flatten().tolist() == [2.0, 2.0]


def test_msvr_update_formula():
    s = make(dim=1)
    s.update(torch.tensor([0]), torch.tensor([[2.0]], dtype=f64), ema_weight=1.0)
    g_now, g_prev = torch.tensor([[3.0]], dtype=f64), torch.tensor([[2.5]], dtype=f64)
    rec = s.update(torch.tensor([0]), g_now, ema_weight=0.2, correction=g_prev, correction_weight=0.7)
    assert rec.current.item() == pytest.approx(0.8 * 2.0 + 0.2 * 3.0 + 0.7 * (3.0 - 2.5))


def test_msvr_tracks_a_deterministic_inner_function_exactly():
    """seed 004 §4.2: full participation, deterministic g and γ' = 1 − γ make u follow g(w_t) exactly."""
    torch.manual_seed(0)
    gamma = 0.3
    s = make(rows=5, dim=1)
    idx = torch.arange(5)
    g = lambda w: (torch.sin(w * torch.arange(1, 6, dtype=f64)) + 2).unsqueeze(-1)  # noqa: E731
    w_prev = torch.tensor(0.1, dtype=f64)
    s.update(idx, g(w_prev), ema_weight=gamma)
    for _ in range(10):
        w = w_prev + 0.1 * torch.randn((), dtype=f64)
        rec = s.update(idx, g(w), ema_weight=gamma, correction=g(w_prev), correction_weight=1 - gamma)
        assert torch.allclose(rec.current, g(w), atol=1e-13)
        w_prev = w


@pytest.mark.parametrize("bounds", [dict(), dict(lower=[None, 0.2], upper=[3.0, 4.0])])
def test_lazy_decay_equals_eager_decay(bounds):
    """Unsampled rows decay by (1 − γ_t) every step; the lazy bookkeeping must give the eager values."""
    g = torch.Generator().manual_seed(1)
    rows, dim, steps = 8, 2, 40
    lazy = make(rows, dim, decay_unsampled=True, **bounds)
    eager = torch.full((rows, dim), math.nan, dtype=f64)
    lo = lazy.lower
    hi = lazy.upper
    for t in range(steps):
        gamma = float(0.05 + 0.9 * torch.rand((), generator=g))  # a schedule of γ_t
        scale = 3.0
        idx = torch.randperm(rows, generator=g)[:3]
        est = torch.rand(3, dim, generator=g, dtype=f64) * 2
        lazy.update(idx, est, ema_weight=gamma, sample_scale=scale)
        # eager reference: every row changes every step
        sampled = torch.zeros(rows, dtype=torch.bool)
        sampled[idx] = True
        new = eager.clone()
        first = torch.isnan(eager[:, 0]) & sampled
        upd = (1 - gamma) * eager[idx] + gamma * scale * est
        new[idx] = torch.where(first[idx].unsqueeze(-1), est, upd)
        new[~sampled] = (1 - gamma) * eager[~sampled]
        eager = torch.maximum(torch.minimum(new, hi), lo)
        assert torch.allclose(lazy.values(), eager, rtol=1e-12, atol=1e-300, equal_nan=True), t
    lazy.materialize_()
    assert torch.allclose(lazy.value, eager, rtol=1e-12, atol=1e-300, equal_nan=True)


def test_lazy_decay_with_gamma_one_erases_unsampled_rows():
    s = make(3, 1, decay_unsampled=True)
    s.update(torch.tensor([0, 1]), torch.tensor([[2.0], [3.0]], dtype=f64), ema_weight=0.5)
    s.update(torch.tensor([1]), torch.tensor([[1.0]], dtype=f64), ema_weight=1.0)
    assert s.values()[:2].flatten().tolist() == [0.0, 1.0]


def test_reset_forgets_everything():
    s = make(3, 1, decay_unsampled=True)
    s.update(torch.tensor([0]), torch.tensor([[2.0]], dtype=f64), ema_weight=0.5)
    s.reset()
    assert not s.visited().any()


def test_state_is_in_the_state_dict_and_round_trips():
    s = make(4, 2, decay_unsampled=True)
    s.update(torch.tensor([1, 2]), torch.rand(2, 2, dtype=f64), ema_weight=0.4)
    s.update(torch.tensor([2]), torch.rand(1, 2, dtype=f64), ema_weight=0.4)
    t = make(4, 2, decay_unsampled=True)
    t.load_state_dict(s.state_dict())
    assert torch.equal(t.values().nan_to_num(-1), s.values().nan_to_num(-1))
    assert set(s.state_dict()) == {"value", "log_decay_total", "log_decay_mark"}


def test_float32_state_costs_four_bytes_per_row_and_component():
    s = IndexedState(1000, 1)
    assert sum(b.numel() * b.element_size() for b in s.state_dict().values()) == 4000


def test_index_out_of_range_is_a_clear_error():
    s = make(5, 1)
    with pytest.raises(IndexError, match="has 5 rows but the batch holds index 7"):
        s.update(torch.tensor([1, 7]), torch.zeros(2, 1, dtype=f64), ema_weight=0.5)
    with pytest.raises(IndexError, match="index -1"):
        s.update(torch.tensor([-1]), torch.zeros(1, 1, dtype=f64), ema_weight=0.5)
    assert not s.visited().any()  # nothing half-written


def test_non_finite_estimate_is_a_clear_error():
    s = make(5, 1)
    with pytest.raises(FloatingPointError, match="non-finite"):
        s.update(torch.tensor([1, 2]), torch.tensor([[1.0], [math.nan]], dtype=f64), ema_weight=0.5)
    assert not s.visited().any()


def test_shape_errors():
    s = make(5, 2)
    with pytest.raises(ValueError, match="shape"):
        s.update(torch.tensor([1]), torch.zeros(1, 3, dtype=f64), ema_weight=0.5)
    with pytest.raises(TypeError, match="integer"):
        s.update(torch.tensor([1.0]), torch.zeros(1, 2, dtype=f64), ema_weight=0.5)
    with pytest.raises(ValueError, match="num_rows > 0"):
        IndexedState(0, 1)


def test_update_touches_only_the_batch_rows():
    """Regression guard for O(batch) updates: rows outside the batch keep their storage bit for bit."""
    s = IndexedState(100_000, 1)
    idx = torch.randint(0, 100_000, (64,))
    s.update(idx, torch.rand(64, 1), ema_weight=0.5)
    snapshot = s.value.clone()
    idx2 = torch.randint(0, 100_000, (64,))
    s.update(idx2, torch.rand(64, 1), ema_weight=0.5)
    same = (s.value == snapshot) | (torch.isnan(s.value) & torch.isnan(snapshot))
    changed = torch.nonzero(~same.all(-1)).flatten()
    assert set(changed.tolist()) <= set(idx2.tolist())
