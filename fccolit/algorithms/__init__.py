"""One LightningModule per algorithm family; public classes carry the papers' method names."""

from fccolit.algorithms.base import FCCOModule
from fccolit.algorithms.alexr2 import ALEXR2
from fccolit.algorithms.pauc import DCA, MiniBatchPAUC, PairwiseAUC, PAUCRange, ProximalDCA, SoRR
from fccolit.algorithms.ranking import MiniBatchRanking
from fccolit.algorithms.song import KSONG, SOLC, SONG, RankingSOX
from fccolit.algorithms.sonex import SONEX, SONX, PenaltySOX
from fccolit.algorithms.sox import ADAP, BSGD, MOAP, MOAPV1, MOAPV2, SOAP, SOX
from fccolit.algorithms.supervised import Supervised

__all__ = ["FCCOModule", "SOX", "BSGD", "SOAP", "MOAP", "MOAPV1", "MOAPV2", "ADAP", "SONEX", "SONX", "PenaltySOX", "ALEXR2", "PAUCRange", "SoRR", "DCA", "ProximalDCA",
           "MiniBatchPAUC", "PairwiseAUC", "SONG", "KSONG", "SOLC", "RankingSOX", "Supervised",
           "MiniBatchRanking"]
