"""Tests of fccolit.metrics against independent oracles: sklearn, brute force over permutations / pairs,
torchmetrics with the gain mapped, and naive per-user loops. All float64, small and fast."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torchmetrics.retrieval import RetrievalNormalizedDCG

from fccolit.metrics import (
    AUROCScore,
    NDCGScore,
    APScore,
    FullRankingNDCGScore,
    PartialAUCScore,
    build_metric,
    metric_kind,
)
from fccolit.metrics.functional import (
    ap_score,
    auroc_score,
    full_ranking_ndcg,
    ndcg_at_k,
    partial_auc_score,
    partial_auc_sorted_negatives,
)

TOL = 1e-12


def _binary_data(seed: int, n: int = 300, p_pos: float = 0.3, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < p_pos).long()
    y[0], y[1] = 1, 0  # both classes always present
    s = torch.randn(n, generator=g, dtype=torch.float64) + 0.8 * y
    if ties:
        s = torch.round(s * 2) / 2  # few distinct values: many ties within and across classes
    return s, y


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
    s, y = _binary_data(seed)
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
    s, y = _binary_data(seed, ties=True)
    assert torch.unique(s).numel() < s.numel() // 4
    assert float(ap_score(s, y)) == pytest.approx(average_precision_score(y.numpy(), s.numpy()), abs=TOL)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_auroc_matches_sklearn_and_pair_count(seed, ties):
    s, y = _binary_data(seed, n=150, ties=ties)
    expected = roc_auc_score(y.numpy(), s.numpy())
    assert float(auroc_score(s, y)) == pytest.approx(expected, abs=TOL)
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    pairs = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean()
    assert float(auroc_score(s, y)) == pytest.approx(float(pairs), abs=TOL)


def test_binary_metrics_invariant_to_monotone_transform_and_input_forms():
    s, y = _binary_data(7, ties=True)
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
        s, y = _binary_data(seed, n=203, ties=ties)  # N- is not a round number: interpolation at β matters
        st = roc_auc_score(y.numpy(), s.numpy(), max_fpr=beta)
        assert float(partial_auc_score(s, y, 0.0, beta, "mcclish")) == pytest.approx(st, abs=TOL)
        raw = float(partial_auc_score(s, y, 0.0, beta, "raw"))
        assert raw == pytest.approx(_undo_mcclish(st, beta), abs=TOL)
        assert float(partial_auc_score(s, y, 0.0, beta, "normalized")) == pytest.approx(raw / beta, abs=TOL)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("alpha,beta", [(0.05, 0.5), (0.1, 0.3), (0.37, 0.91), (0.5, 1.0), (0.0, 1.0)])
def test_partial_auc_range_matches_sklearn_difference(alpha, beta, ties):
    # A(α, β) = A(0, β) − A(0, α), each recovered from sklearn's McClish value (any α, β, any ties)
    s, y = _binary_data(11, n=211, ties=ties)
    ref = _sklearn_area(y.numpy(), s.numpy(), beta) - _sklearn_area(y.numpy(), s.numpy(), alpha)
    assert float(partial_auc_score(s, y, alpha, beta, "raw")) == pytest.approx(ref, abs=1e-12)
    assert float(partial_auc_score(s, y, alpha, beta)) == pytest.approx(ref / (beta - alpha), abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha,beta", [(0.0, 0.3), (0.05, 0.5), (0.1, 1.0), (0.0, 1.0), (0.25, 0.35)])
def test_partial_auc_equals_sorted_negatives_definition_tie_free(seed, alpha, beta):
    s, y = _binary_data(seed, n=300)
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
    s, y = _binary_data(3, n=203)
    # tie-free, non-integer N-·α, N-·β: fractional boundary weights still equal the ROC integral
    assert float(partial_auc_sorted_negatives(s, y, 0.033, 0.517)) == pytest.approx(
        float(partial_auc_score(s, y, 0.033, 0.517)), abs=TOL
    )
    # with ties: strict ">" (paper) <= ties-as-1/2 (ROC), and eq. (2) still equals the strict pair count
    s, y = _binary_data(3, n=200, ties=True)
    keep = torch.cat([torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()[:120]])
    s, y = s[keep], y[keep]
    strict = float(partial_auc_sorted_negatives(s, y, 0.25, 0.75))
    assert strict <= float(partial_auc_score(s, y, 0.25, 0.75)) - 1e-3
    assert strict == pytest.approx(_brute_pauc_eq2(s.numpy(), y.numpy(), 0.25, 0.75), abs=TOL)


def test_partial_auc_identities_with_ties():
    s, y = _binary_data(5, ties=True)
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
    s, y = _binary_data(0, n=50)
    with pytest.raises(ValueError, match="McClish"):
        partial_auc_score(s, y, 0.1, 0.5, "mcclish")
    with pytest.raises(ValueError, match="McClish"):
        PartialAUCScore(0.1, 0.5, "mcclish")
    with pytest.raises(ValueError, match="fpr_min < fpr_max"):
        partial_auc_score(s, y, 0.5, 0.5)
    with pytest.raises(ValueError, match="fpr_min < fpr_max"):
        PartialAUCScore(-0.1, 0.5)
    with pytest.raises(ValueError, match="normalization"):
        partial_auc_score(s, y, 0.0, 0.5, "bogus")


# ------------------------------------------------------------------------------------------------------
# binary Metric classes
# ------------------------------------------------------------------------------------------------------
def test_binary_metric_classes_accumulate_batches():
    s, y = _binary_data(9, n=257, ties=True)
    pairs = [
        (APScore(), lambda a, b: ap_score(a, b)),
        (AUROCScore(), lambda a, b: auroc_score(a, b)),
        (PartialAUCScore(0.05, 0.5), lambda a, b: partial_auc_score(a, b, 0.05, 0.5)),
        (PartialAUCScore(0.0, 0.3, "mcclish"), lambda a, b: partial_auc_score(a, b, 0.0, 0.3, "mcclish")),
        (PartialAUCScore(0.05, 0.5, "raw"), lambda a, b: partial_auc_score(a, b, 0.05, 0.5, "raw")),
    ]
    for metric, fn in pairs:
        for lo, hi in [(0, 100), (100, 101), (101, 257)]:
            metric.update(s[lo:hi, None].float() if lo == 0 else s[lo:hi], y[lo:hi].bool() if lo else y[lo:hi])
        assert float(metric.compute()) == pytest.approx(float(fn(s, y)), abs=1e-12)
        metric.reset()
        with warnings.catch_warnings():  # torchmetrics warns about compute() before update()
            warnings.simplefilter("ignore", UserWarning)
            with pytest.raises(ValueError, match="got 0 positives, 0 negatives"):
                metric.compute()


def test_binary_metric_errors():
    metric = AUROCScore()
    with pytest.raises(ValueError, match=r"2 NaN value\(s\).*model produced NaN"):
        metric.update(torch.tensor([0.1, float("nan"), float("nan")]), torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match=r"outside \{0, 1\}"):
        metric.update(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 2, 0]))
    with pytest.raises(ValueError, match=r"outside \{0, 1\}"):
        metric.update(torch.tensor([0.1, 0.2]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="same number of samples"):
        metric.update(torch.tensor([0.1, 0.2]), torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match=r"shape \[N\] or \[N, 1\]"):
        metric.update(torch.zeros(3, 2, 2), torch.zeros(3, 2, 2))
    with pytest.raises(ValueError, match=r"target of the same shape \[N, T\]"):
        metric.update(torch.zeros(3, 2), torch.zeros(3))
    metric.update(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match="AUROC is undefined without both classes: got 3 positives, 0 negatives"):
        metric.compute()
    pauc = PartialAUCScore(0.0, 0.5)
    pauc.update(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="got 0 positives, 2 negatives"):
        pauc.compute()
    ap = APScore()
    ap.update(torch.tensor([0.1, 0.2]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="without positives: got 0 positives, 2 negatives"):
        ap.compute()
    assert float(ap_score(torch.tensor([0.3, 0.1]), torch.tensor([1, 1]))) == 1.0


# ------------------------------------------------------------------------------------------------------
# NDCG@k
# ------------------------------------------------------------------------------------------------------
def _brute_ndcg(p, y, k, gain, reducer):
    """Reduce NDCG@k over every tie-breaking order of the ranking by decreasing score."""
    L = len(p)
    g = [(2.0**v - 1.0) if gain == "exp2" else float(v) for v in y]
    kk = L if k is None else min(k, L)
    idcg = sum(v / math.log2(r + 2) for r, v in enumerate(sorted(g, reverse=True)[:kk]))
    values = []
    for perm in itertools.permutations(range(L)):
        if all(p[perm[i]] >= p[perm[i + 1]] for i in range(L - 1)):
            dcg = sum(g[perm[r]] / math.log2(r + 2) for r in range(kk))
            values.append(dcg / idcg)
    return reducer(values)


@pytest.mark.parametrize("gain", ["exp2", "linear"])
@pytest.mark.parametrize("k", [None, 1, 2, 3, 5])
def test_ndcg_brute_force_over_tie_orders(k, gain):
    g = torch.Generator().manual_seed(0 if k is None else k)
    reducers = {"average": lambda v: sum(v) / len(v), "pessimistic": min, "optimistic": max}
    for trial in range(12):
        L = 3 + trial % 4  # 3..6
        p = torch.randint(0, 3, (1, L), generator=g).double()  # heavy ties
        y = torch.randint(0, 4, (1, L), generator=g)
        if y.sum() == 0:
            y[0, 0] = 2
        for ties, red in reducers.items():
            got = float(ndcg_at_k(p, y, top_k=k, gain=gain, ties=ties)[0])
            exp = _brute_ndcg(p[0].tolist(), y[0].tolist(), k, gain, red)
            assert got == pytest.approx(exp, abs=TOL), (ties, p, y)


def test_ndcg_vectorized_batch_equals_rows_and_ideal_is_one():
    g = torch.Generator().manual_seed(1)
    p = torch.randint(0, 4, (20, 6), generator=g).double()
    y = torch.randint(0, 3, (20, 6), generator=g)
    y[:, 0] = 1
    for ties in ("average", "pessimistic", "optimistic"):
        batch = ndcg_at_k(p, y, top_k=3, ties=ties)
        rows = torch.cat([ndcg_at_k(p[i : i + 1], y[i : i + 1], top_k=3, ties=ties) for i in range(20)])
        assert torch.allclose(batch, rows, atol=0, rtol=0)
        # scores that order the items exactly by relevance (ties only among equal relevance) give 1
        assert torch.allclose(ndcg_at_k(y.double(), y, top_k=3, ties=ties), torch.ones(20, dtype=torch.float64))
        assert torch.allclose(ndcg_at_k(y.double(), y, ties=ties), torch.ones(20, dtype=torch.float64))
    # a tied group straddling k: constant scorer = expectation over random order
    got = ndcg_at_k(torch.zeros(1, 4), torch.tensor([[1, 0, 0, 0]]), top_k=2)
    assert float(got[0]) == pytest.approx((1 + 1 / math.log2(3)) / 4, abs=TOL)


def test_ndcg_empty_policies():
    p = torch.tensor([[0.3, 0.2, 0.1], [0.1, 0.2, 0.3], [0.5, 0.4, 0.0]])
    y = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, True], [False, False, False]])
    assert ndcg_at_k(p, y, empty_query="zero", mask=mask).tolist() == [1.0, 0.0, 0.0]
    assert ndcg_at_k(p, y, empty_query="one", mask=mask).tolist() == [1.0, 1.0, 1.0]
    out = ndcg_at_k(p, y, empty_query="skip", mask=mask)
    assert out[0] == 1.0 and torch.isnan(out[1:]).all()
    # the relevant item is padded out -> the query is empty
    y2 = torch.tensor([[0, 0, 2]])
    assert float(ndcg_at_k(p[:1], y2, mask=torch.tensor([[True, True, False]]), empty_query="one")[0]) == 1.0
    assert ndcg_at_k(torch.zeros(0, 5), torch.zeros(0, 5)).shape == (0,)


def test_ndcg_padding_does_not_change_value():
    g = torch.Generator().manual_seed(2)
    Q, L, P = 15, 5, 4
    p = torch.randint(0, 3, (Q, L), generator=g).double()
    p[0, 1] = float("-inf")  # a real -inf score must still rank above padding
    y = torch.randint(0, 3, (Q, L), generator=g)
    ref = {t: ndcg_at_k(p, y, top_k=k, ties=t) for t in ("average", "pessimistic", "optimistic") for k in (3,)}
    # pad with garbage (huge / NaN scores, large labels) at random positions
    pp = torch.cat([p, torch.full((Q, P), 1e9)], dim=1)
    pp[:, -1] = float("nan")
    yy = torch.cat([y, torch.full((Q, P), 7)], dim=1)
    mm = torch.cat([torch.ones(Q, L, dtype=torch.bool), torch.zeros(Q, P, dtype=torch.bool)], dim=1)
    perm = torch.randperm(L + P, generator=g)
    pp, yy, mm = pp[:, perm], yy[:, perm], mm[:, perm]
    for t, r in ref.items():
        assert torch.allclose(ndcg_at_k(pp, yy, top_k=3, mask=mm, ties=t), r, atol=1e-15, rtol=0)


@pytest.mark.parametrize("k", [None, 1, 3, 10])
def test_ndcg_matches_torchmetrics_with_mapped_gain(k):
    g = torch.Generator().manual_seed(3)
    Q, L = 30, 8
    p = (torch.randn(Q, L, generator=g, dtype=torch.float64) * 2).round()  # ties
    y = torch.randint(0, 4, (Q, L), generator=g)
    y[:3] = 0  # empty queries: torchmetrics' default "neg" = our "zero"
    indexes = torch.arange(Q).repeat_interleave(L)
    # aggregation=identity returns the per-query values (in query order); torchmetrics computes in float32
    for gain, mapped in (("exp2", 2.0 ** y.double() - 1.0), ("linear", y.double())):
        tm = RetrievalNormalizedDCG(top_k=k, aggregation=lambda x, dim: x)
        tm.update(p.flatten(), mapped.flatten(), indexes=indexes)
        ours = ndcg_at_k(p, y, top_k=k, gain=gain)
        assert torch.allclose(ours, tm.compute().double(), atol=1e-6, rtol=0)
        tm_mean = RetrievalNormalizedDCG(top_k=k)
        tm_mean.update(p.flatten(), mapped.flatten(), indexes=indexes)
        assert float(ours.mean()) == pytest.approx(float(tm_mean.compute()), abs=1e-6)


def test_ndcg_metric_class_sum_count():
    g = torch.Generator().manual_seed(4)
    p = torch.randn(12, 7, generator=g)
    y = torch.randint(0, 3, (12, 7), generator=g)
    y[5] = 0
    mask = torch.rand(12, 7, generator=g) > 0.2
    for empty in ("zero", "one", "skip"):
        metric = NDCGScore(top_k=5, empty_query=empty)
        metric.update(p[:4], y[:4], mask[:4])
        metric.update(p[4:], y[4:], mask=mask[4:])
        per_q = ndcg_at_k(p, y, top_k=5, mask=mask, empty_query=empty)
        assert float(metric.compute()) == pytest.approx(float(torch.nanmean(per_q)), abs=1e-12)
    metric = NDCGScore(top_k=3, empty_query="skip")
    with warnings.catch_warnings():  # torchmetrics warns about compute() before update()
        warnings.simplefilter("ignore", UserWarning)
        assert torch.isnan(metric.compute())  # no queries: NaN, no crash
    metric.update(torch.randn(2, 3), torch.zeros(2, 3))
    assert torch.isnan(metric.compute())


def test_ndcg_errors():
    p, y = torch.randn(2, 4), torch.ones(2, 4)
    bad = p.clone()
    bad[0, 1] = bad[1, 2] = bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"3 NaN value\(s\).*model produced NaN"):
        ndcg_at_k(bad, y)
    with pytest.raises(ValueError, match=r"3 NaN value\(s\)"):
        NDCGScore(top_k=2).update(bad, y)
    with pytest.raises(ValueError, match="same shape"):
        ndcg_at_k(p, torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"\[Q, L\]"):
        ndcg_at_k(torch.randn(4), torch.ones(4))
    with pytest.raises(ValueError, match="k must be >= 1"):
        ndcg_at_k(p, y, top_k=0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        NDCGScore(top_k=-1)
    with pytest.raises(ValueError, match="ties"):
        ndcg_at_k(p, y, ties="random")
    with pytest.raises(ValueError, match=">= 0"):
        ndcg_at_k(p, -y)
    with pytest.raises(ValueError, match="mask"):
        ndcg_at_k(p, y, mask=torch.ones(2, 3, dtype=torch.bool))


# ------------------------------------------------------------------------------------------------------
# full-ranking NDCGScore
# ------------------------------------------------------------------------------------------------------
def _naive_full_ranking(scores, heldout, rel, exclude, k, gain):
    out = []
    for u in range(scores.shape[0]):
        held = {int(i): float(r) for i, r in zip(heldout[u], rel[u]) if i >= 0}
        excl = {int(i) for i in exclude[u] if i >= 0} - set(held) if exclude is not None else set()
        cand = [i for i in range(scores.shape[1]) if i not in excl]
        cand.sort(key=lambda i: -float(scores[u, i]))
        G = (lambda r: 2.0**r - 1.0) if gain == "exp2" else (lambda r: r)
        dcg = sum(G(held.get(i, 0.0)) / math.log2(r + 2) for r, i in enumerate(cand[:k]))
        ideal = sorted((G(r) for r in held.values()), reverse=True)[:k]
        idcg = sum(v / math.log2(r + 2) for r, v in enumerate(ideal))
        out.append(dcg / idcg if idcg > 0 else 0.0)
    return torch.tensor(out, dtype=torch.float64)


def _recsys_chunk(seed, U=9, I=40, H=4, E=12):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(U, I, generator=g, dtype=torch.float64)
    heldout = torch.full((U, H), -1, dtype=torch.long)
    rel = torch.zeros(U, H)
    exclude = torch.full((U, E), -1, dtype=torch.long)
    for u in range(U):
        items = torch.randperm(I, generator=g)
        nh = u % (H + 1)  # user 0 has no held-out item
        ne = (3 * u) % (E + 1)
        heldout[u, :nh] = items[:nh]
        rel[u, :nh] = torch.randint(1, 5, (nh,), generator=g).float()
        exclude[u, :ne] = items[nh : nh + ne]
        scores[u, items[nh : nh + ne]] += 5.0  # training items score high: they must never count
    exclude[2, 0] = heldout[2, 0]  # a held-out item listed as excluded is still ranked
    exclude[3, 1] = 0 if 0 not in heldout[3].tolist() else exclude[3, 1]
    return scores, heldout, rel, exclude


@pytest.mark.parametrize("gain", ["exp2", "linear"])
@pytest.mark.parametrize("k", [1, 5, 10, 100])
def test_full_ranking_ndcg_matches_naive_loop(k, gain):
    scores, heldout, rel, exclude = _recsys_chunk(k)
    got = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=k, gain=gain)
    exp = _naive_full_ranking(scores, heldout, rel, exclude, k, gain)
    assert torch.allclose(got, exp, atol=1e-12, rtol=0)
    # without exclusion, every item competes
    got = full_ranking_ndcg(scores, heldout, rel, None, top_k=k, gain=gain)
    assert torch.allclose(got, _naive_full_ranking(scores, heldout, rel, None, k, gain), atol=1e-12, rtol=0)


def test_full_ranking_excluded_items_never_count_and_empty_users():
    scores = torch.tensor([[9.0, 8.0, 1.0, 0.5, 0.0], [0.0, 1.0, 2.0, 3.0, 4.0]])
    heldout = torch.tensor([[2, -1], [0, 1]])
    rel = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    exclude = torch.tensor([[0, 1, -1], [-1, -1, -1]])
    out = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=1)
    assert out.tolist() == [1.0, 0.0]  # items 0 and 1 removed: the held-out item 2 is ranked first
    out = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=1, empty_query="skip")
    assert out[0] == 1.0 and torch.isnan(out[1])
    # relevant training items are ignored even if their scores are highest
    assert float(full_ranking_ndcg(scores, heldout, rel, None, top_k=2)[0]) == 0.0


def test_full_ranking_metric_chunks():
    chunks = [_recsys_chunk(s, U=5 + s) for s in range(3)]
    metric = FullRankingNDCGScore(top_ks=(1, 5, 20))
    for c in chunks:
        metric.update(*c)
    out = metric.compute()
    assert set(out) == {1, 5, 20}
    for k in (1, 5, 20):
        per_user = torch.cat([full_ranking_ndcg(*c, top_k=k) for c in chunks])
        assert float(out[k]) == pytest.approx(float(per_user.mean()), abs=1e-12)
    skip = FullRankingNDCGScore(top_ks=(5,), empty_query="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert math.isnan(float(skip.compute()[5]))
    for c in chunks:
        skip.update(*c)
    per_user = torch.cat([full_ranking_ndcg(*c, top_k=5, empty_query="skip") for c in chunks])
    assert float(skip.compute()[5]) == pytest.approx(float(torch.nanmean(per_user)), abs=1e-12)


def test_full_ranking_errors():
    scores = torch.randn(2, 5)
    heldout = torch.tensor([[1, -1], [2, 3]])
    rel = torch.ones(2, 2)
    with pytest.raises(ValueError, match="item ids"):
        full_ranking_ndcg(scores, torch.tensor([[5, -1], [2, 3]]), rel)
    with pytest.raises(ValueError, match="shape"):
        full_ranking_ndcg(scores, heldout, torch.ones(2, 3))
    bad = scores.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"1 NaN value\(s\)"):
        full_ranking_ndcg(bad, heldout, rel)
    with pytest.raises(ValueError, match="k must be >= 1"):
        full_ranking_ndcg(scores, heldout, rel, top_k=0)


# ------------------------------------------------------------------------------------------------------
# build_metric
# ------------------------------------------------------------------------------------------------------
def test_build_metric_parsing():
    m = build_metric("ndcg@10")
    assert isinstance(m, NDCGScore) and m.top_k == 10 and m.gain == "exp2"
    assert build_metric("ndcg").top_k is None
    assert build_metric("val/NDCG@3").top_k == 3
    assert isinstance(build_metric("ap"), APScore)
    assert isinstance(build_metric("auroc"), AUROCScore)
    m = build_metric("pauc_0.05_0.5")
    assert isinstance(m, PartialAUCScore) and (m.fpr_min, m.fpr_max, m.normalization) == (0.05, 0.5, "normalized")
    m = build_metric("pauc_0_0.3_mcclish")
    assert (m.fpr_min, m.fpr_max, m.normalization) == (0.0, 0.3, "mcclish")
    m = build_metric("pauc_0.05_0.5_raw")
    assert (m.fpr_min, m.fpr_max, m.normalization) == (0.05, 0.5, "raw")
    assert build_metric("pauc_.1_1").fpr_max == 1.0
    assert metric_kind("ndcg@5") == "ranking" and metric_kind("ndcg") == "ranking"
    assert {metric_kind(n) for n in ("ap", "auroc", "pauc_0_0.3", "pauc_0.1_0.2_raw")} == {"binary"}
    # fresh instances each time
    assert build_metric("ap") is not build_metric("ap")


@pytest.mark.parametrize(
    "name", ["ndcg@0", "ndcg@", "ndcg@x", "map", "pauc_0.5_0.1", "pauc_0.1_0.5_mcclish", "pauc_0_1.5", "auc", ""]
)
def test_build_metric_errors(name):
    with pytest.raises(ValueError, match="accepted metric names"):
        build_metric(name)
    with pytest.raises(ValueError, match="accepted metric names"):
        metric_kind(name)


# ------------------------------------------------------------------------------------------------------
# CUDA (only where a GPU is present)
# ------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    s, y = _binary_data(0, ties=True)
    for fn in (ap_score, auroc_score, lambda a, b: partial_auc_score(a, b, 0.05, 0.5)):
        assert float(fn(s.cuda(), y.cuda())) == pytest.approx(float(fn(s, y)), abs=1e-12)
    assert float(partial_auc_sorted_negatives(s.cuda(), y.cuda(), 0.1, 0.6)) == pytest.approx(
        float(partial_auc_sorted_negatives(s, y, 0.1, 0.6)), abs=1e-12
    )
    p = torch.randint(0, 3, (50, 9)).double()
    t = torch.randint(0, 3, (50, 9))
    mask = torch.rand(50, 9) > 0.2
    for ties in ("average", "pessimistic", "optimistic"):
        a = ndcg_at_k(p, t, top_k=4, mask=mask, ties=ties)
        b = ndcg_at_k(p.cuda(), t.cuda(), top_k=4, mask=mask.cuda(), ties=ties).cpu()
        assert torch.allclose(a, b, atol=1e-12)
    scores, heldout, rel, exclude = _recsys_chunk(0)
    a = full_ranking_ndcg(scores, heldout, rel, exclude, top_k=10)
    b = full_ranking_ndcg(scores.cuda(), heldout.cuda(), rel.cuda(), exclude.cuda(), top_k=10).cpu()
    assert torch.allclose(a, b, atol=1e-12)


def test_metric_states_survive_inference_mode_then_training_mode():
    """trainer.validate runs under inference mode; a later fit updates the same metric objects."""
    from fccolit.metrics import FullRankingNDCGScore, NDCGScore

    ndcg, full = NDCGScore(top_k=2), FullRankingNDCGScore(top_ks=(2,))
    preds, target = torch.tensor([[0.3, 0.1, 0.2]]), torch.tensor([[1.0, 0.0, 2.0]])
    items, rel = torch.tensor([[2]]), torch.tensor([[1.0]])
    with torch.inference_mode():  # what trainer.validate does: update, compute, reset under inference mode
        ndcg.update(preds, target)
        full.update(preds, items, rel)
        ndcg.compute(), full.compute()
        ndcg.reset(), full.reset()
    ndcg.update(preds, target)  # raised "Inplace update to inference tensor outside InferenceMode"
    full.update(preds, items, rel)
    assert 0 < float(ndcg.compute()) <= 1 and 0 < float(full.compute()[2]) <= 1
