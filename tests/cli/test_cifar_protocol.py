"""The deep AUPRC protocol of Wang et al. (AISTATS 2022, §4.2) end to end through the CLI: cross-entropy pre-training
(configs/cifar_lt/ce_pretrain.yaml) writes a checkpoint whose backbone the AP configs load with a re-initialized
head."""

from pathlib import Path

import numpy as np
import pytest
import torch

from fccolit.cli import main
from fccolit.testing import write_cifar

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "cifar_lt"


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar_protocol")
    rng = np.random.default_rng(5)
    train_y, test_y = np.repeat(np.arange(10), 60), np.repeat(np.arange(10), 4)
    rng.shuffle(train_y)
    images = lambda n: rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)  # noqa: E731
    write_cifar(root, images(train_y.size), train_y, images(test_y.size), test_y)
    return root


def _run(config: str, root: Path, *extra: str):
    return main(["fit", "--config", str(CONFIGS / config), "--data.root", str(root),
                 "--data.init_args.cache_dir", str(root / "cache"), "--data.init_args.num_workers", "0",
                 "--data.init_args.batch_size", "16", "--data.init_args.eval_batch_size", "256",
                 "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false", *extra])


@pytest.mark.slow  # two ResNet-18 runs through the CLI
def test_ce_pretraining_then_adap_with_the_head_reinitialized(cifar_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the configs write lightning_logs/ and checkpoints/ relative to the working directory
    pre = _run("ce_pretrain.yaml", cifar_root, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1")
    assert pre.datamodule.build_train_sampler().__class__.__name__ == "UniformBatchSampler"
    checkpoint = tmp_path / "lightning_logs" / "cifar_ce_pretrain" / "version_0" / "checkpoints" / "last.ckpt"
    assert checkpoint.is_file()
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    ap = _run("adap.yaml", cifar_root, "--trainer.fast_dev_run", "1", "--data.init_args.num_positives", "4",
              "--model.init_args.model.init_args.weights_path", "lightning_logs/cifar_ce_pretrain")  # the header's folder
    # the AP module took a step from the loaded weights: rebuild its backbone as the config did and compare
    backbone = type(ap.model.model)(name="resnet18", num_outputs=1, cifar_stem=True, weights_path=str(checkpoint))
    fresh = type(ap.model.model)(name="resnet18", num_outputs=1, cifar_stem=True)
    head = {"net.fc.weight", "net.fc.bias"}
    assert head <= set(backbone.state_dict())
    for key, value in backbone.state_dict().items():
        if key in head:
            assert not torch.equal(value, saved[f"model.{key}"]), key  # the head is re-initialized
        else:
            assert torch.equal(value, saved[f"model.{key}"]), key  # the backbone is the pre-trained one
    assert not torch.equal(backbone.state_dict()["net.conv1.weight"], fresh.state_dict()["net.conv1.weight"])
    assert ap.model.state.visited().any()
