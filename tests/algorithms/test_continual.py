"""Continual learning with non-forgetting constraints (Chen et al., NeurIPS 2025, Appendix F.3): the objective's
constraint values and contrastive loss against a direct computation, the frozen old model (no gradient, never stepped,
kept through a checkpoint resume), the constraints on their bound at the start, and the config through the CLI."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader

from fccolit.algorithms.sonex import SONEX
from fccolit.callbacks.constraints import accumulate_constraint_statistics, constraint_values
from fccolit.cli import main
from fccolit.data import identity_collate
from fccolit.datamodules.bdd100k import DEFAULT_CLASSES, BDD100KDataModule, class_prompts
from fccolit.models.vision import CLIPClassifier, write_tiny_clip
from fccolit.objectives import ContinualLearningObjective
from fccolit.optim import AdaptiveMomentum
from fccolit.samplers import SequentialShardSampler

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "bdd100k" / "sonex_continual.yaml"
PROMPTS = class_prompts("weather", DEFAULT_CLASSES["weather"])
FOGGY = DEFAULT_CLASSES["weather"].index("foggy")
TAU = 0.05


pytestmark = pytest.mark.usefixtures("no_downloads")  # conftest.py


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    """A tiny random CLIP for 32 × 32 crops (the config's own test uses 224, like the config)."""
    return write_tiny_clip(tmp_path_factory.mktemp("clip32"), image_size=32, patch_size=8, seed=0)


def tiny_clip(folder, dtype=torch.float64) -> CLIPClassifier:
    return CLIPClassifier(pretrained_path=str(folder), prompts=PROMPTS, logit_scale=1.0).to(dtype)


@torch.no_grad()
def perturb(model, seed, scale=0.05):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        if p.requires_grad:
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def datamodule(root, tmp_path, **kwargs):
    options = dict(image_size=32, sampler="class_balanced", batch_size=12, num_batches=2, val_fraction=0.2,
                   eval_batch_size=16, cache_dir=tmp_path / "cache")
    return BDD100KDataModule(root, task="weather", **{**options, **kwargs})


def quiet_trainer(tmp_path, **kwargs):
    options = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                   use_distributed_sampler=False, num_sanity_val_steps=0, default_root_dir=str(tmp_path))
    return Trainer(**{**options, **kwargs})


def cross_entropy(scores, c):
    """``−log softmax(s/τ)_c`` per row, written out."""
    z = scores / TAU
    return -(z[:, c] - torch.logsumexp(z, dim=1))


