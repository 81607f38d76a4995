"""Scenarios along the user's path: the ``fccolit`` command in new processes, over one small config of every family.

Each family's config runs as its header says (``fccolit fit --config ...``), on generated data in the real file
format, with a small budget (30 steps, validation every 3: ``last.ckpt`` is written every 3 steps and at every
epoch's end). For each family:

* an uninterrupted run is the reference; its ``last.ckpt`` is the final step's state (step 30), whatever step was
  the best;
* an interrupted trajectory reaches the same final weights, per-index state and optimizer state, bit for bit: a stop
  at ``max_steps`` in the middle of an epoch, then ``--ckpt_path last`` killed with SIGKILL at a random step, then
  ``--ckpt_path last`` stopped by SIGTERM (exit status 143), then ``--ckpt_path last`` to the end;
* ``test --ckpt_path last`` works in a new process (for the scheduled config too), and (for the AP and Hugging Face
  configs) ``validate`` / ``predict`` with ``best`` from another working folder (``--trainer.default_root_dir``);

and two runs of one config started at the same moment keep their own folders and checkpoints.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from builders import generator_for, model_overrides

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
FCCOLIT = str(Path(sys.executable).with_name("fccolit"))

#: one config of every family: the AP family with its η/√t schedule, SONG after its SOLC warm-up, PAUCRange's double
#: loop, ALEXR2's constrained learning, and a Hugging Face table
FAMILIES = {
    "ap_schedule": "libsvm/adap.yaml",
    "song_warmup": "synthetic/song.yaml",
    "pauc_double_loop": "libsvm/pauc_agd.yaml",
    "alexr2": "adult/alexr2_fairness.yaml",
    "hf_table": "hf/sox_binary.yaml",
}
STEPS = 30
BUDGET = ["--trainer.max_steps", str(STEPS), "--trainer.val_check_interval", "3", "--trainer.check_val_every_n_epoch",
          "null", "--trainer.enable_progress_bar", "false"]
TIMEOUT = 600


class Project:
    """A user's folder: generated data under ``data/`` and the runs of one config under ``lightning_logs/``."""

    def __init__(self, folder: Path, config: str, data_args: list[str] | None = None) -> None:
        self.folder, self.config = folder, CONFIGS / config
        spec = yaml.safe_load(self.config.read_text())
        self.name = spec["trainer"]["logger"]["init_args"]["name"]
        if data_args is None:
            data = folder / "data"
            data.mkdir(parents=True)
            data_args = generator_for(spec["data"]["class_path"])(data, spec["data"].get("init_args") or {})
            data_args += model_overrides((spec.get("model") or {}).get("init_args") or {}, data)
        self.data_args = data_args

    def moved_to(self, folder: Path) -> "Project":
        """The same config and data, run from another folder (its own runs)."""
        return Project(folder, str(self.config.relative_to(CONFIGS)), self.data_args)

    def command(self, subcommand: str, *extra: str) -> list[str]:
        return [FCCOLIT, subcommand, "--config", str(self.config), *self.data_args, *extra]

    def run(self, subcommand: str, *extra: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.command(subcommand, *extra), cwd=cwd or self.folder, capture_output=True,
                              text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, f"{subcommand} {extra}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
        return proc

    def runs(self) -> list[Path]:
        """The run folders, oldest first."""
        return sorted((self.folder / "lightning_logs" / self.name).glob("version_*"),
                      key=lambda p: int(p.name.split("_")[1]))

    def last(self, run: Path | None = None) -> Path:
        return (run or self.runs()[-1]) / "checkpoints" / "last.ckpt"


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def step_of(path: Path) -> int:
    """The global step of a checkpoint being written by another process (-1 while it is absent or half-written)."""
    try:
        return int(load(path)["global_step"])
    except Exception:  # noqa: BLE001 - not there yet, or caught mid-write: ask again
        return -1


def assert_same_training_state(expected: dict, actual: dict, what: str) -> None:
    """Weights, buffers (the per-index state; NaN marks unvisited rows) and the optimizer's state, bit for bit."""
    assert actual["global_step"] == expected["global_step"], what
    assert expected["state_dict"].keys() == actual["state_dict"].keys(), what
    for key, value in expected["state_dict"].items():
        other = actual["state_dict"][key]
        if torch.is_tensor(value):
            assert torch.equal(value.nan_to_num(-7.0), other.nan_to_num(-7.0)), f"{what}: {key}"
        else:  # a module's extra state (a double loop's position)
            assert value == other, f"{what}: {key}"
    for a, b in zip(expected["optimizer_states"], actual["optimizer_states"], strict=True):
        assert a["param_groups"] == b["param_groups"], what
        for index, entries in a["state"].items():
            for name, value in entries.items():
                other = b["state"][index][name]
                same = torch.equal(value, other) if torch.is_tensor(value) else value == other
                assert same, f"{what}: optimizer state {name} of parameter {index}"


def interrupt(project: Project, sig: int, after_step: int, *extra: str) -> subprocess.CompletedProcess:
    """Start ``fit`` and send ``sig`` once the run's ``last.ckpt`` holds a step >= ``after_step``."""
    before = set(project.runs())
    proc = subprocess.Popen(project.command("fit", *BUDGET, *extra), cwd=project.folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        new = [r for r in project.runs() if r not in before]
        if new and step_of(project.last(new[0])) >= after_step:
            proc.send_signal(sig)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module", params=sorted(FAMILIES), ids=str)
def reference(request, tmp_path_factory):
    """A family's project with one uninterrupted run of the budget: ``(project, its last checkpoint)``."""
    project = Project(tmp_path_factory.mktemp(request.param), FAMILIES[request.param])
    project.run("fit", *BUDGET)
    return project, load(project.last())


@pytest.mark.slow
def test_last_is_the_final_state_and_every_stop_resumes_exactly(reference, tmp_path):
    project, expected = reference
    assert expected["global_step"] == STEPS  # last.ckpt is the final step's, not the best step's
    work = project.moved_to(tmp_path)  # the same data, a fresh folder of runs
    # 1. a max_steps stop in the middle of an epoch (step 13 falls between validations and epoch ends)
    work.run("fit", *BUDGET, "--trainer.max_steps", "13")
    stopped = load(work.last())
    assert stopped["global_step"] == 13
    epoch_loop = stopped["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    if not epoch_loop["is_last_batch"]:  # recorded as the middle of an epoch, so a resumed run finishes it
        assert stopped["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == stopped["epoch"]
    # 2. resumed, then killed with SIGKILL at a random step after the next checkpoint
    rng = random.Random(project.name)
    killed = interrupt(work, signal.SIGKILL, rng.randint(14, 17), "--ckpt_path", "last")
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    resumed_from = step_of(work.last())
    # 3. resumed, then stopped by SIGTERM: exit status 143 and a last.ckpt written after the step it stopped at
    termed = interrupt(work, signal.SIGTERM, resumed_from + 1, "--ckpt_path", "last")
    assert termed.returncode == 143, termed.stderr[-3000:]
    assert "stopped by SIGTERM" in termed.stderr
    assert resumed_from < step_of(work.last()) < STEPS
    # 4. resumed to the end: the uninterrupted run's state, bit for bit
    work.run("fit", *BUDGET, "--ckpt_path", "last")
    assert_same_training_state(expected, load(work.last()), f"{project.name}: interrupted trajectory")
    assert len(work.runs()) == 4  # one folder per run, nothing overwritten


@pytest.mark.slow
def test_evaluation_commands_find_the_checkpoints_in_new_processes(reference, tmp_path):
    project, _ = reference
    tested = project.run("test", "--ckpt_path", "last")
    assert "test/" in tested.stdout and "--ckpt_path last:" in tested.stderr + tested.stdout
    if project.name not in ("libsvm_adap", "hf_sox_binary"):
        return  # the rest of the path is the same for every family: two of them keep the suite's time down
    elsewhere = tmp_path / "elsewhere"  # another working folder: the runs are found through default_root_dir
    elsewhere.mkdir()
    validated = project.run("validate", "--ckpt_path", "best", "--trainer.default_root_dir", str(project.folder),
                            cwd=elsewhere)
    assert "val/" in validated.stdout
    project.run("predict", "--ckpt_path", "best", "--trainer.default_root_dir", str(project.folder), cwd=elsewhere)
    run = project.runs()[0]  # the evaluations log into the evaluated run's folder, no new run folder
    assert [r.name for r in project.runs()] == ["version_0"]
    assert (run / "predict" / "predictions.csv").is_file() and (run / "test" / "config.yaml").is_file()
    assert not list(elsewhere.iterdir())


@pytest.mark.slow
def test_two_runs_of_one_config_at_once_keep_their_own_checkpoints(tmp_path):
    project = Project(tmp_path, "quickstart.yaml")
    small = ["--data.init_args.num_samples", "2000", "--trainer.max_steps", "6", "--trainer.enable_progress_bar",
             "false"]
    procs = [subprocess.Popen(project.command("fit", *small, "--seed_everything", str(seed)), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for proc in procs:
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err[-3000:]
    runs = project.runs()
    assert [r.name for r in runs] == ["version_0", "version_1"]
    seeds = sorted(yaml.safe_load((r / "config.yaml").read_text())["seed_everything"] for r in runs)
    assert seeds == [1, 2]
    for run in runs:  # each folder's checkpoint is its own run's (the run seed is kept in the checkpoint)
        seed = yaml.safe_load((run / "config.yaml").read_text())["seed_everything"]
        assert load(project.last(run))["fccolit_resume"]["random_draw_seed"] == seed
