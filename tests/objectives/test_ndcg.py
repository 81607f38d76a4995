"""NDCG objectives (Qiu et al., ICML 2022), the ranking scorers and the NDCG metrics, in float64 against independent
oracles."""

import itertools
import math

import pytest
import torch
from objective_helpers import whole_lists

from fccolit.metrics import FullRankingNDCGScore, NDCGScore
from fccolit.metrics.functional import full_ranking_ndcg, ndcg_at_k
from fccolit.models.ltr import ContextAwareRanker, ListMLP
from fccolit.models.neumf import NeuMF
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate


@pytest.fixture(scope="module")
def ltr():
    return whole_lists()


def brute_force_F(scores, batch, f_of, normalization):
    """Σ over queries and relevant items with python loops over the real entries of each (whole) list."""
    total, pairs = 0.0, 0
    for b in range(scores.shape[0]):
        real = [j for j in range(scores.shape[1]) if batch["mask"][b, j]]
        terms = [f_of(b, i, real) for i in real if batch["pair_index"][b, i] >= 0]
        if normalization == "query_mean":  # every query weighted equally: the mean over its relevant items
            total = total + sum(terms) / len(terms) if terms else total
        else:
            total = total + sum(terms)
        pairs += len(terms)
    return total / (pairs if normalization == "pairs" else scores.shape[0])


def ndcg_term(scores, batch, margin, ideal_key="ideal_dcg"):
    def f(b, i, real):
        gbar = sum(torch.relu(scores[b, j] - scores[b, i] + margin) ** 2 for j in real)  # = N_q · g
        y = batch["relevance"][b, i]
        return (1 - 2**y) / (batch[ideal_key][b] * torch.log2(gbar + 1))
    return f


# ------------------------------------------------------------------------------------------------ NDCG surrogate
@pytest.mark.parametrize("normalization", ["per_query", "pairs", "query_mean"])
@pytest.mark.parametrize("margin", [1.0, 0.5])
def test_exact_value_is_the_surrogate_of_eq_3(ltr, normalization, margin):
    batch, scores = ltr
    obj = NDCGSurrogate(margin=margin, normalization=normalization)
    expected = brute_force_F(scores, batch, ndcg_term(scores, batch, margin), normalization)
    assert float(obj.exact_value(scores, batch)) == pytest.approx(float(expected), rel=1e-12)


def test_outer_gradient_closed_form_matches_autograd(ltr):
    batch, scores = ltr
    obj = NDCGSurrogate()
    ctx = obj.inner(scores, batch).context
    u = torch.rand(len(ctx["gain"]), 1, dtype=torch.float64) + 0.05
    auto = super(NDCGSurrogate, obj).outer_grad(u, ctx)  # autograd of outer
    assert torch.allclose(obj.outer_grad(u, ctx), auto, rtol=1e-12)
    assert bool((obj.outer_grad(u, ctx) > 0).all())  # f increasing: minimizing F pushes ranks down


def test_rank_surrogate_bounds_the_rank_and_the_surrogate_bounds_ndcg(ltr):
    """Lemma 4.1: with c ≥ 1, N_q·g ≥ rank, so the surrogate NDCG (−F per query) is below the true NDCG."""
    batch, scores = ltr
    obj = NDCGSurrogate(margin=1.0, normalization="per_query")
    inner = obj.inner(scores, batch)
    q, a = torch.nonzero(batch["pair_index"] >= 0, as_tuple=True)
    masked = torch.where(batch["mask"], scores, torch.full_like(scores, -math.inf))
    rank = (masked[q] >= scores[q, a].unsqueeze(1)).sum(1)  # counts the item itself
    assert bool((inner.context["num_items"] * inner.value[:, 0] >= rank).all())
    per_pair = -obj.outer(inner.value, inner.context) / inner.context["weight"]  # (2^y − 1)/(Z log2(N g + 1))
    surrogate = torch.zeros(scores.shape[0], dtype=torch.float64).index_add_(0, q, per_pair)
    true = ndcg_at_k(scores, batch["relevance"], mask=batch["mask"])
    assert bool((surrogate <= true + 1e-12).all()) and bool((surrogate > 0).all())


