"""The ``fccolit`` command: a LightningCLI (fit / validate / test / predict) in subclass mode.

Any :class:`~fccolit.algorithms.FCCOModule` subclass is a ``model`` and any
:class:`~fccolit.datamodules.FCCODataModule` subclass is a ``data``; the DataModule's ``sizes`` reach the
model's ``data_sizes`` through ``link_arguments`` (state rows, input widths). Examples::

    fccolit fit --config configs/quickstart.yaml
    fccolit fit --config configs/quickstart.yaml --trainer.max_epochs 2 --model.init_args.ema_weight 0.5
    fccolit fit --config configs/quickstart.yaml --print_config
    fccolit fit --config configs/quickstart.yaml --config configs/trainer/ddp.yaml --trainer.devices 2
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any, NoReturn

import torch
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

from fccolit.algorithms import FCCOModule
from fccolit.datamodules import FCCODataModule
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


class FCCOArgumentParser(LightningArgumentParser):
    """Adds the closest valid name to "option not accepted" errors (a misspelled config key or ``--...`` flag, at the
    top level or inside a class's options)."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        super().error(message + (unknown_option_hint(message) or top_level_hint(message, self)), ex)


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


class FCCOLitCLI(LightningCLI):
    """LightningCLI with fccolit's links and trainer defaults (``use_distributed_sampler: false``)."""

    def instantiate_classes(self) -> None:
        """As LightningCLI, but an error raised by a class's constructor (a missing data folder, a model that does not
        fit the data) surfaces as itself rather than buried in jsonargparse's "Does not validate against any of the
        Union subtypes ... Given value: Namespace(...)" report."""
        try:
            super().instantiate_classes()
        except ValueError as err:
            cause: BaseException = err
            while (cause.__cause__ or cause.__context__) is not None:
                cause = cause.__cause__ or cause.__context__
            if cause is err or type(cause).__module__.startswith("jsonargparse"):
                raise
            raise cause from None

    def _parse_ckpt_path(self) -> None:
        """With ``--ckpt_path``: first check the file is a complete checkpoint (an error naming it otherwise).

        LightningCLI then overwrites the configured model's hyper-parameters with the checkpoint's, so a value
        changed on the command line was dropped without a word. Here, when the configuration names a model, it is
        what runs: each module hyper-parameter that differs from the checkpoint's is printed (checkpoint → now).
        The optimizer's settings are restored from the checkpoint's optimizer state by Lightning, so one that
        differs is refused, listing the keys. Without a model in the configuration the checkpoint's is used."""
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
        save_config_kwargs={"overwrite": True},
        parser_class=FCCOArgumentParser,
        trainer_defaults={"use_distributed_sampler": False},
        args=args,
        run=run,
    )


def console() -> None:
    """The ``fccolit`` console script (exit status 0 on success)."""
    # Lightning 2.6 calls an API that torch 2.14 deprecates, once per run: noise for a user, nothing to act on
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    main()


if __name__ == "__main__":
    console()
