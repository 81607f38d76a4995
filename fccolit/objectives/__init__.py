"""FCCO problems: the inner values g_i, the outer functions f_i and their gradients."""

from fccolit.objectives.ap import AveragePrecisionSurrogate
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.constrained import ConstrainedObjective, GroupDROCVaRLoss, ROCFairnessAUCObjective
from fccolit.objectives.continual import ContinualLearningObjective
from fccolit.objectives.listwise import ListwiseCELoss, SOLCListwiseCELoss
from fccolit.objectives.nca import NCALoss
from fccolit.objectives.ndcg import NDCGSurrogate, TopKNDCGSurrogate
from fccolit.objectives.nonsmooth import (
    CompositeObjective, GapPenalty, Hinge, SmoothedHinge, SquaredHinge, make_penalty,
)
from fccolit.objectives.pauc import PartialAUCRangeSurrogate, RankedRangeObjective, SumOfRankedRangeLoss
from fccolit.objectives.pnorm_push import PNormPushLoss
from fccolit.objectives.ranking_losses import (
    ApproxNDCGLoss, LambdaRankLoss, ListNetLoss, ListwiseRankingLoss, NeuralNDCGLoss,
)

__all__ = ["FCCOObjective", "InnerBatch", "AveragePrecisionSurrogate", "ListwiseCELoss", "NCALoss", "PNormPushLoss",
           "CompositeObjective", "Hinge", "SmoothedHinge", "SquaredHinge", "GapPenalty", "make_penalty",
           "GroupDROCVaRLoss", "ConstrainedObjective", "ROCFairnessAUCObjective", "ContinualLearningObjective",
           "PartialAUCRangeSurrogate", "RankedRangeObjective", "SumOfRankedRangeLoss",
           "NDCGSurrogate", "TopKNDCGSurrogate", "SOLCListwiseCELoss", "ListwiseRankingLoss", "LambdaRankLoss",
           "ApproxNDCGLoss", "ListNetLoss", "NeuralNDCGLoss"]
