"""The entry point of the ``fccolit`` command and of ``python -m fccolit``.

It answers ``fccolit --version`` without importing torch and Lightning (a tenth of a second instead of seconds), hands
``fccolit sweep`` to :func:`fccolit.sweep.main` and every other command to :func:`fccolit.cli.console`. The working folder goes at the end of ``sys.path``, as
``python -m`` puts it at the front, so ``--model my_module.MyAlgorithm`` finds ``./my_module.py`` without
``PYTHONPATH`` (at the end: a local file never shadows an installed package).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from fccolit import __version__

        print(f"fccolit {__version__}")
        return
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    if sys.argv[1:2] == ["sweep"]:  # Optuna drives `fccolit fit` runs; this process never imports torch
        from fccolit.sweep import main as sweep

        sweep(sys.argv[2:])
        return
    from fccolit.cli import console

    console()


if __name__ == "__main__":
    main()
