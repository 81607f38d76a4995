"""One LightningModule per algorithm family; public classes carry the papers' method names."""

from fccolit.algorithms.base import FCCOModule
from fccolit.algorithms.sox import SOX
from fccolit.algorithms.supervised import Supervised

__all__ = ["FCCOModule", "SOX", "Supervised"]