# ---------------------------------------------------------------------------------------------- the objective
def test_constraints_and_contrastive_objective_equal_a_direct_computation(clip_dir):
    torch.manual_seed(0)
    model = tiny_clip(clip_dir)
    old_reference = copy.deepcopy(model).eval()
    slack = [0.0, 0.01, 0.0, 0.02, 0.0]
    objective = ContinualLearningObjective(target=FOGGY, slack=slack, class_names=DEFAULT_CLASSES["weather"]).double()
    objective.bind_sizes({"num_samples": 30, "num_classes": 6, "num_outputs": 6, "num_class_5": 7})
    assert objective.num_contrast == 23  # n: the training samples of other classes
    objective.bind_model(model)
    assert objective.protected == [0, 1, 2, 3, 4] and objective.num_constraints == 5
    assert objective.constraint_names()[2] == "no_worse_on_snowy"
    perturb(model, seed=1)  # the new model moves away from w_old
    labels = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4, 5, 5, 5, 1, 3])
    x = torch.randn(labels.numel(), 3, 32, 32, dtype=torch.float64)
    batch = {"x": x, "y": labels, "index": torch.arange(100, 100 + labels.numel())}
    scores = model(x)
    sums, counts = objective.constraint_statistics(scores, batch)
    assert sums.shape == counts.shape == (5, 1)
    for k, c in enumerate(objective.protected):  # each class's images through both models on their own
        members = labels == c
        new = cross_entropy(model(x[members]), c).mean()
        old = cross_entropy(old_reference(x[members]), c).mean()
        assert counts[k, 0] == int(members.sum())
        torch.testing.assert_close(sums[k, 0] / counts[k, 0], new - old - slack[k], rtol=1e-9, atol=1e-12)
        assert abs(float(new - old)) > 1e-6  # the check is not vacuous: the models differ on every class
    inner = objective.inner(scores, batch)  # SONEX's mini-batch inner values are those means
    assert inner.index.tolist() == [0, 1, 2, 3, 4]
    torch.testing.assert_close(inner.value, sums / counts)

    # the two-way global contrastive loss of the target images (foggy: 9, 10, 11) against the other samples, by
    # loops: the batch's mean over the contrast samples stands for the mean over the data's n = 23
    z = scores.detach() / TAU
    anchors = [i for i in range(len(labels)) if labels[i] == FOGGY]
    others = [j for j in range(len(labels)) if labels[j] != FOGGY]
    n, total, means = 23, 0.0, []
    for i in anchors:
        positive = math.exp(z[i, FOGGY])
        to_texts = sum(math.exp(z[i, labels[j]]) for j in others) / len(others)
        to_images = sum(math.exp(z[j, FOGGY]) for j in others) / len(others)
        total += TAU * math.log((positive + n * to_texts) / positive) + TAU * math.log((positive + n * to_images) / positive)
        means.append([to_texts / positive, to_images / positive])
    direct = objective.direct(scores, batch)
    assert math.isclose(float(direct), total / len(anchors), rel_tol=1e-10)
    tracked = objective.contrastive.inner(scores, batch)  # the inner means SONEX tracks, one row per target image
    assert tracked.index.tolist() == [100 + i for i in anchors]
    torch.testing.assert_close(tracked.value.detach(), torch.tensor(means, dtype=torch.float64), rtol=1e-10, atol=0)
    assert objective.contrastive.num_rows({"num_samples": 30}) == 30
    with pytest.raises(ValueError, match="'index'"):
        objective.contrastive.inner(scores, {"x": x, "y": labels})
    # with all of the data in the batch (n = the batch's contrast samples), the loss is the paper's sum form
    whole = ContinualLearningObjective(target=FOGGY, num_contrast=len(others)).double()
    whole.bind_sizes({"num_classes": 6})
    expected = 0.0
    for i in anchors:
        positive = math.exp(z[i, FOGGY])
        expected += -TAU * math.log(positive / (positive + sum(math.exp(z[i, labels[j]]) for j in others)))
        expected += -TAU * math.log(positive / (positive + sum(math.exp(z[j, FOGGY]) for j in others)))
    assert math.isclose(float(whole.direct(scores, batch)), expected / len(anchors), rel_tol=1e-10)
    with pytest.raises(ValueError, match="num_contrast"):
        ContinualLearningObjective(target=FOGGY).double().direct(scores, batch)

    # gradients reach the new model only
    (direct + sums.sum()).backward()
    assert model.clip.vision_model.embeddings.patch_embedding.weight.grad.abs().sum() > 0
    assert model.clip.text_model.embeddings.token_embedding.weight.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in objective.old_model.parameters())
    # no target image, or no contrast sample: a zero that keeps the graph
    assert float(objective.direct(scores[:4], {"x": x[:4], "y": labels[:4], "index": batch["index"][:4]})) == 0.0
    assert float(objective.direct(scores[9:12], {"x": x[9:12], "y": labels[9:12], "index": batch["index"][9:12]})) == 0.0
    with pytest.raises(ValueError, match="protected classes must be distinct"):
        ContinualLearningObjective(target=FOGGY, protected=[0, FOGGY])
    with pytest.raises(ValueError, match="scores \\[B, C\\]"):
        objective.constraint_statistics(scores[:, 0], batch)


def test_at_the_start_every_constraint_is_exactly_on_its_bound(clip_dir, bdd_root, tmp_path):
    root, _ = bdd_root
    dm = datamodule(root, tmp_path)
    dm.setup("fit")
    module = SONEX(tiny_clip(clip_dir), ContinualLearningObjective(target=FOGGY), data_sizes=dm.sizes, smoothing=0.001,
                   state_dtype="float64").double()
    assert module.state.num_rows == 5
    # on the full training data, through the violation logger's reduction: h_k(w_0) = 0 exactly
    loader = DataLoader(dm.train_dataset, batch_sampler=SequentialShardSampler(len(dm.train_dataset), 16),
                        collate_fn=identity_collate)
    batches = ({**b, "x": b["x"].double()} for b in loader)
    sums, counts = accumulate_constraint_statistics(module, batches)
    assert counts.flatten().tolist() == [dm.class_counts[c] for c in range(5)]
    assert torch.equal(constraint_values(module, sums, counts), torch.zeros(5, dtype=torch.float64))
    # SONEX's first step: u_k = ĝ_k(w_0) = 0 on every row, so every multiplier estimate is 0
    batch = next(iter(dm.train_dataloader()))
    batch["x"] = batch["x"].double()
    assert sorted(set(batch["y"].tolist())) == list(range(6))  # class-balanced: every class in every batch
    module.compositional_loss(module(batch), batch)
    assert torch.equal(module.state.values(), torch.zeros(5, 1, dtype=torch.float64))
    assert torch.equal(module.penalty_weights(), torch.zeros(5, dtype=torch.float64))
    # with a slack ε the bound is −ε
    slack = ContinualLearningObjective(target=FOGGY, slack=0.25).double()
    slack.bind_sizes(dm.sizes)
    slack.bind_model(module.model)
    sums, counts = slack.constraint_statistics(module(batch), batch)
    torch.testing.assert_close(sums / counts, torch.full((5, 1), -0.25, dtype=torch.float64), rtol=0, atol=1e-15)


