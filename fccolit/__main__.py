"""``python -m fccolit``: the ``fccolit`` command (see :mod:`fccolit.console` and :mod:`fccolit.cli`)."""

from fccolit.console import main

main()
