"""fccolit: stochastic compositional (FCCO / X-risk) optimizers for PyTorch Lightning.

The main classes are importable from the top level, as in torchmetrics::

    import fccolit
    module = fccolit.SOX(model, fccolit.AveragePrecision(), data_sizes=datamodule.sizes)

Subpackages: :mod:`fccolit.algorithms` (the LightningModules, one per paper's method), :mod:`fccolit.objectives`
(the problems), :mod:`fccolit.state` (the per-index state), :mod:`fccolit.metrics`, :mod:`fccolit.optim`,
:mod:`fccolit.samplers`, :mod:`fccolit.datamodules`, :mod:`fccolit.callbacks`, :mod:`fccolit.models`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fccolit")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

from fccolit.algorithms import *  # noqa: E402,F401,F403
from fccolit.algorithms import __all__ as _algorithms  # noqa: E402
from fccolit.metrics import *  # noqa: E402,F401,F403
from fccolit.metrics import __all__ as _metrics  # noqa: E402
from fccolit.objectives import *  # noqa: E402,F401,F403
from fccolit.objectives import __all__ as _objectives  # noqa: E402
from fccolit.optim import AdaptiveMomentum, Momentum  # noqa: E402
from fccolit.state import IndexedState, StateUpdate  # noqa: E402

__all__ = ["__version__", "IndexedState", "StateUpdate", "Momentum", "AdaptiveMomentum",
           *_algorithms, *_objectives, *_metrics]
