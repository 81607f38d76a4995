"""The `fccolit` command: help, the quickstart under fast_dev_run, --print_config round trip, config errors."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fccolit.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def cli(*args, run=True):
    args = list(args)
    if not run:  # without a subcommand: instantiate only
        args.remove("fit")
    return main(args, run=run)


def test_help_commands_work(capsys):
    for args in (["--help"], ["fit", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            cli(*args)
        assert exit_info.value.code == 0
    assert "--model" in capsys.readouterr().out


def test_console_script_is_installed_and_exits_zero_after_training(tmp_path):
    exe = Path(sys.executable).with_name("fccolit")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "fit" in proc.stdout
    proc = subprocess.run(
        [str(exe), "fit", "--config", QUICKSTART, "--trainer.fast_dev_run", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_quickstart_runs_under_fast_dev_run(tmp_path):
    result = cli("fit", "--config", QUICKSTART, "--trainer.fast_dev_run", "2", "--trainer.default_root_dir", str(tmp_path))
    model, data = result.model, result.datamodule
    # the data sizes reached the model through link_arguments
    assert model.state.num_rows == data.sizes["num_positives"]
    assert model.model.in_features == data.sizes["num_features"]
    assert model.state.visited().any()  # it trained


def test_print_config_round_trips(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli("fit", "--config", QUICKSTART, "--print_config")
    printed = capsys.readouterr().out
    assert "fccolit.algorithms.SOX" in printed
    assert "data_sizes" not in printed  # a link target: filled from the DataModule, never set by hand
    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    with pytest.raises(SystemExit):
        cli("fit", "--config", str(saved), "--print_config")
    assert capsys.readouterr().out == printed
    result = cli("fit", "--config", str(saved), "--trainer.fast_dev_run", "1", "--trainer.default_root_dir", str(tmp_path))
    assert result.model.state.visited().any()


def test_overrides_reach_the_module():
    result = cli("fit", "--config", QUICKSTART, "--model.init_args.ema_weight", "0.5", run=False)
    assert result.model.ema_weight == 0.5


def test_wrong_config_key_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli("fit", "--config", QUICKSTART, "--model.init_args.emma_weight", "0.1", run=False)
    assert exit_info.value.code != 0
    assert "emma_weight" in capsys.readouterr().err


def test_nan_scores_in_training_are_a_clear_error(tmp_path):
    result = cli("fit", "--config", QUICKSTART, run=False)
    model, data = result.model, result.datamodule
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        model.compositional_loss(model(batch), batch)[0]


def test_nan_scores_in_evaluation_are_a_clear_error():
    from fccolit.metrics import build_metric

    metric = build_metric("ap")
    with pytest.raises(ValueError, match="NaN"):
        metric.update(torch.tensor([0.1, float("nan")]), torch.tensor([1, 0]))
