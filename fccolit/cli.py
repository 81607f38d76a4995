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
import re
import warnings
from typing import Any, NoReturn

from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

from fccolit.algorithms import FCCOModule
from fccolit.datamodules import FCCODataModule


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
        parameters = _parameters(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError, TypeError, ValueError):
        return ""
    close = difflib.get_close_matches(option, parameters, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return f"\n'{option}' is not a parameter of {class_path}.{guess} Its parameters: {', '.join(parameters)}."


class FCCOArgumentParser(LightningArgumentParser):
    """Adds the closest valid name to "option not accepted" errors (a misspelled config key or ``--...`` flag)."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        super().error(message + unknown_option_hint(message), ex)


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

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data", "model.init_args.data_sizes", compute_fn=data_sizes, apply_on="instantiate")


def main(args: ArgsType = None, run: bool = True) -> FCCOLitCLI:
    """Entry point of the ``fccolit`` command; ``args`` lets tests call it in-process."""
    # Importing the packages registers their classes, so configs may use short class names too.
    import fccolit.callbacks  # noqa: F401
    import fccolit.models  # noqa: F401
    import fccolit.objectives  # noqa: F401
    import fccolit.optim  # noqa: F401

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
