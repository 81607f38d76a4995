"""The non-smooth FCCO problems the SONEX and ALEXR2 tests share: full batches whose inner values are exact, and
the constrained toy problem with a known answer (all float64)."""

import warnings

import pytest
import torch
from torch import nn

from fccolit.models import LinearScorer
from fccolit.objectives.base import InnerBatch
from fccolit.objectives.constrained import ConstrainedObjective, GroupDROCVaRLoss

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*LeafSpec.*")

D = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

# ---------------------------------------------------------------------- fixtures: problems with exact full batches
def gdro_batch(n_groups=6, per_group=20, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_groups * per_group, d, generator=g, dtype=D)
    group = torch.arange(n_groups).repeat_interleave(per_group)
    shift = torch.randn(n_groups, d, generator=g, dtype=D)
    y = ((x + shift[group]).sum(-1) + 0.5 * torch.randn(x.shape[0], generator=g, dtype=D) > 0).long()
    return {"x": x, "y": y, "group": group, "index": torch.arange(x.shape[0])}


def fairness_batch(n=80, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=D)
    group = (torch.rand(n, generator=g) < 0.4).long()
    y = ((x[:, 0] + 0.7 * group + 0.5 * torch.randn(n, generator=g, dtype=D)) > 0.2).long()
    return {"x": x, "y": y, "group": group, "index": torch.arange(n)}


def build(cls, model, objective, batch, seed=0, **kw):
    torch.manual_seed(seed)
    sizes = {"num_features": batch["x"].shape[1], "num_groups": int(batch["group"].max()) + 1}
    return cls(model, objective, data_sizes=sizes, state_dtype="float64", **kw).double()


def flat_grad(module, loss):
    params = [p for p in module.parameters() if p.requires_grad]
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, allow_unused=False)])


def median_group_loss(batch):
    torch.manual_seed(0)
    model = LinearScorer(batch["x"].shape[1]).double()
    _, means = GroupDROCVaRLoss().group_means(model(batch["x"]), batch)
    return float(means.detach().median())


# ---------------------------------------------------------------------- the toy problem with a known answer
A = (1.0, 0.0)


class Point(nn.Module):
    """The "model" of the toy problem: its output is the decision variable w ∈ R² itself."""

    def __init__(self, start=(0.5, 0.5)):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(start, dtype=D))

    def forward(self, x):
        return self.w


class ToyProblem(ConstrainedObjective):
    """min ½‖w − a‖² s.t. w_1 ≤ 0, a = (1, 0): KKT point w* = 0, multiplier ν* = 1 (m = 1)."""

    num_constraints = 1

    def direct(self, scores, batch):
        return 0.5 * (scores - torch.tensor(A, dtype=scores.dtype)).square().sum()

    def inner(self, scores, batch):
        return InnerBatch(index=torch.zeros(1, dtype=torch.long), value=scores[:1].reshape(1, 1))


TOY_BATCH = {"x": torch.zeros(1, 1, dtype=D)}


def run_toy(module, steps, lr):
    params = [p for _, p in module.trainable()]
    trace = []
    for _ in range(steps):
        loss, _ = module.compositional_loss(module(TOY_BATCH), TOY_BATCH)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        trace.append(module.model.w.detach().clone())
    return torch.stack(trace)


def toy_module(cls, penalty, rho, **kw):
    """The toy problem under algorithm ``cls`` (``kw``: the algorithm's arguments, e.g. its smoothing λ)."""
    return cls(Point(), ToyProblem(penalty, rho), data_sizes={"num_samples": 1}, state_dtype="float64", **kw).double()
