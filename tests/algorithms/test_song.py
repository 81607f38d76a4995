"""SONG, K-SONG, SOLC (Qiu et al., ICML 2022): exactness of the estimators in float64, presets, state rules, training,
the warm-up and stop-gradient callbacks, the synthetic ranking DataModule and the configs."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import DDP_SCRIPTS, assert_rounding_close, float64_batch, whole_list_ltr_data
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from fccolit.algorithms.song import KSONG, SOLC, SONG
from fccolit.algorithms.sox import SOX
from fccolit.callbacks.stop_gradient import StopGradientSwitch
from fccolit.callbacks.warmup import WarmUp
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.metrics.functional import ndcg_at_k
from fccolit.models.ltr import ListMLP
from fccolit.models.neumf import NeuMF
from fccolit.objectives.listwise import SOLCListwiseCELoss
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate
from fccolit.optim import Momentum

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ltr():
    """Every training query with its whole list: the inner values of every objective are exact on this batch."""
    dm = whole_list_ltr_data()
    return dm.sizes, float64_batch(dm.full_batch())


@pytest.fixture(scope="module")
def rec():
    """Recommendation batches (sampled lists: P positives, M unrated items) and the sizes."""
    dm = SyntheticRankingDataModule(task="recommendation", num_queries=40, num_items=60, ratings_per_query=(5, 12),
                                    num_positives=3, num_negatives=8, queries_per_batch=8, top_k=5, seed=1)
    dm.setup()
    batches = [float64_batch(dm.train_dataset.__getitems__(idx)) for idx in dm.build_train_sampler()]
    return dm.sizes, batches


def make(cls, sizes, objective=None, model=None, **kw):
    torch.manual_seed(0)
    model = model if model is not None else ListMLP(hidden=[4])
    args = dict(data_sizes=sizes, state_dtype="float64", **kw)
    module = cls(model, objective, **args) if objective is not None else cls(model, **args)
    return module.double()


def grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


def brute_force_F(scores, batch, term, normalization="per_query"):
    """The objective with python loops over queries and relevant items of whole lists."""
    total, pairs = 0.0, 0
    for b in range(scores.shape[0]):
        real = [j for j in range(scores.shape[1]) if batch["mask"][b, j]]
        for i in real:
            if batch["pair_index"][b, i] >= 0:
                total = total + term(b, i, real)
                pairs += 1
    return total / (scores.shape[0] if normalization == "per_query" else pairs)


def ndcg_term(scores, batch, ideal_key="ideal_dcg", margin=1.0):
    def term(b, i, real):
        gbar = sum(torch.relu(scores[b, j] - scores[b, i] + margin) ** 2 for j in real)
        return (1 - 2 ** batch["relevance"][b, i]) / (batch[ideal_key][b] * torch.log2(gbar + 1))
    return term


def ce_term(scores, batch):
    def term(b, i, real):
        return (torch.logsumexp(scores[b, real], 0) - scores[b, i]) / len(real)
    return term


def flat_params(module):
    return torch.cat([p.detach().flatten() for p in module.model.parameters()])


def set_params(module, vec):
    with torch.no_grad():
        i = 0
        for p in module.model.parameters():
            p.copy_(vec[i : i + p.numel()].view_as(p))
            i += p.numel()


def finite_differences(module, fun, h=1e-6):
    w = flat_params(module)
    out = torch.zeros_like(w)
    for j in range(w.numel()):
        e = torch.zeros_like(w)
        e[j] = h
        with torch.no_grad():
            set_params(module, w + e)
            plus = float(fun())
            set_params(module, w - e)
            out[j] = (plus - float(fun())) / (2 * h)
    set_params(module, w)
    return out


# ------------------------------------------------------------------------------------------------ SONG
@pytest.mark.parametrize("normalization", ["per_query", "pairs"])
@pytest.mark.parametrize("inner_estimator", ["list_mean", "stratified"])
@pytest.mark.parametrize("u_for_gradient", ["previous", "fresh"])
def test_song_estimator_is_the_gradient_of_the_surrogate_with_exact_state(ltr, normalization, inner_estimator, u_for_gradient):
    sizes, batch = ltr
    objective = NDCGSurrogate(normalization=normalization, inner_estimator=inner_estimator)
    module = make(SONG, sizes, objective, ema_weight=1.0, u_for_gradient=u_for_gradient)
    true = grads(module, brute_force_F(module(batch), batch, ndcg_term(module(batch), batch), normalization))
    first = grads(module, module.compositional_loss(module(batch), batch)[0])  # first visit: u := ĝ = g
    second = grads(module, module.compositional_loss(module(batch), batch)[0])  # u = g(w) from the first step
    assert torch.allclose(first, true, rtol=1e-10, atol=1e-14)
    assert torch.allclose(second, true, rtol=1e-10, atol=1e-14)
    assert true.abs().max() > 1e-3


def test_song_with_a_moving_average_is_exact_once_u_tracks_g(ltr):
    sizes, batch = ltr
    module = make(SONG, sizes, ema_weight=0.3)
    true = grads(module, brute_force_F(module(batch), batch, ndcg_term(module(batch), batch)))
    module.compositional_loss(module(batch), batch)  # u := g on the first visit
    est = grads(module, module.compositional_loss(module(batch), batch)[0])  # u ← 0.7 g + 0.3 g = g
    assert torch.allclose(est, true, rtol=1e-10)


def test_song_uses_the_old_u_of_algorithm_1_and_the_new_one_when_fresh(ltr):
    sizes, batch = ltr
    out = {}
    for order in ("previous", "fresh"):
        module = make(SONG, sizes, ema_weight=0.4, u_for_gradient=order)
        stale = torch.rand(sizes["num_pairs"], 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.2
        module.state.value.copy_(stale)
        inner = module.objective.inner(module(batch), batch)
        old = stale[inner.index]
        u = old if order == "previous" else 0.6 * old + 0.4 * inner.value.detach()
        expected = grads(module, (module.objective.outer_grad(u, inner.context) * inner.value).sum(-1).mean())
        out[order] = grads(module, module.compositional_loss(module(batch), batch)[0])
        assert torch.allclose(out[order], expected, rtol=1e-12)
        assert torch.allclose(module.state.value[inner.index], 0.6 * old + 0.4 * inner.value.detach(), rtol=1e-12)
    assert not torch.allclose(out["previous"], out["fresh"])


def test_song_is_sox_on_the_ndcg_surrogate_and_its_defaults_are_the_papers(rec):
    sizes, batches = rec
    song = make(SONG, sizes, model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=0.3)
    sox = make(SOX, sizes, NDCGSurrogate(), model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=0.3)
    for batch in batches[:3]:
        a = grads(song, song.compositional_loss(song(batch), batch)[0])
        b = grads(sox, sox.compositional_loss(sox.model(batch["query"], batch["items"]), batch)[0])
        assert torch.equal(a, b)
    assert torch.equal(song.state.value.nan_to_num(-1), sox.state.value.nan_to_num(-1))
    default = SONG(ListMLP(), data_sizes={"num_queries": 3, "num_features": 2, "num_pairs": 4})
    assert (default.ema_weight, default.u_for_gradient) == (0.1, "previous")
    assert isinstance(default.objective, NDCGSurrogate) and default.objective.margin == 1.0
    assert default.state.value.shape == (4, 1)
    opt = default.configure_optimizers()
    assert type(opt) is torch.optim.Adam and opt.defaults["lr"] == 1e-3 and opt.defaults["betas"] == (0.9, 0.999)
    assert default.metric_names == ["ndcg@1", "ndcg@3", "ndcg@5"]
    rec_default = SONG(NeuMF(), data_sizes={"num_users": 3, "num_items": 5, "num_queries": 3, "num_pairs": 4})
    assert rec_default.metric_names == ["ndcg@10", "ndcg@20", "ndcg@50"]


def test_first_visits_never_divide_by_zero_and_unsampled_pairs_stay(rec):
    sizes, batches = rec
    module = make(SONG, sizes, model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=0.1)
    batch = batches[0]
    loss, estimate = module.compositional_loss(module(batch), batch)
    assert bool(torch.isfinite(estimate).all()) and bool(torch.isfinite(grads(module, loss)).all())
    visited = set(batch["pair_index"][batch["pair_index"] >= 0].tolist())
    assert set(torch.nonzero(module.state.visited()).flatten().tolist()) == visited
    before = module.state.value.clone()
    module.compositional_loss(module(batches[1]), batches[1])
    untouched = torch.ones(sizes["num_pairs"], dtype=torch.bool)
    untouched[batches[1]["pair_index"][batches[1]["pair_index"] >= 0]] = False
    assert torch.equal(module.state.value[untouched].nan_to_num(-1), before[untouched].nan_to_num(-1))


def test_song_with_momentum_is_algorithm_1(ltr):
    """w ← w − η m with m ← (1 − β1)... in fccolit's convention: the first step is η·β·G."""
    sizes, batch = ltr
    module = make(SONG, sizes, ema_weight=1.0, optimizer=lambda p: Momentum(p, lr=0.2, momentum_weight=0.1))
    opt = module.configure_optimizers()
    w0 = flat_params(module)
    loss = module.compositional_loss(module(batch), batch)[0]
    g = grads(module, loss)
    for p, gi in zip(module.model.parameters(), torch.split(g, [p.numel() for p in module.model.parameters()])):
        p.grad = gi.view_as(p)
    opt.step()
    assert torch.allclose(flat_params(module), w0 - 0.2 * 0.1 * g, rtol=1e-12)


