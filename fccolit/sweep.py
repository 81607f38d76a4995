"""``fccolit sweep``: choose a config's hyper-parameters on validation data, with Optuna.

::

    fccolit sweep --config configs/libsvm/adap.yaml --space space.yaml --trials 20 --jobs 2 \\
        --metric val/ap --direction maximize --seeds 100 101 --study-dir sweeps/adap [-- --data.root DIR]

The search space is a YAML mapping from the config's dotted keys (as ``fccolit fit --config X --print_config``
prints them) to a distribution::

    model.init_args.optimizer.init_args.lr: {type: float, low: 1e-4, high: 1e-1, log: true}
    model.init_args.ema_weight: {type: categorical, choices: [0.1, 0.5, 0.9]}
    data.init_args.batch_size: {type: int, low: 16, high: 128, step: 16}

(``float``: ``low``, ``high``, optional ``log`` or ``step``; ``int``: ``low``, ``high``, optional ``step`` or ``log``;
``categorical``: ``choices``.) An error in it names the file, the line and the field; a key that the config does not
have is found by parsing the config the way ``fccolit fit`` does.

How a trial runs. The config is parsed once, by ``fccolit fit --print_config`` (with the arguments after ``--``), and
each trial writes that resolved config with its parameters in, ``<study-dir>/trials/<number>/config.yaml``. For every
selection seed ``s`` (``--seeds``), the trial runs ``fccolit fit --config <that file> --seed_everything s`` in a new
process (the command's own entry point, :func:`fccolit.console.main`; by default forked from a server process that has
imported fccolit once, so a run does not pay the seconds of importing torch and Lightning again: ``--launch
subprocess`` starts a new interpreter instead), logging into ``trials/<number>/seed_<s>/`` (``fit.log`` holds its
output). :class:`~fccolit.callbacks.MetricHistory` records the logged metrics after every validation, and the run's
value is the ``--metric`` at its last validation (``--reduce last``, the default: the model that training ends with)
or its best validation (``--reduce best``: the model a ``best.ckpt`` selected by that metric holds; optimistic, the
maximum of noisy values). The trial's value is the mean over the selection seeds. Test data is never read: only
``fit`` runs, and a metric not named ``val...`` is refused. Choose selection seeds apart from the seeds you report.

Trials run ``--jobs`` at a time (Optuna's threads, each waiting on its own ``fit`` processes), sampled by a seeded
TPE sampler (``--sampler-seed``; reproducible with ``--jobs 1``), or, with ``--sampler grid``, one trial for every
combination of the parameters' values (each needs ``choices`` or a ``step``; ``--trials`` defaults to the grid's size;
a point whose trial failed is not run again). The study lives in Optuna's RDB storage (by default
``sqlite:///<study-dir>/study.db``; ``--storage postgresql://...`` lets several machines share one study), so a
sweep that is stopped resumes with the same command: completed trials are not run again, a trial left running by a
killed sweep on this machine (its process gone) is marked failed and re-queued with the same parameters, and one left
by another machine is after its heartbeat stops (:data:`HEARTBEAT_SECONDS`). ``--trials`` is the number of complete
trials to reach; a failed trial (a run that exits with an error or a metric that is not finite) does not count, and
the sweep stops after ``--max-failures`` of them.

Written to ``--study-dir`` after every trial: ``trials.csv`` and ``trials.md`` (one row per trial: number, state,
the mean, the value of each seed, the parameters, seconds, notes) and ``best.yaml`` (the resolved config with the best
trial's parameters, runnable as ``fccolit fit --config <study-dir>/best.yaml``). A line is printed per finished trial.

The budget: ``trials × seeds`` runs of the config, ``--jobs`` at a time on one machine (each uses the config's
``trainer.devices``; on CPU the cores are shared out between jobs unless ``OMP_NUM_THREADS`` is set).

The engine is :class:`Study` (the storage, the samplers, resuming, the tables); :class:`Sweep`, the command, is its
subclass whose trials run ``fccolit fit``. Subclass :class:`Study` and give :meth:`Study.evaluate` to tune what is not
a config (the reproduction scripts' functions do).

Akiba, Sano, Yanase, Ohta & Koyama, "Optuna: A Next-generation Hyperparameter Optimization Framework", KDD 2019,
arXiv:1907.10902. The TPE sampler: Bergstra, Bardenet, Bengio & Kégl, "Algorithms for Hyper-Parameter Optimization",
NeurIPS 2011.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import io
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Sequence

import yaml

#: what to install for ``fccolit sweep``
INSTALL_HINT = "pip install 'fccolit[sweep]'"
#: the distributions a search space may name, with the fields each takes (required, optional)
PARAMETER_FIELDS = {
    "float": ({"low", "high"}, {"log", "step"}),
    "int": ({"low", "high"}, {"log", "step"}),
    "categorical": ({"choices"}, set()),
}
REDUCTIONS = ("last", "best")
DIRECTIONS = ("maximize", "minimize")
#: a running trial records a heartbeat this often; one silent for three times as long is stale (its sweep was killed
#: on another machine) and is failed and re-queued by the next sweep process of the study
HEARTBEAT_SECONDS = 30
#: how often a trial stopped while running (a killed sweep) is re-queued before it is left failed
MAX_RETRIES = 3
_SETTINGS_ATTR = "fccolit_sweep"  # the study's user attribute holding the settings it was started with
#: the settings a resumed study must share with its start (the config is compared as fccolit fit reads it, so another
#: path to the same content, or the same overrides given another way, is the same study)
_COMPARED_SETTINGS = ("space", "metric", "direction", "reduce", "seeds", "sampler")
#: what a study started before a setting existed had (so it still resumes)
_SETTING_DEFAULTS = {"sampler": "tpe"}
SAMPLERS = ("tpe", "grid")
_CONFIG_ATTR = "fccolit_sweep_config"  # ... and the resolved config


class SweepError(Exception):
    """A sweep that cannot run as asked (a bad search space, an unknown key, a metric never logged, settings that
    differ from the stored study's): ``fccolit sweep: error: ...``, exit status 2."""


class TrialFailed(Exception):
    """One trial's run failed (a non-zero exit, a metric that is not finite): the trial is marked failed and the sweep
    goes on."""


# ------------------------------------------------------------------------------------------- the search space
class _SpaceLoader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, plus exponent floats without a dot (``1e-4``), which YAML 1.1 reads as text."""


_SpaceLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+.0123456789"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One dimension of the search space: the config key ``key`` drawn from a distribution.

    Args:
        key: the config's dotted key, e.g. ``model.init_args.optimizer.init_args.lr``.
        kind: ``float``, ``int`` or ``categorical``.
        low, high: the range of a ``float`` / ``int`` (both included).
        log: draw uniformly in log space (``float`` / ``int``; needs ``low > 0``).
        step: the grid spacing of a ``float`` / ``int`` (``low``, ``low + step``, ...).
        choices: the values of a ``categorical``.
        line: the line of ``key`` in the space file (for messages).

    Raises:
        Nothing itself: :func:`parse_space` checks the fields.

    Example:
        >>> import optuna
        >>> lr = Parameter("model.init_args.optimizer.init_args.lr", "float", low=1e-4, high=1e-1, log=True)
        >>> lr.suggest(optuna.trial.FixedTrial({"model.init_args.optimizer.init_args.lr": 0.01}))
        0.01
        >>> lr.describe()
        {'key': 'model.init_args.optimizer.init_args.lr', 'type': 'float', 'low': 0.0001, 'high': 0.1, 'log': True}
    """

    key: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    line: int = 0

    def suggest(self, trial: Any) -> Any:
        """The value of this key in ``trial`` (an ``optuna.Trial``: sampled, or the fixed value of a re-queued
        trial)."""
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(self.key, self.low, self.high, log=self.log, step=self.step or 1)
        return trial.suggest_categorical(self.key, list(self.choices))

    def grid_values(self) -> list[Any] | None:
        """Every value of this parameter on a grid (``--sampler grid``): a categorical's choices, or ``low, low + step,
        ..., high`` of a float / int with a step (an int's step is 1 unless given); None for a continuous float or a
        log-scale int (no finite set of values).

        Example:
            >>> Parameter("data.init_args.batch_size", "int", low=16, high=64, step=16).grid_values()
            [16, 32, 48, 64]
            >>> Parameter("model.init_args.ema_weight", "float", low=0.1, high=0.3, step=0.1).grid_values()
            [0.1, 0.2, 0.3]
            >>> Parameter("model.init_args.ema_weight", "float", low=0.1, high=1.0).grid_values() is None
            True
        """
        if self.kind == "categorical":
            return list(self.choices)
        if self.log or (self.kind == "float" and self.step is None):
            return None
        step = self.step or 1
        count = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        values = [self.low + i * step for i in range(count)]
        return values if self.kind == "int" else [round(v, 12) for v in values]

    def describe(self) -> dict[str, Any]:
        """The parameter as the space file states it (without the line), e.g. to compare with a stored study."""
        fields: dict[str, Any] = {"key": self.key, "type": self.kind}
        if self.kind == "categorical":
            fields["choices"] = list(self.choices)
        else:
            fields.update(low=self.low, high=self.high)
            fields.update({"log": True} if self.log else {})
            fields.update({"step": self.step} if self.step is not None else {})
        return fields


def parse_space(text: str, name: str = "<space>") -> list[Parameter]:
    """The parameters of a search space written as YAML (see the module docstring), in the file's order.

    Args:
        text: the YAML text: a mapping from dotted config keys to ``{type: ..., ...}``.
        name: the file's name, for messages.

    Returns:
        One :class:`Parameter` per key.

    Raises:
        SweepError: every problem found, one per line, each as ``<name>:<line>: <key>: <what is wrong>``: text that is
            not YAML, an empty space, an entry that is not a mapping, an unknown or missing ``type``, a missing or
            unknown field, a ``low`` above ``high`` (or not numbers, or not integers for ``int``), ``log`` with
            ``low <= 0`` or with ``step``, a ``step`` that is not positive, empty ``choices``.

    Example:
        >>> space = '''
        ... model.init_args.optimizer.init_args.lr: {type: float, low: 1e-4, high: 1e-1, log: true}
        ... data.init_args.batch_size: {type: int, low: 16, high: 128, step: 16}
        ... '''
        >>> [(p.key, p.kind, p.low, p.high, p.line) for p in parse_space(space, "space.yaml")]
        [('model.init_args.optimizer.init_args.lr', 'float', 0.0001, 0.1, 2), ('data.init_args.batch_size', 'int', 16, 128, 3)]
        >>> parse_space("lr: {type: float, low: 0.1, high: 0.01}\\nw: {type: choice, choices: [1, 2]}", "space.yaml")
        Traceback (most recent call last):
            ...
        fccolit.sweep.SweepError: space.yaml:1: lr: low (0.1) is above high (0.01)
        space.yaml:2: w: type 'choice' is not one of float, int, categorical. Did you mean 'categorical'?
    """
    loader = _SpaceLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as err:
        raise SweepError(f"{name}: not YAML: {one_line_yaml_error(err)}") from None
    finally:
        loader.dispose()
    if root is None or (isinstance(root, yaml.MappingNode) and not root.value):
        raise SweepError(f"{name}: the search space is empty: give one `key: {{type: ..., ...}}` entry per line")
    if not isinstance(root, yaml.MappingNode):
        raise SweepError(f"{name}:{root.start_mark.line + 1}: the search space must be a mapping from config keys to "
                         "distributions, e.g. `model.init_args.ema_weight: {type: float, low: 0.1, high: 1.0}`")
    problems: list[str] = []
    parameters: list[Parameter] = []
    seen: set[str] = set()
    for key_node, value_node in root.value:
        key = str(loader.construct_object(key_node, deep=True))
        line = key_node.start_mark.line + 1
        where = f"{name}:{line}: {key}"
        if key in seen:
            problems.append(f"{where}: given twice")
            continue
        seen.add(key)
        if not isinstance(value_node, yaml.MappingNode):
            problems.append(f"{where}: expected a mapping such as {{type: float, low: ..., high: ...}}, got "
                            f"{loader.construct_object(value_node, deep=True)!r}")
            continue
        fields = {str(loader.construct_object(k, deep=True)): (loader.construct_object(v, deep=True), k.start_mark.line + 1)
                  for k, v in value_node.value}
        parameter, found = _parameter(key, fields, name, line)
        problems += found
        if parameter is not None:
            parameters.append(parameter)
    if problems:
        raise SweepError("\n".join(problems))
    return parameters


def one_line_yaml_error(err: yaml.YAMLError) -> str:
    """A PyYAML error as one line (its problem and, when it has one, its line: ``line 3, column 7``)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _parameter(key: str, fields: dict[str, tuple[Any, int]], name: str, line: int) -> tuple[Parameter | None, list[str]]:
    """One entry of the space: the parameter, or None and what is wrong with it."""
    def at(field: str) -> str:
        return f"{name}:{fields[field][1] if field in fields else line}: {key}"

    if "type" not in fields:
        return None, [f"{name}:{line}: {key}: no `type` (one of {', '.join(PARAMETER_FIELDS)})"]
    kind = fields["type"][0]
    if kind not in PARAMETER_FIELDS:
        close = difflib.get_close_matches(str(kind), list(PARAMETER_FIELDS), n=1, cutoff=0.3)
        guess = f" Did you mean '{close[0]}'?" if close else ""
        return None, [f"{at('type')}: type {kind!r} is not one of {', '.join(PARAMETER_FIELDS)}.{guess}"]
    required, optional = PARAMETER_FIELDS[kind]
    problems = []
    for field in sorted(set(fields) - required - optional - {"type"}):
        allowed = sorted(required | optional)
        close = difflib.get_close_matches(field, allowed, n=1)
        guess = f" Did you mean '{close[0]}'?" if close else ""
        problems.append(f"{at(field)}: unknown field '{field}' for type {kind}.{guess} Its fields: {', '.join(allowed)}")
    problems += [f"{name}:{line}: {key}: no `{field}` (type {kind} needs {', '.join(sorted(required))})"
                 for field in sorted(required - set(fields))]
    if problems:
        return None, problems
    value = {field: fields[field][0] for field in fields}
    if kind == "categorical":
        choices = value["choices"]
        if not isinstance(choices, list) or not choices:
            return None, [f"{at('choices')}: choices must be a non-empty list, got {choices!r}"]
        bad = [c for c in choices if not (c is None or isinstance(c, (bool, int, float, str)))]
        if bad:
            return None, [f"{at('choices')}: choices must be numbers, strings, booleans or null, got {bad[0]!r}"]
        return Parameter(key, kind, choices=tuple(choices), line=line), []
    low, high, log, step = value["low"], value["high"], value.get("log", False), value.get("step")
    number = (lambda v: isinstance(v, int) and not isinstance(v, bool)) if kind == "int" else _is_number
    what = "an integer" if kind == "int" else "a number"
    for field, v in (("low", low), ("high", high)):
        if not number(v):
            problems.append(f"{at(field)}: {field} must be {what}, got {v!r}")
    if step is not None and (not number(step) or step <= 0):
        problems.append(f"{at('step')}: step must be a positive {what[2:] if kind == 'int' else 'number'}, got {step!r}")
    if not isinstance(log, bool):
        problems.append(f"{at('log')}: log must be true or false, got {log!r}")
    if problems:
        return None, problems
    if low > high:
        problems.append(f"{at('low')}: low ({low}) is above high ({high})")
    if log and low <= 0:
        problems.append(f"{at('low')}: log: true needs low > 0, got low {low}")
    if log and step is not None:
        problems.append(f"{at('step')}: give either log: true or a step, not both")
    if problems:
        return None, problems
    if kind == "float":
        low, high = float(low), float(high)
        step = float(step) if step is not None else None
    return Parameter(key, kind, low=low, high=high, log=log, step=step, line=line), []


def read_space(path: str | os.PathLike) -> list[Parameter]:
    """:func:`parse_space` of a file. Raises :class:`SweepError` naming the file when it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SweepError(f"--space {path}: {err.strerror or err}") from None
    return parse_space(text, str(path))


# ------------------------------------------------------------------------------------------- the config
def grid_space(parameters: Sequence[Parameter], space_name: str) -> dict[str, list[Any]]:
    """The grid of ``--sampler grid``: every parameter's values (:meth:`Parameter.grid_values`).

    Raises:
        SweepError: one line per parameter without a finite set of values, naming the space file and its line.

    Example:
        >>> grid = grid_space(parse_space("a: {type: categorical, choices: [1, 2]}\\nb: {type: int, low: 0, high: 2}"),
        ...                   "space.yaml")
        >>> grid, math.prod(len(v) for v in grid.values())
        ({'a': [1, 2], 'b': [0, 1, 2]}, 6)
        >>> grid_space(parse_space("lr: {type: float, low: 1e-4, high: 1e-1, log: true}"), "space.yaml")
        Traceback (most recent call last):
            ...
        fccolit.sweep.SweepError: space.yaml:1: lr: --sampler grid needs a finite set of values: give choices (type: categorical) or a step (without log: true)
    """
    problems = [f"{space_name}:{p.line}: {p.key}: --sampler grid needs a finite set of values: give choices (type: "
                "categorical) or a step (without log: true)" for p in parameters if p.grid_values() is None]
    if problems:
        raise SweepError("\n".join(problems))
    return {p.key: p.grid_values() for p in parameters}


def dotted_keys(config: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a nested mapping, dotted (``model.init_args.lr``); lists are not entered.

    Example:
        >>> dotted_keys({"model": {"init_args": {"lr": 0.1, "hidden": [64, 32]}}, "seed_everything": 0})
        ['model', 'model.init_args', 'model.init_args.lr', 'model.init_args.hidden', 'seed_everything']
    """
    keys = []
    for key, value in config.items():
        keys.append(prefix + str(key))
        if isinstance(value, dict):
            keys += dotted_keys(value, prefix + str(key) + ".")
    return keys


def _lookup(config: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def check_keys(parameters: Sequence[Parameter], config: dict[str, Any], space_name: str, config_name: str) -> None:
    """Refuse space keys that the resolved config does not have.

    Args:
        parameters: the search space.
        config: the config as ``fccolit fit --print_config`` prints it (every key, defaults included).
        space_name, config_name: the files, for messages.

    Raises:
        SweepError: one line per unknown key, ``<space>:<line>: <key>: not a key of <config> ...``, with the closest
            key of the config.

    Example:
        >>> config = {"model": {"init_args": {"ema_weight": 0.1}}}
        >>> check_keys([Parameter("model.init_args.ema_weight", "float", low=0.1, high=0.9)], config, "s.yaml", "c.yaml")
        >>> check_keys([Parameter("model.init_args.emma_weight", "float", low=0.1, high=0.9, line=2)], config,
        ...            "s.yaml", "c.yaml")
        Traceback (most recent call last):
            ...
        fccolit.sweep.SweepError: s.yaml:2: model.init_args.emma_weight: not a key of c.yaml as `fccolit fit` reads it. Did you mean 'model.init_args.ema_weight'? (fccolit fit --config c.yaml --print_config lists its keys)
    """
    problems = []
    keys = dotted_keys(config)
    for parameter in parameters:
        if _lookup(config, parameter.key)[0]:
            continue
        close = difflib.get_close_matches(parameter.key, keys, n=1, cutoff=0.6)
        guess = f" Did you mean '{close[0]}'?" if close else ""
        problems.append(f"{space_name}:{parameter.line}: {parameter.key}: not a key of {config_name} as `fccolit fit` "
                        f"reads it.{guess} (fccolit fit --config {config_name} --print_config lists its keys)")
    if problems:
        raise SweepError("\n".join(problems))


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two configs (added and removed keys included), sorted.

    Example:
        >>> changed_keys({"model": {"lr": 0.1, "ema": 0.9}}, {"model": {"lr": 0.2, "ema": 0.9}, "seed": 1})
        ['model.lr', 'seed']
    """
    keys = sorted(set(dotted_keys(before)) | set(dotted_keys(after)))
    return [key for key in keys if _lookup(before, key) != _lookup(after, key)
            and not isinstance(_lookup(before, key)[1], dict) and not isinstance(_lookup(after, key)[1], dict)]


def with_values(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with each dotted key of ``values`` set (the keys exist: :func:`check_keys`).

    Example:
        >>> config = {"model": {"init_args": {"lr": 0.1, "ema_weight": 0.9}}}
        >>> with_values(config, {"model.init_args.lr": 0.01})
        {'model': {'init_args': {'lr': 0.01, 'ema_weight': 0.9}}}
        >>> config["model"]["init_args"]["lr"]
        0.1
    """
    result = json.loads(json.dumps(config))
    for key, value in values.items():
        *parents, last = key.split(".")
        node = result
        for part in parents:
            node = node[part]
        node[last] = value
    return result


# ------------------------------------------------------------------------------------------- the metric
def check_metric(metric: str) -> None:
    """Refuse a selection metric that is not a validation metric (its name must start with ``val``), so that a
    sweep never selects on test data.

    Raises:
        SweepError: ``metric`` does not start with ``val``.

    Example:
        >>> check_metric("val/ap")
        >>> check_metric("test/ap")
        Traceback (most recent call last):
            ...
        fccolit.sweep.SweepError: --metric test/ap: a sweep selects on validation data only; give a metric logged on validation (its name starts with 'val', e.g. val/ap)
    """
    if not metric.startswith("val"):
        raise SweepError(f"--metric {metric}: a sweep selects on validation data only; give a metric logged on "
                         "validation (its name starts with 'val', e.g. val/ap)")


def read_history(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines that :class:`~fccolit.callbacks.MetricHistory` wrote (none when the run never validated)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def selection_value(history: Sequence[dict[str, Any]], metric: str, reduce: str, direction: str) -> float:
    """A run's value of ``metric``: at its last validation (``reduce="last"``) or its best (``"best"``: the largest
    for ``direction="maximize"``, the smallest for ``"minimize"``, over the finite values).

    Args:
        history: the run's :class:`~fccolit.callbacks.MetricHistory` lines, in order.
        metric, reduce, direction: as ``fccolit sweep``'s options.

    Raises:
        SweepError: no validation logged ``metric`` (the message lists the metrics that were logged).
        TrialFailed: the value is not finite (the run diverged).

    Example:
        >>> history = [{"step": 10, "metrics": {"val/ap": 0.5}}, {"step": 20, "metrics": {"val/ap": 0.7}},
        ...            {"step": 30, "metrics": {"val/ap": 0.6}}]
        >>> selection_value(history, "val/ap", "last", "maximize"), selection_value(history, "val/ap", "best", "maximize")
        (0.6, 0.7)
        >>> selection_value(history, "val/ndcg", "last", "maximize")
        Traceback (most recent call last):
            ...
        fccolit.sweep.SweepError: --metric val/ndcg: the run never logged it; it logged val/ap
    """
    values = [(line["step"], line["metrics"][metric]) for line in history if metric in line["metrics"]]
    if not values:
        if not history:
            raise SweepError(f"--metric {metric}: the run never validated (check trainer.limit_val_batches, "
                             "val_check_interval, max_steps)")
        logged = sorted({name for line in history for name in line["metrics"]})
        raise SweepError(f"--metric {metric}: the run never logged it; it logged {', '.join(logged)}")
    if reduce == "last":
        step, value = values[-1]
        if not math.isfinite(value):
            raise TrialFailed(f"{metric} is {value} at step {step} (the run diverged)")
        return value
    finite = [value for _, value in values if math.isfinite(value)]
    if not finite:
        raise TrialFailed(f"{metric} is not finite at any validation (the run diverged)")
    return max(finite) if direction == "maximize" else min(finite)


# ------------------------------------------------------------------------------------------- running fccolit
def _fccolit_in_this_process(argv: list[str], log_path: str, stderr_path: str | None, cwd: str,
                             threads: int | None) -> None:
    """The body of a forked run: ``fccolit <argv>`` with stdout in ``log_path``, stderr too unless ``stderr_path``."""
    for fd, path in ((1, log_path), (2, stderr_path or log_path)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if fd == 2 and path == log_path else os.O_TRUNC),
                         0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(cwd)
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import torch

        torch.set_num_threads(threads)
    sys.argv = ["fccolit", *argv]
    from fccolit.console import main

    main()


class FitLauncher:
    """Runs ``fccolit <args>`` in new processes, output to a log file, and stops them all on request.

    Args:
        method: ``forkserver``: fork each run from a server process that imported :mod:`fccolit.cli` once (a run
            starts in a fraction of a second instead of the seconds of importing torch and Lightning);
            ``subprocess``: a new ``python -m fccolit`` each time.
        threads: each run's CPU threads (``OMP_NUM_THREADS`` and ``torch.set_num_threads``); None leaves the default.

    Raises:
        ValueError: an unknown ``method``, or ``forkserver`` where the platform has none (Windows).

    As with any start method but ``fork``, a script that runs it with ``forkserver`` needs the
    ``if __name__ == "__main__":`` guard (each run imports the script's main module again); the ``fccolit`` command has it.

    Example:
        >>> import sys, tempfile
        >>> from pathlib import Path
        >>> log = Path(tempfile.mkdtemp()) / "version.log"
        >>> FitLauncher("subprocess").run(["--version"], log)
        0
        >>> log.read_text().startswith("fccolit ")
        True
    """

    def __init__(self, method: str = "forkserver", threads: int | None = None) -> None:
        if method not in ("forkserver", "subprocess"):
            raise ValueError(f"launch method {method!r}: forkserver or subprocess")
        if method == "forkserver":
            if "forkserver" not in multiprocessing.get_all_start_methods():
                raise ValueError("--launch forkserver: this platform has no forkserver; use --launch subprocess")
            self._context = multiprocessing.get_context("forkserver")
            self._context.set_forkserver_preload(["fccolit.cli"])
        self.method = method
        self.threads = threads
        self._running: set[Any] = set()
        self._lock = threading.RLock()  # re-entrant: a signal handler in the thread that holds it calls terminate_all

    def run(self, argv: list[str], log_path: str | os.PathLike, cwd: str | os.PathLike | None = None,
            stderr_path: str | os.PathLike | None = None) -> int:
        """Run ``fccolit <argv>`` in ``cwd`` (default: this process's) to its end, its output in ``log_path`` (its
        stderr in ``stderr_path`` when given); returns its exit status (negative: the signal that ended it)."""
        cwd = str(cwd or os.getcwd())
        log_path = str(log_path)
        stderr_path = str(stderr_path) if stderr_path is not None else None
        if self.method == "forkserver":
            process = self._context.Process(target=_fccolit_in_this_process,
                                            args=(argv, log_path, stderr_path, cwd, self.threads), daemon=False)
            with self._lock:
                process.start()
                self._running.add(process)
            process.join()
            code = process.exitcode
        else:
            env = dict(os.environ, **({"OMP_NUM_THREADS": str(self.threads)} if self.threads is not None else {}))
            with open(log_path, "w") as log, open(stderr_path or os.devnull, "w") as errors, self._lock:
                process = subprocess.Popen([sys.executable, "-m", "fccolit", *argv], stdout=log,
                                           stderr=errors if stderr_path else subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, cwd=cwd, env=env)
                self._running.add(process)
            code = process.wait()
        with self._lock:
            self._running.discard(process)
        return code

    def terminate_all(self, timeout: float = 60.0) -> None:
        """SIGTERM to every running run (Lightning writes ``last.ckpt`` and exits), then wait up to ``timeout`` s."""
        with self._lock:
            running = list(self._running)
        for process in running:
            process.terminate()
        for process in running:
            if isinstance(process, subprocess.Popen):
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
            else:
                process.join(timeout)
                if process.exitcode is None:
                    process.kill()


def last_error_line(log_path: str | os.PathLike) -> str:
    """What a failed run said: its ``fccolit: error: ...`` line, else the last line of its traceback or output.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> log = Path(tempfile.mkdtemp()) / "fit.log"
        >>> _ = log.write_text("Seed set to 0\\nTraceback (most recent call last):\\n  ...\\nFloatingPointError: non-finite\\n")
        >>> last_error_line(log)
        'FloatingPointError: non-finite'
    """
    try:
        lines = [line.strip() for line in Path(log_path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    errors = [line for line in lines if line.startswith("fccolit: error:")]
    return (errors or lines or ["(no output)"])[-1][:500]


# ------------------------------------------------------------------------------------------- the tables
def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def trial_rows(trials: Sequence[Any], parameters: Sequence[Parameter], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per trial for ``trials.csv`` / ``trials.md``: number, state, value (the mean over the seeds), each
    seed's value, each parameter, seconds, start time and a note (the error of a failed trial, the retry of a stopped
    one)."""
    retried_as = {trial.system_attrs["retry_history"][-1]: trial.number for trial in trials
                  if trial.system_attrs.get("retry_history")}  # a stopped trial -> the trial that reran it
    rows = []
    for trial in sorted(trials, key=lambda t: t.number):
        seed_values = trial.user_attrs.get("seed_values", {})
        seconds = ((trial.datetime_complete - trial.datetime_start).total_seconds()
                   if trial.datetime_complete and trial.datetime_start else None)
        notes = []
        if "failed_trial" in trial.system_attrs:
            notes.append(f"retry of trial {trial.system_attrs['retry_history'][-1]}")
        if trial.number in retried_as:
            notes.append(f"stopped while running; re-queued as trial {retried_as[trial.number]}")
        elif trial.user_attrs.get("error"):
            notes.append(trial.user_attrs["error"])
        row: dict[str, Any] = {"number": trial.number, "state": trial.state.name, "value": trial.value}
        row.update({f"seed_{seed}": seed_values.get(str(seed)) for seed in seeds})
        row.update({p.key: trial.params.get(p.key) for p in parameters})
        row.update(seconds=round(seconds, 1) if seconds is not None else None,
                   started=trial.datetime_start.isoformat(timespec="seconds") if trial.datetime_start else None,
                   note="; ".join(notes))
        rows.append(row)
    return rows


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_tables(rows: list[dict[str, Any]], folder: Path, heading: str, best_number: int | None) -> None:
    """``trials.csv`` and ``trials.md`` in ``folder`` (written whole, then renamed into place)."""
    if not rows:
        return
    columns = list(rows[0])
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    _write_atomically(folder / "trials.csv", buffer.getvalue())
    lines = [heading, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [_format(row[c]).replace("|", "\\|") for c in columns]
        if row["number"] == best_number:
            cells[0] = f"**{cells[0]}** (best)"
        lines.append("| " + " | ".join(cells) + " |")
    _write_atomically(folder / "trials.md", "\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------- the sweep
def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def requeue(study: Any, trial: Any) -> None:
    """Queue a trial that was stopped while running (its sweep killed) again, with the same parameters, unless it
    was retried :data:`MAX_RETRIES` times already; the new trial's system attributes name the original
    (``failed_trial``, ``retry_history``, as Optuna's own retry callback writes them; and, under ``--sampler grid``, the
    grid point it stands for, so the grid sampler does not assign it another)."""
    import optuna

    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > MAX_RETRIES:
        return
    grid_point = {key: trial.system_attrs[key] for key in ("grid_id", "search_space") if key in trial.system_attrs}
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.WAITING, params=trial.params, distributions=trial.distributions,
        system_attrs={"failed_trial": history[0], "retry_history": history, **grid_point}))


class Study:
    """The engine of ``fccolit sweep`` for trials of any kind: an Optuna study in RDB storage whose trials each draw
    the parameters' values, score them once per selection seed and take the mean (see the module docstring: the
    samplers, resuming after a kill, the tables). A subclass says what one trial runs (:meth:`evaluate`);
    :class:`Sweep` runs ``fccolit fit`` on a config. A script whose runs are Python functions uses it too (the
    reproduction suite's ``Runner.tune``), so its choices live in a study that a stopped run resumes.

    Args:
        folder: the study folder (the SQLite storage by default, ``trials.csv``, ``trials.md``).
        parameters: the search space.
        seeds: the selection seeds; a trial's value is the mean of its values on them.
        metric: the selection metric's name (for the tables and messages).
        direction: ``maximize`` or ``minimize``.
        trials: complete trials to reach (None: the grid's size under ``sampler="grid"``; required under ``tpe``).
        jobs: trials run at a time (Optuna's threads).
        sampler, sampler_seed: ``tpe`` or ``grid``, and its seed.
        storage: an Optuna RDB storage URL (default ``sqlite:///<folder>/study.db``).
        study_name: the study's name in the storage (default: the folder's name).
        max_failures: stop after this many failed trials (default: ``trials``).
        reduce: how a run's value is read (recorded and compared on resume; ``last`` or ``best``).
        reading: how a run's value is read, in words, for the tables and progress lines (default: ``"<reduce>
            validation"``).
        title: what the tables' heading names (a config, a script).
        space_name: where the space came from (for messages).
        out: where the progress lines go (default stdout).

    Raises:
        SweepError: under ``grid``, a parameter without a finite set of values, or more ``trials`` than points; under
            ``tpe``, no ``trials``.

    Example:
        A function of one parameter, every point of its grid once, in a new folder (its progress lines kept aside):

        >>> import io, tempfile
        >>> class Quadratic(Study):
        ...     def evaluate(self, trial, values):
        ...         return {str(seed): seed / 1000 - (values["x"] - 2) ** 2 for seed in self.seeds}
        >>> study = Quadratic(tempfile.mkdtemp(), parse_space("x: {type: int, low: 0, high: 4}"), [0, 1], "score",
        ...                   "maximize", sampler="grid", out=io.StringIO())
        >>> study.run(), study.study.best_params, len(study.study.trials)
        (0, {'x': 2}, 5)
    """

    def __init__(self, folder: str | os.PathLike, parameters: list[Parameter], seeds: Sequence[int], metric: str,
                 direction: str, *, trials: int | None = None, jobs: int = 1, sampler: str = "tpe",
                 sampler_seed: int = 0, storage: str | None = None, study_name: str | None = None,
                 max_failures: int | None = None, reduce: str = "last", reading: str | None = None, title: str = "",
                 space_name: str = "<space>", out: Any = None) -> None:
        #: the grid of ``sampler="grid"`` (key -> values), None under TPE
        self.grid = grid_space(parameters, space_name) if sampler == "grid" else None
        if self.grid is not None:
            points = math.prod(len(values) for values in self.grid.values())
            if trials is None:
                trials = points
            elif trials > points:
                raise SweepError(f"--trials {trials}: the grid of {space_name} has {points} point(s); give at most "
                                 f"{points}, or leave --trials out to run them all")
        elif trials is None:
            raise SweepError("--trials is required with --sampler tpe (the number of complete trials to reach)")
        self.trials, self.max_failures = trials, max_failures or trials
        self.folder = Path(folder)
        self.parameters, self.seeds, self.metric, self.direction = parameters, list(seeds), metric, direction
        self.jobs, self.sampler, self.sampler_seed, self.reduce = jobs, sampler, sampler_seed, reduce
        self.storage, self.study_name, self.title = storage, study_name, title
        self.reading = reading or f"{reduce} validation"
        self.out = out or sys.stdout
        self.host = socket.gethostname()
        self.failures: list[str] = []
        self.fatal: BaseException | None = None
        self._lock = threading.Lock()

    def say(self, line: str) -> None:
        with self._lock:
            print(line, file=self.out, flush=True)

    # -- what a subclass gives
    def evaluate(self, trial: Any, values: dict[str, Any]) -> dict[str, float]:
        """One trial's value on each selection seed (``str(seed) -> value``), for the parameters' ``values``.
        Raise :class:`TrialFailed` for a run that failed (the sweep goes on) and :class:`SweepError` for a problem
        that every trial would meet (the sweep stops)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Before the study opens (after its stored settings are checked): read and check what the trials need."""

    def check_resumed(self, study: Any, name: str) -> None:
        """On resuming ``study``: refuse when what its trials run has changed since it started."""

    def record_start(self, study: Any) -> None:
        """On starting ``study``: store what :meth:`check_resumed` compares later."""

    def write_best(self, study: Any, best: Any, complete: int) -> None:
        """After each trial, once one is complete: outputs for the best trial besides the tables."""

    def outputs(self) -> str:
        """What :meth:`write_outputs` writes, for the last line."""
        return f"{self.folder / 'trials.csv'} and trials.md"

    def stop_runs(self) -> None:
        """Stop the runs in progress (a fatal error, a signal)."""

    def after_failures(self, complete: int) -> str:
        """What the last line adds when the study stops short of its trials with ``complete`` of them complete (what
        to do next)."""
        return ""

    # -- settings
    def settings(self) -> dict[str, Any]:
        """What the study is started with (stored in it; see :data:`_COMPARED_SETTINGS`)."""
        return {"space": [p.describe() for p in self.parameters], "metric": self.metric, "direction": self.direction,
                "reduce": self.reduce, "seeds": self.seeds, "sampler": self.sampler}

    def storage_url(self) -> str:
        """``storage``, or the SQLite file ``<folder>/study.db``."""
        return self.storage or f"sqlite:///{(self.folder / 'study.db').resolve()}"

    def open_storage(self) -> Any:
        """Optuna's RDB storage with heartbeats: a trial whose sweep died elsewhere is failed and re-queued."""
        import optuna

        url = self.storage_url()
        engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                                              grace_period=3 * HEARTBEAT_SECONDS, heartbeat_stale_trial_callback=requeue)

    def check_same_settings(self, stored: dict[str, Any], name: str) -> None:
        """Refuse to resume a study with other settings than it was started with."""
        mine = self.settings()
        different = [key for key in _COMPARED_SETTINGS if stored.get(key, _SETTING_DEFAULTS.get(key)) != mine[key]]
        if different:
            lines = [f"  {key}: the study has {stored.get(key, _SETTING_DEFAULTS.get(key))!r}, this command "
                     f"{mine[key]!r}" for key in different]
            raise SweepError(f"the study '{name}' in {self.storage_url()} was started with other settings; resume it "
                             "with the same ones, or start a new study (another --study-dir or --study-name):\n"
                             + "\n".join(lines))

    # -- one trial
    def objective(self, trial: Any) -> float:
        """One trial (Optuna's objective): the parameters drawn, :meth:`evaluate`, the mean of the seeds' values."""
        trial.set_user_attr("worker", f"{self.host}:{os.getpid()}")
        values = {p.key: p.suggest(trial) for p in self.parameters}
        try:
            seed_values = self.evaluate(trial, values)
            trial.set_user_attr("seed_values", seed_values)
            bad = {seed: value for seed, value in seed_values.items() if not math.isfinite(value)}
            if bad:
                raise TrialFailed("; ".join(f"seed {seed}: {self.metric} is {value} (the run diverged)"
                                            for seed, value in bad.items()))
        except TrialFailed as err:
            trial.set_user_attr("error", str(err))
            raise
        except SweepError as err:
            self.fatal = err
            self.stop_runs()
            raise
        return sum(seed_values.values()) / len(seed_values)

    # -- after each trial
    def finished(self, study: Any, trial: Any) -> None:
        """After each trial (Optuna's callback): the progress line, the outputs, and a stop at the count."""
        from optuna.trial import TrialState

        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        short = [p.key.rsplit(".", 1)[-1] for p in self.parameters]
        names = short if len(set(short)) == len(short) else [p.key for p in self.parameters]
        params = ", ".join(f"{name}={_format(trial.params.get(p.key))}" for name, p in zip(names, self.parameters))
        seconds = (trial.datetime_complete - trial.datetime_start).total_seconds()
        if trial.state == TrialState.COMPLETE:
            seeds = ", ".join(f"{s} {_format(v)}" for s, v in trial.user_attrs.get("seed_values", {}).items())
            best = study.best_trial
            self.say(f"trial {trial.number} ({len(complete)}/{self.trials} complete): {self.metric} "
                     f"{_format(trial.value)} ({self.reading}; seeds {seeds}), {seconds:.1f} s, {params} | best: "
                     f"trial {best.number}, {_format(best.value)}")
        else:
            error = trial.user_attrs.get("error", "failed")
            self.failures.append(f"trial {trial.number}: {error}")
            self.say(f"trial {trial.number} failed after {seconds:.1f} s: {error} ({params})")
        self.write_outputs(study)
        if len(complete) >= self.trials or len(self.failures) >= self.max_failures:
            study.stop()

    def write_outputs(self, study: Any) -> None:
        """``trials.csv``, ``trials.md`` and (once a trial is complete) :meth:`write_best`'s outputs."""
        from optuna.trial import TrialState

        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        best = study.best_trial if complete else None
        heading = (f"# fccolit sweep: {self.title}\n\n{len(complete)} complete of {self.trials} trials; "
                   f"{self.metric} ({self.reading}, mean over seeds {', '.join(map(str, self.seeds))}), "
                   f"{self.direction}; study '{study.study_name}' in {self.storage_url()}")
        with self._lock:
            write_tables(trial_rows(trials, self.parameters, self.seeds), self.folder, heading,
                         best.number if best else None)
            if best is not None:
                self.write_best(study, best, len(complete))

    def grid_points_left(self, study: Any) -> int:
        """Under ``sampler="grid"``, the points that no finished trial stands for (a failed trial re-queued after a
        kill stands for none until it runs again); otherwise a number no sweep reaches."""
        if self.grid is None:
            return sys.maxsize
        from optuna.trial import TrialState

        trials = study.get_trials(deepcopy=False)
        finished = {t.system_attrs.get("grid_id") for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)}
        queued = {t.system_attrs.get("grid_id") for t in trials if t.state == TrialState.WAITING}
        return math.prod(len(values) for values in self.grid.values()) - len((finished - queued) - {None})

    def requeue_stopped(self, study: Any) -> list[int]:
        """Fail and re-queue the trials left running by a killed sweep on this machine (their process is gone), and
        those of other machines whose heartbeat stopped."""
        import optuna
        from optuna.trial import TrialState

        stopped = []
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
            if host == self.host and pid.isdigit() and (int(pid) == os.getpid() or not _process_alive(int(pid))):
                study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
                requeue(study, _trial(study, trial.number))
                stopped.append(trial.number)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
            optuna.storages.fail_stale_trials(study)
            stopped += sorted({t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))} - before)
        return stopped

    def open_study(self) -> Any:
        """The study, started or resumed: its stored settings checked, :meth:`prepare` run, trials left running by a
        killed sweep re-queued, the sampler set."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)  # a line per trial comes from finished()
        name = self.study_name or self.folder.resolve().name
        url = self.storage_url()
        storage = None
        if self.storage or Path(url.removeprefix("sqlite:///")).is_file():
            storage = self.open_storage()
            if name in optuna.study.get_all_study_names(storage):
                stored = optuna.load_study(study_name=name, storage=storage).user_attrs
                self.check_same_settings(stored.get(_SETTINGS_ATTR, {}), name)
        self.prepare()
        self.folder.mkdir(parents=True, exist_ok=True)
        storage = storage or self.open_storage()
        existing = name in optuna.study.get_all_study_names(storage)
        study = optuna.create_study(study_name=name, storage=storage, direction=self.direction, load_if_exists=True)
        if existing:
            self.check_resumed(study, name)
        else:
            study.set_user_attr(_SETTINGS_ATTR, self.settings())
            self.record_start(study)
        self.stopped = self.requeue_stopped(study)
        if self.grid is not None:
            # one fixed seed: the grid's order, by which a trial number is mapped to a point, is the same on resume
            study.sampler = optuna.samplers.GridSampler(self.grid, seed=self.sampler_seed)
        else:
            # seeded by the history's length too: a resumed study does not draw the first run's points again
            study.sampler = optuna.samplers.TPESampler(seed=self.sampler_seed + len(study.get_trials(deepcopy=False)))
        return study

    def run(self) -> int:
        """Run the study until ``trials`` trials are complete; returns the exit status (0, or 1 after
        ``max_failures`` failed trials). The study is :attr:`study` afterwards."""
        from optuna.trial import TrialState

        self.study = study = self.open_study()
        complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        self.say(f"fccolit sweep: study '{study.study_name}' in {self.storage_url()}: {complete} of {self.trials} trials "
                 "complete" + (f"; re-queued trial(s) {', '.join(map(str, self.stopped))}, stopped while running"
                               if self.stopped else "")
                 + f"; {self.metric} ({self.reading}, {self.direction}), mean over seeds "
                 + f"{', '.join(map(str, self.seeds))}; {self.jobs} job(s)")
        try:
            while complete < self.trials and len(self.failures) < self.max_failures:
                remaining = min(self.trials - complete, self.grid_points_left(study))
                if remaining == 0:  # the grid is run: each point complete or failed
                    break
                study.optimize(self.objective, n_trials=remaining, n_jobs=min(self.jobs, remaining),
                               catch=(TrialFailed,), callbacks=[self.finished])
                if self.fatal is not None:
                    raise self.fatal
                complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        finally:
            self.write_outputs(study)
        if complete < self.trials:
            failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            last = self.failures[-1] if self.failures else (
                f"trial {failed[-1].number}: {failed[-1].user_attrs.get('error', 'failed')}" if failed else "")
            self.say(f"fccolit sweep: stopped after {len(self.failures) or len(failed)} failed trials ({complete} of "
                     f"{self.trials} complete); the last: {last}.{self.after_failures(complete)}")
            return 1
        best = study.best_trial
        self.say(f"fccolit sweep: {complete} trial(s) complete; best: trial {best.number}, {self.metric} "
                 f"{_format(best.value)}; wrote {self.outputs()}")
        return 0


class Sweep(Study):
    """One ``fccolit sweep`` command: a :class:`Study` whose trials run ``fccolit fit`` on a config (see the module
    docstring).

    Args:
        args: the parsed options of :func:`build_parser`.
        parameters: the search space.
        fit_args: arguments for every ``fccolit fit`` (those after ``--``).
        out: where the progress lines go.

    Raises:
        SweepError: from :meth:`run`: a config that does not parse, a key it does not have, settings that differ from
            the stored study's, a metric never logged.
        ValueError: ``--launch forkserver`` where the platform has none.

    Example:
        Nothing runs until :meth:`run`; the study's default storage and the settings a resumed study must share:

        >>> args = build_parser().parse_args(["--config", "quickstart", "--space", "space.yaml", "--trials", "20",
        ...                                   "--metric", "val/ap", "--direction", "maximize", "--seeds", "100", "101",
        ...                                   "--study-dir", "/tmp/sweeps/quickstart"])
        >>> sweep = Sweep(args, parse_space("model.init_args.ema_weight: {type: float, low: 0.1, high: 1.0}"), [])
        >>> sweep.storage_url()
        'sqlite:////tmp/sweeps/quickstart/study.db'
        >>> sweep.settings()  # doctest: +NORMALIZE_WHITESPACE
        {'config': 'quickstart', 'fit_args': [], 'space': [{'key': 'model.init_args.ema_weight', 'type': 'float',
         'low': 0.1, 'high': 1.0}], 'metric': 'val/ap', 'direction': 'maximize', 'reduce': 'last', 'seeds': [100, 101],
         'sampler': 'tpe'}
    """

    def __init__(self, args: argparse.Namespace, parameters: list[Parameter], fit_args: list[str], out: Any = None) -> None:
        super().__init__(args.study_dir, parameters, args.seeds, args.metric, args.direction, trials=args.trials,
                         jobs=args.jobs, sampler=args.sampler, sampler_seed=args.sampler_seed, storage=args.storage,
                         study_name=args.study_name, max_failures=args.max_failures, reduce=args.reduce,
                         title=args.config, space_name=args.space, out=out)
        self.args = args
        self.fit_args = fit_args
        self.config: dict[str, Any] = {}  # the resolved config, read by prepare()
        threads = None
        if "OMP_NUM_THREADS" not in os.environ:
            threads = max(1, (os.cpu_count() or 1) // args.jobs)
        self.launcher = FitLauncher(args.launch, threads)

    def settings(self) -> dict[str, Any]:
        return {"config": self.args.config, "fit_args": self.fit_args, **super().settings()}

    def resolved_config(self) -> dict[str, Any]:
        """The config as ``fccolit fit`` reads it (with the arguments after ``--``), by ``--print_config``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        printed, log = self.folder / "config.printed.yaml", self.folder / "config.log"
        code = self.launcher.run(["fit", "--config", self.args.config, *self.fit_args, "--print_config"], printed,
                                 stderr_path=log)
        if code != 0:
            raise SweepError(f"--config {self.args.config}: `fccolit fit` cannot read it: {last_error_line(log)} "
                             f"(log: {log})")
        config = yaml.safe_load(printed.read_text())
        printed.unlink()
        log.unlink()
        return config

    def prepare(self) -> None:
        self.config = self.resolved_config()
        check_keys(self.parameters, self.config, self.args.space, self.args.config)

    def check_resumed(self, study: Any, name: str) -> None:
        changed = changed_keys(study.user_attrs.get(_CONFIG_ATTR) or {}, self.config)
        if changed:
            raise SweepError(f"--config {self.args.config}: it reads differently from when the study '{name}' started "
                             f"(changed: {', '.join(changed[:8])}); resume with the same config, or start a new "
                             "study (another --study-dir or --study-name)")

    def record_start(self, study: Any) -> None:
        study.set_user_attr(_CONFIG_ATTR, self.config)

    def stop_runs(self) -> None:
        self.launcher.terminate_all()

    def evaluate(self, trial: Any, values: dict[str, Any]) -> dict[str, float]:
        """``fccolit fit`` per selection seed on the config with ``values`` in (written to
        ``<study-dir>/trials/<number>/config.yaml``); each run's value read from its metric history."""
        folder = self.folder / "trials" / str(trial.number)
        folder.mkdir(parents=True, exist_ok=True)
        config_path = folder / "config.yaml"
        config_path.write_text(yaml.safe_dump(with_values(self.config, values), sort_keys=False))
        seed_values: dict[str, float] = {}
        for seed in self.seeds:
            run = folder / f"seed_{seed}"
            if run.exists():
                shutil.rmtree(run)
            run.mkdir()
            history = run / "history.jsonl"
            argv = ["fit", "--config", str(config_path), "--seed_everything", str(seed),
                    "--trainer.default_root_dir", str(run),
                    "--trainer.callbacks+=fccolit.callbacks.MetricHistory", "--trainer.callbacks.path", str(history)]
            code = self.launcher.run(argv, run / "fit.log")
            if code != 0:
                raise TrialFailed(f"seed {seed}: fccolit fit exited with status {code}: "
                                  f"{last_error_line(run / 'fit.log')} (log: {run / 'fit.log'})")
            seed_values[str(seed)] = selection_value(read_history(history), self.metric, self.reduce, self.direction)
            trial.set_user_attr("seed_values", seed_values)
            if not self.args.keep_checkpoints:
                for checkpoint in run.rglob("*.ckpt"):
                    checkpoint.unlink()
        return seed_values

    def write_best(self, study: Any, best: Any, complete: int) -> None:
        """``best.yaml``: the resolved config with the best trial's parameters, runnable by ``fccolit fit``."""
        values = {p.key: best.params[p.key] for p in self.parameters}
        header = [
            f"# fccolit sweep: {self.args.config} with trial {best.number}'s parameters, the best of "
            f"{complete} complete trials",
            f"# ({self.metric}, {self.reduce} validation value, mean over seeds "
            f"{', '.join(map(str, self.seeds))} = {_format(best.value)}; {self.direction}):",
            *(f"#   {key}: {_format(value)}" for key, value in values.items()),
            f"# Run it: fccolit fit --config {self.folder / 'best.yaml'}",
        ]
        _write_atomically(self.folder / "best.yaml", "\n".join(header) + "\n"
                          + yaml.safe_dump(with_values(self.config, values), sort_keys=False))

    def after_failures(self, complete: int) -> str:
        return (" Fix the config or the space and rerun to continue"
                + (" (a grid point that failed is not run again: start a new study)." if self.grid else "."))

    def outputs(self) -> str:
        return (f"{self.folder / 'trials.csv'}, trials.md and best.yaml "
                f"(fccolit fit --config {self.folder / 'best.yaml'})")


