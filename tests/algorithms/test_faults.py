"""Fault injection for the training loop (issue 16): what a hostile or unlucky user does to a run.

* exact resume with random draws: dropout and image augmentation give the same run after a resume from a checkpoint
  written mid-epoch, in 1 and 2 processes, and after ``kill -9`` at a random step or during a checkpoint write;
* a diverging learning rate stops every algorithm family with a FloatingPointError before a non-finite step, and no
  non-finite checkpoint is ever written;
* ``train/objective_epoch`` covers the whole epoch after a mid-epoch resume;
* changed hyper-parameters on resume are applied and printed (optimizer settings refused), never dropped silently;
* a truncated, empty or corrupted checkpoint, a zero batch size and misspelled top-level keys are named errors.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import DDP_SCRIPTS
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from fccolit.algorithms import SOX, Supervised
from fccolit.checkpoints import check_checkpoint_file
from fccolit.cli import main
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.datasets.images import ImageArrayDataset
from fccolit.models import MLP
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.optim import Momentum
from fccolit.samplers import DualSampler, SampledBatch
from fccolit.testing import cifar_arrays, write_cifar

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
RANDOM_SCRIPT = DDP_SCRIPTS / "ddp_run_random.py"


# ---------------------------------------------------------------------------------------------- in-process runs
def small_data(**overrides) -> SyntheticBinaryDataModule:
    """400 samples, training batches of 16 (4 positives)."""
    kwargs = dict(num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0,
                  eval_batch_size=64)
    return SyntheticBinaryDataModule(**{**kwargs, **overrides})


def sox_with_dropout(data: SyntheticBinaryDataModule, lr: float = 0.5) -> SOX:
    seed_everything(0)
    return SOX(MLP(hidden=[16, 8], dropout=0.3), AveragePrecisionSurrogate(margin=0.5),
               optimizer=lambda p: Momentum(p, lr=lr, momentum_weight=0.2), ema_weight=0.3, data_sizes=data.sizes,
               metrics=["ap"])


def fit(model, data, root: Path, resume: Path | None = None, every: int = 0, **trainer_args) -> Trainer:
    callbacks = [ModelCheckpoint(dirpath=root, filename="{step}", every_n_train_steps=every, save_top_k=-1,
                                 save_last=True)] if every else []
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=bool(every), callbacks=callbacks,
                      num_sanity_val_steps=0, limit_val_batches=0, use_distributed_sampler=False,
                      default_root_dir=root, **trainer_args)
    trainer.fit(model, datamodule=data, ckpt_path=resume)
    return trainer


def assert_same_tensors(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if torch.is_tensor(a[k]) and a[k].is_floating_point():
            assert torch.equal(a[k].nan_to_num(-123.0), b[k].nan_to_num(-123.0)), k


def test_training_batches_carry_keys_and_augmentation_does_not_depend_on_the_split_or_the_global_generator():
    labels = torch.tensor([1, 0, 0, 0] * 8)
    whole = next(iter(DualSampler(labels, 8, 2, seed=3, rank=0, world_size=1)))
    halves = [next(iter(DualSampler(labels, 8, 2, seed=3, rank=r, world_size=2))) for r in range(2)]
    assert isinstance(whole, SampledBatch) and whole.positions == list(range(8))
    assert halves[0].positions == [0, 2, 4, 6] and halves[1].seed == whole.seed
    images = np.random.default_rng(0).integers(0, 256, (32, 8, 8, 3), dtype=np.uint8)
    data = ImageArrayDataset(images, np.arange(32), {"y": labels}, augment=True, padding=2)
    torch.manual_seed(1)
    one = data.__getitems__(whole)["x"]
    torch.manual_seed(2)  # another global generator state
    again = data.__getitems__(whole)["x"]
    split = [data.__getitems__(h)["x"] for h in halves]
    assert torch.equal(one, again)
    assert torch.equal(one[0::2], split[0]) and torch.equal(one[1::2], split[1])
    other = SampledBatch(list(whole), seed=whole.seed + 1, positions=whole.positions)
    assert not torch.equal(one, data.__getitems__(other)["x"])  # another batch seed, other crops and flips
    plain = ImageArrayDataset(images, np.arange(32), {"y": labels}, augment=False)
    assert not torch.equal(one, plain.__getitems__(list(whole))["x"])  # it did augment


def random_image(path: Path) -> torch.Tensor:
    """A ``load`` whose result is all augmentation: drawn from torch's global generator (as torchvision's are)."""
    return torch.randint(0, 256, (3, 4, 4), dtype=torch.uint8)


def test_file_images_and_multilabel_pairs_draw_their_augmentation_from_the_batch_keys(tmp_path):
    from fccolit.datasets.images import ImageFileDataset
    from fccolit.samplers import MultiLabelPairDataset

    labels = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1]])
    files = ImageFileDataset(tmp_path, [f"{i}.jpg" for i in range(6)], {"y": labels}, load=random_image)
    batch = SampledBatch([4, 1, 3], seed=9, positions=[0, 1, 2])
    torch.manual_seed(0)
    first = files.__getitems__(batch)["x"]
    torch.manual_seed(1)
    assert torch.equal(first, files.__getitems__(batch)["x"])
    assert torch.equal(first[1:2], files.__getitems__(SampledBatch([1], seed=9, positions=[1]))["x"])  # per position
    assert not torch.equal(first, files.__getitems__(SampledBatch([4, 1, 3], seed=10, positions=[0, 1, 2]))["x"])
    state = torch.get_rng_state()
    files.__getitems__(batch)
    assert torch.equal(state, torch.get_rng_state())  # the global generator is left as it was
    pairs = MultiLabelPairDataset(files, labels)
    keyed = SampledBatch([0 * 6 + 4, 1 * 6 + 4, 1 * 6 + 1], seed=9, positions=[0, 1, 2])  # sample 4 under two tasks
    torch.manual_seed(2)
    x = pairs.__getitems__(keyed)["x"]
    torch.manual_seed(3)
    assert torch.equal(x, pairs.__getitems__(keyed)["x"]) and torch.equal(x[0], x[1])


def test_resume_mid_epoch_with_dropout_is_exact_and_the_epoch_objective_covers_the_whole_epoch(tmp_path):
    data = small_data()
    full = fit(sox_with_dropout(data), data, tmp_path / "full", every=7, max_epochs=1)
    data = small_data()
    resumed_model = sox_with_dropout(data)
    resumed = fit(resumed_model, data, tmp_path / "resumed", resume=tmp_path / "full" / "step=7.ckpt", max_epochs=1)
    assert full.global_step == resumed.global_step == len(data.train_dataloader()) > 7  # one whole epoch
    assert_same_tensors(full.lightning_module.state_dict(), resumed_model.state_dict())
    # the epoch's mean of f_i(u_i) is over all its steps, not over those after the resume
    assert float(full.callback_metrics["train/objective_epoch"]) == float(resumed.callback_metrics["train/objective_epoch"])


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault_cifar")
    write_cifar(root, *cifar_arrays(12, 10, 2, seed=3))
    sys.path.insert(0, str(RANDOM_SCRIPT.parent))
    from ddp_run_random import build_data

    build_data(str(root))  # fills the cache before several processes read it
    return root


def random_run(out: Path, devices: int, cifar: Path, *extra: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(RANDOM_SCRIPT), "--data", str(cifar), "--devices", str(devices), "--max-steps", "24",
           "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)]


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("devices, workers", [(1, 0), (2, 1)])
def test_resume_with_dropout_and_augmentation_is_bit_exact(cifar_root, tmp_path, devices, workers):
    """SOX with a dropout scorer on augmented CIFAR images (17 batches an epoch), stopped at step 10 and resumed to
    step 24 (across the epoch boundary): weights, state, optimizer and every batch's augmented pixels as
    uninterrupted, on every rank, and the same ``train/objective_epoch`` of epoch 0; with DataLoader workers in the
    2-process case."""
    full = random_run(tmp_path / "full", devices, cifar_root, "--save-every", "10", "--workers", str(workers))
    resumed = random_run(tmp_path / "resumed", devices, cifar_root, "--resume", str(tmp_path / "full" / "step=10.ckpt"),
                         "--workers", str(workers))
    for r in range(devices):
        assert full[r]["step"] == resumed[r]["step"] == 24
        assert_same_tensors(full[r]["module"], resumed[r]["module"])
        assert_same_tensors(full[r]["optimizer"]["state"][0], resumed[r]["optimizer"]["state"][0])
        assert sorted(resumed[r]["pixels"]) == list(range(10, 24))
        for step, total in resumed[r]["pixels"].items():
            assert full[r]["pixels"][step] == total, (r, step)
        # epoch 0 ended at step 17: its mean covers every rank's rows of all 17 steps, the 10 before the resume too
        assert full[r]["objective_epoch"] == resumed[r]["objective_epoch"]
    if devices == 2:  # the ranks' halves of a global batch are augmented as in one process
        single = random_run(tmp_path / "single", 1, cifar_root)
        for step, total in single[0]["pixels"].items():
            assert full[0]["pixels"][step] + full[1]["pixels"][step] == pytest.approx(total, rel=1e-12), step


# ---------------------------------------------------------------------------------------------- kill -9
FAULT_CONFIG = """
seed_everything: 0
trainer:
  accelerator: cpu
  devices: 1
  max_steps: 30
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
  num_sanity_val_steps: 0
  limit_val_batches: 0
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {dirpath: CKPT_DIR, every_n_train_steps: 1, save_last: true, save_top_k: 0}
model:
  class_path: fccolit.algorithms.SOX
  init_args:
    model: {class_path: fccolit.models.MLP, init_args: {hidden: [32, 16], dropout: 0.2}}
    objective: {class_path: fccolit.objectives.AveragePrecisionSurrogate, init_args: {margin: 0.5}}
    ema_weight: 0.1
    optimizer: {class_path: fccolit.optim.Momentum, init_args: {lr: 0.5, momentum_weight: 0.1}}
    metrics: [ap]
