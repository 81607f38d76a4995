"""The partial-AUC options the paper leaves open (Yao, Lin & Yang, "Large-scale Optimization of Partial AUC in a
Range of False Positive Rates", NeurIPS 2022): the score transform of the pair margins, the cap on the inner steps
T_k and the SBCD output (average or last iterate); each is reachable from YAML."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from builders import (
    ArrayData, PAUCRecorder, fit_datamodule, linear_module, pauc_hand_step, prox_sgd_step, shifted_gaussians,
)
from jsonargparse import ArgumentParser

from fccolit.algorithms.pauc import PAUCRange, SoRR
from fccolit.data import binary_fields
from fccolit.objectives.pauc import PartialAUCRangeSurrogate, RankedRangeObjective

TOL = 1e-12


# ------------------------------------------------------------------------------------------ score transform
def test_sigmoid_score_transform_takes_the_pair_margins_on_sigmoid_scores():
    x, y = shifted_gaussians(5, 12, 3, seed=3)
    batch = binary_fields(x, y)
    h = x @ torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    identity = PartialAUCRangeSurrogate(0.1, 0.6, surrogate="squared_hinge", margin=1.0)
    sigmoid = PartialAUCRangeSurrogate(0.1, 0.6, surrogate="squared_hinge", margin=1.0, score_transform="sigmoid")
    pos, neg = (y == 1).nonzero().flatten(), (y == 0).nonzero().flatten()
    s = torch.sigmoid(h)
    expected = (1.0 + s[neg][None, :] - s[pos][:, None]).clamp_min(0.0) ** 2  # LibAUC's (m − (σ_i − σ_j))_+²
    assert torch.allclose(sigmoid.losses(h, batch).losses, expected, atol=TOL)
    assert not torch.allclose(identity.losses(h, batch).losses, expected)
    assert float(sigmoid.losses(100.0 * h, batch).losses.max()) <= 4.0  # bounded by (1 + margin)²
    # the ranking, hence the objective's rows, are those of h: the same negatives are counted in each row
    ranked_h = torch.argsort(h[neg], descending=True)
    ranked_s = torch.argsort(sigmoid.losses(h, batch).losses[0], descending=True)
    assert torch.equal(ranked_h, ranked_s)
    with pytest.raises(ValueError, match="score_transform"):
        PartialAUCRangeSurrogate(score_transform="tanh")


def test_sigmoid_transform_dc_part_gradient_equals_autograd():
    """DCA's ξ (the chunked, ranking-once gradient) is the autograd gradient of the DC part with the transform."""
    x, y = shifted_gaussians(7, 25, 2, seed=5)
    batch = binary_fields(x, y)
    h = (x @ torch.tensor([1.3, -0.6], dtype=torch.float64)).requires_grad_(True)
    for share in (0.08, 0.2, 0.5):
        obj = PartialAUCRangeSurrogate(share, 0.9, surrogate="logistic", score_transform="sigmoid")
        (expected,) = torch.autograd.grad(obj.dc_components(h, batch)[0], h)
        got = obj.component_score_gradient(h, batch, share, chunk_rows=3)
        assert torch.allclose(got, expected, atol=TOL), share
        assert torch.allclose(RankedRangeObjective.component_score_gradient(obj, h, batch, share), expected, atol=TOL)
        plain = PartialAUCRangeSurrogate(share, 0.9, surrogate="logistic").component_score_gradient(h, batch, share)
        assert not torch.allclose(got, plain)


# ------------------------------------------------------------------------------------------ T_k cap
def test_max_inner_steps_caps_T_k_and_keeps_outer_steps_coming():
    x, y = shifted_gaussians(4, 24, 2, seed=6)
    data = ArrayData(x, y, 12, 4)
    kw = dict(objective=PartialAUCRangeSurrogate(0.25, 0.5), envelope_smoothing=2.0, gamma=4.0, lr=0.5, inner_steps=2, inner_growth=2.0)
    capped = linear_module(PAUCRange, data, w0=[0.5, -0.3], max_inner_steps=3, **kw)
    assert [capped.inner_steps_at(k) for k in range(4)] == [2, 3, 3, 3]  # C(k+1)² = 2, 8, 18, 32 without the cap
    paper = linear_module(PAUCRange, data, w0=[0.5, -0.3], **kw)
    assert [paper.inner_steps_at(k) for k in range(4)] == [2, 8, 18, 32]
    fit_datamodule(capped, data, 16)
    fit_datamodule(paper, data, 16)
    assert capped.loop["outer_step"] == 3 and paper.loop["outer_step"] == 1  # 4 + 6 + 6 steps against 4 + 16
    with pytest.raises(ValueError, match="max_inner_steps"):
        linear_module(PAUCRange, data, max_inner_steps=0, **kw)


