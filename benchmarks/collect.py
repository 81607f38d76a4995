"""Assemble benchmarks/RESULTS.md from the per-benchmark files in benchmarks/results/.

    python benchmarks/collect.py

Every benchmark script writes its own ``benchmarks/results/<name>.md`` (its table, the command that produced it
and the machine); this script puts them under one heading, in the order below (others after, alphabetically).
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["fcco_overhead", "op_count", "cold_ops", "libauc_compare", "ndcg_eval", "state_scale", "step_overhead", "song_step", "ranking_data", "image_loaders", "bias_floor",
         "gdro_synthetic", "handwritten", "redesign_overhead"]
HEADER = """# Benchmark results

Every table below was produced by the script and command it names, on the machine it names; timings are ratios
measured side by side in one run. Regenerate a section by rerunning its script, then `python benchmarks/collect.py`.
The papers' tables (quality, against the papers' numbers) are in [REPRODUCTION.md](REPRODUCTION.md).
Which machine gave which rows: every section names its machine in its first lines; the sections titled "GPU: ..."
(`benchmarks/gpu.py`, files `results/gpu_<device>.md`) ran on the GPU they name, every other section on a CPU.
"""


def main() -> None:
    files = {p.stem: p for p in (HERE / "results").glob("*.md")}
    names = [n for n in ORDER if n in files] + sorted(n for n in files if n not in ORDER)
    # the sections link their plots relative to results/: from RESULTS.md they are under results/
    relink = lambda text: re.sub(r"\]\((?!https?:|/|results/)([^)]+\.png)\)", r"](results/\1)", text)  # noqa: E731
    header = HEADER
    if not any(n.startswith("gpu_") for n in names):
        header += ("No GPU section yet: no GPU machine has run `python benchmarks/run.py --gpu` (`benchmarks/gpu.py`) "
                   "since it was written; every section below ran on a CPU.\n")
    parts = [header] + [relink(files[n].read_text().strip()) + "\n" for n in names]
    (HERE / "RESULTS.md").write_text("\n".join(parts))
    print(f"RESULTS.md: {len(names)} sections ({', '.join(names)})")


if __name__ == "__main__":
    main()