# ------------------------------------------------------------------------------------------------ K-SONG
def ksong_at_optimum(ltr, estimator, alpha=2.0, selector="sigmoid"):
    sizes, batch = ltr
    objective = TopKNDCGSurrogate(top_k=3, threshold_smoothing=0.1, threshold_regularization=0.01, selector_slope=alpha, selector=selector)
    module = make(KSONG, sizes, objective, ema_weight=1.0, estimator=estimator)
    with torch.no_grad():  # λ at the lower-level optimum; s and u are set exactly by their first visits
        module.threshold.value[batch["query"], 0] = objective.solve_threshold(module(batch), batch)
    return module, batch


@pytest.mark.parametrize("selector", ["sigmoid", "squared_hinge"])
def test_theoretical_ksong_is_the_gradient_of_F_K_at_the_lower_level_optimum(ltr, selector):
    module, batch = ksong_at_optimum(ltr, "theoretical", selector=selector)
    fd = finite_differences(module, lambda: module.objective.exact_value(module(batch), batch))
    lam = module.threshold.value.clone()
    est = grads(module, module.compositional_loss(module(batch), batch)[0])
    assert torch.allclose(est, fd, rtol=1e-6, atol=1e-8), (est - fd).abs().max()
    assert fd.abs().max() > 1e-3
    # eq. (7) as printed (the implicit term with the opposite sign) is not the gradient of F_K
    module.threshold.value.copy_(lam)
    module.curvature.reset()
    module.state.reset()
    obj, scores = module.objective, module(batch)
    inner = obj.inner(scores, batch)
    level = obj.lower_level(scores, batch, lam[batch["query"], 0])
    row, h_i = inner.context["row"], inner.context["anchor_score"]
    margin = h_i.detach() - lam[batch["query"], 0][row]
    u = inner.value.detach()
    printed = ((obj.selector(margin) * obj.outer_grad(u, inner.context)[:, 0]).detach() * inner.value[:, 0]
               + (obj.selector_grad(margin) * obj.outer(u, inner.context)).detach()
               * (h_i + (obj.threshold_score(scores, level.weights) / level.hess)[row])).mean()
    assert (grads(module, printed) - fd).abs().max() > 1e-3


