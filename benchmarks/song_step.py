"""Cost of one SONG / K-SONG / SOLC step against a plain listwise cross-entropy step, same NeuMF, batch and optimizer.

    python benchmarks/song_step.py [--quick] [--threads N]

A *plain step* is forward → mini-batch listwise cross-entropy (ListNet: −log softmax of each relevant item over its
user's sampled list) → backward → Adam step. A *SONG step* is forward → per-pair squared-hinge inner estimates
(every relevant item against its user's whole list) → per-pair state update → compositional loss → backward → the
same Adam step; K-SONG adds the per-user threshold (and, theoretical, the curvature state and the implicit term);
SOLC is the stateful listwise cross-entropy. Every method has its own copy of the same model and the same batches;
they are timed in one process, interleaved call by call so machine noise hits all alike; the table reports medians
and the ratio to the plain step (target ≤ 1.05).

The same SONG step against LibAUC's ``NDCGLoss`` + ``SONG`` (loss, gradients, steps per second with data loading) is
in ``benchmarks/libauc_compare.py``; the Lightning ``training_step`` ratios (and DDP) are in
``benchmarks/fcco_overhead.py``. Timing: :func:`timing.interleaved_medians` (call by call, one process).

Writes ``benchmarks/results/song_step.md`` (matplotlib is not needed; no plot is drawn).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.algorithms.song import KSONG, SOLC, SONG  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate  # noqa: E402
from timing import interleaved_medians, machine, write_result  # noqa: E402

CASES = [
    # name, users, items, embedding, positives P, others M, users per batch B
    ("NeuMF 64/[64], 10k users × 5k items, B = 256 × (10 + 300)", 10_000, 5_000, 64, 10, 300, 256),
    ("NeuMF 64/[64], MovieLens-20M tables (138,493 × 26,744), B = 256 × (10 + 300)", 138_493, 26_744, 64, 10, 300, 256),
    ("NeuMF 64/[64], MovieLens-20M tables, B = 256 × (10 + 1000)", 138_493, 26_744, 64, 10, 1000, 256),
]


def make_batch(users, items, p, m, b, num_pairs, g):
    """A batch of the ranking schema: P rated items (ratings 1..5, their pair ids) then M other items per user."""
    query = torch.randperm(users, generator=g)[:b]
    pos = torch.randint(items, (b, p), generator=g)
    neg = torch.randint(items, (b, m), generator=g)
    relevance = torch.cat([torch.randint(1, 6, (b, p), generator=g).float(), torch.zeros(b, m)], 1)
    pair = torch.cat([torch.randperm(num_pairs, generator=g)[: b * p].view(b, p), torch.full((b, m), -1)], 1)
    ideal = ((2 ** relevance[:, :p] - 1) / torch.log2(torch.arange(2, p + 2).float())).sum(1) * 3.0
    return {
        "query": query, "items": torch.cat([pos, neg], 1), "relevance": relevance, "pair_index": pair,
        "mask": torch.ones(b, p + m, dtype=torch.bool), "num_items": torch.full((b,), float(items)),
        "ideal_dcg": ideal, "ideal_dcg_at_k": ideal * 0.8, "num_relevant": torch.full((b,), 3 * p),
    }


def listwise_ce(scores, batch):
    """Plain mini-batch ListNet: mean over relevant entries of −log softmax over the user's sampled list."""
    anchor = batch["pair_index"] >= 0
    nll = torch.logsumexp(scores, 1, keepdim=True) - scores
    return (nll * anchor).sum() / anchor.sum()


def time_case(name, users, items, emb, p, m, b, repeats, inner):
    g = torch.Generator().manual_seed(0)
    num_pairs = users * 30
    sizes = {"num_users": users, "num_items": items, "num_queries": users, "num_pairs": num_pairs, "top_k": 300}
    torch.manual_seed(0)
    base = NeuMF(users, items, embedding_dim=emb, layers=[emb], dropout=0.2)
    modules = {
        "SONG": SONG(copy.deepcopy(base), NDCGSurrogate(), ema_weight=0.1, data_sizes=sizes),
        "K-SONG (practical)": KSONG(copy.deepcopy(base), TopKNDCGSurrogate(top_k=300), data_sizes=sizes),
        "K-SONG (theoretical)": KSONG(copy.deepcopy(base), TopKNDCGSurrogate(top_k=300), estimator="theoretical",
                                      data_sizes=sizes),
        "SOLC": SOLC(copy.deepcopy(base), ema_weight=0.1, data_sizes=sizes),
    }
    plain_model = copy.deepcopy(base)
    optimizers = {k: torch.optim.Adam(v.parameters(), lr=1e-3) for k, v in modules.items()}
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-3)
    batches = [make_batch(users, items, p, m, b, num_pairs, g) for _ in range(inner)]

    def plain_step(batch):
        plain_opt.zero_grad(set_to_none=True)
        listwise_ce(plain_model(batch["query"], batch["items"]), batch).backward()
        plain_opt.step()

    def fcco_step(key):
        module, opt = modules[key], optimizers[key]

        def step(batch):
            opt.zero_grad(set_to_none=True)
            loss, _ = module.compositional_loss(module(batch), batch)
            loss.backward()
            opt.step()
        return step

    steps = {"listwise CE (plain)": plain_step, **{k: fcco_step(k) for k in modules}}
    return interleaved_medians(steps, batches, repeats, warmup=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and only the first case")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see fcco_overhead.py)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    repeats, inner = (5, 3) if args.quick else (11, 5)
    cases = CASES[:1] if args.quick else CASES
    header = ("| case | plain listwise CE (ms) | SONG (ms) | ratio | K-SONG prac. (ms) | ratio | K-SONG theo. (ms) "
              "| ratio | SOLC (ms) | ratio |")
    lines = [header, "|---|" + "---:|" * 9]
    for case in cases:
        med = time_case(*case, repeats=repeats, inner=inner)
        plain = med["listwise CE (plain)"]
        cells = [f"{plain:.1f}"]
        for key in ("SONG", "K-SONG (practical)", "K-SONG (theoretical)", "SOLC"):
            cells += [f"{med[key]:.1f}", f"{med[key] / plain:.3f}"]
        lines.append(f"| {case[0]} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    text = "\n".join([
        "## SONG / K-SONG / SOLC step versus a plain listwise cross-entropy step (CPU, no Lightning)",
        "",
        f"Command: `python benchmarks/song_step.py{''.join(' ' + a for a in sys.argv[1:])}`. Machine: {machine()}. "
        "Seed 0 (model init and batches). Same NeuMF (embedding 64, MLP [64], dropout 0.2), same batches, torch Adam "
        "(lr 1e-3) for every method; one step = forward, loss, backward, Adam step, without Lightning. The batch is B "
        f"users, each with P rated items (graded) and M other items. Medians over {repeats} rounds × {inner} batches, "
        "every method on every batch call by call (`timing.interleaved_medians`); ratio = method / plain listwise "
        "CE. Target: ≤ 1.05. The LibAUC comparison of the same step is in the LibAUC section "
        "(`benchmarks/libauc_compare.py`).",
        "",
        *lines,
    ])
    print(f"wrote {write_result('song_step', text)}")


if __name__ == "__main__":
    main()
