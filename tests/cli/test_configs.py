"""Every config in configs/ runs: a smoke run of ``fccolit fit`` then ``fccolit test`` on generated data.

The configs are found by globbing the folder, so a new config is tested without touching this file; its data
comes from the generator registered for its DataModule in ``tests/builders.py`` (a DataModule without one fails
with a message saying where to register it). ``configs/trainer/*.yaml`` are trainer fragments: each runs composed
after ``configs/quickstart.yaml`` (a DDP fragment on two CPU processes, through the console script).

Beyond "it runs": the module is the config's class, two optimizer steps were taken with finite parameters, the
per-index state was written and has one row per outer index, the config's metrics reach ``val/`` and ``test/``,
and the few promises a config header makes (weight decay, schedules, constraint tags) hold.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import yaml

from fccolit.callbacks.schedules import InverseSqrtSchedule
from fccolit.cli import main
from fccolit.state import IndexedState

from builders import generator_for, import_class, model_overrides

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QUICKSTART = CONFIGS / "quickstart.yaml"
EXPERIMENTS = sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent != CONFIGS / "trainer")
TRAINER_FRAGMENTS = sorted((CONFIGS / "trainer").glob("*.yaml"))
STEPS = 2  # two optimizer steps: the second reads the state the first wrote


def name_of(path: Path) -> str:
    return str(path.relative_to(CONFIGS))


FAST_DEV_RUN = ["--trainer.fast_dev_run", str(STEPS)]


def smoke_args(subcommand: str, configs: list[Path], tmp_path: Path, *overrides: str, run=FAST_DEV_RUN) -> list[str]:
    args = [subcommand]
    for config in configs:
        args += ["--config", str(config)]
    return [*args, *run, "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path),
            "--trainer.enable_progress_bar", "false", *overrides]


def warmup_callback(spec: dict[str, Any]) -> dict[str, Any] | None:
    callbacks = (spec.get("trainer") or {}).get("callbacks") or []
    return next((c for c in callbacks if str(c.get("class_path", "")).endswith(".WarmUp")), None)


def with_short_warmup(config: Path, spec: dict[str, Any], tmp_path: Path) -> tuple[Path, list[str]]:
    """A config with a warm-up stage (WarmUp callback) runs one warm-up epoch and one epoch of its own algorithm,
    one batch each, so both stages and the switch between them run: a copy of the config with ``epochs: 1``."""
    warmup_callback(spec).setdefault("init_args", {})["epochs"] = 1
    copy = tmp_path / f"short_warmup_{config.name}"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    # one batch per epoch from the data too: jsonargparse resolves Trainer's ``int | float`` limits by trying the
    # types in turn, and in a process where other tests ran first it has read "1" as 1.0 (a whole epoch)
    return copy, ["--trainer.max_epochs", str(STEPS), "--data.init_args.num_batches", "1", "--trainer.limit_train_batches", "1",
                  "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
                  "--trainer.num_sanity_val_steps", "0"]


def prepare(config: Path, tmp_path: Path, monkeypatch) -> tuple[dict[str, Any], list[str]]:
    """The config as YAML and the overrides pointing it at freshly generated data under ``tmp_path``."""
    spec = yaml.safe_load(config.read_text())
    data = spec.get("data") or {}
    assert "class_path" in data, f"{name_of(config)}: no data.class_path: the smoke test cannot choose its data"
    generate = generator_for(data["class_path"])
    root = tmp_path / "data"
    root.mkdir()
    overrides = generate(root, data.get("init_args") or {})
    overrides += model_overrides((spec.get("model") or {}).get("init_args") or {}, root)
    monkeypatch.chdir(tmp_path)  # the configs' TensorBoard loggers write under ./lightning_logs
    return spec, overrides


def check_trained(result, spec: dict[str, Any]) -> None:
    model, trainer, data = result.model, result.trainer, result.datamodule
    assert type(model) is import_class(spec["model"]["class_path"])
    assert type(data) is import_class(spec["data"]["class_path"])
    assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == STEPS
    assert all(torch.isfinite(p).all() for p in model.parameters())
    states = [m for m in model.modules() if isinstance(m, IndexedState)]
    assert not states or any(bool(s.visited().any()) for s in states), "no row of the per-index state was written"
    assert dict(model.data_sizes) == dict(data.sizes)  # the DataModule's sizes reached the model (link_arguments)
    objective = getattr(model, "objective", None)
    if isinstance(getattr(model, "state", None), IndexedState) and hasattr(objective, "num_rows"):
        assert model.state.num_rows == objective.num_rows(data.sizes)  # one row per outer index
    metrics = trainer.callback_metrics
    trained = {k: v for k, v in metrics.items() if k.split("/")[0] in ("train", "warmup")}
    assert trained and all(torch.isfinite(torch.as_tensor(v)).all() for v in trained.values()), sorted(metrics)
    assert {f"val/{m}" for m in model.metric_names} <= set(metrics), sorted(metrics)


# ------------------------------------------------------------------- what some configs promise beyond running
def _auprc_protocol(result) -> None:
    """The linear AUPRC protocol of Wang et al. (AISTATS 2022): λ‖w‖² with λ = 1e-4 and batches of 20 (the headers
    of libsvm/*.yaml)."""
    assert result.trainer.optimizers[0].param_groups[0]["weight_decay"] == pytest.approx(2e-4)
    assert result.datamodule.batch_size == 20


def _inverse_sqrt(result) -> None:
    _auprc_protocol(result)
    schedule = next(c for c in result.trainer.callbacks if isinstance(c, InverseSqrtSchedule))
    lr = result.trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(schedule.initial["lr"][0][0] / math.sqrt(STEPS))  # η_t = η/√t ran


def _pauc(result) -> None:
    model = result.model
    assert model.loop["grad_evals"] == STEPS * result.datamodule.batch_size  # one gradient per sample and step
    assert {"val_anchor/pauc_0.05_0.5", "val/pauc_0.05_0.5"} <= set(result.trainer.callback_metrics)
    assert bool(model.lambda_m.state.visited().any())
    assert model.num_parameters == sum(p.numel() for p in model.model.parameters() if p.requires_grad)


def _fairness(result) -> None:
    assert result.model.state.num_rows == 14  # one row per constraint
    assert int(result.model.inner_step) == STEPS  # two inner steps of ALEXR2's first loop (K = 5)
    assert {"val/max_violation", "val/num_violated", "train/max_violation", "val/constraint_13"} <= set(result.trainer.callback_metrics)


def _gdro(result) -> None:
    assert float(result.model.objective.threshold.detach()) != 0.0  # the CVaR threshold s trains with the model
    assert int(result.model.state.visited().sum()) == STEPS * 8  # B1 = 8 distinct groups per batch


EXTRA_CHECKS: dict[str, Callable] = {
    "libsvm/soap.yaml": _auprc_protocol,
    "libsvm/moap_v1.yaml": _auprc_protocol,
    "libsvm/moap_v2.yaml": _inverse_sqrt,
    "libsvm/adap.yaml": _inverse_sqrt,
    "libsvm/pauc_agd.yaml": _pauc,
    "libsvm/sorr.yaml": _pauc,
    "cifar_lt/pauc_agd.yaml": _pauc,
    "chexpert/pauc_agd.yaml": _pauc,
    "adult/alexr2_fairness.yaml": _fairness,
    "compas/alexr2_fairness.yaml": _fairness,
    "synthetic/gdro_sonex.yaml": _gdro,
}


@pytest.mark.parametrize("config", EXPERIMENTS, ids=name_of)
def test_config_fits_and_tests_on_generated_data(config, tmp_path, monkeypatch):
    spec, overrides = prepare(config, tmp_path, monkeypatch)
    path, run = config, FAST_DEV_RUN
    if warmup_callback(spec) is not None:
        path, run = with_short_warmup(config, spec, tmp_path)
    result = main(smoke_args("fit", [path], tmp_path, *overrides, run=run))
    check_trained(result, spec)
    if warmup_callback(spec) is not None:
        warmup = next(c for c in result.trainer.callbacks if type(c).__name__ == "WarmUp")
        assert warmup.switched  # the warm-up epoch ran, then the config's own algorithm
    EXTRA_CHECKS.get(name_of(config), lambda result: None)(result)
    # fast_dev_run writes no checkpoint: the test path of the config runs on the model as built (the scenario suite,
    # test_scenarios.py, tests trained checkpoints with --ckpt_path last / best)
    tested = main(smoke_args("test", [path], tmp_path, *overrides, "--ckpt_path", "untrained", run=run))
    assert {f"test/{m}" for m in tested.model.metric_names} <= set(tested.trainer.callback_metrics)


# The variants a config header documents as extra arguments.
VARIANTS = {
    "soap_adam": ("libsvm/soap.yaml", ["--model.init_args.mode", "adam", "--model.init_args.optimizer",
                                       "fccolit.optim.AdaptiveMomentum", "--model.init_args.optimizer.lr", "0.01",
                                       "--model.init_args.optimizer.bias_correction", "true",
                                       "--model.init_args.optimizer.weight_decay", "0.0002"]),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_documented_config_variants_run(variant, tmp_path, monkeypatch):
    from fccolit.optim import AdaptiveMomentum

    name, extra = VARIANTS[variant]
    spec, overrides = prepare(CONFIGS / name, tmp_path, monkeypatch)
    result = main(smoke_args("fit", [CONFIGS / name], tmp_path, *overrides, *extra))
    check_trained(result, spec)
    assert result.model.mode == "adam" and isinstance(result.trainer.optimizers[0], AdaptiveMomentum)
    _auprc_protocol(result)


def test_every_experiment_config_is_collected():
    assert len(EXPERIMENTS) >= 25 and QUICKSTART in EXPERIMENTS
    assert {p.parent.name for p in EXPERIMENTS} >= {"libsvm", "movielens", "mslr", "netflix", "synthetic", "cifar_lt", "chexpert"}


def test_a_datamodule_without_a_generator_fails_saying_where_to_register_one():
    with pytest.raises(AssertionError, match=r"register one in DATA_GENERATORS in tests/builders\.py"):
        generator_for("fccolit.datamodules.base.FCCODataModule")


# ------------------------------------------------------------------------------------------ trainer fragments
def is_ddp(fragment: Path) -> bool:
    strategy = (yaml.safe_load(fragment.read_text()).get("trainer") or {}).get("strategy")
    return "DDP" in str(strategy)


@pytest.mark.parametrize("fragment", TRAINER_FRAGMENTS, ids=name_of)
def test_trainer_fragment_composes_with_the_quickstart(fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if not is_ddp(fragment):
        spec = yaml.safe_load(QUICKSTART.read_text())
        result = main(smoke_args("fit", [QUICKSTART, fragment], tmp_path))
        check_trained(result, spec)
        named = [c["class_path"] for c in yaml.safe_load(fragment.read_text())["trainer"].get("callbacks", [])]
        present = {type(c) for c in result.trainer.callbacks}
        assert all(import_class(c) in present for c in named), named  # the fragment's callbacks were added
        return
    # DDP: two CPU processes through the console script (Lightning re-launches the command for rank 1)
    exe = Path(sys.executable).with_name("fccolit")
    cmd = [str(exe), "fit", "--config", str(QUICKSTART), "--config", str(fragment), "--trainer.accelerator", "cpu",
           "--trainer.max_steps", "4", "--trainer.limit_val_batches", "2", "--trainer.val_check_interval", "2",
           "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path),
           "--trainer.logger.init_args.save_dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "MEMBER: 2/2" in proc.stderr + proc.stdout
    assert "val/ap" in proc.stdout