def test_practical_ksong_stops_the_gradient_through_the_selector(ltr):
    sizes, batch = ltr
    module, _ = ksong_at_optimum(ltr, "practical")
    lam = module.threshold.value[batch["query"], 0].clone()
    est = grads(module, module.compositional_loss(module(batch), batch)[0])
    scores = module(batch)
    inner = module.objective.inner(scores, batch)
    psi = module.objective.selector(inner.context["anchor_score"].detach() - lam[inner.context["row"]])
    weight = psi * module.objective.outer_grad(inner.value.detach(), inner.context)[:, 0]
    assert torch.allclose(est, grads(module, (weight * inner.value[:, 0]).mean()), rtol=1e-12)
    assert torch.isnan(module.curvature.value).all()  # s_q is not kept by the practical estimator


def test_constant_selector_reduces_ksong_to_song_with_the_top_k_ideal_dcg(ltr):
    sizes, batch = ltr
    as_song = dict(batch, ideal_dcg=batch["ideal_dcg_at_k"])
    song = make(SONG, sizes, ema_weight=1.0)
    expected = grads(song, song.compositional_loss(song(as_song), as_song)[0])
    for estimator in ("practical", "theoretical"):  # α = 0: ψ ≡ 1/2 and ψ' ≡ 0
        module = make(KSONG, sizes, TopKNDCGSurrogate(top_k=3, selector_slope=0.0), ema_weight=1.0, estimator=estimator)
        assert torch.allclose(grads(module, module.compositional_loss(module(batch), batch)[0]), 0.5 * expected, rtol=1e-12)


def test_threshold_takes_one_sgd_step_and_curvature_is_a_moving_average(ltr):
    sizes, batch = ltr
    objective = TopKNDCGSurrogate(top_k=3, threshold_smoothing=0.1, threshold_regularization=0.01)
    module = make(KSONG, sizes, objective, estimator="theoretical", lambda_lr=0.05, hessian_ema_weight=0.25, lambda_init=0.3)
    q = batch["query"]
    scores = module(batch).detach()
    level0 = objective.lower_level(scores, batch, torch.full((len(q),), 0.3, dtype=torch.float64))
    module.compositional_loss(module(batch), batch)
    lam1 = 0.3 - 0.05 * level0.grad
    assert torch.allclose(module.threshold.value[q, 0], lam1, rtol=1e-12)
    assert torch.allclose(module.curvature.value[q, 0], level0.hess, rtol=1e-12)  # first visit: the estimate
    level1 = objective.lower_level(scores, batch, lam1)
    module.compositional_loss(module(batch), batch)
    assert torch.allclose(module.threshold.value[q, 0], lam1 - 0.05 * level1.grad, rtol=1e-12)
    assert torch.allclose(module.curvature.value[q, 0], 0.75 * level0.hess + 0.25 * level1.hess, rtol=1e-12)
    unseen = torch.ones(sizes["num_queries"], dtype=torch.bool)
    unseen[q] = False
    assert torch.isnan(module.threshold.value[unseen]).all()


