"""``fccolit sweep`` driven as a user drives it: the ``fccolit`` command in a new process, in a new folder, on a config
that trains in a fraction of a second (6 steps of a linear model on 600 generated rows, validated at steps 3 and 6).

One study is built in stages (:func:`staged`): 2 trials with 2 jobs; then ``--trials 4``, killed (SIGKILL to its
process group) while trial 3 runs; then ``--trials 4`` again. The tests read what each stage left: the tables, the
study database, the runs' metric histories and ``best.yaml``, which ``fccolit fit`` then runs."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from builders import SWEEP_CONFIG

EXE = Path(sys.executable).with_name("fccolit")
CONFIG = SWEEP_CONFIG
SPACE = """\
model.init_args.optimizer.init_args.lr: {type: float, low: 1e-3, high: 1.0, log: true}
model.init_args.ema_weight: {type: categorical, choices: [0.1, 0.5, 0.9]}
data.init_args.batch_size: {type: int, low: 16, high: 64, step: 16}
"""
LR, EMA, BATCH = "model.init_args.optimizer.init_args.lr", "model.init_args.ema_weight", "data.init_args.batch_size"
SEEDS = ["100", "101"]
STUDY = ["--config", "tiny.yaml", "--space", "space.yaml", "--metric", "val/ap", "--direction", "maximize",
         "--seeds", *SEEDS, "--study-dir", "study"]


def fccolit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *args], cwd=cwd, capture_output=True, text=True, timeout=400)


def rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "study" / "trials.csv").open() as file:
        return list(csv.DictReader(file))


def complete(table: list[dict[str, str]]) -> list[dict[str, str]]:
    return [row for row in table if row["state"] == "COMPLETE"]


def wait_for(condition, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> SimpleNamespace:
    """The study's three stages (see the module docstring): their outputs and the tables each left."""
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "tiny.yaml").write_text(CONFIG)
    (folder / "space.yaml").write_text(SPACE)
    first = fccolit("sweep", *STUDY, "--trials", "2", "--jobs", "2", cwd=folder)
    assert first.returncode == 0, first.stderr[-3000:]
    after_first = rows(folder)
    first_history = folder / "study" / "trials" / "0" / "seed_100" / "history.jsonl"
    first_mtime = first_history.stat().st_mtime_ns

    # --trials 4, killed with its process group (the sweep, its fork server, the running fit) while trial 3 runs
    with (folder / "killed.out").open("w") as out:
        killed = subprocess.Popen([str(EXE), "sweep", *STUDY, "--trials", "4"], cwd=folder, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: len(complete(rows(folder))) == 3 and (folder / "study/trials/3/config.yaml").is_file())
        finally:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
    storage = f"sqlite:///{folder / 'study' / 'study.db'}"
    states_after_kill = {t.number: t.state.name for t in optuna.load_study(study_name="study", storage=storage).trials}
    third = fccolit("sweep", *STUDY, "--trials", "4", "--jobs", "2", cwd=folder)
    assert third.returncode == 0, third.stderr[-3000:]
    return SimpleNamespace(folder=folder, first=first, after_first=after_first, states_after_kill=states_after_kill,
                           third=third, final=rows(folder), first_history=first_history, first_mtime=first_mtime,
                           study=optuna.load_study(study_name="study", storage=storage))


