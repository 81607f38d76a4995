"""FCCO problems: the inner values g_i, the outer functions f_i and their gradients."""

from fccolit.objectives.ap import AveragePrecision
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.listwise import ListwiseCE
from fccolit.objectives.nca import NCA
from fccolit.objectives.pnorm_push import PNormPush

__all__ = ["FCCOObjective", "InnerBatch", "AveragePrecision", "ListwiseCE", "NCA", "PNormPush"]
