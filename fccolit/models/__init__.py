"""Backbones: scorers for feature vectors (more arrive with the ranking and image issues)."""

from fccolit.models.ltr import ContextAwareRanker, ListMLP
from fccolit.models.mlp import MLP, LinearScorer, SizedModel
from fccolit.models.neumf import NeuMF

__all__ = ["SizedModel", "LinearScorer", "MLP", "NeuMF", "ListMLP", "ContextAwareRanker"]