def test_stratified_equals_list_mean_on_whole_lists(ltr):
    batch, scores = ltr
    a = NDCGSurrogate(inner_estimator="list_mean").inner(scores, batch)
    b = NDCGSurrogate(inner_estimator="stratified").inner(scores, batch)
    assert torch.allclose(a.value, b.value, rtol=1e-12) and torch.equal(a.index, b.index)


def test_stratified_inner_estimate_is_unbiased_and_the_list_mean_is_not():
    """One query, 4 relevant and 6 other items; lists of P = 2 relevant (the anchor and one more) and M = 3 others.
    The mean of the estimate over every possible list equals g exactly for "stratified"."""
    g = torch.Generator().manual_seed(1)
    s = torch.randn(10, generator=g, dtype=torch.float64)
    y = torch.tensor([2.0, 1, 3, 1, 0, 0, 0, 0, 0, 0])
    anchor = 0
    exact = torch.relu(s - s[anchor] + 1).square().mean()
    estimates = {"list_mean": [], "stratified": []}
    for other_rel in (1, 2, 3):
        for others in itertools.combinations(range(4, 10), 3):
            idx = torch.tensor([anchor, other_rel, *others])
            batch = {"pair_index": torch.tensor([[0, 1, -1, -1, -1]]), "relevance": y[idx].unsqueeze(0),
                     "mask": torch.ones(1, 5, dtype=torch.bool), "num_items": torch.tensor([10.0]),
                     "num_relevant": torch.tensor([4]), "ideal_dcg": torch.tensor([1.0]), "query": torch.tensor([0])}
            for name in estimates:
                inner = NDCGSurrogate(inner_estimator=name).inner(s[idx].unsqueeze(0), batch)
                estimates[name].append(inner.value[0, 0])
    assert float(torch.stack(estimates["stratified"]).mean()) == pytest.approx(float(exact), rel=1e-12)
    assert abs(float(torch.stack(estimates["list_mean"]).mean()) - float(exact)) > 1e-2


