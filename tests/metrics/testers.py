"""What every metric class must satisfy, checked the same way for each (in the spirit of torchmetrics'
``tests/unittests/helpers/testers.py`` ``MetricTester``, without DDP: the DDP checks are ``test_metrics_ddp.py``).

A :class:`MetricCase` is a metric factory with a few batches of ``update`` arguments; :class:`MetricTester` checks,
for any case:

* one ``update`` with all batches at once gives the values of one ``update`` per batch;
* ``reset`` restores the default states, and the metric then computes what a fresh one computes;
* the states survive a ``state_dict`` round trip into a fresh metric;
* float32 and float64 scores give the same values, in float64.

``METRIC_CASES`` holds the cases of every metric class of :mod:`fccolit.metrics` (``test_init.py`` checks that none
is missing); each test module runs the cases of its own classes (:func:`cases_of`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import pytest
import torch
from torch import Tensor

from fccolit.metrics import (
    AccuracyScore,
    APScore,
    AUROCScore,
    BatchMetric,
    FullRankingNDCGScore,
    NDCGScore,
    PartialAUCScore,
)

#: update arguments of one batch: the scores first, ``None`` for an absent optional input
Batch = tuple


@dataclass(frozen=True)
class MetricCase:
    """A metric factory and the batches it is fed (scores first in each; at least two batches)."""

    name: str
    make: Callable[[], BatchMetric]
    batches: Callable[[], list[Batch]]

    def __repr__(self) -> str:
        return self.name


def _grid(values: Tensor) -> Tensor:
    """Scores on multiples of 1/8 (exact in float32, so both dtypes see the same ties)."""
    return torch.round(values * 8) / 8


def _binary_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(90, generator=g) < 0.3).long()
    y[0], y[1] = 1, 0
    s = _grid(torch.randn(90, generator=g, dtype=torch.float64) + y)
    return [(s[:30], y[:30]), (s[30:31], y[30:31]), (s[31:], y[31:])]


def _multitask_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    y = (torch.rand(60, 3, generator=g) < 0.4).long()
    y[torch.rand(60, 3, generator=g) < 0.1] = -1  # unlabeled entries
    y[0], y[1] = 1, 0
    s = _grid(torch.randn(60, 3, generator=g, dtype=torch.float64) + y)
    return [(s[:25], y[:25]), (s[25:], y[25:])]


def _multiclass_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(2)
    s = _grid(torch.randn(70, 4, generator=g, dtype=torch.float64))
    y = torch.randint(0, 4, (70,), generator=g)
    return [(s[:20], y[:20]), (s[20:], y[20:])]


def _list_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(3)
    p = _grid(torch.randn(24, 7, generator=g, dtype=torch.float64))
    y = torch.randint(0, 3, (24, 7), generator=g)
    y[5] = 0  # an empty query
    mask = torch.rand(24, 7, generator=g) > 0.2
    return [(p[:9], y[:9], mask[:9]), (p[9:], y[9:], mask[9:])]


def _full_ranking_batches() -> list[Batch]:
    g = torch.Generator().manual_seed(4)
    users, items = 18, 30
    scores = _grid(torch.randn(users, items, generator=g, dtype=torch.float64))
    heldout = torch.stack([torch.randperm(items, generator=g)[:3] for _ in range(users)])
    heldout[:, 2] = -1
    heldout[4] = -1  # a user without held-out items
    relevance = torch.randint(1, 3, (users, 3), generator=g).double()
    exclude = torch.stack([torch.randperm(items, generator=g)[:6] for _ in range(users)])
    return [tuple(x[:7] for x in (scores, heldout, relevance, exclude)),
            tuple(x[7:] for x in (scores, heldout, relevance, exclude))]


METRIC_CASES: list[MetricCase] = [
    MetricCase("ap", APScore, _binary_batches),
    MetricCase("ap_multitask", APScore, _multitask_batches),
    MetricCase("auroc", AUROCScore, _binary_batches),
    MetricCase("auroc_multitask", AUROCScore, _multitask_batches),
    MetricCase("pauc_normalized", lambda: PartialAUCScore(0.05, 0.5), _binary_batches),
    MetricCase("pauc_raw", lambda: PartialAUCScore(0.1, 0.7, "raw"), _binary_batches),
    MetricCase("pauc_mcclish", lambda: PartialAUCScore(0.0, 0.3, "mcclish"), _binary_batches),
    MetricCase("accuracy", lambda: AccuracyScore(4), _multiclass_batches),
    MetricCase("accuracy_sized_by_data", AccuracyScore, _multiclass_batches),
    MetricCase("ndcg@3", lambda: NDCGScore(top_k=3), _list_batches),
    MetricCase("ndcg_full_list_skip", lambda: NDCGScore(empty_query="skip", ties="pessimistic"), _list_batches),
    MetricCase("full_ranking_ndcg", lambda: FullRankingNDCGScore(top_ks=(1, 5, 40)), _full_ranking_batches),
]


def cases_of(*classes: type) -> list[MetricCase]:
    """The cases whose metric is an instance of one of ``classes``."""
    return [case for case in METRIC_CASES if isinstance(case.make(), classes)]


def _concatenated(batches: Sequence[Batch]) -> Batch:
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*batches))


#: the checks of :class:`MetricTester`, by name (``MetricTester().check(name, case)``)
CHECKS = ("one_update_equals_several", "reset", "state_dict_round_trip", "dtypes")


class MetricTester:
    """The checks every metric class passes (see the module docstring); ``values`` is what a metric logs."""

    atol = 1e-12

    def check(self, name: str, case: MetricCase) -> None:
        """Run the check ``name`` (one of :data:`CHECKS`) on ``case``."""
        getattr(self, f"check_{name}")(case)

    @staticmethod
    def values(metric: BatchMetric) -> dict[str, Tensor]:
        """The metric's logged values under the name ``"m"`` (per task, class or cut-off too)."""
        return metric.named_values("m", None)

    @staticmethod
    def fed(case: MetricCase, batches: Sequence[Batch] | None = None) -> BatchMetric:
        metric = case.make()
        for batch in case.batches() if batches is None else batches:
            metric.update(*batch)
        return metric

    def assert_same_values(self, got: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            a, b = float(got[name]), float(value)
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=self.atol), name

    def check_one_update_equals_several(self, case: MetricCase) -> None:
        several = self.values(self.fed(case))
        once = self.values(self.fed(case, [_concatenated(case.batches())]))
        self.assert_same_values(once, several)

    def check_reset(self, case: MetricCase) -> None:
        metric = self.fed(case)
        expected = self.values(metric)
        metric.reset()
        assert metric.update_count == 0
        for state, default in metric._defaults.items():
            current = getattr(metric, state)
            if isinstance(default, list):
                assert current == [], state
            else:
                assert torch.equal(current, default), state
        assert metric.named_curves() == {}
        for batch in case.batches():
            metric.update(*batch)
        self.assert_same_values(self.values(metric), expected)

    def check_state_dict_round_trip(self, case: MetricCase) -> None:
        metric = self.fed(case)
        metric.persistent(True)
        state = metric.state_dict()
        assert state, "persistent states are saved"
        restored = case.make()
        restored.persistent(True)
        restored.load_state_dict(state)
        with warnings.catch_warnings():  # torchmetrics warns that the restored metric saw no update() call
            warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
            self.assert_same_values(self.values(restored), self.values(metric))

    def check_dtypes(self, case: MetricCase) -> None:
        as_float32 = [(batch[0].float(), *batch[1:]) for batch in case.batches()]
        single, double = self.values(self.fed(case, as_float32)), self.values(self.fed(case))
        self.assert_same_values(single, double)
        assert all(value.dtype == torch.float64 for value in single.values())
