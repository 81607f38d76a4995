"""Image backbones: output shapes, replaced heads, local weights round trips, no downloads, a tiny random CLIP."""

from __future__ import annotations

import string

import pytest
import torch
from torch import nn

from fccolit.models.vision import CLIPClassifier, ResNet20, TorchvisionBackbone, load_backbone_state


pytestmark = pytest.mark.usefixtures("no_downloads")  # conftest.py: any download attempt fails the test


# ---------------------------------------------------------------------------------------------- ResNet-20
def test_resnet20_shapes_and_size():
    torch.manual_seed(0)
    model = ResNet20(num_outputs=10)
    # He et al. (2016) Table 6: ResNet-20 has 0.27M parameters (option A shortcuts have none)
    assert sum(p.numel() for p in model.parameters()) == 269_722
    assert model(torch.randn(4, 3, 32, 32)).shape == (4, 10)
    scorer = ResNet20()
    assert scorer(torch.randn(4, 3, 32, 32)).shape == (4,)
    assert scorer.features(torch.randn(2, 3, 32, 32)).shape == (2, 64)
    assert len([m for m in ResNet20(depth=32).modules() if isinstance(m, nn.Conv2d)]) == 31
    with pytest.raises(ValueError, match="6n \\+ 2"):
        ResNet20(depth=21)


def test_option_a_shortcut_subsamples_and_zero_pads():
    from fccolit.models.vision import _BasicBlock

    block = _BasicBlock(16, 32, stride=2)
    x = torch.randn(2, 16, 8, 8)
    short = block.shortcut(x)
    assert short.shape == (2, 32, 4, 4)
    assert torch.equal(short[:, 8:24], x[:, :, ::2, ::2]) and not short[:, :8].any() and not short[:, 24:].any()


def test_head_width_from_the_data_sizes():
    model = ResNet20(num_outputs=None)
    with pytest.raises(RuntimeError, match="no head yet"):
        model(torch.randn(1, 3, 32, 32))
    model.bind_sizes({"num_samples": 10, "num_outputs": 5})
    assert model.fc.out_features == 5 and model(torch.randn(2, 3, 32, 32)).shape == (2, 5)
    with pytest.raises(ValueError, match="num_outputs=1 but the data has num_outputs=5"):
        ResNet20(num_outputs=1).bind_sizes({"num_outputs": 5})
    ResNet20(num_outputs=1).bind_sizes({"num_samples": 3})  # no num_outputs: nothing to check


