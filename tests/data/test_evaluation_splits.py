"""An evaluation split whose binary labels are of one class only (issue 25, item 10): refused when a Trainer sets
the DataModule up, before any step, with an error naming the split and its file, instead of a crash at the first
validation (or test) after training, although the DataModule's summary line already said "(0 positives)". Data
sets written in their real formats under ``tmp_path``; one run of the ``fccolit`` command checks that the error is
one line, exit status 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ["HF_DATASETS_OFFLINE"] = "1"

import datasets  # noqa: E402
from lightning.pytorch import Trainer  # noqa: E402

from fccolit.algorithms import ADAP, SOX  # noqa: E402
from fccolit.datamodules import HFClassificationDataModule, LibSVMDataModule  # noqa: E402
from fccolit.datamodules.base import DataError  # noqa: E402
from fccolit.models import MLP, LinearScorer  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.testing import write_libsvm  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FCCOLIT = [sys.executable, "-m", "fccolit"]


def _binary_frame(rows: int, positives: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = np.zeros(rows, dtype=np.int64)
    y[:positives] = 1
    return pd.DataFrame({"a": rng.normal(size=rows), "b": rng.normal(size=rows), "label": y})


def _split_folder(folder: Path, val_positives: int, test_positives: int) -> Path:
    folder.mkdir(parents=True)
    _binary_frame(200, 40, 0).to_parquet(folder / "train.parquet")
    _binary_frame(50, val_positives, 1).to_parquet(folder / "validation.parquet")
    _binary_frame(50, test_positives, 2).to_parquet(folder / "test.parquet")
    return folder


def _trainer(tmp_path: Path, **kw) -> Trainer:
    kw.setdefault("max_steps", 3)
    return Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
                   default_root_dir=str(tmp_path), **kw)


def _sox(dm) -> SOX:
    return SOX(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=dm.sizes)


def test_a_validation_file_without_positives_is_refused_at_setup_naming_it(tmp_path):
    folder = _split_folder(tmp_path / "data", val_positives=0, test_positives=5)
    dm = HFClassificationDataModule(folder, label="label", features=["a", "b"], batch_size=8, num_positives=2,
                                    cache_dir=tmp_path / "hf")
    module = _sox(dm)
    trainer = _trainer(tmp_path)
    with pytest.raises(DataError, match=r"^HFClassificationDataModule: the val split \('.*data/validation\.parquet'\) "
                                        r"has no positive among its 50 rows \(0 positives, 50 negatives\), so its "
                                        r"metrics are undefined"):
        trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 0  # before any step
    assert "val 50 rows (0 positives), test 50 rows (5 positives)" in dm.summary()
    _trainer(tmp_path, limit_val_batches=0).fit(module, datamodule=dm)  # no validation: nothing to refuse
    _trainer(tmp_path).test(module, datamodule=dm)  # the test split has both classes
    fresh = HFClassificationDataModule(folder, label="label", features=["a", "b"], batch_size=8, num_positives=2,
                                       cache_dir=tmp_path / "hf")
    fresh.setup("fit")  # by hand, to look at the data: no run to protect


def test_a_test_file_of_one_class_is_refused_when_testing(tmp_path):
    folder = _split_folder(tmp_path / "data", val_positives=5, test_positives=50)
    dm = HFClassificationDataModule(folder, label="label", features=["a", "b"], batch_size=8, num_positives=2,
                                    cache_dir=tmp_path / "hf")
    module = _sox(dm)
    _trainer(tmp_path, val_check_interval=3).fit(module, datamodule=dm)
    with pytest.raises(DataError, match=r"the test split \('.*test\.parquet'\) has no negative among its 50 rows "
                                        r"\(50 positives, 0 negatives\).*AUROC and pAUC need negatives"):
        _trainer(tmp_path).test(module, datamodule=dm)


def test_libsvm_held_out_validation_and_test_file_without_positives_are_named(tmp_path):
    write_libsvm(tmp_path, name="toy", rows=300, test_rows=60)
    lines = (tmp_path / "toy").read_text().splitlines()
    positives = [i for i, line in enumerate(lines) if line.startswith("+1")]
    for i in positives[2:]:  # two positives left: a held-out 20% takes round(0.4) = 0 of them
        lines[i] = "-1" + lines[i][2:]
    (tmp_path / "toy").write_text("\n".join(lines) + "\n")
    dm = LibSVMDataModule(tmp_path, "toy", batch_size=8, num_positives=1, cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match=r"the val split \(held out of .*/toy\) has no positive"):
        _trainer(tmp_path).fit(_sox(dm), datamodule=dm)
    (tmp_path / "toy.t").write_text("".join(line.replace("+1", "-1", 1) + "\n"
                                            for line in (tmp_path / "toy.t").read_text().splitlines()))
    dm = LibSVMDataModule(tmp_path, "toy", batch_size=8, num_positives=1, cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match=r"the test split \(.*/toy\.t\) has no positive"):
        _trainer(tmp_path).test(_sox(dm), datamodule=dm)


def test_multilabel_evaluation_without_any_task_of_both_classes_is_refused(tmp_path):
    train = {"x": np.arange(40.0).tolist(), "t0": [i % 2 for i in range(40)], "t1": [int(i % 4 == 0) for i in range(40)]}
    val = {"x": [0.0, 1.0, 2.0], "t0": [1, 1, -1], "t1": [0, -1, 0]}
    dm = HFClassificationDataModule(datasets.DatasetDict({"train": datasets.Dataset.from_dict(train),
                                                          "validation": datasets.Dataset.from_dict(val)}),
                                    label=["t0", "t1"], features="x", batch_size=8, num_positives=2)
    module = ADAP(MLP(hidden=[4], out_features=2), AveragePrecisionSurrogate(project=True), data_sizes=dm.sizes)
    with pytest.raises(DataError, match=r"the val split \(the given DatasetDict \(val split\)\) has no task with "
                                        r"both classes among its 3 rows"):
        _trainer(tmp_path).fit(module, datamodule=dm)


def test_the_fccolit_command_refuses_it_in_one_line_before_any_step(tmp_path):
    folder = _split_folder(tmp_path / "data", val_positives=0, test_positives=5)
    run = tmp_path / "run"
    run.mkdir()
    done = subprocess.run(
        [*FCCOLIT, "fit", "--config", str(CONFIGS / "hf" / "sox_binary.yaml"), "--data.init_args.dataset", str(folder),
         "--data.init_args.features", "[a, b]", "--data.init_args.cache_dir", str(tmp_path / "hf"),
         "--trainer.max_steps", "3", "--trainer.enable_progress_bar", "false"],
        cwd=run, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("fccolit: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "the val split ('" in errors[0] and "validation.parquet') has no positive among its 50 rows" in errors[0]
    assert not list(run.rglob("*.ckpt"))
