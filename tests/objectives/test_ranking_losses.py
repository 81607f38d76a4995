"""LambdaRank, ApproxNDCG, NeuralNDCG and ListNet (fccolit/objectives/ranking_losses.py) against brute-force implementations
of their papers' formulas, written here with plain loops over pairs and positions (math / numpy), in float64.

Random slates with tied labels, tied scores, padding in the middle of a list and an all-zero slate. Beyond the
values: LambdaRank's autograd gradient is Burges's λ_i = Σ_j λ_ij; ApproxNDCG and NeuralNDCG tend to the true NDCG as
α → ∞ and τ → 0; gradcheck on each loss and on the Sinkhorn scaling's hand-written backward; padding, batch-mates and
all-zero slates change nothing; and a few training steps of MiniBatchRanking lower each loss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fccolit.objectives import ApproxNDCGLoss, LambdaRankLoss, ListNetLoss, ListwiseRankingLoss, NeuralNDCGLoss
from fccolit.objectives.ranking_losses import neural_sort, sinkhorn_scaling

B, L = 6, 7


@pytest.fixture(autouse=True)
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def random_slates(seed: int = 0, distinct: bool = False):
    """Scores, relevance 0-3 and masks ``[B, L]``: slate 0 all-zero labels, slate 1 tied scores, slate 2 a single real
    entry, padding in the middle of lists; with ``distinct``, scores at least 0.5 apart within every slate."""
    g = torch.Generator().manual_seed(seed)
    relevance = torch.randint(0, 4, (B, L), generator=g).to(torch.float64)
    relevance[0] = 0.0
    mask = torch.rand(B, L, generator=g) > 0.25
    mask[:, 0] = True
    mask[2] = False
    mask[2, 3] = True
    relevance[2, 3] = 2.0
    if distinct:
        scores = torch.stack([torch.randperm(L, generator=g) for _ in range(B)]).to(torch.float64) * 0.5
        scores = scores + 0.1 * torch.rand(B, L, generator=g)
    else:
        scores = torch.randn(B, L, generator=g)
        scores[1] = torch.tensor([0.5, 0.5, -1.0, 0.5, 2.0, -1.0, 0.0])  # ties
    scores = torch.where(mask, scores, torch.full_like(scores, 123.0))  # padded scores are never read
    return scores, relevance, mask


# ---------------------------------------------------------------------------------------- brute force, from formulas
def real(row, mask_row):
    return [row[j] for j in range(len(row)) if mask_row[j]]


def gain(y):
    return 2.0 ** y - 1.0


def ideal_dcg(gains, k=None):
    ordered = sorted(gains, reverse=True)[: k if k is not None else len(gains)]
    return sum(g / math.log2(r + 2) for r, g in enumerate(ordered))


def stable_ranks(s):
    """1-based rank by decreasing score, ties in list order."""
    return [1 + sum(1 for q in range(len(s)) if s[q] > s[p] or (s[q] == s[p] and q < p)) for p in range(len(s))]


def true_ndcg(s, y, k=None):
    g = [gain(v) for v in y]
    r = stable_ranks(s)
    dcg = sum(g[i] / math.log2(1 + r[i]) for i in range(len(s)) if k is None or r[i] <= k)
    return dcg / ideal_dcg(g, k)


def slate_lists(scores, relevance, mask):
    for b in range(scores.shape[0]):
        s, y = real(scores[b].tolist(), mask[b].tolist()), real(relevance[b].tolist(), mask[b].tolist())
        yield b, s, y


def brute_lambdarank(scores, relevance, mask, sigma=1.0):
    """Mean over slates with Z > 0 of Σ_{y_i>y_j} |ΔNDCG_ij| log(1 + e^{−σ(s_i−s_j)}), and λ_i per entry."""
    losses, lambdas = [], torch.zeros_like(scores)
    for b, s, y in slate_lists(scores, relevance, mask):
        g = [gain(v) for v in y]
        z = ideal_dcg(g)
        if z == 0:
            continue
        r = stable_ranks(s)
        total, lam = 0.0, [0.0] * len(s)
        for i in range(len(s)):
            for j in range(len(s)):
                if y[i] > y[j]:
                    delta = abs(g[i] - g[j]) * abs(1 / math.log2(1 + r[i]) - 1 / math.log2(1 + r[j])) / z
                    total += delta * math.log(1 + math.exp(-sigma * (s[i] - s[j])))
                    lam_ij = -sigma * delta / (1 + math.exp(sigma * (s[i] - s[j])))  # Burges's λ_ij
                    lam[i] += lam_ij
                    lam[j] -= lam_ij
        losses.append(total)
        positions = [p for p in range(scores.shape[1]) if mask[b, p]]
        for p, value in zip(positions, lam):
            lambdas[b, p] = value
    return sum(losses) / len(losses), lambdas / len(losses)


def brute_approx_ndcg(scores, relevance, mask, alpha=1.0):
    values = []
    for _, s, y in slate_lists(scores, relevance, mask):
        g = [gain(v) for v in y]
        z = ideal_dcg(g)
        if z == 0:
            continue
        dcg = 0.0
        for i in range(len(s)):
            rank = 1.0 + sum(1.0 / (1.0 + math.exp(alpha * (s[i] - s[j]))) for j in range(len(s)) if j != i)
            dcg += g[i] / math.log2(1.0 + rank)
        values.append(-dcg / z)
    return sum(values) / len(values)


def brute_sinkhorn(p, max_iter=50, tol=1e-6):
    for _ in range(max_iter):
        p = p / np.maximum(p.sum(0, keepdims=True), 1e-10)
        p = p / np.maximum(p.sum(1, keepdims=True), 1e-10)
        if np.abs(p.sum(1) - 1).max() < tol and np.abs(p.sum(0) - 1).max() < tol:
            break
    return p


def brute_neural_sort(s, tau):
    n = len(s)
    p = np.zeros((n, n))
    for i in range(1, n + 1):
        logits = np.array([((n + 1 - 2 * i) * s[j] - sum(abs(s[j] - s[k]) for k in range(n))) / tau for j in range(n)])
        e = np.exp(logits - logits.max())
        p[i - 1] = e / e.sum()
    return p


def brute_neural_ndcg(scores, relevance, mask, tau=1.0, k=None, max_iter=50, tol=1e-6):
    values = []
    for _, s, y in slate_lists(scores, relevance, mask):
        g = np.array([gain(v) for v in y])
        z = ideal_dcg(list(g), k)
        if z == 0:
            continue
        p = brute_sinkhorn(brute_neural_sort(s, tau), max_iter, tol)
        soft_gains = p @ g
        top = len(s) if k is None else min(k, len(s))
        values.append(-sum(soft_gains[i] / math.log2(i + 2) for i in range(top)) / z)
    return sum(values) / len(values)


def brute_listnet(scores, relevance, mask):
    """Cao et al.'s top-one cross-entropy: −Σ_i P_y(i) log P_s(i), P_x(i) = e^{x_i} / Σ_j e^{x_j}, per slate."""
    values = []
    for _, s, y in slate_lists(scores, relevance, mask):
        if ideal_dcg([gain(v) for v in y]) == 0:
            continue
        target = [math.exp(v) / sum(math.exp(w) for w in y) for v in y]
        values.append(-sum(t * math.log(math.exp(v) / sum(math.exp(w) for w in s)) for t, v in zip(target, s)))
    return sum(values) / len(values)


