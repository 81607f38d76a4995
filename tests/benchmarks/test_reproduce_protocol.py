"""The reproduction suite's protocol (benchmarks/reproduce/): one verdict rule, selection seeds disjoint from the
reported seeds in every script, tuning that never runs a reported seed, one standard-deviation convention."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

REPRODUCE = Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce"
sys.path.insert(0, str(REPRODUCE))

import common  # noqa: E402
from builders import SWEEP_CONFIG  # noqa: E402

#: the scripts that produce a results file (common / collect / pauc_common / libauc_song are shared code)
SHARED = {"common", "collect", "pauc_common", "libauc_song"}
SCRIPTS = sorted(p.stem for p in REPRODUCE.glob("*.py") if p.stem not in SHARED)


def test_every_script_is_checked():
    assert {"auprc_linear", "sox_pnorm", "ranking_letor", "ranking_movielens", "pauc_range", "pauc_peer",
            "fairness_adult", "gdro"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_declares_disjoint_selection_and_reported_seeds(name):
    module = importlib.import_module(name)
    plan = getattr(module, "SEEDS", None)
    assert isinstance(plan, common.SeedPlan), f"{name}.py must declare SEEDS = common.SeedPlan(...)"
    assert not set(plan.reported) & set(plan.selection)
    assert len(plan.reported) >= 2, "a paired verdict needs at least two reported seeds"


@pytest.mark.parametrize("name", SCRIPTS + ["common", "pauc_common"])
def test_one_standard_deviation_convention(name):
    """Every std goes through common.sample_std (ddof = 1): no bare np.std / np.nanstd in the scripts."""
    text = (REPRODUCE / f"{name}.py").read_text()
    bare = [line.strip() for line in text.splitlines() if re.search(r"np\.(nan)?std\(", line)
            and "ddof=1" not in line]
    assert not bare, f"{name}.py: use common.sample_std: {bare}"


def test_seed_plans_refuse_overlap_and_take_prefixes():
    with pytest.raises(ValueError, match=r"overlap in \(1,\)"):
        common.SeedPlan(reported=(0, 1), selection=(1, 2))
    with pytest.raises(ValueError, match="needs reported and selection seeds"):
        common.SeedPlan(reported=(), selection=(100,))
    plan = common.SeedPlan(reported=(0, 1, 2, 3), selection=(100, 101))
    assert plan.take(2, 1) == common.SeedPlan(reported=(0, 1), selection=(100,))


def _record(setting, seed):
    return {"setting": setting, "seed": seed, "score": {"a": 1.0, "b": 3.0, "c": float("nan")}[setting] + seed / 1000}


def test_tuning_runs_only_selection_seeds_and_picks_the_best_mean(capsys):
    runner = common.Runner(_record, workers=1)
    plan = common.SeedPlan(reported=(0, 1, 2), selection=(100, 101))
    best, results = runner.tune(["a", "b", "c"], lambda r: r["score"], plan)
    assert best == "b"  # c is not finite on its selection seeds, b has the larger mean
    assert {seed for (_, seed) in runner.done} == {100, 101}
    assert [r["seed"] for r in results["b"]] == [100, 101]
    assert "The choice is among the complete trials." in capsys.readouterr().out  # c's failure, said


def test_tuning_where_every_setting_fails_says_so_and_raises(capsys):
    runner = common.Runner(_record, workers=1)
    with pytest.raises(RuntimeError, match="every setting of the grid failed: diverged or ruled out"):
        runner.tune(["a", "b"], lambda r: r["score"], common.SeedPlan(reported=(0,), selection=(100,)),
                    rule_out=lambda r: "constraint violated")
    assert "No setting is left to choose" in capsys.readouterr().out


def test_tuning_breaks_ties_by_the_settings_order():
    runner = common.Runner(lambda setting, seed: {"score": 1.0}, workers=1)
    best, _ = runner.tune(["z", "a"], lambda r: r["score"], common.SeedPlan(reported=(0, 1), selection=(100,)))
    assert best == "z"


def test_a_setting_ruled_out_on_a_seed_does_not_run_the_later_seeds():
    runner = common.Runner(_record, workers=1)
    plan = common.SeedPlan(reported=(0, 1), selection=(100, 101))
    best, results = runner.tune(["a", "b"], lambda r: r["score"], plan,
                                rule_out=lambda r: "constraint violated" if r["setting"] == "b" else None)
    assert best == "a"  # b scores higher but is out after its first seed
    assert [r["seed"] for r in results["b"]] == [100] and [r["seed"] for r in results["a"]] == [100, 101]
    assert ("b", 101) not in runner.done


def test_tuning_is_a_sweep_study_that_a_rerun_resumes(tmp_path):
    """Runner.tune runs the engine of `fccolit sweep`: with a cache, an Optuna study (one grid trial per setting, its
    per-seed values, the failed one) in the cache's studies folder; a rerun adds no trial and runs nothing."""
    import csv

    import optuna

    plan = common.SeedPlan(reported=(0, 1), selection=(100, 101))
    best, _ = common.Runner(_record, workers=2, cache=tmp_path).tune(["a", "b", "c"], lambda r: r["score"], plan,
                                                                     metric="val_score")
    (folder,) = (tmp_path / "studies").iterdir()
    with (folder / "trials.csv").open() as file:
        rows = {row["setting"]: row for row in csv.DictReader(file)}
    assert best == "b" and set(rows) == {"'a'", "'b'", "'c'"}
    assert {k: rows[k]["state"] for k in rows} == {"'a'": "COMPLETE", "'b'": "COMPLETE", "'c'": "FAIL"}
    assert float(rows["'b'"]["seed_101"]) == pytest.approx(3.101) and float(rows["'b'"]["value"]) == pytest.approx(3.1005)
    assert "val_score" in (folder / "trials.md").read_text()
    runs = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(runs) == 6  # 3 settings x 2 selection seeds, cached

    again = common.Runner(_forbidden, workers=1, cache=tmp_path)  # every run and every trial is read back
    assert again.tune(["a", "b", "c"], lambda r: r["score"], plan, metric="val_score")[0] == "b"
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'study.db'}")
    assert len(study.trials) == 3


