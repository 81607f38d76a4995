"""Helpers shared by the objective tests: small float64 data sets, a float64 SOX module around an objective, its
estimator, the exact inner values and the exact expectation of an estimator over enumerated batches."""

from __future__ import annotations

import itertools
import math

import torch
from builders import float64_batch, whole_list_ltr_data

from fccolit.algorithms.sox import SOX
from fccolit.data import TensorDictDataset, binary_fields, binary_sizes
from fccolit.models import LinearScorer
from fccolit.optim import Momentum
from fccolit.samplers.multilabel import MultiLabelPairDataset


def binary_data(n=30, d=4, m=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    fields = binary_fields(x, y)
    return fields, binary_sizes(fields)


def multiclass_data(n=20, d=5, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + y.unsqueeze(1).double() * 0.5
    return {"x": x, "y": y, "index": torch.arange(n)}, {"num_samples": n, "num_features": d, "num_classes": classes}


def ranking_data(num_items=(7, 5, 6, 4), seed=0, features=3):
    """Full lists (every item of every query), padded to L = max N_q; relevance in {0, …, 3}."""
    g = torch.Generator().manual_seed(seed)
    q, big_l = len(num_items), max(num_items)
    relevance = torch.zeros(q, big_l, dtype=torch.float64)
    mask = torch.zeros(q, big_l, dtype=torch.bool)
    for r, n_q in enumerate(num_items):
        mask[r, :n_q] = True
        rel = torch.randint(0, 4, (n_q,), generator=g).double()
        rel[0], rel[1] = 0.0, 2.0  # at least one non-relevant and one relevant item
        relevance[r, :n_q] = rel[torch.randperm(n_q, generator=g)]
    relevant = relevance > 0
    pair_index = torch.full((q, big_l), -1, dtype=torch.long)
    pair_index[relevant] = torch.arange(int(relevant.sum()))
    batch = {
        "x": torch.randn(q, big_l, features, generator=g, dtype=torch.float64),
        "relevance": relevance,
        "mask": mask,
        "pair_index": pair_index,
        "num_items": torch.tensor(num_items, dtype=torch.float64),
        "num_relevant": relevant.sum(1),
    }
    return batch, {"num_pairs": int(relevant.sum()), "num_queries": q, "num_features": features}


def make_sox(objective, sizes, model=None, **kw):
    """SOX in float64; ``model`` is a factory (default: a linear scorer without bias), called after seeding."""
    torch.manual_seed(0)
    model = model() if model is not None else LinearScorer(bias=False)
    return SOX(model, objective, data_sizes=sizes, state_dtype="float64", **kw).double()


def grads(module, loss):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.model.parameters()))])


def sox_estimate(module, batch):
    return grads(module, module.compositional_loss(module(batch), batch)[0])


def exact_table(module, full_batch):
    """``[n, d']`` the exact inner values g_i(w) of every outer index (the objective on the whole data)."""
    with torch.no_grad():
        inner = module.objective.inner(module(full_batch), full_batch)
    table = torch.full_like(module.state.value, math.nan)
    table[inner.index] = inner.value.to(table.dtype)
    assert not table.isnan().any()
    return table


def subset(fields, idx):
    idx = torch.as_tensor(idx, dtype=torch.long)
    return {k: v.index_select(0, idx) for k, v in fields.items()}


def expectation(module, full, batches, exact):
    """Exact mean over ``batches`` of the estimator; with ``exact``, u is reset to the exact g before each
    batch (the SOX estimator with exact state, "previous" ordering); otherwise the module's own rule runs."""
    total = None
    for idx in batches:
        if exact is not None:
            module.state.value.copy_(exact)
        est = sox_estimate(module, subset(full, idx))
        total = est if total is None else total + est
    return total / len(batches)


def run_steps(objective, sizes, batches, model, steps):
    module = make_sox(objective, sizes, model=model, ema_weight=0.5)
    opt = Momentum(module.model.parameters(), lr=0.2, momentum_weight=0.3)
    for batch in itertools.islice(batches, steps):
        loss, _ = module.compositional_loss(module(batch), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return module


def whole_lists():
    """``(batch, scores)``: every training query of a small generated LTR set with its whole list (inner values are
    exact), float64, and random scores."""
    dm = whole_list_ltr_data()
    batch = float64_batch(dm.full_batch())
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(batch["pair_index"].shape, generator=g, dtype=torch.float64)
    return batch, scores


def multilabel_labels(n=24, tasks=3, positives=5, seed=0):
    """[n, T] labels with exactly `positives` positives per task and a few unlabeled (−1) entries."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.zeros(n, tasks, dtype=torch.long)
    for t in range(tasks):
        order = torch.randperm(n, generator=g)
        labels[order[:positives], t] = 1
        labels[order[positives : positives + 3], t] = -1
    return labels


def multilabel_full_batch(labels, x):
    """Every labeled (task, sample) pair once, with the fields of MultiLabelPairDataset."""
    n, tasks = labels.shape
    pairs = [t * n + i for t in range(tasks) for i in range(n) if labels[i, t] >= 0]
    dataset = MultiLabelPairDataset(TensorDictDataset(x=x, y=labels, index=torch.arange(n)), labels)
    return dataset.__getitems__(pairs)