LOSSES = {
    "listnet": (ListNetLoss, brute_listnet),
    "lambdarank": (lambda: LambdaRankLoss(slope=1.3), lambda s, y, m: brute_lambdarank(s, y, m, 1.3)[0]),
    "approxndcg": (lambda: ApproxNDCGLoss(slope=2.0), lambda s, y, m: brute_approx_ndcg(s, y, m, 2.0)),
    "neuralndcg": (lambda: NeuralNDCGLoss(temperature=0.7), lambda s, y, m: brute_neural_ndcg(s, y, m, 0.7)),
    "neuralndcg@3": (lambda: NeuralNDCGLoss(temperature=0.7, top_k=3),
                     lambda s, y, m: brute_neural_ndcg(s, y, m, 0.7, k=3)),
}


# ---------------------------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_value_equals_the_brute_force_formula(name, seed):
    make, brute = LOSSES[name]
    scores, relevance, mask = random_slates(seed)
    assert float(make()(scores, relevance, mask)) == pytest.approx(brute(scores, relevance, mask), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambdarank_gradient_is_burges_lambdas(seed):
    scores, relevance, mask = random_slates(seed)
    scores.requires_grad_(True)
    LambdaRankLoss(slope=1.3)(scores, relevance, mask).backward()
    _, lambdas = brute_lambdarank(scores.detach(), relevance, mask, 1.3)
    assert bool(lambdas[3:].abs().sum() > 0.1)  # the test compares something
    torch.testing.assert_close(scores.grad, lambdas, rtol=1e-10, atol=1e-12)


def test_approx_ndcg_tends_to_the_true_ndcg_as_alpha_grows():
    scores, relevance, mask = random_slates(4, distinct=True)
    truth = np.mean([true_ndcg(s, y) for _, s, y in slate_lists(scores, relevance, mask)
                     if ideal_dcg([gain(v) for v in y]) > 0])
    gaps = [abs(float(ApproxNDCGLoss(slope=a)(scores, relevance, mask)) + truth) for a in (1.0, 10.0, 1e4)]
    assert gaps[0] > 1e-3 and gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-12


@pytest.mark.parametrize("top_k", [None, 1, 3])
def test_neural_ndcg_tends_to_the_true_ndcg_as_tau_shrinks(top_k):
    scores, relevance, mask = random_slates(5, distinct=True)
    truth = np.mean([true_ndcg(s, y, top_k) for _, s, y in slate_lists(scores, relevance, mask)
                     if ideal_dcg([gain(v) for v in y], top_k) > 0])
    gaps = [abs(float(NeuralNDCGLoss(temperature=t, top_k=top_k)(scores, relevance, mask)) + truth)
            for t in (3.0, 0.3, 1e-4)]
    assert gaps[0] > 1e-3 and gaps[0] > gaps[2]
    assert gaps[2] < 1e-12


def test_neural_sort_matches_the_brute_force_and_is_zero_off_the_real_block():
    scores, _, mask = random_slates(0)
    p = neural_sort(scores, mask, temperature=0.5)
    for b in range(B):
        n = int(mask[b].sum())
        block = p[b][:n][:, mask[b]]
        np.testing.assert_allclose(block.numpy(), brute_neural_sort(real(scores[b].tolist(), mask[b].tolist()), 0.5),
                                   rtol=1e-12, atol=1e-14)
        assert float(p[b].sum()) == pytest.approx(n)  # every real row sums to 1, the rest is 0


def sinkhorn_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    _, _, mask = random_slates(seed)
    rows = torch.arange(L).unsqueeze(0) < mask.sum(1, keepdim=True)
    matrix = torch.rand(B, L, L, generator=g) + 0.05
    matrix = torch.where(rows.unsqueeze(2) & mask.unsqueeze(1), matrix, torch.zeros_like(matrix))
    return matrix, rows, mask


def naive_sinkhorn(p, rows, cols, max_iter, tol):
    """The same iteration written plainly, one slate at a time, for plain autograd."""
    out = torch.zeros_like(p)
    for b in range(p.shape[0]):
        r, c = torch.nonzero(rows[b]).flatten(), torch.nonzero(cols[b]).flatten()
        x = p[b][r][:, c]
        for _ in range(max_iter):
            x = x / x.sum(0, keepdim=True).clamp_min(1e-10)
            x = x / x.sum(1, keepdim=True).clamp_min(1e-10)
            if (x.sum(1) - 1).abs().max() < tol and (x.sum(0) - 1).abs().max() < tol:
                break
        out = out.index_put((torch.tensor([b]), r.unsqueeze(1), c.unsqueeze(0)), x)
    return out


@pytest.mark.parametrize("tol", [0.0, 1e-6])
def test_sinkhorn_backward_equals_autograd_of_the_plain_loop(tol):
    matrix, rows, cols = sinkhorn_inputs(1)
    weights = torch.randn(B, L, L, generator=torch.Generator().manual_seed(3))
    a = matrix.clone().requires_grad_(True)
    fast = sinkhorn_scaling(a, rows, cols, max_iter=30, tol=tol)
    (fast * weights).sum().backward()
    b = matrix.clone().requires_grad_(True)
    slow = naive_sinkhorn(b, rows, cols, max_iter=30, tol=tol)
    (slow * weights).sum().backward()
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12)
    for m in range(B):  # the converged slates are doubly stochastic
        block = fast[m][rows[m]][:, cols[m]]
        if tol > 0:
            block = block.detach()
            assert float((block.sum(0) - 1).abs().max()) < tol and float((block.sum(1) - 1).abs().max()) < tol


