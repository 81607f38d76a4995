"""What every FCCO algorithm must satisfy (fccolit/algorithms/base.py's step template), checked for each one.

The shared tester of the algorithms, in the spirit of torchmetrics' ``MetricTester``: every single-loop algorithm
built on :class:`~fccolit.algorithms.base.FCCOModule` (and ALEXR2's inner step, which takes the same template) is run
on a problem whose batch is the whole data set, in float64, and must

* give the autograd gradient of its objective F (F_λ for the smoothed ones) on its first step, where the first visit
  sets ``u = ĝ = g`` exactly: the template's estimator is the chain rule;
* resume from its state dict to the same next step, bit for bit (state rows, loss and gradient);
* take only its hooks' share of the step: the template calls each of the four hooks once per tracked sum and step.

A new algorithm joins by adding a row to ``CASES``.
"""

from __future__ import annotations

import pytest
import torch

from fccolit.algorithms import ADAP, ALEXR2, BSGD, KSONG, MOAP, MOAPV1, MOAPV2, SOAP, SOLC, SONEX, SONG, SONX, SOX
from fccolit.algorithms import PenaltySOX
from fccolit.algorithms.base import FCCOModule
from fccolit.models import MLP, LinearScorer
from fccolit.models.ltr import ListMLP
from fccolit.objectives import AveragePrecisionSurrogate, NDCGSurrogate, ROCFairnessAUCObjective, SOLCListwiseCELoss

D = torch.float64
HOOKS = ("inner_estimates", "update_state", "estimator_weights", "plug_in_estimate")

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def binary_problem():
    g = torch.Generator().manual_seed(0)
    n, d, m = 30, 4, 8
    x = torch.randn(n, d, generator=g, dtype=D)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(m)
    batch = {"x": x, "y": y, "index": torch.arange(n), "pos_index": pos_index}
    return batch, {"num_samples": n, "num_positives": m, "num_features": d}


def ranking_problem():
    from builders import float64_batch, whole_list_ltr_data

    data = whole_list_ltr_data()
    return float64_batch(data.full_batch()), data.sizes


def fairness_problem():
    g = torch.Generator().manual_seed(0)
    n, d = 80, 4
    x = torch.randn(n, d, generator=g, dtype=D)
    group = (torch.rand(n, generator=g) < 0.4).long()
    y = ((x[:, 0] + 0.7 * group + 0.5 * torch.randn(n, generator=g, dtype=D)) > 0.2).long()
    batch = {"x": x, "y": y, "group": group, "index": torch.arange(n)}
    return batch, {"num_features": d, "num_groups": 2, "num_samples": n}


def ap():
    return AveragePrecisionSurrogate()


def fairness():
    return ROCFairnessAUCObjective(kappa=0.0, penalty="squared_hinge", rho=50.0)


#: name → (algorithm, problem, model, objective, keyword arguments)
CASES: dict[str, tuple] = {
    "SOX": (SOX, binary_problem, LinearScorer, ap, {}),
    "SOX-fresh": (SOX, binary_problem, LinearScorer, ap, {"u_for_gradient": "fresh", "ema_weight": 0.3}),
    "BSGD": (BSGD, binary_problem, LinearScorer, ap, {}),
    "SOAP": (SOAP, binary_problem, LinearScorer, ap, {}),
    "MOAP": (MOAP, binary_problem, LinearScorer, ap, {}),
    "MOAPV1": (MOAPV1, binary_problem, LinearScorer, lambda: AveragePrecisionSurrogate(project=True), {}),
    "MOAPV2": (MOAPV2, binary_problem, LinearScorer, lambda: AveragePrecisionSurrogate(project=True), {}),
    "ADAP": (ADAP, binary_problem, LinearScorer, lambda: AveragePrecisionSurrogate(project=True), {}),
    "SONG": (SONG, ranking_problem, lambda: ListMLP(hidden=[4]), NDCGSurrogate, {}),
    "SOLC": (SOLC, ranking_problem, lambda: ListMLP(hidden=[4]), SOLCListwiseCELoss, {}),
    "SONEX": (SONEX, fairness_problem, lambda: MLP(hidden=[6]), fairness, {"smoothing": 0.0}),
    "SONX": (SONX, fairness_problem, lambda: MLP(hidden=[6]), fairness, {}),
    "PenaltySOX": (PenaltySOX, fairness_problem, lambda: MLP(hidden=[6]), fairness, {}),
    "ALEXR2": (ALEXR2, fairness_problem, lambda: MLP(hidden=[6]), fairness, {"smoothing": 0.0, "independent_batches": False}),
}