def _contrastive_batch(seed, labels, index):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(labels)
    return {"x": torch.randn(labels.numel(), 3, 32, 32, generator=g, dtype=torch.float64), "y": labels,
            "index": torch.tensor(index)}


def _constraint_term(module, scores, batch):
    """SONEX's constraint part of the surrogate, from its (already updated) state."""
    inner = module.objective.inner(scores, batch)
    u = module.state.values().index_select(0, inner.index)
    return (module.outer_weight(u, inner.context) * inner.value).sum(-1).mean()


def test_sonex_tracks_the_contrastive_inner_means_with_msvr(clip_dir):
    """The paper's modified SONEX (F.3): the global contrastive loss's inner means get their own per-image state,
    updated by the same MSVR rule as the constraints (γ, γ' with the batch at w_{t−1}), and the step's estimator
    weighs ∇ĝ_{0,a} by ∇f_0(u_{0,a}) = τn/(1 + nu); with γ = 1, γ' = 0 (exact state) it is the gradient of the plug-in."""
    gamma, gamma_prime = 0.8, 0.1
    sizes = {"num_samples": 20, "num_classes": 6, "num_outputs": 6, "num_class_5": 4}  # n = 16 contrast samples
    torch.manual_seed(0)
    module = SONEX(tiny_clip(clip_dir), ContinualLearningObjective(target=FOGGY), data_sizes=sizes, smoothing=0.001,
                   ema_weight=gamma, correction_weight=gamma_prime, state_dtype="float64").double()
    objective = module.objective
    assert module.direct_state.num_rows == 20 and module.direct_state.dim == 2
    perturb(module.model, seed=1)  # away from w_old, so the constraints are not all on their bound
    b1 = _contrastive_batch(1, [0, 1, 5, 2, 3, 4, 5, 1], [0, 1, 3, 4, 5, 6, 7, 8])  # target images: rows 3 and 7
    b2 = _contrastive_batch(2, [5, 0, 2, 5, 3, 4, 1], [3, 9, 10, 11, 12, 13, 14])  # rows 3 (again) and 11 (new)

    w0 = copy.deepcopy(module.model)
    module.compositional_loss(module(b1), b1)
    first = objective.contrastive.inner(w0(b1["x"]), b1)
    torch.testing.assert_close(module.direct_state.values()[[3, 7]], first.value.detach(), rtol=1e-12, atol=0)
    untouched = torch.ones(20, dtype=torch.bool)
    untouched[[3, 7]] = False
    assert torch.isnan(module.direct_state.values()[untouched]).all()  # only the batch's target images are touched

    perturb(module.model, seed=2)  # w1 (as an optimizer step would)
    scores = module(b2)
    loss, estimate = module.compositional_loss(scores, b2)
    now = objective.contrastive.inner(module.model(b2["x"]), b2).value.detach()  # rows 3, 11 at w1
    before = objective.contrastive.inner(w0(b2["x"]), b2).value.detach()  # the same batch at w0 = w_{t−1}
    expected = torch.stack([
        (1 - gamma) * first.value.detach()[0] + gamma * now[0] + gamma_prime * (now[0] - before[0]),
        now[1],  # first visit: u := ĝ
    ])
    u = module.direct_state.values()[[3, 11]]
    torch.testing.assert_close(u, expected, rtol=1e-12, atol=0)
    assert not torch.allclose(u[0], now[0])  # the MSVR average differs from the fresh value

    # the estimator: mean_a ⟨τn/(1 + nu_a), ∇ĝ_{0,a}⟩ plus the constraints' part; the logged value adds mean_a f_0(u_a)
    g = objective.contrastive.inner(scores, b2).value
    reference = (TAU * 16 / (1 + 16 * expected) * g).sum(-1).mean() + _constraint_term(module, scores, b2)
    params = [p for _, p in module.trainable()]
    compared = 0
    for got, want in zip(torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True),
                         torch.autograd.grad(reference, params, allow_unused=True)):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)
            compared += 1
    assert compared > 10  # the image and text towers' parameters, not a vacuous loop
    constraints = objective.outer(module.state.values(), {})
    torch.testing.assert_close(estimate, constraints + TAU * torch.log1p(16 * expected).sum(-1).mean(), rtol=1e-12, atol=0)

    # a batch of target images only estimates no contrastive mean: u_0 keeps its rows (and u_0 lives on u ≥ 0)
    kept = module.direct_state.values().clone()
    only_targets = _contrastive_batch(3, [5, 5, 5], [3, 11, 15])
    assert objective.contrastive.inner(module(only_targets), only_targets).index.numel() == 0
    module.compositional_loss(module(only_targets), only_targets)
    torch.testing.assert_close(module.direct_state.values(), kept, rtol=0, atol=0, equal_nan=True)
    assert module.direct_state.lower.tolist() == [0.0, 0.0] and module.direct_state.has_bounds

    # exact state (γ = 1, γ' = 0): the step is the gradient of the plug-in objective, direct() + constraints
    exact = SONEX(copy.deepcopy(module.model), ContinualLearningObjective(target=FOGGY), data_sizes=sizes, smoothing=0.001,
                  ema_weight=1.0, correction_weight=0.0, state_dtype="float64").double()
    scores = exact(b2)
    loss, _ = exact.compositional_loss(scores, b2)
    truth = exact.objective.direct(scores, b2) + _constraint_term(exact, scores, b2)
    params = [p for _, p in exact.trainable()]
    grads = list(zip(torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True),
                     torch.autograd.grad(truth, params, allow_unused=True)))
    assert sum(want is not None for _, want in grads) > 10
    for got, want in grads:
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)