@pytest.fixture(scope="module")
def rec_like():
    """Recommendation layout: P = 3 relevant columns first (one row with a padded positive), then 6 others, one
    padded; every inner set is the row's real entries."""
    g = torch.Generator().manual_seed(8)
    b, p, m = 5, 3, 6
    pair = torch.cat([torch.arange(b * p).view(b, p), torch.full((b, m), -1)], 1)
    mask = torch.ones(b, p + m, dtype=torch.bool)
    pair[2, 2], mask[2, 2], mask[4, 7] = -1, False, False
    relevance = torch.cat([torch.randint(1, 5, (b, p), generator=g).double(), torch.zeros(b, m)], 1) * mask * (pair >= 0)
    batch = {"query": torch.arange(b), "pair_index": pair, "mask": mask, "relevance": relevance,
             "num_items": torch.full((b,), 9.0), "num_relevant": (pair >= 0).sum(1), "ideal_dcg": torch.full((b,), 7.0)}
    return batch, torch.randn(b, p + m, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("surrogate", ["squared_hinge", "logistic"])
@pytest.mark.parametrize("data", ["ltr", "rec_like"])
def test_inner_values_do_not_depend_on_the_order_of_the_list(data, surrogate, request):
    """Leading anchor columns (dense [B, P, L] layout) and shuffled lists (gathered rows) give the same ĝ per pair,
    equal to a direct mean over the real entries; padded scores never matter."""
    batch, scores = request.getfixturevalue(data)
    obj = NDCGSurrogate(surrogate=surrogate, margin=0.7)
    g = torch.Generator().manual_seed(9)
    perm = torch.stack([torch.randperm(scores.shape[1], generator=g) for _ in range(scores.shape[0])])
    shuffled = {k: (v.gather(1, perm) if v.dim() == 2 else v) for k, v in batch.items() if k != "features"}
    wild = torch.where(batch["mask"], scores, torch.full_like(scores, 1e30))
    a, b = obj.inner(wild, batch), obj.inner(scores.gather(1, perm), shuffled)
    order_a, order_b = a.index.argsort(), b.index.argsort()
    assert torch.equal(a.index[order_a], b.index[order_b])
    assert torch.allclose(a.value[order_a], b.value[order_b], rtol=1e-12)
    expected = [obj.loss(scores[q][batch["mask"][q]] - scores[q, i]).mean() for q, i in zip(*anchors_of(batch))]
    assert torch.allclose(a.value[:, 0], torch.stack(expected), rtol=1e-12)


def anchors_of(batch):
    return torch.nonzero(batch["pair_index"] >= 0, as_tuple=True)


def test_zero_self_pair_is_refused():
    with pytest.raises(ValueError, match="self pair"):
        NDCGSurrogate(margin=0.0)


def test_missing_field_and_bad_ideal_dcg_are_clear_errors(ltr):
    batch, scores = ltr
    with pytest.raises(KeyError, match="ideal_dcg_at_k"):
        TopKNDCGSurrogate().inner(scores, {k: v for k, v in batch.items() if k != "ideal_dcg_at_k"})
    bad = dict(batch, ideal_dcg=torch.zeros_like(batch["ideal_dcg"]))
    with pytest.raises(ValueError, match="ideal_dcg"):
        NDCGSurrogate().inner(scores, bad)


# ------------------------------------------------------------------------------------------------ top-K
def lower_batch(n, rows):
    return {"pair_index": torch.full((rows, n), -1), "mask": torch.ones(rows, n, dtype=torch.bool),
            "num_items": torch.full((rows,), float(n)), "relevance": torch.zeros(rows, n),
            "num_relevant": torch.zeros(rows, dtype=torch.long)}


@pytest.mark.parametrize("epsilon", [0.0, 0.01])
@pytest.mark.parametrize("k", [1, 5, 12])
def test_threshold_lies_between_the_kth_and_k_plus_1th_scores(k, epsilon):
    g = torch.Generator().manual_seed(k)
    scores = torch.randn(6, 40, generator=g, dtype=torch.float64)
    obj = TopKNDCGSurrogate(top_k=k, epsilon=epsilon, threshold_smoothing=1e-3, threshold_regularization=1e-4)
    batch = lower_batch(40, 6)
    lam = obj.solve_threshold(scores, batch)
    top = scores.sort(1, descending=True).values
    assert bool((top[:, k] < lam).all()) and bool((lam < top[:, k - 1]).all())
    assert torch.equal((scores > lam.unsqueeze(1)).sum(1), torch.full((6,), k))
    assert obj.lower_level(scores, batch, lam).grad.abs().max() < 1e-10  # stationary
    for delta in (1e-4, -1e-4):  # and the minimizer of L_q
        assert bool((obj.lower_objective(lam + delta, scores, batch) > obj.lower_objective(lam, scores, batch)).all())


def test_lower_level_derivatives_match_autograd():
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(3, 9, generator=g, dtype=torch.float64, requires_grad=True)
    obj = TopKNDCGSurrogate(top_k=2, epsilon=0.3, threshold_smoothing=0.2, threshold_regularization=0.05)
    batch = lower_batch(9, 3)
    lam = torch.tensor([0.1, -0.4, 0.7], dtype=torch.float64, requires_grad=True)
    level = obj.lower_level(scores, batch, lam.detach())
    (d_lam,) = torch.autograd.grad(obj.lower_objective(lam, scores, batch).sum(), lam, create_graph=True)
    assert torch.allclose(level.grad, d_lam.detach(), rtol=1e-12)
    (d2,) = torch.autograd.grad(d_lam.sum(), lam, retain_graph=True)
    assert torch.allclose(level.hess, d2, rtol=1e-12)
    (d_lam_w,) = torch.autograd.grad(d_lam.sum(), scores)  # ∇_h ∂_λ L = −weights
    assert torch.allclose(-level.weights, d_lam_w, rtol=1e-12)


def test_implicit_gradient_of_the_threshold_matches_finite_differences():
    """∇_h λ̂ = weights / ∂²_λ L at λ̂ (App. E, implicit function theorem), against central differences."""
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(2, 12, generator=g, dtype=torch.float64)
    obj = TopKNDCGSurrogate(top_k=3, epsilon=0.5, threshold_smoothing=0.1, threshold_regularization=0.01)
    batch = lower_batch(12, 2)
    lam = obj.solve_threshold(scores, batch)
    level = obj.lower_level(scores, batch, lam)
    implicit = level.weights / level.hess.unsqueeze(1)
    fd = torch.zeros_like(scores)
    for j in range(12):
        e = torch.zeros_like(scores)
        e[:, j] = 1e-6
        fd[:, j] = (obj.solve_threshold(scores + e, batch) - obj.solve_threshold(scores - e, batch)) / 2e-6
    assert torch.allclose(implicit, fd, atol=1e-8)


@pytest.mark.parametrize("selector", ["sigmoid", "squared_hinge"])
def test_selector_derivative_matches_autograd(selector):
    obj = TopKNDCGSurrogate(selector_slope=2.5, selector=selector)
    s = torch.linspace(-3, 3, 14, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(obj.selector(s).sum(), s)
    assert torch.allclose(obj.selector_grad(s.detach()), auto, rtol=1e-12)


def test_squared_hinge_selector_is_zero_below_the_threshold_as_lemma_5_2_asks():
    """ψ(s) = max(s, 0)² ≤ C·1(s > 0) on bounded scores (Lemma 5.2): no weight below λ, unlike σ(α s)."""
    s = torch.tensor([-2.0, -0.1, 0.0, 0.1, 1.5], dtype=torch.float64)
    hinge = TopKNDCGSurrogate(selector="squared_hinge").selector(s)
    assert hinge.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.01, 2.25])
    assert float(TopKNDCGSurrogate().selector(s)[1]) > 0.4  # the sigmoid weighs an item just below λ
    with pytest.raises(ValueError, match="selector"):
        TopKNDCGSurrogate(selector="relu")