data:
  class_path: fccolit.datamodules.SyntheticBinaryDataModule
  init_args: {num_samples: 1500, num_features: 10, pos_fraction: 0.1, batch_size: 32, num_positives: 8}
"""

# Run the CLI with a fault: SIGKILL itself half way through writing the `kill_at`-th checkpoint file to disk.
KILL_DURING_WRITE = """
import os, signal, sys
import fsspec.implementations.local as local
kill_at, writes = int(os.environ["FCCOLIT_KILL_AT_WRITE"]), [0]
original = local.LocalFileOpener.write
def write(self, data):
    writes[0] += 1
    if writes[0] == kill_at:
        original(self, data[: len(data) // 2]); self.flush(); os.fsync(self.fileno()); os.kill(os.getpid(), signal.SIGKILL)
    return original(self, data)
local.LocalFileOpener.write = write
from fccolit.cli import console
sys.argv = ["fccolit"] + sys.argv[1:]
console()
"""


def fault_config(tmp_path: Path, name: str) -> tuple[Path, Path]:
    ckpt_dir = tmp_path / name / "checkpoints"
    ckpt_dir.mkdir(parents=True)
    config = tmp_path / name / "run.yaml"
    config.write_text(FAULT_CONFIG.replace("CKPT_DIR", str(ckpt_dir)))
    return config, ckpt_dir


def cli_command(config: Path, *extra: str, script: str | None = None) -> list[str]:
    start = [sys.executable, "-c", script] if script else [sys.executable, "-m", "fccolit.cli"]
    return [*start, "fit", "--config", str(config), *extra]


def final_state(ckpt_dir: Path) -> dict:
    checkpoint = torch.load(ckpt_dir / "last.ckpt", weights_only=False, map_location="cpu")
    assert checkpoint["global_step"] == 30
    return {**checkpoint["state_dict"], **{f"opt.{k}": v["momentum_buffer"] for k, v in
                                           checkpoint["optimizer_states"][0]["state"].items()}}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    config, ckpt_dir = fault_config(tmp_path_factory.mktemp("uninterrupted"), "run")
    proc = subprocess.run(cli_command(config), capture_output=True, text=True, timeout=300, cwd=config.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return final_state(ckpt_dir)


def resume_and_compare(config: Path, ckpt_dir: Path, uninterrupted: dict) -> None:
    last = ckpt_dir / "last.ckpt"
    check_checkpoint_file(last)  # what the kill left visible is a complete checkpoint
    proc = subprocess.run(cli_command(config, "--ckpt_path", str(last)), capture_output=True, text=True, timeout=300,
                          cwd=config.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_tensors(final_state(ckpt_dir), uninterrupted)


def checkpoint_step(path: Path) -> int:
    """The global step of a complete checkpoint, or -1 while there is none (writes are atomic: a rename)."""
    try:
        return int(torch.load(path, weights_only=True, map_location="cpu")["global_step"])
    except (FileNotFoundError, RuntimeError, EOFError):
        return -1


@pytest.mark.slow
def test_kill_at_a_random_step_then_resume_equals_the_uninterrupted_run(tmp_path, uninterrupted):
    config, ckpt_dir = fault_config(tmp_path, "killed")
    rng = random.Random(os.environ.get("FCCOLIT_FAULT_SEED", "16"))
    target, delay = rng.randint(2, 24), rng.uniform(0.0, 0.03)  # then somewhere in a step or a checkpoint write
    proc = subprocess.Popen(cli_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=config.parent)
    try:
        deadline = time.monotonic() + 240
        while checkpoint_step(ckpt_dir / "last.ckpt") < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
    step = checkpoint_step(ckpt_dir / "last.ckpt")
    assert target <= step < 30, (target, step)
    resume_and_compare(config, ckpt_dir, uninterrupted)


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_then_resume_equals_the_uninterrupted_run(tmp_path, uninterrupted):
    config, ckpt_dir = fault_config(tmp_path, "killed_in_write")
    env = {**os.environ, "FCCOLIT_KILL_AT_WRITE": "12"}  # the 12th file write: a checkpoint, half written
    proc = subprocess.run(cli_command(config, script=KILL_DURING_WRITE), capture_output=True, text=True, timeout=300,
                          cwd=config.parent, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert 1 <= torch.load(ckpt_dir / "last.ckpt", weights_only=False)["global_step"] < 30
    resume_and_compare(config, ckpt_dir, uninterrupted)


# ---------------------------------------------------------------------------------------------- divergence
def _binary_family(name: str, lr: float):
    from fccolit.algorithms.pauc import PAUCRange
    from fccolit.objectives.pauc import PartialAUCRangeSurrogate

    data = small_data()
    seed_everything(0)
    if name == "supervised":
        return Supervised(MLP(hidden=[8]), optimizer=lambda p: torch.optim.SGD(p, lr=lr), data_sizes=data.sizes,
                          metrics=["ap"]), data
    if name == "sox":
        return SOX(MLP(hidden=[8]), AveragePrecisionSurrogate(margin=0.5), optimizer=lambda p: torch.optim.SGD(p, lr=lr),
                   ema_weight=0.3, data_sizes=data.sizes, metrics=["ap"]), data
    # the step is μ c_k / (μ + c_k) < μ: a large μ too (the proximal weight 1/μ vanishes)
    return PAUCRange(MLP(hidden=[8]), PartialAUCRangeSurrogate(0.1, 0.5), envelope_smoothing=lr, gamma=4.0, lr=lr, inner_steps=2,
                     data_sizes=data.sizes, metrics=["pauc_0.05_0.5"]), data


def _sonex(lr: float):
    from fccolit.algorithms.sonex import SONEX
    from fccolit.datamodules.grouped import SyntheticGroupedDataModule
    from fccolit.objectives.constrained import GroupDROCVaRLoss

    data = SyntheticGroupedDataModule(num_groups=8, max_group_size=60, imbalance=3.0, num_features=5,
                                      groups_per_batch=4, samples_per_group=6, seed=0, eval_batch_size=64)
    return SONEX(MLP(hidden=[8]), GroupDROCVaRLoss(ratio=0.25), smoothing=0.05, ema_weight=0.6, correction_weight=0.2,
                 optimizer=lambda p: torch.optim.SGD(p, lr=lr), data_sizes=data.sizes, metrics=["auroc"]), data


def _alexr2(lr: float, root: Path):
    from fccolit.algorithms.alexr2 import ALEXR2
    from fccolit.datamodules.fairness import FairnessDataModule
    from fccolit.testing import write_adult_files
    from fccolit.objectives.constrained import ROCFairnessAUCObjective

    write_adult_files(root, 300, 120, seed=1)
    data = FairnessDataModule(root, "adult", batch_size=32, eval_batch_size=64, seed=0, cache_dir=root / "cache")
    return ALEXR2(MLP(hidden=[8]), ROCFairnessAUCObjective(rho=5.0, kappa=0.001), smoothing=0.01, envelope_smoothing=0.2, inner_lr=lr,
                  inner_steps=3, constraints_per_step=10, sample_seed=3, optimizer=lambda p: torch.optim.SGD(p, lr=lr),
                  data_sizes=data.sizes, metrics=["auroc"]), data


def _song(lr: float):
    from fccolit.algorithms.song import SONG
    from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
    from fccolit.models.neumf import NeuMF
    from fccolit.objectives.ndcg import NDCGSurrogate

    data = SyntheticRankingDataModule(num_queries=64, num_items=80, ratings_per_query=(5, 12), num_positives=3,
                                      num_negatives=10, queries_per_batch=8, top_k=5, seed=0)
    return SONG(NeuMF(embedding_dim=6, layers=[6], dropout=0.1, init_std=0.1), NDCGSurrogate(), ema_weight=0.3,
                optimizer=lambda p: torch.optim.SGD(p, lr=lr), data_sizes=data.sizes, metrics=["ndcg@10"]), data


FAMILIES = ["supervised", "sox", "pauc_range", "sonex", "alexr2", "song"]


def build_family(name: str, lr: float, root: Path):
    if name in ("supervised", "sox", "pauc_range"):
        return _binary_family(name, lr)
    if name == "sonex":
        return _sonex(lr)
    if name == "alexr2":
        return _alexr2(lr, root)
    return _song(lr)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_diverging_learning_rate_stops_before_a_non_finite_step_and_checkpoint(family, tmp_path):
    torch.set_num_threads(1)
    model, data = build_family(family, 1e25, tmp_path)
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(FloatingPointError, match=r"(?s)(?=.*global step \d+)(?=.*non-finite)(?=.*learning rate)"):
        fit(model, data, checkpoints, every=1, max_steps=200)
    for parameter in model.parameters():  # the step on the non-finite gradient was not taken
        assert torch.isfinite(parameter).all()
    written = sorted(checkpoints.glob("*.ckpt"))
    assert written, "the run took at least one finite step and checkpointed it"
    for path in written:
        checkpoint = torch.load(path, weights_only=False)
        for name, value in checkpoint["state_dict"].items():
            if name in dict(model.named_parameters()):
                assert torch.isfinite(value).all(), (path.name, name)
        for state in checkpoint["optimizer_states"]:
            for entries in state["state"].values():
                for key, value in entries.items():
                    if torch.is_tensor(value) and value.is_floating_point():
                        assert torch.isfinite(value).all(), (path.name, key)


def test_a_non_finite_checkpoint_is_never_written(tmp_path):
    data = small_data()
    model = sox_with_dropout(data)
    trainer = fit(model, data, tmp_path, max_steps=2)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("inf")
    with pytest.raises(FloatingPointError, match="non-finite values .*parameter model.net.0.weight"):
        trainer.save_checkpoint(tmp_path / "bad.ckpt")
    assert not (tmp_path / "bad.ckpt").exists()


# ---------------------------------------------------------------------------------------------- CLI faults
def quick_args(root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", QUICKSTART, "--trainer.max_steps", "2", "--data.init_args.num_samples", "2000",
            "--trainer.logger", "false", "--trainer.callbacks", "[]", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(root), *extra]


@pytest.fixture(scope="module")
def quickstart_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("quick")
    main(quick_args(root))
    (checkpoint,) = root.glob("**/*.ckpt")
    return checkpoint


def test_changed_hyperparameters_on_resume_are_applied_and_printed(quickstart_checkpoint, tmp_path, capsys):
    result = main(quick_args(tmp_path, "--trainer.max_steps", "3", "--ckpt_path", str(quickstart_checkpoint),
                             "--model.init_args.ema_weight", "0.5"))
    assert result.model.ema_weight == 0.5  # the command line, not the checkpoint's 0.1
    err = capsys.readouterr().err
    assert "ema_weight: 0.1 (checkpoint) -> 0.5 (configured)" in err
    main(quick_args(tmp_path, "--trainer.max_steps", "3", "--ckpt_path", str(quickstart_checkpoint)))
    assert "differ from the checkpoint" not in capsys.readouterr().err  # nothing changed: nothing printed


def test_changed_optimizer_settings_on_resume_are_refused_with_the_keys(quickstart_checkpoint, tmp_path):
    with pytest.raises(ValueError, match=r"optimizer settings that differ.*\n  optimizer.init_args.lr: 0.5 \(checkpoint\) -> 0.1"):
        main(quick_args(tmp_path, "--ckpt_path", str(quickstart_checkpoint),
                        "--model.init_args.optimizer.init_args.lr", "0.1"))


@pytest.mark.parametrize("damage", ["empty", "truncated", "corrupted"])
def test_a_damaged_checkpoint_is_a_named_error(quickstart_checkpoint, tmp_path, damage):
    data = quickstart_checkpoint.read_bytes()
    path = tmp_path / f"{damage}.ckpt"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) * 2 // 3])
    else:  # a flipped byte inside the stored weights
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    word = {"empty": "empty", "truncated": "incomplete", "corrupted": "(corrupted|incomplete)"}[damage]
    with pytest.raises(ValueError, match=rf"checkpoint {path}.* (is )?{word}"):
        main(quick_args(tmp_path, "--ckpt_path", str(path)))


@pytest.mark.parametrize("name", ["batch_size", "eval_batch_size"])
@pytest.mark.parametrize("value", [0, -64])
def test_a_zero_or_negative_batch_size_fails_in_the_constructor_naming_the_field(name, value):
    with pytest.raises(ValueError, match=rf"SyntheticBinaryDataModule: {name} must be a positive integer, got {value}"):
        SyntheticBinaryDataModule(**{name: value})


@pytest.mark.parametrize("config, flag, wrong, right", [
    ("seed_everythin: 1\n", None, "seed_everythin", "seed_everything"),
    ("dataa:\n  class_path: fccolit.datamodules.SyntheticBinaryDataModule\n", None, "dataa", "data"),
    (None, ("--ckpt_pth", "x.ckpt"), "ckpt_pth", "ckpt_path"),
])
def test_misspelled_top_level_keys_suggest_the_right_one(tmp_path, capsys, config, flag, wrong, right):
    extra = list(flag or ())
    if config is not None:
        (tmp_path / "typo.yaml").write_text(config)
        extra = ["--config", str(tmp_path / "typo.yaml")]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *extra], run=True)
    assert exit_info.value.code != 0
    assert f"'{wrong}' is not a top-level key. Did you mean '{right}'?" in capsys.readouterr().err
