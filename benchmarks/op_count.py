"""How many tensor operations an FCCO training step issues beyond the plain step: a count that does not depend on the
machine or its load, so it shows a regression that step timings on a shared 2-core machine hide.

    python benchmarks/op_count.py [--quick] [--lines CASE]

On a CPU core or a GPU's host thread, the FCCO part of a small model's step is mostly a fixed cost of small tensor
operations (a few microseconds each on a CPU, a kernel launch each on a GPU; see ``fcco_overhead.py``, ``gpu.py``),
so their number is the figure to keep down. For every case of ``fcco_overhead.py`` (the same DataModules and module
factories), one Lightning fit per side counts the aten operations dispatched inside ``training_step`` (forward, loss,
state update, backward, finite check, optimizer step, logging; every ``torch_dispatch`` call, views included) on
steps 20–29, and reports the mean per step of the plain and the FCCO side and their difference. ``--lines CASE``
also lists the FCCO side's operations by the line of fccolit that issued them (the prefix of a case name picks it).
``--quick`` uses the small ranking data (the counts are those of the full sizes but for batch-dependent branches).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fcco_overhead  # noqa: E402
from timing import machine, write_result  # noqa: E402

PACKAGE = str(Path(__file__).resolve().parents[1] / "fccolit")
FIRST, COUNTED = 20, 10  # steps before counting, steps counted


class OpCounter(TorchDispatchMode):
    """Counts every dispatched aten operation; with ``by_line``, keyed by (the innermost fccolit line, operation)."""

    def __init__(self, by_line: bool = False) -> None:
        super().__init__()
        self.by_line = by_line
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        key = func.overloadpacket.__name__
        if self.by_line:
            frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(PACKAGE)]
            where = f"{Path(frames[-1].filename).relative_to(PACKAGE)}:{frames[-1].lineno} ({frames[-1].name})" \
                if frames else "(outside fccolit: Lightning, torch)"
            key = (where, key)
        self.counts[key] += 1
        return func(*args, **(kwargs or {}))


def count_steps(factory, data, by_line: bool = False) -> tuple[float, collections.Counter]:
    """Mean dispatched operations per ``training_step`` of ``factory(data)`` over steps FIRST … FIRST + COUNTED − 1."""
    torch.manual_seed(0)
    module = factory(data)
    step = module.training_step
    total: collections.Counter = collections.Counter()

    def counted(*args, **kwargs):
        if module.global_step < FIRST:
            return step(*args, **kwargs)
        counter = OpCounter(by_line)
        with counter:
            out = step(*args, **kwargs)
        total.update(counter.counts)
        return out

    module.training_step = counted
    fcco_overhead.trainer(1, FIRST + COUNTED).fit(module, datamodule=data)
    return sum(total.values()) / COUNTED, total


def run(quick: bool, work: Path, only: list[str] | None = None, log=print) -> dict[str, tuple[float, float]]:
    """case → (plain operations per step, FCCO operations per step)."""
    out = {}
    for name, (make_data, plain, fcco) in {**fcco_overhead.cases(quick, work), **fcco_overhead.deep_cases()}.items():
        if only and not any(name.startswith(o) or o in name for o in only):
            continue
        data = make_data()
        out[name] = (count_steps(plain, data)[0], count_steps(fcco, data)[0])
        log(f"{name}: plain {out[name][0]:.1f}, FCCO {out[name][1]:.1f} operations a step")
    return out


def by_line(case: str, quick: bool, work: Path) -> str:
    """The FCCO side's operations per step of the case named ``case`` (a prefix), by the fccolit line issuing them."""
    cases = {**fcco_overhead.cases(quick, work), **fcco_overhead.deep_cases()}
    name = next((n for n in cases if n.startswith(case)), None)
    if name is None:
        raise SystemExit(f"op_count: no case starts with {case!r}; cases: {', '.join(cases)}")
    make_data, _, fcco = cases[name]
    _, total = count_steps(fcco, make_data(), by_line=True)
    lines = collections.defaultdict(collections.Counter)
    for (where, op), n in total.items():
        lines[where][op] += n
    rows = sorted(lines.items(), key=lambda kv: -sum(kv[1].values()))
    text = [f"{name}: operations per step by the line that issued them", ""]
    for where, ops in rows:
        detail = ", ".join(f"{op} × {n / COUNTED:g}" for op, n in ops.most_common())
        text.append(f"{sum(ops.values()) / COUNTED:6.1f}  {where}: {detail}")
    return "\n".join(text)


def report(result: dict[str, tuple[float, float]], command: str) -> str:
    lines = [
        "## Tensor operations per training step: FCCO against plain (machine-independent)",
        "",
        f"Command: `{command}`. Machine: {machine(1)}. Every aten operation dispatched inside `training_step` "
        f"(forward, loss, state update, backward, finite check, optimizer step, logging; views included), mean of "
        f"steps {FIRST}–{FIRST + COUNTED - 1} of one Lightning fit per side; the cases and modules of "
        "`fcco_overhead.py`. On a small model these operations, not arithmetic, make the FCCO step's extra time: "
        "each costs a few microseconds of a CPU core or a kernel launch of a GPU's host thread.",
        "",
        "| case | plain ops / step | FCCO ops / step | extra | FCCO / plain |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (p, f) in result.items():
        lines.append(f"| {name} | {p:.1f} | {f:.1f} | {f - p:+.1f} | {f / p:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="cases whose names start with (or contain) these")
    ap.add_argument("--lines", default=None, metavar="CASE", help="also list CASE's operations by fccolit line")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/op_count.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    command = "python benchmarks/op_count.py" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="fccolit-ops-") as tmp:
        result = run(args.quick, Path(tmp), args.only, log=lambda s: print(s, file=sys.stderr, flush=True))
        text = report(result, command)
        if args.lines:
            text += "\n\n```\n" + by_line(args.lines, args.quick, Path(tmp)) + "\n```"
    print(text)
    if args.write:
        write_result("op_count", text)
    return result


if __name__ == "__main__":
    main()
