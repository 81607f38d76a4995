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

from typing import Any

from lightning.pytorch.cli import ArgsType, LightningCLI

from fccolit.algorithms import FCCOModule
from fccolit.datamodules import FCCODataModule


def data_sizes(datamodule: FCCODataModule) -> dict[str, int]:
    return dict(datamodule.sizes)


class FCCOLitCLI(LightningCLI):
    """LightningCLI with fccolit's links and trainer defaults (``use_distributed_sampler: false``)."""

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
        trainer_defaults={"use_distributed_sampler": False},
        args=args,
        run=run,
    )


def console() -> None:
    """The ``fccolit`` console script (exit status 0 on success)."""
    main()


if __name__ == "__main__":
    console()
