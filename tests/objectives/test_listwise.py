"""ListwiseCELoss and SOLCListwiseCELoss (fccolit/objectives/listwise.py): ListNet's top-one cross-entropy, the
exact gradient on full lists, the stratified estimator unbiased where the list mean is not, padding ignored, the
weight normalizer's needs; SOLC's form is App. B's cross-entropy and its log-domain inner value is the log of the
inner value."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from objective_helpers import exact_table, grads, make_sox, ranking_data, sox_estimate, whole_lists

from fccolit.objectives.listwise import ListwiseCELoss, SOLCListwiseCELoss


@pytest.mark.parametrize("relevance_weight", ["linear", "uniform", "none"])
@pytest.mark.parametrize("inner_estimator", ["list_mean", "stratified"])
def test_listwise_ce_estimator_is_the_exact_gradient_on_full_lists(relevance_weight, inner_estimator):
    batch, sizes = ranking_data()
    obj = ListwiseCELoss(relevance_weight, inner_estimator)
    module = make_sox(obj, sizes, model=None, ema_weight=1.0)
    true = grads(module, obj.exact_value(module(batch), batch))
    assert true.abs().max() > 1e-3
    for _ in range(2):
        assert torch.allclose(sox_estimate(module, batch), true, rtol=1e-10, atol=1e-13)
    assert module.state.value.shape == (sizes["num_pairs"], 1)


@pytest.mark.parametrize("relevance_weight", ["linear", "uniform", "none"])
def test_listwise_ce_is_listnet_top_one_cross_entropy(relevance_weight):
    """|D|·F = Σ_q −Σ_{i relevant} P_q(y_i) log softmax_i(h over S_q), by a double loop."""
    batch, sizes = ranking_data()
    obj = ListwiseCELoss(relevance_weight)
    module = make_sox(obj, sizes, model=None)
    s = module(batch).detach()
    total = 0.0
    for q in range(s.shape[0]):
        n_q = int(batch["num_items"][q])
        scores, rel = s[q, :n_q].tolist(), batch["relevance"][q, :n_q].tolist()
        log_z = math.log(sum(math.exp(v) for v in scores))
        for i in range(n_q):
            if rel[i] > 0:
                p = {"linear": rel[i] / sum(rel), "uniform": 1 / sum(r > 0 for r in rel), "none": 1.0}[relevance_weight]
                total += -p * (scores[i] - log_z)
    assert float(obj.exact_value(module(batch), batch).detach()) * sizes["num_pairs"] == pytest.approx(total, rel=1e-12)


def test_listwise_ce_linear_weight_is_uniform_for_binary_relevance():
    batch, _ = ranking_data()
    batch["relevance"] = (batch["relevance"] > 0).double()
    scores = batch["x"].sum(-1)
    linear, uniform = ListwiseCELoss("linear").inner(scores, batch), ListwiseCELoss("uniform").inner(scores, batch)
    assert torch.allclose(linear.context["weight"], uniform.context["weight"], rtol=1e-15)
    assert not torch.allclose(linear.context["weight"], torch.ones_like(linear.context["weight"]))


def test_listwise_ce_ignores_padding_whatever_its_scores():
    batch, sizes = ranking_data()
    obj = ListwiseCELoss()
    scores = batch["x"].sum(-1).clone().requires_grad_(True)
    garbage = torch.where(batch["mask"], scores, torch.full_like(scores, 1e4))  # exp(1e4) is inf in float64
    clean = obj.inner(scores, batch)
    dirty = obj.inner(garbage, batch)
    assert torch.isfinite(dirty.value).all() and torch.equal(dirty.value, clean.value)
    (grad,) = torch.autograd.grad(obj.outer(dirty.value, dirty.context).sum(), scores)
    assert torch.isfinite(grad).all() and (grad[~batch["mask"]] == 0).all()


def listwise_lists(num_items, n_rel, p, m, seed=0, features=2):
    """Queries with N_q items, the first n_rel relevant; every list of p relevant and m other items."""
    g = torch.Generator().manual_seed(seed)
    feats = [torch.randn(n, features, generator=g, dtype=torch.float64) for n in num_items]
    rels = [torch.cat([torch.randint(1, 4, (n_rel,), generator=g).double(), torch.zeros(n - n_rel, dtype=torch.float64)])
            for n in num_items]
    offsets = [0] + list(itertools.accumulate([n_rel] * len(num_items)))
    full_l = max(num_items)

    def list_batch(q, items):
        pad = full_l - len(items)
        idx = torch.tensor(items)
        rel = torch.cat([rels[q][idx], torch.zeros(pad, dtype=torch.float64)])
        pair = torch.tensor([offsets[q] + i if i < n_rel else -1 for i in items] + [-1] * pad)
        return {
            "x": torch.cat([feats[q][idx], torch.zeros(pad, features, dtype=torch.float64)]).unsqueeze(0),
            "relevance": rel.unsqueeze(0),
            "mask": torch.tensor([True] * len(items) + [False] * pad).unsqueeze(0),
            "pair_index": pair.unsqueeze(0),
            "num_items": torch.tensor([float(num_items[q])], dtype=torch.float64),
            "num_relevant": torch.tensor([n_rel]),
            "relevance_sum": rels[q].sum().reshape(1),
        }

    full = [list_batch(q, list(range(n))) for q, n in enumerate(num_items)]
    full = {k: torch.cat([b[k] for b in full]) for k in full[0]}
    sampled = [
        list_batch(q, list(a) + list(b))
        for q, n in enumerate(num_items)
        for a in itertools.combinations(range(n_rel), p)
        for b in itertools.combinations(range(n_rel, n), m)
    ]
    weights = [1.0 / (len(num_items) * math.comb(n_rel, p) * math.comb(n - n_rel, m))
               for n in num_items for _ in range(math.comb(n_rel, p) * math.comb(n - n_rel, m))]
    return full, sampled, weights, {"num_pairs": n_rel * len(num_items), "num_features": features}


def test_listwise_ce_stratified_estimator_is_unbiased_and_the_list_mean_is_not():
    """One query per batch, uniformly; its list holds 2 of its 3 relevant items and 2 of its other items
    (every such list enumerated). The stratified SOX estimator's expectation is ∇F; the list mean's is not."""
    full, sampled, weights, sizes = listwise_lists((7, 6, 8), n_rel=3, p=2, m=2, seed=1)
    out = {}
    for estimator in ("stratified", "list_mean"):
        obj = ListwiseCELoss("linear", estimator)
        module = make_sox(obj, sizes, model=None, ema_weight=0.5)
        true = grads(module, obj.exact_value(module(full), full))
        exact = exact_table(module, full)
        total = torch.zeros_like(true)
        for w, b in zip(weights, sampled):
            module.state.value.copy_(exact)
            total += w * sox_estimate(module, b)
        out[estimator] = (total, true)
    total, true = out["stratified"]
    assert torch.allclose(total, true, rtol=1e-10, atol=1e-13)
    total, true = out["list_mean"]
    assert (total - true).norm() > 0.05 * true.norm()


def test_listwise_ce_weight_normalizer_needs_the_whole_relevant_set():
    full, sampled, _, sizes = listwise_lists((7, 6), n_rel=3, p=2, m=2)
    partial = dict(sampled[0])
    del partial["relevance_sum"]
    scores = partial["x"].sum(-1)
    with pytest.raises(ValueError, match="relevance_sum"):
        ListwiseCELoss("linear").inner(scores, partial)
    assert ListwiseCELoss("uniform").inner(scores, partial).context["weight"].tolist() == pytest.approx([1 / 3, 1 / 3])
    with pytest.raises(ValueError, match=r"scores \[B, L\]"):
        ListwiseCELoss().inner(scores.reshape(-1), partial)
    with pytest.raises(KeyError, match="num_relevant"):
        ListwiseCELoss(inner_estimator="stratified").inner(scores, {k: v for k, v in partial.items() if k != "num_relevant"})


@pytest.fixture(scope="module")
def ltr():
    return whole_lists()


# ------------------------------------------------------------------------------------------------ SOLC objective
@pytest.mark.parametrize("list_size_weight", [True, False])
def test_solc_objective_is_the_listwise_cross_entropy_of_app_b(ltr, list_size_weight):
    batch, scores = ltr
    obj = SOLCListwiseCELoss(list_size_weight=list_size_weight)
    expected = 0.0
    for b in range(scores.shape[0]):
        real = batch["mask"][b]
        log_softmax = scores[b] - torch.logsumexp(scores[b][real], 0)
        ce = -(log_softmax[batch["pair_index"][b] >= 0]).sum()
        expected += ce / (real.sum() if list_size_weight else 1.0)
    expected /= scores.shape[0]
    assert float(obj.exact_value(scores, batch)) == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("estimator", ["list_mean", "stratified"])
def test_solc_log_inner_is_the_log_of_the_inner_value(ltr, estimator):
    batch, scores = ltr
    obj = SOLCListwiseCELoss(inner_estimator=estimator)
    assert torch.allclose(obj.log_inner(scores, batch).value, torch.log(obj.inner(scores, batch).value), rtol=1e-12)
    huge = scores * 200.0  # exp of the score gaps overflows; the log-domain value does not
    assert bool(torch.isfinite(obj.log_inner(huge, batch).value).all())
    assert not bool(torch.isfinite(obj.inner(huge, batch).value).all())