def test_sinkhorn_gradcheck():
    matrix, rows, cols = sinkhorn_inputs(2)
    real_block = rows.unsqueeze(2) & cols.unsqueeze(1)
    x = matrix[real_block].clone().requires_grad_(True)

    def scaled(values):
        full = torch.zeros_like(matrix).masked_scatter(real_block, values)
        return sinkhorn_scaling(full, rows, cols, max_iter=8, tol=0.0)[real_block]

    assert torch.autograd.gradcheck(scaled, (x,), eps=1e-6, atol=1e-7)


GRADCHECKED = {
    "listnet": ListNetLoss(),
    "lambdarank": LambdaRankLoss(slope=1.3),
    "approxndcg": ApproxNDCGLoss(slope=2.0),
    "neuralndcg": NeuralNDCGLoss(temperature=0.7, sinkhorn_iterations=10, sinkhorn_tolerance=0.0),
    "neuralndcg@2": NeuralNDCGLoss(temperature=0.7, top_k=2, sinkhorn_iterations=10, sinkhorn_tolerance=0.0),
}


@pytest.mark.parametrize("name", sorted(GRADCHECKED))
def test_gradcheck(name):
    scores, relevance, mask = random_slates(6, distinct=True)  # distinct: LambdaRank's ranks hold near the point
    loss = GRADCHECKED[name]
    x = scores.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: loss(s, relevance, mask), (x,), eps=1e-6, atol=1e-7)