def _trial(study: Any, number: int) -> Any:
    """The frozen trial ``number`` of ``study``."""
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


# ------------------------------------------------------------------------------------------- the command
def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The options of ``fccolit sweep``."""
    parser = argparse.ArgumentParser(
        prog="fccolit sweep", allow_abbrev=False,
        description="Choose hyper-parameters of a config on validation data with Optuna (TPE): each trial runs "
                    "`fccolit fit` once per selection seed and scores the mean of the validation metric. Arguments "
                    "after `--` go to every `fccolit fit` (e.g. -- --data.root DIR). Resume a stopped sweep with the "
                    "same command.",
        epilog="Example: fccolit sweep --config configs/libsvm/adap.yaml --space space.yaml --trials 20 --jobs 2 "
               "--metric val/ap --direction maximize --seeds 100 101 --study-dir sweeps/adap")
    parser.add_argument("--config", required=True, help="the config to tune (a file, or a packaged config's name)")
    parser.add_argument("--space", required=True, help="the search space (YAML: dotted config key -> {type: ...})")
    parser.add_argument("--trials", type=_positive,
                        help="the number of complete trials to reach (required with --sampler tpe; with --sampler "
                             "grid: every point of the grid unless given)")
    parser.add_argument("--metric", required=True, help="the selection metric, logged on validation (e.g. val/ap)")
    parser.add_argument("--direction", required=True, choices=DIRECTIONS)
    parser.add_argument("--seeds", required=True, type=int, nargs="+",
                        help="selection seeds (seed_everything of each run); keep them apart from the seeds you report")
    parser.add_argument("--study-dir", required=True, help="where the study, the tables, best.yaml and the runs go")
    parser.add_argument("--reduce", choices=REDUCTIONS, default="last",
                        help="a run's value: the metric at its last validation (default) or its best")
    parser.add_argument("--jobs", type=_positive, default=1, help="trials run at a time on this machine (default 1)")
    parser.add_argument("--storage", help="Optuna RDB storage URL, shared by several machines "
                                          "(default: sqlite:///<study-dir>/study.db)")
    parser.add_argument("--study-name", help="the study's name in the storage (default: the study folder's name)")
    parser.add_argument("--sampler", choices=SAMPLERS, default="tpe",
                        help="tpe (default): Optuna's TPE sampler; grid: every combination of the parameters' values "
                             "once (each needs choices, or a step), in a seeded order")
    parser.add_argument("--sampler-seed", type=int, default=0, help="seed of the sampler (default 0)")
    parser.add_argument("--max-failures", type=_positive,
                        help="stop after this many failed trials in this run (default: --trials)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each run's checkpoints (deleted once its metric is read, by default)")
    parser.add_argument("--launch", choices=("forkserver", "subprocess"),
                        default="forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "subprocess",
                        help="how runs start: forked from a process that imported fccolit once (default where the "
                             "platform has it), or a new interpreter each")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The ``fccolit sweep`` command (``argv``: the arguments after ``sweep``). Exits 0 when the trials are
    complete, 1 after ``--max-failures`` failed trials, 2 on an error in the options, the space or the config (one
    line per problem, ``fccolit sweep: error: ...``), 128 + the signal when stopped by SIGINT / SIGTERM."""
    argv = list(sys.argv[1:] if argv is None else argv)
    fit_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, fit_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)

    def fail(message: str) -> None:
        sys.stderr.write("".join(f"fccolit sweep: error: {line}\n" for line in message.splitlines()))
        sys.exit(2)

    try:
        import optuna  # noqa: F401
    except ImportError:
        fail(f"fccolit sweep needs Optuna, which is not installed: {INSTALL_HINT}")
    try:
        check_metric(args.metric)
        parameters = read_space(args.space)
        sweep = Sweep(args, parameters, fit_args)
    except (SweepError, ValueError) as err:
        fail(str(err))

    def stop(signum: int, frame: Any) -> None:
        sys.stderr.write(f"fccolit sweep: stopped by {signal.Signals(signum).name}; the running trials' fits are "
                         "stopped (rerun the same command to resume: they are re-queued)\n")
        sweep.launcher.terminate_all()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        code = sweep.run()
    except SweepError as err:
        fail(str(err))
    sys.exit(code)
