"""pAUC on an FPR range (Yao, Lin & Yang, NeurIPS 2022): the threshold form, the prox step, the Moreau identities,
AGD-SBCD's state machine, SoRR, DCA / proximal DCA, the baselines, validation of the chosen parameters, DDP and the
configs.

Everything is float64. Hand formulas are written in the paper's units (G_v = N₊N₋ĝ, η = c/(N₊N₋), μ = μ'/(N₊N₋),
θ = c/N₋) so they also check the scale-free rewrite the modules use.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import (
    DDP_SCRIPTS, ArrayData, PAUCRecorder, fit_datamodule, linear_module, pauc_hand_step, prox_sgd_step, shifted_gaussians,
)
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from scipy.optimize import brentq, linprog, minimize
from sklearn.metrics import roc_auc_score

from fccolit.algorithms.pauc import (
    DCA,
    MiniBatchPAUC,
    PairwiseAUC,
    PAUCRange,
    ProximalDCA,
    SoRR,
)
from fccolit.data import binary_fields
from fccolit.models import LinearScorer
from fccolit.objectives.pauc import (
    PartialAUCRangeSurrogate,
    SumOfRankedRangeLoss,
    ranked_range_mean,
    threshold_interval,
    threshold_value,
    top_sum,
)

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-12


# ---------------------------------------------------------------------------------------------- helpers
# ---------------------------------------------------------------------------------------------- threshold form
def test_threshold_form_equals_sorted_top_l_sum():
    g = torch.Generator().manual_seed(0)
    checked = 0
    for n in (1, 2, 5, 13, 30):
        s = torch.randn(40, n, generator=g, dtype=torch.float64)
        ordered = torch.sort(s, dim=1, descending=True).values
        for l in range(n + 1):
            direct = ordered[:, :l].sum(1)
            assert torch.allclose(top_sum(s, l), direct, atol=TOL)
            lower, upper = threshold_interval(s, l)
            for lam in (lower, upper, 0.5 * (lower + upper)):
                finite = torch.isfinite(lam)
                value = threshold_value(s[finite], lam[finite], l)
                assert torch.allclose(value, direct[finite], atol=1e-11)
            # g is convex and piecewise linear with kinks at the entries: its minimum is at an entry
            at_entries = torch.stack([threshold_value(s, s[:, j], l) for j in range(n)], 1).min(1).values
            if 0 < l < n:
                assert torch.allclose(at_entries, direct, atol=1e-11)
            checked += 40
    assert checked == 40 * sum(n + 1 for n in (1, 2, 5, 13, 30))


def test_fractional_level_is_the_lp_primal_and_its_dual():
    """Non-integer l: top_sum is the LP (11) max{Σ p_j s_j : Σ p_j = l, 0 ≤ p ≤ 1} (scipy linprog) and the minimum of
    the threshold form (12), attained at the single point s_[⌈l⌉]."""
    g = torch.Generator().manual_seed(1)
    s = torch.randn(8, 11, generator=g, dtype=torch.float64)
    for l in (0.0, 0.4, 2.5, 7.25, 11.0):
        for r in range(s.shape[0]):
            lp = linprog(-s[r].numpy(), A_eq=np.ones((1, 11)), b_eq=[l], bounds=[(0, 1)] * 11, method="highs")
            assert float(top_sum(s[r], l)) == pytest.approx(-lp.fun, abs=1e-10)
            lower, upper = threshold_interval(s[r], l)
            dual = threshold_value(s[r], s[r], l).min()  # minimum over the kinks
            assert float(dual) == pytest.approx(-lp.fun, abs=1e-10)
            if 0 < l < 11 and l != int(l):
                ordered = torch.sort(s[r], descending=True).values
                assert float(lower) == float(upper) == float(ordered[math.ceil(l) - 1])


def test_optimal_threshold_lies_between_the_l_plus_1_th_and_l_th_largest():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(30, 17, generator=g, dtype=torch.float64)
    ordered = torch.sort(s, dim=1, descending=True).values
    for l in range(1, 17):
        lower, upper = threshold_interval(s, l)
        assert torch.equal(lower, ordered[:, l]) and torch.equal(upper, ordered[:, l - 1])  # [s_[l+1], s_[l]]
        # the paper's printed interval [s_[l], s_[l+1]] (eq. (19)) is empty for distinct entries
        assert bool((ordered[:, l - 1] > ordered[:, l]).all())
        # inside: g = φ_l; outside: g − φ_l >= dist(λ, Λ*) (slope >= 1, Lemma 11 with v = v*)
        phi = top_sum(s, l)
        for t in torch.linspace(-3, 3, 61, dtype=torch.float64):
            lam = torch.full((30,), float(t), dtype=torch.float64)
            gap = threshold_value(s, lam, l) - phi
            dist = (lower - lam).clamp_min(0) + (lam - upper).clamp_min(0)
            assert bool((gap >= dist - 1e-12).all())
            inside = dist == 0
            assert torch.allclose(gap[inside], torch.zeros_like(gap[inside]), atol=1e-12)
    # edge cases: l = 0 → [s_[1], ∞); l = N → (−∞, s_[N]]
    lower, upper = threshold_interval(s, 0)
    assert torch.equal(lower, ordered[:, 0]) and bool(torch.isinf(upper).all())
    lower, upper = threshold_interval(s, 17)
    assert bool(torch.isinf(lower).all()) and torch.equal(upper, ordered[:, -1])


def test_weighted_threshold_interval_matches_brute_force():
    g = torch.Generator().manual_seed(3)
    for trial in range(20):
        s = torch.randn(9, generator=g, dtype=torch.float64)
        w = torch.rand(9, generator=g, dtype=torch.float64) + 0.2
        level = float(torch.rand(1, generator=g)) * float(w.sum())
        lower, upper = threshold_interval(s, level, w)
        grid = torch.linspace(float(s.min()) - 1, float(s.max()) + 1, 4001, dtype=torch.float64)
        grid = torch.cat([grid, s])
        values = threshold_value(s.expand(grid.numel(), -1), grid, level, w)
        best = values.min()
        assert float(best) == pytest.approx(float(top_sum(s, level, w)), abs=1e-10)
        optimal = grid[values <= best + 1e-10]
        assert float(optimal.min()) >= float(lower) - 1e-9 and float(optimal.max()) <= float(upper) + 1e-9
        assert float(threshold_value(s, lower, level, w)) == pytest.approx(float(best), abs=1e-10)
        assert float(threshold_value(s, upper, level, w)) == pytest.approx(float(best), abs=1e-10)


# ---------------------------------------------------------------------------------------------- objectives
def test_weighted_ranked_range_equals_repeated_columns():
    """An integer weight w_j counts column j w_j times: the weighted top sums and ranked-range means equal those of
    the data with the columns repeated (the importance weights of SoRR's stratified batches)."""
    g = torch.Generator().manual_seed(16)
    s = torch.randn(3, 7, generator=g, dtype=torch.float64)
    w = torch.tensor([1, 3, 2, 1, 4, 1, 2], dtype=torch.float64)
    repeated = s.repeat_interleave(w.long(), dim=1)  # 14 columns
    for level in (0.0, 1.0, 2.5, 7.0, 13.2, 14.0):
        assert torch.allclose(top_sum(s, level, w), top_sum(repeated, level), atol=TOL)
    for alpha, beta in ((0.0, 1.0), (0.1, 0.5), (0.3, 0.95)):
        assert torch.allclose(ranked_range_mean(s, alpha, beta, w), ranked_range_mean(repeated, alpha, beta), atol=TOL)
    ordered = torch.sort(repeated, dim=1, descending=True).values  # 14 columns, (0.5, 1]: ranks 8..14
    assert torch.allclose(ranked_range_mean(s, 0.5, 1.0, w), ordered[:, 7:].mean(1), atol=TOL)


def test_unweighted_ranked_range_mean_equals_the_share_form_in_value_and_gradient():
    """Without weights the mean is taken from the sorted row directly (entries ⌊αN⌋ … ⌊βN⌋, the ends by their
    fractional shares); it equals the weighted form with unit weights, values and gradients, at integer and
    fractional levels, both levels inside one entry, and the edges α = 0 and β = 1."""
    g = torch.Generator().manual_seed(3)
    for n in (1, 7, 20):
        s = torch.randn(4, n, generator=g, dtype=torch.float64)
        for alpha, beta in ((0.0, 1.0), (0.05, 0.5), (0.1, 0.15), (0.3, 0.95), (0.25, 0.5), (0.0, 0.01), (0.99, 1.0)):
            fast = s.clone().requires_grad_()
            shares = s.clone().requires_grad_()
            value = ranked_range_mean(fast, alpha, beta)
            reference = ranked_range_mean(shares, alpha, beta, torch.ones(n, dtype=torch.float64))
            assert torch.allclose(value, reference, atol=1e-12, rtol=0), (n, alpha, beta)
            value.sum().backward()
            reference.sum().backward()
            assert torch.allclose(fast.grad, shares.grad, atol=1e-12, rtol=0), (n, alpha, beta)


@pytest.mark.parametrize("surrogate", ["logistic", "squared_hinge", "hinge", "sigmoid", "exp"])
def test_pauc_column_scores_rank_every_row_as_its_own_sort(surrogate):
    """PartialAUCRangeSurrogate's batches carry the negatives' scores as ``column_scores``: ℓ(h_j − h_i) is
    non-decreasing in h_j, so ordering the columns by them sorts every row, and the ranked-range mean read that way
    (one sort of J numbers) equals the mean from each row's own sort, in float32, with tied scores among the
    negatives, at integer and fractional levels."""
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(48, generator=g)
    scores[20:26] = scores[19]  # ties among the columns
    y = (torch.arange(48) % 4 == 0).long()
    batch = {"y": y, "pos_index": torch.where(y == 1, torch.cumsum(y, 0) - 1, -1)}
    rr = PartialAUCRangeSurrogate(0.05, 0.5, surrogate=surrogate, scale=2.0).losses(scores, batch)
    assert rr.column_scores is not None and rr.column_scores.shape == (36,) and not rr.column_scores.requires_grad
    for alpha, beta in ((0.05, 0.5), (0.0, 1.0), (0.1, 0.3), (0.25, 0.5)):
        ordered = ranked_range_mean(rr.losses.detach(), alpha, beta, column_scores=rr.column_scores)
        assert torch.equal(ordered, ranked_range_mean(rr.losses.detach(), alpha, beta)), (alpha, beta)


def test_pauc_objective_is_eq_3_by_brute_force_and_dc_parts():
    x, y = shifted_gaussians(7, 40, 3)
    batch = binary_fields(x, y)
    h = x @ torch.tensor([0.4, -1.0, 0.7], dtype=torch.float64)
    obj = PartialAUCRangeSurrogate(0.05, 0.5)  # m = 2, n = 20
    negatives = sorted(h[y == 0].tolist(), reverse=True)
    total = sum(math.log1p(math.exp(-(hi - negatives[j]))) for hi in h[y == 1].tolist() for j in range(2, 20))
    assert float(obj.exact_value(h, batch)) == pytest.approx(total / (7 * 18), abs=TOL)
    f_m, f_n = obj.dc_components(h, batch)
    assert float(f_n - f_m) == pytest.approx(0.45 * total / (7 * 18), abs=TOL)  # f̃^n − f̃^m = (β − α)F
    assert obj.default_metrics == ("pauc_0.05_0.5", "auroc")


def test_score_gradient_of_a_dc_part_in_chunks_equals_autograd():
    x, y = shifted_gaussians(9, 30, 2, seed=15)
    batch = binary_fields(x, y)
    h = (x @ torch.tensor([0.7, -0.4], dtype=torch.float64)).requires_grad_(True)
    for share in (0.0, 0.1, 0.13, 0.5):  # 0.13 · 30 = 3.9: a fractional boundary negative
        obj = PartialAUCRangeSurrogate(share, 0.95)
        (expected,) = torch.autograd.grad(obj.dc_components(h, batch)[0], h)  # sorts every row of the pair matrix
        for chunk in (2, 4, 1024):
            got = obj.component_score_gradient(h, batch, share, chunk_rows=chunk)  # one shared ranking
            assert torch.allclose(got, expected, atol=TOL), (share, chunk)
        assert torch.allclose(super(PartialAUCRangeSurrogate, obj).component_score_gradient(h, batch, share), expected, atol=TOL)
        assert (float(expected.abs().max()) > 1e-4) == (share > 0)


def test_sorr_objective_and_importance_weights():
    x, y = shifted_gaussians(5, 35, 2, seed=4)
    batch = binary_fields(x, y)
    h = x @ torch.tensor([1.0, -0.5], dtype=torch.float64)
    obj = SumOfRankedRangeLoss(0.1, 0.6)  # N = 40: m = 4, n = 24
    bce = torch.nn.functional.binary_cross_entropy_with_logits(h, y.double(), reduction="none")
    ordered = sorted(bce.tolist(), reverse=True)
    assert float(obj.exact_value(h, batch)) == pytest.approx(sum(ordered[4:24]) / 20, abs=TOL)
    with pytest.raises(RuntimeError, match="bind_sizes"):
        obj.losses(h, batch)
    obj.bind_sizes({"num_positives": 5, "num_samples": 40})
    # a stratified batch with 4 positives of 10: weighted means are the data's class mix
    sub = {k: v[torch.tensor([0, 1, 2, 3, 5, 6, 7, 8, 9, 10])] for k, v in batch.items()}
    rr = obj.losses(h[sub["index"]], sub)
    assert rr.losses.shape == (1, 10) and int(rr.index) == 0
    assert float(rr.weights.mean()) == pytest.approx(1.0, abs=TOL)
    assert float(rr.weights[:4].sum() / 10) == pytest.approx(5 / 40, abs=TOL)
    assert obj.losses(h, batch).weights is not None and torch.allclose(obj.losses(h, batch).weights, torch.ones(40, dtype=torch.float64))
    assert obj.num_rows({"num_samples": 40}) == 1


def test_ranked_objectives_are_not_sox_objectives():
    from fccolit.algorithms.sox import SOX

    x, y = shifted_gaussians(3, 9, 2)
    data = ArrayData(x, y, 6, 2)
    with pytest.raises(TypeError, match="difference-of-convex.*PAUCRange"):
        SOX(LinearScorer(), PartialAUCRangeSurrogate(), data_sizes=data.sizes)
    with pytest.raises(TypeError, match="PartialAUCRangeSurrogate, SumOfRankedRangeLoss"):
        PAUCRange(LinearScorer(), torch.nn.Identity(), data_sizes=data.sizes)
    with pytest.raises(TypeError, match="SumOfRankedRangeLoss"):
        SoRR(LinearScorer(), PartialAUCRangeSurrogate(), data_sizes=data.sizes)
    with pytest.raises(ValueError, match="fpr_min"):
        PartialAUCRangeSurrogate(0.5, 0.5)
    with pytest.raises(ValueError, match="scheduler"):
        PAUCRange(LinearScorer(), data_sizes=data.sizes, scheduler=lambda opt: None)
    with pytest.raises(ValueError, match="envelope_smoothing"):
        PAUCRange(LinearScorer(), data_sizes=data.sizes, envelope_smoothing=0.0)
    with pytest.raises(ValueError, match="evaluate"):
        PAUCRange(LinearScorer(), data_sizes=data.sizes, evaluate="last")
    with pytest.raises(ValueError, match="prox_weight"):
        ProximalDCA(LinearScorer(), data_sizes=data.sizes, prox_weight=0.0)
    with pytest.raises(ValueError, match="data_sizes"):
        PAUCRange(LinearScorer(3))


# ---------------------------------------------------------------------------------------------- the prox step
def test_closed_form_prox_step_is_the_argmin_of_its_subproblem():
    rng = np.random.default_rng(0)
    for trial in range(10):
        d = 5
        v, w, grad = rng.normal(size=d), rng.normal(size=d), rng.normal(size=d) * 3
        mu, eta = 10 ** rng.uniform(-2, 1), 10 ** rng.uniform(-2, 1)
        objective = lambda x: grad @ x + ((x - w) ** 2).sum() / (2 * mu) + ((x - v) ** 2).sum() / (2 * eta)
        jac = lambda x: grad + (x - w) / mu + (x - v) / eta
        numeric = minimize(objective, np.zeros(d), jac=jac, method="BFGS", options={"gtol": 1e-13}).x
        closed = prox_sgd_step(torch.tensor(v), torch.tensor(w), torch.tensor(grad), eta, mu).numpy()
        np.testing.assert_allclose(closed, numeric, atol=1e-9)
        np.testing.assert_allclose(closed, (eta * w + mu * v - mu * eta * grad) / (mu + eta), atol=1e-12)


def test_sbcd_steps_equal_algorithm_1_in_paper_units():
    """Two SBCD steps of PAUCRange (v restarts at w, then the prox term acts) equal Algorithm 1 written with G_v,
    η_t = c/(N₊N₋), μ = μ'/(N₊N₋), θ_t = c/N₋, G_λ = l − (N₋/J)Σ1(s > λ), λ^(0) the batch quantile."""
    x, y = shifted_gaussians(6, 40, 3, seed=5)
    data = ArrayData(x, y, 14, 4)  # I = 4, J = 10
    mu, c, c_lam = 3.0, 0.7, 0.2
    module = linear_module(PAUCRange, data, w0=[0.2, -0.1, 0.3], objective=PartialAUCRangeSurrogate(0.2, 0.5), envelope_smoothing=mu, gamma=2 * mu,
                    lr=c, lambda_lr=c_lam, inner_steps=5)
    rec = PAUCRecorder()
    fit_datamodule(module, data, 2, [rec])
    n_pos, n_neg = 6, 40
    pairs = n_pos * n_neg
    w = rec.before[0]["v"]
    table = torch.full((n_pos,), float("nan"), dtype=torch.float64)
    v = w.clone()
    for t in range(2):
        batch = rec.before[t]["batch"]
        assert torch.allclose(rec.before[t]["v"], v, atol=TOL)
        index, g_hat, lam, p_hat = pauc_hand_step(batch, v, table, 0.2)
        assert float(g_hat.abs().max()) > 1e-3  # a non-trivial step
        v = prox_sgd_step(v, w, pairs * g_hat, c / pairs, mu / pairs)  # eq. (14), paper units
        level = 0.2 * n_neg  # m
        g_lam = level - n_neg * p_hat  # G_λ = l − (N₋/J) Σ_j 1(s_ij > λ_i)
        table[index] = lam - (c_lam / n_neg) * g_lam
        assert torch.allclose(rec.after[t]["v"], v, atol=TOL)
        assert torch.allclose(rec.after[t]["lambda_m"].nan_to_num(-7.0), table.nan_to_num(-7.0), atol=TOL)
    assert not torch.allclose(v, w)


def test_fused_v_step_and_running_sum_equal_the_written_out_formula_to_1e_12():
    """The v step folds the proximal term's gradient (v − w)/μ' into the optimizer (a move towards w) and adds v^(t)
    to the running sum in the same optimizer step: its iterates and the average v̄_m equal the formula written out
    in float64, ``v − (cμ'/(c + μ'))·(ĝ + (v − w)/μ')`` and ``(1/T) Σ_{t<T} v^(t)``, to 1e-12."""
    x, y = shifted_gaussians(6, 40, 3, seed=8)
    data = ArrayData(x, y, 14, 4)
    mu, c = 0.8, 0.6  # c/μ' large enough that the proximal term moves v by as much as ĝ does
    steps = 6
    module = linear_module(PAUCRange, data, w0=[0.4, -0.2, 0.1], objective=PartialAUCRangeSurrogate(0.2, 0.5), envelope_smoothing=mu,
                           gamma=2 * mu, lr=c, inner_steps=steps)
    rec = PAUCRecorder()
    fit_datamodule(module, data, steps, [rec])
    w = rec.before[0]["v"]
    v, iterates = w.clone(), []
    for t in range(steps):
        iterates.append(v)
        assert float((rec.before[t]["v"] - v).abs().max()) <= 1e-12
        _, g_hat, _, _ = pauc_hand_step(rec.before[t]["batch"], v, rec.before[t]["lambda_m"], 0.2)
        v = v - (c * mu / (c + mu)) * (g_hat + (v - w) / mu)
        if t < steps - 1:  # after the branch's last step v restarts at the anchor
            assert float((rec.after[t]["v"] - v).abs().max()) <= 1e-12
    assert float((w - iterates[-1]).abs().max()) > 1e-2  # the steps moved v
    v_bar_m = torch.stack(iterates).mean(0)  # the m-branch's output: v^(0) = w included, the last iterate not
    assert float((rec.after[-1]["v_bar_m"] - v_bar_m).abs().max()) <= 1e-12
    assert torch.equal(module.v_sum, torch.zeros_like(module.v_sum))  # restarted for the n-branch


def test_state_machine_averages_restarts_warm_starts_and_outer_step():
    x, y = shifted_gaussians(4, 24, 2, seed=6)
    data = ArrayData(x, y, 12, 4)  # every batch holds all four positives
    mu, gamma, c = 2.0, 5.0, 0.9
    module = linear_module(PAUCRange, data, w0=[0.5, -0.3], objective=PartialAUCRangeSurrogate(0.25, 0.5), envelope_smoothing=mu, gamma=gamma, lr=c,
                    inner_steps=2, inner_growth=2.0)  # T_0 = 2, T_1 = 8
    rec = PAUCRecorder()
    fit_datamodule(module, data, 20, [rec])
    b, a = rec.before, rec.after
    w0 = b[0]["v"]
    # outer step 0: m-branch steps 0-1, n-branch steps 2-3
    assert [s["loop"]["branch"] for s in b[:4]] == [0, 0, 1, 1]
    assert torch.equal(b[2]["v"], w0)  # v restarts at the anchor for the n-branch
    v_bar_m = (b[0]["v"] + b[1]["v"]) / 2  # the average includes v^(0) = w and excludes the last iterate
    assert torch.allclose(a[1]["v_bar_m"], v_bar_m, atol=TOL)
    v_bar_n = (b[2]["v"] + b[3]["v"]) / 2
    w1 = w0 - (gamma / mu) * (v_bar_m - v_bar_n)
    assert torch.allclose(a[3]["anchor"], w1, atol=TOL) and torch.allclose(a[3]["prox_point"], v_bar_n, atol=TOL)
    assert torch.allclose(b[4]["v"], w1, atol=TOL) and b[4]["loop"] == {"grad_evals": 48, "outer_step": 1, "inner_step": 0, "branch": 0}
    # λ̄ = average of λ^(0), λ^(1) (λ^(0) the batch quantile), the warm start of the next m-branch
    _, _, lam0, _ = pauc_hand_step(b[0]["batch"], b[0]["v"], b[0]["lambda_m"], 0.25)
    lam0_full = torch.full((4,), float("nan"), dtype=torch.float64)
    lam0_full[b[0]["batch"]["pos_index"][b[0]["batch"]["y"] == 1]] = lam0
    assert torch.allclose(b[4]["lambda_m"], (lam0_full + b[1]["lambda_m"]) / 2, atol=TOL)
    assert torch.equal(b[4]["lambda_m"], b[2]["lambda_m"])  # untouched while the n-branch ran
    # outer step 1: T_1 = 8, step sizes c/2, the prox term pulls toward w1
    index, g_hat, lam, p_hat = pauc_hand_step(b[4]["batch"], b[4]["v"], b[4]["lambda_m"], 0.25)
    assert torch.allclose(a[4]["v"], prox_sgd_step(b[4]["v"], w1, g_hat, c / 2, mu), atol=TOL)
    expected = b[4]["lambda_m"].clone()
    expected[index] = lam + (c / 2) * (p_hat - 0.25)
    assert torch.allclose(a[4]["lambda_m"], expected, atol=TOL)
    assert [s["loop"]["branch"] for s in b[4:20]] == [0] * 8 + [1] * 8
    assert torch.equal(b[12]["v"], w1)
    assert a[19]["loop"]["outer_step"] == 2 and torch.allclose(module.flat(), a[19]["anchor"])


def test_alpha_zero_skips_the_m_branch_and_gamma_equal_mu_is_a_prox_point_step():
    x, y = shifted_gaussians(4, 24, 2, seed=7)
    data = ArrayData(x, y, 10, 2)
    module = linear_module(PAUCRange, data, w0=[0.1, 0.4], objective=PartialAUCRangeSurrogate(0.0, 0.5), envelope_smoothing=1.5, gamma=1.5, lr=0.5,
                    inner_steps=3, inner_growth=0.0)
    rec = PAUCRecorder()
    fit_datamodule(module, data, 6, [rec])
    assert not hasattr(module, "lambda_m")
    assert all(s["loop"]["branch"] == 1 for s in rec.before)
    v_bar = (rec.before[0]["v"] + rec.before[1]["v"] + rec.before[2]["v"]) / 3
    assert torch.allclose(rec.after[2]["anchor"], v_bar, atol=TOL)  # w ← w + (γ/μ)(v̄_n − w) = v̄_n
    assert torch.allclose(rec.after[2]["prox_point"], v_bar, atol=TOL)
    assert not torch.allclose(v_bar, rec.before[0]["v"])


@pytest.mark.slow
def test_sbcd_converges_to_the_exact_prox_point_as_T_grows():
    """Linear model, logistic ℓ (f^l convex), exact prox points from Nelder–Mead + Powell; steps c = θ = 1/√T
    (Proposition 4's order). Mean ‖v̄ − v*‖ over two sampler seeds for T = 16, 128, 1024."""
    x, y = shifted_gaussians(6, 30, 2, seed=0)
    full = binary_fields(x, y)
    obj = PartialAUCRangeSurrogate(0.1, 0.5)  # m = 3, n = 15
    w0, mu = np.array([0.3, -0.2]), 1.0

    def exact_prox(part):
        f = lambda v: float(obj.dc_components(x @ torch.as_tensor(v), full)[part]) + ((v - w0) ** 2).sum() / (2 * mu)
        r = minimize(f, w0, method="Nelder-Mead", options=dict(xatol=1e-13, fatol=1e-15, maxiter=20000))
        return minimize(f, r.x, method="Powell", options=dict(xtol=1e-13, ftol=1e-15)).x

    v_m, v_n = exact_prox(0), exact_prox(1)
    errors = {}
    for T in (16, 128, 1024):
        runs = []
        for seed in (0, 1):
            data = ArrayData(x, y, 12, 2, seed=seed)
            module = linear_module(PAUCRange, data, w0=w0, objective=obj, envelope_smoothing=mu, gamma=mu, lr=T ** -0.5, inner_steps=T,
                            inner_growth=0.0, step_decay=False)
            fit_datamodule(module, data, 2 * T)
            runs.append([np.linalg.norm(module.v_bar_m.numpy() - v_m), np.linalg.norm(module.prox_point.numpy() - v_n)])
        errors[T] = np.mean(runs, axis=0)
    start = [np.linalg.norm(w0 - v_m), np.linalg.norm(w0 - v_n)]
    for branch in (0, 1):
        series = [errors[T][branch] for T in (16, 128, 1024)]
        assert series[0] > series[1] > series[2], (branch, series)
        assert series[2] < series[0] / 3 and series[2] < 0.25 * start[branch], (branch, series, start)


@pytest.mark.slow
def test_thresholds_track_the_quantile_at_a_fixed_point():
    """lr = 0 keeps v = w; λ̄ then lands in [s_i[l+1], s_i[l]] computed on the whole data (the quantile tracker)."""
    x, y = shifted_gaussians(4, 40, 3, seed=1)
    data = ArrayData(x, y, 22, 2)
    module = linear_module(PAUCRange, data, w0=[0.3, 0.2, -0.4], objective=PartialAUCRangeSurrogate(0.1, 0.5), lr=0.0,
                    lambda_lr=0.05, inner_steps=800, inner_growth=0.0, step_decay=False)
    fit_datamodule(module, data, 1600)
    full = binary_fields(x, y)
    rr = module.objective.losses(module.model(full["x"]), full)
    for tracker, share in ((module.lambda_m, 0.1), (module.lambda_n, 0.5)):
        lower, upper = threshold_interval(rr.losses.detach(), share * 40)
        lam = tracker.values[rr.index]
        distance = (lower - lam).clamp_min(0) + (lam - upper).clamp_min(0)
        assert float(distance.max()) < 0.02 and float(distance.mean()) < 0.01, (share, lower, upper, lam)


# ---------------------------------------------------------------------------------------------- Moreau identities
def _exact_prox_1d(fprime, w, mu):
    return brentq(lambda v: v - w + mu * fprime(v), w - 100, w + 100, xtol=1e-15)


def test_moreau_gradient_sandwich_and_prox_distance_bound():
    """Exact prox points of f̃^l (scale-free) on a convex toy: ∇F^μ = (v_m − v_n)/μ (central differences),
    F(v_n) <= F^μ(w) <= F(v_m) (Sun & Sun Lemma 1), and ‖w − v_l‖ <= μ N₊ l B (paper units)."""
    x, y = shifted_gaussians(6, 30, 2, seed=8)
    full = binary_fields(x, y)
    obj = PartialAUCRangeSurrogate(0.1, 0.5)
    mu = 0.5  # μ' (scale-free): prox of f̃ = f/(N₊N₋)

    def parts(v):
        return [float(p) for p in obj.dc_components(x @ torch.as_tensor(v), full)]

    def prox(w, part):
        f = lambda v: parts(v)[part] + ((v - w) ** 2).sum() / (2 * mu)
        r = minimize(f, w, method="Nelder-Mead", options=dict(xatol=1e-13, fatol=1e-15, maxiter=20000))
        r = minimize(f, r.x, method="Powell", options=dict(xtol=1e-13, ftol=1e-15))
        return r.x, r.fun

    def envelope(w):
        (v_m, e_m), (v_n, e_n) = prox(w, 0), prox(w, 1)
        return e_n - e_m, v_m, v_n

    w = np.array([0.8, -0.6])
    value, v_m, v_n = envelope(w)
    gradient = (v_m - v_n) / mu
    h = 1e-4
    numeric = [(envelope(w + h * e)[0] - envelope(w - h * e)[0]) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(gradient, numeric, atol=2e-4)
    assert np.abs(gradient).max() > 1e-2
    F = lambda v: parts(v)[1] - parts(v)[0]
    assert F(v_n) <= value + 1e-10 and value <= F(v_m) + 1e-10
    assert F(v_n) < F(v_m)
    # ‖∇s_ij‖ = σ(·)‖x_j − x_i‖ <= B := max ‖x_j − x_i‖; scale-free bound μ'·(l/N₋)·B = μ N₊ l B
    B = max(float((x[j] - x[i]).norm()) for i in range(6) for j in range(6, 36))
    for v, share in ((v_m, 0.1), (v_n, 0.5)):
        assert np.linalg.norm(w - v) <= mu * share * B + 1e-9


def test_printed_prox_bound_misses_a_factor_of_num_positives():
    """(27) prints ‖w − v_{μf^l}(w)‖ <= μ l B, but ∂f^l = Σ_i ∂φ_l(S_i) has norm up to N₊ l B. Identical positives at
    x = 1 and negatives at x = 0 make the bound fail for N₊ >= 3; μ N₊ l B holds."""
    num_pos, num_neg, l, mu = 5, 8, 3, 0.01  # paper units
    # f^l(v) = N₊ · l · log(1 + e^{−v}): every pair has the same loss; B = sup |σ(−v)| = 1
    fprime = lambda v: -num_pos * l / (1 + math.exp(v))
    w = 0.0
    v = _exact_prox_1d(fprime, w, mu)
    # check against the library's f^l on that data (scale-free: f̃ = f/(N₊N₋), μ' = μ N₊N₋)
    x = torch.cat([torch.ones(num_pos, 1), torch.zeros(num_neg, 1)]).double()
    yy = torch.cat([torch.ones(num_pos), torch.zeros(num_neg)]).long()
    full = binary_fields(x, yy)
    f_m = float(PartialAUCRangeSurrogate(l / num_neg, 1.0).dc_components(x[:, 0] * v, full)[0])
    assert f_m * num_pos * num_neg == pytest.approx(num_pos * l * math.log1p(math.exp(-v)), rel=1e-12)
    distance, B = abs(w - v), 1.0
    assert distance > mu * l * B  # the printed bound fails
    assert distance <= mu * num_pos * l * B  # the corrected one holds


# ---------------------------------------------------------------------------------------------- SoRR and DCA
def test_sorr_is_the_one_row_machinery_with_reweighted_batches():
    x, y = shifted_gaussians(6, 30, 2, seed=9)
    data = ArrayData(x, y, 12, 4)  # positives oversampled: 4 of 12 against 6 of 36
    module = linear_module(SoRR, data, w0=[0.3, -0.3], objective=SumOfRankedRangeLoss(0.1, 0.5), envelope_smoothing=2.0, gamma=2.0, lr=0.4,
                    inner_steps=3, inner_growth=0.0)
    rec = PAUCRecorder()
    fit_datamodule(module, data, 2, [rec])
    assert module.lambda_n.values.shape == (1,) and module.lambda_m.values.shape == (1,)
    batch, v = rec.before[1]["batch"], rec.before[1]["v"]
    x_b, y_b = batch["x"], batch["y"].double()
    weights = torch.where(y_b == 1, (6 / 36) / (4 / 12), (30 / 36) / (8 / 12))
    h = x_b @ v
    losses = torch.nn.functional.binary_cross_entropy_with_logits(h, y_b, reduction="none")
    lam = float(rec.before[1]["lambda_m"][0])
    mask = (losses > lam).double()
    grad = ((weights * mask * (torch.sigmoid(h) - y_b))[:, None] * x_b).mean(0)  # Algorithm 3, G_v/N
    assert torch.allclose(rec.after[1]["v"], prox_sgd_step(v, rec.before[0]["v"], grad, 0.4, 2.0), atol=TOL)
    p_hat = float((weights * mask).mean())
    assert float(rec.after[1]["lambda_m"][0]) == pytest.approx(lam + 0.4 * (p_hat - 0.1), abs=TOL)


def test_dca_subgradient_steps_and_last_iterate():
    x, y = shifted_gaussians(5, 30, 2, seed=10)
    data = ArrayData(x, y, 13, 3)
    obj = PartialAUCRangeSurrogate(0.1, 0.5)
    for cls, L in ((DCA, 0.0), (ProximalDCA, 0.8)):
        module = linear_module(cls, data, w0=[0.4, -0.2], objective=obj, lr=0.6, inner_steps=3, inner_growth=0.0,
                        **({"prox_weight": L} if L else {}))
        rec = PAUCRecorder()
        fit_datamodule(module, data, 5, [rec])
        b, a = rec.before, rec.after
        w0 = b[0]["v"]
        # ξ = ∇f̃^m(w^(0)) over the whole training set (autograd of the objective's DC part)
        full = binary_fields(x, y)
        wt = w0.clone().requires_grad_(True)
        (xi,) = torch.autograd.grad(obj.dc_components(x @ wt, full)[0], wt)
        assert torch.allclose(a[0]["xi"], xi, atol=TOL) and float(xi.norm()) > 1e-3
        table = torch.full((5,), float("nan"), dtype=torch.float64)
        v = w0.clone()
        for t in range(3):
            index, g_hat, lam, p_hat = pauc_hand_step(b[t]["batch"], v, table, 0.5)
            v = prox_sgd_step(v, w0, g_hat - xi, 0.6, 1.0 / L) if L else v - 0.6 * (g_hat - xi)
            table[index] = lam + 0.6 * (p_hat - 0.5)
            assert torch.allclose(a[t]["v"], v, atol=TOL), (cls, t)
            assert torch.allclose(a[t]["lambda_n"].nan_to_num(-7.0), table.nan_to_num(-7.0), atol=TOL)
        # the next outer step starts from the last iterate with a fresh ξ at it and step c/2
        assert torch.allclose(a[3]["anchor"], v, atol=TOL)
        wt = v.clone().requires_grad_(True)
        (xi1,) = torch.autograd.grad(obj.dc_components(x @ wt, full)[0], wt)
        assert torch.allclose(a[3]["xi"], xi1, atol=TOL)
        assert module.loop["grad_evals"] == 2 * 35 + 5 * 13  # two full passes and five batches


def test_pairwise_auc_and_minibatch_baselines():
    x, y = shifted_gaussians(5, 30, 2, seed=11)
    data = ArrayData(x, y, 12, 4)
    module = linear_module(PairwiseAUC, data, w0=[0.2, 0.1], optimizer=lambda p: torch.optim.SGD(p, lr=0.3))
    rec = PAUCRecorder()
    fit_datamodule(module, data, 1, [rec])
    batch, v = rec.before[0]["batch"], rec.before[0]["v"]
    xb, yb = batch["x"], batch["y"]
    diff = (xb[yb == 0] @ v)[None, :] - (xb[yb == 1] @ v)[:, None]
    pair_grad = torch.sigmoid(diff)[..., None] * (xb[yb == 0][None, :, :] - xb[yb == 1][:, None, :])
    assert torch.allclose(rec.after[0]["v"], v - 0.3 * pair_grad.mean((0, 1)), atol=TOL)
    assert module.objective.alpha == 0.0 and module.objective.beta == 1.0
    assert module.metric_names == ["auroc", "pauc_0.05_0.5"]
    # MB: the gradient of the batch's ranked-range mean (ranks fixed)
    mb = linear_module(MiniBatchPAUC, data, w0=[0.2, 0.1], objective=PartialAUCRangeSurrogate(0.25, 0.75),
                optimizer=lambda p: torch.optim.SGD(p, lr=0.3))
    rec = PAUCRecorder()
    fit_datamodule(mb, data, 1, [rec])
    batch, v = rec.before[0]["batch"], rec.before[0]["v"]
    wt = v.clone().requires_grad_(True)
    xb, yb = batch["x"], batch["y"]
    losses = torch.nn.functional.softplus((xb[yb == 0] @ wt)[None, :] - (xb[yb == 1] @ wt)[:, None])
    ordered = torch.sort(losses, dim=1, descending=True).values  # J = 8: ranks 3..6
    (g,) = torch.autograd.grad(ordered[:, 2:6].mean(), wt)
    assert torch.allclose(rec.after[0]["v"], v - 0.3 * g, atol=TOL)


# ---------------------------------------------------------------------------------------------- evaluation
def test_validation_logs_the_prox_point_and_the_anchor_against_brute_force_and_sklearn():
    x, y = shifted_gaussians(8, 40, 3, seed=12)
    xv, yv = shifted_gaussians(10, 40, 3, seed=13, shift=0.3)  # N₋ = 40: m = 2, n = 20, 0.3·40 = 12
    data = ArrayData(x, y, 12, 2, val=(xv, yv))
    metrics = ["pauc_0.05_0.5", "pauc_0_0.3"]
    for evaluate, other in (("prox", "anchor"), ("anchor", "prox")):
        module = linear_module(PAUCRange, data, w0=[0.1, 0.1, 0.1], bias=True, envelope_smoothing=1.0, gamma=3.0, lr=2.0, inner_steps=2,
                        inner_growth=0.0, evaluate=evaluate, metrics=metrics)
        # one outer step completes (4 steps), so v̄_n exists and differs from w
        trainer = fit_datamodule(module, data, 6, limit_val_batches=1.0, val_check_interval=6, check_val_every_n_epoch=None)
        logged = trainer.validate(module, datamodule=data, verbose=False)[0]
        vectors = {"prox": module.prox_point, "anchor": module.anchor}
        assert not torch.allclose(vectors["prox"], vectors["anchor"])
        for tag, vector in ((f"val", vectors[evaluate]), (f"val_{other}", vectors[other])):
            scores = (xv @ vector[:3] + vector[3]).numpy()
            pos, neg = scores[yv.numpy() == 1], np.sort(scores[yv.numpy() == 0])[::-1]
            eq2 = sum(float(p > neg[j]) for p in pos for j in range(2, 20)) / (10 * 18)  # eq. (2), strict
            assert logged[f"{tag}/pauc_0.05_0.5"] == pytest.approx(eq2, abs=1e-6)
            st = roc_auc_score(yv.numpy(), scores, max_fpr=0.3)  # McClish-standardised
            area = 0.5 * 0.3**2 + (2 * st - 1) * (0.3 - 0.5 * 0.3**2)
            assert logged[f"{tag}/pauc_0_0.3"] == pytest.approx(area / 0.3, abs=1e-6)
        scores = trainer.predict(module, datamodule=data)[0]
        assert torch.allclose(scores, xv @ vectors[evaluate][:3] + vectors[evaluate][3])


# ---------------------------------------------------------------------------------------------- checkpoints
def test_checkpoint_mid_branch_resumes_the_same_trajectory(tmp_path):
    x, y = shifted_gaussians(6, 40, 2, seed=14)

    def run(steps, resume=None, every=0):
        data = ArrayData(x, y, 12, 2)
        module = linear_module(PAUCRange, data, envelope_smoothing=1.0, gamma=2.0, lr=0.5, inner_steps=2)  # T_0 = 2, T_1 = 8
        callbacks = [ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=every, save_top_k=-1)] if every else []
        trainer = Trainer(accelerator="cpu", max_steps=steps, precision="64-true", logger=False,
                          enable_checkpointing=bool(every), enable_progress_bar=False, enable_model_summary=False,
                          num_sanity_val_steps=0, limit_val_batches=0, callbacks=callbacks)
        trainer.fit(module, datamodule=data, ckpt_path=resume)
        return module

    full = run(13, every=6)
    resumed = run(13, resume=str(tmp_path / "step=6.ckpt"))  # step 6: outer step 1, m-branch, t = 2 of 8
    assert torch.load(tmp_path / "step=6.ckpt", weights_only=False)["state_dict"]["_extra_state"] == {
        "grad_evals": 72, "outer_step": 1, "inner_step": 2, "branch": 0}
    a, b = full.state_dict(), resumed.state_dict()
    assert a["_extra_state"] == b["_extra_state"] == {"grad_evals": 156, "outer_step": 1, "inner_step": 1, "branch": 1}
    for key in a:
        if key != "_extra_state":
            assert torch.equal(a[key].nan_to_num(-9.0), b[key].nan_to_num(-9.0)), key


# ---------------------------------------------------------------------------------------------- DDP
@pytest.mark.ddp
@pytest.mark.slow
def test_two_processes_equal_one_process_and_resume(tmp_path):
    script = DDP_SCRIPTS / "ddp_run_pauc.py"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def run(name, devices, *extra):
        out = tmp_path / name
        out.mkdir()
        cmd = [sys.executable, str(script), "--devices", str(devices), "--out", str(out), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)]

    single = run("single", 1)
    double = run("double", 2, "--save-every", "9")
    resumed = run("resumed", 2, "--resume", str(tmp_path / "double" / "step=18.ckpt"))

    def tensors(result):
        return {k: v.nan_to_num(-123.0) for k, v in result["module"].items() if isinstance(v, torch.Tensor)}

    one = tensors(single[0])
    assert single[0]["module"]["_extra_state"]["outer_step"] >= 2  # crossed two outer steps
    for key in ("lambda_m.state.value", "lambda_n.state.value", "anchor", "v_bar_m", "prox_point", "v_sum"):
        assert key in one and (one[key] != -123.0).any(), key
    for result in double + resumed:
        other = tensors(result)
        assert result["module"]["_extra_state"] == single[0]["module"]["_extra_state"]
        for key in one:
            assert torch.allclose(one[key], other[key], rtol=1e-10, atol=1e-12), key
    for key in one:  # identical on both ranks, and the resumed run equals the uninterrupted one exactly
        assert torch.equal(tensors(double[0])[key], tensors(double[1])[key]), key
        assert torch.equal(tensors(double[0])[key], tensors(resumed[0])[key]), key
    for step, (_, _, record) in single[0]["trace"].items():
        assert sorted(double[0]["trace"][step][2] + double[1]["trace"][step][2]) == sorted(record)


# The pAUC configs (libsvm, cifar_lt, chexpert) run in tests/cli/test_configs.py.
