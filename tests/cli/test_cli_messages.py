"""What the command says: a description and --version, short class help, one-line errors before any training
(a wrong class name, a missing data folder, metrics the data cannot feed), the DataModule's summary line, the
warning when validation runs on the test split; and what every config promises for ``--ckpt_path last|best``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fccolit.cli import ConfigurationError, console, main
from fccolit.testing import write_libsvm

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QUICKSTART = str(CONFIGS / "quickstart.yaml")
SOX_AP = str(CONFIGS / "libsvm" / "sox_ap.yaml")
EXPERIMENTS = sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "trainer")


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
    (line,) = [l for l in err.splitlines() if l.startswith("fccolit: error:")]
    return line.removeprefix("fccolit: error: ")


def test_help_has_a_description_and_version(monkeypatch, capsys):
    code, out, _ = run_console(monkeypatch, capsys, "--help")
    assert code == 0 and "X-risks" in out and "--ckpt_path last" in out
    code, out, _ = run_console(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("fccolit ")


@pytest.mark.parametrize("command", [["-m", "fccolit", "--version"], ["-m", "fccolit.resources"]])
def test_version_and_the_config_list_start_without_torch(command, tmp_path):
    """``fccolit --version`` and ``python -m fccolit.resources`` import neither torch nor Lightning (they took 10-12 s
    when they did); the command's own entry point is the one ``python -m fccolit`` runs."""
    probe = ("import runpy, sys, time; start = time.perf_counter(); sys.argv = [sys.argv[0], *sys.argv[1:]]; "
             f"runpy.run_module({command[1]!r}, run_name='__main__', alter_sys=True); "
             "print('heavy:', sorted(m for m in ('torch', 'lightning', 'jsonargparse') if m in sys.modules), "
             "round(time.perf_counter() - start, 3))")
    proc = subprocess.run([sys.executable, "-c", probe, *command[2:]], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    heavy = proc.stdout.strip().splitlines()[-1]
    assert heavy.startswith("heavy: [] "), heavy
    assert float(heavy.split()[-1]) < 1.0  # measured 0.03 s on a 2-core machine


def test_class_help_lists_fccolit_models_not_every_torch_module(monkeypatch, capsys):
    code, out, _ = run_console(monkeypatch, capsys, "fit", "--model.help", "SOX")
    assert code == 0
    assert len(out.splitlines()) < 250  # 1,537 lines when every torch.nn.Module subclass was listed
    assert "fccolit.models.MLP" in out and "torch.nn.Bilinear" not in out
    assert "other classes: any subclass by its class path" in " ".join(out.split())


def test_class_help_is_plain_text_and_lists_choices_not_bases(monkeypatch, capsys):
    code, out, _ = run_console(monkeypatch, capsys, "fit", "--model.help", "SOX")
    assert code == 0
    for markup in ("``", ":class:", ":func:", ":meth:"):
        assert markup not in out, markup
    assert "(u^{t−1} in ∇f" in " ".join(out.split())  # the text itself stays
    code, out, _ = run_console(monkeypatch, capsys, "fit", "--help")
    listed = " ".join(out.split())
    assert "fccolit.SOX" in listed or "fccolit.algorithms.SOX" in listed
    for base in ("FCCOModule,", "SOXFamily", "SBCDLoop", "NonsmoothFCCOModule", "ProximalStep"):
        assert base not in listed, base


@pytest.mark.parametrize("given", ["SOXX", "fccolit.algorithms.SOXX", "mypackage.SOXX"])
def test_a_wrong_class_name_is_one_line_with_the_closest_name(given, monkeypatch, capsys):
    code, _, err = run_console(monkeypatch, capsys, "fit", "--config", QUICKSTART, "--model", given)
    assert code == 2
    line = error_line(err)
    assert line.startswith(f"--model {given}: no such class. Did you mean 'SOX'? The choices: ") and "SONG" in line
    assert "FCCOModule" not in line and "SOXFamily" not in line
    assert "usage:" not in err and "Given value" not in err


def test_a_class_in_a_module_of_the_working_folder_is_found_as_python_m_finds_it(tmp_path):
    (tmp_path / "my_algorithms.py").write_text(
        'from fccolit.algorithms import SOX\n\n\nclass MySOX(SOX):\n    """SOX under another name."""\n'
    )
    exe = Path(sys.executable).with_name("fccolit")
    proc = subprocess.run([str(exe), "fit", "--config", QUICKSTART, "--model", "my_algorithms.MySOX",
                           "--data.init_args.num_samples", "600", "--trainer.max_steps", "2"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MySOX: MLP" in proc.stderr


def test_a_missing_data_folder_is_one_line_and_the_traceback_is_behind_a_flag(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "nowhere"
    code, _, err = run_console(monkeypatch, capsys, "fit", "--config", SOX_AP, "--data.root", str(missing))
    assert code == 2 and error_line(err).startswith(f"LibSVM data set file not found: {missing / 'a9a'}")
    assert "Traceback" not in err
    monkeypatch.setenv("FCCOLIT_TRACEBACK", "0")  # restored after the test: --traceback sets it to 1
    with pytest.raises(FileNotFoundError, match="LibSVM data set file not found"):
        run_console(monkeypatch, capsys, "fit", "--config", SOX_AP, "--data.root", str(missing), "--traceback")


def test_metrics_the_data_cannot_feed_fail_before_any_step(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", QUICKSTART, "--data.init_args.num_samples", "600", "--model.init_args.metrics",
            "[ap, ndcg@10]", "--trainer.enable_progress_bar", "false"]
    code, _, err = run_console(monkeypatch, capsys, *args)
    assert code == 2
    assert error_line(err) == (
        "metric 'ndcg@10' reads the batch fields ['relevance'], which the evaluation batches of "
        "SyntheticBinaryDataModule do not have (they have ['index', 'neg_index', 'pos_index', 'x', 'y']); metrics for this data: "
        "ap, auroc, pauc_0.05_0.5"
    )
    assert not (tmp_path / "lightning_logs" / "quickstart" / "checkpoints").exists()  # no step, no checkpoint
    with pytest.raises(ConfigurationError):
        main(args)


def test_each_datamodule_prints_one_summary_line(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "data"
    root.mkdir()
    write_libsvm(root, name="a9a")
    args = ["fit", "--config", SOX_AP, "--data.root", str(root), "--trainer.max_steps", "1",
            "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false"]
    with caplog.at_level(logging.INFO):
        first = main(args)
    data = first.datamodule
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("LibSVMDataModule:")]
    sizes = [len(d) for d in (data.train_dataset, data.val_dataset, data.test_dataset)]
    positives = [int((d.fields["y"] > 0).sum()) for d in (data.train_dataset, data.val_dataset, data.test_dataset)]
    entry = Path(data.cache_dir) / data.cache_key
    assert line == (f"LibSVMDataModule: train {sizes[0]:,} rows ({positives[0]:,} positives), val {sizes[1]:,} rows "
                    f"({positives[1]:,} positives), test {sizes[2]:,} rows ({positives[2]:,} positives); "
                    f"cache miss, built {entry}")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        main(args)
    assert f"; cache hit {entry}" in next(r.getMessage() for r in caplog.records if "LibSVMDataModule:" in r.getMessage())


def _lightgbm_files(root: Path) -> None:
    """LightGBM's lambdarank example layout (rank.train / rank.test + .query files, no validation file)."""
    rng = np.random.default_rng(0)
    for split, queries in (("train", 12), ("test", 4)):
        sizes = rng.integers(4, 9, size=queries)
        rows = [f"{int(rng.integers(0, 3))} " + " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(rng.random(5)))
                for _ in range(int(sizes.sum()))]
        (root / f"rank.{split}").write_text("\n".join(rows) + "\n")
        (root / f"rank.{split}.query").write_text("\n".join(str(s) for s in sizes) + "\n")


def test_validating_on_the_test_split_warns_at_run_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _lightgbm_files(tmp_path)
    with pytest.warns(UserWarning, match="no validation split, so validation runs on the test split"):
        result = main(["validate", "--config", str(CONFIGS / "mslr" / "solc.yaml"), "--data.root", str(tmp_path),
                       "--data.init_args.num_features", "5", "--data.init_args.normalize", "standard", "--data.init_args.cache_dir", str(tmp_path / "cache"),
                       "--trainer.enable_progress_bar", "false", "--trainer.logger", "false", "--ckpt_path", "untrained"])
    assert result.datamodule.val_is_test
    assert "(the test split)" in result.datamodule.summary()


@pytest.mark.parametrize("config", EXPERIMENTS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_config_checkpoints_its_selection_metric_in_each_runs_folder(config):
    spec = yaml.safe_load(config.read_text())
    callbacks = [c for c in spec["trainer"]["callbacks"] if c["class_path"].endswith("Checkpoint")]
    assert [c["class_path"] for c in callbacks] == ["fccolit.callbacks.RunCheckpoint"], "one: last is the newest state"
    options = callbacks[0]["init_args"]
    metrics = spec["model"]["init_args"]["metrics"]
    assert options["monitor"] in {f"val/{m}" for m in metrics} and options["mode"] == "max"
    assert options["save_last"] is True and options["filename"] == "best"
    assert "dirpath" not in options  # each run's own <save_dir>/<name>/version_<k>/checkpoints: nothing shared
    assert "fccolit.callbacks.TrainingHealth" in [c["class_path"] for c in spec["trainer"]["callbacks"]]  # on by default
    assert spec["trainer"]["logger"]["init_args"]["default_hp_metric"] is False
    header = [line for line in config.read_text().splitlines() if line.startswith("#")]
    assert not any("--ckpt_path" in line and "CKPT" in line for line in header)


def test_a_run_prints_what_a_user_can_act_on_and_nothing_else(tmp_path, monkeypatch, capsys, caplog, recwarn):
    """Lightning's GPU/TPU/advertisement lines, the FLOPs-0 model table, warnings with nothing to act on (small data's
    log interval, the prediction sampler) are left out; outside a terminal a progress line per validation replaces the
    bar's carriage-return frames, and the metrics table comes last."""
    monkeypatch.chdir(tmp_path)
    small = ["--config", QUICKSTART, "--data.init_args.num_samples", "1500"]  # 14 batches: under log_every_n_steps
    with caplog.at_level(logging.INFO):
        code, out, err = run_console(monkeypatch, capsys, "fit", *small, "--trainer.max_epochs", "2")
        assert code == 0, err[-3000:]
        code, pout, perr = run_console(monkeypatch, capsys, "predict", *small, "--ckpt_path", "last")
        assert code == 0, perr[-3000:]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    text = out + err + pout + perr + logged
    for noise in ("GPU available", "TPU available", "💡", "FLOPs", "\r"):
        assert noise not in text, noise
    assert not [str(w.message) for w in recwarn if issubclass(w.category, UserWarning)]
    assert "SOX: MLP, 3,457 trainable parameters; per-index state: state 46 rows × 2" in logged
    lines = re.findall(r"^epoch (\d), step (\d+)/(\d+) \((\d+)%\), [\d.]+ s: .*val/ap [\d.]+", out, re.M)
    assert [(e, p) for e, _, _, p in lines] == [("0", "50"), ("1", "100")]
    assert out.rindex("epoch 1, step") < out.index("metric ") and out.rstrip().splitlines()[-1].startswith("TensorBoard")
    assert "predictions: lightning_logs/quickstart/version_0/predict/predictions.csv" in logged