def with_padding(scores, relevance, mask, seed=0):
    """The same slates with 3 padded columns inserted at random places (the real columns keep their order, so ties
    rank alike), holding wild scores and labels."""
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(L + 3, generator=g)[:3].sort().values  # where the padded columns go
    order = torch.empty(L + 3, dtype=torch.long)
    order[slots] = torch.arange(L, L + 3)
    order[[q for q in range(L + 3) if q not in slots.tolist()]] = torch.arange(L)
    wild = torch.tensor([[1e6, float("nan"), -float("inf")]]).expand(B, 3)
    s = torch.cat([scores, wild], 1)[:, order]
    y = torch.cat([relevance, torch.tensor([[4.0, -1.0, 9.0]]).expand(B, 3)], 1)[:, order]
    m = torch.cat([mask, torch.zeros(B, 3, dtype=torch.bool)], 1)[:, order]
    return s, y, m, order


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_padding_changes_neither_the_loss_nor_the_gradient(name):
    loss = LOSSES[name][0]()
    scores, relevance, mask = random_slates(7)
    a = scores.clone().requires_grad_(True)
    value = loss(a, relevance, mask)
    value.backward()
    s, y, m, order = with_padding(scores, relevance, mask)
    b = s.clone().requires_grad_(True)
    padded = loss(b, y, m)
    padded.backward()
    assert padded.item() == pytest.approx(value.item(), rel=1e-12)
    original = torch.argsort(order)[:L]  # where the original columns went
    torch.testing.assert_close(b.grad[:, original], a.grad, rtol=1e-10, atol=1e-13)
    assert bool((b.grad[~m] == 0).all()) and bool(torch.isfinite(b.grad).all())
    assert bool((a.grad[~mask] == 0).all())


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_slates_with_zero_ideal_dcg_are_left_out_and_batch_mates_do_not_matter(name):
    loss = LOSSES[name][0]()
    scores, relevance, mask = random_slates(8)
    batch = float(loss(scores, relevance, mask))
    alone = [float(loss(scores[b:b + 1], relevance[b:b + 1], mask[b:b + 1])) for b in range(B)]
    valid = [b for b in range(B) if (relevance[b][mask[b]] > 0).any()]
    assert 0 not in valid and len(valid) == B - 1  # slate 0 (all labels 0) is left out
    assert alone[0] == 0.0
    assert batch == pytest.approx(np.mean([alone[b] for b in valid]), rel=1e-12)
    empty = scores[:1].clone().requires_grad_(True)
    value = loss(empty, relevance[:1], mask[:1])  # only a Z = 0 slate: 0, with a zero gradient
    value.backward()
    assert value.item() == 0.0 and bool((empty.grad == 0).all())


