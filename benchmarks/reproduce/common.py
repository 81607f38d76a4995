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

from fccolit.sweep import Parameter, Study, TrialFailed  # noqa: E402  (the checkout's fccolit, when run from it)


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
            f"Python {platform.python_version()}, torch {torch.__version__}, CPU, 15-minute load average "
            f"{os.getloadavg()[2]:.1f} when the file was written (run times are wall-clock: above the core count, "
            "they overstate the compute)")


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
        return sample_std(self.ours)


def sample_std(values: Sequence[float]) -> float:
    """The one standard-deviation convention of the reproduction suite: the sample std (``ddof = 1``) of the finite
    values (0 for fewer than two).

    Example:
        >>> round(sample_std([1.0, 2.0, 3.0]), 6)
        1.0
    """
    vals = [v for v in values if np.isfinite(v)]
    return float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


# ------------------------------------------------------------------------------------- seeds and the verdict rule
@dataclass(frozen=True)
class SeedPlan:
    """A script's seeds: ``selection`` seeds choose every knob and rule (on validation data), ``reported`` seeds
    give the tables and verdicts; the two sets must not overlap, so no reported run takes part in a choice.

    Raises:
        ValueError: the sets overlap, or one is empty.

    Example:
        >>> SeedPlan(reported=(0, 1, 2), selection=(100, 101)).take(2)
        SeedPlan(reported=(0, 1), selection=(100, 101))
        >>> SeedPlan(reported=(0, 1), selection=(1, 2))
        Traceback (most recent call last):
        ...
        ValueError: selection seeds (1, 2) and reported seeds (0, 1) overlap in (1,): a reported run would take part in a choice
    """

    reported: tuple[int, ...]
    selection: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.reported or not self.selection:
            raise ValueError(f"a SeedPlan needs reported and selection seeds, got {self}")
        common = tuple(sorted(set(self.reported) & set(self.selection)))
        if common:
            raise ValueError(f"selection seeds {self.selection} and reported seeds {self.reported} overlap in {common}: "
                             "a reported run would take part in a choice")

    def take(self, reported: int | None = None, selection: int | None = None) -> "SeedPlan":
        """The first ``reported`` / ``selection`` seeds of each set (``--seeds N``, ``--quick``)."""
        return SeedPlan(self.reported[:reported] if reported else self.reported,
                        self.selection[:selection] if selection else self.selection)

    def describe(self) -> str:
        return (f"reported seeds {', '.join(map(str, self.reported))}; selection seeds (every knob and rule, on "
                f"validation) {', '.join(map(str, self.selection))}")


#: the rule :func:`paired_verdict` applies, quoted under every table of verdicts
VERDICT_RULE = (
    "Verdicts (one rule for every claim, `common.paired_verdict`): the per-seed paired differences d = A − B of the "
    "two methods on the same reported seeds, signed so that d > 0 is the claimed direction, and a 95 % "
    "percentile-bootstrap interval of their mean (10,000 resamples, a fixed generator). **reproduced**: the interval "
    "lies above 0; **reversed**: below 0; **not separable**: it contains 0. With 3 seeds the interval excludes 0 "
    "only when every seed agrees. Standard deviations are sample standard deviations (ddof = 1).")


@dataclass(frozen=True)
class Paired:
    """The verdict of one claim: its per-seed differences (claimed direction positive), their mean, the bootstrap
    interval ``(low, high)``, seeds ahead / behind, and ``verdict`` ∈ {reproduced, reversed, not separable}."""

    differences: tuple[float, ...]
    mean: float
    low: float
    high: float
    ahead: int
    behind: int
    verdict: str

    def text(self, digits: int = 4) -> str:
        """``"reproduced: +0.0123 [+0.0040, +0.0200], ahead on 3 of 3 seeds"``."""
        n = len(self.differences)
        return (f"{self.verdict}: {self.mean:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}], "
                f"ahead on {self.ahead} of {n} seed{'s' if n != 1 else ''}")


