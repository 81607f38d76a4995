"""How close the suite's tight ``torch.allclose`` comparisons come to their tolerance (an opt-in pytest plugin).

After a move to another CPU, float64 results that two code paths reach in another summation order can drift by
rounding; this finds the comparisons that would fail first::

    rm -f /tmp/margins.jsonl
    PYTHONPATH=tests FCCOLIT_TOLERANCE_LOG=/tmp/margins.jsonl python -m pytest -p tolerance_margins -n 2 -m ddp
    python tests/tolerance_margins.py /tmp/margins.jsonl

Every ``torch.allclose`` call with ``rtol <= 1e-9`` appends its call site and its margin, the largest
``|a − b| / (atol + rtol·|b|)`` over the elements (1 = at the tolerance), to the log; the report prints the worst
margin per call site (a shared helper such as ``builders.assert_rounding_close`` is one site: the test column says
which test). Comparisons through ``torch.testing.assert_close`` are not seen.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

import torch

_LOG = os.environ.get("FCCOLIT_TOLERANCE_LOG")
_allclose = torch.allclose


def _recording_allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    result = _allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if rtol <= 1e-9 and a.is_floating_point() and a.numel():
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
        gap, tolerance = (a - b).abs(), (atol + rtol * b.abs()).expand_as(a)
        finite = torch.isfinite(gap)
        margin = float((gap[finite] / tolerance[finite]).max()) if finite.any() else 0.0
        caller = sys._getframe(1)
        with open(_LOG, "a") as f:
            f.write(json.dumps({"where": f"{os.path.relpath(caller.f_code.co_filename)}:{caller.f_lineno}",
                                "margin": margin, "test": os.environ.get("PYTEST_CURRENT_TEST", "")}) + "\n")
    return result


if _LOG:
    torch.allclose = _recording_allclose


def report(path: str, top: int = 15) -> None:
    """Print the worst margin of each call site in the log at ``path``, largest first."""
    worst: dict[str, tuple[float, str]] = defaultdict(lambda: (0.0, ""))
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            if entry["margin"] > worst[entry["where"]][0]:
                worst[entry["where"]] = (entry["margin"], entry["test"].split(" ")[0])
    for where, (margin, test) in sorted(worst.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{margin:8.3f}  {where}  {test}")
    print(f"{len(worst)} call sites")


if __name__ == "__main__":
    report(sys.argv[1])
