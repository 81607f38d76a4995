"""TrainingHealth: a run going nowhere is named, with its cause and fix, within its first epoch; a healthy one is not.

The runs are the quickstart's (SOX on SyntheticBinaryDataModule, MLP 64-32, AP with the squared hinge at margin 0.5,
γ = 0.1, Momentum lr 0.5, batches of 64 with 16 positives, log_every_n_steps 20), in process and on less data where
the check allows it; the callback runs with its defaults unless a test says otherwise.
"""

import warnings
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from fccolit.algorithms import MOAPV2, SOX, KSONG
from fccolit.callbacks import ConstraintViolationLogger, TrainingHealth, TrainingHealthWarning
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.models import MLP, NeuMF
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.objectives.ndcg import TopKNDCGSurrogate
from fccolit.optim import Momentum

pytestmark = pytest.mark.usefixtures("one_thread")


class RawFeatures(nn.Module):
    """The model fed features ``factor`` times larger: what a user's unscaled columns (pixel values, amounts) are
    to the standardized synthetic ones."""

    def __init__(self, model: nn.Module, factor: float) -> None:
        super().__init__()
        self.model, self.factor = model, factor

    def bind_sizes(self, sizes):
        self.model.bind_sizes(sizes)

    def forward(self, x):
        return self.model(x * self.factor)


def quickstart(num_samples: int = 20_000, factor: float = 1.0, lr: float = 0.5):
    seed_everything(0)
    data = SyntheticBinaryDataModule(num_samples=num_samples, num_features=20, pos_fraction=0.05, batch_size=64,
                                     num_positives=16)
    model = MLP(hidden=[64, 32])
    module = SOX(RawFeatures(model, factor) if factor != 1.0 else model,
                 AveragePrecisionSurrogate(surrogate="squared_hinge", margin=0.5), ema_weight=0.1,
                 optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=0.1), data_sizes=data.sizes, metrics=["ap"])
    return module, data


def fit(module, data, health, tmp_path=None, log_every_n_steps=20, **kw) -> Trainer:
    logger = TensorBoardLogger(tmp_path, name="health", default_hp_metric=False) if tmp_path is not None else False
    kw.setdefault("max_epochs", 1)
    trainer = Trainer(accelerator="cpu", logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
                      limit_val_batches=0, log_every_n_steps=log_every_n_steps, callbacks=[health], **kw)
    trainer.fit(module, datamodule=data)
    return trainer


def health_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, TrainingHealthWarning)]


def tensorboard_texts(tmp_path) -> dict[str, str]:
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent), size_guidance={"tensors": 0})
    events.Reload()
    texts = {}
    for tag in events.Tags()["tensors"]:
        if tag.startswith("health/"):
            texts[tag] = events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
    return texts


def test_unscaled_features_saturate_the_scores_and_the_warning_says_so_within_the_first_epoch(tmp_path):
    """Features × 100 (an unscaled table): within 20 steps every positive's logit is below −10, σ′ ≈ 0, the gradient
    is exactly 0. The first warning names saturated scores and says to standardize the features, before the first
    epoch ends; the vanishing gradient is attributed to it; both reach TensorBoard as text."""
    module, data = quickstart(num_samples=8_000, factor=100.0)
    health = TrainingHealth()
    with pytest.warns(TrainingHealthWarning) as record:
        trainer = fit(module, data, health, tmp_path)
    printed = health_warnings(record)
    assert [r.key for r in health.reports][:1] == ["saturated_scores"]
    first = health.reports[0]
    assert first.step < trainer.num_training_batches  # within the first (and only) epoch
    assert printed[0] == first.message
    assert "most scores are saturated" in first.message and "positives have logits below −10" in first.message
    assert "standardize the features" in first.message
    assert "Likely cause: input features that are not scaled" in first.message
    gradients = next(r for r in health.reports if r.key == "vanishing_gradients")
    assert "scores are saturated" in gradients.message
    assert len(printed) == len(health.reports) == len({r.key for r in health.reports})  # each printed once
    texts = tensorboard_texts(tmp_path)
    assert "standardize the features" in texts["health/saturated_scores/text_summary"]


def test_a_learning_rate_that_moves_nothing_is_named_within_the_first_epoch(tmp_path):
    """lr 1e-6: the parameters move by about 2e-8 of their norm per step while the gradient is O(0.1); the warning
    names the learning rate and its value and says to raise it (and nothing else is reported)."""
    module, data = quickstart(num_samples=8_000, lr=1e-6)
    health = TrainingHealth()
    with pytest.warns(TrainingHealthWarning) as record:
        trainer = fit(module, data, health, tmp_path)
    assert [r.key for r in health.reports] == ["learning_rate"]
    (report,) = health.reports
    assert report.step < trainer.num_training_batches
    assert health_warnings(record) == [report.message]
    assert "the learning rate (1e-06) is far too small" in report.message
    assert "raise the learning rate" in report.message
    assert health.statistics["parameter_change_per_step"] < 1e-7 < 1e-2 < health.statistics["gradient_norm"]


