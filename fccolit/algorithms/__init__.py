"""One LightningModule per algorithm family; public classes carry the papers' method names."""

from fccolit.algorithms.base import FCCOModule
from fccolit.algorithms.sox import SOX

__all__ = ["FCCOModule", "SOX"]
