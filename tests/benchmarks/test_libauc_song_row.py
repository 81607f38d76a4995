"""The ranking tables' LibAUC rows (benchmarks/reproduce/libauc_song.py and its two configs) run as the other rows
do: ``fccolit fit`` on the config, on generated files in the MovieLens and MSLR formats, through the warm-up into
LibAUC's SONG, and LibAUC's loss is the one that trains the second stage. (The LETOR layout itself, which needs no
LibAUC, is tested in test_libauc_list_layout.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libauc")

ROOT = Path(__file__).resolve().parents[2]
REPRODUCE = ROOT / "benchmarks" / "reproduce"
CONFIG = REPRODUCE / "configs" / "movielens_libauc_song.yaml"


@pytest.mark.slow
def test_the_libauc_song_row_fits_through_the_warm_up(tmp_path):
    from fccolit.testing.ranking import write_movielens_csv

    write_movielens_csv(tmp_path / "data")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPRODUCE), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("fccolit")), "fit", "--config", str(CONFIG),
         "--data.init_args.root", str(tmp_path / "data"), "--data.init_args.num_batches", "1",
         "--data.init_args.num_negatives", "20", "--data.init_args.queries_per_batch", "8",
         "--trainer.max_epochs", "22", "--trainer.check_val_every_n_epoch", "22", "--trainer.accelerator", "cpu",
         "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path),
         "--trainer.logger.init_args.save_dir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LibAUCSONG: NeuMF" in result.stdout + result.stderr
    assert "val/ndcg@10" in result.stdout


def test_its_loss_is_libaucs_ndcg_loss():
    sys.path.insert(0, str(REPRODUCE))
    import libauc_song
    from libauc.losses import NDCGLoss
    from fccolit.models import NeuMF

    module = libauc_song.LibAUCSONG(NeuMF(num_users=5, num_items=9), ema_weight=0.3, num_positives=2,
                                    data_sizes={"num_users": 5, "num_items": 9, "num_pairs": 20})
    assert isinstance(module.libauc_loss, NDCGLoss)
    assert (module.libauc_loss.gamma0, module.libauc_loss.num_pos, module.libauc_loss.num_item) == (0.3, 2, 9)
    assert module.libauc_loss.u.shape[0] == 20  # one u per (user, rated item) pair


LETOR_CONFIG = REPRODUCE / "configs" / "mslr_libauc_song.yaml"


@pytest.mark.slow
def test_the_letor_libauc_song_row_fits_through_the_warm_up(tmp_path):
    from fccolit.testing import write_mslr_fold

    write_mslr_fold(tmp_path / "data", num_features=5)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPRODUCE), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("fccolit")), "fit", "--config", str(LETOR_CONFIG),
         "--data.init_args.root", str(tmp_path / "data"), "--data.init_args.normalize", "standard",
         "--data.init_args.queries_per_batch", "8", "--data.init_args.num_batches", "1",
         "--trainer.max_epochs", "102", "--trainer.check_val_every_n_epoch", "102",  # the warm-up is 100 epochs
         "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
         "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LibAUCSONG: ContextAwareRanker" in result.stdout + result.stderr
    assert "val/ndcg@5" in result.stdout