def test_resnet20_weights_round_trip(tmp_path):
    torch.manual_seed(1)
    trained = ResNet20(num_outputs=1)
    path = tmp_path / "ce.pt"
    torch.save(trained.state_dict(), path)
    x = torch.randn(3, 3, 32, 32)
    trained.eval()
    full = ResNet20(num_outputs=1, weights_path=str(path), load_head=True).eval()
    torch.testing.assert_close(full(x), trained(x), rtol=0, atol=0)
    fresh_head = ResNet20(num_outputs=1, weights_path=str(path)).eval()  # Wang et al.: last layer re-initialized
    assert torch.equal(fresh_head.conv1.weight, trained.conv1.weight)
    assert not torch.equal(fresh_head.fc.weight, trained.fc.weight)
    torch.testing.assert_close(fresh_head.features(x), trained.features(x), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------- torchvision
@pytest.mark.parametrize("name, feature_dim", [("resnet18", 512), ("resnet34", 512), ("densenet121", 1024)])
def test_torchvision_backbones_replace_the_head(name, feature_dim):
    model = TorchvisionBackbone(name, num_outputs=3)
    head = model.head
    assert isinstance(head, nn.Linear) and (head.in_features, head.out_features) == (feature_dim, 3)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    stem = TorchvisionBackbone(name, num_outputs=1, cifar_stem=True)
    assert stem(torch.randn(2, 3, 32, 32)).shape == (2,)
    first = stem.net.conv1 if name.startswith("resnet") else stem.net.features.conv0
    assert first.kernel_size == (3, 3) and first.stride == (1, 1)
    with pytest.raises(ValueError, match="unknown name 'vgg16'"):
        TorchvisionBackbone("vgg16")


def test_torchvision_weights_files_in_every_layout(tmp_path):
    import torchvision.models as tvm

    torch.manual_seed(2)
    imagenet = tvm.resnet18(weights=None)  # the layout of torchvision's released files: 1000-class head
    torch.save(imagenet.state_dict(), tmp_path / "imagenet.pth")
    model = TorchvisionBackbone("resnet18", num_outputs=1, weights_path=str(tmp_path / "imagenet.pth"))
    reference = {k: v for k, v in imagenet.state_dict().items() if not k.startswith("fc.")}
    for key, value in reference.items():
        assert torch.equal(model.net.state_dict()[key], value), key
    assert model.head.out_features == 1
    with pytest.raises(ValueError, match="the head differs"):
        TorchvisionBackbone("resnet18", num_outputs=1, weights_path=str(tmp_path / "imagenet.pth"), load_head=True)

    # a module's own state dict, and the same inside a Lightning checkpoint (keys "model.net....")
    x = torch.randn(2, 3, 64, 64)
    model.eval()
    torch.save(model.state_dict(), tmp_path / "own.pt")
    torch.save({"epoch": 3, "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, tmp_path / "run.ckpt")
    for file in ("own.pt", "run.ckpt"):
        again = TorchvisionBackbone("resnet18", num_outputs=1, weights_path=str(tmp_path / file), load_head=True).eval()
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)

    with pytest.raises(ValueError, match=r"tensors are missing from the file"):
        TorchvisionBackbone("resnet34", num_outputs=1, weights_path=str(tmp_path / "imagenet.pth"))
    with pytest.raises(FileNotFoundError, match="weights file not found"):
        TorchvisionBackbone("resnet18", weights_path=str(tmp_path / "none.pt"))
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"junk\.pt: cannot read a state dict"):
        load_backbone_state(model.net, tmp_path / "junk.pt", head_prefix="fc.")


def test_densenet_released_key_names_are_mapped(tmp_path):
    import re

    import torchvision.models as tvm

    torch.manual_seed(3)
    reference = tvm.densenet121(weights=None)
    # the released densenet121 file: "norm.1"-style names, and no num_batches_tracked (written by torch < 0.4.1)
    old = {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v
           for k, v in reference.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert any(".norm.1." in k for k in old)
    torch.save(old, tmp_path / "densenet121.pth")
    model = TorchvisionBackbone("densenet121", num_outputs=5, weights_path=str(tmp_path / "densenet121.pth"))
    for key, value in reference.state_dict().items():
        if not key.startswith("classifier.") and not key.endswith("num_batches_tracked"):
            assert torch.equal(model.net.state_dict()[key], value), key


# ---------------------------------------------------------------------------------------------- CLIP
def _tiny_clip(tmp_path, **kwargs):
    from transformers import CLIPTokenizer

    chars = sorted(set(string.ascii_lowercase + string.digits + ".,/-"))
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[])
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    config = {
        "text_config": {"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 2, "max_position_embeddings": 40, "eos_token_id": tokenizer.eos_token_id,
                        "bos_token_id": tokenizer.bos_token_id, "pad_token_id": tokenizer.pad_token_id},
        "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                          "image_size": 32, "patch_size": 8},
        "projection_dim": 16,
    }
    return CLIPClassifier(config=config, tokenizer_path=str(tmp_path / "tokenizer"), **kwargs), config


PROMPTS = ["the weather is clear.", "the weather is overcast.", "the weather is foggy."]


def test_clip_zero_shot_logits_and_binary_target(tmp_path):
    torch.manual_seed(4)
    model, _ = _tiny_clip(tmp_path, prompts=PROMPTS)
    x = torch.randn(5, 3, 32, 32)
    logits = model(x)
    assert logits.shape == (5, 3) and model.num_outputs == 3
    image = model.image_embeddings(x)
    text = model.text_embeddings(model.prompt_ids, model.prompt_mask)
    torch.testing.assert_close(image.norm(dim=-1), torch.ones(5))
    torch.testing.assert_close(logits, model.clip.logit_scale.exp() * image @ text.t())
    target = CLIPClassifier(config=model.clip.config.to_dict(), tokenizer_path=str(tmp_path / "tokenizer"), prompts=PROMPTS, target=2)
    target.load_state_dict(model.state_dict())
    p = torch.softmax(logits, dim=1)[:, 2]
    torch.testing.assert_close(torch.sigmoid(target(x)), p, rtol=1e-5, atol=1e-6)  # the binary logit of the class
    target(x).sum().backward()  # both towers are trained (Chen et al. fine-tune CLIP)
    assert target.clip.text_model.embeddings.token_embedding.weight.grad.abs().sum() > 0
    assert target.clip.vision_model.embeddings.patch_embedding.weight.grad.abs().sum() > 0
    target.bind_sizes({"num_outputs": 1})
    with pytest.raises(ValueError, match="num_outputs=1 but the data has num_outputs=3"):
        target.bind_sizes({"num_outputs": 3})


def test_clip_linear_head_and_local_pretrained_round_trip(tmp_path):
    torch.manual_seed(5)
    model, config = _tiny_clip(tmp_path, prompts=PROMPTS)
    model.clip.save_pretrained(tmp_path / "clip")
    from transformers import CLIPTokenizer

    CLIPTokenizer.from_pretrained(tmp_path / "tokenizer").save_pretrained(tmp_path / "clip")
    loaded = CLIPClassifier(pretrained_path=str(tmp_path / "clip"), prompts=PROMPTS)
    x = torch.randn(2, 3, 32, 32)
    model.eval(), loaded.eval()
    torch.testing.assert_close(loaded(x), model(x))
    linear = CLIPClassifier(pretrained_path=str(tmp_path / "clip"), head="linear")
    assert linear.num_outputs is None
    linear.bind_sizes({"num_outputs": 1})
    assert linear(x).shape == (2,) and linear.fc.in_features == config["projection_dim"]
    with pytest.raises(FileNotFoundError, match="never downloads"):
        CLIPClassifier(pretrained_path="openai/clip-vit-base-patch32", prompts=PROMPTS)
    with pytest.raises(ValueError, match="needs pretrained_path .* or config"):
        CLIPClassifier(prompts=PROMPTS)
    with pytest.raises(ValueError, match="one text prompt per class"):
        CLIPClassifier(config=config)


def test_clip_on_bdd100k_one_epoch(tmp_path):
    """BDD100K (generated, 2020 layout) + tiny CLIP zero-shot on the target class, one epoch of SOX + AP."""
    from lightning.pytorch import Trainer

    from fccolit.algorithms.sox import SOX
    from fccolit.datamodules.bdd100k import BDD100KDataModule
    from fccolit.testing import write_bdd100k
    from fccolit.objectives import AveragePrecisionSurrogate

    weather = ["clear", "overcast", "snowy", "rainy", "partly cloudy", "foggy"]
    frames = {s: [{"weather": weather[i % 6], "scene": "city street", "timeofday": "daytime"} for i in range(n)]
              for s, n in (("train", 48), ("val", 12))}
    write_bdd100k(tmp_path / "bdd", frames=frames, version="2020", image_size=(80, 45))
    dm = BDD100KDataModule(tmp_path / "bdd", target="overcast", image_size=32, batch_size=8, num_positives=2,
                           num_batches=2, val_fraction=0.25, cache_dir=tmp_path / "cache")
    torch.manual_seed(6)
    clip, _ = _tiny_clip(tmp_path, prompts=dm.prompts, target=dm.classes.index("overcast"))
    model = SOX(clip, AveragePrecisionSurrogate(), data_sizes=dm.sizes, metrics=["ap"])
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      num_sanity_val_steps=0, default_root_dir=str(tmp_path))
    before = clip.clip.visual_projection.weight.detach().clone()
    trainer.fit(model, datamodule=dm)
    assert model.state.visited().any() and "val/ap" in trainer.callback_metrics
    assert not torch.equal(before, clip.clip.visual_projection.weight)
