"""Initial warm-up (Qiu et al., ICML 2022, §6 and App. B): train with a well-behaved objective first, then switch to
the target.

The paper's protocol: pre-train with listwise cross-entropy (SOLC) for some epochs, randomly re-initialize the
last layer, then train with the target method (SONG, K-SONG or a baseline), with its own learning rate and
schedule. :class:`WarmUp` does that inside one ``fit``:

* epochs ``0 .. epochs−1``: the module's compositional step is delegated to a *warm-up algorithm* (by default
  :class:`~fccolit.algorithms.song.SOLC`) that shares the module's model but has its own objective and
  per-index state; the module's own state is not touched. The optimizer is the module's (its hyper-parameters
  optionally overridden, e.g. the warm-up learning rate), its LR schedulers are paused unless
  ``pause_schedulers=False`` (then the warm-up follows the module's schedule too). The warm-up objective
  estimate is logged as ``warmup/objective`` (``train/objective`` is the target's);
* at the start of epoch ``epochs`` (once): the delegation ends and the warm-up state is dropped; optionally the
  model's last layer is re-initialized (``reinit_last_layer``), every per-index state of the module is reset to
  unvisited (``reset_state``) and the optimizer and schedulers are rebuilt from the module's configuration
  (``reset_optimizer``: a fresh optimizer state, the configured learning rate, the schedule counted from the
  switch, as the paper's second run); without ``reset_optimizer`` the overridden hyper-parameters are restored and
  the schedulers resume.

Checkpoints written during the warm-up hold the warm-up algorithm's state (in this callback's state) and resume
exactly; checkpoints written after the switch resume in the target phase.

References:
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import instantiate_class
from torch import nn

from fccolit import distributed
from fccolit.state import IndexedState

__all__ = ["WarmUp", "reset_last_layer", "last_layer"]


def _instantiate(value: Any) -> Any:
    """YAML-style ``{"class_path": ..., "init_args": {...}}`` dicts become objects (recursively)."""
    if isinstance(value, dict) and "class_path" in value:
        args = {k: _instantiate(v) for k, v in (value.get("init_args") or {}).items()}
        return instantiate_class((), {"class_path": value["class_path"], "init_args": args})
    return value


def last_layer(model: nn.Module) -> nn.Module:
    """The model's output layer: ``model.last_layer()`` when it has one, else its last ``nn.Linear``."""
    if hasattr(model, "last_layer"):
        return model.last_layer()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"{type(model).__name__} has no last_layer() and no nn.Linear: cannot re-initialize its head")
    return linears[-1]


@torch.no_grad()
def reset_last_layer(model: nn.Module, seed: int | None = None) -> None:
    """Randomly re-initialize the last layer with its own ``reset_parameters``.

    With a ``seed`` the draw comes from the global generator re-seeded inside a forked RNG state (the global
    stream is untouched), so it does not depend on how much randomness the run consumed before: a resumed run
    draws the same layer. Under DDP rank 0's draw is broadcast, so every rank holds the same layer.
    """
    layer = last_layer(model)
    if seed is None:
        layer.reset_parameters()
    else:
        cuda = sorted({p.device.index or 0 for p in layer.parameters() if p.is_cuda})
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            layer.reset_parameters()
    if distributed.is_distributed():
        for p in layer.parameters():
            torch.distributed.broadcast(p.data, src=0)


