"""Every evaluation protocol of the recommendation DataModules runs with every config that trains on them (issue 25,
item 18): ``fccolit fit --config configs/movielens/song.yaml --data.protocol libauc`` was refused before any step,
because SONG added its full-ranking NDCG for every recommendation data set and the pre-flight metric check then
demanded batch fields that LibAUC's sampled-candidate evaluation does not have. The DataModule now says
``eval_negatives`` in its sizes when it samples candidates, and SONG adds the full-ranking metric only without it.
Data: MovieLens / Netflix / HF tables generated in their real formats (``tests/builders.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

os.environ["HF_DATASETS_OFFLINE"] = "1"

from fccolit.testing import write_movielens_csv  # noqa: E402

from builders import generator_for  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FCCOLIT = [sys.executable, "-m", "fccolit"]


RECOMMENDATION_CONFIGS = sorted(
    p for p in CONFIGS.rglob("*.yaml")
    if str(yaml.safe_load(p.read_text()).get("data", {}).get("class_path", "")).rsplit(".", 1)[-1]
    in ("MovieLensDataModule", "NetflixDataModule", "HFRecommendationDataModule")
)


def test_the_recommendation_configs_are_found():
    assert {p.relative_to(CONFIGS).as_posix() for p in RECOMMENDATION_CONFIGS} >= {
        "movielens/song.yaml", "movielens/ksong.yaml", "movielens/solc.yaml", "netflix/song.yaml",
        "hf/song_recommendation.yaml",
    }


@pytest.mark.parametrize("protocol", ["paper", "libauc"])
@pytest.mark.parametrize("config", RECOMMENDATION_CONFIGS, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_every_protocol_passes_the_metric_check_of_every_recommendation_config(tmp_path, monkeypatch, config, protocol):
    """The check ``fccolit fit`` runs before any step (check_metrics), in process: the configured metrics read the
    evaluation batches of the protocol, and SONG measures full-ranking NDCG only where evaluation ranks all items."""
    from fccolit.cli import check_metrics, main

    spec = yaml.safe_load(config.read_text())
    root = tmp_path / "data"
    root.mkdir()
    overrides = generator_for(spec["data"]["class_path"])(root, spec["data"].get("init_args") or {})
    monkeypatch.chdir(tmp_path)
    cli = main(["--config", str(config), *overrides, "--data.init_args.protocol", protocol,
                "--trainer.accelerator", "cpu", "--trainer.logger", "false"], run=False)
    data, model = cli.datamodule, cli.model
    data.setup("fit")
    check_metrics(model, data)
    names = [name for name, _ in model.metrics["val"].named_metrics()]
    assert ("full_ranking_ndcg" in names) == (protocol == "paper"), names
    assert ("eval_negatives" in model.data_sizes) == (protocol == "libauc")


@pytest.mark.parametrize("protocol", ["paper", "libauc"])
def test_the_song_config_trains_and_validates_with_each_protocol(tmp_path, protocol):
    root = tmp_path / "data"
    write_movielens_csv(root)
    run = tmp_path / "run"
    run.mkdir()
    done = subprocess.run(
        [*FCCOLIT, "fit", "--config", str(CONFIGS / "movielens" / "song.yaml"), "--data.init_args.root", str(root),
         "--data.init_args.cache_dir", str(tmp_path / "cache"), "--data.init_args.protocol", protocol,
         "--data.init_args.num_negatives", "20", "--data.init_args.queries_per_batch", "16",
         "--data.init_args.eval_batch_size", "32", "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
         "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false"],
        cwd=run, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = {line.split()[0]: float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("val/ndcg@")}
    assert set(shown) == {"val/ndcg@5", "val/ndcg@10", "val/ndcg@20", "val/ndcg@50"}, done.stdout[-2000:]
    assert all(0.0 <= v <= 1.0 for v in shown.values())