def test_threshold_converges_between_the_kth_and_k_plus_1th_scores(ltr):
    sizes, batch = ltr
    module = make(KSONG, sizes, TopKNDCGSurrogate(top_k=3, threshold_smoothing=1e-3, threshold_regularization=1e-4), lambda_lr=0.05)
    scores = torch.randn(batch["pair_index"].shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    for _ in range(2000):
        module.compositional_loss(scores, batch)
    lam = module.threshold.value[batch["query"], 0]
    top = torch.where(batch["mask"], scores, torch.full_like(scores, -math.inf)).sort(1, descending=True).values
    assert bool((top[:, 3] < lam).all()) and bool((lam < top[:, 2]).all())
    solve = module(batch)  # lambda_init="solve": the first visit starts at the batch's optimum
    fresh = make(KSONG, sizes, TopKNDCGSurrogate(top_k=3, threshold_smoothing=1e-3, threshold_regularization=1e-4), lambda_init="solve")
    lam_hat = fresh.objective.solve_threshold(solve.detach(), batch)
    grad = fresh.objective.lower_level(solve.detach(), batch, lam_hat).grad
    fresh.compositional_loss(solve, batch)
    assert torch.allclose(fresh.threshold.value[batch["query"], 0], lam_hat - 0.01 * grad, rtol=1e-12)


def test_ksong_rejects_a_data_module_with_another_k():
    sizes = {"num_queries": 3, "num_features": 2, "num_pairs": 4, "top_k": 7}
    with pytest.raises(ValueError, match="top_k=7 but the objective's K is 10"):
        KSONG(ListMLP(), data_sizes=sizes)
    with pytest.raises(ValueError, match="estimator"):
        KSONG(ListMLP(), data_sizes=dict(sizes, top_k=10), estimator="exact")


# ------------------------------------------------------------------------------------------------ SOLC
@pytest.mark.parametrize("u_for_gradient", ["fresh", "previous"])
def test_solc_estimator_is_the_gradient_of_listwise_cross_entropy(ltr, u_for_gradient):
    sizes, batch = ltr
    module = make(SOLC, sizes, ema_weight=0.5, u_for_gradient=u_for_gradient)
    true = grads(module, brute_force_F(module(batch), batch, ce_term(module(batch), batch)))
    module.compositional_loss(module(batch), batch)  # first visit: ln u := ln g
    est = grads(module, module.compositional_loss(module(batch), batch)[0])
    assert torch.allclose(est, true, rtol=1e-10)
    # Algorithm 3 as printed: p·mean_j ∇(h_j − h_i), without exp(h_j − h_i), is a different vector
    scores = module(batch)
    inner = module.objective.inner(scores, batch)
    q, a = torch.nonzero(batch["pair_index"] >= 0, as_tuple=True)
    diff = (torch.where(batch["mask"], scores, 0.0)[q].sum(1) / batch["mask"][q].sum(1) - scores[q, a])
    printed = grads(module, (inner.context["weight"] / inner.value[:, 0].detach() * diff).mean())
    assert (printed - true).abs().max() > 1e-2 * true.abs().max()


def test_solc_with_gamma_one_is_plain_minibatch_listwise_cross_entropy(rec):
    sizes, batches = rec
    module = make(SOLC, sizes, model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=1.0)
    for batch in batches[:3]:
        est = grads(module, module.compositional_loss(module(batch), batch)[0])
        scores = module(batch)
        masked = torch.where(batch["mask"], scores, torch.full_like(scores, -math.inf))
        nll = -(scores - torch.logsumexp(masked, 1, keepdim=True))  # −log softmax over the sampled list
        anchor = batch["pair_index"] >= 0
        per_query = (nll * anchor).sum(1) / anchor.sum(1) * batch["num_relevant"] / batch["num_items"]
        assert torch.allclose(est, grads(module, per_query.mean()), rtol=1e-10)


def test_solc_query_mean_weights_every_user_equally_as_algorithm_3(rec):
    """normalization="query_mean": the mean over users of each user's mean over its sampled relevant items
    (Algorithm 3), not weighted by the number of items the user rated as "per_query" is."""
    sizes, batches = rec
    module = make(SOLC, sizes, SOLCListwiseCELoss(normalization="query_mean"),
                  model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=1.0)
    batch = batches[0]
    assert len(set(batch["num_relevant"].tolist())) > 1  # users differ in their numbers of relevant items
    est = grads(module, module.compositional_loss(module(batch), batch)[0])
    scores = module(batch)
    masked = torch.where(batch["mask"], scores, torch.full_like(scores, -math.inf))
    nll = -(scores - torch.logsumexp(masked, 1, keepdim=True))
    anchor = batch["pair_index"] >= 0
    equal = (nll * anchor).sum(1) / anchor.sum(1) / batch["num_items"]
    assert torch.allclose(est, grads(module, equal.mean()), rtol=1e-10)
    weighted = module.objective.__class__(normalization="per_query")  # the same batch under per-user weights
    module.objective = weighted
    per_query = grads(module, module.compositional_loss(module(batch), batch)[0])
    cosine = torch.dot(est, per_query) / (est.norm() * per_query.norm())
    assert float(cosine) < 1 - 1e-6  # not the same direction


def test_solc_log_state_is_the_moving_average_of_sox(rec):
    sizes, batches = rec
    solc = make(SOLC, sizes, model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=0.3)
    sox = make(SOX, sizes, SOLCListwiseCELoss(), model=NeuMF(embedding_dim=4, layers=[4], dropout=0.0), ema_weight=0.3,
               u_for_gradient="fresh")
    for batch in batches + batches[:2]:  # revisits some pairs
        a = grads(solc, solc.compositional_loss(solc(batch), batch)[0])
        b = grads(sox, sox.compositional_loss(sox.model(batch["query"], batch["items"]), batch)[0])
        assert torch.allclose(a, b, rtol=1e-10)
    visited = sox.state.visited()
    assert torch.allclose(solc.state.value[visited].exp(), sox.state.value[visited], rtol=1e-12)
    assert torch.equal(solc.state.visited(), visited)


# ------------------------------------------------------------------------------------------------ training
def train_ltr(cls, seed, steps, **kw):
    dm = SyntheticRankingDataModule(task="ltr", num_queries=200, list_size=(30, 80), num_features=16, num_positives=5,
                                    num_negatives=20, queries_per_batch=16, val_queries=150, seed=100 + seed)
    dm.setup()
    torch.manual_seed(seed)
    module = cls(ListMLP(hidden=[32]), data_sizes=dm.sizes, **kw)
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    val = dm.val_dataset.__getitems__(list(range(len(dm.val_dataset))))

    def val_ndcg():
        with torch.no_grad():
            return float(ndcg_at_k(module(val), val["relevance"], top_k=10, mask=val["mask"]).mean())

    initial, sampler, step, epoch = val_ndcg(), dm.build_train_sampler(), 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        epoch += 1
        for idx in sampler:
            batch = dm.train_dataset.__getitems__(idx)
            loss, _ = module.compositional_loss(module(batch), batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == steps:
                break
    return initial, val_ndcg()


@pytest.mark.slow
def test_training_improves_ndcg_and_song_beats_plain_listwise_cross_entropy():
    """Graded relevance, lists of 5 relevant + 20 other documents: 150 Adam steps of each method, 3 seeds."""
    song = [train_ltr(SONG, s, 150, ema_weight=0.1) for s in range(3)]
    listnet = [train_ltr(SOLC, s, 150, ema_weight=1.0) for s in range(3)]  # γ0 = 1: mini-batch listwise CE
    mean_song, mean_listnet = np.mean([b for _, b in song]), np.mean([b for _, b in listnet])
    print(f"\nval NDCG@10 after 150 steps, 3 seeds: SONG {mean_song:.4f}, listwise CE {mean_listnet:.4f}, "
          f"initial {np.mean([a for a, _ in song]):.4f}")
    assert all(after > before + 0.3 for before, after in song + listnet)
    assert mean_song > mean_listnet


def fit(module, dm, tmp_path, callbacks=(), **trainer_kw):
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
                      default_root_dir=tmp_path, callbacks=list(callbacks), **trainer_kw)
    trainer.fit(module, datamodule=dm)
    return trainer


def test_lightning_training_on_recommendation_data_logs_full_ranking_ndcg(tmp_path):
    seed_everything(0)
    dm = SyntheticRankingDataModule(num_queries=120, num_items=150, num_positives=5, num_negatives=30,
                                    queries_per_batch=24, top_k=10)
    module = KSONG(NeuMF(embedding_dim=16, layers=[16], dropout=0.0), TopKNDCGSurrogate(top_k=10),
                   optimizer=lambda p: torch.optim.Adam(p, lr=0.01), data_sizes=dm.sizes, metrics=["ndcg@10", "ndcg@20"])
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, use_distributed_sampler=False, default_root_dir=tmp_path)
    before = trainer.validate(module, datamodule=dm, verbose=False)[0]
    fit(module, dm, tmp_path, max_epochs=6)
    after = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(module, datamodule=dm, verbose=False)[0]
    assert set(after) == {"val/ndcg@10", "val/ndcg@20"}
    assert after["val/ndcg@10"] > before["val/ndcg@10"] + 0.05
    assert module.threshold.visited().all()