def build(name: str) -> tuple[FCCOModule, dict[str, torch.Tensor]]:
    cls, problem, model, objective, kwargs = CASES[name]
    batch, sizes = problem()
    torch.manual_seed(0)
    module = cls(model(), objective(), data_sizes=sizes, state_dtype="float64", **kwargs).double()
    return module, batch


def step(module: FCCOModule, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The template's loss and its gradient over the trainable parameters; ALEXR2's inner step takes its value batch
    without gradient and the gradient batch (here the same rows) separately, as its training_step does."""
    if isinstance(module, ALEXR2):
        module.ensure_anchor()
        with torch.no_grad():
            scores = module(batch)
        loss, _ = module.compositional_loss(scores, batch, batch)
    else:
        loss, _ = module.compositional_loss(module(batch), batch)
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return loss.detach(), torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                                     for g, p in zip(grads, params)])


def true_gradient(module: FCCOModule, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    objective = module.objective
    value = objective.exact_value(module(batch), batch)
    direct = getattr(objective, "direct", None)
    if direct is not None and not module.adds_direct_term and getattr(module, "direct_state", None) is None:
        value = value - direct(module(batch), batch)  # SOX-type modules leave g_0 out
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(value, params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])


@pytest.mark.parametrize("name", CASES)
def test_the_first_step_is_the_exact_gradient_of_F(name):
    module, batch = build(name)
    expected = true_gradient(module, batch)
    _, estimator = step(module, batch)
    assert expected.abs().max() > 1e-4  # not a vacuous comparison
    assert torch.allclose(estimator, expected, rtol=1e-9, atol=1e-12), (estimator - expected).abs().max()


def rows_of(batch: dict[str, torch.Tensor], keep: torch.Tensor) -> dict[str, torch.Tensor]:
    n = batch["x"].shape[0]
    return {k: v[keep] if torch.is_tensor(v) and v.shape[:1] == (n,) else v for k, v in batch.items()}


@pytest.mark.parametrize("name", CASES)
def test_a_module_restored_from_the_state_dict_takes_the_same_next_step(name):
    module, batch = build(name)
    step(module, batch)
    with torch.no_grad():  # move the parameters, so the next step sees other inner values
        for p in module.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    restored, _ = build(name)
    restored.load_state_dict(module.state_dict())
    loss_a, grad_a = step(module, batch)
    loss_b, grad_b = step(restored, batch)
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b)
    for (name_a, a), (_, b) in zip(module.state_dict().items(), restored.state_dict().items()):
        if torch.is_tensor(a):
            assert torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0)), name_a


@pytest.mark.parametrize("name", CASES)
def test_the_template_calls_each_hook_once_per_tracked_sum(name, monkeypatch):
    module, batch = build(name)
    calls: dict[str, int] = {hook: 0 for hook in HOOKS}
    for hook in HOOKS:
        original = getattr(module, hook)

        def counting(*args, _hook=hook, _original=original, **kwargs):
            calls[_hook] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, hook, counting)
    step(module, batch)
    assert calls == {hook: len(module.tracked_sums) for hook in HOOKS}


def test_every_algorithm_of_the_package_is_in_the_tester():
    """A new single-loop algorithm of fccolit.algorithms must join CASES (the pAUC double loops and KSONG, whose
    objective is the bilevel top-K one, are tested in their own modules; Supervised and MiniBatchRanking have no
    FCCO step)."""
    import fccolit.algorithms as algorithms

    covered = {CASES[name][0] for name in CASES}
    left_out = {KSONG, algorithms.Supervised, algorithms.MiniBatchRanking, algorithms.RankingSOX, FCCOModule}
    single_loop = {cls for cls in map(algorithms.__dict__.get, algorithms.__all__)
                   if isinstance(cls, type) and issubclass(cls, FCCOModule) and "pauc" not in cls.__module__}
    assert single_loop - left_out <= covered, sorted(c.__name__ for c in single_loop - left_out - covered)


def test_hooks_take_no_objective_state_or_synced_argument():
    """The four hooks' signatures are the contract of the README's extension guide."""
    import inspect

    expected: dict[str, list[str]] = {
        "inner_estimates": ["scores", "batch"], "update_state": ["inner"], "estimator_weights": ["u", "inner"],
        "plug_in_estimate": ["u", "inner"],
    }
    for name, _cls in [(n, c[0]) for n, c in CASES.items()] + [("KSONG", KSONG)]:
        for hook, params in expected.items():
            signature = inspect.signature(getattr(_cls, hook))
            assert list(signature.parameters)[1:] == params, (name, hook, signature)

