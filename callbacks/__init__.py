"""Callbacks (installed as ``fccolit.callbacks``)."""

from fccolit.callbacks.state_histograms import StateHistograms
from fccolit.callbacks.summary import MetricsSummary

__all__ = ["MetricsSummary", "StateHistograms"]