def test_ksong_logs_the_share_above_lambda_and_a_solved_start_tracks_the_top_k(tmp_path):
    """λ started at 0 with η0 = 0.01 leaves most of each list above it; lambda_init="solve" starts at the top-K
    threshold, so the logged share above λ is the top-K share (both logged on the logging steps)."""
    shares = {}
    for init in (0.0, "solve"):
        seed_everything(0)
        dm = SyntheticRankingDataModule(num_queries=40, num_items=150, num_positives=5, num_negatives=60,
                                        queries_per_batch=40, top_k=10)
        module = KSONG(NeuMF(embedding_dim=8, layers=[8], dropout=0.0), TopKNDCGSurrogate(top_k=10, threshold_smoothing=1e-6, threshold_regularization=1e-9),
                       lambda_init=init, data_sizes=dm.sizes, metrics=["ndcg@10"])
        trainer = fit(module, dm, tmp_path, max_steps=1, log_every_n_steps=1, limit_val_batches=0)
        metrics = trainer.callback_metrics
        shares[init] = (float(metrics["train/share_above_lambda"]), float(metrics["train/top_k_share"]))
    assert shares[0.0][0] > 0.3 > shares[0.0][1]
    assert shares["solve"][0] == pytest.approx(shares["solve"][1], abs=0.02)


@pytest.mark.parametrize("policy, expected", [("zero", 0.0), ("one", 1.0)])
def test_empty_query_policy_reaches_the_logged_ndcg(ltr, policy, expected):
    """A query without relevant documents counts as ``empty_query`` says (allRank's harness counts it as 1)."""
    sizes, batch = ltr
    module = make(SONG, sizes, empty_query=policy, metrics=["ndcg@3"])
    first = {k: v[:1] for k, v in batch.items()}
    first["relevance"] = torch.zeros_like(first["relevance"])  # no relevant document
    with torch.no_grad():
        module._eval_step("val", first)
    assert float(module.metrics["val"]["ndcg_at_3"].compute()) == expected
    with pytest.raises(ValueError, match="empty_query"):
        make(SONG, sizes, empty_query="ignore")


# ------------------------------------------------------------------------------------------------ callbacks
class Probe(Callback):
    """Records, at every epoch start (after WarmUp ran), what the warm-up and the module look like."""

    def __init__(self, warmup):
        self.warmup, self.starts, self.ends = warmup, [], []

    def snapshot(self, trainer, pl_module):
        opt = trainer.optimizers[0]
        return {
            "epoch": trainer.current_epoch,
            "delegated": pl_module.step_delegate is not None,
            "warmup_visited": None if self.warmup.algorithm is None else int(self.warmup.algorithm.state.visited().sum()),
            "state_visited": int(pl_module.state.visited().sum()),
            "optimizer": id(opt),
            "optimizer_steps": len(opt.state),
            "lr": opt.param_groups[0]["lr"],
            "schedulers": len(trainer.lr_scheduler_configs),
            "params": {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()},
        }

    def on_train_epoch_start(self, trainer, pl_module):
        self.starts.append(self.snapshot(trainer, pl_module))

    def on_train_epoch_end(self, trainer, pl_module):
        self.ends.append(self.snapshot(trainer, pl_module))


def small_ltr():
    return SyntheticRankingDataModule(task="ltr", num_queries=48, num_features=6, list_size=(8, 16), num_positives=2,
                                      num_negatives=6, queries_per_batch=16, val_queries=8, test_queries=8, top_k=3)


