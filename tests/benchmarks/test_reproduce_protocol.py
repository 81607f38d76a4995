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


def test_tuning_runs_only_selection_seeds_and_picks_the_best_mean():
    runner = common.Runner(_record, workers=1)
    plan = common.SeedPlan(reported=(0, 1, 2), selection=(100, 101))
    best, results = runner.tune(["a", "b", "c"], lambda r: r["score"], plan)
    assert best == "b"  # c is not finite on its selection seeds, b has the larger mean
    assert {seed for (_, seed) in runner.done} == {100, 101}
    assert [r["seed"] for r in results["b"]] == [100, 101]


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
