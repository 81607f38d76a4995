"""Rank-aware, resumable batch samplers (see :mod:`fccolit.samplers.base`)."""

from fccolit.samplers.base import RankAwareBatchSampler, SequentialShardSampler
from fccolit.samplers.binary import DualSampler

__all__ = ["RankAwareBatchSampler", "SequentialShardSampler", "DualSampler"]
