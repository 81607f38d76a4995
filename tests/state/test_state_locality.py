"""The per-index state update touches only the batch's rows (the O(batch) cost of benchmarks/state_scale.py)."""

import pytest
import torch

from fccolit.state import IndexedState


def _filled_state(decay_unsampled: bool, num_rows: int = 50) -> IndexedState:
    state = IndexedState(num_rows, 2, lower=0.0, dtype=torch.float64, decay_unsampled=decay_unsampled)
    g = torch.Generator().manual_seed(0)
    visited = torch.arange(0, num_rows, 2)  # every other row visited, the rest still NaN
    state.update(visited, torch.rand(visited.numel(), 2, dtype=torch.float64, generator=g), ema_weight=0.3)
    return state


@pytest.mark.parametrize("decay_unsampled", [False, True])
@pytest.mark.parametrize("index", [[3, 10, 17], [4, 4, 9, 30, 9]], ids=["distinct", "duplicates"])
def test_update_writes_only_the_batch_rows(decay_unsampled, index):
    state = _filled_state(decay_unsampled)
    before = {k: v.clone() for k, v in state.state_dict().items()}
    rows = torch.tensor(index)
    estimate = torch.rand(rows.numel(), 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 2.0
    state.update(rows, estimate, ema_weight=0.25)
    others = torch.ones(state.num_rows, dtype=torch.bool)
    others[rows] = False
    after = state.state_dict()
    # the stored rows outside the batch are bit-for-bit unchanged (NaN stays NaN), inside they all changed
    assert torch.equal(after["value"][others].isnan(), before["value"][others].isnan())
    assert torch.equal(torch.nan_to_num(after["value"][others]), torch.nan_to_num(before["value"][others]))
    assert not (after["value"][rows] == before["value"][rows]).all(-1).any()
    if decay_unsampled:  # the lazy decay: one global scalar and the batch rows' marks, nothing else
        assert torch.equal(after["log_decay_mark"][others], before["log_decay_mark"][others])
        assert after["log_decay_total"] < before["log_decay_total"]
        # unsampled rows still read as decayed: (1 − γ) times their stored value, projected
        visited_other = others & ~before["value"][:, 0].isnan()
        expected = before["value"][visited_other] * 0.75
        assert torch.allclose(state.values()[visited_other], expected, rtol=0, atol=1e-15)


def test_update_cost_does_not_read_the_whole_table():
    """A table whose unvisited rows hold a poison value the update would propagate if it read them."""
    state = IndexedState(1000, 1, dtype=torch.float64)
    state.value[500:] = float("inf")  # rows outside every batch below; inf is never produced by an update
    for step in range(5):
        rows = torch.arange(step * 50, step * 50 + 50)
        state.update(rows, torch.full((50, 1), float(step), dtype=torch.float64), ema_weight=0.5)
    assert torch.isinf(state.value[500:]).all()
    assert torch.isfinite(state.value[:250]).all() and torch.isnan(state.value[250:500]).all()
