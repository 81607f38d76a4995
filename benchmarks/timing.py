"""Timing helpers shared by the speed benchmarks (one idea in one place).

* :func:`interleaved_medians`: time several step functions on the same batches, interleaved call by call (A B C on
  batch 1, then on batch 2, ..., the order reversed every other round), so machine noise hits all alike; returns the
  median milliseconds per call of each. On a shared machine whose load drifts by a factor of two within seconds,
  only call-by-call interleaving gives stable ratios (blocks of steps or whole fits per side do not).
* :class:`PairedSteps`: the same inside one Lightning ``fit``: a LightningModule that runs two modules' own
  ``training_step`` (manual optimization, logging included) on every batch, alternating which goes first, and
  times each.
  :class:`PairedDDPStrategy` runs it under DDP (each module in its own ``DistributedDataParallel``).
* :class:`StepTimer`: a Lightning callback timing ``training_step`` from batch start to batch end (logging
  included, data loading excluded), for whole fits.
* :class:`FixedBatches`: a DataModule that serves a list of ready batches (already on the device) in a loop, with the
  ``sizes`` the modules are built from: timing without a data path.
* On a CUDA device every timed call is bracketed by ``torch.cuda.synchronize()`` (:func:`synchronize`): kernels run
  asynchronously, so without it a call's time would be the launch time and its work would land in the next call.
* :func:`machine`: one line naming the machine, for the results files.
* :func:`write_result`: writes ``benchmarks/results/<name>.md`` (``benchmarks/collect.py`` assembles RESULTS.md).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule
from lightning.pytorch.overrides.distributed import prepare_for_backward
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.ddp import _DDPForwardRedirection

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def synchronize(device: torch.device | str | None) -> None:
    """Wait for the kernels queued on ``device`` when it is a CUDA device (a no-op on the CPU and for None)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    steps: Mapping[str, Callable[[Any], Any]], batches: Iterable[Any], repeats: int, warmup: int = 1,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Median milliseconds per call of each ``steps[name](batch)`` over ``repeats`` interleaved rounds.

    Every round runs, batch by batch, each step on that batch (in order on even rounds, reversed on odd ones) and
    times every call; ``warmup`` rounds are run first and not counted (allocator, first visits of the state).
    ``device``: where the steps run; a CUDA device is synchronized before and after every timed call.
    """
    batches = list(batches)
    names = list(steps)
    for _ in range(warmup):
        for b in batches:
            for fn in steps.values():
                fn(b)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for b in batches:
            for name in order:
                synchronize(device)
                start = time.perf_counter()
                steps[name](b)
                synchronize(device)
                times[name].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


class PairedSteps(LightningModule):
    """Runs ``first.training_step`` and ``second.training_step`` on every batch of one ``fit``, alternating which
    goes first, and records each call's seconds in ``times[name]`` (the first ``warmup`` batches dropped).

    Both modules must use manual optimization (every fccolit algorithm does), with one optimizer or a list of them
    (ALEXR2: inner and outer) and no scheduler. They become children of this module, so Lightning attaches the
    trainer to them; ``optimizers()`` of each returns its own optimizer (or list), and ``self.log`` of each logs
    into the fit's results as usual. Every batch makes two counted optimizer steps (ALEXR2 counts its inner step
    only), so ``max_steps`` of the Trainer counts twice the number of batches.

    Under DDP, train it with :class:`PairedDDPStrategy`: each module is then wrapped in its own
    ``DistributedDataParallel`` and its ``training_step`` runs through that wrapper, exactly as Lightning runs a
    module trained alone (one DDP wrapper around both would wait, in every backward, for both halves' gradients).
    """

    def __init__(self, first: LightningModule, second: LightningModule, names: tuple[str, str] = ("plain", "fcco"),
                 warmup: int = 3) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.first, self.second = first, second
        self.names, self.warmup = names, warmup
        self.times: dict[str, list[float]] = {n: [] for n in names}
        self.wrappers: list[Any] | None = None  # per-module DistributedDataParallel (PairedDDPStrategy), unregistered
        self.active_wrapper: Any = None  # the wrapper of the module whose step is running
        for position, (name, child) in enumerate(zip(names, (first, second))):
            if child.automatic_optimization:
                raise ValueError(f"PairedSteps: {name} ({type(child).__name__}) must use manual optimization")
            child.optimizers = self._optimizer_of(position)  # an instance attribute: shadows the method

    def _optimizer_of(self, position: int) -> Callable[..., Any]:
        def optimizers(use_pl_optimizer: bool = True) -> Any:
            start, count = self._slices[position]
            mine = self.optimizers(use_pl_optimizer)[start : start + count]
            return mine[0] if count == 1 else mine
        return optimizers

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        configured, self._slices = [], []
        for name, child in zip(self.names, (self.first, self.second)):
            opts = child.configure_optimizers()
            opts = [opts] if isinstance(opts, torch.optim.Optimizer) else opts
            if not (isinstance(opts, (list, tuple)) and opts and all(isinstance(o, torch.optim.Optimizer) for o in opts)):
                raise TypeError(f"PairedSteps: {name} must configure an optimizer or a list of them (no scheduler), "
                                f"got {type(opts).__name__}")
            self._slices.append((len(configured), len(opts)))
            configured += list(opts)
        return configured

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """Each module's ``on_train_batch_start``, ``training_step`` and ``on_train_batch_end``, timed together."""
        pairs = list(zip(self.names, (self.first, self.second)))
        for name, child in pairs if batch_idx % 2 == 0 else pairs[::-1]:
            synchronize(self.device)  # a CUDA device: the previous call's kernels are not this call's time
            start = time.perf_counter()
            child._current_fx_name = "on_train_batch_start"  # what the Trainer sets on the module it calls
            child.on_train_batch_start(batch, batch_idx)
            child._current_fx_name = "training_step"
            if self.wrappers is None:
                outputs = child.training_step(batch, batch_idx)
            else:  # as DDPStrategy.training_step: through the module's own DDP wrapper
                self.active_wrapper = self.wrappers[0 if child is self.first else 1]
                outputs = _DDPForwardRedirection()(self.active_wrapper, child, "training_step", batch, batch_idx)
                self.active_wrapper = None
            child._current_fx_name = "on_train_batch_end"
            child.on_train_batch_end(outputs, batch, batch_idx)
            synchronize(self.device)
            if batch_idx >= self.warmup:
                self.times[name].append(time.perf_counter() - start)

    def on_train_epoch_start(self) -> None:
        for child in (self.first, self.second):
            child._current_fx_name = "on_train_epoch_start"
            child.on_train_epoch_start()

    def on_train_epoch_end(self) -> None:
        for child in (self.first, self.second):
            child._current_fx_name = "on_train_epoch_end"
            child.on_train_epoch_end()


class PairedDDPStrategy(DDPStrategy):
    """Lightning's DDP strategy for :class:`PairedSteps`: the pair itself is not wrapped; each of its two modules
    gets its own ``DistributedDataParallel`` (with this strategy's DDP arguments), and the manual backward prepares
    the reducer of the module whose step is running (what :class:`DDPStrategy` does for a module trained alone)."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        if not isinstance(model, PairedSteps):
            raise TypeError(f"PairedDDPStrategy trains a PairedSteps module, got {type(model).__name__}")
        model.wrappers = [super(PairedDDPStrategy, self)._setup_model(child) for child in (model.first, model.second)]
        return model

    def pre_backward(self, closure_loss: torch.Tensor) -> None:
        wrapper = self.lightning_module.active_wrapper
        if wrapper is not None:
            prepare_for_backward(wrapper, closure_loss)


class StepTimer(Callback):
    """Seconds of every training batch, from ``on_train_batch_start`` to ``on_train_batch_end``."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.times.append(time.perf_counter() - self._start)


class FixedBatches(LightningDataModule):
    """Serves ``batches`` (dicts of tensors, e.g. already on the GPU) in a loop for ``length`` steps per epoch, with
    the ``sizes`` of the data they stand for (what fccolit's modules are built from: ``module(…, data_sizes=d.sizes)``).

    Lightning moves nothing (the tensors are where the model is) and no sampler or collation runs: the timed steps
    see exactly the given batches, in order."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], sizes: Mapping[str, int], length: int = 10_000) -> None:
        super().__init__()
        self.batches, self.sizes, self.length = list(batches), dict(sizes), int(length)

    @classmethod
    def from_datamodule(cls, data: Any, count: int, device: torch.device | str = "cpu",
                        length: int = 10_000) -> "FixedBatches":
        """The first ``count`` training batches of a fccolit DataModule, moved to ``device``, with its sizes."""
        data.setup("fit")
        batches = []
        for batch in data.train_dataloader():
            batches.append({k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()})
            if len(batches) == count:
                break
        return cls(batches, data.sizes, length)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        class Loop(torch.utils.data.Dataset):
            def __len__(inner) -> int:  # noqa: N805
                return self.length

            def __getitem__(inner, i: int) -> dict[str, torch.Tensor]:  # noqa: N805
                return self.batches[i % len(self.batches)]

        return torch.utils.data.DataLoader(Loop(), batch_size=None, shuffle=False)


def machine(threads: int | None = None) -> str:
    """``x86_64, 2 cores, 1 torch thread, ..., load 9.2 (CPU only ...)``: the context every results file states.
    ``threads``: the torch threads the timed process used, when it was not this one (default: this process's)."""
    threads = torch.get_num_threads() if threads is None else threads
    gpu = (f"GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
           else "CPU only: no GPU was lent to this task")
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {threads} torch thread{'s' * (threads != 1)}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, 1-minute load average {os.getloadavg()[0]:.1f} "
        f"({gpu})"
    )


def write_result(name: str, text: str) -> Path:
    """Write ``benchmarks/results/<name>.md`` and return its path."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    path.write_text(text.rstrip() + "\n")
    return path