@pytest.mark.slow
def test_sweep_writes_the_study_the_tables_and_a_runnable_best_config(staged):
    folder = staged.folder
    assert (folder / "study" / "study.db").is_file()
    progress = [line for line in staged.first.stdout.splitlines() if line.startswith("trial ")]
    assert len(progress) == 2 and all("complete): val/ap" in line for line in progress)
    assert len(complete(staged.after_first)) == 2
    for row in staged.final:
        if row["state"] != "COMPLETE":
            continue
        lr, ema, batch = float(row[LR]), float(row[EMA]), int(row[BATCH])
        assert 1e-3 <= lr <= 1.0 and ema in (0.1, 0.5, 0.9) and batch in (16, 32, 48, 64)
        # the trial's value: the mean over the seeds of the metric at each run's last validation
        for seed in SEEDS:
            history = (folder / "study" / "trials" / row["number"] / f"seed_{seed}" / "history.jsonl").read_text()
            lines = [yaml.safe_load(line) for line in history.splitlines()]
            assert [line["step"] for line in lines] == [3, 6]
            assert float(row[f"seed_{seed}"]) == pytest.approx(lines[-1]["metrics"]["val/ap"], rel=1e-12)
            # a sweep runs fit only: no test metric was ever logged
            assert not any(name.startswith("test") for line in lines for name in line["metrics"])
        assert float(row["value"]) == pytest.approx(sum(float(row[f"seed_{s}"]) for s in SEEDS) / 2, rel=1e-12)
        assert float(row["seconds"]) > 0
    assert not list((folder / "study" / "trials").rglob("*.ckpt"))  # deleted once the metric is read
    table = (folder / "study" / "trials.md").read_text()
    assert "(best)" in table and "| number | state | value | seed_100 | seed_101 |" in table

    best = max(complete(staged.final), key=lambda row: float(row["value"]))
    assert staged.study.best_trial.number == int(best["number"])
    text = (folder / "study" / "best.yaml").read_text()
    assert text.startswith(f"# fccolit sweep: tiny.yaml with trial {best['number']}'s parameters")
    config = yaml.safe_load(text)
    assert config["model"]["init_args"]["optimizer"]["init_args"]["lr"] == pytest.approx(float(best[LR]), rel=1e-12)
    assert config["model"]["init_args"]["ema_weight"] == float(best[EMA])
    assert config["data"]["init_args"]["batch_size"] == int(best[BATCH])
    assert config["data"]["init_args"]["num_samples"] == 600 and config["trainer"]["max_steps"] == 6  # the rest kept
    run = fccolit("fit", "--config", "study/best.yaml", "--trainer.max_steps", "2", cwd=folder)
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.slow
def test_a_resumed_study_runs_only_the_missing_trials(staged):
    final = staged.final
    assert len(complete(final)) == 4
    assert len(staged.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 4
    # trials 0 and 1 are the first stage's, untouched: same values, same start times, their runs not rerun
    assert final[:2] == staged.after_first
    assert staged.first_history.stat().st_mtime_ns == staged.first_mtime
    assert staged.third.stdout.startswith("fccolit sweep: study 'study' in sqlite:///")
    assert "3 of 4 trials complete" in staged.third.stdout


@pytest.mark.slow
def test_a_killed_sweep_requeues_its_running_trial_and_reaches_the_count(staged):
    assert staged.states_after_kill == {0: "COMPLETE", 1: "COMPLETE", 2: "COMPLETE", 3: "RUNNING"}
    assert "re-queued trial(s) 3, stopped while running" in staged.third.stdout
    by_number = {int(row["number"]): row for row in staged.final}
    assert sorted(by_number) == [0, 1, 2, 3, 4]
    assert by_number[3]["state"] == "FAIL" and by_number[3]["note"] == "stopped while running; re-queued as trial 4"
    assert by_number[4]["state"] == "COMPLETE" and by_number[4]["note"] == "retry of trial 3"
    assert [by_number[4][key] for key in (LR, EMA, BATCH)] == [by_number[3][key] for key in (LR, EMA, BATCH)]


@pytest.mark.slow
def test_resuming_with_other_settings_is_refused(staged):
    other = [*STUDY[:5], "val/auroc", *STUDY[6:]]
    result = fccolit("sweep", *other, "--trials", "5", cwd=staged.folder)
    assert result.returncode == 2
    assert "fccolit sweep: error: the study 'study' in sqlite:///" in result.stderr
    assert "metric: the study has 'val/ap', this command 'val/auroc'" in result.stderr


def test_a_bad_space_is_refused_naming_the_file_line_and_field(tmp_path):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    (tmp_path / "space.yaml").write_text(
        "model.init_args.ema_weight: {type: choice, choices: [0.1, 0.9]}\n"
        f"{LR}: {{type: float, low: 0.1, high: 0.01}}\n"
        f"{BATCH}:\n"
        "  type: int\n"
        "  low: 16\n"
        "  hihg: 64\n")
    result = fccolit("sweep", *STUDY, "--trials", "2", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "fccolit sweep: error: space.yaml:1: model.init_args.ema_weight: type 'choice' is not one of float, int, "
        "categorical. Did you mean 'categorical'?",
        f"fccolit sweep: error: space.yaml:2: {LR}: low (0.1) is above high (0.01)",
        f"fccolit sweep: error: space.yaml:6: {BATCH}: unknown field 'hihg' for type int. Did you mean 'high'? "
        "Its fields: high, log, low, step",
        f"fccolit sweep: error: space.yaml:3: {BATCH}: no `high` (type int needs high, low)",
    ]
    assert not (tmp_path / "study").exists()  # nothing written


@pytest.mark.slow
def test_a_space_key_the_config_does_not_have_is_refused(tmp_path):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    (tmp_path / "space.yaml").write_text(f"{LR}: {{type: float, low: 0.01, high: 0.1}}\n"
                                         "model.init_args.emma_weight: {type: float, low: 0.1, high: 0.9}\n")
    result = fccolit("sweep", *STUDY, "--trials", "2", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "fccolit sweep: error: space.yaml:2: model.init_args.emma_weight: not a key of tiny.yaml as `fccolit fit` "
        "reads it. Did you mean 'model.init_args.ema_weight'? (fccolit fit --config tiny.yaml --print_config lists "
        "its keys)"]
    assert not (tmp_path / "study" / "trials").exists()  # no trial ran


def test_test_metrics_are_refused(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    result = fccolit("sweep", *[("test/ap" if a == "val/ap" else a) for a in STUDY], "--trials", "2", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("fccolit sweep: error: --metric test/ap: a sweep selects on validation data only; give a "
                             "metric logged on validation (its name starts with 'val', e.g. val/ap)\n")


def test_without_optuna_it_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['optuna'] = None; sys.argv = ['fccolit', 'sweep', *sys.argv[1:]]; "
            "from fccolit.console import main; main()")
    result = subprocess.run([sys.executable, "-c", code, *STUDY, "--trials", "2"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("fccolit sweep: error: fccolit sweep needs Optuna, which is not installed: "
                             "pip install 'fccolit[sweep]'\n")


GRID_SPACE = """\
model.init_args.ema_weight: {type: categorical, choices: [0.1, 0.9]}
data.init_args.batch_size: {type: int, low: 16, high: 32, step: 16}
"""


@pytest.mark.slow
def test_a_grid_sweep_runs_every_point_once_and_resumes_to_the_rest(tmp_path):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    (tmp_path / "grid.yaml").write_text(GRID_SPACE)
    grid = ["--config", "tiny.yaml", "--space", "grid.yaml", "--metric", "val/ap", "--direction", "maximize",
            "--seeds", "100", "--study-dir", "study", "--sampler", "grid"]
    first = fccolit("sweep", *grid, "--trials", "3", "--jobs", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # every trial of the first part completed (a failed one would leave its point out of the grid for good)
    table = (tmp_path / "study" / "trials.md").read_text()
    assert len(complete(rows(tmp_path))) == len(rows(tmp_path)) == 3, table
    rest = fccolit("sweep", *grid, cwd=tmp_path)  # without --trials: the whole grid
    assert rest.returncode == 0, rest.stdout[-3000:] + rest.stderr[-3000:] + table
    assert "3 of 4 trials complete" in rest.stdout
    points = [(float(row[EMA]), int(row[BATCH])) for row in complete(rows(tmp_path))]
    assert sorted(points) == [(0.1, 16), (0.1, 32), (0.9, 16), (0.9, 32)]
    again = fccolit("sweep", *grid, cwd=tmp_path)  # nothing left: no trial runs
    assert again.returncode == 0 and len(rows(tmp_path)) == 4
    tpe = fccolit("sweep", *grid[:-2], "--trials", "5", cwd=tmp_path)
    assert tpe.returncode == 2 and "sampler: the study has 'grid', this command 'tpe'" in tpe.stderr


def test_a_grid_needs_finite_values_and_at_most_its_size_in_trials(tmp_path):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "grid.yaml").write_text(GRID_SPACE)
    base = ["--config", "tiny.yaml", "--metric", "val/ap", "--direction", "maximize", "--seeds", "100",
            "--study-dir", "study", "--sampler", "grid"]
    continuous = fccolit("sweep", *base, "--space", "space.yaml", cwd=tmp_path)
    assert continuous.returncode == 2
    assert continuous.stderr.splitlines() == [
        f"fccolit sweep: error: space.yaml:1: {LR}: --sampler grid needs a finite set of values: give choices (type: "
        "categorical) or a step (without log: true)"]
    too_many = fccolit("sweep", *base, "--space", "grid.yaml", "--trials", "5", cwd=tmp_path)
    assert too_many.returncode == 2
    assert "--trials 5: the grid of grid.yaml has 4 point(s); give at most 4" in too_many.stderr
    no_trials = fccolit("sweep", *base[:-2], "--space", "grid.yaml", cwd=tmp_path)
    assert no_trials.returncode == 2 and "--trials is required with --sampler tpe" in no_trials.stderr
    assert not (tmp_path / "study").exists()  # nothing written


def test_a_requeued_grid_trial_keeps_its_point():
    from fccolit.sweep import requeue

    study = optuna.create_study(sampler=optuna.samplers.GridSampler({"x": [1, 2, 3]}, seed=0))
    stopped = study.ask()
    x = stopped.suggest_categorical("x", [1, 2, 3])
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    requeue(study, study.trials[0])
    study.optimize(lambda trial: trial.suggest_categorical("x", [1, 2, 3]), n_trials=3)
    retried = study.trials[1]
    assert retried.params["x"] == x and retried.system_attrs["grid_id"] == study.trials[0].system_attrs["grid_id"]
    assert sorted(t.params["x"] for t in study.trials[1:]) == [1, 2, 3]  # every point once, the retried one included