@pytest.mark.parametrize("reset", [True, False])
def test_warmup_switches_at_the_right_epoch_with_model_state_and_optimizer_as_told(tmp_path, reset):
    seed_everything(0)
    dm = small_ltr()
    module = SONG(ListMLP(hidden=[8]), data_sizes=dm.sizes,
                  optimizer=lambda p: torch.optim.Adam(p, lr=4e-4),
                  scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
                  scheduler_interval="epoch")
    warmup = WarmUp(epochs=2, optimizer_overrides={"lr": 1e-3}, reinit_last_layer=reset, reset_state=reset,
                    reset_optimizer=reset)
    probe = Probe(warmup)
    fit(module, dm, tmp_path, [warmup, probe], max_epochs=4, limit_val_batches=0)
    s, e = probe.starts, probe.ends
    assert [x["delegated"] for x in s] == [True, True, False, False]
    # during the warm-up SOLC's state fills and the module's stays untouched; LR: the override, no schedule
    assert s[0]["warmup_visited"] == 0 and e[1]["warmup_visited"] > 0 and e[1]["state_visited"] == 0
    assert [x["lr"] for x in e[:2]] == [1e-3, 1e-3] and s[1]["schedulers"] == 0
    # the switch, at the start of epoch 2
    assert s[2]["warmup_visited"] is None and e[2]["state_visited"] > 0
    last = {"net.2.weight", "net.2.bias"}
    for k, v in e[1]["params"].items():
        assert torch.equal(s[2]["params"][k], v) == (not reset or k not in last), k
    if reset:  # a fresh optimizer from the module's configuration, its schedule counted from the switch
        assert s[2]["optimizer"] != e[1]["optimizer"] and s[2]["optimizer_steps"] == 0 and s[2]["lr"] == 4e-4
        assert e[3]["lr"] == 2e-4
    else:  # the same optimizer and state, the configured LR restored, the paused schedule resumed
        assert s[2]["optimizer"] == e[1]["optimizer"] and s[2]["optimizer_steps"] > 0 and s[2]["lr"] == 4e-4
        assert e[3]["lr"] == 2e-4
    assert s[2]["schedulers"] == 1


def test_warmup_resumes_mid_warmup_to_the_same_trajectory(tmp_path):
    def run(ckpt_dir=None, resume=None):
        seed_everything(0)
        dm = small_ltr()
        module = KSONG(ListMLP(hidden=[8]), TopKNDCGSurrogate(top_k=3), estimator="theoretical",
                       data_sizes=dm.sizes, state_dtype="float64").double()
        callbacks = [WarmUp(epochs=2, algorithm_args={"ema_weight": 0.2})]
        if ckpt_dir:
            callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", every_n_train_steps=4, save_top_k=-1))
        trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=bool(ckpt_dir),
                          enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                          precision="64-true", max_epochs=3, limit_val_batches=0, callbacks=callbacks,
                          default_root_dir=tmp_path)
        trainer.fit(module, datamodule=dm, ckpt_path=resume)
        return module.state_dict(), callbacks[0]

    full, _ = run(ckpt_dir=tmp_path / "ckpt")  # 3 batches per epoch: step 4 is inside the second warm-up epoch
    saved = torch.load(tmp_path / "ckpt" / "step=4.ckpt", weights_only=False)
    warm_state = next(v for k, v in saved["callbacks"].items() if k.startswith("WarmUp"))
    assert not warm_state["switched"] and (~torch.isnan(warm_state["algorithm"]["state.value"])).any()
    resumed, warm = run(resume=tmp_path / "ckpt" / "step=4.ckpt")
    assert warm.switched
    for k, v in full.items():
        assert torch.equal(v.nan_to_num(-7.0), resumed[k].nan_to_num(-7.0)), k


def test_warmup_options_are_checked():
    with pytest.raises(ValueError, match="positive integer"):
        WarmUp(epochs=0)


def test_warmup_builds_another_algorithm_and_objective_from_their_config(ltr):
    """Any FCCO module with any objective, given as YAML-style class_path dicts, shares the module's model."""
    sizes, batch = ltr
    module = make(SONG, sizes)
    warmup = WarmUp(epochs=1, algorithm="fccolit.algorithms.sox.SOX", algorithm_args={
        "objective": {"class_path": "fccolit.objectives.listwise.SOLCListwiseCELoss", "init_args": {"list_size_weight": False}},
        "ema_weight": 0.5, "u_for_gradient": "fresh"})
    warmup.setup(None, module, "fit")
    algo = warmup.algorithm
    assert type(algo) is SOX and isinstance(algo.objective, SOLCListwiseCELoss) and not algo.objective.list_size_weight
    assert algo.model is module.model and algo.ema_weight == 0.5 and algo.state.value.dtype == torch.float64
    assert algo.state is not module.state
    true = grads(module, SOLCListwiseCELoss(list_size_weight=False).exact_value(module(batch), batch))
    loss, _ = algo.compositional_loss(module(batch), batch)  # first visit, γ irrelevant: the exact gradient
    assert torch.allclose(grads(module, loss), true, rtol=1e-10)