def test_topk_exact_value_uses_ideal_dcg_at_k_and_the_selector(ltr):
    batch, scores = ltr
    obj = TopKNDCGSurrogate(top_k=3, threshold_smoothing=0.1, threshold_regularization=0.01)
    lam = obj.solve_threshold(scores, batch)
    base = ndcg_term(scores, batch, 1.0, "ideal_dcg_at_k")

    def term(b, i, real):
        return obj.selector(scores[b, i] - lam[b]) * base(b, i, real)

    expected = brute_force_F(scores, batch, term, "per_query")
    assert float(obj.exact_value(scores, batch)) == pytest.approx(float(expected), rel=1e-12)


# ------------------------------------------------------------------------------------------------ models
def test_neumf_scores_every_item_like_forward():
    model = NeuMF(num_users=7, num_items=23, embedding_dim=4, layers=[6, 5], dropout=0.3, init_std=0.3).double().eval()
    query = torch.tensor([0, 3, 6])
    full = model.score_all(query, chunk_elements=40)  # several item chunks
    items = torch.arange(23).expand(3, 23)
    assert full.shape == (3, 23)
    assert torch.allclose(full, model(query, items), rtol=1e-12)
    assert torch.allclose(model(query, torch.tensor([[-1, 0]] * 3))[:, 0], full[:, 0])  # padding scores as item 0


def test_neumf_is_sized_from_the_data_and_checks_it():
    model = NeuMF()
    model.bind_sizes({"num_users": 5, "num_items": 9, "num_queries": 5, "num_pairs": 11})
    assert model.gmf_user.num_embeddings == 5 and model.mlp_item.num_embeddings == 9
    with pytest.raises(ValueError, match="built for 5 users × 9 items"):
        model.bind_sizes({"num_users": 6, "num_items": 9})
    with pytest.raises(KeyError, match="num_users"):
        NeuMF().bind_sizes({"num_queries": 3, "num_features": 4})


@pytest.mark.parametrize("model_cls", [ListMLP, ContextAwareRanker])
def test_list_scorers_ignore_padding(model_cls):
    torch.manual_seed(0)
    model = model_cls(in_features=6).double().eval()
    x = torch.randn(3, 7, 6, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 4:], mask[2, 1:] = False, False
    noisy = torch.where(mask.unsqueeze(-1), x, torch.randn_like(x) * 50)
    a, b = model(x, mask), model(noisy, mask)
    assert a.shape == (3, 7)
    assert torch.allclose(a[mask], b[mask], rtol=1e-10)


def test_context_aware_ranker_is_permutation_equivariant_and_uses_the_context():
    torch.manual_seed(0)
    model = ContextAwareRanker(in_features=4, d_model=8, dim_feedforward=16).double().eval()
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    perm = torch.randperm(6)
    assert torch.allclose(model(x)[:, perm], model(x[:, perm]), rtol=1e-10)
    changed = x.clone()
    changed[:, 5] += 3.0  # another entry of the list changes the score of entry 0
    assert not torch.allclose(model(x)[:, 0], model(changed)[:, 0])


