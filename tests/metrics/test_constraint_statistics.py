"""ConstraintStatistics (fccolit/callbacks/constraints.py), the torchmetrics Metric of the constraint values: its
test belongs with the tests of that module and stays here until the callbacks' tests take it."""

import pytest
import torch


def test_constraint_statistics_add_up_batches_and_divide_once():
    from fccolit.callbacks.constraints import ConstraintStatistics

    stats = ConstraintStatistics(num_constraints=2, dim=1)
    stats.update(torch.tensor([[3.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
    stats.update(torch.tensor([[1.0], [0.0]]), torch.tensor([[2.0], [0.0]]))
    means = stats.compute()
    assert means[0, 0] == 1.0 and torch.isnan(means[1, 0])  # no data for constraint 1
    stats.reset()
    with torch.inference_mode():  # as trainer.validate resets it; a later fit's updates must still apply
        stats.reset()
    stats.update(torch.tensor([[2.0], [4.0]]), torch.tensor([[1.0], [2.0]]))
    assert stats.reduced().tolist() == [[2.0], [2.0]]
    with pytest.raises(ValueError, match="shape"):
        stats.update(torch.zeros(3, 1), torch.ones(3, 1))