def test_a_healthy_quickstart_run_warns_nothing():
    """The quickstart's data and settings for 2 of its 6 epochs (476 steps; the whole 6 were checked by hand: no
    warning either): no TrainingHealthWarning, and the checks did run (their statistics far from the thresholds)."""
    module, data = quickstart()
    health = TrainingHealth(objective_patience=200)  # the objective check too, within these 476 steps
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit(module, data, health, max_epochs=2)
    assert health_warnings(record) == [] and health.reports == []
    stats = health.statistics
    assert stats["saturated_share"] < 0.5 and stats["parameter_change_per_step"] > 1e-4
    assert stats["gradient_norm"] > 1e-3 and stats["objective_change"] > 1e-2


def test_a_flat_objective_is_named_after_objective_patience_steps():
    """lr 1e-6 again, with a patience of 100 steps: the epoch means of train/objective's halves differ by ~1e-4."""
    module, data = quickstart(num_samples=8_000, lr=1e-6)
    health = TrainingHealth(objective_patience=100, skip_checks=["learning_rate"])
    with pytest.warns(TrainingHealthWarning):
        fit(module, data, health, max_epochs=2)  # 190 steps
    assert [r.key for r in health.reports] == ["objective_flat"]
    assert "train/objective has not moved over the last 100 steps" in health.reports[0].message


def test_state_held_at_omegas_caps_names_gamma_times_n_over_b1():
    """MOAP-V2 with β0 = 0.9: the update scales the estimate by n/B1 ≈ 7.7, so every row sits at u_1's cap; the
    warning gives γ·s and the largest β0 that keeps it ≤ 1. With β0 = 0.1 and the estimator's Ω (the default)
    nothing is reported."""
    reports = {}
    for gamma in (0.9, 0.1):
        seed_everything(0)
        data = SyntheticBinaryDataModule(num_samples=4_000, num_features=10, batch_size=64, num_positives=16)
        module = MOAPV2(MLP(hidden=[16]), AveragePrecisionSurrogate(project=True), ema_weight=gamma, data_sizes=data.sizes,
                        metrics=["ap"])
        health = TrainingHealth(check_every_n_steps=5)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            fit(module, data, health, log_every_n_steps=5)
        reports[gamma] = health.reports
    assert [r.key for r in reports[0.9]] == ["state_at_caps/u"]
    message = reports[0.9][0].message
    assert "of the rows of state 'u' updated at the last logged step sit at Ω's upper bound" in message
    assert "γ·s = 0.9 × 123/16 = 6.92" in message and "at most B1/n = 0.13" in message
    assert reports[0.1] == []


def test_ksong_lambda_far_below_the_top_k_threshold_is_named():
    """K-SONG's λ started at 0 with η0 = 0.01 leaves most of each list above it (K/N is 10/65); the warning says so
    and points at lambda_init: solve, which starts λ at the top-K threshold (then nothing is reported)."""
    reports = {}
    for init in (0.0, "solve"):
        seed_everything(0)
        data = SyntheticRankingDataModule(num_queries=40, num_items=150, num_positives=5, num_negatives=60,
                                          queries_per_batch=8, top_k=10)
        module = KSONG(NeuMF(embedding_dim=8, layers=[8], dropout=0.0),
                       TopKNDCGSurrogate(top_k=10, threshold_smoothing=1e-6, threshold_regularization=1e-9), lambda_init=init, data_sizes=data.sizes,
                       metrics=["ndcg@10"])
        health = TrainingHealth(check_every_n_steps=2, skip_checks=["objective_flat"])
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            fit(module, data, health, log_every_n_steps=1, max_steps=10)
        reports[init] = [r for r in health.reports if r.key == "lambda_off_target"]
    (report,) = reports[0.0]
    assert "λ is far below the (K+1)-th score" in report.message and "lambda_init: solve" in report.message
    assert reports["solve"] == []


def _evaluation(health, logger, epoch):
    trainer = SimpleNamespace(global_rank=0, sanity_checking=False, callbacks=[logger, health], callback_metrics={},
                              current_epoch=epoch, global_step=10 * (epoch + 1), loggers=[])
    module = SimpleNamespace(objective=SimpleNamespace(rho=10.0, penalty_name="squared_hinge"))
    health.on_validation_end(trainer, module)


def test_a_constraint_that_stays_violated_is_named_and_one_that_converges_is_not():
    """The check reads ConstraintViolationLogger's per-epoch history: a worst violation that stays above 0 at three
    evaluations without halving is reported, with ρ and the penalty; one that halves is converging."""
    for values, reported in (([0.30, 0.28, 0.27], True), ([0.30, 0.2, 0.1], False), ([0.3, -0.01, 0.2], False)):
        health, logger = TrainingHealth(), ConstraintViolationLogger()
        for epoch, worst in enumerate(values):
            logger.history.setdefault("val", []).append((epoch, [worst - 0.5, worst, float("nan")]))
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                _evaluation(health, logger, epoch)
        assert [r.key for r in health.reports] == (["constraint_violated"] if reported else []), values
        if reported:
            assert "0.3 → 0.28 → 0.27" in health.reports[0].message
            assert "ρ = 10 (squared_hinge penalty)" in health.reports[0].message
            assert health_warnings(record) == [health.reports[0].message]


@pytest.mark.parametrize("kwargs", [dict(check_every_n_steps=0), dict(saturated_share=0.0), dict(cap_share=1.5),
                                    dict(lambda_ratio=1.0), dict(parameter_tolerance=-1.0),
                                    dict(skip_checks=["saturation"])])
def test_options_out_of_range_are_refused_with_their_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TrainingHealth(**kwargs)
