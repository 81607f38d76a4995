"""Callbacks (installed as ``fccolit.callbacks``)."""

from fccolit.callbacks.checkpoint import RunCheckpoint
from fccolit.callbacks.constraints import ConstraintViolationLogger
from fccolit.callbacks.health import TrainingHealth, TrainingHealthWarning
from fccolit.callbacks.prediction_writer import PredictionWriter
from fccolit.callbacks.schedules import HyperParameterSchedule, InverseSqrtSchedule
from fccolit.callbacks.sox_boost import SOXBoost
from fccolit.callbacks.state_histograms import StateHistograms
from fccolit.callbacks.stop_gradient import StopGradientSwitch
from fccolit.callbacks.summary import MetricHistory, MetricsSummary, ProgressLines
from fccolit.callbacks.warmup import WarmUp

__all__ = ["RunCheckpoint", "MetricsSummary", "MetricHistory", "ProgressLines", "StateHistograms", "PredictionWriter", "HyperParameterSchedule", "InverseSqrtSchedule", "SOXBoost", "ConstraintViolationLogger", "WarmUp", "StopGradientSwitch", "TrainingHealth", "TrainingHealthWarning"]