def _forbidden(setting, seed):
    raise AssertionError(f"{setting!r} seed {seed} ran again")


KILLED_TUNE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {reproduce!r})
import common

def run(setting, seed):
    if setting == "slow" and not Path({flag!r}).exists():
        Path({started!r}).write_text("running")
        time.sleep(600)
    return {{"score": {{"fast": 1.0, "slow": 2.0}}[setting]}}

if __name__ == "__main__":
    plan = common.SeedPlan(reported=(0, 1), selection=(100,))
    best, _ = common.Runner(run, workers=1, cache=Path({cache!r})).tune(["fast", "slow"], lambda r: r["score"], plan)
    print("best", best)
"""


@pytest.mark.slow
def test_a_killed_tuning_resumes_with_its_running_trial_requeued(tmp_path):
    """SIGKILL while a trial runs; the rerun re-queues it (same setting), finishes it and keeps the complete one."""
    import csv
    import os
    import signal
    import subprocess
    import time

    flag, started, cache = tmp_path / "let-it-finish", tmp_path / "started", tmp_path / "cache"
    script = tmp_path / "tune.py"
    script.write_text(KILLED_TUNE.format(reproduce=str(REPRODUCE), flag=str(flag), started=str(started),
                                         cache=str(cache)))
    killed = subprocess.Popen([sys.executable, str(script)], start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert killed.poll() is None and time.monotonic() < deadline, "the tuning ended or never reached the trial"
            time.sleep(0.2)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    flag.write_text("go")
    rerun = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "best 'slow'" in rerun.stdout or "best slow" in rerun.stdout
    assert "re-queued trial(s)" in rerun.stdout
    (folder,) = (cache / "studies").iterdir()
    with (folder / "trials.csv").open() as file:
        rows = list(csv.DictReader(file))
    states = sorted((row["setting"], row["state"]) for row in rows)
    assert states == [("'fast'", "COMPLETE"), ("'slow'", "COMPLETE"), ("'slow'", "FAIL")]


def test_paired_verdict_three_outcomes_and_direction():
    up = common.paired_verdict([0.80, 0.81, 0.82, 0.83, 0.84], [0.70, 0.72, 0.71, 0.75, 0.74])
    assert up.verdict == "reproduced" and up.ahead == 5 and up.low > 0
    down = common.paired_verdict([0.70, 0.72, 0.71], [0.80, 0.81, 0.82])
    assert down.verdict == "reversed" and down.high < 0 and down.behind == 3
    mixed = common.paired_verdict([0.71, 0.69, 0.72, 0.68], [0.70, 0.70, 0.70, 0.70])
    assert mixed.verdict == "not separable" and mixed.low < 0 < mixed.high
    # a loss: lower is better, so A's lower values support "A better than B"
    loss = common.paired_verdict([0.1, 0.2, 0.3], [0.2, 0.3, 0.4], higher_is_better=False)
    assert loss.verdict == "reproduced" and loss.differences == pytest.approx((0.1, 0.1, 0.1))


def test_paired_verdict_pairs_by_seed_not_by_spread():
    """A small, consistent per-seed gain inside a large seed-to-seed spread separates when paired; unpaired means
    with std bands (the old tie rule) would call it a tie."""
    base = [0.60, 0.70, 0.80, 0.65, 0.75]
    better = [b + 0.002 for b in base]
    assert common.paired_verdict(better, base).verdict == "reproduced"


def test_paired_verdict_rejects_unpaired_input():
    with pytest.raises(ValueError, match="one value per seed on both sides"):
        common.paired_verdict([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least two seeds"):
        common.paired_verdict([1.0], [0.0])


def test_verdict_table_quotes_the_rule():
    lines = common.verdict_table([("A > B", common.paired_verdict([2.0, 3.0], [1.0, 1.5]))], "AP")
    assert lines[2].startswith("| A > B | +1.2500 |") and lines[-1] == common.VERDICT_RULE


def test_readme_headline_table_is_the_generated_one():
    """README's reproduction rows are written by collect.py from results/*.headlines.json, never typed by hand."""
    import collect

    text = collect.README.read_text()
    assert collect.BEGIN in text and collect.END in text
    assert collect.readme_with_headlines(text) == text, "run `python benchmarks/reproduce/collect.py`"