# ------------------------------------------------------------------------------------------ SBCD output
def test_inner_output_last_returns_the_last_iterate_and_last_thresholds():
    x, y = shifted_gaussians(4, 24, 2, seed=8)
    data = ArrayData(x, y, 12, 4)  # every batch holds all four positives
    mu, gamma, c = 2.0, 5.0, 0.9
    kw = dict(objective=PartialAUCRangeSurrogate(0.25, 0.5), envelope_smoothing=mu, gamma=gamma, lr=c, inner_steps=3, inner_growth=0.0)
    module = linear_module(PAUCRange, data, w0=[0.5, -0.3], inner_output="last", **kw)
    rec = PAUCRecorder()
    fit_datamodule(module, data, 6, [rec])
    b, a = rec.before, rec.after
    w0 = b[0]["v"]

    def last_step(t, table, share):  # v^{(T)} and λ^{(T)} from the branch's last step, by hand (Algorithm 1)
        index, g_hat, lam, p_hat = pauc_hand_step(b[t]["batch"], b[t]["v"], b[t][table], share)
        thresholds = b[t][table].clone()
        thresholds[index] = lam + c * (p_hat - share)
        return prox_sgd_step(b[t]["v"], w0, g_hat, c, mu), thresholds

    v_m, lam_m = last_step(2, "lambda_m", 0.25)
    v_n, _ = last_step(5, "lambda_n", 0.5)
    assert torch.allclose(a[2]["v_bar_m"], v_m, atol=TOL)
    assert not torch.allclose(a[2]["v_bar_m"], (b[0]["v"] + b[1]["v"] + b[2]["v"]) / 3)  # not Algorithm 1's average
    assert torch.allclose(a[5]["prox_point"], v_n, atol=TOL)
    assert torch.allclose(a[5]["anchor"], w0 - (gamma / mu) * (v_m - v_n), atol=TOL)
    # the thresholds keep their last value (no averaging) as the next call's warm start
    assert torch.allclose(module.lambda_m.values, lam_m, atol=TOL)
    assert float(module.lambda_m.total.abs().sum()) == 0.0 and int(module.lambda_m.mark.sum()) == 0
    # the default (Algorithm 1) averages
    averaged = linear_module(PAUCRange, data, w0=[0.5, -0.3], **kw)
    fit_datamodule(averaged, data, 3)
    assert torch.allclose(averaged.v_bar_m, (b[0]["v"] + b[1]["v"] + b[2]["v"]) / 3, atol=TOL)
    with pytest.raises(ValueError, match="inner_output"):
        linear_module(PAUCRange, data, inner_output="suffix", **kw)


# ------------------------------------------------------------------------------------------ YAML
def test_the_options_are_reachable_from_yaml():
    config = yaml.safe_load("""
model:
  class_path: fccolit.algorithms.pauc.PAUCRange
  init_args:
    model:
      class_path: fccolit.models.LinearScorer
      init_args: {in_features: 3}
    objective:
      class_path: fccolit.objectives.pauc.PartialAUCRangeSurrogate
      init_args: {fpr_min: 0.05, fpr_max: 0.5, surrogate: squared_hinge, score_transform: sigmoid}
    max_inner_steps: 400
    inner_output: last
    data_sizes: {num_samples: 20, num_positives: 5, num_negatives: 15, num_features: 3}
""")
    parser = ArgumentParser()
    parser.add_subclass_arguments(PAUCRange, "model")
    module = parser.instantiate(parser.parse_object(config)).model
    assert module.max_inner_steps == 400 and module.inner_output == "last"
    assert module.objective.score_transform == "sigmoid" and module.objective.surrogate == "squared_hinge"
    assert module.inner_steps_at(10) == 400


def test_sorr_inherits_the_cap_and_the_output():
    x, y = shifted_gaussians(6, 20, 2, seed=2)
    data = ArrayData(x, y, 10, 3)
    module = linear_module(SoRR, data, w0=[0.2, 0.1], envelope_smoothing=5.0, gamma=5.0, lr=0.5, inner_steps=2, max_inner_steps=2,
                    inner_output="last")
    fit_datamodule(module, data, 8)
    assert module.loop["outer_step"] == 2 and all(math.isfinite(float(v)) for v in module.anchor)
