"""Multi-process correctness on CPU (gloo): the per-index state and the weights stay right under DDP.

* two processes equal one process fed the same global batches (state and weights, float64);
* the state is identical on every rank;
* a checkpoint written mid-epoch resumes to exactly the trajectory of the uninterrupted run (1 and 2 processes).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from builders import DDP_SCRIPTS

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

SCRIPT = DDP_SCRIPTS / "ddp_run.py"
STEPS = 45  # 18 batches per epoch: the runs cross two epoch boundaries


def run(out: Path, devices: int, *extra: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(SCRIPT), "--devices", str(devices), "--max-steps", str(STEPS), "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    single = run(root / "single", 1, "--save-every", "7")
    double = run(root / "double", 2, "--save-every", "7")
    single_resumed = run(root / "single_resumed", 1, "--resume", str(root / "single" / "step=21.ckpt"))
    double_resumed = run(root / "double_resumed", 2, "--resume", str(root / "double" / "step=7.ckpt"))
    return single, double, single_resumed, double_resumed


def tensors(result: dict) -> dict[str, torch.Tensor]:
    out = {k: v.nan_to_num(-123.0) for k, v in result["module"].items() if v.is_floating_point()}
    for k, st in result["optimizer"]["state"].items():
        out[f"optimizer.{k}"] = st["momentum_buffer"]
    return out


def test_runs_took_every_step(runs):
    for group in runs:
        assert all(r["step"] == STEPS for r in group)


def test_state_is_identical_on_every_rank(runs):
    _, double, _, double_resumed = runs
    for group in (double, double_resumed):
        a, b = tensors(group[0]), tensors(group[1])
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_two_processes_equal_one_process(runs):
    single, double, _, _ = runs
    one, two = tensors(single[0]), tensors(double[0])
    assert "state.value" in one and (one["state.value"] != -123.0).any()
    for k in one:
        assert torch.allclose(one[k], two[k], rtol=1e-10, atol=1e-12), k
    # both saw the same global batches: the union of the ranks' batches is the single process's batch
    for step, (epoch, batch_idx, indices) in single[0]["trace"].items():
        merged = double[0]["trace"][step][2] + double[1]["trace"][step][2]
        assert sorted(merged) == sorted(indices), step


def test_resume_mid_epoch_reproduces_the_trajectory(runs):
    single, double, single_resumed, double_resumed = runs
    for full, resumed in ((single, single_resumed), (double, double_resumed)):
        for r in range(len(full)):
            a, b = tensors(full[r]), tensors(resumed[r])
            for k in a:
                assert torch.equal(a[k], b[k]), (r, k)
            # the resumed run saw exactly the batches the uninterrupted one saw at those steps
            for step, record in resumed[r]["trace"].items():
                assert full[r]["trace"][step] == record, (r, step)


# configs/trainer/ddp.yaml composed with the quickstart runs on two CPU processes in tests/cli/test_configs.py.