def test_headline_rows_need_every_column(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    with pytest.raises(ValueError, match="needs exactly the keys"):
        common.write_headlines("x", [{"claim": "c"}])
    row = dict.fromkeys(common.HEADLINE_COLUMNS, "v")
    assert common.write_headlines("x", [row]).read_text().count('"v"') == len(common.HEADLINE_COLUMNS)


@pytest.mark.slow
def test_config_sweeps_run_the_fccolit_sweep_command_on_selection_seeds_only(tmp_path):
    """common.config_sweep (how a script chooses a config's knobs) is `fccolit sweep --sampler grid` over the plan's
    selection seeds: every grid point once, a column per selection seed and none for a reported seed."""
    (tmp_path / "tiny.yaml").write_text(SWEEP_CONFIG)
    (tmp_path / "space.yaml").write_text("model.init_args.ema_weight: {type: categorical, choices: [0.1, 0.9]}\n")
    plan = common.SeedPlan(reported=(0, 1), selection=(100,))
    rows = common.config_sweep(tmp_path / "tiny.yaml", tmp_path / "space.yaml", plan, tmp_path / "study", "val/ap",
                               ["--data.init_args.num_samples", "300"])
    assert sorted(float(row["model.init_args.ema_weight"]) for row in rows) == [0.1, 0.9]
    assert all(row["state"] == "COMPLETE" and float(row["value"]) == float(row["seed_100"]) for row in rows)
    assert not any(key.startswith("seed_") and key != "seed_100" for key in rows[0])
    config = (tmp_path / "study" / "trials" / "0" / "config.yaml").read_text()
    assert "num_samples: 300" in config  # the fit arguments reached every run


def test_the_movielens_budget_rule_is_chosen_by_fccolit_sweep():
    """ranking_movielens.py's fine-tuning lr goes through common.config_sweep on its SEEDS' selection seeds (no
    hand-written grid loop), over a space file that fccolit sweep reads as a grid."""
    from fccolit.sweep import grid_space, read_space

    module = importlib.import_module("ranking_movielens")
    text = (REPRODUCE / "ranking_movielens.py").read_text()
    call = text.split("C.config_sweep(")[1].split("jobs=")[0]
    assert "LR_SPACE, plan," in " ".join(call.split())  # the SeedPlan, whose selection seeds are the only ones run
    grid = grid_space(read_space(module.LR_SPACE), str(module.LR_SPACE))
    assert list(grid) == [module.LR_KEY] and 4e-4 in grid[module.LR_KEY]  # the configs' own lr is on the grid
