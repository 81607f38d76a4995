"""Training health: say in words when a run is going nowhere, why, and what to try.

:class:`TrainingHealth` watches a training run and, when it sees one of the patterns below, prints one warning
(:class:`TrainingHealthWarning`, rank 0) naming what it saw, the likely cause and the fix to try, and writes the same
text to TensorBoard (``health/<check>`` in the Text tab). Each warning is given once per ``fit``.

========================  ==================================================================================
check                     what it reads
========================  ==================================================================================
objective flat            the module's running sum / count of the plug-in estimate (what ``train/objective`` and
                          ``train/objective_epoch`` are logged from; ``train/loss`` for Supervised), or the
                          logged ``train/objective`` for modules without them
saturated scores          the training forward's own output on a check step (a forward hook, no extra forward),
                          for objectives that map scores through σ (``score_transform="sigmoid"``)
state at Ω's caps         the logged ``train/<state>_at_upper/<c>``, ``train/<state>_at_lower/<c>``
K-SONG's λ                the logged ``train/share_above_lambda`` and ``train/top_k_share``
nothing moves             a (sub)sample of the trainable parameters, compared between checks, and the gradient
                          norm left in ``.grad`` after the check step
constraint violated       :class:`~fccolit.callbacks.ConstraintViolationLogger`'s per-epoch history (else the
                          logged ``val/max_violation`` / ``train/max_violation``)
========================  ==================================================================================

Cost: on most steps two integer operations. Every ``check_every_n_steps`` steps (and at validation / epoch ends for
the constraint check) the checks read the logged values, copy a sample of at most ``parameter_sample`` parameter
entries and take a few norms: ``benchmarks/health_overhead.py`` measures the per-step cost.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

__all__ = ["TrainingHealth", "TrainingHealthWarning", "HealthReport", "CHECKS"]

#: the checks' names (:class:`HealthReport` keys; ``state_at_caps`` reports as ``state_at_caps/<state>``)
CHECKS = ("objective_flat", "saturated_scores", "state_at_caps", "lambda_off_target", "learning_rate",
          "vanishing_gradients", "constraint_violated")
_CAP_KEY = re.compile(r"^train/(?P<state>.+)_at_(?P<bound>upper|lower)/(?P<component>\d+)$")


class TrainingHealthWarning(UserWarning):
    """A :class:`TrainingHealth` diagnosis (filter it with ``warnings.filterwarnings(..., TrainingHealthWarning)``).

    Printed as its text alone: no file, line or source line of the code that issued it.

    Example:
        >>> import warnings
        >>> issubclass(TrainingHealthWarning, UserWarning)
        True
        >>> print(warnings.formatwarning("TrainingHealth, step 50: ...", TrainingHealthWarning, "health.py", 1), end="")
        TrainingHealth, step 50: ...
    """


def _format_warning(previous: Any) -> Any:
    def formatwarning(message: Any, category: Any, filename: str, lineno: int, line: str | None = None) -> str:
        if isinstance(category, type) and issubclass(category, TrainingHealthWarning):
            return f"{message}\n"
        return previous(message, category, filename, lineno, line)

    formatwarning.formats_training_health = True
    return formatwarning


if not getattr(warnings.formatwarning, "formats_training_health", False):
    warnings.formatwarning = _format_warning(warnings.formatwarning)


@rank_zero_only
def _warn(message: str) -> None:
    """Issue ``message`` as a :class:`TrainingHealthWarning` on rank 0, every time it is called (the callback says
    each diagnosis once per fit itself; a fresh registry keeps Python's "once per location and text" from hiding
    the same diagnosis in a later fit of the same process). Warning filters still apply."""
    warnings.warn_explicit(message, TrainingHealthWarning, filename=__file__, lineno=0, module=__name__,
                           registry={})


@dataclass
class HealthReport:
    """One reported diagnosis: the check's key, the global step it was reported at and its full text.

    ``key``: ``"saturated_scores"``, ``"objective_flat"``, ``"state_at_caps/<state>"``, ``"lambda_off_target"``,
    ``"learning_rate"``, ``"vanishing_gradients"`` or ``"constraint_violated"``; ``message``: what was seen, the
    likely cause, the fix (as printed).

    Args:
        key: the check's key (above; ``state_at_caps/<state>`` names the state).
        step: the global step of the report.
        message: the report's text.

    Example:
        >>> report = HealthReport("learning_rate", 100, "TrainingHealth, step 100: the parameters do not move")
        >>> report.key, report.step
        ('learning_rate', 100)
    """

    key: str
    step: int
    message: str


@dataclass
class _Window:
    """A check's view of the parameters: a sample of them (one vector) and the global step.

    The sample takes every k-th entry of every trainable parameter (None without parameters)."""

    step: int
    sample: torch.Tensor | None


def _sigmoid_slope(logit: float) -> float:
    s = 1.0 / (1.0 + math.exp(-abs(logit)))
    return s * (1.0 - s)


def _fmt_lrs(trainer: Trainer) -> str:
    lrs = sorted({float(g["lr"]) for opt in trainer.optimizers for g in opt.param_groups if "lr" in g})
    return ", ".join(f"{lr:g}" for lr in lrs) or "?"


class TrainingHealth(Callback):
    r"""Warn, in words, when a training run is going nowhere: what was seen, the likely cause and the fix to try.

    The checks are described after the Example.

    Args:
        check_every_n_steps: training batches between two checks (default 50). A check is a few norms, one read of
            the logged values and a copy of at most ``parameter_sample`` parameter entries; every 50 steps it costs
            well under 1 % of even the quickstart's step (``benchmarks/health_overhead.py`` measures it).
        patience: consecutive checks a condition (saturation, caps, λ, parameters, gradients) must hold before it
            is reported (default 2: a single check sees one batch, which can be atypical).
        first_epoch_checks: during the first training epoch of a ``fit``, check at least this often (every
            ``min(check_every_n_steps, batches_per_epoch // first_epoch_checks)`` batches; default 4: with
            ``patience=2`` a run stuck from its start is reported by the middle of its first epoch).
        objective_patience: steps over which the objective must not have moved (default 500: long enough that a
            slowly learning run moves by more than the tolerance, short enough to be named within a few epochs of
            small data).
        objective_tolerance: relative change of the objective's mean between the two halves of the last
            ``objective_patience`` steps below which it "has not moved" (default 1e-3: over its 6 epochs the
            quickstart moves by 5–16 % between the halves of every 500 steps; at lr 1e-6 by 0.004–0.04 %; an
            exactly stuck run by 0. Features × 100, whose saturated estimates are noisy, move by 0.2–1 %: the
            saturation check names that run).
        saturation_logit: |logit| beyond which a score counts as saturated (default 10: σ′(10) = 4.5e-5, 1/5,500
            of σ′'s peak, so a score there moves about 5,500 times slower than one near 0).
        saturated_share: share of scores (per class with binary labels) that must be saturated (default 0.5:
            "most"; the quickstart has 0 % saturated against their label at every check of its 6 epochs, while up
            to 17 % of a batch's scores lie beyond ±10 on their label's side; with features × 100, 100 % of the
            positives are below −10 from step 20 on).
        check_saturation: None (default): check when the module's objective maps scores through σ
            (``score_transform == "sigmoid"``); True / False force it on or off (the saturation of raw scores or of
            a BCE logit does not stop the gradient).
        cap_share: share of a step's updated state rows at one bound of Ω above which the projection is said to
            set the state (default 0.9: "near 1"; a sound Ω holds only the rows whose estimates reach it: 0 % in
            MOAP-V2 with β0 = 0.1 on the synthetic data, 100 % with β0 = 0.9. ``configs/libsvm/adap.yaml`` holds
            about 95 % at the cap on purpose, as its header explains: ``skip_checks: [state_at_caps]`` there).
        lambda_ratio: factor between ``train/share_above_lambda`` and ``train/top_k_share`` beyond which λ is said
            to miss the top-K threshold (default 3: a λ at the threshold leaves about K/N of the list above it, up
            to the sampling noise of the estimate, within a factor 1.7 in the MovieLens reproduction; a λ started
            at 0 with η0 = 0.01 leaves more than 30 % above where K/N is 10/65).
        lambda_slack: the share above λ must also differ from K/N by more than this (default 0.05 of the list). The
            share is estimated from each query's sampled list with item weights: with M sampled items one item
            weighs about 1/M of the list, so for a catalogue where K/N is below 1/M (recommendation: K = 10 of
            thousands of items, 100-300 sampled) an exact λ gives a share of 0 on most batches; the slack keeps that
            from reading as "λ above the threshold".
        parameter_tolerance: relative parameter change per step, ``‖w_t − w_s‖ / ‖w_s‖ / (t − s)`` between two
            checks, below which "the learning rate moves nothing" (default 1e-6: at that pace 10,000 steps change
            the weights by 1 %; the quickstart moves 1.4e-3 to 7.5e-3 per step, the same at lr 1e-6 2e-8; an Adam
            step moves each weight by about lr, so Adam at lr 1e-6 on weights of typical size 0.02, a fine-tuning
            setting, moves about 5e-5: not reported).
        gradient_tolerance: gradient norm (all trainable parameters) at or below which gradients "vanish" (default
            1e-8, absolute: the objectives here are O(1) averages, whose gradients are O(1e-3) to O(1) while the
            model learns; saturated sigmoid scores give exactly 0).
        constraint_tolerance: a constraint counts as violated when ``max_i h_i`` exceeds this (default 0: the
            constraints are ``h_i ≤ 0``).
        constraint_patience: evaluations in a row (epochs; ``val`` when logged, else ``train``) the worst
            constraint must stay violated, and not halve, before it is reported (default 3: a penalty method
            needs a few epochs to pull the iterate into the feasible set).
        parameter_sample: at most this many parameter entries are kept per check (an evenly strided sample of
            every trainable tensor; default 100,000: 400 KB in float32, the whole of any model up to that size, and
            for a larger one a sample whose relative change estimates the whole's within a few percent, far finer
            than the orders of magnitude between a stuck and a moving run).
        log_text: also write each report as TensorBoard text (``health/<check>``).
        skip_checks: names of checks not to report (:data:`CHECKS`: ``"objective_flat"``, ``"saturated_scores"``,
            ``"state_at_caps"``, ``"lambda_off_target"``, ``"learning_rate"``, ``"vanishing_gradients"``,
            ``"constraint_violated"``), e.g. ``state_at_caps`` for a paper's setting that holds the state at Ω's
            caps on purpose (``configs/libsvm/adap.yaml``).

    Raises:
        ValueError: a count (``check_every_n_steps``, ``patience``, ``first_epoch_checks``, ``objective_patience``,
            ``constraint_patience``, ``parameter_sample``) below 1; a tolerance (``objective_tolerance``,
            ``saturation_logit``, ``lambda_slack``, ``parameter_tolerance``, ``gradient_tolerance``) negative or NaN;
            ``saturated_share`` or ``cap_share`` outside (0, 1]; ``lambda_ratio`` not > 1; ``skip_checks`` naming
            something not in :data:`CHECKS`.

    Example:
        >>> health = TrainingHealth(check_every_n_steps=20, skip_checks=["state_at_caps"])
        >>> health.check_every_n_steps, health.patience, health.skip_checks, health.reports
        (20, 2, ('state_at_caps',), [])
        >>> TrainingHealth(skip_checks=["nan_loss"])
        Traceback (most recent call last):
            ...
        ValueError: TrainingHealth: skip_checks ['nan_loss'] are not checks; the checks are [...]

    Checks (each reported once per ``fit``, as a :class:`TrainingHealthWarning` on rank 0 and as TensorBoard text
    ``health/<check>`` on every TensorBoard logger; the reports are also kept in :attr:`reports`):

    * **objective flat**: the training objective's mean over the first and the second half of the last
      ``objective_patience`` steps differ by less than ``objective_tolerance`` (relative). The run is stuck, or it
      has converged (then further steps are wasted).
    * **saturated scores** (objectives that take ``σ(score)``: AP's and pAUC's ``score_transform="sigmoid"``;
      ``check_saturation`` forces it on or off): most scores sit beyond ``±saturation_logit``, where σ′ has
      vanished, so the surrogate passes no gradient to them. With binary labels ``y`` in the batch the share is
      taken per class, of the scores saturated against their label (positives below ``−saturation_logit``,
      negatives above ``+saturation_logit``): negatives pushed far down and positives far up are where the
      objective wants them, not stuck. The usual cause is unscaled features.
    * **state at Ω's caps**: a share ≥ ``cap_share`` of a projected state's updated rows sits at one bound of Ω
      (the logged ``train/<state>_at_upper/<c>`` / ``_at_lower/<c>``): the projection, not the estimate, sets u.
    * **K-SONG's λ off target**: the logged ``train/share_above_lambda`` is more than ``lambda_ratio`` times
      ``train/top_k_share`` (K/N) or less than its ``1/lambda_ratio``, and differs from it by more than
      ``lambda_slack``: λ does not track the top-K threshold.
    * **nothing moves**: the trainable parameters move by less than ``parameter_tolerance`` of their norm per step
      (net, between two checks) while the gradient is not zero: the learning rate is too small (or decayed to ~0).
    * **vanishing gradients**: the gradient norm after the check step is at most ``gradient_tolerance``.
    * **constraint violated**: the worst constraint value ``max_i h_i`` stays above ``constraint_tolerance`` at
      ``constraint_patience`` evaluations in a row without halving (needs a
      :class:`~fccolit.callbacks.ConstraintViolationLogger`, or any ``{stage}/max_violation`` logged).

    The step checks (all but the constraint check) run on rank 0 every ``check_every_n_steps`` training batches; in
    the first epoch of a ``fit`` at least ``first_epoch_checks`` times, so that a run going nowhere is named before
    its first epoch ends even on small data. Conditions other than the objective's must hold at ``patience``
    consecutive checks before they are reported (one check can be an unlucky batch).
    """

    def __init__(
        self,
        check_every_n_steps: int = 50,
        patience: int = 2,
        first_epoch_checks: int = 4,
        objective_patience: int = 500,
        objective_tolerance: float = 1e-3,
        saturation_logit: float = 10.0,
        saturated_share: float = 0.5,
        check_saturation: bool | None = None,
        cap_share: float = 0.9,
        lambda_ratio: float = 3.0,
        lambda_slack: float = 0.05,
        parameter_tolerance: float = 1e-6,
        gradient_tolerance: float = 1e-8,
        constraint_tolerance: float = 0.0,
        constraint_patience: int = 3,
        parameter_sample: int = 100_000,
        log_text: bool = True,
        skip_checks: Sequence[str] = (),
    ) -> None:
        for name, value in (("check_every_n_steps", check_every_n_steps), ("patience", patience),
                            ("first_epoch_checks", first_epoch_checks), ("objective_patience", objective_patience),
                            ("constraint_patience", constraint_patience), ("parameter_sample", parameter_sample)):
            if int(value) < 1:
                raise ValueError(f"TrainingHealth: {name} must be >= 1, got {value}")
        for name, value in (("objective_tolerance", objective_tolerance), ("saturation_logit", saturation_logit),
                            ("lambda_slack", lambda_slack),
                            ("parameter_tolerance", parameter_tolerance), ("gradient_tolerance", gradient_tolerance)):
            if not value >= 0:
                raise ValueError(f"TrainingHealth: {name} must be >= 0, got {value}")
        for name, value in (("saturated_share", saturated_share), ("cap_share", cap_share)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"TrainingHealth: {name} must be in (0, 1], got {value}")
        unknown = sorted(set(skip_checks) - set(CHECKS))
        if unknown:
            raise ValueError(f"TrainingHealth: skip_checks {unknown} are not checks; the checks are {list(CHECKS)}")
        if not lambda_ratio > 1.0:
            raise ValueError(f"TrainingHealth: lambda_ratio must be > 1, got {lambda_ratio}")
        self.check_every_n_steps, self.patience = int(check_every_n_steps), int(patience)
        self.first_epoch_checks, self.objective_patience = int(first_epoch_checks), int(objective_patience)
        self.objective_tolerance = float(objective_tolerance)
        self.saturation_logit, self.saturated_share = float(saturation_logit), float(saturated_share)
        self.check_saturation = check_saturation
        self.cap_share, self.lambda_ratio = float(cap_share), float(lambda_ratio)
        self.lambda_slack = float(lambda_slack)
        self.parameter_tolerance, self.gradient_tolerance = float(parameter_tolerance), float(gradient_tolerance)
        self.constraint_tolerance, self.constraint_patience = float(constraint_tolerance), int(constraint_patience)
        self.parameter_sample, self.log_text = int(parameter_sample), log_text
        self.skip_checks = tuple(skip_checks)
        #: every diagnosis reported in the current (or last) fit, in order
        self.reports: list[HealthReport] = []
        #: the statistics of the latest check, by name (``saturated_share``, ``parameter_change_per_step``,
        #: ``gradient_norm``, ``objective_change``): what the thresholds were compared with
        self.statistics: dict[str, float] = {}
        self._reset()

    # ------------------------------------------------------------------ bookkeeping
    def _reset(self) -> None:
        self.reports = []
        self.statistics = {}
        self._reported: set[str] = set()
        self._streaks: dict[str, int] = {}
        self._batches = 0  # training batches seen in this fit (rank 0)
        self._interval = self.check_every_n_steps
        self._first_epoch: int | None = None
        self._due = False
        self._hook: Any = None
        self._scores: torch.Tensor | None = None
        self._window: _Window | None = None  # the parameters at the previous check
        self._params: list[torch.Tensor] | None = None  # the trainable parameters (listed at the first check)
        self._objective_mark: tuple[float, float] | None = None  # the running (sum, count) at the previous check
        self._objective_means: list[tuple[int, float, float]] = []  # (step, window mean, window count)
        self._logged_read = -1  # the logging-step index of the last read of the logged values
        self._violations: dict[str, dict[int, float]] = {}  # stage -> epoch -> max violation (logged values)

    def _streak(self, key: str, holds: bool) -> int:
        self._streaks[key] = self._streaks.get(key, 0) + 1 if holds else 0
        return self._streaks[key]

    def _report(self, trainer: Trainer, key: str, seen: str, cause: str, fix: str) -> None:
        if key in self._reported or key.split("/")[0] in self.skip_checks:
            return
        self._reported.add(key)
        step = int(trainer.global_step)
        message = f"TrainingHealth, step {step}: {seen}\n  Likely cause: {cause}\n  Try: {fix}"
        self.reports.append(HealthReport(key, step, message))
        _warn(message)
        if self.log_text:
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_text(f"health/{key}", message.replace("\n", "  \n"), global_step=step)

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._reset()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._params = None  # listed again at the epoch's first check (a callback may have changed them)
        if self._first_epoch is None:
            self._first_epoch = trainer.current_epoch
        self._interval = self.check_every_n_steps
        batches = trainer.num_training_batches
        if trainer.current_epoch == self._first_epoch and isinstance(batches, int) and batches > 0:
            self._interval = max(1, min(self.check_every_n_steps, batches // self.first_epoch_checks))

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if trainer.global_rank != 0:
            return
        self._batches += 1
        self._due = self._batches % self._interval == 0
        if not self._due:
            return
        if self._window is None:  # the first check's window is its own step
            self._window = self._parameter_window(pl_module, trainer.global_step)
        self._scores = None
        if self._saturation_applies(pl_module):
            self._hook = pl_module.register_forward_hook(self._capture)

    def _capture(self, module: Any, args: Any, output: Any) -> None:
        if self._scores is None and isinstance(output, torch.Tensor) and output.is_floating_point():
            self._scores = output.detach()

    def _unhook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self._due:
            return
        self._due = False
        self._unhook()
        step = int(trainer.global_step)
        saturated = self._check_saturation(trainer, pl_module, batch)
        self._check_motion(trainer, pl_module, step, saturated)
        logged = self._fresh_logged(trainer)
        self._check_objective(trainer, pl_module, step, logged)
        if logged is not None:
            self._check_caps(trainer, pl_module, logged)
            self._check_lambda(trainer, pl_module, logged)
        self._scores = None

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._unhook()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.global_rank == 0 and not trainer.sanity_checking:
            self._check_constraints(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.global_rank == 0:
            self._check_constraints(trainer, pl_module)

    # ------------------------------------------------------------------ reading what is logged
    def _fresh_logged(self, trainer: Trainer) -> dict[str, float] | None:
        """The logged training values when the logger has written since the last read (None otherwise: a value
        read twice would count twice towards ``patience``)."""
        every = max(1, int(getattr(trainer, "log_every_n_steps", 1) or 1))
        index = int(trainer.global_step) // every
        if index == self._logged_read:
            return None
        self._logged_read = index
        out = {}
        for key, value in trainer.callback_metrics.items():
            if key.startswith("train/") and torch.is_tensor(value) and value.numel() == 1:
                out[key] = float(value)
        return out

    # ------------------------------------------------------------------ saturated scores
    def _saturation_applies(self, pl_module: LightningModule) -> bool:
        if "saturated_scores" in self.skip_checks:
            return False
        if self.check_saturation is not None:
            return bool(self.check_saturation)
        objective = getattr(pl_module, "objective", None)
        return getattr(objective, "score_transform", None) == "sigmoid"

    def _check_saturation(self, trainer: Trainer, pl_module: LightningModule, batch: Any) -> bool:
        """Whether most scores are saturated at this check (and report it after ``patience`` checks)."""
        scores = self._scores
        if scores is None or scores.numel() == 0:
            return False
        scores = scores.reshape(scores.shape[0], -1)[:, 0] if scores.dim() > 1 else scores
        limit = self.saturation_logit
        y = batch.get("y") if isinstance(batch, dict) else None
        labelled = torch.is_tensor(y) and y.numel() == scores.numel() and not y.is_floating_point()
        y = y.reshape(-1).to(scores.device) if labelled else torch.zeros_like(scores, dtype=torch.long)
        pos, neg = y == 1, y == 0
        values = [pos.sum(), neg.sum(), (pos & (scores < -limit)).sum(), (neg & (scores > limit)).sum(),
                  (scores.abs() > limit).sum(), scores.min(), scores.max()]
        n_pos, n_neg, pos_low, neg_high, beyond, lo, hi = torch.stack(
            [v.to(torch.float64) for v in values]).tolist()  # one synchronization
        shares: dict[str, float] = {}
        if labelled and n_pos + n_neg == scores.numel():  # binary labels: per class, against the label's direction
            if n_pos:
                shares["positives"] = pos_low / n_pos
            if n_neg:
                shares["negatives"] = neg_high / n_neg
        if not shares:
            shares["scores"] = beyond / scores.numel()
        worst = max(shares, key=shares.get)
        self.statistics["saturated_share"] = shares[worst]
        saturated = shares[worst] >= self.saturated_share
        if self._streak("saturated_scores", saturated) >= self.patience:
            where = {"positives": f"below −{limit:g}", "negatives": f"above +{limit:g}",
                     "scores": f"beyond ±{limit:g}"}[worst]
            # a DataModule with a feature_scaling option (the tabular ones) that was turned off
            scaling = getattr(getattr(trainer, "datamodule", None), "feature_scaling", None)
            scaling_fix = ("the DataModule's feature_scaling is 'none': turn it back on (feature_scaling: standard), "
                           "or " if scaling == "none" else "")
            self._report(
                trainer, "saturated_scores",
                f"most scores are saturated: {shares[worst]:.0%} of the batch's {worst} have logits {where} (this "
                "batch's scores range from "
                f"{lo:.3g} to {hi:.3g}). The objective maps scores through σ, and σ′ is below "
                f"{_sigmoid_slope(limit):.1e} there (its peak is 0.25), so these scores get almost no gradient and "
                "the ranking among them cannot change.",
                "input features that are not scaled (large raw values such as pixel intensities 0-255 or money "
                "amounts make the first layer's outputs, and so the logits, huge), or a learning rate so large that "
                "the first steps threw the scores far out.",
                scaling_fix
                + "standardize the features (zero mean, unit variance per column, with statistics from the training "
                f"split) or scale them to [0, 1]; and/or lower the learning rate (now {_fmt_lrs(trainer)}).",
            )
        return saturated

    # ------------------------------------------------------------------ parameters and gradients
    def _trainable(self, pl_module: LightningModule) -> list[torch.Tensor]:
        """The trainable parameters, listed once per epoch (walking a module with its metrics costs ~0.1 ms)."""
        if self._params is None:
            self._params = [p for p in pl_module.parameters() if p.requires_grad]
        return self._params

    @torch.no_grad()
    def _parameter_window(self, pl_module: LightningModule, step: int) -> _Window:
        params = self._trainable(pl_module)
        if not params:
            return _Window(step, None)
        stride = max(1, math.ceil(sum(p.numel() for p in params) / self.parameter_sample))
        device = params[0].device
        return _Window(step, torch.cat([p.detach().reshape(-1)[::stride].to(device) for p in params]))

    @torch.no_grad()
    def _check_motion(self, trainer: Trainer, pl_module: LightningModule, step: int, saturated: bool) -> None:
        previous = self._window
        current = self._window = self._parameter_window(pl_module, step)
        grads = [p.grad for p in self._trainable(pl_module) if p.grad is not None]
        norms = []  # every number of this check in one tensor: one synchronization
        if grads:
            norms.append(torch.stack(torch._foreach_norm(grads)).to(torch.float64).norm())
        compare = (previous is not None and previous.sample is not None and current.sample is not None
                   and previous.sample.shape == current.sample.shape and current.step > previous.step)
        if compare:
            norms += [previous.sample.norm().to(torch.float64),
                      (current.sample - previous.sample).norm().to(torch.float64)]
        values = torch.stack(norms).tolist() if norms else []
        grad_norm = values.pop(0) if grads else None
        if grad_norm is not None:
            self.statistics["gradient_norm"] = grad_norm
        vanishing = grad_norm is not None and grad_norm <= self.gradient_tolerance
        if grad_norm is not None and self._streak("vanishing_gradients", vanishing) >= self.patience:
            cause = ("the scores are saturated (see the saturated-scores warning): σ′ is ~0 where they are."
                     if saturated or "saturated_scores" in self._reported else
                     "the surrogate is flat where the model is: every hinge / margin term inactive (a margin too "
                     "small, or the objective already at its minimum on these batches), ReLUs that died after a too "
                     "large step, or a loss that does not depend on the parameters.")
            self._report(
                trainer, "vanishing_gradients",
                f"the gradient norm after the step is {grad_norm:.2e} (≤ {self.gradient_tolerance:g}) at "
                f"{self.patience} checks in a row: the optimizer has nothing to follow.",
                cause,
                "standardize the input features and lower the learning rate (now "
                f"{_fmt_lrs(trainer)}); if the validation metrics are already good, training has converged.",
            )
        if not compare:
            return
        size, moved = values
        if size == 0.0:
            return
        per_step = moved / size / (current.step - previous.step)
        self.statistics["parameter_change_per_step"] = per_step
        still = per_step < self.parameter_tolerance and not vanishing
        if self._streak("learning_rate", still) >= self.patience:
            gradient = f", while the gradient norm is {grad_norm:.2e}" if grad_norm is not None else ""
            self._report(
                trainer, "learning_rate",
                f"the trainable parameters move by {per_step:.1e} of their norm per step (net, over the last "
                f"{current.step - previous.step} steps; below {self.parameter_tolerance:g}){gradient}: at this "
                f"pace 10,000 steps change the weights by {min(per_step * 1e4, 1.0):.1e} of their size.",
                f"the learning rate ({_fmt_lrs(trainer)}) is far too small for this gradient scale, or a scheduler "
                "has decayed it to ~0.",
                "raise the learning rate by 10-1000x (the quickstart trains an MLP with Momentum at lr 0.5, Adam "
                "typically needs 1e-4 to 1e-2), and check the schedule (the lr-* curves of LearningRateMonitor).",
            )

    # ------------------------------------------------------------------ the objective
    def _check_objective(self, trainer: Trainer, pl_module: LightningModule, step: int,
                         logged: dict[str, float] | None) -> None:
        name = getattr(pl_module, "training_estimate_name", "train/objective")
        total, count = getattr(pl_module, "_objective_sum", None), getattr(pl_module, "_objective_count", None)
        if torch.is_tensor(total) and torch.is_tensor(count):
            now = (float(total), float(count))
            mark = self._objective_mark
            self._objective_mark = now
            if mark is None or now[1] < mark[1]:  # the first check, or the epoch's totals were reset
                mark = (0.0, 0.0) if mark is not None else None
            if mark is None or now[1] - mark[1] <= 0:
                return
            mean, weight = (now[0] - mark[0]) / (now[1] - mark[1]), now[1] - mark[1]
        else:  # a module without the running totals: the logged step value, when the logger wrote a new one
            if logged is None or name not in logged:
                return
            mean, weight = logged[name], 1.0
        if not math.isfinite(mean):
            return
        self._objective_means.append((step, mean, weight))
        start = step - self.objective_patience
        # keep one window that starts at or before the span
        while len(self._objective_means) > 1 and self._objective_means[1][0] <= start:
            self._objective_means.pop(0)
        if self._objective_means[0][0] > start or len(self._objective_means) < 3:
            return
        middle = step - self.objective_patience / 2
        first = [(m, w) for s, m, w in self._objective_means if s <= middle]
        second = [(m, w) for s, m, w in self._objective_means if s > middle]
        if not first or not second:
            return
        a = sum(m * w for m, w in first) / sum(w for _, w in first)
        b = sum(m * w for m, w in second) / sum(w for _, w in second)
        change = abs(b - a) / max(abs(a), abs(b), 1e-12)
        self.statistics["objective_change"] = change
        if change < self.objective_tolerance:
            self._report(
                trainer, "objective_flat",
                f"{name} has not moved over the last {self.objective_patience} steps: its mean was {a:.5g} in the "
                f"first half and {b:.5g} in the second (relative change {change:.1e} < {self.objective_tolerance:g}).",
                "the model is not learning (the other TrainingHealth warnings, if any, say why), or training has "
                "converged.",
                "if the validation metric is still poor, fix what the other warnings name (scale the features, "
                f"raise the learning rate, now {_fmt_lrs(trainer)}); if it is good, stop earlier (EarlyStopping on "
                "the config's selection metric): further steps are wasted.",
            )

    # ------------------------------------------------------------------ state at Ω's caps
    def _check_caps(self, trainer: Trainer, pl_module: LightningModule, logged: dict[str, float]) -> None:
        for key, value in logged.items():
            match = _CAP_KEY.match(key)
            if match is None:
                continue
            self.statistics[key] = value
            if self._streak(key, value >= self.cap_share) < self.patience:
                continue
            state, bound, component = match["state"], match["bound"], match["component"]
            cause, fix = self._cap_advice(trainer, pl_module)
            self._report(
                trainer, f"state_at_caps/{state}",
                f"{value:.0%} of the rows of state '{state}' updated at the last logged step sit at Ω's {bound} "
                f"bound (component {component}; {key}) at {self.patience} checks in a row: the projection, not "
                "the estimate, sets them, and ∇f is taken at the cap.",
                cause, fix,
            )

    @staticmethod
    def _cap_advice(trainer: Trainer, pl_module: LightningModule) -> tuple[str, str]:
        """The likely cause and the fix for a state held at Ω's caps, with this run's values where known."""
        gamma = getattr(pl_module, "ema_weight", None)
        product = None
        if getattr(pl_module, "scale_by_n_over_B1", False) and isinstance(gamma, (int, float)):
            n = getattr(getattr(pl_module, "state", None), "num_rows", None)
            b1 = getattr(getattr(trainer, "datamodule", None), "num_positives", None)
            if isinstance(n, int) and isinstance(b1, int) and b1 > 0:
                product = (gamma, n, b1)
        bounds = getattr(getattr(pl_module, "objective", None), "omega_bounds", None)
        if product is not None and product[0] * product[1] / product[2] > 1:
            gamma, n, b1 = product
            return (
                "the randomized coordinate update (1 − γ)u + γ·s·ĝ scales the new estimate by s = n/B1 (n state "
                "rows, B1 of them sampled per step: MOAP, MOAP-V2, ADAP), so it overshoots the estimate when γ·s > 1 "
                f"(here γ·s = {gamma:g} × {n}/{b1} = {gamma * n / b1:.3g}) and the projection clips it to the cap.",
                f"lower ema_weight (γ, β0) to at most B1/n = {b1 / n:.3g} so that γ·s ≤ 1, or sample more "
                "positives per batch (a larger B1); if the config holds the caps on purpose (a paper's setting), "
                "leave it.",
            )
        if bounds == "paper":
            return (
                "omega_bounds='paper' caps u_1 at M·m/n (Wang et al.'s Ω as printed), which the batch-mean "
                "estimates of batches holding more than their share of positives (a DualSampler oversamples them) "
                "exceed.",
                "use omega_bounds='estimator' (the box every batch estimate lies in).",
            )
        return (
            "Ω is tighter than the estimates: the moving average's weight on the new estimate, after any sampling "
            "factor, exceeds 1, or the score range Ω is derived from is too small for the scores.",
            "lower ema_weight (γ) so that γ times the update's sampling factor is at most 1; for raw scores "
            "(score_transform='identity') give a score_range that holds them.",
        )

    # ------------------------------------------------------------------ K-SONG's threshold
    def _check_lambda(self, trainer: Trainer, pl_module: LightningModule, logged: dict[str, float]) -> None:
        share, target = logged.get("train/share_above_lambda"), logged.get("train/top_k_share")
        if share is None or target is None or not target > 0:
            return
        self.statistics["share_above_lambda"], self.statistics["top_k_share"] = share, target
        off = (share > self.lambda_ratio * target or share < target / self.lambda_ratio) and \
            abs(share - target) > self.lambda_slack
        if self._streak("lambda_off_target", off) < self.patience:
            return
        below = share > target
        init, lr = getattr(pl_module, "lambda_init", "?"), getattr(pl_module, "lambda_lr", "?")
        objective = getattr(pl_module, "objective", None)
        tau1 = getattr(objective, "threshold_smoothing", None)
        tau2 = getattr(objective, "threshold_regularization", None)
        bound = (f"2/(τ2 + 1/(4τ1)) = {2.0 / (tau2 + 1.0 / (4.0 * tau1)):.3g} here"
                 if isinstance(tau1, float) and isinstance(tau2, float) and tau1 > 0 else "2/(τ2 + 1/(4τ1))")
        larger = (f"a larger lambda_lr, up to the step's stability bound {bound} (a larger τ1 raises it); if λ still "
                  "lags there, the scores move faster than one λ step per query per epoch can follow: lower the "
                  "model's learning rate")
        if init == "solve":
            cause = ("λ was solved at its query's first visit, but afterwards it moves by lambda_lr = "
                     f"{lr} times its gradient only when its query is in a batch (once per epoch per query), more "
                     "slowly than the model's scores move.")
            fix = larger + "."
        else:
            cause = (f"λ starts at lambda_init = {init!r} and moves by lambda_lr = {lr} times its gradient only when "
                     "its query is in a batch (once per epoch per query): too slowly to reach the threshold.")
            fix = ("lambda_init: solve (λ starts at the first batch's top-K threshold; the shipped K-SONG configs use "
                   f"it); and/or {larger}.")
        self._report(
            trainer, "lambda_off_target",
            f"K-SONG's threshold λ leaves {share:.1%} of each list above it (train/share_above_lambda) where a top-K "
            f"threshold leaves {target:.1%} (train/top_k_share, K/N): λ is far {'below' if below else 'above'} the "
            "(K+1)-th score, so ψ selects "
            + ("many more items than the top K (K-SONG drifts towards SONG)." if below else "almost no item."),
            cause, fix,
        )

    # ------------------------------------------------------------------ constraints
    def _constraint_history(self, trainer: Trainer, pl_module: LightningModule) -> tuple[str, list[float]] | None:
        """(stage, the worst constraint value per evaluation, oldest first): from a ConstraintViolationLogger's
        history when there is one, else from the logged ``{stage}/max_violation`` (one value per epoch)."""
        from fccolit.callbacks.constraints import ConstraintViolationLogger

        for callback in trainer.callbacks:
            if isinstance(callback, ConstraintViolationLogger):
                for stage in ("val", "train"):
                    rows = callback.history.get(stage) or []
                    if rows:
                        values = [max((v for v in h if not math.isnan(v)), default=-math.inf) for _, h in rows]
                        return stage, values
        metrics = trainer.callback_metrics
        for stage in ("val", "train"):
            value = metrics.get(f"{stage}/max_violation")
            if torch.is_tensor(value) and value.numel() == 1:
                self._violations.setdefault(stage, {})[int(trainer.current_epoch)] = float(value)
        for stage in ("val", "train"):
            if self._violations.get(stage):
                history = self._violations[stage]
                return stage, [history[e] for e in sorted(history)]
        return None

    def _check_constraints(self, trainer: Trainer, pl_module: LightningModule) -> None:
        found = self._constraint_history(trainer, pl_module)
        if found is None:
            return
        stage, values = found
        recent = values[-self.constraint_patience:]
        if len(recent) < self.constraint_patience or not all(v > self.constraint_tolerance for v in recent):
            return
        if recent[-1] <= 0.5 * recent[0]:  # halving over the window: converging, not stuck
            return
        objective = getattr(pl_module, "objective", None)
        rho, penalty = getattr(objective, "rho", None), getattr(objective, "penalty_name", None)
        weight = f"ρ = {rho:g} ({penalty} penalty)" if isinstance(rho, (int, float)) else "the penalty weight"
        self._report(
            trainer, "constraint_violated",
            f"the worst constraint value max_i h_i ({stage}/max_violation) stayed above {self.constraint_tolerance:g} "
            f"at the last {self.constraint_patience} evaluations without halving: "
            + " → ".join(f"{v:.4g}" for v in recent) + ".",
            f"the penalty is too weak against the objective ({weight}): a hinge penalty enforces the constraints only "
            "once ρ exceeds the multipliers (Chen et al., NeurIPS 2025, Prop. 5.2), a squared hinge leaves a "
            "violation of order 1/ρ; or a constraint cannot be met on this data (its tolerance is too tight).",
            "raise the objective's rho (e.g. ×10; the logged kkt_multiplier_<i> say how large the multipliers are), "
            "use the hinge or smoothed_hinge penalty instead of squared_hinge, or loosen the constraint's "
            "tolerance; the per-constraint values are logged as {stage}/constraint_<i>.".replace("{stage}", stage),
        )
