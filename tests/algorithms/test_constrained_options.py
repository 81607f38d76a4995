"""The options of the constrained-learning path: the fixed 1/m weighting of eq. (53) (``outer_normalization``),
batches stratified by (group × class) cell (``StratifiedBatchSampler`` / ``stratify_by_cell``), the KKT multipliers
of Prop. 5.2 logged beside the penalty weights read from the tracked duals, and the shipped Adult / COMPAS configs."""

import warnings
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fccolit.algorithms.alexr2 import ALEXR2
from fccolit.algorithms.sonex import SONEX, SONX, PenaltySOX
from fccolit.callbacks.constraints import ConstraintViolationLogger, accumulate_constraint_statistics
from fccolit.cli import main
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.models import MLP, LinearScorer
from fccolit.objectives.base import InnerBatch
from fccolit.objectives.constrained import ROCFairnessAUCObjective
from fccolit.samplers.group import GroupBatchSampler, StratifiedBatchSampler, proportional_quotas

warnings.filterwarnings("ignore", ".*does not have many workers.*")

ROOT = Path(__file__).resolve().parents[2]
D = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def module_of(cls, normalization, **kwargs):
    torch.manual_seed(0)
    return cls(LinearScorer(3), ROCFairnessAUCObjective(thresholds=(-1.0, 0.0, 1.0), kappa=0.01, rho=4.0),
               data_sizes={"num_samples": 40}, outer_normalization=normalization, **kwargs)


# ---------------------------------------------------------------------- the fixed 1/m of eq. (53)
@pytest.mark.parametrize("cls", [SONEX, SONX, PenaltySOX, ALEXR2])
def test_fixed_normalization_divides_by_every_constraint_not_the_ones_present(cls):
    fixed, present = module_of(cls, "fixed"), module_of(cls, "present")
    scores = torch.randn(10, dtype=D)
    inner = InnerBatch(index=torch.tensor([0, 2, 4]), value=torch.randn(3, 2, dtype=D))
    weight = torch.randn(3, 2, dtype=D)
    terms = (weight * inner.value).sum(-1)
    assert fixed.rows_due() == 6  # m = 2|Γ|
    assert float(fixed.reduce_rows(fixed.surrogate_terms(weight, inner.value))) == pytest.approx(float(terms.sum() / 6), rel=1e-14)
    assert float(present.reduce_rows(present.surrogate_terms(weight, inner.value))) == pytest.approx(float(terms.mean()), rel=1e-14)
    # every constraint present: the two readings agree
    full = InnerBatch(index=torch.arange(6), value=torch.randn(6, 2, dtype=D))
    w6 = torch.randn(6, 2, dtype=D)
    assert float(fixed.reduce_rows(fixed.surrogate_terms(w6, full.value))) == pytest.approx(
        float(present.reduce_rows(present.surrogate_terms(w6, full.value))), rel=1e-14)


def test_fixed_normalization_with_constraint_sampling_divides_by_the_rows_drawn():
    module = module_of(SONEX, "fixed", constraints_per_step=4)
    assert module.rows_due() == 4
    with pytest.raises(ValueError, match="outer_normalization"):
        module_of(SONEX, "sum")


