"""The errors a new user meets first say what is wrong and how to fix it (one test per error, through the CLI
where a user meets it there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fccolit.cli import main
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.samplers.binary import DualSampler
from fccolit.samplers.multilabel import MultiLabelSampler
from fccolit.testing import write_chexpert, write_libsvm

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
SOX_AP = str(ROOT / "configs" / "libsvm" / "sox_ap.yaml")


def cli_error(capsys, *args: str) -> str:
    """Run ``fccolit fit <args>``; it must exit with an error before training: its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args])
    assert exit_info.value.code != 0
    return capsys.readouterr().err


def constructor_error(error_type: type, *args: str) -> str:
    """Run ``fccolit fit <args>``: a constructor's error must surface as itself (not wrapped by jsonargparse)."""
    with pytest.raises(error_type) as error:
        main(["fit", *args])
    return str(error.value)


def test_wrong_root_names_the_folder_and_where_to_download(tmp_path):
    missing = tmp_path / "no_such_folder"
    err = constructor_error(FileNotFoundError, "--config", SOX_AP, "--data.root", str(missing))
    assert f"LibSVM data set file not found: {missing / 'a9a'}" in err
    assert f"The folder {missing} does not exist" in err
    assert "download the file named 'a9a'" in err and "libsvmtools/datasets" in err


def test_missing_file_lists_what_the_folder_holds(tmp_path):
    write_libsvm(tmp_path, name="w8a")  # the folder exists, with another data set
    err = constructor_error(FileNotFoundError, "--config", SOX_AP, "--data.root", str(tmp_path))
    assert f"Files in {tmp_path}: w8a, w8a.t" in err and "download the file named 'a9a'" in err


def test_missing_image_names_the_file_the_list_and_the_fix(tmp_path):
    base, _ = write_chexpert(tmp_path, num_patients=6, num_valid_patients=2, image_size=(40, 32), seed=1)
    missing = base / "valid" / sorted(p.name for p in (base / "valid").iterdir())[0]
    image = next(missing.rglob("*.jpg"))
    image.unlink()
    data = CheXpertDataModule(tmp_path, image_size=16, batch_size=4, num_positives=1, val_fraction=0.3,
                              cache_dir=tmp_path / "cache")
    data.setup("test")
    with pytest.raises(FileNotFoundError, match=rf"image not found: {image} \(listed in .*valid\.csv line \d+\)\. "
                                                r"The images under .* are incomplete: extract the release's images again"):
        for _ in data.test_dataloader():
            pass


@pytest.mark.parametrize("key, value, expected", [
    ("--model.init_args.emma_weight", "0.1",
     "'emma_weight' is not a parameter of fccolit.algorithms.SOX. Did you mean 'ema_weight'?"),
    ("--model.init_args.model.init_args.hiden", "[8]",
     "'hiden' is not a parameter of fccolit.models.MLP. Did you mean 'hidden'?"),
    ("--model.init_args.optimizer.init_args.lrr", "0.1",
     "'lrr' is not a parameter of fccolit.optim.Momentum. Did you mean 'lr'?"),
    ("--data.init_args.num_sample", "10",
     "'num_sample' is not a parameter of fccolit.datamodules.SyntheticBinaryDataModule. Did you mean 'num_samples'?"),
    ("--trainer.max_epochz", "1", "'max_epochz' is not a parameter of lightning.pytorch.Trainer. Did you mean 'max_epochs'?"),
])
def test_misspelled_config_key_names_the_closest_valid_one(capsys, key, value, expected):
    err = cli_error(capsys, "--config", QUICKSTART, key, value)
    assert expected in err
    assert "Its parameters: " in err.splitlines()[-1]  # the valid names end the message


def test_misspelled_key_in_a_yaml_file_names_the_closest_valid_one(capsys, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("trainer:\n  max_epoch: 3\n")
    err = cli_error(capsys, "--config", QUICKSTART, "--config", str(extra))
    assert "'max_epoch' is not a parameter of lightning.pytorch.Trainer. Did you mean 'max_epochs'?" in err


def test_model_that_does_not_fit_the_data_names_both_sizes_and_the_fix():
    err = constructor_error(ValueError, "--config", QUICKSTART, "--model.init_args.model.init_args.in_features", "7")
    assert "MLP was configured with in_features=7 but the data has num_features=20" in err
    assert "remove in_features from the model config (it is taken from the data)" in err


def test_more_positives_per_batch_than_exist_says_how_many_there_are():
    labels = torch.zeros(100, dtype=torch.long)
    labels[:3] = 1
    with pytest.warns(UserWarning, match=r"10 positives per batch requested but the training labels hold only 3 "
                                         r"positives .* lower num_positives .* to at most 3"):
        DualSampler(labels, batch_size=20, num_positives=10)


def test_more_positives_per_task_than_exist_names_the_tasks():
    labels = torch.zeros(50, 3)
    labels[:2, 0] = 1
    labels[10:20, 1] = 1
    labels[20:23, 2] = 1
    with pytest.warns(UserWarning, match=r"5 positives per task .* task 0: 2, task 2: 3, .* at most 2"):
        MultiLabelSampler(labels, tasks_per_batch=3, num_positives=5, num_negatives=5)
