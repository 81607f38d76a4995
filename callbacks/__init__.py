"""Callbacks (installed as ``fccolit.callbacks``)."""

from fccolit.callbacks.summary import MetricsSummary

__all__ = ["MetricsSummary"]
