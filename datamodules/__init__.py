"""DataModules (installed as ``fccolit.datamodules``)."""

from fccolit.datamodules.base import FCCODataModule
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.datamodules.grouped import GroupedDataModule, SyntheticGroupedDataModule
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.movielens import MovieLensDataModule
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datamodules.ranking import RankingDataModule, RecommendationDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule

__all__ = [
    "FCCODataModule", "FairnessDataModule", "GroupedDataModule", "SyntheticGroupedDataModule", "LibSVMDataModule", "MSLRDataModule", "MovieLensDataModule", "NetflixDataModule",
    "RankingDataModule", "RecommendationDataModule", "SyntheticBinaryDataModule", "SyntheticMulticlassDataModule", "SyntheticRankingDataModule",
]
