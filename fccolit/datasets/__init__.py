"""Dataset classes: a batch is built at once in ``__getitems__`` (vectorized, keyed by the training batch so that
its random draws are the same after a resume and on any number of processes). The DataModules
(:mod:`fccolit.datamodules`) only configure them.

* ranking (schema in :mod:`fccolit.datasets.ranking`): :class:`RecommendationTrainDataset`,
  :class:`FullRankingEvalDataset`, :class:`SampledCandidatesEvalDataset` (with the per-user time split
  :func:`build_recommendation_arrays`), :class:`ListwiseTrainDataset`, :class:`ListEvalDataset` (with
  :func:`ltr_pair_arrays`);
* images: :class:`ImageFileDataset` (JPEGs decoded per batch, with :class:`ChestXrayTransform` or
  :class:`ClipImageTransform`), :class:`ImageArrayDataset` (uint8 arrays, :func:`random_crop_flip`);
* generated ranking lists: :class:`SyntheticQueryLists`;
* splits: :func:`stratified_split`.
"""

from fccolit.datasets.images import ImageArrayDataset, ImageFileDataset, RowOrigin, random_crop_flip
from fccolit.datasets.letor import ListEvalDataset, ListwiseTrainDataset, ltr_pair_arrays
from fccolit.datasets.recommendation import (
    FullRankingEvalDataset, RecommendationTrainDataset, SampledCandidatesEvalDataset, build_recommendation_arrays,
)
from fccolit.datasets.splits import stratified_split
from fccolit.datasets.synthetic import SyntheticQueryLists
from fccolit.datasets.transforms import ChestXrayTransform, ClipImageTransform

__all__ = [
    "ChestXrayTransform", "ClipImageTransform", "FullRankingEvalDataset", "ImageArrayDataset", "ImageFileDataset",
    "ListEvalDataset", "ListwiseTrainDataset", "RecommendationTrainDataset", "RowOrigin",
    "SampledCandidatesEvalDataset", "SyntheticQueryLists", "build_recommendation_arrays", "ltr_pair_arrays",
    "random_crop_flip", "stratified_split",
]
