"""How the FCCO step overhead shrinks as the model grows: a sweep of the MLP width for ADAP, PAUCRange (inner step),
SONEX (with and without its MSVR correction) and SOX, each against a plain supervised step.

    python benchmarks/step_overhead.py [--quick] [--widths 128 512 2048] [--steps N] [--threads 1]

The FCCO part of a step is partly a fixed cost (the per-index state update, the estimator's small tensor ops:
about 0.5–2 ms on the 2-core development CPU) and partly work that grows with the model: for SONEX one more no-grad
forward pass (the MSVR correction evaluates the batch at the previous parameters), for PAUCRange the proximal term
and the iterate average over every parameter. So the ratio FCCO / plain depends on how expensive the model is.
For every width w the model is an MLP 256-w-w-1 (two hidden layers), the batch 256 (``fcco_overhead.py``'s
``binary`` and ``grouped`` DataModules), and each pair is measured as ``fcco_overhead.py`` measures it:
:func:`fcco_overhead.paired_times` (one Lightning fit of :class:`timing.PairedSteps`, plain and FCCO
``training_step`` interleaved call by call, medians per side), the module factories of :func:`fcco_overhead.cases`
built with ``hidden=[w, w]``. SOX (AP objective, ``fccolit.optim.Momentum``, versus BCE with the same optimizer) is
the one pair defined here: ``fcco_overhead.py`` has no SOX case.

Writes ``benchmarks/results/step_overhead.md`` (a table per width, the widths where each ratio reaches 1.05) and
``benchmarks/results/step_overhead.png`` (ratio against the plain step's milliseconds, one line per algorithm);
``benchmarks/collect.py`` assembles RESULTS.md. ``--write`` is accepted for ``benchmarks/run.py`` (writing is the
default). One torch thread by default (see ``fcco_overhead.py``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fcco_overhead import cases, paired_times  # noqa: E402
from fccolit.algorithms import SOX, Supervised  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402
from timing import RESULTS_DIR, machine, write_result  # noqa: E402

TARGET = 1.05  # issue 10: an FCCO step costs at most 1.05 × the plain step

# label → (prefix of the fcco_overhead.cases() name, the plain step, the work the FCCO step adds)
ALGORITHMS = {
    "ADAP": ("ADAP (", "BCE, AdaptiveMomentum",
             "the AP surrogate's P × B pairs (64 × 256) and the per-index state update"),
    "PAUCRange inner": ("PAUCRange inner step", "BCE, SGD",
                        "the proximal move towards w_k and the running sum of the iterates (two fused "
                        "parameter-sized passes in its optimizer step: the part that grows with the model) and a "
                        "fixed ≈ 1.5 ms of ranked-range work (the thresholds' read and update, the loss's sort and "
                        "backward)"),
    "SONEX": ("SONEX GDRO-CVaR", "BCE, Adam, 8 groups × 32",
              "the MSVR correction γ'(ĝ(w_t) − ĝ(w_{t−1})): one more (no-grad) forward pass of the batch, at "
              "w_{t−1}, plus what the γ'=0 row has"),
    "SONEX γ'=0": ("↳ SONEX without", "BCE, Adam, 8 groups × 32",
                   "SONEX without the MSVR correction: the group state update and the CVaR estimator"),
    "SOX": (None, "BCE, Momentum", "the AP inner estimates (P × B pairs) and the per-index state update"),
}
GROWTH = 3.0  # extra ms at the largest width over that at the smallest (at least 0.5 ms): above it, "grows"


def sweep_cases(hidden: list[int], work: Path) -> dict[str, tuple]:
    """label → (DataModule factory, plain module factory, FCCO module factory) for an MLP 256-``hidden``-1."""
    named = cases(quick=False, work=work, hidden=hidden)  # the ranking cases are lazy: never built here
    out = {}
    for label, (prefix, _, _) in ALGORITHMS.items():
        if prefix is None:
            continue
        matches = [name for name in named if name.startswith(prefix)]
        if len(matches) != 1:
            raise KeyError(f"step_overhead.py: ALGORITHMS[{label!r}] prefix {prefix!r} matches {matches} in "
                           f"fcco_overhead.cases(): update the prefix")
        out[label] = named[matches[0]]
    make_binary = out["ADAP"][0]  # the same binary DataModule (B = 256, 64 positives)
    momentum = lambda p: Momentum(p, lr=1e-3, momentum_weight=0.1)  # noqa: E731
    out["SOX"] = (make_binary,
                  lambda d: Supervised(MLP(hidden=hidden), optimizer=momentum, data_sizes=d.sizes),
                  lambda d: SOX(MLP(hidden=hidden), AveragePrecisionSurrogate(), optimizer=momentum, data_sizes=d.sizes))
    return out


def steps_for(width: int, base_steps: int) -> int:
    """Paired batches at ``width``: ``base_steps`` up to width 512, then ``base_steps`` × 512 / width, at least 30:
    the wide steps are long enough that the noise averages out within fewer of them."""
    return max(30, int(base_steps * 512 / width)) if width > 512 else base_steps


def run(widths: list[int], base_steps: int, work: Path,
        only: list[str] | None = None) -> dict[int, dict[str, tuple[float, float]]]:
    """width → label → (plain median ms, FCCO median ms)."""
    out: dict[int, dict[str, tuple[float, float]]] = {}
    for width in widths:
        steps = steps_for(width, base_steps)
        out[width] = {}
        for label, (make_data, plain, fcco) in sweep_cases([width, width], work).items():
            if only and label not in only:
                continue
            plain_t, fcco_t = paired_times(plain, fcco, make_data(), steps, devices=1)
            p, f = statistics.median(plain_t) * 1e3, statistics.median(fcco_t) * 1e3
            out[width][label] = (p, f)
            print(f"width {width:5d} ({steps:3d} batches) {label:16s} plain {p:8.2f} ms  FCCO {f:8.2f} ms  "
                  f"ratio {f / p:.3f}  extra {f - p:+.2f} ms", file=sys.stderr, flush=True)
    return out


def crossing(result: dict[int, dict[str, tuple[float, float]]], label: str) -> str:
    """One sentence, from the data: the smallest width at which ``label``'s ratio is ≤ TARGET, or that none is."""
    points = [(w, result[w][label]) for w in sorted(result) if label in result[w]]
    if not points:
        return ""
    under = [w for w, (p, f) in points if f / p <= TARGET]
    if not under:
        w, (p, f) = points[-1]
        return (f"**{label}**: above {TARGET} at every width measured (at {w}: ratio {f / p:.3f}, "
                f"{f - p:+.2f} ms on a {p:.1f} ms plain step).")
    first = under[0]
    p, f = result[first][label]
    text = f"**{label}**: at or under {TARGET} from width {first} on (ratio {f / p:.3f}, plain step {p:.1f} ms)"
    above_later = [w for w, (p2, f2) in points if w > first and f2 / p2 > TARGET]
    if above_later:
        text += f", but above it again at width {', '.join(map(str, above_later))}"
    return text + "."