def test_fixed_normalization_changes_the_step_only_when_a_constraint_is_missing():
    """One SONX step on a batch with every cell, then on one without the negatives of group 1 (7 of 14 rows): the
    constraint part of the gradient is the present-mean's times |present|/m, so the two updates differ exactly
    there (and agree on the full batch)."""
    def step(normalization, batch):
        torch.manual_seed(0)
        module = SONX(LinearScorer(3), ROCFairnessAUCObjective(rho=40.0, kappa=0.0), data_sizes={"num_samples": 8},
                      ema_weight=1.0, correction_weight=0.0, outer_normalization=normalization)
        module.double()
        module.configure_state()
        scores = module(batch)
        loss, _ = module.compositional_loss(scores, batch)
        direct = module.objective.direct(scores, batch)
        params = list(module.model.parameters())
        total = torch.autograd.grad(loss, params, retain_graph=True)
        direct_only = torch.autograd.grad(direct, params)
        return torch.cat([(a - b).reshape(-1) for a, b in zip(total, direct_only)]), module.state.visited().sum()

    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 3, generator=g, dtype=D) * 3
    full = {"x": x, "y": torch.tensor([1, 1, 0, 0, 1, 1, 0, 0]), "group": torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])}
    a, rows_a = step("fixed", full)
    b, rows_b = step("present", full)
    assert int(rows_a) == int(rows_b) == 14 and torch.allclose(a, b, rtol=1e-12, atol=0)
    missing = dict(full, group=torch.tensor([0, 1, 0, 0, 0, 1, 0, 0]))  # no negative of group 1: FPR rows absent
    a, rows = step("fixed", missing)
    b, _ = step("present", missing)
    assert int(rows) == 7 and float(b.abs().max()) > 0
    assert torch.allclose(a, b * 7 / 14, rtol=1e-12, atol=0)


# ---------------------------------------------------------------------- batches stratified by cell
def test_proportional_quotas_keep_every_cell_and_the_batch_size():
    assert proportional_quotas([13609, 5988, 8639, 1069], 64) == [30, 13, 19, 2]
    assert proportional_quotas([1000, 1], 8) == [7, 1]  # the rare cell still gets a row
    assert sum(proportional_quotas([5, 0, 7], 6)) == 6 and proportional_quotas([5, 0, 7], 6)[1] == 0
    with pytest.raises(ValueError, match="cannot hold one row"):
        proportional_quotas([3, 3, 3], 2)


@pytest.mark.parametrize("paired", [False, True])
def test_stratified_batches_hold_every_cell_in_every_block(paired):
    cells = torch.cat([torch.full((n,), c) for c, n in enumerate([300, 120, 170, 21])])
    cells = cells[torch.randperm(cells.numel(), generator=torch.Generator().manual_seed(0))]
    sampler = StratifiedBatchSampler(cells, 32, paired=paired, seed=4)
    sampler.set_epoch(0)
    batches = list(sampler)
    assert len(batches) == sampler.num_batches() == -(-611 // (64 if paired else 32))
    seen = torch.zeros(cells.numel())
    for b in batches:
        b = torch.tensor(b)
        assert b.numel() == (64 if paired else 32) and b.unique().numel() == b.numel()  # halves disjoint
        for block in b.split(32):
            assert torch.bincount(cells[block], minlength=4).tolist() == sampler.quotas
        seen[b] += 1
    assert (seen > 0).float().mean() > 0.97  # about one pass over every cell
    assert [list(s) for s in [sampler]] == [batches]  # the same epoch draws the same batches
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_stratified_batches_split_over_ranks_into_the_global_batch():
    cells = torch.arange(200) % 4
    one = StratifiedBatchSampler(cells, 16, paired=True, seed=2, rank=0, world_size=1)
    ranks = [StratifiedBatchSampler(cells, 16, paired=True, seed=2, rank=r, world_size=2) for r in range(2)]
    for s in [one, *ranks]:
        s.set_epoch(0)
    for whole, a, b in zip(one, *ranks):
        assert sorted(a + b) == sorted(whole) and a == whole[0::2] and b == whole[1::2]
    with pytest.raises(ValueError, match="multiple of the devices"):
        list(StratifiedBatchSampler(cells, 15, seed=2, rank=0, world_size=2))


def test_fairness_datamodule_stratifies_by_group_and_class(adult_files):
    data = FairnessDataModule(adult_files, "adult", batch_size=32, stratify_by_cell=True, paired=True)
    data.setup("fit")
    sampler = data.build_train_sampler()
    assert isinstance(sampler, StratifiedBatchSampler)
    train = data._splits["train"]
    cells = 2 * train["group"] + train["y"]
    sampler.set_epoch(0)
    for b in sampler:
        for half in torch.tensor(b).split(16):
            assert (torch.bincount(cells[half], minlength=4) > 0).all()
    plain = FairnessDataModule(adult_files, "adult", batch_size=32)
    assert isinstance(plain.build_train_sampler(), GroupBatchSampler)
    with pytest.raises(ValueError, match="stratify_by_cell"):
        FairnessDataModule(adult_files, "adult", groups_per_batch=2, stratify_by_cell=True)


# ---------------------------------------------------------------------- penalty weights and KKT multipliers
def test_logger_names_the_tracked_weights_and_logs_the_kkt_multipliers(adult_files, tmp_path):
    from lightning.pytorch import Trainer

    data = FairnessDataModule(adult_files, "adult", batch_size=32, stratify_by_cell=True, paired=True)
    torch.manual_seed(0)
    lam = 2e-3
    module = ALEXR2(MLP(hidden=[8]), ROCFairnessAUCObjective(rho=10.0), data_sizes=data.sizes, smoothing=lam, inner_lr=1e-2,
                    inner_steps=3, outer_normalization="fixed")
    logger_cb = ConstraintViolationLogger(stages=("train", "val"))
    quiet = ConstraintViolationLogger(stages=("val",), legacy_multiplier_tags=False, log_kkt_multipliers=False)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, callbacks=[logger_cb, quiet])
    trainer.fit(module, datamodule=data)
    logged = logger_cb.last["train"]
    weights = module.penalty_weights()
    assert torch.equal(weights, module.penalty_weights())
    for i in range(14):
        assert logged[f"train/penalty_weight_{i}"] == float(weights[i])
        assert logged[f"train/multiplier_{i}"] == logged[f"train/penalty_weight_{i}"]  # the old tag, same values
    # Prop. 5.2's ν_i = (1/(λm)) min{[h_i]_+, λρ} (the gap penalty smooths with 2λ) at the full training data
    data.setup("fit")
    train = {k: v for k, v in data._splits["train"].items()}
    module.eval()
    sums, counts = accumulate_constraint_statistics(module, [train])
    h = module.objective.constraint_values(sums / counts)
    expected = torch.clamp(h, min=0.0).clamp(max=2 * lam * 10.0) / (2 * lam) / 14
    for i in range(14):
        assert logged[f"train/kkt_multiplier_{i}"] == pytest.approx(float(expected[i]), rel=1e-9, abs=1e-12)
    assert any(logged[f"train/kkt_multiplier_{i}"] != logged[f"train/penalty_weight_{i}"] for i in range(14))
    assert not any(k.startswith(("val/multiplier", "val/kkt")) for k in quiet.last["val"])
    assert any(k.startswith("val/penalty_weight") for k in quiet.last["val"])


