"""Tests of fccolit.metrics: one module per library module (functional kernels under functional/)."""
