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

* every run writes to its own folder, ``<save_dir>/<name>/version_<k>/`` (claimed atomically: two runs of a config
  started together get two folders), with its checkpoints in ``checkpoints/`` (:class:`~fccolit.callbacks.RunCheckpoint`:
  ``last.ckpt`` is always the newest state); ``--trainer.default_root_dir X`` moves it under ``X``;
* ``--ckpt_path last`` / ``best`` resolve among the config's runs (:class:`~fccolit.checkpoints.RunLayout`) in any
  later process; the file is checked (complete, loadable without running code from it, fitting the model), changed
  hyper-parameters are printed and changed optimizer settings refused before anything runs; ``validate`` / ``test`` /
  ``predict`` refuse to run without a checkpoint (``--ckpt_path untrained`` to evaluate the initial model) and log to
  the checkpoint's run folder, ``version_<k>/<subcommand>/``;
* before any step, each DataModule prints one summary line and the configured metrics are checked against its
  evaluation batches (:class:`RunChecks`);
* ``predict`` writes its scores with :class:`~fccolit.callbacks.PredictionWriter` (``--prediction_writer.path``);
* TensorBoard's HParams get the whole resolved config and ``hp_metric`` = the monitored selection metric
  (:class:`SaveAndLogConfig`);
* a configuration error, and any error before the first step, is one line, ``fccolit: error: ...``, exit status 2
  (the full report with ``--traceback`` or ``FCCOLIT_TRACEBACK=1``); a run stopped by SIGTERM exits with status 143
  after writing ``last.ckpt``; abbreviated options are refused (``--trainer.max_epoch``: "Did you mean").
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

from jsonargparse import DefaultHelpFormatter
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from fccolit.algorithms import FCCOModule
from fccolit.callbacks.prediction_writer import PredictionWriter
from fccolit.callbacks.summary import ProgressLines
from fccolit.checkpoints import (
    ConfigurationError,
    RunLayout,
    claim_run_folder,
    import_class,
    load_checkpoint,
    rank_zero_process,
    resolve_configured_checkpoint,
    state_mismatches,
)
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


def is_choice(path: str) -> bool:
    """Whether the class at ``path`` is a choice to list (not a base marked ``cli_choice = False``, such as
    :class:`~fccolit.algorithms.FCCOModule`); True for paths that do not import."""
    cls = import_class(path)
    return cls is None or vars(cls).get("cli_choice", True)


def _subclasses(base: type) -> list[type]:
    """Every subclass of ``base`` imported so far (the classes that a class name in a config can resolve to)."""
    found, pending = [], list(base.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return found


def unknown_class_hint(message: str) -> str:
    """A line for jsonargparse's error about a ``--model`` / ``--data`` value that names no class (``--model SOXX``,
    ``--model fccolit.algorithms.SOXX``, ``--model mypkg.Missing``): the closest of fccolit's classes and the choices
    ("" for other errors)."""
    key = re.search(r'Parser key "(model|data)"', message)
    given = (re.search(r"Given value: ([\w.]+)\s*$", message) or re.search(r"but ([\w.]+) either not accessible", message)
             or re.search(r"class_path '([\w.]+)'", message))
    unknown = ("Expected a dot import path", "Import path", "not accessible", "No module named", "has no attribute")
    if not key or not given or not any(u in message for u in unknown):
        return ""
    names = sorted({cls.__name__ for cls in _subclasses(_BASES[key.group(1)])
                    if cls.__module__.startswith("fccolit.") and vars(cls).get("cli_choice", True)})
    value = given.group(1)
    close = difflib.get_close_matches(value.rsplit(".", 1)[-1], names, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return f"\n--{key.group(1)} {value}: no such class.{guess} The choices: {', '.join(names)}."


#: reStructuredText roles and literals in docstrings, as plain text in ``--help``: ``:class:`~a.b.C``` → ``C``,
#: ``:func:`a.b``` → ``a.b``, ````x```` → ``x``
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|ref):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str) -> str:
    """A docstring fragment without reStructuredText markup (see :data:`_ROLE`)."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text)
    return _LITERAL.sub(r"\1", text)


def one_line(message: str) -> str:
    """A multi-line error report as one line: its lines joined, without jsonargparse's "Given value" dumps."""
    lines = [re.sub(r"^\s*(- )?", "", line).rstrip() for line in message.splitlines()]  # without list bullets
    kept = [line for line in lines if line and not line.startswith(("Given value", "Subtypes:", "Errors:"))]
    return " ".join(kept)


class FCCOHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help as plain text, with the "known subclasses" of a class option cut to fccolit's choices.

    No reStructuredText markup from the docstrings (:func:`plain_text`); the "known subclasses" of a class option
    are cut to the choices (bases marked ``cli_choice = False`` left out) and a long list (every ``torch.nn.Module``
    for a ``model`` option: over a thousand lines) to fccolit's own classes (its models, when the list has any); any
    other class is still accepted by its class path. Constructed by argparse (``formatter_class``), with its
    arguments; raises nothing of its own.

    Example:
        >>> parser = FCCOArgumentParser(prog="fccolit", description="train")
        >>> _ = parser.add_argument("--max_epochs", type=int, default=1, help="the :class:`~lightning.Trainer`'s")
        >>> print(parser.format_help())
        usage: fccolit [--max_epochs MAX_EPOCHS]
        <BLANKLINE>
        train
        <BLANKLINE>
        options:
          -h, --help            Show this help message and exit.
          --max_epochs MAX_EPOCHS
                                the Trainer's (type: int, default: 1)
        <BLANKLINE>
    """

    max_listed = 20

    def _get_help_string(self, action: Any) -> str:
        text = plain_text(super()._get_help_string(action))
        found = re.search(r", known subclasses: ([^()]*)\)$", text)
        if not found:
            return text
        paths = [p.strip() for p in found.group(1).split(",") if is_choice(p.strip())]
        if len(paths) <= self.max_listed:
            return text[: found.start()] + ", known subclasses: " + ", ".join(paths) + ")"
        own = [p for p in paths if p.startswith("fccolit.models.")] or [p for p in paths if p.startswith("fccolit.")]
        others = len(paths) - len(own)
        listing = ", ".join(own) + f" (and {others} other classes: any subclass by its class path)"
        return text[: found.start()] + ", fccolit's subclasses: " + listing + ")"

    def start_section(self, heading: str | None) -> None:
        super().start_section(plain_text(heading) if heading else heading)

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))


class FCCOArgumentParser(LightningArgumentParser):
    """LightningCLI's parser with "Did you mean" hints and one-line errors (``fccolit: error: ...``, exit status 2).

    Adds the closest valid name to "option not accepted" errors (a misspelled config key or ``--...`` flag, at the
    top level or inside a class's options, or a class name that does not exist), and reports an error as one line,
    ``fccolit: error: ...`` (exit status 2), unless :func:`full_reports`. Its help lists fccolit's classes
    (:class:`FCCOHelpFormatter`), also in the parsers that jsonargparse makes of it (``--model.help SOX``).

    Args:
        args, kwargs: those of ``LightningArgumentParser``; ``formatter_class`` defaults to
            :class:`FCCOHelpFormatter` and ``allow_abbrev`` to False (``--trainer.max_epoch`` is a typo, not
            ``max_epochs``).
        command: the subcommand this parser parses (None: the main parser, or one jsonargparse makes of it).

    Raises:
        SystemExit: status 2 on a parse error, after the one-line report on stderr (with ``exit_on_error=False``
            or :func:`full_reports`, jsonargparse's own error instead).

    Example:
        >>> parser = FCCOArgumentParser(prog="fccolit")
        >>> _ = parser.add_argument("--max_epochs", type=int, default=1)
        >>> parser.parse_args(["--max_epochs", "3"]).max_epochs
        3
        >>> parser.parse_args(["--max_epoch", "3"])  # stderr: fccolit: error: ... Did you mean 'max_epochs'? ...
        Traceback (most recent call last):
            ...
        SystemExit: 2
    """

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", FCCOHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--trainer.max_epoch 1` is a typo to report, not max_epochs
        super().__init__(*args, **kwargs)
        #: the subcommand this parser parses (None: the main parser, or one jsonargparse makes of it)
        self.command = command

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        hint = unknown_option_hint(message) or top_level_hint(message, self) or unknown_class_hint(message)
        if not self.exit_on_error or full_reports():  # a parser inside jsonargparse's own tries, or asked for it
            super().error(message + hint, ex)
        self._logger.error(message)
        sys.stderr.write(f"fccolit: error: {hint.strip() or one_line(message)}\n")
        sys.exit(2)


def _configuration_error(err: BaseException) -> BaseException:
    """``err``, marked as raised while the run was being configured (parsing the checkpoint, building the classes),
    which the console script reports as one line."""
    err.fccolit_configuration_error = True  # type: ignore[attr-defined]
    return err


def is_configuration_error(err: BaseException) -> bool:
    return isinstance(err, ConfigurationError) or getattr(err, "fccolit_configuration_error", False)



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
    # a metric may log other names than its own (FullRankingNDCGScore logs every cut-off's, its ``names``)
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
    """The CLI's checks once the data is set up, before any step: data summary, metrics fit the data, checkpoint fits.

    What the CLI does once the data is set up, before any step of any subcommand: prints the DataModule's
    summary line (:meth:`~fccolit.datamodules.FCCODataModule.summary`), warns when it validates on its test split,
    checks the configured metrics against its evaluation batches (:func:`check_metrics`) and, with a checkpoint to
    load (``ckpt_path``), that its state fits the configured module (:func:`~fccolit.checkpoints.state_mismatches`).

    An error raised before the first training step (``fit``) or evaluation batch (``validate``, ``test``,
    ``predict``) has finished, by the data's setup, the sampler, the optimizer's construction, the checkpoint's
    restore or the first step itself, is marked as a configuration error: the console reports it in one line
    (exit status 2) instead of a traceback.

    Args:
        ckpt_path: the checkpoint the subcommand loads (None: none), whose ``state_dict`` must fit the module.

    Raises:
        ConfigurationError: at setup, a configured metric reads batch fields the evaluation batches lack
            (:func:`check_metrics`), or the checkpoint's state does not fit the configured module.

    Example:
        The callback needs a Trainer to act; constructed, it holds the checkpoint to check:

        >>> RunChecks(ckpt_path="runs/version_0/checkpoints/last.ckpt").ckpt_path
        'runs/version_0/checkpoints/last.ckpt'
    """

    def __init__(self, ckpt_path: str | None = None) -> None:
        self.ckpt_path = ckpt_path
        self._stepped = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        data = trainer.datamodule
        if stage == "fit":
            rank_zero_info(module_summary(pl_module))
        if isinstance(data, FCCODataModule):
            rank_zero_info(data.summary())
            if data.val_is_test and stage in ("fit", "validate"):
                rank_zero_warn(
                    f"{type(data).__name__}: the data has no validation split, so validation runs on the test split: "
                    "the val/ metrics are test metrics, and a checkpoint selected on them is selected on the test set"
                )
            if isinstance(pl_module, FCCOModule) and stage != "predict":
                check_metrics(pl_module, data)
        if self.ckpt_path:
            mismatches = state_mismatches(load_checkpoint(self.ckpt_path).get("state_dict", {}), pl_module.state_dict())
            if mismatches:
                raise ConfigurationError(
                    f"checkpoint {self.ckpt_path} does not fit the configured {type(pl_module).__name__}: "
                    f"{'; '.join(mismatches)}; use it with the model and data it was written with"
                )

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        self._stepped = True

    def _evaluated(self, trainer: Trainer, *args: Any) -> None:
        if trainer.state.fn != TrainerFn.FITTING:  # fit's validation batches (sanity check included) are no step
            self._stepped = True

    on_validation_batch_end = on_test_batch_end = on_predict_batch_end = _evaluated

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not self._stepped and isinstance(exception, Exception):
            _configuration_error(exception)


# ------------------------------------------------------------------------------------- hyper-parameters
class SaveAndLogConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml`` in the log folder, and the whole resolved config as the loggers'
    hyper-parameters (``hparams.yaml``; TensorBoard's HParams: ``model/init_args/optimizer/init_args/lr``, the
    objective, the backbone, the data and the trainer settings). The module's own hyper-parameters, which leave out
    its model, objective and optimizer, are not logged. ``hp_metric`` is the metric that the first ModelCheckpoint
    monitors (the config's selection metric), logged at every validation of ``fit`` (TensorBoard's HParams entry
    is written with its first value); without a monitored metric there is none (set the TensorBoardLogger's
    ``default_hp_metric: false``, as the configs do, to also leave out Lightning's placeholder -1).

    Args:
        parser, config, config_filename, overwrite, multifile, save_to_log_dir: those of LightningCLI's
            ``SaveConfigCallback``, unchanged (the CLI passes them).

    Raises:
        RuntimeError: as ``SaveConfigCallback``, when ``config.yaml`` exists in the log folder and ``overwrite`` is
            False.

    Example:
        >>> from jsonargparse import Namespace
        >>> callback = SaveAndLogConfig(FCCOArgumentParser(), Namespace(), overwrite=True)
        >>> callback.config_filename, callback.overwrite
        ('config.yaml', True)
    """

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


def _configured_loggers(trainer_config: Any) -> list[Any]:
    """The loggers of a parsed trainer configuration given as ``class_path`` / ``init_args`` (Namespaces)."""
    loggers = trainer_config.get("logger")
    loggers = loggers if isinstance(loggers, list) else [loggers]
    return [entry for entry in loggers if getattr(entry, "class_path", None) and entry.get("init_args") is not None]


class FCCOLitCLI(LightningCLI):
    """LightningCLI with fccolit's links, trainer defaults, checkpoint resolution and checks before any step.

    Also the prediction writer and hyper-parameter logging (see the module docstring); the trainer defaults include
    ``use_distributed_sampler: false``. Built by :func:`main`, the ``fccolit`` command.

    Args:
        args, kwargs: those of ``LightningCLI`` (:func:`main` passes fccolit's parser, help formatter and
            callbacks).

    Raises:
        SystemExit: status 2 on a configuration that does not parse (one line on stderr, with a "Did you mean").
        ConfigurationError: a ``--ckpt_path`` that does not resolve to a complete checkpoint fitting the
            configuration; other errors raised while the classes are built are marked as configuration errors.

    Example:
        >>> main(["fit", "--trainer.max_epoch", "1"])  # stderr: fccolit: error: ... Did you mean 'max_epochs'? ...
        Traceback (most recent call last):
            ...
        SystemExit: 2
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """As LightningCLI; then a logger's relative ``save_dir`` is taken relative to ``trainer.default_root_dir``
        when that is set, so ``--trainer.default_root_dir X`` moves a config's logs and checkpoints under ``X``."""
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        root = self.config[subcommand].trainer.get("default_root_dir") if subcommand else None
        if root:
            for logger in _configured_loggers(self.config[subcommand].trainer):
                save_dir = logger.init_args.get("save_dir")
                if save_dir is not None and not Path(save_dir).is_absolute():
                    logger.init_args.save_dir = str(Path(root) / save_dir)

    # LightningCLI has no public hook between parsing and instantiation that replaces its own reading of
    # ``ckpt_path`` (which overwrites the configured model's hyper-parameters with the checkpoint's without a word):
    # this override of its private ``_parse_ckpt_path`` is the one place that does, and the resolution itself is
    # fccolit.checkpoints.resolve_configured_checkpoint.
    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path``: resolved and checked by :func:`~fccolit.checkpoints.resolve_configured_checkpoint`
        (``last`` / ``best`` among the config's runs, the file checked, changed hyper-parameters printed, changed
        optimizer settings refused, evaluation without a checkpoint refused unless ``untrained``); LightningCLI's own
        reading of the checkpoint's hyper-parameters only when the configuration names no model."""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        try:
            use_checkpoint_model = resolve_configured_checkpoint(self.config[subcommand], subcommand)
            if use_checkpoint_model:
                super()._parse_ckpt_path()
        except Exception as err:
            raise _configuration_error(err)

    def before_instantiate_classes(self) -> None:
        """Give the run its folder: ``fit`` (and an evaluation of a checkpoint from elsewhere) a new
        ``version_<k>``, claimed atomically (:func:`~fccolit.checkpoints.claim_run_folder`); ``validate`` / ``test``
        / ``predict`` of a run's checkpoint that run's folder, ``version_<k>/<subcommand>/`` (its logs, config and
        predictions: no new run folder per evaluation). A logger's configured ``version`` is kept."""
        self._claimed: Path | None = None
        subcommand = self.subcommand
        if subcommand is None:
            return
        config = self.config[subcommand]
        loggers = _configured_loggers(config.trainer)
        logger = loggers[0] if loggers else None
        cls_ = import_class(logger.class_path) if logger is not None else None
        if cls_ is None or not issubclass(cls_, (TensorBoardLogger, CSVLogger)) or logger.init_args.get("version") is not None:
            return
        layout = RunLayout.of(config.trainer)
        ckpt_path = config.get("ckpt_path")
        run = layout.run_of(ckpt_path) if ckpt_path and subcommand != "fit" else None
        if run is not None:
            logger.init_args.version = f"{run}/{subcommand}"
        elif rank_zero_process() and layout.root is not None:
            version = claim_run_folder(layout.root)
            logger.init_args.version = version
            self._claimed = layout.root / f"version_{version}"

    def instantiate_classes(self) -> None:
        """As LightningCLI, but an error raised by a class's constructor (a missing data folder, a model that does not
        fit the data) surfaces as itself rather than buried in jsonargparse's "Does not validate against any of the
        Union subtypes ... Given value: Namespace(...)" report; any error here is a configuration error (and the run
        folder claimed for it is given back)."""
        try:
            super().instantiate_classes()
        except Exception as err:
            claimed = getattr(self, "_claimed", None)
            if claimed is not None and claimed.is_dir() and not any(claimed.iterdir()):
                claimed.rmdir()
            cause: BaseException = err
            while (cause.__cause__ or cause.__context__) is not None:
                cause = cause.__cause__ or cause.__context__
            if not isinstance(err, ValueError) or cause is err or type(cause).__module__.startswith("jsonargparse"):
                raise _configuration_error(err)
            raise _configuration_error(cause) from None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """The DataModule's ``sizes`` linked to the model's ``data_sizes`` (read once the data is instantiated), and
        ``predict``'s ``--prediction_writer.path`` (a :class:`PredictionWriter` is always there); each subcommand's
        parser knows its subcommand (:class:`FCCOArgumentParser`'s ``command``, given by :func:`main`'s
        ``parser_kwargs``)."""
        parser.link_arguments("data", "model.init_args.data_sizes", compute_fn=data_sizes, apply_on="instantiate")
        if getattr(parser, "command", None) == "predict":
            parser.add_lightning_class_args(PredictionWriter, "prediction_writer")

    # LightningCLI's public instantiate_trainer(**kwargs) replaces the configured callbacks when given some, and has no
    # other way to add callbacks that depend on the parsed run (the checkpoint to check) after the configured ones and
    # before its SaveConfigCallback, nor to turn the progress bar off for a log file without writing that into the
    # saved config: so its private _instantiate_trainer is extended here.
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        ckpt_path = self.config[self.subcommand].get("ckpt_path") if self.subcommand else None
        for callback in [*(config.get("callbacks") or []), *callbacks]:
            if type(callback) is ModelCheckpoint and callback.save_last:
                rank_zero_warn(
                    "Lightning's ModelCheckpoint writes last.ckpt only when it also writes a top-k checkpoint, and "
                    "after a max_steps stop in the middle of an epoch it records the epoch as finished (a resumed run "
                    "skips the rest of it): use fccolit.callbacks.RunCheckpoint (the same arguments), whose last.ckpt "
                    "is always the newest state and resumes exactly"
                )
        extra: list[Callback] = [RunChecks(ckpt_path)]
        if config.get("enable_progress_bar") is None and not sys.stdout.isatty():
            config["enable_progress_bar"] = False  # a bar's frames in a log file: a line per validation instead
            extra.append(ProgressLines())
        return super()._instantiate_trainer(config, [*callbacks, *extra])


# ------------------------------------------------------------------------------------- quiet output
#: Lightning's start-up lines that give a user nothing to act on: a CPU run is told that no GPU or TPU is there (a GPU
#: that is there and unused still gets Lightning's warning), and advertisements
QUIET_INFO = ("GPU available:", "TPU available:", "HPU available:", "💡 Tip:")
#: warnings that give a user nothing to act on, each with why
QUIET_WARNINGS = (
    # Lightning 2.6 calls an API that torch 2.14 deprecates, once per run
    r".*isinstance\(treespec, LeafSpec\).*",
    # fccolit's evaluation sampler returns every index exactly once by construction (SequentialShardSampler)
    r"You are using a custom batch sampler `SequentialShardSampler` for prediction",
    # on small data: fccolit's modules log the step values by global step, across epoch boundaries, and the epoch values
    # at every epoch's end, so nothing goes unlogged
    r"The number of training batches \(\d+\) is smaller than the logging interval",
)


class _QuietInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(QUIET_INFO)


def quiet_output() -> None:
    """Leave out :data:`QUIET_INFO` and :data:`QUIET_WARNINGS` (idempotent)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _QuietInfo) for f in logger.filters):
        logger.addFilter(_QuietInfo())
    for pattern in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def module_summary(module: LightningModule) -> str:
    """One line saying what trains: the algorithm, its model's trainable parameters and each per-index state's size,
    e.g. ``SOX: MLP, 3,521 trainable parameters; state: 593 rows × 2``. It replaces Lightning's model-summary table
    (whose FLOPs column reads 0 without an example input)."""
    from fccolit.state import IndexedState

    model = getattr(module, "model", None)
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    text = f"{type(module).__name__}: {type(model).__name__ + ', ' if model is not None else ''}{trainable:,} trainable parameters"
    states = [(name, m) for name, m in module.named_modules() if isinstance(m, IndexedState)]
    if states:
        text += "; per-index state: " + ", ".join(f"{name} {m.num_rows:,} rows × {m.dim}" for name, m in states)
    return text


def main(args: ArgsType = None, run: bool = True) -> FCCOLitCLI:
    """Entry point of the ``fccolit`` command; ``args`` lets tests call it in-process."""
    quiet_output()
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
        parser_kwargs={"description": DESCRIPTION, "version": importlib.metadata.version("fccolit"),
                       **{name: {"command": name} for name in LightningCLI.subcommands()}},
        trainer_defaults={"use_distributed_sampler": False, "enable_model_summary": False},
        args=args,
        run=run,
    )


DESCRIPTION = (
    "Train and evaluate models on X-risks (NDCG, top-K NDCG, AUPRC, partial AUC, group DRO, constrained learning) "
    "with fccolit's stochastic compositional optimizers. Every run is a YAML config plus overrides: "
    "`fccolit fit --config configs/quickstart.yaml`, then `fccolit test --config configs/quickstart.yaml "
    "--ckpt_path last` (or best). Errors are one line; --traceback (or FCCOLIT_TRACEBACK=1) shows the full report. "
    "`fccolit sweep --help`: choose a config's hyper-parameters on validation data (Optuna)."
)


def console() -> None:
    """The ``fccolit`` console script: exit status 0 on success; 2 with one line ``fccolit: error: ...`` on a
    configuration error or any error before the first step (the full traceback with ``--traceback`` anywhere on the
    command line, or ``FCCOLIT_TRACEBACK=1``); 143 (128 + SIGTERM) when a SIGTERM stopped the run, after
    :class:`~fccolit.callbacks.RunCheckpoint` wrote ``last.ckpt``, so ``fccolit fit ... && fccolit test ...`` does not
    go on to test an unfinished run."""
    if "--traceback" in sys.argv[1:]:
        sys.argv.remove("--traceback")
        os.environ[TRACEBACK_VARIABLE] = "1"
    try:
        main()
    except SIGTERMException:
        sys.stderr.write(
            "fccolit: stopped by SIGTERM; last.ckpt holds the state after the last finished step (continue with "
            "--ckpt_path last)\n"
        )
        sys.exit(128 + signal.SIGTERM)
    except Exception as err:
        if full_reports() or not is_configuration_error(err):
            raise
        sys.stderr.write(f"fccolit: error: {one_line(str(err))}\n")
        sys.exit(2)


if __name__ == "__main__":
    console()
