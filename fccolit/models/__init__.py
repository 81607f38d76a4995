"""Backbones: scorers for feature vectors, ranking models, and image backbones (ResNet-20, torchvision, CLIP)."""

from fccolit.models.ltr import ContextAwareRanker, ListMLP
from fccolit.models.mlp import MLP, LinearScorer, SizedModel, SparseInputLinear
from fccolit.models.neumf import NeuMF
from fccolit.models.vision import CLIPClassifier, ResNet20, TorchvisionBackbone

__all__ = ["SizedModel", "LinearScorer", "MLP", "SparseInputLinear", "NeuMF", "ListMLP", "ContextAwareRanker", "ResNet20", "TorchvisionBackbone", "CLIPClassifier"]
