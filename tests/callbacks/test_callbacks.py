"""Callbacks of the foundation: metrics summary, state histograms in TensorBoard."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fccolit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_state_histograms_and_tags_reach_tensorboard(tmp_path, capsys):
    main([
        "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "10", "--trainer.limit_val_batches", "2",
        "--trainer.log_every_n_steps", "1", "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
    ])
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent), size_guidance={"histograms": 0})
    events.Reload()
    tags = events.Tags()
    assert {"state/u/0", "state/u/1"} <= set(tags["histograms"])
    scalars = set(tags["scalars"])
    assert {"train/objective", "train/objective_epoch", "val/ap", "val/auroc", "val/pauc_0.05_0.5", "state/u/visited"} <= scalars
    assert any(t.startswith("lr-") for t in scalars)
    visited = [e.value for e in events.Scalars("state/u/visited")]
    assert 0 < visited[0] <= visited[-1] <= 1
    assert "val/ap" in capsys.readouterr().out  # MetricsSummary printed the table


def test_step_values_reach_the_logger_every_n_steps_and_epoch_means_are_exact(tmp_path):
    """train/objective (and Supervised's train/loss) are handed to self.log only on the steps the logger writes;
    the epoch value is the exact mean of every step's estimate, logged or not."""
    import torch
    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import CSVLogger

    from fccolit.algorithms import SOX, Supervised
    from fccolit.datamodules import SyntheticBinaryDataModule
    from fccolit.models import MLP
    from fccolit.objectives import AveragePrecisionSurrogate

    for name, make in (("train/objective", lambda d: SOX(MLP(hidden=[8]), AveragePrecisionSurrogate(), data_sizes=d.sizes)),
                       ("train/loss", lambda d: Supervised(MLP(hidden=[8]), data_sizes=d.sizes))):
        data = SyntheticBinaryDataModule(num_samples=600, num_features=6, batch_size=50, num_positives=10, seed=0)
        torch.manual_seed(0)
        module = make(data)
        estimates, log_calls = [], []
        original_accumulate, original_log = module.log_objective_estimate, module.log

        def accumulate(estimate, original=original_accumulate):
            estimates.append(estimate.detach().double().clone())
            original(estimate)

        def log(key, *args, original=original_log, **kwargs):
            log_calls.append(key)
            original(key, *args, **kwargs)

        module.log_objective_estimate, module.log = accumulate, log
        logger = CSVLogger(tmp_path, name=name.replace("/", "_"))
        trainer = Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=0,
                          log_every_n_steps=5, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, use_distributed_sampler=False)
        trainer.fit(module, datamodule=data)
        steps = len(estimates)
        assert steps >= 5
        assert log_calls.count(name) == steps // 5, log_calls  # steps 5, 10, ...
        expected = torch.cat(estimates).mean()
        assert torch.allclose(trainer.callback_metrics[f"{name}_epoch"].double(), expected, rtol=1e-6)


def test_paper_options_from_the_command_line_and_the_share_of_rows_at_omegas_caps(tmp_path):
    """initial_state, anchor_sampling and omega_bounds are reachable from YAML / the CLI, and a projected state logs
    the share of its visited rows at each finite bound of Ω."""
    main([
        "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "6", "--trainer.limit_val_batches", "1",
        "--trainer.log_every_n_steps", "1", "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false", "--model.init_args.initial_state", "projected_zero",
        "--model.init_args.objective.init_args.project", "true",
        "--model.init_args.objective.init_args.omega_bounds", "paper",
        "--data.init_args.anchor_sampling", "with_replacement",
    ])
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"state/u/at_upper/0", "state/u/at_upper/1", "state/u/at_lower/1"} <= scalars
    assert "state/u/at_lower/0" not in scalars  # u₁ has no lower bound
    shares = [events.Scalars(tag)[-1].value for tag in ("state/u/at_upper/0", "state/u/at_upper/1", "state/u/at_lower/1")]
    assert all(0.0 <= v <= 1.0 for v in shares)
    step_tags = {"train/u_at_upper/0", "train/u_at_upper/1", "train/u_at_lower/1"}
    assert step_tags <= scalars and "train/u_at_lower/0" not in scalars  # the step's own rows, every logged step
    assert len(events.Scalars("train/u_at_upper/0")) == 6
    assert all(0.0 <= e.value <= 1.0 for tag in step_tags for e in events.Scalars(tag))
    hparams = (next(tmp_path.rglob("hparams.yaml"))).read_text()
    assert "initial_state: projected_zero" in hparams
