"""Backbones: scorers for feature vectors (more arrive with the ranking and image issues)."""

from fccolit.models.mlp import MLP, LinearScorer, SizedModel

__all__ = ["SizedModel", "LinearScorer", "MLP"]
