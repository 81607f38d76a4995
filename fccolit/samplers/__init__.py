"""Rank-aware, resumable batch samplers (see :mod:`fccolit.samplers.base`)."""

from fccolit.samplers.base import RankAwareBatchSampler, SampledBatch, SequentialShardSampler
from fccolit.samplers.binary import DualSampler
from fccolit.samplers.group import GroupBatchSampler
from fccolit.samplers.multilabel import MultiLabelPairDataset, MultiLabelSampler
from fccolit.samplers.ranking import QueryBatch, QueryBatchSampler
from fccolit.samplers.uniform import UniformBatchSampler

__all__ = ["RankAwareBatchSampler", "SampledBatch", "SequentialShardSampler", "DualSampler", "QueryBatch", "QueryBatchSampler", "UniformBatchSampler", "GroupBatchSampler", "MultiLabelSampler", "MultiLabelPairDataset"]
