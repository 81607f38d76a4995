"""Tests of fccolit.metrics.functional.classification (average precision, AUROC, partial AUC, the sorted-negatives
pAUC) against independent oracles: sklearn and brute force over pairs. All float64, small and fast."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from fccolit.metrics.functional import ap_score, auroc_score, partial_auc_score, partial_auc_sorted_negatives

from ..helpers import binary_data

TOL = 1e-12


def _undo_mcclish(st: float, beta: float) -> float:
    """Raw area A(0, β) from sklearn's McClish-standardized roc_auc_score(max_fpr=β)."""
    return 0.5 * beta * beta + (2.0 * st - 1.0) * (beta - 0.5 * beta * beta)


def _sklearn_area(y, s, x: float) -> float:
    """A(0, x) = ∫_0^x ROC via sklearn (McClish's standardization undone)."""
    if x == 0:
        return 0.0
    if x >= 1:
        return roc_auc_score(y, s)
    return _undo_mcclish(roc_auc_score(y, s, max_fpr=x), x)


def _brute_pauc_eq2(s: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> float:
    """Eq. (2) of Yao, Lin & Yang (NeurIPS 2022) by explicit pair counting (integer N-·α, N-·β)."""
    pos = s[y == 1]
    neg = sorted(s[y == 0].tolist(), reverse=True)
    m, n = round(alpha * len(neg)), round(beta * len(neg))
    count = sum(1 for sp in pos for sn in neg[m:n] if sp > sn)
    return count / (len(pos) * (n - m))


# ------------------------------------------------------------------------------------------------------
# average precision and AUROC
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_average_precision_matches_sklearn_tie_free(seed):
    s, y = binary_data(seed)
    assert torch.unique(s).numel() == s.numel()
    assert float(ap_score(s, y)) == pytest.approx(average_precision_score(y.numpy(), s.numpy()), abs=TOL)
    # without ties AP is the mean over positives of the precision at the positive's rank (SOAP's AP)
    order = torch.argsort(s, descending=True)
    ys = y[order].double()
    prec_at_rank = torch.cumsum(ys, 0) / torch.arange(1, len(ys) + 1)
    assert float(ap_score(s, y)) == pytest.approx(float(prec_at_rank[ys == 1].mean()), abs=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_average_precision_with_ties_uses_sklearn_threshold_convention(seed):
    # sklearn treats a tied group as one threshold (all of it enters the precision at once); so do we, so
    # the values are equal with ties too. (The per-positive "precision at rank" form is then order-dependent.)
    s, y = binary_data(seed, ties=True)
    assert torch.unique(s).numel() < s.numel() // 4
    assert float(ap_score(s, y)) == pytest.approx(average_precision_score(y.numpy(), s.numpy()), abs=TOL)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_auroc_matches_sklearn_and_pair_count(seed, ties):
    s, y = binary_data(seed, n=150, ties=ties)
    expected = roc_auc_score(y.numpy(), s.numpy())
    assert float(auroc_score(s, y)) == pytest.approx(expected, abs=TOL)
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    pairs = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean()
    assert float(auroc_score(s, y)) == pytest.approx(float(pairs), abs=TOL)


def test_binary_metrics_invariant_to_monotone_transform_and_input_forms():
    s, y = binary_data(7, ties=True)
    t = torch.sigmoid(3 * s)  # strictly increasing, keeps ties
    for fn in (ap_score, auroc_score, lambda a, b: partial_auc_score(a, b, 0.1, 0.4)):
        ref = float(fn(s, y))
        assert float(fn(t, y)) == pytest.approx(ref, abs=TOL)
        assert float(fn(s[:, None], y.bool())) == pytest.approx(ref, abs=TOL)
        assert float(fn(s.float(), y.float())) == pytest.approx(ref, abs=TOL)  # float32 keeps ties here


# ------------------------------------------------------------------------------------------------------
# partial AUC
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("beta", [0.05, 0.1, 0.3, 0.5, 0.77, 1.0])
def test_partial_auc_from_zero_matches_sklearn_max_fpr(beta, ties):
    for seed in range(3):
        s, y = binary_data(seed, n=203, ties=ties)  # N- is not a round number: interpolation at β matters
        st = roc_auc_score(y.numpy(), s.numpy(), max_fpr=beta)
        assert float(partial_auc_score(s, y, 0.0, beta, "mcclish")) == pytest.approx(st, abs=TOL)
        raw = float(partial_auc_score(s, y, 0.0, beta, "raw"))
        assert raw == pytest.approx(_undo_mcclish(st, beta), abs=TOL)
        assert float(partial_auc_score(s, y, 0.0, beta, "normalized")) == pytest.approx(raw / beta, abs=TOL)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("alpha,beta", [(0.05, 0.5), (0.1, 0.3), (0.37, 0.91), (0.5, 1.0), (0.0, 1.0)])
def test_partial_auc_range_matches_sklearn_difference(alpha, beta, ties):
    # A(α, β) = A(0, β) − A(0, α), each recovered from sklearn's McClish value (any α, β, any ties)
    s, y = binary_data(11, n=211, ties=ties)
    ref = _sklearn_area(y.numpy(), s.numpy(), beta) - _sklearn_area(y.numpy(), s.numpy(), alpha)
    assert float(partial_auc_score(s, y, alpha, beta, "raw")) == pytest.approx(ref, abs=1e-12)
    assert float(partial_auc_score(s, y, alpha, beta)) == pytest.approx(ref / (beta - alpha), abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha,beta", [(0.0, 0.3), (0.05, 0.5), (0.1, 1.0), (0.0, 1.0), (0.25, 0.35)])
def test_partial_auc_equals_sorted_negatives_definition_tie_free(seed, alpha, beta):
    s, y = binary_data(seed, n=300)
    n_neg = int((y == 0).sum())
    # make N-·α and N-·β integers by trimming negatives to a multiple of 20
    keep_neg = torch.nonzero(y == 0).flatten()[: (n_neg // 20) * 20]
    keep = torch.cat([torch.nonzero(y == 1).flatten(), keep_neg])
    s, y = s[keep], y[keep]
    n_neg = int((y == 0).sum())
    assert (alpha * n_neg).is_integer() or abs(alpha * n_neg - round(alpha * n_neg)) < 1e-9
    eq2 = float(partial_auc_sorted_negatives(s, y, alpha, beta))
    assert eq2 == pytest.approx(float(partial_auc_score(s, y, alpha, beta, "normalized")), abs=TOL)
    assert eq2 == pytest.approx(float(partial_auc_score(s, y, alpha, beta, "raw")) / (beta - alpha), abs=TOL)
    assert eq2 == pytest.approx(_brute_pauc_eq2(s.numpy(), y.numpy(), alpha, beta), abs=TOL)


def test_sorted_negatives_fractional_boundaries_and_ties():
    s, y = binary_data(3, n=203)
    # tie-free, non-integer N-·α, N-·β: fractional boundary weights still equal the ROC integral
    assert float(partial_auc_sorted_negatives(s, y, 0.033, 0.517)) == pytest.approx(
        float(partial_auc_score(s, y, 0.033, 0.517)), abs=TOL
    )
    # with ties: strict ">" (paper) <= ties-as-1/2 (ROC), and eq. (2) still equals the strict pair count
    s, y = binary_data(3, n=200, ties=True)
    keep = torch.cat([torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()[:120]])
    s, y = s[keep], y[keep]
    strict = float(partial_auc_sorted_negatives(s, y, 0.25, 0.75))
    assert strict <= float(partial_auc_score(s, y, 0.25, 0.75)) - 1e-3
    assert strict == pytest.approx(_brute_pauc_eq2(s.numpy(), y.numpy(), 0.25, 0.75), abs=TOL)


def test_partial_auc_identities_with_ties():
    s, y = binary_data(5, ties=True)
    assert float(partial_auc_score(s, y, 0.0, 1.0, "raw")) == pytest.approx(float(auroc_score(s, y)), abs=TOL)
    assert float(partial_auc_score(s, y, 0.0, 1.0, "mcclish")) == pytest.approx(float(auroc_score(s, y)), abs=TOL)
    parts = [0.0, 0.13, 0.4, 0.41, 1.0]
    total = sum(float(partial_auc_score(s, y, a, b, "raw")) for a, b in zip(parts[:-1], parts[1:]))
    assert total == pytest.approx(float(auroc_score(s, y)), abs=TOL)
    # perfect and reversed rankings
    yy = torch.tensor([1, 1, 0, 0, 0, 0])
    ss = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    assert float(partial_auc_score(ss, yy, 0.25, 0.75)) == 1.0
    assert float(partial_auc_score(-ss, yy, 0.25, 0.75)) == 0.0


def test_partial_auc_argument_errors():
    s, y = binary_data(0, n=50)
    with pytest.raises(ValueError, match="McClish"):
        partial_auc_score(s, y, 0.1, 0.5, "mcclish")
    with pytest.raises(ValueError, match="fpr_min < fpr_max"):
        partial_auc_score(s, y, 0.5, 0.5)
    with pytest.raises(ValueError, match="normalization"):
        partial_auc_score(s, y, 0.0, 0.5, "bogus")


# ------------------------------------------------------------------------------------------------------
# CUDA (only where a GPU is present)
# ------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    s, y = binary_data(0, ties=True)
    for fn in (ap_score, auroc_score, lambda a, b: partial_auc_score(a, b, 0.05, 0.5)):
        assert float(fn(s.cuda(), y.cuda())) == pytest.approx(float(fn(s, y)), abs=1e-12)
    assert float(partial_auc_sorted_negatives(s.cuda(), y.cuda(), 0.1, 0.6)) == pytest.approx(
        float(partial_auc_sorted_negatives(s, y, 0.1, 0.6)), abs=1e-12
    )