def verdict_table(claims: Sequence[tuple[str, Paired]], metric: str, digits: int = 4) -> list[str]:
    """Markdown rows, one per claim "A better than B": the mean paired difference, its interval, the seeds ahead,
    the verdict; followed by :data:`VERDICT_RULE`.

    Example:
        >>> print("\\n".join(verdict_table([("A > B", paired_verdict([2.0, 3.0], [1.0, 1.5]))], "AP")[:3]))
        | claim | mean paired difference, AP | 95 % bootstrap interval | seeds ahead | verdict |
        |---|---:|---:|---:|---|
        | A > B | +1.2500 | [+1.0000, +1.5000] | 2 of 2 | reproduced |
    """
    lines = [f"| claim | mean paired difference, {metric} | 95 % bootstrap interval | seeds ahead | verdict |",
             "|---|---:|---:|---:|---|"]
    for label, p in claims:
        lines.append(f"| {label} | {p.mean:+.{digits}f} | [{p.low:+.{digits}f}, {p.high:+.{digits}f}] | "
                     f"{p.ahead} of {len(p.differences)} | {p.verdict} |")
    return lines + ["", VERDICT_RULE]


def paired_verdict(a: Sequence[float], b: Sequence[float], higher_is_better: bool = True,
                   resamples: int = 10_000) -> Paired:
    """The suite's one verdict rule (:data:`VERDICT_RULE`) for the claim "A is better than B".

    Args:
        a, b: one value per reported seed, in the same seed order (paired: seed s of A against seed s of B).
        higher_is_better: the metric's direction (False for a loss, an objective, a violation).
        resamples: bootstrap resamples of the seeds.

    Raises:
        ValueError: the lengths differ, or fewer than two seeds.

    Example:
        >>> paired_verdict([0.71, 0.72, 0.73], [0.70, 0.70, 0.71]).verdict
        'reproduced'
        >>> paired_verdict([0.5, 0.5, 0.5], [0.6, 0.6, 0.61]).verdict
        'reversed'
        >>> paired_verdict([0.71, 0.69, 0.72], [0.70, 0.70, 0.70]).text()
        'not separable: +0.0067 [-0.0100, +0.0200], ahead on 2 of 3 seeds'
        >>> paired_verdict([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], higher_is_better=False).verdict
        'reproduced'
    """
    if len(a) != len(b):
        raise ValueError(f"paired_verdict needs one value per seed on both sides, got {len(a)} and {len(b)}")
    if len(a) < 2:
        raise ValueError(f"paired_verdict needs at least two seeds, got {len(a)}")
    sign = 1.0 if higher_is_better else -1.0
    d = sign * (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    rng = np.random.default_rng(0)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    low, high = (float(q) for q in np.quantile(means, [0.025, 0.975]))
    verdict = "reproduced" if low > 0 else "reversed" if high < 0 else "not separable"
    return Paired(tuple(float(x) for x in d), float(d.mean()), low, high, int((d > 0).sum()), int((d < 0).sum()),
                  verdict)


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


def write_headlines(name: str, rows: Sequence[dict[str, str]]) -> Path:
    """Write ``results/<name>.headlines.json``: the README's headline rows of this script, each a dict with the
    keys of :data:`HEADLINE_COLUMNS` (``collect.py`` writes them into README.md, so every README number comes from a
    results file)."""
    import json

    for row in rows:
        if set(row) != set(HEADLINE_COLUMNS):
            raise ValueError(f"a headline row needs exactly the keys {HEADLINE_COLUMNS}, got {sorted(row)}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.headlines.json"
    path.write_text(json.dumps(list(rows), indent=1, ensure_ascii=False) + "\n")
    return path


#: the README's headline table: column key → header
HEADLINE_COLUMNS = {"claim": "claim (paper, table)", "data": "data, reported seeds", "paper": "paper",
                    "ours": "ours", "verdict": "verdict (paired over seeds)"}


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

    def ran(self, jobs: Sequence[tuple[Hashable, int]]) -> dict[tuple[Hashable, int], dict]:
        """The results of those ``jobs`` that have run (in this process, or read back from the cache); runs nothing."""
        import json

        for job in dict.fromkeys(jobs):
            path = self._cached(job)
            if job not in self.done and path is not None and path.is_file():
                self.done[job] = json.loads(path.read_text())
        return {job: self.done[job] for job in jobs if job in self.done}

    def many(self, jobs: Sequence[tuple[Hashable, int]]) -> list[dict]:
        import json

        self.ran(jobs)
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

    def tune(self, settings: Sequence[Hashable], score: Callable[[dict], float], seeds: SeedPlan,
             metric: str = "score", rule_out: Callable[[dict], str | None] | None = None
             ) -> tuple[Any, dict[Hashable, list[dict]]]:
        """Choose among ``settings`` with the engine of ``fccolit sweep`` (:class:`fccolit.sweep.Study`, Optuna's grid
        sampler: every setting one trial): a trial runs its setting on the plan's *selection* seeds (``workers``
        trials at a time, their runs in this pool) and scores the mean of ``score`` over them; a setting with a
        non-finite score on any of them is a failed trial, out of the choice. ``score`` must read validation (or
        training) numbers only; the reported seeds never take part. ``metric`` names the score (the tables, and with
        the settings and seeds the study's folder). ``rule_out(run)``: why a run puts its setting out of the choice
        (a violated constraint), or None; given, a trial runs its seeds one after the other and fails at the first
        run ruled out, without running the later seeds.

        With ``cache`` set the study lives in ``<cache>/studies/<key>/`` (``study.db``, ``trials.csv``, ``trials.md``),
        so a stopped script resumes it: complete trials are not run again, a trial stopped while running is re-queued,
        and its runs that finished are read back from the cache. Without it the study is in a temporary folder.

        Returns:
            The chosen setting (the largest mean; among equal means the first in ``settings``) and every setting's
            runs on the selection seeds (those that ran, in seed order).

        Raises:
            RuntimeError: every setting failed (diverged, or was ruled out).
        """
        import contextlib
        import hashlib
        import tempfile

        settings = list(dict.fromkeys(settings))
        labels = setting_labels(settings)
        key = hashlib.sha256(repr((metric, labels, [repr(s) for s in settings], seeds.selection)).encode())
        scratch = (contextlib.nullcontext() if self.cache is not None
                   else tempfile.TemporaryDirectory(prefix="fccolit-tune-"))
        with scratch as temporary:
            folder = (self.cache / "studies" if self.cache is not None else Path(temporary)) / key.hexdigest()[:16]
            study = _RunnerStudy(self, folder, dict(zip(labels, settings)), score, seeds.selection, metric, rule_out)
            study.run()
            values = {t.params["setting"]: t.value for t in study.study.get_trials(deepcopy=False)
                      if t.state.name == "COMPLETE"}
        if not values:
            raise RuntimeError("every setting of the grid failed: diverged or ruled out (the trials: "
                               f"{folder / 'trials.md'})")
        best = max((label for label in labels if label in values), key=values.__getitem__)
        ran = self.ran([(s, seed) for s in settings for seed in seeds.selection])
        runs = {s: [ran[(s, seed)] for seed in seeds.selection if (s, seed) in ran] for s in settings}
        return dict(zip(labels, settings))[best], runs

    def start(self) -> None:
        """Fork the workers now (they inherit the data loaded so far): before threads that submit jobs start, so
        that no worker is forked while another thread holds a lock."""
        if self.pool is not None:
            self.pool.submit(os.getpid).result()


def setting_labels(settings: Sequence[Hashable]) -> list[str]:
    """A short label per setting, unique: for dataclasses of one type (or tuples of ``(name, value)`` pairs), the
    fields whose values differ between them (``lr=0.01, margin=1.0``); otherwise, or when those collide, the settings'
    reprs.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class S:
        ...     method: str
        ...     lr: float
        >>> setting_labels([S("SOAP", 0.1), S("SOAP", 0.01)])
        ['lr=0.1', 'lr=0.01']
        >>> setting_labels([(("method", "sox"), ("lr", 0.1)), (("method", "sox"), ("lr", 1.0))])  # a mapping's pairs
        ['lr=0.1', 'lr=1.0']
        >>> setting_labels(["a", "b"])
        ["'a'", "'b'"]
    """
    import dataclasses

    def fields(setting: Hashable) -> dict[str, Any] | None:
        if dataclasses.is_dataclass(setting):
            return {f.name: getattr(setting, f.name) for f in dataclasses.fields(setting)}
        if isinstance(setting, tuple) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                              for p in setting):
            return dict(setting)
        return None

    labels = [repr(s) for s in settings]
    mappings = [fields(s) for s in settings]
    if None not in mappings and len({type(s) for s in settings}) == 1:
        names = list(dict.fromkeys(name for m in mappings for name in m))
        varying = [n for n in names if len({repr(m.get(n)) for m in mappings}) > 1]
        short = [", ".join(f"{n}={m.get(n)!r}" for n in varying) or repr(s) for s, m in zip(settings, mappings)]
        if len(set(short)) == len(short):
            labels = short
    return labels


class _RunnerStudy(Study):
    """A :class:`fccolit.sweep.Study` over a list of settings (one categorical parameter, ``setting``, on a grid) whose
    trials run a :class:`Runner`'s function on the selection seeds."""

    def __init__(self, runner: Runner, folder: Path, settings: dict[str, Hashable], score: Callable[[dict], float],
                 seeds: Sequence[int], metric: str, rule_out: Callable[[dict], str | None] | None = None) -> None:
        super().__init__(folder, [Parameter("setting", "categorical", choices=tuple(settings))], seeds, metric,
                         "maximize", sampler="grid", jobs=runner.workers, reading="as the script scores a run",
                         title=f"{metric} of {len(settings)} setting(s) of {runner.run.__module__}.{runner.run.__name__}")
        self.runner, self.settings_by_label, self.score, self.rule_out = runner, settings, score, rule_out

    def evaluate(self, trial: Any, values: dict[str, Any]) -> dict[str, float]:
        setting = self.settings_by_label[values["setting"]]
        if self.rule_out is None:
            runs = self.runner.many([(setting, seed) for seed in self.seeds])
            return {str(seed): float(self.score(r)) for seed, r in zip(self.seeds, runs)}
        seed_values: dict[str, float] = {}
        for seed in self.seeds:
            (run,) = self.runner.many([(setting, seed)])
            seed_values[str(seed)] = float(self.score(run))
            trial.set_user_attr("seed_values", seed_values)
            why = self.rule_out(run)
            if why:
                raise TrialFailed(f"ruled out on seed {seed}: {why}")
        return seed_values

    def after_failures(self, complete: int) -> str:
        if complete:
            return " The choice is among the complete trials."
        return " No setting is left to choose: the script's fallback, if it has one, decides."

    def run(self) -> int:
        self.runner.start()
        return super().run()


def config_sweep(config: Path, space: Path, plan: SeedPlan, study_dir: Path, metric: str, fit_args: Sequence[str],
                 jobs: int = 1, reduce: str = "best", direction: str = "maximize",
                 threads: int | None = None) -> list[dict[str, str]]:
    """Choose a config's knobs the way a user does: the ``fccolit sweep`` command (Optuna, ``--sampler grid``: every
    point of ``space`` once) on the plan's *selection* seeds, validation ``metric`` only; ``fit_args`` go to every
    ``fccolit fit``. The study lives in ``study_dir`` (a rerun resumes it: finished points are not run again).
    ``threads``: each run's CPU threads (``OMP_NUM_THREADS``; by default the sweep shares the cores among its jobs,
    which oversubscribes them when several sweeps run side by side).
    Returns the rows of its ``trials.csv`` (``number``, ``state``, ``value``, ``seed_<s>``, one column per key)."""
    import csv
    import subprocess

    exe = Path(sys.executable).with_name("fccolit")
    study_dir.mkdir(parents=True, exist_ok=True)
    command = [str(exe), "sweep", "--config", str(config), "--space", str(space), "--sampler", "grid",
               "--metric", metric, "--reduce", reduce, "--direction", direction,
               "--seeds", *map(str, plan.selection), "--study-dir", str(study_dir), "--jobs", str(jobs),
               "--", *fit_args]
    # the runs' relative paths (the configs' logger save_dir) land in the study folder
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    result = subprocess.run(command, cwd=study_dir, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"fccolit sweep exited with {result.returncode}: {result.stderr[-2000:]}{result.stdout[-2000:]}")
    with (study_dir / "trials.csv").open() as file:
        return list(csv.DictReader(file))


def _call(job):
    run, setting, seed = job
    import torch

    torch.set_num_threads(1)
    return run(setting, seed)
