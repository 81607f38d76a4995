"""Every FCCOObjective satisfies the contract of fccolit/objectives/base.py (``objective_tester``): shapes of the inner
and outer values, ``outer_grad`` equal to the autograd gradient of ``outer`` (float64), ``state_bounds`` consistent
with the estimates, ``bind_sizes``; and the objectives that need the global batch train under DDP (2 gloo processes)
exactly as one process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from builders import free_port
from torch import nn

from objective_helpers import binary_data, multiclass_data, ranking_data
from objective_tester import check_fcco_objective

from fccolit.objectives import (
    AveragePrecisionSurrogate, ContinualLearningObjective, GroupDROCVaRLoss, ListwiseCELoss, NCALoss, NDCGSurrogate,
    PNormPushLoss, ROCFairnessAUCObjective, SOLCListwiseCELoss, TopKNDCGSurrogate,
)
from fccolit.objectives.continual import GlobalContrastiveLoss


def _binary(extra=None):
    fields, sizes = binary_data(n=16, d=3, m=5, seed=1)
    scores = fields["x"] @ torch.tensor([0.7, -0.4, 0.2], dtype=torch.float64)
    if extra:
        fields = {**fields, **extra(fields)}
        sizes = {**sizes, "num_groups": 2}
    return scores, fields, sizes


def _ranking():
    batch, sizes = ranking_data()
    gain = (2.0 ** batch["relevance"] - 1.0).sort(1, descending=True).values
    discount = 1.0 / torch.log2(torch.arange(2, gain.shape[1] + 2, dtype=torch.float64))
    batch = {**batch, "ideal_dcg": (gain * discount).sum(1), "ideal_dcg_at_k": (gain[:, :2] * discount[:2]).sum(1)}
    return batch["x"].sum(-1), batch, sizes


def _groups(fields):
    return {"group": torch.arange(fields["y"].shape[0]) % 2}


def _continual():
    torch.manual_seed(0)
    model = nn.Linear(3, 4).double()
    x = torch.randn(12, 3, dtype=torch.float64)
    batch = {"x": x, "y": torch.arange(12) % 4, "index": torch.arange(12)}
    objective = ContinualLearningObjective(target=0, num_contrast=9)
    objective.bind_model(model)
    with torch.no_grad():
        model.weight.add_(0.1)  # w ≠ w_old: the constraints are not all 0
    return objective, model(x).detach(), batch, {"num_samples": 12, "num_classes": 4}


CASES = {
    "ap": lambda: (AveragePrecisionSurrogate(), *_binary()),
    "ap_reweighted_sum_projected": lambda: (AveragePrecisionSurrogate(inner_estimator="reweighted", inner_scale="sum",
                                                                      project=True), *_binary()),
    "ap_sigmoid_projected": lambda: (AveragePrecisionSurrogate(surrogate="sigmoid", project=True), *_binary()),
    "pnorm_push": lambda: (PNormPushLoss(), *_binary()),
    "pnorm_push_squared_hinge": lambda: (PNormPushLoss(p=2.5, surrogate="squared_hinge"), *_binary()),
    "nca": lambda: (NCALoss(), multiclass_data()[0]["x"][:, :2], *multiclass_data()),
    "nca_sum": lambda: (NCALoss("sum"), multiclass_data()[0]["x"][:, :2], *multiclass_data()),
    "listwise_ce": lambda: (ListwiseCELoss(), *_ranking()),
    "listwise_ce_stratified": lambda: (ListwiseCELoss("uniform", "stratified"), *_ranking()),
    "solc_listwise_ce": lambda: (SOLCListwiseCELoss(normalization="query_mean"), *_ranking()),
    "ndcg": lambda: (NDCGSurrogate(), *_ranking()),
    "top_k_ndcg": lambda: (TopKNDCGSurrogate(top_k=2, threshold_smoothing=0.1, threshold_regularization=0.01),
                           *_ranking()),
    "group_dro_cvar": lambda: (GroupDROCVaRLoss(ratio=0.5).double(), *_binary(_groups)),
    "roc_fairness": lambda: (ROCFairnessAUCObjective(thresholds=(-0.5, 0.5), penalty="smoothed_hinge", smoothing=0.1),
                             *_binary(_groups)),
    "continual": _continual,
    "global_contrastive": lambda: (GlobalContrastiveLoss(target=0, temperature=0.5, num_contrast=9),
                                   *_continual()[1:]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_objective_satisfies_the_fcco_contract(case):
    objective, scores, batch, sizes = CASES[case]()
    check_fcco_objective(objective, scores, batch, sizes)


def test_the_tester_catches_an_outer_grad_that_is_not_the_gradient_of_outer():
    class WrongGradient(PNormPushLoss):
        def outer_grad(self, u, context):
            return 2.0 * super().outer_grad(u, context)

    with pytest.raises(AssertionError, match="autograd"):
        check_fcco_objective(WrongGradient(), *_binary())


DDP_SCRIPT = textwrap.dedent(
    r'''
    import os, sys, torch, torch.distributed as dist
    sys.path.insert(0, sys.argv[3])
    from fccolit.algorithms.sox import SOX
    from fccolit.models import LinearScorer
    from fccolit.objectives.nca import NCALoss
    from fccolit.objectives.pnorm_push import PNormPushLoss
    from fccolit.optim import Momentum
    from fccolit.data import binary_fields, binary_sizes
    from fccolit.samplers import DualSampler
    from fccolit.samplers.uniform import UniformBatchSampler

    world, out = int(sys.argv[1]), sys.argv[2]
    rank = int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=g, dtype=torch.float64)
    y = (torch.arange(48) % 3 == 0).long()
    fields = binary_fields(x, y)
    results = {}
    for name in ("pnorm", "nca"):
        torch.manual_seed(0)
        if name == "pnorm":
            module = SOX(LinearScorer(bias=False), PNormPushLoss(scale=0.5), data_sizes=binary_sizes(fields),
                         state_dtype="float64", ema_weight=0.4).double()
            sampler = DualSampler(y, 12, 4, seed=0, rank=rank, world_size=world)
        else:
            data = {"x": x, "y": torch.arange(48) % 4, "index": torch.arange(48)}
            module = SOX(torch.nn.Linear(4, 2, bias=False), NCALoss(), data_sizes={"num_samples": 48},
                         state_dtype="float64", ema_weight=0.4).double()
            sampler = UniformBatchSampler(48, 8, seed=0, rank=rank, world_size=world)
        opt = Momentum(module.parameters(), lr=0.1, momentum_weight=0.5)
        src = fields if name == "pnorm" else data
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for idx in sampler:
                batch = {k: v[torch.tensor(idx)] for k, v in src.items()}
                loss, _ = module.compositional_loss(module(batch), batch)
                opt.zero_grad()
                loss.backward()
                for p in module.parameters():  # what DDP does: average the gradients of the ranks
                    if world > 1:
                        dist.all_reduce(p.grad)
                        p.grad /= world
                opt.step()
        results[name] = {"weight": [p.detach().clone() for p in module.parameters()],
                         "state": module.state.value.clone()}
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    '''
)




@pytest.mark.slow
@pytest.mark.ddp
def test_two_processes_equal_one_for_the_global_batch_objectives(tmp_path):
    """p-norm push and NCA gather the scores (NCA: [B, k] embeddings) with gradient: 2 gloo processes fed the
    rank slices of the same global batches end with the weights and state of 1 process (float64)."""
    script = tmp_path / "run.py"
    script.write_text(DDP_SCRIPT)
    repo = str(Path(__file__).resolve().parents[2])
    for world in (1, 2):
        out = tmp_path / f"w{world}"
        out.mkdir()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PYTHONWARNINGS": "ignore"}
        procs = [
            subprocess.Popen([sys.executable, str(script), str(world), str(out), repo],
                             env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(world)
        ]
        for p in procs:
            _, err = p.communicate(timeout=170)
            assert p.returncode == 0, err[-3000:]
    one = torch.load(tmp_path / "w1" / "rank0.pt")
    two = [torch.load(tmp_path / "w2" / f"rank{r}.pt") for r in range(2)]
    for name in ("pnorm", "nca"):
        assert (~one[name]["state"].isnan()).sum() > 10
        for r in range(2):
            assert torch.equal(two[r][name]["state"].nan_to_num(-1.0), two[0][name]["state"].nan_to_num(-1.0))
            for a, b in zip(one[name]["weight"], two[r][name]["weight"]):
                assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), name
        assert torch.allclose(one[name]["state"].nan_to_num(-1.0), two[0][name]["state"].nan_to_num(-1.0),
                              rtol=1e-10, atol=1e-12)


