"""How long the ``fccolit`` command takes to start, and the quickstart to train: wall-clock seconds of whole commands.

    python benchmarks/startup.py            # 5 runs of each command, the median
    python benchmarks/startup.py --quick    # 3 runs

Commands, each in a new process from an empty folder: ``fccolit --version``, ``python -m fccolit.resources`` (the
packaged configs), ``fccolit fit --config quickstart --print_config`` (imports, parsing and the classes' signatures:
everything before the first step) and the whole quickstart, ``fccolit fit --config quickstart`` (the README's demo,
6 epochs). Writes ``benchmarks/results/startup.md``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from timing import machine, write_result  # noqa: E402

FCCOLIT = str(Path(sys.executable).with_name("fccolit"))
COMMANDS = {
    "`fccolit --version`": [FCCOLIT, "--version"],
    "`python -m fccolit.resources`": [sys.executable, "-m", "fccolit.resources"],
    "`fccolit fit --config quickstart --print_config` (everything before the first step)":
        [FCCOLIT, "fit", "--config", "quickstart", "--print_config"],
    "`fccolit fit --config quickstart` (the demo: 6 epochs, 1,428 steps)":
        [FCCOLIT, "fit", "--config", "quickstart", "--trainer.enable_progress_bar", "false"],
}


def seconds(command: list[str]) -> float:
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run(command, cwd=folder, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs of each command instead of 5")
    args = parser.parse_args()
    runs = 3 if args.quick else 5
    rows = []
    for name, command in COMMANDS.items():
        times = [seconds(command) for _ in range(runs)]
        rows.append(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")
        print(rows[-1], flush=True)
    text = "\n".join([
        "## Start-up and the demo's length (whole commands)",
        "",
        f"Command: `python benchmarks/startup.py{' --quick' if args.quick else ''}`. Machine: {machine()}. "
        f"Wall-clock seconds of each command in a new process from an empty folder, {runs} runs.",
        "",
        "| command | median s | min s | max s |",
        "|---|---:|---:|---:|",
        *rows,
        "",
        "`fccolit --version` and `python -m fccolit.resources` import neither torch nor Lightning (`import fccolit` is "
        "lazy and the command's entry, `fccolit.console`, answers `--version` itself); before that change both took "
        "10–12 s on this kind of machine. The `--print_config` row is the start-up every run pays before its first "
        "step: importing torch, Lightning and jsonargparse and reading the classes' signatures.",
    ])
    print(f"wrote {write_result('startup', text)}")


if __name__ == "__main__":
    main()