@pytest.mark.slow
def test_old_model_gets_no_gradient_and_stays_frozen_through_steps_and_a_resume(clip_dir, bdd_root, tmp_path):
    root, _ = bdd_root

    def build(model):
        return SONEX(model, ContinualLearningObjective(target=FOGGY), data_sizes=datamodule(root, tmp_path).sizes, smoothing=0.001,
                     optimizer=lambda p: AdaptiveMomentum(p, lr=1e-3, bias_correction=True))

    torch.manual_seed(1)
    model = tiny_clip(clip_dir, torch.float32)
    module = build(model)
    old = module.objective.old_model
    initial = {k: v.clone() for k, v in old.state_dict().items()}
    assert initial.keys() == model.state_dict().keys()
    assert all(not p.requires_grad for p in old.parameters()) and not old.training
    trainable = {id(p) for _, p in module.trainable()}
    assert trainable and not trainable & {id(p) for p in old.parameters()}
    assert not any(name.startswith("objective.") for name in module.previous.names)  # SONEX's w_{t−1} copy

    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[checkpoints])
    trainer.fit(module, datamodule=datamodule(root, tmp_path))
    optimized = {id(p) for group in trainer.optimizers[0].param_groups for p in group["params"]}
    assert optimized == trainable
    assert module.objective.old_model is old and not old.training
    assert all(p.grad is None for p in old.parameters())
    assert all(torch.equal(v, initial[k]) for k, v in old.state_dict().items())
    assert not torch.equal(model.clip.visual_projection.weight, initial["clip.visual_projection.weight"])  # w moved
    assert module.state.visited().all()

    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)
    prefix = "objective.old_model."
    stored = {k[len(prefix):]: v for k, v in saved["state_dict"].items() if k.startswith(prefix)}
    assert stored.keys() == initial.keys() and all(torch.equal(v, initial[k]) for k, v in stored.items())
    assert all(len(group["params"]) == len(trainable) for group in saved["optimizer_states"][0]["param_groups"])

    # a module built from other weights (its own copy differs) gets w_old back from the checkpoint and keeps it
    other = tiny_clip(clip_dir, torch.float32)
    perturb(other, seed=7, scale=0.5)
    resumed = build(other)
    assert not torch.equal(resumed.objective.old_model.clip.visual_projection.weight, initial["clip.visual_projection.weight"])
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    trainer.fit(resumed, datamodule=datamodule(root, tmp_path), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert trainer.global_step == 4
    kept = resumed.objective.old_model
    assert all(torch.equal(v, initial[k]) for k, v in kept.state_dict().items())
    assert all(p.grad is None and not p.requires_grad for p in kept.parameters())
    assert not torch.equal(resumed.model.clip.visual_projection.weight, saved["state_dict"]["model.clip.visual_projection.weight"])
    resumed.double()  # the old model moves with the module (device and dtype)
    assert kept.clip.visual_projection.weight.dtype == torch.float64


def test_old_model_from_a_checkpoint_path(clip_dir, tmp_path):
    torch.manual_seed(3)
    previous = tiny_clip(clip_dir)
    perturb(previous, seed=5)
    torch.save({"state_dict": {f"model.{k}": v for k, v in previous.state_dict().items()}}, tmp_path / "stage1.ckpt")
    objective = ContinualLearningObjective(target=FOGGY, protected=[0, 2, 3, 4], old_weights_path=tmp_path / "stage1.ckpt")
    model = tiny_clip(clip_dir)
    objective.bind_model(model)  # target overcast-style: 4 constraints, the copy's weights from the file
    assert objective.num_constraints == 4
    assert all(torch.equal(v, previous.state_dict()[k]) for k, v in objective.old_model.state_dict().items())
    assert not torch.equal(model.clip.visual_projection.weight, previous.clip.visual_projection.weight)


# ---------------------------------------------------------------------------------------------- the config
@pytest.mark.slow
def test_config_runs_end_to_end_through_the_cli_and_logs_every_constraint(bdd_root, tmp_path):
    root, _ = bdd_root
    clip = write_tiny_clip(tmp_path / "clip")  # 224 × 224 crops, as the config
    result = main([
        "fit", "--config", str(CONFIG), "--data.root", str(root),
        "--model.init_args.model.init_args.pretrained_path", str(clip),
        "--trainer.max_epochs", "1", "--data.init_args.num_batches", "2", "--data.init_args.num_workers", "0",
        "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "logs"), "--trainer.default_root_dir", str(tmp_path),
    ])
    module = result.model
    objective = module.objective
    assert isinstance(objective, ContinualLearningObjective) and objective.temperature == TAU and objective.target == FOGGY
    assert objective.protected == [0, 1, 2, 3, 4] and module.state.num_rows == 5 and module.state.visited().all()
    assert (module.smoothing, module.ema_weight, module.correction_weight) == (0.001, 0.8, 0.1)
    assert result.trainer.global_step == 2
    events = EventAccumulator(str(next((tmp_path / "logs").rglob("events.out.tfevents*")).parent))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"train/objective", "train/max_violation", "train/num_violated", "val/max_violation", "val/num_violated"}
    expected |= {f"{stage}/{kind}_{k}" for stage in ("train", "val") for kind in ("constraint", "multiplier") for k in range(5)}
    assert expected <= tags, expected - tags
    worst = events.Scalars("val/max_violation")[-1].value
    each = [events.Scalars(f"val/constraint_{k}")[-1].value for k in range(5)]
    assert worst == pytest.approx(max(each))