@pytest.mark.parametrize("when", [{"epoch": 1}, {"step": 4}])
def test_stop_gradient_switch_flips_the_estimator(tmp_path, when):
    seed_everything(0)
    dm = small_ltr()
    module = KSONG(ListMLP(hidden=[8]), TopKNDCGSurrogate(top_k=3), estimator="theoretical", data_sizes=dm.sizes)
    seen = []

    class Record(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append((trainer.current_epoch, pl_module.estimator))

    fit(module, dm, tmp_path, [StopGradientSwitch(to="practical", **when), Record()], max_epochs=2, limit_val_batches=0)
    expected = ["theoretical"] * 3 + ["practical"] * 3 if "epoch" in when else ["theoretical"] * 4 + ["practical"] * 2
    assert [est for _, est in seen] == expected
    with pytest.raises(ValueError, match="epoch or the step"):
        StopGradientSwitch()


# ------------------------------------------------------------------------------------------------ data
@pytest.mark.parametrize("task", ["recommendation", "ltr"])
def test_synthetic_batches_follow_the_ranking_schema(task):
    kw = dict(num_queries=30, num_items=50, ratings_per_query=(4, 9)) if task == "recommendation" else dict(num_queries=30)
    dm = SyntheticRankingDataModule(task=task, num_positives=3, num_negatives=7, queries_per_batch=6, top_k=4, **kw)
    dm.setup()
    sampler = dm.build_train_sampler()
    batch = dm.train_dataset.__getitems__(next(iter(sampler)))
    b, l = 6, 10
    assert batch["pair_index"].shape == (b, l) and batch["mask"].dtype == torch.bool
    anchor = batch["pair_index"] >= 0
    assert bool((batch["relevance"][anchor] > 0).all()) and bool((batch["relevance"][~anchor] == 0).all())
    assert torch.equal(anchor, batch["mask"] & (batch["relevance"] > 0))
    offsets, rel = dm._rel_offsets, dm._rel_relevance
    for r in range(b):
        q = int(batch["query"][r])
        rows = batch["pair_index"][r][anchor[r]].numpy()
        assert ((rows >= offsets[q]) & (rows < offsets[q + 1])).all() and len(set(rows)) == len(rows)
        assert np.allclose(rel[rows], batch["relevance"][r][anchor[r]].numpy())
        ys = np.sort(rel[offsets[q] : offsets[q + 1]])[::-1]
        ideal = lambda y: float(np.sum((2**y - 1) / np.log2(np.arange(2, len(y) + 2))))  # noqa: E731
        assert batch["ideal_dcg"][r] == pytest.approx(ideal(ys), rel=1e-6)
        assert batch["ideal_dcg_at_k"][r] == pytest.approx(ideal(ys[:4]), rel=1e-6)
        assert int(batch["num_relevant"][r]) == offsets[q + 1] - offsets[q]
        if task == "recommendation":
            assert np.array_equal(batch["items"][r][anchor[r]].numpy(), dm._rel_items[rows])
            rated = set(dm._rel_items[offsets[q] : offsets[q + 1]].tolist())
            assert not rated & set(batch["items"][r][~anchor[r]].tolist())  # the others are unrated items
            assert float(batch["num_items"][r]) == 50
        else:
            assert float(batch["num_items"][r]) == offsets[q + 1] - offsets[q] + dm._other_offsets[q + 1] - dm._other_offsets[q]
    keys = {"num_queries", "num_pairs", "top_k"} | ({"num_users", "num_items"} if task == "recommendation" else {"num_features"})
    assert set(dm.sizes) == keys and dm.sizes["num_pairs"] == offsets[-1]


def test_synthetic_items_do_not_depend_on_the_rank_split_and_resume():
    dm = SyntheticRankingDataModule(num_queries=40, num_items=60, ratings_per_query=(4, 9), queries_per_batch=8, top_k=3)
    dm.setup()
    from fccolit.samplers.ranking import QueryBatchSampler

    eligible = np.diff(dm._rel_offsets) > 0
    one = [dm.train_dataset.__getitems__(i) for i in QueryBatchSampler(eligible, 8, seed=0, rank=0, world_size=1)]
    parts = [[dm.train_dataset.__getitems__(i) for i in QueryBatchSampler(eligible, 8, seed=0, rank=r, world_size=2)]
             for r in range(2)]
    for b, whole in enumerate(one):
        for r in range(2):
            for key in ("query", "items", "pair_index", "relevance", "mask"):
                assert torch.equal(parts[r][b][key], whole[key][r::2]), key
    again = [dm.train_dataset.__getitems__(i) for i in QueryBatchSampler(eligible, 8, seed=0, rank=0, world_size=1)]
    assert all(torch.equal(a["items"], b["items"]) for a, b in zip(one, again))


def test_synthetic_recommendation_evaluation_excludes_the_users_other_known_items():
    dm = SyntheticRankingDataModule(num_queries=20, num_items=40, ratings_per_query=(4, 7))
    dm.setup()
    val, test = dm.val_dataset.fields, dm.test_dataset.fields
    for u in range(20):
        train = set(dm._rel_items[dm._rel_offsets[u] : dm._rel_offsets[u + 1]].tolist())
        # the validation ranking leaves out the user's test item (a later true positive), the test ranking the
        # validation item (rated before)
        assert set(val["exclude_items"][u][val["exclude_items"][u] >= 0].tolist()) == train | {int(test["heldout_items"][u, 0])}
        assert int(val["heldout_items"][u, 0]) not in train and int(test["heldout_items"][u, 0]) not in train
        assert set(test["exclude_items"][u][test["exclude_items"][u] >= 0].tolist()) == train | {int(val["heldout_items"][u, 0])}


# ------------------------------------------------------------------------------------------------ configs
# Every config runs (fit and test, warm-up and switch included) in tests/cli/test_configs.py.
@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for d in ("movielens", "netflix", "mslr")
                                        for p in (ROOT / "configs" / d).glob("*.yaml")))
def test_real_data_configs_name_our_classes_and_the_papers_values(path):
    import yaml

    config = yaml.safe_load((ROOT / path).read_text())
    model = config["model"]
    baselines = {"fccolit.algorithms.song.SOLC", "fccolit.algorithms.ranking.MiniBatchRanking"}
    assert model["class_path"] in {"fccolit.algorithms.song.SONG", "fccolit.algorithms.song.KSONG", *baselines}
    if model["class_path"] == "fccolit.algorithms.ranking.MiniBatchRanking":  # the paper's plain-loss baselines
        loss = model["init_args"]["loss"]["class_path"]
        assert loss.rsplit(".", 1)[1] in {"LambdaRankLoss", "ApproxNDCGLoss", "NeuralNDCGLoss", "ListNetLoss"}
    else:
        gamma = model["init_args"]["ema_weight"]
        if model["class_path"] not in baselines:  # Table 4
            assert gamma == (0.1 if "movielens" in path else 0.3)
    # every method but the warm-up stage alone (solc.yaml) gets song.yaml's warm-up, restart and schedule (§7.1: "For
    # all methods, we first pre-train"), so the baselines run on equal terms
    if not path.endswith("solc.yaml"):
        song = yaml.safe_load((ROOT / path).with_name("song.yaml").read_text())
        warmup = lambda c: [cb for cb in c["trainer"]["callbacks"] if cb["class_path"].endswith("WarmUp")]  # noqa: E731
        assert warmup(config) == warmup(song)
        assert config["trainer"]["max_epochs"] == song["trainer"]["max_epochs"]
        assert model["init_args"].get("scheduler") == song["model"]["init_args"].get("scheduler")
    if model["class_path"] == "fccolit.algorithms.song.KSONG":
        k = model["init_args"]["objective"]["init_args"]["top_k"]
        assert k == (10 if "mslr" in path else 300) and config["data"]["init_args"]["top_k"] == k


SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.parametrize("config, sample, extra", [
    ("movielens/ksong.yaml", "movielens-ml-latest-small", ["--data.num_negatives", "100", "--data.queries_per_batch", "64"]),
    ("mslr/song.yaml", "letor-lightgbm-lambdarank", ["--data.normalize", "standard"]),
])
def test_real_data_configs_run_on_the_shared_samples(tmp_path, config, sample, extra):
    """The paper's configs with the real DataModules on the real sample files (MovieLens latest-small; LightGBM's
    LETOR example), two steps each."""
    if not (SHARED_DATA / sample).is_dir():
        pytest.skip(f"{SHARED_DATA / sample} is not present")
    from fccolit.cli import main

    cli = main(["fit", "--config", str(ROOT / "configs" / config), "--data.root", str(SHARED_DATA / sample),
                "--data.cache_dir", str(tmp_path / "cache"), *extra, "--trainer.fast_dev_run", "2",
                "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"])
    assert cli.trainer.global_step == 2
    assert {k for k in cli.trainer.callback_metrics if k.startswith("val/")} == {f"val/{m}" for m in cli.model.metric_names}


# ------------------------------------------------------------------------------------------------ DDP
DDP_SCRIPT = DDP_SCRIPTS / "ddp_run_song.py"
DDP_STEPS = 20  # 8 batches per epoch: the runs cross two epoch boundaries


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """SONG (pair normalization: exercises the anchor-count all-reduce) and K-SONG (theoretical: u, λ and s), on one
    and two gloo processes, plus a two-process mid-epoch resume; independent runs are launched concurrently."""
    import os
    import random
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("ddp_song")
    port = random.randint(20000, 40000)

    def launch(name, algorithm, devices, *extra):
        out = root / name
        out.mkdir()
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "MASTER_PORT": str(port + len(list(root.iterdir())))}
        cmd = [sys.executable, str(DDP_SCRIPT), "--algorithm", algorithm, "--devices", str(devices), "--max-steps",
               str(DDP_STEPS), "--out", str(out), *extra]
        return name, devices, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def collect(procs):
        results = {}
        for name, devices, proc in procs:
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-4000:]
            results[name] = [torch.load(root / name / f"rank{r}.pt", weights_only=False) for r in range(devices)]
        return results

    runs = collect([
        launch("song_1", "song", 1, "--normalization", "pairs"),
        launch("song_2", "song", 2, "--normalization", "pairs"),
        launch("ksong_1", "ksong", 1),
        launch("ksong_2", "ksong", 2, "--save-every", "6"),
    ])
    # one process resuming mid-epoch is test_warmup_resumes_mid_warmup_to_the_same_trajectory (in-process)
    runs.update(collect([launch("ksong_2_resumed", "ksong", 2, "--resume", str(root / "ksong_2" / "step=12.ckpt"))]))
    return runs


def ddp_tensors(result):
    out = {k: v.nan_to_num(-123.0) for k, v in result["module"].items() if v.is_floating_point()}
    for k, st in result["optimizer"]["state"].items():
        out[f"optimizer.{k}.exp_avg"] = st["exp_avg"]
    return out


@pytest.mark.ddp
@pytest.mark.slow
def test_two_processes_equal_one_process_for_song_and_ksong(ddp_runs):
    for algorithm, states in (("song", {"state.value"}), ("ksong", {"state.value", "threshold.value", "curvature.value"})):
        one, two = ddp_runs[f"{algorithm}_1"], ddp_runs[f"{algorithm}_2"]
        assert all(r["step"] == DDP_STEPS for r in one + two)
        a, b0, b1 = ddp_tensors(one[0]), ddp_tensors(two[0]), ddp_tensors(two[1])
        assert states <= set(a)
        for k in states:
            assert (a[k] != -123.0).any(), k  # visited rows exist
        for k in a:
            assert torch.equal(b0[k], b1[k]), (algorithm, k)  # identical on every rank
            assert_rounding_close(a[k], b0[k], (algorithm, k))
        for step, (_, _, queries, items) in one[0]["trace"].items():  # the same global batches, item for item
            parts = [two[r]["trace"][step] for r in range(2)]
            assert sorted(parts[0][2] + parts[1][2]) == sorted(queries)
            assert parts[0][3] == items[0::2] and parts[1][3] == items[1::2]


@pytest.mark.ddp
@pytest.mark.slow
def test_ksong_resumes_mid_epoch_to_the_same_trajectory_on_two_processes(ddp_runs):
    for devices in (2,):
        full, resumed = ddp_runs[f"ksong_{devices}"], ddp_runs[f"ksong_{devices}_resumed"]
        for r in range(devices):
            a, b = ddp_tensors(full[r]), ddp_tensors(resumed[r])
            for k in a:
                assert torch.equal(a[k], b[k]), (devices, r, k)
            for step, record in resumed[r]["trace"].items():
                assert full[r]["trace"][step] == record, (devices, r, step)
