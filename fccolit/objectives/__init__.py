"""FCCO problems: the inner values g_i, the outer functions f_i and their gradients."""

from fccolit.objectives.ap import AveragePrecision
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.constrained import ConstrainedObjective, GroupDROCVaR, ROCFairnessAUC
from fccolit.objectives.continual import ContinualLearning
from fccolit.objectives.listwise import ListwiseCE, SOLCListwiseCE
from fccolit.objectives.nca import NCA
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate
from fccolit.objectives.nonsmooth import CompositeObjective, GapPenalty, Hinge, SmoothedHinge, SquaredHinge, make_penalty
from fccolit.objectives.pauc import PartialAUCRange, RankedRangeObjective, SumOfRankedRange
from fccolit.objectives.pnorm_push import PNormPush

__all__ = ["FCCOObjective", "InnerBatch", "AveragePrecision", "ListwiseCE", "NCA", "PNormPush", "CompositeObjective", "Hinge", "SmoothedHinge",
           "SquaredHinge", "GapPenalty", "make_penalty", "GroupDROCVaR", "ConstrainedObjective", "ROCFairnessAUC", "ContinualLearning",
           "PartialAUCRange", "RankedRangeObjective", "SumOfRankedRange",
           "NDCGSurrogate", "TopKNDCGSurrogate", "SOLCListwiseCE"]