@pytest.mark.parametrize("model", [NeuMF(4, 5, embedding_dim=3), ListMLP(3), ContextAwareRanker(3, d_model=4)])
def test_reset_last_layer_touches_only_the_last_layer(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.reset_last_layer()
    last = {f"{name}.{p}" for name, m in model.named_modules() if m is model.last_layer() for p, _ in m.named_parameters()}
    after = model.state_dict()
    assert last and all(not torch.equal(before[k], after[k]) for k in last)
    assert all(torch.equal(before[k], after[k]) for k in before if k not in last)


# ------------------------------------------------------------------------------------------------ metrics
def brute_ndcg(scores, rel, k):
    order = sorted(range(len(scores)), key=lambda j: -scores[j])
    dcg = sum((2 ** rel[j] - 1) / math.log2(r + 2) for r, j in enumerate(order[:k]))
    ideal = sorted(rel, reverse=True)
    idcg = sum((2**y - 1) / math.log2(r + 2) for r, y in enumerate(ideal[:k]))
    return dcg / idcg if idcg > 0 else 0.0


def test_ndcg_of_an_ideal_ranking_is_one_and_matches_brute_force():
    g = torch.Generator().manual_seed(5)
    rel = torch.randint(0, 5, (20, 12), generator=g).double()
    rel[:, 0] = 3.0
    for k in (1, 3, 5, 10, None):
        ideal = ndcg_at_k(rel + 1e-3 * torch.arange(12, 0, -1), rel, top_k=k)  # relevance order, ties broken
        assert torch.allclose(ideal, torch.ones(20, dtype=torch.float64))
        scores = torch.randn(20, 12, generator=g, dtype=torch.float64)
        expected = [brute_ndcg(scores[q].tolist(), rel[q].tolist(), k or 12) for q in range(20)]
        assert torch.allclose(ndcg_at_k(scores, rel, top_k=k), torch.tensor(expected, dtype=torch.float64), rtol=1e-12)
        metric = NDCGScore(top_k=k)
        metric.update(scores[:7], rel[:7])
        metric.update(scores[7:], rel[7:])
        assert float(metric.compute()) == pytest.approx(sum(expected) / 20, rel=1e-12)


def test_full_ranking_ndcg_of_one_heldout_item_is_its_discount():
    g = torch.Generator().manual_seed(6)
    scores = torch.randn(4, 30, generator=g, dtype=torch.float64)
    held = torch.tensor([[3], [7], [0], [29]])
    exclude = torch.tensor([[5, 6, -1], [1, -1, -1], [2, 3, 4], [-1, -1, -1]])
    ranked = scores.clone()
    for u in range(4):
        ranked[u, exclude[u][exclude[u] >= 0]] = -math.inf
    rank = (ranked > ranked.gather(1, held)).sum(1) + 1
    for k in (1, 10, 20):
        expected = torch.where(rank <= k, 1 / torch.log2(rank.double() + 1), torch.zeros(4, dtype=torch.float64))
        got = full_ranking_ndcg(scores, held, torch.full((4, 1), 4.0), exclude, top_k=k)
        assert torch.allclose(got, expected, rtol=1e-12)
    metric = FullRankingNDCGScore(top_ks=(1, 10))
    metric.update(scores, held, torch.full((4, 1), 4.0), exclude)
    assert float(metric.compute()[10]) == pytest.approx(
        float(full_ranking_ndcg(scores, held, torch.ones(4, 1), exclude, top_k=10).mean()), rel=1e-12
    )


def test_share_above_the_solved_threshold_is_the_top_k_share(ltr):
    """At λ̂ with small τ1, τ2 the threshold sits between the K-th and (K+1)-th score (Lemma 5.1), so the share of
    the list above it is K/N_q; at λ = 0 far below the scores nearly the whole list is above."""
    batch, scores = ltr
    obj = TopKNDCGSurrogate(top_k=3, threshold_smoothing=1e-3, threshold_regularization=1e-6)
    share, target = obj.share_above(scores, batch, obj.solve_threshold(scores, batch))
    assert torch.allclose(share, target, atol=1e-9)
    low, _ = obj.share_above(scores, batch, torch.full_like(share, float(scores.min()) - 1.0))
    assert torch.allclose(low, torch.ones_like(low), atol=1e-9)
