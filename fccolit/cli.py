"""The ``fccolit`` command: a LightningCLI (fit / validate / test / predict) in subclass mode.

Any :class:`~fccolit.algorithms.FCCOModule` subclass is a ``model`` and any
:class:`~fccolit.datamodules.FCCODataModule` subclass is a ``data``; the DataModule's ``sizes`` reach the
model's ``data_sizes`` through ``link_arguments`` (state rows, input widths). Examples::

    fccolit fit --config configs/quickstart.yaml
    fccolit fit --config configs/quickstart.yaml --trainer.max_epochs 2 --model.init_args.ema_weight 0.5
    fccolit fit --config configs/quickstart.yaml --print_config
    fccolit fit --config configs/quickstart.yaml --config configs/trainer/ddp.yaml --trainer.devices 2
    fccolit test --config configs/quickstart.yaml --ckpt_path last      # or best: found across runs
    fccolit predict --config configs/quickstart.yaml --ckpt_path best   # -> <log dir>/predictions.csv

On top of LightningCLI:

* ``--ckpt_path last`` / ``best`` resolve across runs (:func:`resolve_checkpoint`): the configs' ModelCheckpoint
  writes to one folder per config, so a new process finds the previous run's files; ``validate`` / ``test`` /
  ``predict`` refuse a checkpoint that does not exist instead of evaluating the untrained model;
* before any step, each DataModule prints one summary line and the configured metrics are checked against its
  evaluation batches (:class:`RunChecks`);
* ``predict`` writes its scores with :class:`~fccolit.callbacks.PredictionWriter` (``--prediction_writer.path``);
* TensorBoard's HParams get the whole resolved config and ``hp_metric`` = the monitored selection metric
  (:class:`SaveAndLogConfig`);
* a configuration error is one line, ``fccolit: error: ...``, exit status 2 (the full report with ``--traceback``
  or ``FCCOLIT_TRACEBACK=1``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import os
import re
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any, NoReturn

import torch
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from fccolit.algorithms import FCCOModule
from fccolit.callbacks.prediction_writer import PredictionWriter
from fccolit.datamodules import FCCODataModule
from fccolit.metrics import build_metric
from fccolit.resources import resolve_config_args


def data_sizes(datamodule: FCCODataModule) -> dict[str, int]:
    return dict(datamodule.sizes)


def _parameters(cls: type) -> list[str]:
    """The keyword parameters of ``cls(...)``, following ``**kwargs`` up the MRO as jsonargparse does."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        names += [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                  and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def home_path(cls: type) -> str:
    """The class's path in its subpackage, e.g. ``fccolit.algorithms.SOX`` or ``fccolit.optim.Momentum``: the
    shortest import path below the top-level package (jsonargparse names the shortest of all, which for the classes
    that ``fccolit`` re-exports is ``fccolit.SOX``)."""
    parts = cls.__module__.split(".")
    for n in range(min(2, len(parts)), len(parts) + 1):
        module = importlib.import_module(".".join(parts[:n]))
        if getattr(module, cls.__qualname__, None) is cls:
            return f"{module.__name__}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def unknown_option_hint(message: str) -> str:
    """A line for jsonargparse's errors about a misspelled key: the closest valid name and the valid ones ("" for
    other errors). Handles "Problem with given class_path 'C': ... Option 'x' is not accepted" (model, data,
    nested classes, optimizers) and "does not accept option 'trainer.x'"."""
    option_errors = list(re.finditer(r"Option '(\w+)' is not accepted", message))
    if option_errors:
        last = option_errors[-1]
        after = re.search(r"class_path='([\w.]+)'", message[last.end():].split("\n", 1)[0])  # "Got value: Namespace(...)"
        before = re.findall(r"class_path '([\w.]+)'", message[: last.start()])
        class_path = after.group(1) if after else (before[-1] if before else None)
        option = last.group(1)
    else:
        trainer_error = re.search(r"(?:Group 'trainer' does not accept option '|option 'trainer\.|unrecognized arguments: --trainer\.)(\w+)",
                                  message)
        if not trainer_error:
            return ""
        class_path, option = "lightning.pytorch.Trainer", trainer_error.group(1)
    if class_path is None:
        return ""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        parameters = _parameters(cls)
    except (ImportError, AttributeError, TypeError, ValueError):
        return ""
    class_path = home_path(cls)
    close = difflib.get_close_matches(option, parameters, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return f"\n'{option}' is not a parameter of {class_path}.{guess} Its parameters: {', '.join(parameters)}."


def _top_level_keys(parser: Any, message: str) -> list[str]:
    """The top-level keys a config or command line may hold for the parser raising ``message``: its own options'
    first components, or those of the subcommand named in "Subcommand 'fit' does not accept option ..."."""
    subcommand = re.search(r"Subcommand '(\w+)' does not accept", message)
    subparsers = getattr(parser, "_subcommands_action", None)
    if subcommand and subparsers is not None and subcommand.group(1) in subparsers._name_parser_map:
        parser = subparsers._name_parser_map[subcommand.group(1)]
    keys = {a.dest.split(".")[0] for a in getattr(parser, "_actions", []) if a.dest and a.dest != "help"}
    return sorted(keys - {"subcommand", "print_shtab"})


def top_level_hint(message: str, parser: Any) -> str:
    """A "Did you mean" line for a misspelled top-level key of a config (``seed_everythin:``, ``dataa:``) or flag
    (``--ckpt_pth``): jsonargparse's "does not accept option 'x'" / "unrecognized arguments: --x" errors ("" when
    the unknown name is under a known key, which :func:`unknown_option_hint` handles)."""
    found = re.search(r"does not accept option '([\w.]+)'", message) or re.search(r"unrecognized arguments: --([\w.]+)", message)
    if not found:
        return ""
    first = found.group(1).split(".")[0]
    keys = _top_level_keys(parser, message)
    if not keys or first in keys:
        return ""
    close = difflib.get_close_matches(first, keys, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return f"\n'{first}' is not a top-level key.{guess} The top-level keys: {', '.join(keys)}."


#: set (to anything but "" or "0") for full error reports and tracebacks instead of one line; ``--traceback`` sets it
TRACEBACK_VARIABLE = "FCCOLIT_TRACEBACK"


def full_reports() -> bool:
    """Whether errors are shown in full (``--traceback`` / ``FCCOLIT_TRACEBACK=1``) rather than as one line."""
    return os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")


_BASES = {"model": FCCOModule, "data": FCCODataModule}


def unknown_class_hint(message: str) -> str:
    """A line for jsonargparse's error about a ``--model`` / ``--data`` value that names no class (``--model SOXX``):
    the closest of fccolit's classes and the list ("" for other errors)."""
    key = re.search(r'Parser key "(model|data)"', message)
    given = re.search(r"Given value: ([\w.]+)\s*$", message)
    if not key or not given or "Expected a dot import path" not in message and "Import path" not in message:
        return ""
    from jsonargparse._typehints import get_all_subclass_paths  # the list jsonargparse itself accepts

    paths = [p for p in get_all_subclass_paths(_BASES[key.group(1)]) if p.startswith("fccolit.")]
    names = sorted({p.rsplit(".", 1)[-1] for p in paths})
    value = given.group(1)
    close = difflib.get_close_matches(value.rsplit(".", 1)[-1], names, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return f"\n--{key.group(1)} {value}: no such class.{guess} The choices: {', '.join(names)}."


def one_line(message: str) -> str:
    """A multi-line error report as one line: its lines joined, without jsonargparse's "Given value" dumps."""
    lines = [re.sub(r"^\s*(- )?", "", line).rstrip() for line in message.splitlines()]  # without list bullets
    kept = [line for line in lines if line and not line.startswith(("Given value", "Subtypes:", "Errors:"))]
    return " ".join(kept)


class FCCOHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help, with the "known subclasses" of a long list (every ``torch.nn.Module`` for a ``model``
    option: over a thousand lines) cut to fccolit's own classes (its models, when the list has any); any other
    class is still accepted by its class path."""

    max_listed = 20

    def _get_help_string(self, action: Any) -> str:
        text = super()._get_help_string(action)
        found = re.search(r", known subclasses: ([^()]*)\)$", text)
        if not found:
            return text
        paths = [p.strip() for p in found.group(1).split(",")]
        if len(paths) <= self.max_listed:
            return text
        own = [p for p in paths if p.startswith("fccolit.models.")] or [p for p in paths if p.startswith("fccolit.")]
        others = len(paths) - len(own)
        listing = ", ".join(own) + f" (and {others} other classes: any subclass by its class path)"
        return text[: found.start()] + ", fccolit's subclasses: " + listing + ")"


class FCCOArgumentParser(LightningArgumentParser):
    """Adds the closest valid name to "option not accepted" errors (a misspelled config key or ``--...`` flag, at the
    top level or inside a class's options, or a class name that does not exist), and reports an error as one line,
    ``fccolit: error: ...`` (exit status 2), unless :func:`full_reports`. Its help lists fccolit's classes
    (:class:`FCCOHelpFormatter`), also in the parsers that jsonargparse makes of it (``--model.help SOX``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", FCCOHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        hint = unknown_option_hint(message) or top_level_hint(message, self) or unknown_class_hint(message)
        if not self.exit_on_error or full_reports():  # a parser inside jsonargparse's own tries, or asked for it
            super().error(message + hint, ex)
        self._logger.error(message)
        sys.stderr.write(f"fccolit: error: {hint.strip() or one_line(message)}\n")
        sys.exit(2)


def check_checkpoint_file(path: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``path`` when it is not a complete PyTorch checkpoint: empty, truncated (a copy or
    a write cut short) or corrupted (a member failing its CRC). Reads the whole file once (the zip CRCs)."""
    path = Path(path)
    size = path.stat().st_size
    advice = "resume from an earlier checkpoint (or the last complete copy of this one)"
    if size == 0:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): it is incomplete (a write or copy cut short); {advice}")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK":  # not the zip container torch.save writes (the legacy format starts with a pickle opcode)
        if magic[:1] == b"\x80":
            return
        raise ValueError(f"checkpoint {path} ({size} bytes) is not a PyTorch checkpoint (it does not start as one)")
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise ValueError(
            f"checkpoint {path} ({size} bytes) is incomplete: it is truncated or damaged ({err}); {advice}"
        ) from None
    if broken is not None:
        raise ValueError(f"checkpoint {path} is corrupted: its entry {broken!r} fails its CRC check; {advice}")


_NOT_COMPARED = {"_class_path", "_instantiator", "data_sizes"}  # bookkeeping and link targets (set from the data)


def _plain(value: Any) -> Any:
    """A config value as plain Python (jsonargparse Namespaces as dicts, tuples as lists) for comparisons."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def hyperparameter_changes(checkpoint: dict[str, Any], model_config: Any) -> list[tuple[str, Any, Any]]:
    """``(key, checkpoint value, configured value)`` for every hyper-parameter the module saved in ``checkpoint``
    (``hyper_parameters``) that the configured model (``class_path`` / ``init_args``) sets to another value, the
    class included; then the optimizer's settings (``optimizer.init_args.<key>``) that differ from the
    checkpoint's first optimizer's (its ``initial_lr`` for ``lr`` under a scheduler)."""
    saved = dict(checkpoint.get("hyper_parameters") or {})
    config = _plain(model_config) or {}
    init_args = dict(config.get("init_args") or {})
    changes: list[tuple[str, Any, Any]] = []
    saved_class = saved.get("_class_path")
    if saved_class and config.get("class_path") and saved_class != config["class_path"]:
        changes.append(("class_path", saved_class, config["class_path"]))
    for key, old in saved.items():
        if key in _NOT_COMPARED or key not in init_args:
            continue
        new = init_args[key]
        if _plain(old) != new:
            changes.append((key, old, new))
    optimizer = init_args.get("optimizer")
    groups = [state.get("param_groups", []) for state in checkpoint.get("optimizer_states", [])]
    if isinstance(optimizer, dict) and groups and groups[0]:
        group = groups[0][0]
        for key, new in (optimizer.get("init_args") or {}).items():
            old = _plain(group.get("initial_lr", group.get(key)) if key == "lr" else group.get(key))
            if old is not None and not isinstance(old, dict) and old != _plain(new) and not (
                isinstance(old, (int, float)) and isinstance(new, (int, float)) and float(old) == float(new)
            ):
                changes.append((f"optimizer.init_args.{key}", old, new))
    return changes


class ConfigurationError(ValueError):
    """A run that cannot start as configured (a checkpoint that does not exist, metrics the data cannot feed); the
    console script reports it as one line."""


def _configuration_error(err: BaseException) -> BaseException:
    """``err``, marked as raised while the run was being configured (parsing the checkpoint, building the classes),
    which the console script reports as one line."""
    err.fccolit_configuration_error = True  # type: ignore[attr-defined]
    return err


def is_configuration_error(err: BaseException) -> bool:
    return isinstance(err, ConfigurationError) or getattr(err, "fccolit_configuration_error", False)


# ------------------------------------------------------------------------------------- --ckpt_path last / best
def _checkpoint_folders(trainer: Trainer) -> list[ModelCheckpoint]:
    """The trainer's ModelCheckpoint callbacks that write to a fixed folder (``dirpath``), the ones whose files a
    new process can find; without ``dirpath`` Lightning writes into each run's new version folder."""
    return [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.dirpath]


def last_checkpoints(callback: ModelCheckpoint) -> list[Path]:
    """The ``last.ckpt`` files (``last-v<k>.ckpt`` too) in ``callback``'s folder, newest first."""
    pattern = re.compile(rf"{re.escape(callback.CHECKPOINT_NAME_LAST)}(-v\d+)?{re.escape(callback.FILE_EXTENSION)}")
    folder = Path(callback.dirpath)
    found = [p for p in folder.iterdir() if pattern.fullmatch(p.name)] if folder.is_dir() else []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def recorded_best(callback: ModelCheckpoint, last: Path) -> Path | None:
    """The best checkpoint that ``callback``'s state in the checkpoint ``last`` records (Lightning saves the
    callback's ``best_model_path`` in every checkpoint), looked up in ``callback``'s folder when the recorded path
    has moved; None when it records none or the file is gone."""
    checkpoint = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    states = [s for s in (checkpoint.get("callbacks") or {}).values() if isinstance(s, dict) and s.get("best_model_path")]
    state = next((s for s in states if s.get("monitor") == callback.monitor), None)
    if state is None:
        return None
    recorded = Path(state["best_model_path"])
    for candidate in (recorded, Path(callback.dirpath) / recorded.name):
        if candidate.is_file():
            return candidate
    return None


def resolve_checkpoint(ckpt_path: str | os.PathLike, trainer: Trainer, subcommand: str) -> str | None:
    """The checkpoint file that ``--ckpt_path`` names for ``subcommand``, across runs of the same config.

    * ``"best"`` / ``"last"`` already known to this process (a ``fit`` in the same Python session): Lightning's.
    * ``"last"``: the newest ``last.ckpt`` in the folders of the trainer's ModelCheckpoints (their ``dirpath``: the
      configs write every run of a config to one folder). ``fit`` without one starts from scratch (Lightning's rule:
      ``--ckpt_path last`` may be set before the first run).
    * ``"best"``: the best checkpoint that the newest ``last.ckpt`` records for the first monitoring ModelCheckpoint.
    * any other value: a file, which must exist.

    Raises:
        ConfigurationError: one line naming what is missing and where it was looked for: no such file; ``last`` /
            ``best`` without a ModelCheckpoint writing to a fixed ``dirpath``; nothing found there for ``validate``
            / ``test`` / ``predict`` (which would otherwise evaluate the untrained model), or for ``best``.
    """
    ckpt_path = str(ckpt_path)
    if ckpt_path not in ("last", "best"):
        if not Path(ckpt_path).is_file():
            raise ConfigurationError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
        return ckpt_path
    callbacks = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
    in_process = [getattr(c, f"{ckpt_path}_model_path", "") for c in callbacks]
    if any(in_process):
        return ckpt_path  # a fit in this process knows it: Lightning resolves it
    folders = _checkpoint_folders(trainer)
    if not folders:
        raise ConfigurationError(
            f"--ckpt_path {ckpt_path}: no ModelCheckpoint in trainer.callbacks writes to a fixed folder (dirpath), so "
            "no earlier run's checkpoint can be found; give a checkpoint file, or add a ModelCheckpoint with dirpath, "
            "monitor and save_last to the config"
        )
    where = ", ".join(str(c.dirpath) for c in folders)
    lasts = sorted((p for c in folders for p in last_checkpoints(c)), key=lambda p: p.stat().st_mtime, reverse=True)
    if ckpt_path == "last":
        if lasts:
            return str(lasts[0])
        if subcommand == "fit":
            return ckpt_path  # nothing to resume: Lightning warns and starts from scratch
        raise ConfigurationError(
            f"--ckpt_path last: no last.ckpt in {where}: train first (fccolit fit with the same config) or give a "
            "checkpoint file"
        )
    monitoring = next((c for c in folders if c.monitor), None)
    if monitoring is None:
        raise ConfigurationError(
            f"--ckpt_path best: the ModelCheckpoint writing to {where} monitors no metric (set its monitor), so no "
            "checkpoint is the best; use --ckpt_path last or a checkpoint file"
        )
    best = next((b for b in (recorded_best(monitoring, p) for p in lasts) if b is not None), None)
    if best is None:
        raise ConfigurationError(
            f"--ckpt_path best: no best checkpoint by {monitoring.monitor} recorded in {monitoring.dirpath} (it is "
            "recorded in last.ckpt: train first with save_last, or give a checkpoint file)"
        )
    return str(best)


# ------------------------------------------------------------------------------------- checks before any step
def first_batch(dataset: Any) -> dict[str, Any]:
    """The batch of the dataset's first row, as its loader builds batches (``__getitems__``)."""
    if hasattr(dataset, "__getitems__"):
        return dataset.__getitems__([0])
    return dict(dataset[0])


#: metric names tried when saying which metrics an evaluation batch feeds
_METRIC_EXAMPLES = ("ap", "auroc", "pauc_0.05_0.5", "ndcg@10", "accuracy")


def check_metrics(module: FCCOModule, datamodule: FCCODataModule) -> None:
    """Raise :class:`ConfigurationError` when a configured metric reads none of the DataModule's evaluation batches
    (validation or test: a metric reads the batch kind it was made for, e.g. ``ndcg@10`` needs ``relevance`` lists
    that binary data does not have), naming the metric, the fields it reads, those the batches hold and the
    metrics that fit them. Without it the run fails at its first validation."""
    batches = [first_batch(d) for d in (datamodule.val_dataset, datamodule.test_dataset) if d is not None and len(d)]
    if not batches:
        return
    entries = list(module.metrics["val"].named_metrics())
    # a metric may log other names than its own (FullRankingNDCG logs every cut-off's, its ``names``)
    logged = {n for name, m in entries if any(m.reads(b) for b in batches) for n in (name, *getattr(m, "names", ()))}
    for name, metric in entries:
        if name in logged:
            continue
        fields = sorted({field for batch in batches for field in batch})
        fitting = []
        for example in _METRIC_EXAMPLES:
            if example == "accuracy" and "num_classes" not in module.data_sizes:
                continue  # multi-class data only
            try:
                if any(build_metric(example).reads(batch) for batch in batches):
                    fitting.append(example)
            except (TypeError, ValueError):
                continue
        raise ConfigurationError(
            f"metric {name!r} reads the batch fields {list(metric.inputs)}, which the evaluation batches of "
            f"{type(datamodule).__name__} do not have (they have {fields}); metrics for this data: {', '.join(fitting)}"
        )


class RunChecks(Callback):
    """What the CLI does once the data is set up, before any step of any subcommand: prints the DataModule's
    summary line (:meth:`~fccolit.datamodules.FCCODataModule.summary`), warns when it validates on its test split,
    and checks the configured metrics against its evaluation batches (:func:`check_metrics`)."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        data = trainer.datamodule
        if not isinstance(data, FCCODataModule):
            return
        rank_zero_info(data.summary())
        if data.val_is_test and stage in ("fit", "validate"):
            rank_zero_warn(
                f"{type(data).__name__}: the data has no validation split, so validation runs on the test split: the "
                "val/ metrics are test metrics, and a checkpoint selected on them is selected on the test set"
            )
        if isinstance(pl_module, FCCOModule) and stage != "predict":
            check_metrics(pl_module, data)


# ------------------------------------------------------------------------------------- hyper-parameters
class SaveAndLogConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml`` in the log folder, and the whole resolved config as the loggers'
    hyper-parameters (``hparams.yaml``; TensorBoard's HParams: ``model/init_args/optimizer/init_args/lr``, the
    objective, the backbone, the data and the trainer settings). The module's own hyper-parameters, which leave out
    its model, objective and optimizer, are not logged. ``hp_metric`` is the metric that the first ModelCheckpoint
    monitors (the config's selection metric), logged at every validation of ``fit`` (TensorBoard's HParams entry
    is written with its first value); without a monitored metric there is none (set the TensorBoardLogger's
    ``default_hp_metric: false``, as the configs do, to also leave out Lightning's placeholder -1)."""

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().save_config(trainer, pl_module, stage)
        pl_module._log_hyperparams = False
        if trainer.datamodule is not None:
            trainer.datamodule._log_hyperparams = False
        self._params = self.config.as_dict()
        self._params.pop("config", None)  # the config files' paths: the values themselves are here
        self._monitor = next((c.monitor for c in trainer.checkpoint_callbacks if getattr(c, "monitor", None)), None)
        for logger in trainer.loggers:
            logger.log_hyperparams(self._params)
        self._entry_written = stage != "fit" or self._monitor is None

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        monitor = getattr(self, "_monitor", None)  # set on rank 0 only
        value = trainer.callback_metrics.get(monitor) if monitor else None
        if trainer.sanity_checking or value is None:
            return
        metrics = {"hp_metric": float(value)}
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger) and not self._entry_written:
                logger.log_hyperparams(self._params, metrics=metrics, step=trainer.global_step)
            else:
                logger.log_metrics(metrics, step=trainer.global_step)
        self._entry_written = True


class FCCOLitCLI(LightningCLI):
    """LightningCLI with fccolit's links, trainer defaults (``use_distributed_sampler: false``), checkpoint
    resolution, checks before any step, prediction writer and hyper-parameter logging (see the module docstring)."""

    def instantiate_classes(self) -> None:
        """As LightningCLI, but an error raised by a class's constructor (a missing data folder, a model that does not
        fit the data) surfaces as itself rather than buried in jsonargparse's "Does not validate against any of the
        Union subtypes ... Given value: Namespace(...)" report; any error here is a configuration error."""
        try:
            super().instantiate_classes()
        except ValueError as err:
            cause: BaseException = err
            while (cause.__cause__ or cause.__context__) is not None:
                cause = cause.__cause__ or cause.__context__
            if cause is err or type(cause).__module__.startswith("jsonargparse"):
                raise _configuration_error(err)
            raise _configuration_error(cause) from None
        except Exception as err:
            raise _configuration_error(err)

    def _parse_ckpt_path(self) -> None:
        """With ``--ckpt_path``: first check the file is a complete checkpoint (an error naming it otherwise).

        LightningCLI then overwrites the configured model's hyper-parameters with the checkpoint's, so a value
        changed on the command line was dropped without a word. Here, when the configuration names a model, it is
        what runs: each module hyper-parameter that differs from the checkpoint's is printed (checkpoint → now).
        The optimizer's settings are restored from the checkpoint's optimizer state by Lightning, so one that
        differs is refused, listing the keys. Without a model in the configuration the checkpoint's is used."""
        try:
            self._check_resumed_settings()
        except Exception as err:
            raise _configuration_error(err)

    def _check_resumed_settings(self) -> None:
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or not Path(ckpt_path).is_file():
            return super()._parse_ckpt_path()
        check_checkpoint_file(ckpt_path)
        model_config = self.config[subcommand].get("model")
        if model_config is None or not getattr(model_config, "class_path", None):
            return super()._parse_ckpt_path()
        checkpoint = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        changes = hyperparameter_changes(checkpoint, model_config)
        optimizer_changes = [c for c in changes if c[0].startswith("optimizer.")]
        listing = lambda rows: "\n".join(f"  {k}: {old!r} (checkpoint) -> {new!r} (configured)" for k, old, new in rows)  # noqa: E731
        if optimizer_changes:
            raise ValueError(
                f"resuming from {ckpt_path} with optimizer settings that differ from the checkpoint's:\n"
                f"{listing(optimizer_changes)}\nLightning restores the optimizer's state (its settings included) "
                "from the checkpoint, so these would be ignored: configure the checkpoint's values to resume, or "
                "start a new run from the checkpoint's weights (a callback or the model's pretrained weights)."
            )
        if changes and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            sys.stderr.write(
                f"Resuming from {ckpt_path} with hyper-parameters that differ from the checkpoint's; the configured "
                f"values apply:\n{listing(changes)}\n"
            )

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data", "model.init_args.data_sizes", compute_fn=data_sizes, apply_on="instantiate")

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> LightningArgumentParser:
        """``predict`` also takes ``--prediction_writer.path`` (a :class:`PredictionWriter` is always there)."""
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand == "predict":
            parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
        return parser

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        return super()._instantiate_trainer(config, [*callbacks, RunChecks()])

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        """LightningCLI's arguments of ``trainer.<subcommand>``, with ``ckpt_path`` resolved across runs
        (:func:`resolve_checkpoint`) and a resolved file checked (:func:`check_checkpoint_file`)."""
        kwargs = super()._prepare_subcommand_kwargs(subcommand)
        ckpt_path = kwargs.get("ckpt_path")
        if ckpt_path is not None:
            resolved = resolve_checkpoint(ckpt_path, self.trainer, subcommand)
            if resolved is not None and resolved not in ("last", "best") and resolved != str(ckpt_path):
                check_checkpoint_file(resolved)
                rank_zero_info(f"--ckpt_path {ckpt_path}: {resolved}")
            kwargs["ckpt_path"] = resolved
        return kwargs


def main(args: ArgsType = None, run: bool = True) -> FCCOLitCLI:
    """Entry point of the ``fccolit`` command; ``args`` lets tests call it in-process."""
    # Importing the packages registers their classes, so configs may use short class names too.
    import fccolit.callbacks  # noqa: F401
    import fccolit.models  # noqa: F401
    import fccolit.objectives  # noqa: F401
    import fccolit.optim  # noqa: F401

    try:  # a --config value that is no file may name a packaged config: `--config movielens/song`
        if args is None:
            sys.argv[1:] = resolve_config_args(sys.argv[1:])
        elif isinstance(args, list):
            args = resolve_config_args(args)
    except FileNotFoundError as err:
        sys.stderr.write(f"fccolit: error: {err}\n")
        sys.exit(2)
    return FCCOLitCLI(
        FCCOModule,
        FCCODataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=SaveAndLogConfig,
        save_config_kwargs={"overwrite": True},
        parser_class=FCCOArgumentParser,
        parser_kwargs={"description": DESCRIPTION, "version": importlib.metadata.version("fccolit")},
        trainer_defaults={"use_distributed_sampler": False},
        args=args,
        run=run,
    )


DESCRIPTION = (
    "Train and evaluate models on X-risks (NDCG, top-K NDCG, AUPRC, partial AUC, group DRO, constrained learning) "
    "with fccolit's stochastic compositional optimizers. Every run is a YAML config plus overrides: "
    "`fccolit fit --config configs/quickstart.yaml`, then `fccolit test --config configs/quickstart.yaml "
    "--ckpt_path last` (or best). Errors are one line; --traceback (or FCCOLIT_TRACEBACK=1) shows the full report."
)


def console() -> None:
    """The ``fccolit`` console script: exit status 0 on success, 2 with one line ``fccolit: error: ...`` on a
    configuration error (the full traceback with ``--traceback`` anywhere on the command line, or
    ``FCCOLIT_TRACEBACK=1``)."""
    # Lightning 2.6 calls an API that torch 2.14 deprecates, once per run: noise for a user, nothing to act on
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # the configs write every run of a config to one checkpoint folder on purpose (so that `--ckpt_path last` / `best`
    # find the previous run's files), and a new run replacing them is what the README promises
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    if "--traceback" in sys.argv[1:]:
        sys.argv.remove("--traceback")
        os.environ[TRACEBACK_VARIABLE] = "1"
    try:
        main()
    except Exception as err:
        if full_reports() or not is_configuration_error(err):
            raise
        sys.stderr.write(f"fccolit: error: {one_line(str(err))}\n")
        sys.exit(2)


if __name__ == "__main__":
    console()
