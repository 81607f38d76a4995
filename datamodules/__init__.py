"""DataModules (installed as ``fccolit.datamodules``)."""

from fccolit.datamodules.base import FCCODataModule
from fccolit.datamodules.bdd100k import BDD100KDataModule
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.datamodules.cifar import CIFARLTDataModule
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.datamodules.grouped import GroupedDataModule, SyntheticGroupedDataModule
from fccolit.datamodules.hf import (
    HFClassificationDataModule, HFGroupedDataModule, HFRankingDataModule, HFRecommendationDataModule,
)
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.movielens import MovieLensDataModule
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datamodules.ranking import RankingDataModule, RecommendationDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule, SyntheticMultiLabelDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule

__all__ = [
    "FCCODataModule", "BDD100KDataModule", "CheXpertDataModule", "CIFARLTDataModule", "SyntheticMultiLabelDataModule", "FairnessDataModule", "GroupedDataModule", "SyntheticGroupedDataModule",
    "HFClassificationDataModule", "HFGroupedDataModule", "HFRankingDataModule", "HFRecommendationDataModule", "LibSVMDataModule", "MSLRDataModule", "MovieLensDataModule", "NetflixDataModule",
    "RankingDataModule", "RecommendationDataModule", "SyntheticBinaryDataModule", "SyntheticMulticlassDataModule", "SyntheticRankingDataModule",
]
