"""What keeps a run finite: no optimizer step on a non-finite gradient or loss, no checkpoint with non-finite
parameters or optimizer state, and a ``FloatingPointError`` that says at which step."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable

import torch

from fccolit import distributed

#: dtypes summed in float32 by the finite check (a float16 sum of many finite values overflows at 65,504)
LOW_PRECISION = (torch.float16, torch.bfloat16)

__all__ = ["FiniteSteps", "naming_the_step"]


def naming_the_step(training_step: Callable[..., Any]) -> Callable[..., Any]:
    """``training_step`` re-raising a ``FloatingPointError`` that does not say where with the global step and epoch."""

    @functools.wraps(training_step)
    def wrapped(self: "FiniteSteps", *args: Any, **kwargs: Any) -> Any:
        try:
            return training_step(self, *args, **kwargs)
        except FloatingPointError as err:
            if "global step" in str(err):
                raise
            raise FloatingPointError(
                f"{type(self).__name__} at global step {self.global_step} (epoch {self.current_epoch}): {err}"
            ) from err

    wrapped.names_the_step = True
    return wrapped


class FiniteSteps:
    """Mixin of the fccolit LightningModules: no optimizer step on a non-finite gradient, no non-finite checkpoint.

    :meth:`check_finite_step` runs before every optimizer step; :meth:`on_save_checkpoint` refuses a checkpoint
    with non-finite parameters or optimizer state.

    Args:
        None: a mixin without a constructor (the host is a LightningModule).

    Raises:
        FloatingPointError: :meth:`check_finite_step` on a non-finite gradient or loss (the step is not taken);
            :meth:`on_save_checkpoint` on non-finite parameters or optimizer state (the checkpoint is not written).
            Both name the global step and epoch.

    Example:
        >>> import torch
        >>> from fccolit.algorithms import Supervised
        >>> from fccolit.models import LinearScorer
        >>> module = Supervised(LinearScorer(), data_sizes={"num_features": 3})
        >>> optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        >>> module({"x": torch.randn(4, 3)}).sum().backward()
        >>> module.check_finite_step(optimizer)  # finite: nothing happens
        >>> _ = next(module.parameters()).grad.fill_(float("nan"))
        >>> module.check_finite_step(optimizer)
        Traceback (most recent call last):
        ...
        FloatingPointError: Supervised: non-finite gradient at global step 0 (epoch 0): the optimizer step was not taken...
    """

    def check_finite_step(self, optimizer: Any, loss: torch.Tensor | None = None) -> None:
        """Raise ``FloatingPointError`` before ``optimizer`` steps on a non-finite gradient (or ``loss``): the step
        is not taken, so the parameters, the optimizer's state and every checkpoint written so far stay finite.

        Every algorithm passes through here (:meth:`optimization_step`, and the manual steps of double-loop methods)
        right before its optimizer steps. Under DDP the gradients are the all-reduced ones, the same on every rank,
        so every rank stops at the same step; the loss is checked in a single process only (a rank's non-finite loss
        shows in the all-reduced gradient). Under float16 loss scaling (``precision="16-mixed"``) only the loss is
        checked: the scaler skips the steps whose scaled gradient overflows. Costs one host-device synchronization
        per step.
        """
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None) is not None:
            grads = []  # float16 loss scaling: scaled gradients overflow by design and the scaler skips those steps
        checked = grads + ([loss.detach().reshape(-1)] if loss is not None and not distributed.is_distributed() else [])
        if not checked:
            return
        # one number: the sum of every value (NaN or inf when any value is; a sum that overflows means values near
        # the float range, a divergence too). A plain sum is one vectorized pass; the largest |value| (an inf-norm)
        # costs about 20 times as much on a CPU core (benchmarks/finite_check.py)
        sums = [t.sum(dtype=torch.float32 if t.dtype in LOW_PRECISION else None) for t in checked]
        if math.isfinite(torch.stack([s.to(sums[0].dtype) for s in sums]).sum().item()):
            return
        what = "gradient" if not all(math.isfinite(s.item()) for s in sums[: len(grads)]) else "loss"
        lrs = sorted({float(g["lr"]) for g in optimizer.param_groups if "lr" in g})
        finite_params = all(bool(torch.isfinite(p).all()) for p in self.parameters())
        raise FloatingPointError(
            f"{type(self).__name__}: non-finite {what} at global step {self.global_step} (epoch {self.current_epoch}): "
            "the optimizer step was not taken and training stops here (the checkpoints written so far are finite). "
            + (
                f"Likely cause: the learning rate ({', '.join(f'{lr:g}' for lr in lrs) or '?'}) is too large and the "
                "iterates diverged; lower it (or the algorithm's step sizes), or clip gradients (gradient_clip_val)."
                if finite_params else
                "The parameters themselves are non-finite: the model was loaded or initialized with NaN / inf."
            )
            + " Non-finite inputs in the data give the same error."
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse to write a checkpoint whose parameters or optimizer state hold NaN or ±inf (the previous ones are
        kept)."""
        for name, _ in self._non_finite_entries(checkpoint):
            raise FloatingPointError(
                f"{type(self).__name__}: the checkpoint at global step {self.global_step} would hold non-finite values "
                f"({name}); it is not written (the previous checkpoints are kept). Likely cause: a learning rate too "
                "large for this model and data."
            )
        super().on_save_checkpoint(checkpoint)

    def _non_finite_entries(self, checkpoint: dict[str, Any]) -> Iterable[tuple[str, torch.Tensor]]:
        """The parameters and optimizer-state tensors of ``checkpoint`` holding NaN or ±inf (buffers may hold NaN
        on purpose: an unvisited row of a per-index state, an anchor not yet set)."""
        state = checkpoint.get("state_dict", {})
        for name, _ in self.named_parameters():
            value = state.get(name)
            if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                yield f"parameter {name}", value
        for k, opt_state in enumerate(checkpoint.get("optimizer_states", [])):
            for param_id, entries in opt_state.get("state", {}).items():
                for key, value in entries.items():
                    if torch.is_tensor(value) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                        yield f"optimizer {k} state {key!r} of parameter {param_id}", value
