"""Cost of one SONG / K-SONG / SOLC step against a plain listwise cross-entropy step, same NeuMF, batch and optimizer.

    python benchmarks/song_step.py [--quick] [--threads N]

A *plain step* is forward → mini-batch listwise cross-entropy (ListNet: −log softmax of each relevant item over its
user's sampled list) → backward → Adam step. A *SONG step* is forward → per-pair squared-hinge inner estimates
(every relevant item against its user's whole list) → per-pair state update → compositional loss → backward → the
same Adam step; K-SONG adds the per-user threshold (and, theoretical, the curvature state and the implicit term);
SOLC is the stateful listwise cross-entropy. Every method has its own copy of the same model and the same batches;
they are timed in one process, interleaved (ABCD...) so machine noise hits all alike; the table reports medians
and the ratio to the plain step (target ≤ 1.15).

When ``import libauc`` works, the same SONG step is also timed against LibAUC's ``NDCGLoss`` + ``SONG`` optimizer
on the same model and batch, and the two gradients are compared after both states are set to the same values
(LibAUC's definition: fresh u, per-user normalization, N_q = number of items; ours with ``u_for_gradient="fresh"``).
LibAUC is not installed in this environment, so that part prints that it was skipped.

Writes ``benchmarks/results/song_step.md`` (matplotlib is not needed; no plot is drawn).
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fccolit.algorithms.song import KSONG, SOLC, SONG  # noqa: E402
from fccolit.models.neumf import NeuMF  # noqa: E402
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "song_step.md"

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
    for fn in steps.values():  # warm-up: allocator, first visits of the state
        for batch in batches[:2]:
            fn(batch)
    times = {k: [] for k in steps}
    for _ in range(repeats):
        for key, fn in steps.items():
            start = time.perf_counter()
            for batch in batches:
                fn(batch)
            times[key].append((time.perf_counter() - start) / inner * 1e3)
    medians = {k: statistics.median(v) for k, v in times.items()}
    libauc = compare_libauc(base, sizes, batches[0], users, items, p, b, repeats, inner, batches)
    return medians, libauc


def compare_libauc(base, sizes, batch, users, items, p, b, repeats, inner, batches):
    """SONG against LibAUC's NDCGLoss + SONG optimizer on the same model and batches (only when installed)."""
    try:
        import libauc  # noqa: F401
        from libauc.losses import NDCGLoss
        from libauc.optimizers import SONG as LibAUCSONG
    except ImportError:
        return None
    num_pairs = sizes["num_pairs"]

    def libauc_batch(bt):
        return {"rating": bt["relevance"], "user_id": bt["query"], "num_pos_items": bt["num_relevant"],
                "ideal_dcg": bt["ideal_dcg"],
                "user_item_id": torch.where(bt["pair_index"] >= 0, bt["pair_index"], torch.zeros_like(bt["pair_index"]))}

    ours = SONG(copy.deepcopy(base), NDCGSurrogate(), ema_weight=0.1, u_for_gradient="fresh", data_sizes=sizes)
    ours_opt = torch.optim.Adam(ours.parameters(), lr=1e-3)
    theirs_model = copy.deepcopy(base)
    loss_fn = NDCGLoss(N=num_pairs, num_user=users, num_item=items, num_pos=p, gamma0=0.1)
    theirs_opt = LibAUCSONG(theirs_model.parameters(), lr=1e-3, mode="adam")

    # gradients on one batch with the same state: u of the batch's pairs set to one value in both
    rows = batch["pair_index"][batch["pair_index"] >= 0]
    u0 = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(1)) * 0.5 + 0.1
    ours.state.value[rows, 0] = u0
    loss_fn.u[rows] = u0
    ours_grad = torch.autograd.grad(ours.compositional_loss(ours(batch), batch)[0], list(ours.model.parameters()))
    theirs_loss = loss_fn(theirs_model(batch["query"], batch["items"]), libauc_batch(batch))
    theirs_grad = torch.autograd.grad(theirs_loss, list(theirs_model.parameters()))
    rel_diff = max(float((a - c).norm() / c.norm().clamp_min(1e-30)) for a, c in zip(ours_grad, theirs_grad))

    def our_step(bt):
        ours_opt.zero_grad(set_to_none=True)
        ours.compositional_loss(ours(bt), bt)[0].backward()
        ours_opt.step()

    def their_step(bt):
        theirs_opt.zero_grad(set_to_none=True)
        loss_fn(theirs_model(bt["query"], bt["items"]), libauc_batch(bt)).backward()
        theirs_opt.step()

    times = {"ours": [], "libauc": []}
    for _ in range(repeats):
        for key, fn in (("ours", our_step), ("libauc", their_step)):
            start = time.perf_counter()
            for bt in batches:
                fn(bt)
            times[key].append((time.perf_counter() - start) / inner * 1e3)
    return {"ours_ms": statistics.median(times["ours"]), "libauc_ms": statistics.median(times["libauc"]),
            "grad_rel_diff": rel_diff}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and only the first case")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats, inner = (5, 3) if args.quick else (11, 5)
    load_start = os.getloadavg()[0]
    cases = CASES[:1] if args.quick else CASES
    machine = f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {platform.processor() or 'cpu'}"
    header = ("| case | plain listwise CE (ms) | SONG (ms) | ratio | K-SONG prac. (ms) | ratio | K-SONG theo. (ms) "
              "| ratio | SOLC (ms) | ratio |")
    lines = [header, "|---|" + "---:|" * 9]
    libauc_lines = []
    for case in cases:
        name = case[0]
        med, lib = time_case(*case, repeats=repeats, inner=inner)
        plain = med["listwise CE (plain)"]
        cells = [f"{plain:.1f}"]
        for key in ("SONG", "K-SONG (practical)", "K-SONG (theoretical)", "SOLC"):
            cells += [f"{med[key]:.1f}", f"{med[key] / plain:.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
        if lib is None:
            libauc_lines.append(f"| {name} | skipped: `import libauc` failed (not installed) | | | |")
        else:
            libauc_lines.append(f"| {name} | {lib['ours_ms']:.1f} | {lib['libauc_ms']:.1f} | "
                                f"{lib['ours_ms'] / lib['libauc_ms']:.3f} | {lib['grad_rel_diff']:.2e} |")
    print("\n".join(lines))
    print("\nLibAUC comparison:")
    print("\n".join(libauc_lines))
    text = "\n".join([
        "## SONG / K-SONG / SOLC step versus a plain listwise cross-entropy step (CPU)",
        "",
        f"Command: `python benchmarks/song_step.py{''.join(' ' + a for a in sys.argv[1:])}`. Machine: {machine}, "
        f"{os.cpu_count()} cores, 1-minute load average {load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at "
        "the end (a machine shared with other jobs inflates the absolute times and puts a few percent of noise on the "
        "ratios). "
        "Seed 0 (model init and batches).",
        "Same NeuMF (embedding 64, MLP [64], dropout 0.2), same batches, torch Adam (lr 1e-3) for every method; one "
        "step = forward, loss, backward, Adam step, without Lightning. The batch is B users, each with P rated items "
        "(graded) and M other items. Medians of "
        f"{repeats} interleaved repetitions of {inner} steps; ratio = method / plain listwise CE. Target: ≤ 1.15.",
        "",
        *lines,
        "",
        "LibAUC (`NDCGLoss` + `SONG` optimizer, same model and batches; gradient difference with the same state, "
        "fresh u, per-user normalization):",
        "",
        "| case | ours (ms) | LibAUC (ms) | ratio | max relative gradient difference |",
        "|---|---:|---:|---:|---:|",
        *libauc_lines,
        "",
    ])
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
