"""NCALoss (fccolit/objectives/nca.py): the SOX estimator is the exact gradient on the whole data, ``exact_value`` is
the leave-one-out formula with the anchor excluded, the SOX estimator is unbiased over uniform batches while BSGD is
not, the sum and mean scales give the same updates, errors name their cause; and NCA's data path (the uniform
sampler, the multi-class DataModule, a short Trainer run)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from objective_helpers import (
    exact_table, expectation, grads, make_sox, multiclass_data, run_steps, sox_estimate, subset,
)

from fccolit.algorithms.sox import SOX
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule
from fccolit.models import MLP
from fccolit.objectives.nca import NCALoss
from fccolit.optim import Momentum
from fccolit.samplers.uniform import UniformBatchSampler


def test_nca_sum_and_mean_scales_give_the_same_updates():
    full, sizes = multiclass_data(n=24, d=5, classes=3)
    sampler = UniformBatchSampler(24, 6, seed=0)
    batches = [subset(full, idx) for idx in itertools.islice(itertools.cycle(sampler), 10)]
    mods = {
        scale: run_steps(NCALoss(inner_scale=scale), sizes, iter(batches), lambda: nn.Linear(5, 2, bias=False), 10)
        for scale in ("mean", "sum")
    }
    moved = (mods["mean"].model.weight - make_sox(NCALoss(), sizes, model=lambda: nn.Linear(5, 2, bias=False)).model.weight).abs()
    assert moved.max() > 1e-3
    assert torch.allclose(mods["mean"].model.weight, mods["sum"].model.weight, rtol=1e-11, atol=1e-14)
    visited = mods["mean"].state.visited()
    assert torch.allclose(mods["sum"].state.value[visited], 23 * mods["mean"].state.value[visited], rtol=1e-12)


@pytest.mark.parametrize("inner_scale", ["mean", "sum"])
@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_nca_estimator_is_the_exact_gradient(inner_scale, u_for_gradient):
    full, sizes = multiclass_data()
    module = make_sox(NCALoss(inner_scale), sizes, model=lambda: nn.Linear(5, 3, bias=False), ema_weight=1.0,
                      u_for_gradient=u_for_gradient)
    true = grads(module, module.objective.exact_value(module(full), full))
    assert true.abs().max() > 1e-3
    for _ in range(2):
        assert torch.allclose(sox_estimate(module, full), true, rtol=1e-10, atol=1e-13)
    assert module.state.value.shape == (20, 2)


def test_nca_exact_value_is_the_leave_one_out_formula_with_the_anchor_excluded():
    full, sizes = multiclass_data()
    module = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(5, 2, bias=False))
    z = module(full).detach().tolist()
    y = full["y"].tolist()
    total = 0.0
    for i in range(len(z)):
        k = [math.exp(-sum((a - b) ** 2 for a, b in zip(z[i], z[j]))) if j != i else 0.0 for j in range(len(z))]
        total += sum(kj for j, kj in enumerate(k) if y[j] == y[i]) / sum(k)
    value = float(module.objective.exact_value(module(full), full).detach())
    assert value == pytest.approx(-total / len(z), rel=1e-12)
    assert -total / len(z) > -1.0  # with the anchor in C_i (as printed) the probabilities would not sum to 1


def test_nca_sox_estimator_is_unbiased_over_uniform_batches_and_bsgd_is_not():
    """Every batch of 3 of the 8 points (56 batches): the exact expectation."""
    full, sizes = multiclass_data(n=8, d=3, classes=2, seed=2)
    module = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(3, 2, bias=False), ema_weight=0.3)
    true = grads(module, module.objective.exact_value(module(full), full))
    batches = [list(c) for c in itertools.combinations(range(8), 3)]
    assert torch.allclose(expectation(module, full, batches, exact_table(module, full)), true, rtol=1e-10, atol=1e-13)
    bsgd = make_sox(NCALoss(), sizes, model=lambda: nn.Linear(3, 2, bias=False), ema_weight=1.0, u_for_gradient="fresh")
    assert (expectation(bsgd, full, batches, None) - true).norm() > 0.05 * true.norm()


def test_nca_errors_name_the_cause():
    full, sizes = multiclass_data()
    with pytest.raises(FloatingPointError, match="underflowed"):
        NCALoss().inner(1e3 * full["x"], full)  # distances ~1e3: every exp(−d²) is 0
    with pytest.raises(ValueError, match="num_samples"):
        NCALoss("sum").inner(full["x"], full)
    with pytest.raises(ValueError, match="at least 2"):
        NCALoss().inner(full["x"][:1], subset(full, [0]))
    one_dim = NCALoss().inner(full["x"][:, 0], full)  # a [B] output is a 1-d embedding
    assert one_dim.value.shape == (20, 2)


# ---------------------------------------------------------------------------------------------- data path
def test_uniform_batch_sampler_epochs_ranks_and_resume():
    sampler = UniformBatchSampler(23, 5, seed=3)
    assert len(sampler) == 4
    epoch0 = list(sampler)
    flat = [i for b in epoch0 for i in b]
    assert all(len(b) == 5 for b in epoch0) and len(set(flat)) == 20 and set(flat) <= set(range(23))
    assert list(sampler) == epoch0  # a pure function of (seed, epoch)
    sampler.set_epoch(1)
    assert list(sampler) != epoch0
    # ranks: disjoint slices that together are the global batch
    s10 = UniformBatchSampler(24, 6, seed=1)
    ranks = [list(UniformBatchSampler(24, 6, seed=1, rank=r, world_size=2)) for r in range(2)]
    for glob, a, b in zip(list(s10), *ranks):
        assert sorted(a + b) == sorted(glob) and not set(a) & set(b)
    with pytest.raises(ValueError, match="divide evenly"):
        list(UniformBatchSampler(24, 5, rank=0, world_size=2))
    # resume mid-epoch
    s = UniformBatchSampler(30, 4, seed=2)
    s.set_epoch(2)
    full = list(s)
    state = s.state_dict(batches_consumed=3)
    resumed = UniformBatchSampler(30, 4, seed=2)
    resumed.load_state_dict(state)
    assert list(resumed) == full[3:]
    with pytest.raises(ValueError, match="exceeds"):
        UniformBatchSampler(3, 4)
    with pytest.raises(ValueError, match="num_batches"):
        UniformBatchSampler(30, 4, num_batches=8)


def test_multiclass_datamodule_fields_sizes_and_loader():
    dm = SyntheticMulticlassDataModule(num_samples=500, num_features=6, num_classes=4, batch_size=32, seed=1)
    assert dm.sizes == {"num_samples": 300, "num_features": 6, "num_classes": 4}
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == 300 // 32
    b = batches[0]
    assert b["x"].shape == (32, 6) and b["x"].dtype == torch.float32 and b["y"].dtype == torch.long
    seen = torch.cat([x["index"] for x in batches])
    assert seen.unique().numel() == seen.numel()  # one pass without replacement
    assert torch.equal(dm.train_dataset.fields["x"][b["index"]], b["x"])
    assert set(dm.train_dataset.fields["y"].tolist()) == {0, 1, 2, 3}
    again = SyntheticMulticlassDataModule(num_samples=500, num_features=6, num_classes=4, batch_size=32, seed=1)
    assert torch.equal(again._splits["val"]["x"], dm._splits["val"]["x"])
    with pytest.raises(ValueError, match="num_informative"):
        SyntheticMulticlassDataModule(num_features=2, num_informative=3)


def test_nca_learns_a_metric_with_sox_on_the_multiclass_datamodule():
    """A short Trainer run (SOX, linear map into 2-d): the exact NCA objective on the training split drops."""
    from lightning.pytorch import Trainer

    dm = SyntheticMulticlassDataModule(num_samples=400, num_features=8, num_classes=3, num_informative=2,
                                       class_sep=2.5, batch_size=40, seed=0)
    torch.manual_seed(0)
    module = SOX(MLP(hidden=[], out_features=2), NCALoss(), data_sizes=dm.sizes, ema_weight=0.5,
                 optimizer=lambda p: Momentum(p, lr=1.0, momentum_weight=0.5))
    dm.setup("fit")
    train = dm.train_dataset.fields

    def objective():
        with torch.no_grad():
            return float(module.objective.exact_value(module.model(train["x"]), train))

    before = objective()
    trainer = Trainer(accelerator="cpu", max_epochs=6, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      limit_val_batches=0, log_every_n_steps=1)  # a short run: let the logger write every step
    trainer.fit(module, datamodule=dm)
    after = objective()
    assert after < before - 0.05, (before, after)
    assert "train/objective" in trainer.logged_metrics
