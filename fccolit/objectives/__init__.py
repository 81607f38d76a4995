"""FCCO problems: the inner values g_i, the outer functions f_i and their gradients."""

from fccolit.objectives.ap import AveragePrecision
from fccolit.objectives.base import FCCOObjective, InnerBatch

__all__ = ["FCCOObjective", "InnerBatch", "AveragePrecision"]
