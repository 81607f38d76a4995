"""GDRO-CVaR and ROC-fairness objectives against brute force, the group batch sampler, the constraint logger, the
configs through the CLI, ALEXR2's mid-loop resume, and (slow) 2-process DDP equal to 1 process."""

import argparse
import importlib.util
import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from builders import DDP_SCRIPTS
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fccolit.cli import main
from fccolit.datamodules.grouped import SyntheticGroupedDataModule
from fccolit.objectives.constrained import GroupDROCVaRLoss, ROCFairnessAUCObjective
from fccolit.objectives.nonsmooth import Hinge
from fccolit.samplers.group import GroupBatchSampler
from fccolit.testing import write_compas_file

warnings.filterwarnings("ignore", ".*does not have many workers.*")

ROOT = Path(__file__).resolve().parents[2]
RUNNER = DDP_SCRIPTS / "ddp_run_nonsmooth.py"
D = torch.float64
pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def load_runner():
    spec = importlib.util.spec_from_file_location("ddp_run_nonsmooth", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fairness_batch(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(n, 3, generator=g, dtype=D),
        "y": (torch.rand(n, generator=g) < 0.35).long(),
        "group": (torch.rand(n, generator=g) < 0.4).long(),
    }


# ---------------------------------------------------------------------- GDRO-CVaR
def test_gdro_cvar_value_is_the_mean_loss_of_the_k_worst_groups():
    g = torch.Generator().manual_seed(1)
    n_groups, k = 8, 2
    objective = GroupDROCVaRLoss(ratio=k / n_groups).double()
    scores = torch.randn(200, generator=g, dtype=D)
    batch = {"y": (torch.rand(200, generator=g) < 0.5).long(), "group": torch.randint(0, n_groups, (200,), generator=g)}
    losses = torch.nn.functional.binary_cross_entropy_with_logits(scores, batch["y"].to(D), reduction="none")
    group_loss = torch.stack([losses[batch["group"] == j].mean() for j in range(n_groups)])
    top_k = group_loss.sort(descending=True).values[:k]
    grid = torch.linspace(float(group_loss.min()) - 1, float(group_loss.max()) + 1, 2001, dtype=D).tolist()
    values = []
    for s in grid + [float(top_k[-1])]:
        with torch.no_grad():
            objective.threshold.fill_(s)
            values.append(float(objective.exact_value(scores, batch)))
    # min over s is attained at s = L_(k) and equals the mean of the k largest group losses
    assert values[-1] == pytest.approx(float(top_k.mean()), abs=1e-14)
    assert min(values) >= float(top_k.mean()) - 1e-14
    # inner values are the group means minus s, sorted by group, and the direct term is s
    inner = objective.inner(scores, batch)
    assert inner.index.tolist() == list(range(n_groups))
    assert torch.allclose(inner.value[:, 0], group_loss - objective.threshold, atol=1e-15)
    assert float(objective.direct(scores, batch)) == float(top_k[-1])  # g_0 = s (the last value set)


def test_gdro_inner_uses_only_the_groups_present_and_cross_entropy():
    objective = GroupDROCVaRLoss(ratio=0.5, loss="cross_entropy").double()
    scores = torch.randn(6, 3, dtype=D)
    batch = {"y": torch.tensor([0, 2, 1, 1, 0, 2]), "group": torch.tensor([4, 4, 9, 9, 9, 4])}
    inner = objective.inner(scores, batch)
    ce = torch.nn.functional.cross_entropy(scores, batch["y"], reduction="none")
    assert inner.index.tolist() == [4, 9]
    assert torch.allclose(inner.value[:, 0], torch.stack([ce[[0, 1, 5]].mean(), ce[[2, 3, 4]].mean()]))
    assert isinstance(objective.outer_fn, Hinge) and objective.outer_fn.rho == pytest.approx(2.0)  # 1/r
    with pytest.raises(ValueError, match="ratio"):
        GroupDROCVaRLoss(ratio=0.0)
    with pytest.raises(ValueError, match="unknown GDRO loss"):
        GroupDROCVaRLoss(loss="hinge")


# ---------------------------------------------------------------------- ROC fairness
def test_roc_fairness_statistics_and_auc_term_equal_brute_force():
    batch = fairness_batch()
    objective = ROCFairnessAUCObjective(thresholds=(-1.0, 0.5), kappa=0.01)
    scores = batch["x"] @ torch.tensor([1.0, -0.5, 0.3], dtype=D)
    s, y, grp = scores.tolist(), batch["y"].tolist(), batch["group"].tolist()
    sig = lambda v: 1 / (1 + torch.exp(torch.tensor(-v, dtype=D)))  # noqa: E731
    expected = []
    for cls in (1, 0):  # TPR rows, then FPR rows
        for tau in (-1.0, 0.5):
            means = []
            for group in (1, 0):  # protected group first
                members = [i for i in range(len(s)) if y[i] == cls and grp[i] == group]
                means.append(sum(float(sig(s[i] - tau)) for i in members) / len(members))
            expected.append(means)
    inner = objective.inner(scores, batch)
    assert inner.index.tolist() == [0, 1, 2, 3]
    assert torch.allclose(inner.value, torch.tensor(expected, dtype=D), atol=1e-14)
    h = objective.constraint_values(inner.value)
    assert torch.allclose(h, torch.tensor([abs(a - b) - 0.01 for a, b in expected], dtype=D), atol=1e-14)
    pairs = [(i, j) for i, j in itertools.product(range(len(s)), repeat=2) if y[i] == 1 and y[j] == 0]
    auc = -sum(float(sig(s[i] - s[j])) for i, j in pairs) / len(pairs)
    assert float(objective.direct(scores, batch)) == pytest.approx(auc, abs=1e-14)
    assert objective.constraint_names() == ["tpr_gap@-1", "tpr_gap@0.5", "fpr_gap@-1", "fpr_gap@0.5"]
    assert objective.num_rows({}) == 4


def test_roc_fairness_leaves_out_constraints_with_an_empty_cell():
    objective = ROCFairnessAUCObjective()
    scores = torch.tensor([0.3, -0.2, 1.0, 0.5], dtype=D)
    batch = {"y": torch.tensor([1, 1, 0, 0]), "group": torch.tensor([0, 1, 0, 0])}  # no negative of group 1
    inner = objective.inner(scores, batch)
    assert inner.index.tolist() == list(range(7))  # only the TPR rows
    assert objective.num_constraints == 14
    assert float(objective.direct(scores[:2], {"y": batch["y"][:2], "group": batch["group"][:2]})) == 0.0


def test_roc_fairness_multipliers_are_the_scaled_penalty_slopes():
    objective = ROCFairnessAUCObjective(thresholds=(0.0,), kappa=0.1, rho=4.0)
    u = torch.tensor([[0.5, 0.45], [0.7, 0.3]], dtype=D)  # gaps 0.05 (feasible) and 0.4 (violated)
    lam = 0.02
    expected = torch.tensor([0.0, min(0.3 / (2 * lam), 4.0)], dtype=D) / 2
    assert torch.allclose(objective.multipliers(u, lam), expected)
    assert torch.allclose(objective.multipliers(u, 0.0), torch.tensor([0.0, 4.0 / 2], dtype=D))


# ---------------------------------------------------------------------- the group batch sampler
def test_group_batches_hold_distinct_groups_with_their_own_samples():
    groups = torch.tensor([0] * 10 + [1] * 3 + [2] * 7 + [4] * 5)  # group 3 is empty
    sampler = GroupBatchSampler(groups, groups_per_batch=2, samples_per_group=4, num_batches=12, seed=3)
    batches = list(sampler.global_batches(sampler.generator(0)))
    used = []
    for batch in batches:
        assert batch.numel() == 8
        block = batch.view(4, 2)  # position j·B1 + g
        for g in range(2):
            ids = groups[block[:, g]]
            assert (ids == ids[0]).all()  # a column is one group
            members = block[:, g].tolist()
            if int(ids[0]) != 1:  # groups with >= 4 members never repeat a sample within a batch
                assert len(set(members)) == 4
        assert int(groups[block[0, 0]]) != int(groups[block[0, 1]])  # distinct groups
        used += groups[block[0]].tolist()
    assert set(used) == {0, 1, 2, 4}
    # each pass over the groups visits each group once (4 groups, 2 per batch: passes of 2 batches)
    for b in range(0, 12, 2):
        assert sorted(groups[batches[b].view(4, 2)[0]].tolist() + groups[batches[b + 1].view(4, 2)[0]].tolist()) == [0, 1, 2, 4]


def test_group_batches_give_each_rank_whole_groups_and_resume():
    groups = torch.arange(8).repeat_interleave(6)
    full = GroupBatchSampler(groups, 4, 3, seed=1)
    ranks = [GroupBatchSampler(groups, 4, 3, seed=1, rank=r, world_size=2) for r in range(2)]
    for epoch in (0, 1):
        for s in [full, *ranks]:
            s.set_epoch(epoch)
        for whole, parts in zip(list(full), zip(*[list(r) for r in ranks])):
            assert sorted(parts[0] + parts[1]) == sorted(whole)
            g0, g1 = set(groups[parts[0]].tolist()), set(groups[parts[1]].tolist())
            assert len(g0) == 2 and len(g1) == 2 and not g0 & g1  # whole groups per rank
            for part in parts:
                assert [groups[i] for i in part].count(groups[part[0]]) == 3  # all B2 samples of a group
    # mid-epoch resume continues with exactly the remaining batches
    full.set_epoch(1)
    expected = list(full)
    state = full.state_dict(batches_consumed=3)
    resumed = GroupBatchSampler(groups, 4, 3, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert list(resumed) == expected[3:]
    with pytest.raises(ValueError, match="cannot be split evenly"):
        list(GroupBatchSampler(groups, 3, 3, rank=0, world_size=2))


def test_paired_and_shuffled_batches():
    groups = torch.arange(6).repeat_interleave(10)
    paired = GroupBatchSampler(groups, 2, 4, paired=True, num_batches=5, seed=0)
    for batch in paired.global_batches(paired.generator(0)):
        first, second = batch[:8].view(4, 2), batch[8:].view(4, 2)
        assert (groups[first[0]] == groups[second[0]]).all()  # the same groups in both halves
        assert not set(first.flatten().tolist()) & set(second.flatten().tolist())  # disjoint samples
    shuffled = GroupBatchSampler(torch.zeros(50, dtype=torch.long), 1, 10, seed=0)
    assert len(shuffled) == 5
    seen = torch.cat(list(shuffled.global_batches(shuffled.generator(0))))
    assert sorted(seen.tolist()) == list(range(50))  # each sample once per pass


def test_synthetic_grouped_data_module():
    data = SyntheticGroupedDataModule(num_groups=6, max_group_size=100, imbalance=5.0, groups_per_batch=2,
                                      samples_per_group=5, seed=0)
    assert data.sizes["num_groups"] == 6 and data.sizes["num_features"] == 10
    data.setup("fit")
    for split in ("train", "val", "test"):
        assert sorted(set(data._splits[split]["group"].tolist())) == list(range(6))
    counts = torch.bincount(data._splits["train"]["group"])
    assert counts.max() > 3 * counts.min()  # unequal groups
    batch = next(iter(data.train_dataloader()))
    assert batch["x"].shape == (10, 10) and len(set(batch["group"].tolist())) == 2


# ---------------------------------------------------------------------- logger, configs, resume (single process)
@pytest.fixture(scope="module")
def compas_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("compas")
    write_compas_file(root, 500, seed=2)
    return root


def exact_constraints(state, split_fields, data_dir):
    """h_i of the runner's ALEXR2 module with ``state``, from one full-split forward (the reference)."""
    runner = load_runner()
    module, _ = runner.build(argparse.Namespace(algo="alexr2", data=str(data_dir)))
    module.load_state_dict(state)
    module.eval()
    split_fields = {**split_fields, "x": split_fields["x"].double()}  # the runs use precision 64-true
    with torch.no_grad():
        sums, counts = module.objective.constraint_statistics(module(split_fields), split_fields)
    return module.objective.constraint_values(sums / counts)


def test_alexr2_run_resumes_mid_loop_and_logs_exact_constraint_values(adult_files, tmp_path):
    runner = load_runner()
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    for d in (full, resumed):
        d.mkdir()
    model, data = runner.run("alexr2", 1, 11, str(full), data=str(adult_files), save_every=4)
    a = torch.load(full / "rank0.pt", weights_only=False)
    ckpt = torch.load(full / "step=4.ckpt", weights_only=False)
    assert int(ckpt["state_dict"]["inner_step"]) == 1  # K = 3: the checkpoint is inside an inner loop
    runner.run("alexr2", 1, 11, str(resumed), data=str(adult_files), resume=str(full / "step=4.ckpt"))
    b = torch.load(resumed / "rank0.pt", weights_only=False)
    assert a["step"] == b["step"] == 11
    for k, v in a["module"].items():
        assert torch.equal(v, b["module"][k]), k
    for oa, ob in zip(a["optimizers"], b["optimizers"]):
        for key in oa["state"]:
            for name, val in oa["state"][key].items():
                if torch.is_tensor(val):
                    assert torch.equal(val, ob["state"][key][name]), (key, name)
    for step, record in b["trace"].items():
        assert a["trace"][step] == record
    # the constraint logger's values (train and validation, at the end of the 9-batch epoch) are the full-split ones
    data.setup("fit")
    for stage, split in (("val", "val"), ("train", "train")):
        h = exact_constraints(a["state_at_validation"], data._splits[split], adult_files)
        logged = a["logged"][stage]
        for i in range(14):
            assert logged[f"{stage}/constraint_{i}"] == pytest.approx(float(h[i]), rel=1e-12, abs=1e-15)
        assert logged[f"{stage}/max_violation"] == pytest.approx(float(h.max()), rel=1e-12)
        assert logged[f"{stage}/num_violated"] == float((h > 0).sum())
        assert f"{stage}/multiplier_13" in logged


def cli(*args):
    return main([*args, "--trainer.enable_progress_bar", "false"])


# The fairness and GDRO configs run (fit and test) in tests/cli/test_configs.py.


def test_constraint_tags_reach_tensorboard(adult_files, tmp_path):
    config = str(ROOT / "configs" / "adult" / "alexr2_fairness.yaml")
    cli("fit", "--config", config, "--data.init_args.root", str(adult_files), "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "3", "--trainer.log_every_n_steps", "1",
        "--trainer.logger.init_args.save_dir", str(tmp_path))
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"val/auroc", "val/max_violation", "val/num_violated", "train/max_violation", "train/objective"}
    expected |= {f"val/constraint_{i}" for i in range(14)} | {f"val/multiplier_{i}" for i in range(14)}
    assert expected <= tags, expected - tags


# ---------------------------------------------------------------------- 2 processes (gloo) equal 1 process
def tensors(result):
    out = {k: (v.nan_to_num(-123.0) if v.is_floating_point() else v) for k, v in result["module"].items()}
    for i, opt in enumerate(result["optimizers"]):
        for key, st in opt["state"].items():
            for name, val in st.items():
                if torch.is_tensor(val):
                    out[f"optimizer{i}.{key}.{name}"] = val
    return out


def launch(args, out):
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(RUNNER), *args, "--devices", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def assert_same(one, two, exact=False):
    a, b = tensors(one), tensors(two)
    assert a.keys() == b.keys()
    for k in a:
        if exact or not a[k].is_floating_point():
            assert torch.equal(a[k], b[k]), k
        else:
            assert torch.allclose(a[k], b[k], rtol=1e-10, atol=1e-12), k


@pytest.mark.ddp
@pytest.mark.slow
def test_sonex_two_processes_equal_one_process(tmp_path):
    runner = load_runner()
    (tmp_path / "one").mkdir()
    runner.run("sonex", 1, 12, str(tmp_path / "one"))
    one = torch.load(tmp_path / "one" / "rank0.pt", weights_only=False)
    two = launch(["--algo", "sonex", "--max-steps", "12"], tmp_path / "two")
    assert one["step"] == two[0]["step"] == 12
    assert_same(two[0], two[1], exact=True)  # identical state on every rank
    assert_same(one, two[0])
    assert float(one["module"]["objective.threshold"]) != 0.0
    for step, (_, _, indices) in one["trace"].items():
        assert sorted(two[0]["trace"][step][2] + two[1]["trace"][step][2]) == sorted(indices)


@pytest.mark.ddp
@pytest.mark.slow
def test_alexr2_two_processes_equal_one_process_resume_and_exact_logger(adult_files, tmp_path):
    runner = load_runner()
    (tmp_path / "one").mkdir()
    runner.run("alexr2", 1, 11, str(tmp_path / "one"), data=str(adult_files))
    one = torch.load(tmp_path / "one" / "rank0.pt", weights_only=False)
    two = launch(["--algo", "alexr2", "--max-steps", "11", "--data", str(adult_files), "--save-every", "4"], tmp_path / "two")
    assert_same(two[0], two[1], exact=True)
    assert_same(one, two[0])
    # a checkpoint written inside an inner loop (k = 2 after 8 steps) resumes to the same trajectory on 2 ranks
    resumed = launch(["--algo", "alexr2", "--max-steps", "11", "--data", str(adult_files),
                      "--resume", str(tmp_path / "two" / "step=8.ckpt")], tmp_path / "resumed")
    for r in range(2):
        assert_same(two[r], resumed[r], exact=True)
    # the logger's values on 2 ranks with unequal shards (4 / 3 rows per evaluation batch) are the 1-process ones
    data = runner.build(argparse.Namespace(algo="alexr2", data=str(adult_files)))[1]
    data.setup("fit")
    for stage in ("train", "val"):
        h = exact_constraints(two[0]["state_at_validation"], data._splits[stage], adult_files)
        for rank in range(2):
            logged = two[rank]["logged"][stage]
            for i in range(14):
                assert logged[f"{stage}/constraint_{i}"] == pytest.approx(float(h[i]), rel=1e-12, abs=1e-15)
            for k, v in one["logged"][stage].items():
                assert logged[k] == pytest.approx(v, rel=1e-10, abs=1e-13), k
