"""fccolit: stochastic compositional (FCCO / X-risk) optimizers for PyTorch Lightning.

The algorithms and the objectives are importable from the top level (the metrics from :mod:`fccolit.metrics`)::

    import fccolit
    module = fccolit.SOX(model, fccolit.AveragePrecisionSurrogate(), data_sizes=datamodule.sizes)

Subpackages: :mod:`fccolit.algorithms` (the LightningModules, one per paper's method), :mod:`fccolit.objectives`
(the problems), :mod:`fccolit.state` (the per-index state), :mod:`fccolit.metrics`, :mod:`fccolit.optim`,
:mod:`fccolit.samplers`, :mod:`fccolit.datamodules`, :mod:`fccolit.callbacks`, :mod:`fccolit.models`.

The top-level names are imported on first use (PEP 562), so ``import fccolit`` (and ``fccolit --version``,
``python -m fccolit.resources``) does not import torch and Lightning.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

try:
    __version__ = version("fccolit")
except PackageNotFoundError:  # a source tree that was never installed (``PYTHONPATH=<checkout>``)
    __version__ = "0.0.0+unknown"
    # pyproject's package-dir maps fccolit.datamodules / .callbacks / .configs to the checkout's top-level folders;
    # without an install, look for them there too (the GPU machines run benchmarks/gpu.py this way)
    __path__.append(str(Path(__file__).resolve().parents[1]))

#: the subpackages whose ``__all__`` the top level re-exports, and single names from others
_EXPORTING = ("fccolit.algorithms", "fccolit.objectives")
_SINGLE = {"IndexedState": "fccolit.state", "StateUpdate": "fccolit.state", "Momentum": "fccolit.optim",
           "AdaptiveMomentum": "fccolit.optim"}


def _exported() -> dict[str, str]:
    names = dict(_SINGLE)
    for module in _EXPORTING:
        for name in importlib.import_module(module).__all__:
            names.setdefault(name, module)
    return names


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *_exported()]
    if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a subpackage or module (``from fccolit import distributed``): the import system loads it itself; looking it
        # up among the exported classes would import the subpackages that are importing it
        raise AttributeError(f"module 'fccolit' has no attribute {name!r}")
    module = _SINGLE.get(name) or _exported().get(name)
    if module is None:
        raise AttributeError(f"module 'fccolit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_exported()})