def test_bad_inputs_and_options_are_named():
    scores, relevance, mask = random_slates(0)
    bad = relevance.clone()
    bad[3, 0] = -1.0  # a real entry
    with pytest.raises(ValueError, match="slate 3 has a negative relevance label"):
        LambdaRankLoss()(scores, bad, mask)
    with pytest.raises(ValueError, match=r"expects scores \[B, L\]"):
        ApproxNDCGLoss()(scores[0], relevance[0], mask[0])
    with pytest.raises(ValueError, match="mask .* must have the scores' shape"):
        NeuralNDCGLoss()(scores, relevance, mask[:, :3])
    for make, match in ((lambda: LambdaRankLoss(slope=0.0), r"slope \(σ\) must be a number > 0"),
                        (lambda: ApproxNDCGLoss(slope=-1.0), r"slope \(α\)"),
                        (lambda: NeuralNDCGLoss(temperature=0), r"temperature \(τ\)"),
                        (lambda: NeuralNDCGLoss(top_k=0), "top_k must be a positive int"),
                        (lambda: NeuralNDCGLoss(sinkhorn_iterations=0), "sinkhorn_iterations"),
                        (lambda: NeuralNDCGLoss(sinkhorn_tolerance=-1.0), "sinkhorn_tolerance"),
                        (lambda: LambdaRankLoss(gain="log"), "gain must be one of")):
        with pytest.raises(ValueError, match=match):
            make()
    assert isinstance(LambdaRankLoss(), ListwiseRankingLoss)


def test_linear_gain_uses_the_labels_as_gains():
    scores, relevance, mask = random_slates(9, distinct=True)
    truth = []
    for _, s, y in slate_lists(scores, relevance, mask):
        if sum(y) > 0:
            r = stable_ranks(s)
            truth.append(sum(y[i] / math.log2(1 + r[i]) for i in range(len(s)))
                         / sum(v / math.log2(q + 2) for q, v in enumerate(sorted(y, reverse=True))))
    value = float(ApproxNDCGLoss(slope=1e4, gain="linear")(scores, relevance, mask))
    assert value == pytest.approx(-np.mean(truth), abs=1e-12)


# ----------------------------------------------------------------------------- training through MiniBatchRanking
@pytest.mark.parametrize("name", ["lambdarank", "approxndcg", "neuralndcg", "listnet"])
def test_a_few_steps_of_minibatch_ranking_lower_the_loss(name, tmp_path):
    from lightning.pytorch import Trainer, seed_everything

    from fccolit.algorithms import MiniBatchRanking
    from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
    from fccolit.models.ltr import ListMLP

    torch.set_default_dtype(torch.float32)
    seed_everything(0)
    data = SyntheticRankingDataModule(task="ltr", num_queries=24, num_features=4, list_size=(5, 8), num_positives=None,
                                      num_negatives=None, queries_per_batch=8, val_queries=4, test_queries=4)
    data.setup()
    module = MiniBatchRanking(ListMLP(hidden=[8]), LOSSES[name][0](), data_sizes=data.sizes,
                              optimizer=lambda p: torch.optim.Adam(p, lr=0.02))
    batch = data.full_batch()

    def full_loss() -> float:
        module.eval()
        with torch.no_grad():
            value = float(module.ranking_loss(module(batch), batch))
        module.train()
        return value

    before = full_loss()
    trainer = Trainer(accelerator="cpu", devices=1, max_steps=15, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                      limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 15
    assert full_loss() < before - 0.01
    assert "train/loss_epoch" in trainer.callback_metrics