# ---------------------------------------------------------------------- the shipped configs
@pytest.mark.parametrize("name", ["adult", "compas"])
def test_shipped_fairness_configs_use_the_paper_reading(name):
    spec = yaml.safe_load((ROOT / "configs" / name / "alexr2_fairness.yaml").read_text())
    model, data = spec["model"]["init_args"], spec["data"]["init_args"]
    assert model["outer_normalization"] == "fixed"
    assert data["stratify_by_cell"] is True and data["paired"] is True
    assert model["independent_batches"] is True
    assert model["inner_lr"] == 0.01  # η from the sweep (benchmarks/reproduce/fairness_adult.py)


def test_adult_config_reaches_the_options_through_the_cli(adult_files, tmp_path):
    config = str(ROOT / "configs" / "adult" / "alexr2_fairness.yaml")
    result = main(["fit", "--config", config, "--data.init_args.root", str(adult_files), "--trainer.max_epochs", "1",
                   "--trainer.limit_train_batches", "3", "--trainer.log_every_n_steps", "1",
                   "--data.init_args.batch_size", "32", "--trainer.enable_progress_bar", "false",
                   "--trainer.logger.init_args.save_dir", str(tmp_path)])
    assert result.model.outer_normalization == "fixed" and result.model.inner_lr == 0.01
    assert isinstance(result.datamodule.build_train_sampler(), StratifiedBatchSampler)
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {f"val/{kind}_{i}" for kind in ("kkt_multiplier", "penalty_weight", "multiplier") for i in range(14)}
    assert expected <= tags, expected - tags
