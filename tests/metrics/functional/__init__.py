"""Tests of fccolit.metrics.functional, one module per library module."""
