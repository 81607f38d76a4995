"""The train -> test path of every config header, through the CLI: ``fccolit fit`` writes best.ckpt / last.ckpt to
the run's own folder (``lightning_logs/<config>/version_<k>/checkpoints``); ``fccolit test|validate|predict --ckpt_path
last|best`` in a new process finds the newest run's files, logs into that run's folder, and refuses in one line when
they are not there; ``predict`` writes its scores; TensorBoard gets the whole config and a real ``hp_metric``."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fccolit.cli import ConfigurationError, console, main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
SMALL = ["--data.init_args.num_samples", "3000", "--trainer.enable_progress_bar", "false"]
RUNS = Path("lightning_logs") / "quickstart"  # the logger's folder of the config, under the working folder
CHECKPOINTS = RUNS / "version_0" / "checkpoints"  # the first run's


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The quickstart trained for two epochs (3,000 rows) in a fresh working folder: ``(folder, fit result)``."""
    folder = tmp_path_factory.mktemp("trained")
    before = os.getcwd()
    os.chdir(folder)
    try:
        result = main(["fit", "--config", QUICKSTART, *SMALL, "--trainer.max_epochs", "2"])
    finally:
        os.chdir(before)
    return folder, result


def run_console(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``fccolit <args>`` through the console script's entry point in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["fccolit", *args])
    try:
        console()
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_fit_writes_best_and_last_to_the_runs_own_folder(trained):
    folder, result = trained
    assert sorted(p.name for p in (folder / CHECKPOINTS).iterdir()) == ["best.ckpt", "last.ckpt"]
    callback = result.trainer.checkpoint_callback
    assert folder / callback.best_model_path == folder / CHECKPOINTS / "best.ckpt"  # relative, as the config's save_dir
    assert callback.monitor == "val/ap"
    last = torch.load(folder / CHECKPOINTS / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == result.trainer.global_step  # the final state, whatever the best step was


def test_test_with_last_in_a_new_process_reports_the_trained_model(trained, tmp_path, monkeypatch):
    folder, result = trained
    monkeypatch.chdir(tmp_path)
    exe = Path(sys.executable).with_name("fccolit")
    proc = subprocess.run([str(exe), "test", "--config", QUICKSTART, *SMALL, "--ckpt_path", "last"],
                          capture_output=True, text=True, timeout=300, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    test_ap = float(re.search(r"test/ap\s*│\s*([0-9.]+)", proc.stdout).group(1))
    # the same number as testing the trained module's last checkpoint file in this process
    here = main(["test", "--config", QUICKSTART, *SMALL, "--trainer.logger", "false",
                 "--ckpt_path", str(folder / CHECKPOINTS / "last.ckpt")])
    assert test_ap == pytest.approx(float(here.trainer.callback_metrics["test/ap"]), abs=1e-12)
    assert test_ap > 0.3  # trained: 5% positives, so an untrained model's AP is about 0.05
    assert f"--ckpt_path last: {CHECKPOINTS / 'last.ckpt'}" in proc.stderr + proc.stdout
    # its logs went to the tested run's folder, not to a new run's
    assert sorted(p.name for p in (folder / RUNS).iterdir()) == ["version_0"]
    assert (folder / RUNS / "version_0" / "test" / "config.yaml").is_file()


def test_best_resolves_to_the_checkpoint_the_monitor_chose(trained, monkeypatch):
    folder, result = trained
    monkeypatch.chdir(folder)
    tested = main(["validate", "--config", QUICKSTART, *SMALL, "--ckpt_path", "best"])
    best = torch.load(folder / CHECKPOINTS / "best.ckpt", map_location="cpu", weights_only=True)
    state = next(s for s in best["callbacks"].values() if s.get("monitor") == "val/ap")
    assert Path(tested.trainer.ckpt_path).resolve() == (folder / CHECKPOINTS / "best.ckpt").resolve()
    assert float(tested.trainer.callback_metrics["val/ap"]) == pytest.approx(float(state["best_model_score"]), abs=1e-12)


def test_a_resumed_run_writes_its_own_folder_and_last_then_finds_it(trained, tmp_path, monkeypatch):
    folder, result = trained
    shutil.copytree(folder / "lightning_logs", tmp_path / "lightning_logs")
    monkeypatch.chdir(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in CHECKPOINTS.iterdir()}
    steps = result.trainer.global_step
    resumed = main(["fit", "--config", QUICKSTART, *SMALL, "--trainer.max_epochs", "3", "--ckpt_path", "last"])
    assert resumed.trainer.global_step == steps * 3 // 2  # two epochs restored, one more trained
    assert {p: p.stat().st_mtime_ns for p in CHECKPOINTS.iterdir()} == before  # the first run's files untouched
    second = RUNS / "version_1" / "checkpoints"
    assert sorted(p.name for p in second.iterdir()) == ["best.ckpt", "last.ckpt"]
    last = torch.load(second / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == resumed.trainer.global_step
    tested = main(["validate", "--config", QUICKSTART, *SMALL, "--ckpt_path", "last"])
    assert Path(tested.trainer.ckpt_path).resolve() == (second / "last.ckpt").resolve()
    assert Path(tested.trainer.log_dir) == RUNS / "version_1" / "validate"


def test_default_root_dir_moves_the_runs_and_last_finds_them_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--config", QUICKSTART, *SMALL, "--trainer.default_root_dir", "elsewhere"]
    main(["fit", *args, "--trainer.max_steps", "3"])
    assert (tmp_path / "elsewhere" / CHECKPOINTS / "last.ckpt").is_file()
    assert not (tmp_path / "lightning_logs").exists()
    tested = main(["validate", *args, "--ckpt_path", "last"])
    assert Path(tested.trainer.ckpt_path).resolve() == (tmp_path / "elsewhere" / CHECKPOINTS / "last.ckpt").resolve()


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
@pytest.mark.parametrize("ckpt_path", ["last", "best", "missing.ckpt", None])
def test_a_checkpoint_that_does_not_exist_is_refused_in_one_line(subcommand, ckpt_path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no run of the config here
    given = ["--ckpt_path", ckpt_path] if ckpt_path else []
    code, out, err = run_console(monkeypatch, capsys, subcommand, "--config", QUICKSTART, *SMALL, *given)
    assert code == 2
    (line,) = [l for l in err.splitlines() if l.startswith("fccolit: error:")]
    expected = {"last": "--ckpt_path last: no last.ckpt in lightning_logs/quickstart/*/checkpoints",
                "best": "--ckpt_path best: no best checkpoint recorded in lightning_logs/quickstart/*/checkpoints",
                "missing.ckpt": "--ckpt_path missing.ckpt: no such checkpoint file",
                None: f"{subcommand} without --ckpt_path would evaluate the untrained model"}[ckpt_path]
    assert line.startswith(f"fccolit: error: {expected}")
    assert "Traceback" not in err and "│ test/ap" not in out  # nothing was evaluated
    assert not (tmp_path / "lightning_logs").exists()  # and no run folder was made for it
    monkeypatch.setenv("FCCOLIT_TRACEBACK", "1")  # the full report instead
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        run_console(monkeypatch, capsys, subcommand, "--config", QUICKSTART, *SMALL, *given)


def test_untrained_evaluates_the_initial_model_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = main(["test", "--config", QUICKSTART, *SMALL, "--trainer.logger", "false", "--ckpt_path", "untrained"])
    assert result.trainer.ckpt_path is None and "test/ap" in result.trainer.callback_metrics


def test_fit_with_last_and_no_earlier_run_starts_from_scratch(tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO):
        result = main(["fit", "--config", QUICKSTART, *SMALL, "--trainer.max_steps", "2", "--ckpt_path", "last"])
    assert result.trainer.global_step == 2
    assert any("no earlier run of this config" in r.getMessage() for r in caplog.records)


def test_predict_writes_index_and_score_next_to_the_logs(trained, monkeypatch):
    folder, result = trained
    monkeypatch.chdir(folder)
    predicted = main(["predict", "--config", QUICKSTART, *SMALL, "--ckpt_path", "last", "--return_predictions", "false"])
    writer = next(c for c in predicted.trainer.callbacks if type(c).__name__ == "PredictionWriter")
    assert writer.written_to == Path(predicted.trainer.log_dir) / "predictions.csv"
    with open(writer.written_to) as f:
        rows = list(csv.reader(f))
    data = predicted.datamodule
    assert rows[0] == ["index", "score", "probability", "label"] and len(rows) == 1 + len(data.test_dataset)
    index = torch.tensor([int(r[0]) for r in rows[1:]])
    scores = torch.tensor([float(r[1]) for r in rows[1:]])
    assert torch.equal(index, torch.arange(len(data.test_dataset)))
    batch = data.test_dataset.__getitems__(list(range(len(data.test_dataset))))
    model = type(result.model).load_from_checkpoint(folder / CHECKPOINTS / "last.ckpt", model=result.model.model,
                                                    objective=result.model.objective)
    with torch.no_grad():
        expected = model.eval()(batch).double()
    torch.testing.assert_close(scores.double(), expected, rtol=1e-8, atol=1e-8)  # 9 significant digits
    labels = torch.tensor([int(r[3]) for r in rows[1:]])
    assert torch.equal(labels, batch["y"])  # the split's labels beside the scores
    torch.testing.assert_close(torch.tensor([float(r[2]) for r in rows[1:]], dtype=torch.float64),
                               torch.sigmoid(expected), rtol=1e-8, atol=1e-8)


def test_predict_writes_where_it_is_told(trained, tmp_path, monkeypatch):
    folder, _ = trained
    monkeypatch.chdir(folder)
    out = tmp_path / "out" / "scores.csv"
    main(["predict", "--config", QUICKSTART, *SMALL, "--ckpt_path", "best", "--prediction_writer.path", str(out)])
    assert out.read_text().splitlines()[0] == "index,score,probability,label"


def test_tensorboard_hparams_hold_the_whole_config_and_the_monitored_metric(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    folder, result = trained
    (events,) = (folder / "lightning_logs" / "quickstart" / "version_0").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    content = accumulator.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert start.hparams["model/init_args/optimizer/init_args/lr"].number_value == 0.5
    assert start.hparams["model/init_args/objective/class_path"].string_value == "fccolit.objectives.AveragePrecisionSurrogate"
    assert start.hparams["model/init_args/model/class_path"].string_value == "fccolit.models.MLP"
    assert [m.name.tag for m in experiment.metric_infos] == ["hp_metric"]
    hp_metric = [e.value for e in accumulator.Scalars("hp_metric")]
    val_ap = [e.value for e in accumulator.Scalars("val/ap")]
    assert len(hp_metric) == 2 and hp_metric == pytest.approx(val_ap)  # one real value per validation, no -1


def test_prediction_rows_name_examples_tasks_and_listed_items():
    from fccolit.callbacks.prediction_writer import prediction_rows

    header, rows, _ = prediction_rows(torch.tensor([[0.5, 1.5], [2.0, 3.0]]), {"index": torch.tensor([7, 9])})
    assert header == "index,score_0,score_1" and rows.tolist() == [[7, 0.5, 1.5], [9, 2.0, 3.0]]
    # with the split's labels: binary / multi-label get σ(score) and the label per task, multi-class the class
    header, rows, _ = prediction_rows(torch.tensor([0.0, 2.0]), {"index": torch.tensor([7, 9]), "y": torch.tensor([0, 1])})
    assert header == "index,score,probability,label"
    np.testing.assert_allclose(rows, [[7, 0.0, 0.5, 0], [9, 2.0, 1 / (1 + np.exp(-2.0)), 1]], rtol=1e-12)
    header, rows, _ = prediction_rows(torch.zeros(2, 2), {"index": torch.tensor([7, 9]), "y": torch.tensor([[1, -1], [0, 1]])})
    assert header == "index,score_0,score_1,probability_0,probability_1,label_0,label_1"
    assert rows[:, 5:].tolist() == [[1, -1], [0, 1]]
    header, rows, _ = prediction_rows(torch.zeros(2, 3), {"index": torch.tensor([7, 9]), "y": torch.tensor([2, 0])})
    assert header == "index,score_0,score_1,score_2,label" and rows[:, -1].tolist() == [2, 0]
    ranking = {"query": torch.tensor([3, 4]), "items": torch.tensor([[10, 11, 0], [12, 0, 0]]),
               "mask": torch.tensor([[True, True, False], [True, False, False]])}
    header, rows, _ = prediction_rows(torch.tensor([[0.1, 0.2, 9.0], [0.3, 9.0, 9.0]]), ranking)
    assert header == "query,item,score"
    np.testing.assert_allclose(rows, [[3, 10, 0.1], [3, 11, 0.2], [4, 12, 0.3]], rtol=1e-7)
    del ranking["items"]  # learning to rank: the position in the query's list
    assert prediction_rows(torch.zeros(2, 3), ranking)[1][:, 1].tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="needs an 'index' field"):
        prediction_rows(torch.zeros(2), {"x": torch.zeros(2, 3)})


def test_prediction_file_appears_whole_or_not_at_all(tmp_path):
    """Rows go to ``<file>.partial`` and are renamed at the end; a failed prediction leaves no file at all."""
    from types import SimpleNamespace

    from fccolit.callbacks import PredictionWriter

    trainer = SimpleNamespace(world_size=1, global_rank=0)
    batch = {"index": torch.arange(3)}
    for fails in (False, True):
        out = tmp_path / f"fails_{fails}" / "scores.csv"
        writer = PredictionWriter(out)
        writer.on_predict_start(trainer, None)
        writer.write_on_batch_end(trainer, None, torch.tensor([0.5, 0.25, 0.125]), None, batch, 0)
        assert not out.exists()  # nothing at the final path while batches are still coming
        if fails:
            writer.on_exception(trainer, None, RuntimeError("out of memory"))
            assert list(out.parent.iterdir()) == []
        else:
            writer.on_predict_end(trainer, None)
            assert out.read_text().splitlines() == ["index,score", "0,0.5", "1,0.25", "2,0.125"]
            assert list(out.parent.iterdir()) == [out]