@pytest.mark.ddp
@pytest.mark.slow
def test_two_processes_equal_one_process(clip_dir, bdd_root, tmp_path):
    """SONEX on the continual objective: 2 gloo processes (each with half of every class-balanced batch) train
    exactly as 1 process on the same global batches: the contrastive term and the constraints' class means are
    taken over the global batch, with the old model's scores computed by each rank on its own images."""
    import shutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "objectives"))  # the DDP runner of the constrained tests
    from test_constrained import assert_same, launch, load_runner

    root, _ = bdd_root
    data = tmp_path / "data"
    shutil.copytree(root, data)
    shutil.copytree(clip_dir, data / "clip")
    runner = load_runner()
    (tmp_path / "one").mkdir()
    runner.run("continual", 1, 6, str(tmp_path / "one"), data=str(data))
    one = torch.load(tmp_path / "one" / "rank0.pt", weights_only=False)
    two = launch(["--algo", "continual", "--max-steps", "6", "--data", str(data)], tmp_path / "two")
    assert one["step"] == two[0]["step"] == 6
    assert_same(two[0], two[1], exact=True)
    assert_same(one, two[0])
    state = one["module"]["state.value"]
    assert torch.isfinite(state).all() and (state != 0).any()  # every constraint tracked, not all on the bound
    tracked = one["module"]["direct_state.value"]  # the contrastive means of the target images seen, on both sides
    assert torch.isfinite(tracked).any()  # (assert_same compared it across the runs, NaN rows included)
    moved = [k for k, v in one["module"].items() if k.startswith("model.") and v.is_floating_point()]
    assert moved
    for step, (_, _, indices) in one["trace"].items():
        assert sorted(two[0]["trace"][step][2] + two[1]["trace"][step][2]) == sorted(indices)