class WarmUp(Callback):
    """Warm up with another algorithm for ``epochs`` epochs, then switch to the module's own (module docstring).

    Args:
        epochs: length of the warm-up phase (Qiu et al.: 20 epochs for recommendation, §7.2; "100 epochs" for
            learning to rank, ambiguous in the paper).
        algorithm: class path of the warm-up algorithm, an :class:`~fccolit.algorithms.base.FCCOModule` whose
            FCCO step is taken (:meth:`~fccolit.algorithms.base.FCCOModule.delegate_step`; default SOLC).
        algorithm_args: its constructor arguments besides ``model`` and ``data_sizes`` (which are the module's);
            nested ``{"class_path", "init_args"}`` dicts are instantiated (e.g. another objective). Default: the
            algorithm's defaults (SOLC: γ0 = 0.1, fresh u) with the module's ``state_dtype``.
        optimizer_overrides: optimizer hyper-parameters during the warm-up, set on every param group, e.g.
            ``{"lr": 0.001}`` (Qiu et al.'s recommendation warm-up rate, §7.2, against 4e-4 for fine-tuning).
        reinit_last_layer: re-initialize the model's last layer at the switch (the paper does).
        reset_state: reset every :class:`~fccolit.state.IndexedState` of the module at the switch.
        reset_optimizer: rebuild the optimizer and schedulers at the switch (the paper's separate second run).
        pause_schedulers: keep the module's LR schedulers still during the warm-up (recommendation: a constant
            warm-up rate); False runs them in the warm-up as well (learning to rank: both stages decay the rate
            after 50 epochs; with ``reset_optimizer`` the schedule restarts at the switch).
        seed: seed of the re-initialized last layer (drawn independently of the run's random stream, so a run
            resumed from a checkpoint draws the same layer).

    Raises:
        ValueError: ``epochs`` not a positive integer; at fit setup, ``algorithm`` not a dotted class path.
        TypeError: at fit setup, the module has no ``delegate_step`` (not an FCCOModule).
        KeyError: at the warm-up start, ``optimizer_overrides`` names a hyper-parameter the optimizer lacks.
        RuntimeError: a checkpoint's warm-up state does not fit ``algorithm``.

    Example:
        >>> warm_up = WarmUp(epochs=20, optimizer_overrides={"lr": 0.001})
        >>> warm_up.algorithm_path, warm_up.optimizer_overrides, warm_up.switched
        ('fccolit.algorithms.song.SOLC', {'lr': 0.001}, False)
        >>> WarmUp(epochs=0)
        Traceback (most recent call last):
            ...
        ValueError: WarmUp: epochs must be a positive integer, got 0
    """

    def __init__(
        self,
        epochs: int,
        algorithm: str = "fccolit.algorithms.song.SOLC",
        algorithm_args: dict[str, Any] | None = None,
        optimizer_overrides: dict[str, Any] | None = None,
        reinit_last_layer: bool = True,
        reset_state: bool = True,
        reset_optimizer: bool = True,
        pause_schedulers: bool = True,
        seed: int = 0,
    ) -> None:
        if int(epochs) != epochs or epochs < 1:
            raise ValueError(f"WarmUp: epochs must be a positive integer, got {epochs!r}")
        self.epochs = int(epochs)
        self.algorithm_path = algorithm
        self.algorithm_args = dict(algorithm_args or {})
        self.optimizer_overrides = dict(optimizer_overrides or {})
        self.reinit_last_layer, self.reset_state, self.reset_optimizer = reinit_last_layer, reset_state, reset_optimizer
        self.pause_schedulers, self.seed = pause_schedulers, int(seed)
        self.switched = False
        self.algorithm: nn.Module | None = None
        self._original_hparams: list[dict[str, Any]] | None = None  # per param group, before the overrides
        self._stashed_schedulers: list | None = None
        self._pending_state: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------ building the warm-up algorithm
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" or self.switched or self.algorithm is not None:
            return
        if not hasattr(pl_module, "delegate_step"):
            raise TypeError(f"WarmUp delegates the training step (delegate_step), which {type(pl_module).__name__} "
                            "does not have: use an FCCOModule")
        if "." not in self.algorithm_path:
            raise ValueError(f"expected a dotted class path such as 'fccolit.algorithms.song.SOLC', got {self.algorithm_path!r}")
        args = {k: _instantiate(v) for k, v in self.algorithm_args.items()}
        args.setdefault("state_dtype", str(getattr(pl_module, "state_dtype", torch.float32)).replace("torch.", ""))
        args.update(model=pl_module.model, data_sizes=getattr(pl_module, "data_sizes", None))
        self.algorithm = instantiate_class((), {"class_path": self.algorithm_path, "init_args": args})
        if self._pending_state is not None:
            self._load_algorithm_state(self._pending_state)

    def _algorithm_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.algorithm.state_dict().items() if not k.startswith("model.")}

    def _load_algorithm_state(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.algorithm.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("model.")]
        if missing or unexpected:
            raise RuntimeError(f"WarmUp: the checkpoint's warm-up state does not fit {self.algorithm_path}: "
                               f"missing {missing}, unexpected {unexpected}")
        self._pending_state = None

    # ------------------------------------------------------------------ phases
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Lightning skips ``on_train_epoch_start`` when it resumes mid-epoch: set the phase here too."""
        self.on_train_epoch_start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.switched:
            return
        if trainer.current_epoch < self.epochs:
            self._enter_warmup(trainer, pl_module)
        else:
            self._switch(trainer, pl_module)

    def _enter_warmup(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.algorithm is None:
            self.setup(trainer, pl_module, "fit")
        self.algorithm.to(pl_module.device)
        pl_module.delegate_step(self.algorithm)  # warmup/objective is logged; train/objective stays the target's
        if self.pause_schedulers and trainer.strategy.lr_scheduler_configs:
            self._stashed_schedulers = list(trainer.strategy.lr_scheduler_configs)
            trainer.strategy.lr_scheduler_configs = []
        if self.optimizer_overrides:
            groups = [g for opt in trainer.optimizers for g in opt.param_groups]
            if self._original_hparams is None:
                self._original_hparams = [{k: g[k] for k in self.optimizer_overrides if k in g} for g in groups]
            for g in groups:
                for k, v in self.optimizer_overrides.items():
                    if k not in g:
                        raise KeyError(f"WarmUp: optimizer_overrides has {k!r}, which the optimizer does not have "
                                       f"(its hyper-parameters: {sorted(k for k in g if k != 'params')})")
                    g[k] = v

    def _switch(self, trainer: Trainer, pl_module: LightningModule) -> None:
        pl_module.delegate_step(None)
        self.algorithm = None
        self.switched = True
        if self.reinit_last_layer:
            reset_last_layer(pl_module.model, seed=self.seed)
        if self.reset_state:
            for module in pl_module.modules():
                if isinstance(module, IndexedState):
                    module.reset()
        if self.reset_optimizer:
            trainer.strategy.setup_optimizers(trainer)
            self._stashed_schedulers = None
        else:
            if self._original_hparams is not None:
                groups = [g for opt in trainer.optimizers for g in opt.param_groups]
                for g, original in zip(groups, self._original_hparams):
                    g.update(original)
            if self._stashed_schedulers is not None:
                trainer.strategy.lr_scheduler_configs = self._stashed_schedulers
                self._stashed_schedulers = None
        self._original_hparams = None

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A fit that ends inside the warm-up leaves the module with its own step (and schedulers)."""
        pl_module.delegate_step(None)
        if self._stashed_schedulers is not None:
            trainer.strategy.lr_scheduler_configs = self._stashed_schedulers
            self._stashed_schedulers = None

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"switched": self.switched, "original_hparams": self._original_hparams}
        if not self.switched and self.algorithm is not None:
            state["algorithm"] = self._algorithm_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.switched = bool(state_dict.get("switched", False))
        self._original_hparams = state_dict.get("original_hparams")
        algorithm_state = state_dict.get("algorithm")
        if self.switched:
            self.algorithm = None
        elif algorithm_state is not None:
            if self.algorithm is not None:
                self._load_algorithm_state(algorithm_state)
            else:
                self._pending_state = algorithm_state
