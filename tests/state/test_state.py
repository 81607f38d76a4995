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
    """Full participation, deterministic g and γ' = 1 − γ (Chen et al.'s γ' at B1 = n) make u follow g(w_t) exactly."""
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
    with pytest.raises(IndexError, match="has 5 rows but the batch holds index 5"):  # a read names it too
        s.read(torch.tensor([0, 5]))
    assert not s.visited().any()  # nothing half-written


def test_non_finite_estimate_is_a_clear_error():
    s = make(5, 1)
    with pytest.raises(FloatingPointError, match="non-finite"):
        s.update(torch.tensor([1, 2]), torch.tensor([[1.0], [math.nan]], dtype=f64), ema_weight=0.5)
    with pytest.raises(FloatingPointError, match=r"positions \[0\]"):
        s.update(torch.tensor([1, 2]), torch.tensor([[-math.inf], [1.0]], dtype=f64), ema_weight=0.5)
    assert not s.visited().any()
    big = torch.tensor([[1.5e308], [1.5e308]], dtype=f64)  # finite values whose sum overflows: no error
    s.update(torch.tensor([1, 2]), big, ema_weight=1.0)
    assert torch.equal(s.read(torch.tensor([1, 2])), big)


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


# ---------------------------------------------------------------------------------------------- initial state U₁
@pytest.mark.parametrize("initial, start", [("zero", [0.0, 0.0]), ("projected_zero", [0.0, 0.5]), ([1.0, 2.0], [1.0, 2.0]),
                                            (3.0, [3.0, 3.0])])
def test_initial_state_applies_the_ordinary_update_on_the_first_visit(initial, start):
    s = make(lower=[None, 0.5], upper=[10.0, 10.0], initial=initial)
    start = torch.tensor([start], dtype=f64)
    est = torch.tensor([[4.0, 6.0]], dtype=f64)
    rec = s.update(torch.tensor([3]), est, ema_weight=0.25, sample_scale=2.0)
    expected = torch.clamp(0.75 * start + 0.25 * 2.0 * est, torch.tensor([-math.inf, 0.5], dtype=f64),
                           torch.tensor([10.0, 10.0], dtype=f64))
    assert torch.equal(rec.previous, start) and torch.allclose(rec.current, expected)
    assert rec.first_visit.tolist() == [True]
    assert s.visited().tolist() == [False, False, False, True, False, False]
    assert torch.equal(s.values()[0], start[0])  # unvisited rows read as U₁


def test_first_estimate_ignores_the_scale_on_the_first_visit_but_zero_start_does_not():
    first, zero = make(dim=1), make(dim=1, initial="zero")
    est = torch.tensor([[2.0]], dtype=f64)
    assert first.update(torch.tensor([0]), est, ema_weight=0.5, sample_scale=4.0).current.item() == 2.0
    assert zero.update(torch.tensor([0]), est, ema_weight=0.5, sample_scale=4.0).current.item() == 4.0


def test_initial_state_decays_like_any_row_and_lazy_equals_eager():
    """With decay_unsampled, a row never visited holds Π_Ω[Π(1 − γ) U₁] when first read, as the eager algorithm."""
    lower, upper = torch.tensor([-math.inf, 0.2], dtype=f64), torch.tensor([5.0, 5.0], dtype=f64)
    s = make(rows=5, lower=[None, 0.2], upper=[5.0, 5.0], initial=[1.0, 3.0], decay_unsampled=True)
    eager = torch.tensor([[1.0, 3.0]], dtype=f64).repeat(5, 1)
    gen = torch.Generator().manual_seed(0)
    for t in range(12):
        gamma = 0.1 + 0.05 * (t % 3)
        rows = torch.randperm(5, generator=gen)[:2]
        est = torch.rand(2, 2, generator=gen, dtype=f64) * 4
        new = torch.clamp((1 - gamma) * eager[rows] + gamma * 1.5 * est, lower, upper)
        eager = torch.clamp((1 - gamma) * eager, lower, upper)
        eager[rows] = new
        s.update(rows, est, ema_weight=gamma, sample_scale=1.5)
        assert torch.allclose(s.values(), eager, rtol=1e-12), t


def test_initial_state_errors_and_reset():
    with pytest.raises(ValueError, match="initial must be one of"):
        make(initial="zeros")
    with pytest.raises(ValueError, match="one finite value or 2"):
        make(initial=[1.0, 2.0, 3.0])
    s = make(initial="zero")
    s.update(torch.tensor([1]), torch.ones(1, 2, dtype=f64), ema_weight=0.5)
    s.reset()
    assert not s.visited().any() and torch.equal(s.values(), torch.zeros(6, 2, dtype=f64))


def test_share_at_bounds_counts_visited_rows_at_each_cap():
    s = make(lower=[None, 0.5], upper=[1.0, 2.0])
    s.update(torch.tensor([0, 1, 2, 3]), torch.tensor([[5.0, 0.1], [0.3, 0.1], [0.2, 1.0], [0.9, 3.0]], dtype=f64),
             ema_weight=1.0)
    at_lower, at_upper = s.share_at_bounds()
    assert at_lower.tolist() == [0.0, 0.5]  # component 0 has no lower bound; rows 0, 1 sit at 0.5
    assert at_upper.tolist() == [0.25, 0.25]  # row 0 at u1 ≤ 1, row 3 at u2 ≤ 2
