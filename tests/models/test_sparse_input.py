"""LinearScorer and MLP on sparse CSR batches: the same scores and gradients as on the dense rows (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fccolit.data import SparseRows
from fccolit.models import MLP, LinearScorer, SparseInputLinear


def _rows(num_rows: int = 9, width: int = 13, density: float = 0.3, seed: int = 0) -> tuple[SparseRows, np.ndarray]:
    """Random sparse rows (row 3 empty) as SparseRows and as the dense float64 matrix."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(num_rows, width)) * (rng.random((num_rows, width)) < density)
    dense[3] = 0.0
    row, col = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=num_rows))])
    return SparseRows(indptr, col.astype(np.int32), dense[row, col], width), dense


@pytest.mark.parametrize("make", [lambda d: LinearScorer(d), lambda d: LinearScorer(d, bias=False),
                                  lambda d: MLP(d, hidden=(6, 4)), lambda d: MLP(d, hidden=(), out_features=3)],
                         ids=["linear", "linear_no_bias", "mlp", "multi_output"])
def test_sparse_scores_and_gradients_equal_dense_in_float64(make):
    rows, dense = _rows()
    torch.manual_seed(0)
    model = make(dense.shape[1]).double()
    batch = torch.tensor([4, 3, 0, 4, 8])  # a repeated row and an empty one
    sparse_x, dense_x = rows.index_select(0, batch), torch.from_numpy(dense)[batch]
    assert sparse_x.layout == torch.sparse_csr and torch.equal(sparse_x.to_dense(), dense_x)
    params = list(model.parameters())
    sparse_out = model(sparse_x)
    sparse_grads = torch.autograd.grad((sparse_out ** 2).sum(), params)
    dense_out = model(dense_x)
    dense_grads = torch.autograd.grad((dense_out ** 2).sum(), params)
    assert sparse_out.shape == dense_out.shape
    torch.testing.assert_close(sparse_out, dense_out, rtol=1e-13, atol=1e-15)
    for s, d in zip(sparse_grads, dense_grads):
        assert s.layout == torch.strided and s.shape == d.shape  # a dense gradient, as every optimizer expects
        torch.testing.assert_close(s, d, rtol=1e-13, atol=1e-15)


def test_the_sparse_input_layer_is_an_nn_linear_with_the_same_parameters_and_draws():
    """Dense inputs take nn.Linear's own path: same initial weights, same outputs, same state-dict keys."""
    torch.manual_seed(3)
    plain = nn.Linear(7, 2)
    torch.manual_seed(3)
    layer = SparseInputLinear(7, 2)
    assert isinstance(layer, nn.Linear) and layer.state_dict().keys() == plain.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(layer.parameters(), plain.parameters()))
    x = torch.randn(5, 7)
    assert torch.equal(layer(x), plain(x))
    assert set(LinearScorer(7).state_dict()) == {"net.weight", "net.bias"}
    assert set(MLP(7, hidden=(4,)).state_dict()) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}


def test_sparse_input_of_the_wrong_width_names_both_widths():
    rows, dense = _rows(width=13)
    with pytest.raises(ValueError, match=r"sparse input of shape \(2, 13\), expected \[B, 12\]"):
        LinearScorer(12).double()(rows.index_select(0, torch.tensor([0, 1])))


def test_sparse_rows_check_their_arrays():
    with pytest.raises(ValueError, match="inconsistent CSR arrays"):
        SparseRows(np.array([0, 2, 5]), np.zeros(4, dtype=np.int32), np.zeros(4), 3)
    rows, _ = _rows()
    assert len(rows) == 9 and rows.shape == (9, 13)
    with pytest.raises(ValueError, match="dim=0"):
        rows.index_select(1, torch.tensor([0]))
