"""Training DataLoader throughput of the image DataModules against one ResNet-20 training step (CPU).

    python benchmarks/image_loaders.py [--workers 2] [--rounds 3] [--batches 10] [--steps 2] [--quick] [--write]

For each DataModule, on generated files in the release's exact format and at the release's image sizes (CIFAR-10
pickles with the full 5 × 10,000 training images; CheXpert-v1.0-small grayscale JPEGs of 390 × 320; BDD100K RGB
JPEGs of 1280 × 720), these are measured in one process, interleaved in rounds (medians reported) so that the
machine's changing load hits them alike:

* loader: images per second of ``datamodule.train_dataloader()`` with ``--workers`` worker processes (the
  training transforms included: crop / flip, LibAUC's random affine, CLIP's resize and crop), after the workers
  have started (the first batch is excluded);
* step: images per second of one ResNet-20 training step (forward, binary cross-entropy, backward, SGD step),
  with torch's intra-op threads, on the loader's batch (the model is size-agnostic: global pooling) and, for the
  large images, on a batch of the same size at 32×32 (ResNet-20's own input: the cheapest step, the strictest bar);
* loader + step: images per second of the two together (the loader feeding the step on its batches), the
  throughput a training run sees.

The loader is not the bottleneck when loader ≫ step and loader + step ≈ step. On a CPU-only machine the workers
and the step share the same cores, so loader + step is lower than either alone; on a GPU machine the step leaves
the cores to the workers. The generated data sets are small and stay in the page cache: reading from a cold disk is not
measured. ``--write`` writes ``benchmarks/results/image_loaders.md``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fccolit.datamodules.bdd100k import BDD100KDataModule  # noqa: E402
from fccolit.datamodules.chexpert import CheXpertDataModule  # noqa: E402
from fccolit.datamodules.cifar import CIFARLTDataModule  # noqa: E402
from fccolit.testing import write_bdd100k, write_chexpert, write_cifar  # noqa: E402
from fccolit.models.vision import ResNet20  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "image_loaders.md"


def make_data(root: Path, quick: bool) -> None:
    """Write the three data sets under ``root``."""
    rng = np.random.default_rng(0)
    per_class = 1000 if quick else 5000
    labels = np.repeat(np.arange(10), per_class)
    rng.shuffle(labels)
    images = rng.integers(0, 256, (labels.size, 32, 32, 3), dtype=np.uint8)
    test_labels = np.repeat(np.arange(10), 100)
    test = rng.integers(0, 256, (test_labels.size, 32, 32, 3), dtype=np.uint8)
    write_cifar(root / "cifar", images, labels, test, test_labels)
    write_chexpert(root / "chexpert", num_patients=24 if quick else 80, num_valid_patients=4, image_size=(390, 320))
    write_bdd100k(root / "bdd", num_frames=(48, 8) if quick else (160, 16), image_size=(1280, 720))


def modules(root: Path, workers: int, num_batches: int) -> list[tuple[str, object]]:
    """The training DataModules (the generated sets cycle: ``num_batches`` per epoch)."""
    cache = root / "cache"
    return [
        ("CIFAR-10-LT (ρ=100), 32×32, crop+flip, B=128",
         CIFARLTDataModule(root / "cifar", task="multiclass", batch_size=128, num_workers=workers, cache_dir=cache)),
        ("CheXpert-small 390×320 JPEG → 320×320, affine, B=32",
         CheXpertDataModule(root / "chexpert", task="Edema", image_size=320, batch_size=32, num_positives=8,
                            num_batches=num_batches, num_workers=workers, cache_dir=cache, val_fraction=0.1)),
        ("BDD100K 1280×720 JPEG → 224×224 (CLIP), B=64",
         BDD100KDataModule(root / "bdd", task="weather", target="foggy", image_size=224, batch_size=64,
                           num_positives=16, augment=True, num_batches=num_batches, num_workers=workers,
                           cache_dir=cache, val_fraction=0.0)),
    ]


def _targets(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return (batch["y"].reshape(len(batch["x"]), -1)[:, 0] > 0).float()


class Stepper:
    """A ResNet-20 training step (BCE, SGD with momentum) whose wall time is measured."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = ResNet20(num_outputs=1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float:
        start = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(self.model(x), y).backward()
        self.opt.step()
        return time.perf_counter() - start


