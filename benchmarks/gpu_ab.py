"""A/B of two versions of the library on one device: ``gpu.py``'s ratio rows (FCCO / plain step) for each source
tree, alternately, each in a fresh process, so that a change is judged within one lease of a GPU machine.

    git worktree add /tmp/before <revision>
    python benchmarks/gpu_ab.py /tmp/before . --only resnet20 neumf [--rounds 2]   # on the GPU machine
    python benchmarks/gpu_ab.py . . --quick --rounds 1                              # the CPU check (the tests)

Each process imports ``fccolit`` from its tree and this checkout's benchmark code (``gpu.py``, ``timing.py``,
``fcco_overhead.py``: they use the library's public API), runs :func:`gpu.run` without the LibAUC rows and prints
its rows as JSON. The table gives each row's ratio for A and B in every round and B's median over A's. Ratios, not
milliseconds, are compared: the plain step moves by tens of percent between processes on one GPU (cuDNN's choices,
clocks), the ratio within one fit much less.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, sys
sys.path.insert(0, {tree!r})
import fccolit  # this tree's library; the benchmark modules below find it already imported
sys.path.insert(1, {bench!r})
import gpu
result = gpu.run({quick!r}, {only!r}, log=lambda s: print(s, file=sys.stderr, flush=True), libauc=False)
print("ROWS " + json.dumps([dict(r, library=fccolit.__file__) for r in result["ratio"]]))
"""


def run_tree(tree: Path, quick: bool, only: list[str] | None) -> list[dict]:
    """``gpu.run``'s ratio rows with ``fccolit`` imported from ``tree`` (a fresh process)."""
    code = CHILD.format(tree=str(tree.resolve()), bench=str(HERE), quick=quick, only=only)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gpu_ab: the run of {tree} failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("ROWS "))
    rows = json.loads(line[5:])
    expected = str((tree.resolve() / "fccolit" / "__init__.py"))
    if rows and rows[0]["library"] != expected:
        raise SystemExit(f"gpu_ab: the run of {tree} imported {rows[0]['library']}, not {expected}")
    return rows


def report(a: Path, b: Path, rounds: list[tuple[list[dict], list[dict]]], command: str) -> str:
    keys = [(r["workload"], r["case"], r["precision"]) for r in rounds[0][0]]
    head = " | ".join(f"A{k + 1} | B{k + 1}" for k in range(len(rounds)))
    lines = [f"Command: `{command}`. A = `{a}`, B = `{b}`; ratio = FCCO / plain step (medians of one fit), each tree "
             "in its own process, alternately.", "",
             f"| workload | case | precision | {head} | B / A (medians) |",
             "|---|---|---|" + "---:|" * (2 * len(rounds) + 1)]
    for key in keys:
        ratios = [[next(r["ratio"] for r in side if (r["workload"], r["case"], r["precision"]) == key)
                   for side in pair] for pair in rounds]
        cells = " | ".join(f"{x:.3f} | {y:.3f}" for x, y in ratios)
        change = statistics.median(y for _, y in ratios) / statistics.median(x for x, _ in ratios)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells} | {change:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a", type=Path, help="source tree A (e.g. a git worktree of the revision before)")
    ap.add_argument("tree_b", type=Path, help="source tree B (e.g. this checkout: .)")
    ap.add_argument("--only", nargs="*", default=None, choices=["resnet20", "densenet121", "neumf", "clip"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny shapes on the CPU (gpu.py --quick)")
    args = ap.parse_args(argv)
    for tree in (args.tree_a, args.tree_b):
        if not (tree / "fccolit" / "__init__.py").is_file():
            raise SystemExit(f"gpu_ab: {tree} holds no fccolit/ package")
    rounds = []
    for k in range(args.rounds):
        pair = []
        for tree in (args.tree_a, args.tree_b):
            pair.append(run_tree(tree, args.quick, args.only))
            print(f"round {k + 1}: {tree} done", file=sys.stderr, flush=True)
        rounds.append(tuple(pair))
    command = "python benchmarks/gpu_ab.py" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    text = report(args.tree_a, args.tree_b, rounds, command)
    print(text)
    return text


if __name__ == "__main__":
    main()
