"""What the ``fccolit`` command checks before a run uses a checkpoint or takes its first step, through the console
script as a user drives it: each refusal is one line, exit status 2, before any step (no checkpoint is written);
each silent pairing of a checkpoint with other data or another batch size is said."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from fccolit.checkpoints import configured_optimizer_settings, hyperparameter_changes
from fccolit.cli import console

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
Q = ["--config", QUICKSTART, "--data.init_args.num_samples", "1500", "--trainer.enable_progress_bar", "false"]
RUNS = Path("lightning_logs") / "quickstart"


def run_console(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fccolit", *args])
    try:
        console()
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(err: str) -> str:
    (line,) = [l for l in err.splitlines() if l.startswith("fccolit: error: ")]
    return line[len("fccolit: error: "):]


def checkpoints() -> list[Path]:
    return sorted(RUNS.glob("*/checkpoints/*.ckpt"))


@pytest.fixture
def trained(tmp_path, monkeypatch, capsys):
    """A working folder with one quickstart run of 3 steps."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_console(monkeypatch, capsys, "fit", *Q, "--trainer.max_steps", "3")
    assert code == 0, err[-3000:]
    return tmp_path


def test_last_is_resolved_before_the_optimizer_check(trained, monkeypatch, capsys):
    before = checkpoints()
    code, out, err = run_console(monkeypatch, capsys, "fit", *Q, "--trainer.max_steps", "6", "--ckpt_path", "last",
                                 "--model.init_args.optimizer.init_args.lr", "0.001")
    assert code == 2
    assert "optimizer.init_args.lr: 0.5 (checkpoint) -> 0.001 (configured)" in error_line(err)
    assert error_line(err).startswith(f"resuming from {RUNS / 'version_0' / 'checkpoints' / 'last.ckpt'}")
    assert checkpoints() == before  # refused before anything ran


def test_a_scheduled_run_is_compared_with_its_configured_start_not_its_scheduled_end():
    checkpoint = {
        "optimizer_states": [{"param_groups": [{"lr": 0.1 / 30 ** 0.5, "momentum_weight": 0.9 / 30 ** 0.5}]}],
        "fccolit_resume": {"optimizer_defaults": [{"lr": 0.1, "momentum_weight": 0.9, "weight_decay": 2e-4}]},
        "hyper_parameters": {"ema_weight": 0.9},
    }
    model = {"class_path": "fccolit.algorithms.ADAP", "init_args": {"ema_weight": 0.9, "optimizer": {
        "class_path": "fccolit.optim.AdaptiveMomentum", "init_args": {"lr": 0.1, "momentum_weight": 0.9}}}}
    assert hyperparameter_changes(checkpoint, model) == []
    model["init_args"]["optimizer"]["init_args"]["lr"] = 0.2
    assert hyperparameter_changes(checkpoint, model) == [("optimizer.init_args.lr", 0.1, 0.2)]
    assert hyperparameter_changes(checkpoint, model, optimizer=False) == []  # test / validate / predict
    del checkpoint["fccolit_resume"]  # a checkpoint without the record: the group's start (initial_lr)
    checkpoint["optimizer_states"][0]["param_groups"][0]["initial_lr"] = 0.1
    assert configured_optimizer_settings(checkpoint)["lr"] == 0.1


def test_the_checkpoint_records_the_optimizers_configured_settings(trained):
    (last,) = [p for p in checkpoints() if p.name == "last.ckpt"]
    recorded = torch.load(last, map_location="cpu", weights_only=True)["fccolit_resume"]["optimizer_defaults"]
    assert recorded[0]["lr"] == 0.5 and recorded[0]["momentum_weight"] == 0.1