def loader_round(dm, batches: int, stepper: Stepper | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    """Images per second of ``batches`` batches of a fresh training loader (its first batch, the workers' start,
    excluded); with ``stepper``, each batch also goes through a training step (loader + step). The workers are
    shut down before returning, so they do not compete with the timings that follow."""
    loader = dm.train_dataloader()
    if len(loader) < batches + 1:
        raise ValueError(f"{type(dm).__name__}: {len(loader)} batches per epoch, the timing needs {batches + 1}")
    it = iter(loader)
    first = next(it)
    start, images = time.perf_counter(), 0
    for _ in range(batches):
        batch = next(it)
        if stepper is not None:
            stepper(batch["x"], _targets(batch))
        images += batch["x"].shape[0]
    rate = images / (time.perf_counter() - start)
    del it, loader  # shuts the workers down
    gc.collect()
    return rate, first


def measure(dm, rounds: int, batches: int, steps: int) -> tuple[float, float, float, float]:
    """Median over interleaved rounds (loader, step on its batch, step at 32 × 32, loader + step) of images per
    second: each round measures all four one after the other, so a change of the machine's load hits all alike."""
    dm.setup("fit")
    stepper = Stepper()
    _, first = loader_round(dm, 1)
    x, y = first["x"], _targets(first)
    small = torch.randn(x.shape[0], 3, 32, 32)
    stepper(x, y), stepper(small, y)  # warm-up of both shapes
    results: list[list[float]] = [[], [], [], []]
    for _ in range(rounds):
        results[0].append(loader_round(dm, batches)[0])
        results[1].append(x.shape[0] / statistics.median(stepper(x, y) for _ in range(steps)))
        results[2].append(results[1][-1] if x.shape[-1] == 32 else x.shape[0] / statistics.median(stepper(small, y) for _ in range(steps)))
        results[3].append(loader_round(dm, steps, stepper)[0])
    return tuple(statistics.median(r) for r in results)  # type: ignore[return-value]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"{cpu}, {os.cpu_count()} CPU cores, torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), "
            f"GPU: {gpu}; 1-minute load average at the start: {load:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    parser.add_argument("--batches", type=int, default=10, help="loader batches timed per round")
    parser.add_argument("--steps", type=int, default=2, help="ResNet-20 steps per round (median), and of loader + step")
    parser.add_argument("--quick", action="store_true", help="smaller data sets, 2 rounds of 4 batches and 1 step")
    parser.add_argument("--write", action="store_true", help=f"write {RESULT.relative_to(RESULT.parents[2])}")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.batches, args.steps = 2, min(args.batches, 4), 1
    info = machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fccolit-image-bench-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        make_data(root, args.quick)
        print(f"generated the data sets in {time.perf_counter() - t:.1f} s")
        for name, dm in modules(root, args.workers, num_batches=max(args.batches, args.steps) + 2):
            loader, native, small, both = measure(dm, args.rounds, args.batches, args.steps)
            rows.append((name, loader, native, small, both))
            print(f"{name}: loader {loader:.1f} img/s, ResNet-20 step {native:.2f} img/s on the batch, "
                  f"{small:.1f} img/s at 32×32, loader + step {both:.2f} img/s", flush=True)
    header = ("| training loader | loader alone (img/s) | ResNet-20 step on the batch (img/s) | loader / step | "
              "ResNet-20 step, same B at 32×32 (img/s) | loader / step at 32×32 | loader + step on the batch (img/s) |\n"
              "|---|---:|---:|---:|---:|---:|---:|")
    lines = [f"| {n} | {l:.1f} | {s:.2f} | {l / s:.0f} | {t:.1f} | {l / t:.1f} | {b:.2f} |" for n, l, s, t, b in rows]
    table = "\n".join([header, *lines])
    print(table)
    slow = [n.split(",")[0].split(" ")[0] for n, l, s, t, b in rows if l <= t]
    reading = (
        f"Reading: every loader delivers at least {min(l / s for _, l, s, _, _ in rows):.0f}× the images per second of a "
        f"ResNet-20 step on its batch and {min(l / t for _, l, _, t, _ in rows):.1f}× those of the cheapest step "
        "(ResNet-20 at 32 × 32, same batch size), so with "
        f"{args.workers} workers the loader is {'not the bottleneck' if not slow else 'the bottleneck for ' + ', '.join(slow)}. "
        "Loader + step against the step alone ("
        + ", ".join(f"{b / s:.2f}" for _, _, s, _, b in rows)
        + ") shows what sharing the CPU cores with the workers costs the step."
    )
    print(reading)
    if args.write:
        command = "python benchmarks/image_loaders.py " + " ".join(a for a in sys.argv[1:])
        text = f"""## Image DataLoaders versus a ResNet-20 step (CPU)

Command: `{command.strip()}`. Machine: {info}.
Generated files in each release's format and image size (CIFAR-10 pickles, {10_000 if args.quick else 50_000:,} training images;
CheXpert-v1.0-small 390 × 320 grayscale JPEGs; BDD100K 1280 × 720 JPEGs), training transforms on,
{args.workers} DataLoader workers. {args.rounds} interleaved rounds, medians reported; each round times {args.batches}
loader batches (after the workers' first batch, with the workers shut down before the steps), {args.steps} ResNet-20
training steps (BCE, SGD; median) on the loader's batch and on a batch of the same size at 32 × 32, and {args.steps}
steps fed by a fresh loader (loader + step). Workers and step share the CPU cores. No GPU was available to this
task, so the GPU half of the issue's measurement (ResNet-20 / DenseNet-121 step throughput of ADAP versus
cross-entropy) is not reported.

{table}

{reading}
"""
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(text)
        print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
