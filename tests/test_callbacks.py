"""Callbacks of the foundation: metrics summary, state histograms in TensorBoard."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fccolit.cli import main

ROOT = Path(__file__).resolve().parents[1]


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