def growth(result: dict[int, dict[str, tuple[float, float]]], label: str) -> str:
    """One sentence, from the data: ``label``'s extra ms at the smallest and the largest width, whether it grows
    with the model (by more than GROWTH×) and the work that makes it."""
    points = [result[w][label] for w in sorted(result) if label in result[w]]
    (p0, f0), (p1, f1) = points[0], points[-1]
    grows = len(points) > 1 and f1 - p1 > GROWTH * max(f0 - p0, 0.5)
    kind = (f"grows with the model ({(f1 - p1) / p1:.0%} of the plain step at the largest width)" if grows
            else "roughly fixed")
    return f"{label}: {f0 - p0:+.2f} ms → {f1 - p1:+.2f} ms, {kind}. The work it adds: {ALGORITHMS[label][2]}."


def plot(result: dict[int, dict[str, tuple[float, float]]], path: Path) -> bool:
    """Ratio against the plain step's milliseconds (log x), one line per algorithm, the top line's points labelled
    with their width (the others' lie at about the same x); False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = [label for label in ALGORITHMS if any(label in result[w] for w in result)]
    top = max(drawn, key=lambda label: sum(f / p for w in result for lb, (p, f) in result[w].items() if lb == label))
    for label in drawn:
        points = [(result[w][label], w) for w in sorted(result) if label in result[w]]
        if not points:
            continue
        xs = [p for (p, _), _ in points]
        ys = [f / p for (p, f), _ in points]
        (line,) = ax.plot(xs, ys, marker="o", label=label)
        for x, y, (_, w) in zip(xs, ys, points if label == top else []):
            ax.annotate(str(w), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=line.get_color())
    ax.axhline(TARGET, color="black", linestyle="--", linewidth=1, label=f"target {TARGET}")
    ax.set_xscale("log")
    ax.set_xlabel("plain step (ms, log scale; the top line's points labelled with the hidden width w)")
    ax.set_ylabel("FCCO step / plain step (medians)")
    ax.set_title("FCCO step / plain step against model size\n(MLP 256-w-w-1, batch 256, Lightning, 1 CPU thread)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def report(result: dict[int, dict[str, tuple[float, float]]], command: str, base_steps: int, threads: int,
           plotted: bool) -> str:
    labels = [label for label in ALGORITHMS if any(label in result[w] for w in result)]
    widths = sorted(result)
    lines = [
        "## FCCO step overhead against model size (Lightning, CPU)",
        "",
        f"Command: `{command}`. Machine: {machine(threads)}. Model: MLP 256-w-w-1 (two hidden layers of width w), "
        "batch 256; each pair is measured as in `fcco_overhead.py` (its module factories with `hidden=[w, w]`): "
        "one fit of `timing.PairedSteps` runs the plain and the FCCO module's `training_step` alternately on "
        f"the same batches ({', '.join(f'{steps_for(w, base_steps)} at {w}' for w in widths)}; first 3 dropped), "
        "medians per side. Plain steps: "
        + "; ".join(f"{label} vs {ALGORITHMS[label][1]}" for label in labels)
        + f". Each cell: plain → FCCO ms, ratio, extra = FCCO − plain (ms). Target ≤ {TARGET}.",
        "",
        "| width | " + " | ".join(f"{label}: plain → FCCO ms | ratio | extra ms" for label in labels) + " |",
        "|---:|" + "---:|---:|---:|" * len(labels),
    ]
    for w in widths:
        cells = []
        for label in labels:
            if label in result[w]:
                p, f = result[w][label]
                cells.append(f"{p:.2f} → {f:.2f} | {f / p:.3f} | {f - p:+.2f}")
            else:
                cells.append("not run | | ")
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    lines += ["", f"Smallest width at which the ratio is at or under {TARGET}:", ""]
    lines += [f"* {crossing(result, label)}" for label in labels]
    lines += ["", f"The extra milliseconds from width {widths[0]} to {widths[-1]} (a fixed extra makes the ratio fall "
              "towards 1 as the plain step grows; an extra that grows with the model keeps it above 1):", ""]
    lines += [f"* {growth(result, label)}" for label in labels]
    if plotted:
        lines += ["", "![FCCO / plain step ratio against the plain step's milliseconds](step_overhead.png)"]
    else:
        lines += ["", "No plot: matplotlib is not installed (the numbers are the table above)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer batches (about 2 minutes on 2 cores)")
    ap.add_argument("--widths", type=int, nargs="*", default=None, help="hidden widths (default 128 … 2048)")
    ap.add_argument("--steps", type=int, default=None, help="paired batches up to width 512 (fewer above)")
    ap.add_argument("--only", nargs="*", default=None, choices=list(ALGORITHMS), help="algorithms to run")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see fcco_overhead.py)")
    ap.add_argument("--write", action="store_true", help="accepted for benchmarks/run.py: the results are always "
                    "written")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    widths = args.widths or [128, 256, 512, 1024, 2048]
    base_steps = args.steps or (80 if args.quick else 200)
    with tempfile.TemporaryDirectory(prefix="fccolit-step-overhead-") as tmp:
        result = run(widths, base_steps, Path(tmp), args.only)
    RESULTS_DIR.mkdir(exist_ok=True)
    plotted = plot(result, RESULTS_DIR / "step_overhead.png")
    command = "python benchmarks/step_overhead.py" + "".join(" " + a for a in sys.argv[1:])
    text = report(result, command, base_steps, args.threads, plotted)
    print(text)
    print(f"wrote {write_result('step_overhead', text)}")
    last = max(result)
    print("summary: " + " ".join(f"{label.replace(' ', '_')}_ratio_at_{last}={f / p:.3f}"
                                  for label, (p, f) in result[last].items()))


if __name__ == "__main__":
    main()
