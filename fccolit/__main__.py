"""``python -m fccolit``: the ``fccolit`` command (see :mod:`fccolit.cli`)."""

from fccolit.cli import console

console()