@pytest.mark.parametrize("case, args, expected", [
    ("negative lr", ["--model.init_args.optimizer.init_args.lr", "-0.1"], "Invalid learning rate: -0.1"),
    ("positives fill the batch", ["--data.init_args.num_positives", "64"],
     "DualSampler: num_positives must be between 1 and batch_size − 1 = 63, got 64"),
    ("SONG on binary data", ["--model", "fccolit.algorithms.SONG"], "MLP scores ranking batches"),
])
def test_errors_inside_the_trainer_before_any_step_are_one_line(case, args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_console(monkeypatch, capsys, "fit", *Q, "--trainer.max_steps", "3", *args)
    assert code == 2, err[-3000:]
    assert expected in error_line(err) and "Traceback" not in err, case
    assert checkpoints() == []  # no step, no checkpoint


def test_a_checkpoint_that_does_not_fit_the_model_is_one_line(trained, monkeypatch, capsys):
    code, _, err = run_console(monkeypatch, capsys, "fit", *Q[:2], "--data.init_args.num_samples", "3000",
                               "--trainer.enable_progress_bar", "false", "--trainer.max_steps", "6",
                               "--ckpt_path", "last")
    assert code == 2
    assert re.match(r"checkpoint \S+last\.ckpt does not fit the configured SOX: state\.value has shape \[\d+, 2\] "
                    r"there and \[\d+, 2\] here", error_line(err)), error_line(err)


def test_a_pickled_payload_reached_through_last_names_the_file(trained, monkeypatch, capsys):
    (last,) = [p for p in checkpoints() if p.name == "last.ckpt"]
    payload = torch.load(last, map_location="cpu", weights_only=True)
    payload["extra"] = Path("anything")  # a Python object that a weights-only load refuses
    forged = RUNS / "version_7" / "checkpoints" / "last.ckpt"
    forged.parent.mkdir(parents=True)
    torch.save(payload, forged)
    for subcommand in ("test", "fit"):
        code, _, err = run_console(monkeypatch, capsys, subcommand, *Q, "--ckpt_path", "last")
        assert code == 2
        line = error_line(err)
        assert line.startswith(f"checkpoint {forged} holds a pickled pathlib.") and "weights-only load refuses" in line


def test_predict_into_a_folder_is_refused_before_scoring(trained, monkeypatch, capsys):
    target = trained / "out"
    target.mkdir()
    code, out, err = run_console(monkeypatch, capsys, "predict", *Q, "--ckpt_path", "last",
                                 "--prediction_writer.path", str(target))
    assert code == 2
    assert error_line(err) == (f"--prediction_writer.path {target} is a folder: give a file name, e.g. "
                               f"{target / 'predictions.csv'}")
    assert list(target.iterdir()) == [] and not list(trained.glob("*.partial"))


@pytest.mark.parametrize("flag, hint", [
    (["--trainer.max_epoch", "1"], "'max_epoch' is not a parameter of lightning.pytorch.Trainer. Did you mean 'max_epochs'?"),
    (["--seed_everythin", "3"], "'seed_everythin' is not a top-level key. Did you mean 'seed_everything'?"),
])
def test_abbreviated_options_are_typos_not_prefixes(flag, hint, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_console(monkeypatch, capsys, "fit", *Q, *flag)
    assert code == 2 and error_line(err).startswith(hint)


def test_resuming_on_shuffled_rows_or_other_batches_is_said(tmp_path, monkeypatch, capsys):
    import random

    from fccolit.testing import write_libsvm

    monkeypatch.chdir(tmp_path)
    write_libsvm(tmp_path, rows=400)
    args = ["--config", str(ROOT / "configs" / "libsvm" / "sox_ap.yaml"), "--data.root", str(tmp_path),
            "--data.name", "toy", "--data.init_args.cache_dir", str(tmp_path / "cache"),
            "--trainer.enable_progress_bar", "false"]
    code, _, err = run_console(monkeypatch, capsys, "fit", *args, "--trainer.max_steps", "3")
    assert code == 0, err[-3000:]
    lines = (tmp_path / "toy").read_text().splitlines()
    random.Random(0).shuffle(lines)  # the same rows (so the same sizes) in another order
    (tmp_path / "toy").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="resuming on training data that differs from the checkpoint's run"):
        code, _, err = run_console(monkeypatch, capsys, "fit", *args, "--trainer.max_steps", "5", "--ckpt_path", "last")
    assert code == 0, err[-3000:]
    with pytest.warns(UserWarning, match="resuming with global batches of 40 rows where the checkpoint's run drew 64"):
        code, _, err = run_console(monkeypatch, capsys, "fit", *args, "--trainer.max_steps", "7", "--ckpt_path", "last",
                                   "--data.init_args.batch_size", "40")
    assert code == 0, err[-3000:]


def test_the_same_data_resumes_without_a_word(trained, monkeypatch, capsys, recwarn):
    code, _, err = run_console(monkeypatch, capsys, "fit", *Q, "--trainer.max_steps", "5", "--ckpt_path", "last")
    assert code == 0, err[-3000:]
    assert not [w for w in recwarn if "resuming" in str(w.message)]
