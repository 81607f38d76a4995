"""What every reproduction script shares: where the development data is, the paper-vs-ours table, the machine
line, the results file.

Each script under ``benchmarks/reproduce/`` reproduces one table or figure of one paper and writes
``benchmarks/reproduce/results/<name>.md``: a header (claim, command, wall time, seeds, machine), a table with the
paper's number, ours and the difference side by side (:func:`claim_table`), the sweeps of the knobs the paper
leaves open (with the setting the shipped configs use marked), and a verdict per claim. ``python
benchmarks/reproduce/collect.py`` assembles ``benchmarks/REPRODUCTION.md``.

Only ``../shared/data/`` (development data) is read; the acceptance data beside it is never read from here.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS_DIR = HERE / "results"
sys.path.insert(0, str(REPO))


def shared_data(name: str) -> Path:
    """``<repo>/../shared/data/<name>`` (override the parent with ``FCCOLIT_SHARED_DATA``)."""
    root = Path(os.environ.get("FCCOLIT_SHARED_DATA", REPO.parent / "shared" / "data"))
    path = root / name
    if not path.exists():
        raise SystemExit(f"{path} not found: the reproduction scripts need the development data in ../shared/data")
    return path


def machine() -> str:
    import torch

    return (f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), "
            f"Python {platform.python_version()}, torch {torch.__version__}, CPU")


@dataclass
class Claim:
    """One row of the paper-vs-ours table.

    ``paper``: the paper's number (None when the paper gives none: a claim about an ordering, or a baseline the
    paper does not run); ``ours``: one value per seed; ``verdict``: "reproduced", "not reproduced: <why>", ...
    """

    label: str
    paper: float | None
    ours: Sequence[float]
    verdict: str = ""
    note: str = ""

    @property
    def mean(self) -> float:
        vals = [v for v in self.ours if np.isfinite(v)]
        return float(np.mean(vals)) if vals else math.nan

    @property
    def std(self) -> float:
        vals = [v for v in self.ours if np.isfinite(v)]
        return float(np.std(vals)) if len(vals) > 1 else 0.0


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "—"
    if not np.isfinite(value):
        return "nan"
    return f"{value:.{digits}f}"


def claim_table(claims: Sequence[Claim], metric: str, digits: int = 4) -> list[str]:
    """Markdown rows: label | paper | ours (mean ± std over seeds) | ours − paper | verdict."""
    lines = [f"| | paper {metric} | ours {metric} (mean ± std) | ours − paper | verdict |", "|---|---:|---:|---:|---|"]
    for c in claims:
        diff = None if c.paper is None else c.mean - c.paper
        sign = "" if diff is None or not np.isfinite(diff) else ("+" if diff >= 0 else "")
        lines.append(
            f"| {c.label} | {fmt(c.paper, 3)} | {fmt(c.mean, digits)} ± {fmt(c.std, digits)} | "
            f"{sign}{fmt(diff, digits) if diff is not None else '—'} | {c.verdict}{(' ' + c.note) if c.note else ''} |"
        )
    return lines


def grid_table(row_label: str, col_label: str, rows: Sequence, cols: Sequence, value, digits: int = 4,
               mark: tuple | None = None) -> list[str]:
    """A sweep as a markdown grid: ``value(row, col)`` in each cell; ``mark = (row, col)`` is bolded (the
    setting the shipped config uses)."""
    lines = [f"| {row_label} \\ {col_label} | " + " | ".join(str(c) for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            text = fmt(value(r, c), digits)
            cells.append(f"**{text}**" if mark == (r, c) else text)
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return lines


def header(title: str, command: str, seconds: float, seeds: Sequence[int], protocol: str) -> list[str]:
    return [
        f"## {title}",
        "",
        f"Command: `{command}` ({seconds / 60:.1f} min). Seeds: {', '.join(map(str, seeds))}. Machine: {machine()}.",
        "",
        protocol,
        "",
    ]


def write_result(name: str, lines: Sequence[str]) -> Path:
    """Write ``benchmarks/reproduce/results/<name>.md`` and print it."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    text = "\n".join(lines).rstrip() + "\n"
    path.write_text(text)
    print(text)
    return path


def save_plot(name: str, draw) -> str:
    """``draw(plt)`` draws a figure; it is saved as ``results/<name>.png``; returns the markdown image line (or a
    note when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "(matplotlib is not installed: no plot; the table above holds the same numbers.)"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / f"{name}.png", dpi=110)
    plt.close(fig)
    return f"![{name}]({name}.png)"


@dataclass
class Stopwatch:
    start: float = field(default_factory=time.perf_counter)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


class Runner:
    """Runs ``run(setting, seed) -> dict`` for many (setting, seed) jobs in forked worker processes (one torch
    thread each), memoized: stages that share a setting run it once. ``run`` must be a module-level function and
    ``setting`` hashable (a frozen dataclass); load shared data before the first call so the workers inherit it."""

    def __init__(self, run: Callable[[Any, int], dict], workers: int = 2, cache: Path | None = None,
                 key: Callable[[tuple[Hashable, int]], str] = repr) -> None:
        self.run, self.workers, self.key = run, workers, key
        self.done: dict[tuple[Hashable, int], dict] = {}
        self.cache = None if cache is None else Path(cache)
        ctx = multiprocessing.get_context("fork")
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx) if workers > 1 else None

    def _cached(self, job: tuple[Hashable, int]) -> Path | None:
        """The file holding ``job``'s result when ``cache`` is set: keyed by ``key(job)`` (default the setting's
        repr and the seed; a script whose runs read files, e.g. configs, adds their content), so a rerun with the
        same settings reads its runs back instead of repeating them."""
        if self.cache is None:
            return None
        import hashlib

        key = hashlib.sha256(self.key(job).encode()).hexdigest()[:24]
        return self.cache / f"{key}.json"

    def many(self, jobs: Sequence[tuple[Hashable, int]]) -> list[dict]:
        import json

        for job in dict.fromkeys(jobs):
            path = self._cached(job)
            if job not in self.done and path is not None and path.is_file():
                self.done[job] = json.loads(path.read_text())
        todo = [j for j in dict.fromkeys(jobs) if j not in self.done]
        results = self.pool.map(_call, [(self.run, *j) for j in todo]) if self.pool else map(_call, [(self.run, *j) for j in todo])
        for job, result in zip(todo, results):
            self.done[job] = result
            path = self._cached(job)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(result))
                tmp.replace(path)
        return [self.done[j] for j in jobs]

    def tune(self, settings: Sequence[Hashable], score: Callable[[dict], float], seed: int = 0) -> tuple[Any, list[dict]]:
        """The setting with the largest finite ``score`` of seed ``seed``'s run, and every setting's result."""
        results = self.many([(s, seed) for s in settings])
        finite = [(s, r) for s, r in zip(settings, results) if np.isfinite(score(r))]
        if not finite:
            raise RuntimeError("every setting of the grid diverged")
        return max(finite, key=lambda sr: score(sr[1]))[0], results


def _call(job):
    run, setting, seed = job
    import torch

    torch.set_num_threads(1)
    return run(setting, seed)
