"""How long the host is blocked by one state update while the GPU is busy, for the ``IndexedState`` of each given
source tree, and by the two ways of making the fused Adam kernel's step tensor.

    python benchmarks/gpu_host_wait.py /tmp/before /tmp/after   # on the GPU machine: trees (git worktrees)
    python benchmarks/gpu_host_wait.py . --quick                 # the CPU check (the tests): tiny sizes

A host that waits for the device (a read of a device value: ``torch.unique``'s output size, ``.item()``, a copy of
a Python number to the device) cannot queue the next kernels while the GPU works, so a step's work stops
overlapping. Per tree: ``IndexedState.update`` of 2,560 random rows of a 19,942,992-row state (SONG's per-pair
state at MovieLens-20M scale, γ = 0.1), the host time of the call alone (no synchronization inside the timing),
medians over 50 updates, with an idle device and with about 5 ms of matrix products queued before each update. Each
tree's ``fccolit/state.py`` is loaded from its file (its own imports come from this checkout's ``fccolit``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def state_class(tree: Path) -> type:
    """``IndexedState`` from ``tree/fccolit/state.py``."""
    path = tree / "fccolit" / "state.py"
    if not path.is_file():
        raise SystemExit(f"gpu_host_wait: {tree} holds no fccolit/state.py")
    spec = importlib.util.spec_from_file_location(f"fccolit_state_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.IndexedState


def host_ms(call, busy, device: torch.device, repeats: int, warmup: int = 5) -> float:
    """Median host milliseconds of ``call(i)``, each after ``busy()`` queued its work; the device is drained
    after each call, outside the timing."""
    times = []
    for i in range(warmup + repeats):
        busy()
        start = time.perf_counter()
        call(i)
        elapsed = time.perf_counter() - start
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", type=Path, default=[Path(".")])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the CPU when there is no GPU)")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows, batch, side, repeats = (10_000, 64, 64, 5) if args.quick else (19_942_992, 2_560, 4_096, 50)
    big = torch.randn(side, side, device=device)
    busy_work = lambda: [big @ big for _ in range(2)]  # noqa: E731  (about 5 ms on an H200 in float32)
    idle = lambda: None  # noqa: E731
    gen = torch.Generator(device=device).manual_seed(0)
    index = [torch.randint(rows, (batch,), device=device, generator=gen) for _ in range(repeats + 5)]
    values = [torch.rand(batch, 1, device=device, generator=gen) for _ in range(repeats + 5)]
    command = "python benchmarks/gpu_host_wait.py" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lines = [f"Command: `{command}`. Device: {name}.", "",
             "| what | host ms, idle device | host ms, busy device |", "|---|---:|---:|"]
    for tree in args.trees:
        state = state_class(tree)(rows, 1, lower=0.0, name="u").to(device)
        update = lambda i: state.update(index[i], values[i], ema_weight=0.1)  # noqa: E731
        cells = [host_ms(update, b, device, repeats) for b in (idle, busy_work)]
        lines.append(f"| `IndexedState.update` of {tree} | {cells[0]:.3f} | {cells[1]:.3f} |")
        del state
    buffer = torch.empty((), device=device)
    for label, make in (("step tensor: `torch.tensor(t, device=...)`",
                         lambda i: torch.tensor(float(i), dtype=torch.float32, device=device)),
                        ("step tensor: `buffer.fill_(t)`", lambda i: buffer.fill_(float(i)))):
        cells = [host_ms(make, b, device, repeats) for b in (idle, busy_work)]
        lines.append(f"| {label} | {cells[0]:.3f} | {cells[1]:.3f} |")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
