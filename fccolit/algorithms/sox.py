r"""The SOX family: SOX (Wang & Yang, ICML 2022, Algorithm 1) and its named special cases.

One mechanism, four choices. For the sampled outer indices ``i ∈ B_1`` (|B_1| = B1 rows, counted over the global
batch under DDP) and every step ``t``::

    u_i ← Π_Ω[ (1 − γ) u_i + γ · s · ĝ_i(w_t) ]            sampled rows      (first visit: u_i ← Π_Ω[ĝ_i(w_t)])
    u_j ← Π_Ω[ (1 − γ) u_j ]   if decay_unsampled,  else u_j unchanged      unsampled rows
    G   = (1/B1) Σ_{i∈B_1} ∇ĝ_i(w_t) ∇f_i(u_i^{t−1})  ("previous")  or  ∇f_i(u_i^t)  ("fresh")
    w   ← optimizer step on G                           (Momentum: v ← (1 − β) v + β G ; w ← w − η v)

with γ = ``ema_weight``, ``s = n/B1`` when ``scale_by_n_over_B1`` (else 1), Ω the objective's projection box
(:meth:`~fccolit.objectives.FCCOObjective.state_bounds`, e.g. ``AveragePrecisionSurrogate(project=True)``; none: no
projection) and the optimizer any of :mod:`fccolit.optim`. The unsampled decay is lazy
(:class:`~fccolit.state.IndexedState` with ``decay_unsampled=True``): a row's pending factor ``Π_s (1 − γ_s)`` is
applied when it is next read, which equals the eager per-step decay for boxes with upper bounds ≥ 0 and
non-negative rows (the AP state: k successive ``x ← Π_Ω[a_s x]`` with ``a_s ∈ [0, 1]`` equal one
``Π_Ω[(Π_s a_s) x]``).

The named methods are the presets below (their defining choices are fixed, the rest are the papers' defaults):

=============  ======================  ==========  ==============  ============  ==================================
class          paper                   ordering    unsampled rows  Ω required    optimizer (checked)
=============  ======================  ==========  ==============  ============  ==================================
``SOX``        Wang & Yang, Alg. 1     previous    unchanged       no            any (default Momentum β = 0.1)
``BSGD``       Wang & Yang, §2.1       fresh, γ=1  unchanged       no            Momentum β = 1 / SGD (plug-in)
``SOAP``       Wang et al., eq. (5)    fresh       unchanged       no            SGD, Adam or AMSGrad (``mode``)
``MOAP``       Wang & Yang, eq. (3)    fresh       × (1 − γ)       no            any (default Momentum β = 0.1)
``MOAPV1``     Wang et al., Alg. 1     fresh       unchanged       yes           any (default Momentum β1 = 0.1)
``MOAPV2``     Wang et al., Alg. 2     fresh       × (1 − β0)      yes           any (default Momentum β1 = 0.1)
``ADAP``       Wang et al., Alg. 3     fresh       × (1 − β0)      yes           AdaptiveMomentum, no bias corr.
=============  ======================  ==========  ==============  ============  ==================================

**MOAP of Wang & Yang is MOAP-V2 of Wang et al.** Wang & Yang's eq. (3) cites Wang et al. (2021), the AUPRC
paper below; its update (all rows decay by ``1 − γ``, sampled rows add ``γ (n/B1) ĝ_i``) is MOAP-V2's step 5 with
Wang et al.'s ``(β0, m, B)`` written ``(γ, n, B1)``, without the projection Π_Ω, and both feed the updated ``u``
into ∇f (Wang et al.: ``∇f([U_{t+1}]_i)``). So there is one implementation, :class:`MOAP`; :class:`MOAPV2` is the
same class with the projection required and Wang et al.'s tied ``β0 = β1``. With ``scale_by_n_over_B1=False``,
MOAP is the variant the SOX authors' public p-norm push code ran (``u *= 1 − γ; u[idx] += γ ĝ``: the decay
without the n/B1 factor).

Under DDP the state is all-gathered and updated identically on every rank (:mod:`fccolit.state`), B1 is the
number of sampled rows of the *global* batch, and the lazy-decay counters advance by the same ``log(1 − γ_t)``
on every rank (γ_t is set identically on every rank, e.g. by :mod:`fccolit.callbacks.schedules`).

Learning rates: the papers tune η (Wang & Yang §4.1: {1e-4, ..., 1e-1} for deep models; Wang et al. §4.1: {20,
10, 1, 0.1, 0.01} for linear models). :class:`SOX`'s default optimizer takes η = 1 (:attr:`SOX.default_lr`, measured
on tables of standardized features: ``benchmarks/results/own_data_defaults.md``); the presets' default optimizers use
``lr=1e-3``, a library assumption. Configure the optimizer explicitly in experiments.

References:
    * Wang & Yang (ICML 2022): Bokun Wang and Tianbao Yang, "Finite-Sum Coupled Compositional Stochastic
      Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396.
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Literal

import torch
from torch import nn

from fccolit import distributed
from fccolit._checks import check_weight as _check_weight
from fccolit.algorithms.base import FCCOModule
from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.optim import AdaptiveMomentum, Momentum
from fccolit.state import StateUpdate

__all__ = ["SOXFamily", "SOX", "BSGD", "SOAP", "MOAP", "MOAPV1", "MOAPV2", "ADAP"]

_ORDERINGS = ("previous", "fresh")
_FREE = object()  # a choice not given / not fixed


#: The choices of the SOX mechanism and SOX's defaults; a preset fixes some of them (its ``defining`` values).
SOX_CHOICES: dict[str, Any] = {
    "ema_weight": 0.1, "u_for_gradient": "previous", "decay_unsampled": False, "scale_by_n_over_B1": False,
}


class SOXFamily(FCCOModule):
    """The SOX mechanism (Wang & Yang, ICML 2022, arXiv:2202.12396): the base of SOX and of every preset.

    The update is the module docstring's. A preset declares the values that define it once, in the class attribute
    ``defining`` (e.g. BSGD: ``{"ema_weight": 1.0, "u_for_gradient": "fresh"}``), and takes its free choices as
    arguments; the constructor reads ``defining``, refuses a different value for a defined choice (naming
    :class:`SOX`, which takes any), and the CLI offers only the free choices. A defining value given back unchanged
    (a checkpoint's hyper-parameters) is accepted.

    Args:
        model: the backbone (scores ``[B]``).
        objective: the FCCO problem (:class:`~fccolit.objectives.FCCOObjective`).
        **kwargs: the choices of :data:`SOX_CHOICES` (``ema_weight`` — γ, ``u_for_gradient``, ``decay_unsampled``,
            ``scale_by_n_over_B1``: see :class:`SOX`; a preset's ``defining`` ones fixed) and the arguments of
            :class:`~fccolit.algorithms.base.FCCOModule`.

    Raises:
        ValueError: a defined choice given another value than the class's ``defining`` one; ``ema_weight`` (γ)
            outside (0, 1] (checked again at every step: a schedule may set it); ``u_for_gradient`` other than
            ``"previous"`` / ``"fresh"``; ``scale_by_n_over_B1`` without ``decay_unsampled``; from
            ``configure_optimizers``, an optimizer that :meth:`check_optimizer` refuses.
        FloatingPointError: a non-finite inner estimate, gradient or loss in a training step (the step is not taken).

    Example:
        A preset refuses another value for a choice that defines it:

        >>> from fccolit.algorithms import BSGD
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> BSGD.defining["ema_weight"], BSGD.defining["u_for_gradient"]
        (1.0, 'fresh')
        >>> BSGD(LinearScorer(), AveragePrecisionSurrogate(), ema_weight=0.5)
        Traceback (most recent call last):
        ...
        ValueError: BSGD is defined by ema_weight=1.0, got ema_weight=0.5: use fccolit.algorithms.sox.SOX, ...
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    #: the choices this class fixes (a subset of :data:`SOX_CHOICES`)
    defining: ClassVar[dict[str, Any]] = {}

    def __init__(self, model: nn.Module, objective: FCCOObjective, **kwargs: Any) -> None:
        choices = {}
        for name, default in SOX_CHOICES.items():
            fixed, given = self.defining.get(name, _FREE), kwargs.pop(name, _FREE)
            if fixed is not _FREE and given is not _FREE and given != fixed:
                raise ValueError(
                    f"{type(self).__name__} is defined by {name}={fixed!r}, got {name}={given!r}: use "
                    f"fccolit.algorithms.sox.SOX, which takes any {name}"
                )
            choices[name] = fixed if fixed is not _FREE else default if given is _FREE else given
        _check_weight("ema_weight", choices["ema_weight"], "γ")
        if choices["u_for_gradient"] not in _ORDERINGS:
            raise ValueError(f"u_for_gradient must be 'previous' or 'fresh', got {choices['u_for_gradient']!r}")
        if choices["scale_by_n_over_B1"] and not choices["decay_unsampled"]:
            raise ValueError(
                "scale_by_n_over_B1=True needs decay_unsampled=True: the n/B1 factor of MOAP's randomized coordinate "
                "update is only unbiased together with the decay of the unsampled rows (Wang & Yang, ICML 2022, "
                "eq. (3))"
            )
        self.ema_weight = choices["ema_weight"]
        self.u_for_gradient = choices["u_for_gradient"]
        self.decay_unsampled = bool(choices["decay_unsampled"])
        self.scale_by_n_over_B1 = bool(choices["scale_by_n_over_B1"])
        super().__init__(model, objective, **kwargs)

    # ------------------------------------------------------------------ state
    def configure_state(self) -> None:
        if self.objective is not None:
            self.state = self.make_state(
                self.objective.inner_dim, name="u", decay_unsampled=self.decay_unsampled, initial=self.initial_state
            )

    def sampled_rows(self, inner: InnerBatch) -> int:
        """B1: the number of outer indices sampled this step, over the global batch (identical on every rank)."""
        count = inner.index.numel()
        if self.synced or not distributed.is_distributed():
            return count
        total = torch.tensor([count], dtype=torch.long, device=inner.index.device)
        torch.distributed.all_reduce(total)
        return int(total.item())

    def update_state(self, inner: InnerBatch) -> StateUpdate:
        """The moving average ``u_i ← Π_Ω[(1 − γ) u_i + γ s ĝ_i]`` with s = ``n/B1`` when ``scale_by_n_over_B1``
        (MOAP), else 1; γ checked every step (a schedule may set it)."""
        _check_weight("ema_weight", self.ema_weight, "γ")
        state = self.tracked.state
        scale = state.num_rows / self.sampled_rows(inner) if self.scale_by_n_over_B1 else 1.0
        return state.update(inner.index, inner.value, ema_weight=self.ema_weight, sample_scale=scale, synced=self.synced)

    # ------------------------------------------------------------------ optimizer
    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Raise if ``optimizer`` is not the one the method is defined with (presets override; SOX takes any)."""

    def configure_optimizers(self) -> Any:
        configured = super().configure_optimizers()
        self.check_optimizer(configured["optimizer"] if isinstance(configured, dict) else configured)
        return configured


class SOX(SOXFamily):
    r"""SOX: selective moving averages of the inner values plus momentum (Wang & Yang, ICML 2022, arXiv:2202.12396).

    Wang & Yang's Algorithm 1, with every choice of the family free (see the module docstring for the formula): for
    the batch's outer indices ``u_i ← Π_Ω[(1 − γ) u_i + γ ĝ_i(w)]``, the others unchanged; the loss's gradient is
    ``mean_i ∇ĝ_i(w) ∇f_i(u_i)``; the optimizer (default: momentum β) steps on it.

    Args:
        model: the backbone (scores ``[B]``).
        objective: the FCCO problem (:class:`~fccolit.objectives.FCCOObjective`).
        ema_weight: γ, the weight of the new inner estimate (γ in SOX / MOAP of Wang & Yang; β in SOAP's eq. (5)
            and β0 in MOAP-V1/V2 and ADAP of Wang et al.). Default 0.1: Wang & Yang's best γ on CIFAR-10 (§4.1;
            γ = 1 was never best; 0.5 on CIFAR-100).
        u_for_gradient: ``"previous"`` (u^{t−1} in ∇f, as analysed by Wang & Yang, the default) or ``"fresh"``
            (u^t, as Wang & Yang's experiments and every algorithm of Wang et al. ran).
        decay_unsampled: multiply every unsampled row by ``1 − γ`` each step (MOAP / MOAP-V2 / ADAP's randomized
            coordinate update), lazily. Default False: SOX's selective update.
        scale_by_n_over_B1: multiply the new estimate of a sampled row by ``n/B1`` (n state rows, B1 sampled
            rows of the global batch; Wang & Yang eq. (3), Wang et al.'s ``m/B``). Needs ``decay_unsampled``.
        (the rest): see :class:`~fccolit.algorithms.base.FCCOModule`. The momentum β and step η belong to the
            optimizer; the default is ``Momentum(lr=1.0, momentum_weight=0.1)`` (β = 0.1, Wang & Yang's choice,
            §4.1; η = 1: :attr:`default_lr`).

    Raises:
        ValueError: ``ema_weight`` (γ) outside (0, 1] (checked again at every step: a schedule may set it);
            ``u_for_gradient`` other than ``"previous"`` / ``"fresh"``; ``scale_by_n_over_B1`` without
            ``decay_unsampled``; and :class:`~fccolit.algorithms.base.FCCOModule`'s.
        IndexError: a batch's outer index beyond the state's rows (``data_sizes`` of other data).
        FloatingPointError: a non-finite inner estimate, gradient or loss in a training step (the step is not taken).

    Example:
        Four steps by hand on one batch of an AP problem (``Trainer.fit`` runs the same step on a DataModule's
        batches; see ``configs/quickstart.yaml``):

        >>> import torch
        >>> from fccolit.algorithms import SOX
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> from fccolit.optim import Momentum
        >>> _ = torch.manual_seed(0)
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> module = SOX(LinearScorer(), AveragePrecisionSurrogate(), ema_weight=0.5, data_sizes=sizes,
        ...              optimizer=lambda params: Momentum(params, lr=1.0, momentum_weight=0.5))
        >>> module.state  # u_i: two components per positive i
        IndexedState(name=u, num_rows=2, dim=2, decay_unsampled=False, initial='first_estimate')
        >>> optimizer = module.configure_optimizers()
        >>> for step in range(4):
        ...     optimizer.zero_grad()
        ...     loss, f_u = module.compositional_loss(module(batch), batch)  # updates u; ∇loss is the estimator
        ...     loss.backward()
        ...     optimizer.step()
        ...     print(round(f_u.mean().item(), 4))  # the plug-in estimate of F = −(surrogate AP)
        -0.5022
        -0.5218
        -0.5568
        -0.5994
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.1,
        u_for_gradient: Literal["previous", "fresh"] = "previous",
        decay_unsampled: bool = False,
        scale_by_n_over_B1: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            model, objective, ema_weight=ema_weight, u_for_gradient=u_for_gradient, decay_unsampled=decay_unsampled,
            scale_by_n_over_B1=scale_by_n_over_B1, **kwargs,
        )

    #: η of the default optimizer, chosen by validation AP on tables of standardized features (the README's example;
    #: sweep, numbers and command: ``benchmarks/results/algorithm_notes.md``). For deep models the papers tune η in
    #: {1e-4, ..., 1e-1}: configure the optimizer.
    default_lr: float = 1.0

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """``Momentum(lr=default_lr, momentum_weight=0.1)``: Wang & Yang's update with β = 0.1."""
        return Momentum(params, lr=self.default_lr, momentum_weight=0.1)


# ---------------------------------------------------------------------------------------------- checks
def _plain_sgd(optimizer: torch.optim.Optimizer) -> bool:
    """The step is ``w ← w − η G``: Momentum with β = 1, or torch SGD without momentum."""
    if isinstance(optimizer, Momentum):
        return all(float(g["momentum_weight"]) == 1.0 for g in optimizer.param_groups)
    if type(optimizer) is torch.optim.SGD:
        return all(float(g["momentum"]) == 0.0 and not g["nesterov"] for g in optimizer.param_groups)
    return False


def _describe(optimizer: torch.optim.Optimizer) -> str:
    keys = ("lr", "momentum_weight", "momentum", "second_moment", "bias_correction", "amsgrad")
    group = optimizer.param_groups[0]
    return f"{type(optimizer).__name__}(" + ", ".join(f"{k}={group[k]!r}" for k in keys if k in group) + ")"


def _adam_like(optimizer: torch.optim.Optimizer, amsgrad: bool, bias_correction: bool = True) -> bool:
    """Adam (or AMSGrad) with or without bias correction: ``AdaptiveMomentum`` with that ``bias_correction``, or
    (bias-corrected only) torch's Adam."""
    if isinstance(optimizer, AdaptiveMomentum):
        variant = "amsgrad" if amsgrad else "adam"
        return all(bool(g["bias_correction"]) == bias_correction and g["second_moment"] == variant
                   for g in optimizer.param_groups)
    if type(optimizer) in (torch.optim.Adam, torch.optim.AdamW):
        return bias_correction and all(bool(g["amsgrad"]) == amsgrad for g in optimizer.param_groups)
    return False


# ---------------------------------------------------------------------------------------------- presets
class BSGD(SOXFamily):
    r"""BSGD: the plug-in mini-batch estimator, no momentum (Hu et al. 2020; Wang & Yang, ICML 2022, arXiv:2202.12396).

    The update (Wang & Yang, §2.1 and Table 1)::

        G = (1/B1) Σ_{i∈B_1} ∇ĝ_i(w) ∇f_i(ĝ_i(w)),    w ← w − η G

    i.e. SOX with γ = 1 and the fresh ordering (u_i = ĝ_i of this step) and β = 1. Biased for non-linear f_i
    (its bias floor shrinks only with the inner batch). The state is kept only to log ``train/objective``.

    Args:
        model: the backbone (scores ``[B]``).
        objective: the FCCO problem.
        **kwargs: :class:`~fccolit.algorithms.base.FCCOModule`'s arguments. The optimizer must take plain SGD steps
            (``Momentum(momentum_weight=1)``, the default with ``lr=1e-3`` [assumption], or ``torch.optim.SGD``
            without momentum).

    Raises:
        ValueError: ``ema_weight``, ``u_for_gradient``, ``decay_unsampled`` or ``scale_by_n_over_B1`` other than
            BSGD's (γ = 1, ``"fresh"``, False, False); from ``configure_optimizers``, an optimizer that is not plain
            SGD (β = 1, no momentum).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import BSGD
        >>> module = BSGD(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=sizes)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.state.visited()  # u_i = ĝ_i of this step for both positives
        tensor([True, True])
        >>> module.check_optimizer(torch.optim.Adam(module.parameters()))
        Traceback (most recent call last):
        ...
        ValueError: BSGD takes plain SGD steps (β = 1, no momentum; ...
    """

    defining = {"ema_weight": 1.0, "u_for_gradient": "fresh", "decay_unsampled": False, "scale_by_n_over_B1": False}

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        return Momentum(params, lr=1e-3, momentum_weight=1.0)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if not _plain_sgd(optimizer):
            raise ValueError(
                "BSGD takes plain SGD steps (β = 1, no momentum; Wang & Yang, ICML 2022, §2.1), got "
                f"{_describe(optimizer)}: use "
                "fccolit.optim.Momentum with momentum_weight: 1.0, or SOX for a momentum method"
            )


class SOAP(SOXFamily):
    r"""SOAP: selective moving average, fresh ``u``, no momentum (Qi et al., NeurIPS 2021, arXiv:2104.08736).

    Qi, Luo, Xu, Ji and Yang, "Stochastic Optimization of Areas Under Precision-Recall Curves with Provable
    Convergence", NeurIPS 2021, arXiv:2104.08736; as written by Wang et al. (AISTATS 2022, arXiv:2107.01173).

    The update (Wang et al.'s eq. (5); Wang & Yang, ICML 2022, §3.1)::

        u_i ← (1 − β) u_i + β ĝ_i   (i ∈ B_t; others unchanged; no projection in eq. (5))
        ∇̃  = (1/B) Σ_{i∈B_t} ∇ĝ_i ∇f([U_{t+1}]_i),    w ← w − η ∇̃          (mode "sgd")

    ``mode="adam"`` / ``"amsgrad"`` replace the last step by a standard Adam / AMSGrad step on ∇̃ ("SOAP (Adam)",
    "SOAP (AMSGrad)" of Wang et al.'s Table 1; the paper gives no details, so this is torch's bias-corrected Adam
    [assumption]): ``AdaptiveMomentum(bias_correction=True)`` ≙ ``torch.optim.Adam``.

    Args:
        ema_weight: the moving-average weight (β in Wang et al.'s eq. (5), γ in Wang & Yang). Default 0.9:
            LibAUC's ``APLoss`` default (the SOAP authors' library) [assumption; Wang et al. tune it in
            {0.9, 0.5, 0.1}].
        mode: ``"sgd"`` (default), ``"adam"`` or ``"amsgrad"``; selects the default optimizer (``lr=1e-3``
            [assumption]; Adam's β1 = 0.1 and β' = 0.001, torch's defaults) and the check of a configured one.
        bias_correction: with ``mode="adam"`` / ``"amsgrad"``, whether the Adam step is bias-corrected (default
            True, "standard Adam"; False is ADAP's uncorrected step, offered so that the two can be compared with
            the same second moment: ``benchmarks/reproduce/auprc_linear.py`` sweeps both).
        model, objective, (the rest): see :class:`SOX`. Ω: SOAP's eq. (5) has no projection; an objective with Ω
            (e.g. ``AveragePrecisionSurrogate(project=True)``) adds it.

    Raises:
        ValueError: ``mode`` not one of ``"sgd"``, ``"adam"``, ``"amsgrad"``; ``ema_weight`` (β) outside (0, 1];
            ``u_for_gradient``, ``decay_unsampled`` or ``scale_by_n_over_B1`` other than SOAP's (``"fresh"``, False,
            False); from ``configure_optimizers``, an optimizer other than ``mode``'s.

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import SOAP
        >>> module = SOAP(LinearScorer(), AveragePrecisionSurrogate(), mode="adam", data_sizes=sizes)
        >>> type(module.configure_optimizers()).__name__  # bias-corrected Adam on the estimator
        'AdaptiveMomentum'
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.u_for_gradient, f_u.shape  # f_i(u_i) of the two positives, at the fresh u
        ('fresh', torch.Size([2]))
    """

    MODES = ("sgd", "adam", "amsgrad")
    defining = {"u_for_gradient": "fresh", "decay_unsampled": False, "scale_by_n_over_B1": False}

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.9,
        mode: Literal["sgd", "adam", "amsgrad"] = "sgd",
        bias_correction: bool = True,
        **kwargs: Any,
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"SOAP mode must be one of {', '.join(map(repr, self.MODES))}, got {mode!r}")
        self.mode = mode
        self.bias_correction = bool(bias_correction)
        super().__init__(model, objective, ema_weight=ema_weight, **kwargs)

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        if self.mode == "sgd":
            return Momentum(params, lr=1e-3, momentum_weight=1.0)
        return AdaptiveMomentum(params, lr=1e-3, second_moment=self.mode, bias_correction=self.bias_correction)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        corrected = self.bias_correction
        ok = (_plain_sgd(optimizer) if self.mode == "sgd"
              else _adam_like(optimizer, amsgrad=self.mode == "amsgrad", bias_correction=corrected))
        if not ok:
            torch_equivalent = {"adam": ", or torch.optim.Adam", "amsgrad": ", or torch.optim.Adam with amsgrad: true"}
            expected = {
                "sgd": "plain SGD steps (fccolit.optim.Momentum with momentum_weight: 1.0, or torch.optim.SGD)",
                "adam": f"{'bias-corrected' if corrected else 'uncorrected'} Adam (fccolit.optim.AdaptiveMomentum with "
                f"bias_correction: {str(corrected).lower()}{torch_equivalent['adam'] if corrected else ''})",
                "amsgrad": f"{'bias-corrected' if corrected else 'uncorrected'} AMSGrad (fccolit.optim.AdaptiveMomentum "
                f"with second_moment: amsgrad and bias_correction: {str(corrected).lower()}"
                f"{torch_equivalent['amsgrad'] if corrected else ''})",
            }[self.mode]
            raise ValueError(f"SOAP (mode={self.mode!r}) takes {expected}; got {_describe(optimizer)}")


class MOAP(SOXFamily):
    r"""MOAP: the randomized coordinate update of ``u`` plus momentum (Wang & Yang, ICML 2022, arXiv:2202.12396).

    Wang & Yang's eq. (3): Wang et al.'s (AISTATS 2022, arXiv:2107.01173) MOAP-V2 without the projection (module
    docstring).

    Wang & Yang (ICML 2022) eq. (3) (no projection) and Wang et al. (AISTATS 2022) Algorithm 2 (MOAP-V2, with
    Π_Ω; see :class:`MOAPV2`)::

        u_i ← Π_Ω[ (1 − γ) u_i + γ (n/B1) ĝ_i ]   (i ∈ B_1),     u_j ← Π_Ω[ (1 − γ) u_j ]   (j ∉ B_1, lazily)
        G   = (1/B1) Σ_{i∈B_1} ∇ĝ_i ∇f_i(u_i^t),   v ← (1 − β) v + β G,   w ← w − η v

    A row's first visit sets ``u_i ← ĝ_i`` (unscaled, the library's first-visit rule; Wang et al. leave U_1 open).

    Args:
        ema_weight: γ (β0 in Wang et al.). Default 0.1 [assumption: the SOX authors' public experiment code runs
            MOAP with γ ∈ {0.5, 0.9}; Wang et al. tune β0 = β1 in {0.9, 0.5, 0.1}; 0.1 matches the default
            momentum β].
        scale_by_n_over_B1: the ``n/B1`` factor of eq. (3) (default True); False is the decay-only variant the
            SOX authors' code ran.
        model, objective, (the rest): see :class:`SOX`; default optimizer ``Momentum(lr=1e-3, momentum_weight=0.1)``.

    Raises:
        ValueError: ``ema_weight`` (γ) outside (0, 1]; ``u_for_gradient`` or ``decay_unsampled`` other than MOAP's
            (``"fresh"``, True).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import MOAP
        >>> module = MOAP(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=sizes)
        >>> module.state  # every row decays by 1 − γ each step, lazily
        IndexedState(name=u, num_rows=2, dim=2, decay_unsampled=True, initial='first_estimate')
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> loss.shape, module.state.visited()
        (torch.Size([]), tensor([True, True]))
    """

    defining = {"u_for_gradient": "fresh", "decay_unsampled": True}

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.1,
        scale_by_n_over_B1: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, objective, ema_weight=ema_weight, scale_by_n_over_B1=scale_by_n_over_B1, **kwargs)


class ProjectedSOX(SOXFamily):
    """The base of MOAP-V1, MOAP-V2 and ADAP (Wang et al., AISTATS 2022, arXiv:2107.01173): U projected onto Ω.

    Ω is the objective's box (:meth:`~fccolit.objectives.FCCOObjective.state_bounds`, e.g.
    ``AveragePrecisionSurrogate(project=True)``).

    Args:
        model: the backbone (scores ``[B]``).
        objective: the FCCO problem; it must define Ω unless ``require_projection=False``.
        ema_weight: β0, the weight of the new inner estimate (default 0.1).
        require_projection: raise unless the objective defines Ω (default True, as in the paper).
        **kwargs: the free choices of :class:`SOXFamily` and :class:`~fccolit.algorithms.base.FCCOModule`'s arguments.

    Raises:
        ValueError: the objective defines no Ω and ``require_projection`` is True; and :class:`SOXFamily`'s.

    Example:
        >>> from fccolit.algorithms import MOAPV1
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> MOAPV1(LinearScorer(), AveragePrecisionSurrogate(), data_sizes=sizes)
        Traceback (most recent call last):
        ...
        ValueError: MOAPV1 projects U onto Ω (Wang et al., AISTATS 2022, Algorithms 1-3, step 5), but the objective ...
        >>> MOAPV1(LinearScorer(), AveragePrecisionSurrogate(project=True), data_sizes=sizes).state.has_bounds
        True
    """

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.1,
        require_projection: bool = True,
        **kwargs: Any,
    ) -> None:
        self.require_projection = require_projection
        super().__init__(model, objective, ema_weight=ema_weight, **kwargs)

    def configure_state(self) -> None:
        super().configure_state()
        if self.require_projection and not self.state.has_bounds:
            raise ValueError(
                f"{type(self).__name__} projects U onto Ω (Wang et al., AISTATS 2022, Algorithms 1-3, step 5), but "
                f"the objective {type(self.objective).__name__} defines no Ω: use AveragePrecisionSurrogate(project=True) (in "
                "YAML: objective.init_args.project: true), or pass require_projection=False to run without the "
                "projection"
            )


class MOAPV1(ProjectedSOX):
    r"""MOAP-V1: SOAP's selective update with Π_Ω, plus momentum (Wang et al., AISTATS 2022, arXiv:2107.01173).

    The update (Wang et al.'s Algorithm 1)::

        [U_{t+1}]_i = Π_Ω[ (1 − β0) [U_t]_i + β0 ĝ_i ]   (i ∈ B_t; others unchanged)
        ∇̃ = (1/B) Σ_{i∈B_t} ∇ĝ_i ∇f([U_{t+1}]_i),   m ← (1 − β1) m + β1 ∇̃,   w ← w − η m

    Equals MOAP-V2 when B = m (every row sampled every step) and SOAP (SGD) when β1 = 1.

    Args:
        ema_weight: β0. Default 0.1 [assumption: Wang et al. tie β0 = β1 and tune them in {0.9, 0.5, 0.1}].
        require_projection: raise unless the objective defines Ω (default True, as in the paper).
        model, objective, (the rest): see :class:`SOX`; β1 and η are the optimizer's (default ``Momentum(lr=1e-3,
            momentum_weight=0.1)``).

    Raises:
        ValueError: the objective defines no Ω (with ``require_projection``); ``ema_weight`` (β0) outside (0, 1];
            ``u_for_gradient``, ``decay_unsampled`` or ``scale_by_n_over_B1`` other than MOAP-V1's (``"fresh"``,
            False, False).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import MOAPV1
        >>> module = MOAPV1(LinearScorer(), AveragePrecisionSurrogate(project=True), data_sizes=sizes)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.state.decay_unsampled, module.state.visited()  # selective: only the sampled rows move
        (False, tensor([True, True]))
    """

    defining = {"u_for_gradient": "fresh", "decay_unsampled": False, "scale_by_n_over_B1": False}


class MOAPV2(ProjectedSOX):
    r"""MOAP-V2: randomized coordinate update with Π_Ω, plus momentum (Wang et al., AISTATS 2022, arXiv:2107.01173).

    The update (Wang et al.'s Algorithm 2)::

        [U_{t+1}]_i = Π_Ω[ (1 − β0) [U_t]_i + β0 (m/B) ĝ_i ]   (i ∈ B_t)
        [U_{t+1}]_j = Π_Ω[ (1 − β0) [U_t]_j ]                 (j ∉ B_t: lazily, exactly the eager result)
        ∇̃ = (1/B) Σ_{i∈B_t} ∇ĝ_i ∇f([U_{t+1}]_i),   m ← (1 − β1) m + β1 ∇̃,   w ← w − η m

    Wang & Yang's :class:`MOAP` with the projection required (m = n rows, B = B1 sampled rows of the global batch).
    The linear experiments decrease η and β0 = β1 like 1/√t (:class:`fccolit.callbacks.schedules.InverseSqrtSchedule`).

    Args:
        ema_weight: β0. Default 0.1 [assumption, as :class:`MOAPV1`].
        require_projection: raise unless the objective defines Ω (default True).
        model, objective, (the rest): see :class:`SOX`; default optimizer ``Momentum(lr=1e-3, momentum_weight=0.1)``.

    Raises:
        ValueError: the objective defines no Ω (with ``require_projection``); ``ema_weight`` (β0) outside (0, 1];
            ``u_for_gradient``, ``decay_unsampled`` or ``scale_by_n_over_B1`` other than MOAP-V2's (``"fresh"``,
            True, True).

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import MOAPV2
        >>> module = MOAPV2(LinearScorer(), AveragePrecisionSurrogate(project=True), data_sizes=sizes)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.scale_by_n_over_B1, module.state.decay_unsampled, f_u.shape
        (True, True, torch.Size([2]))
    """

    defining = {**MOAP.defining, "scale_by_n_over_B1": True}


class ADAP(MOAPV2):
    r"""ADAP: MOAP-V2 with an Adam-type step, no bias correction (Wang et al., AISTATS 2022, arXiv:2107.01173).

    MOAP-V2's state and estimator; the step (Wang et al.'s Algorithm 3)::

        m ← (1 − β1) m + β1 ∇̃,    v ← h_t(v, ∇̃²),    w ← w − η m / (√v + δ)

    with ``h_t`` one of eq. (13)'s four second moments (Adam, AMSGrad, AdaGrad-mean, AdaBound with static
    bounds), selected by :class:`fccolit.optim.AdaptiveMomentum`'s ``second_moment`` (default ``"adam"``, the
    only variant of the paper's experiments). The optimizer must be an ``AdaptiveMomentum`` whose
    ``bias_correction`` is the module's.

    Args:
        ema_weight: β0. Default 0.1 [assumption, as :class:`MOAPV1`].
        bias_correction: whether the Adam-type step divides m and v by their bias corrections (default False:
            Algorithm 3 as printed; True is offered for the sweep below).
        model, objective, (the rest): see :class:`MOAPV2`; default optimizer ``AdaptiveMomentum(lr=1e-3,
            momentum_weight=0.1, second_moment_weight=ADAP.default_second_moment_weight, eps=1e-8)`` (β1 = 0.1
            [assumption: Wang et al. tie β0 = β1]; δ = 1e-8, torch's default [assumption]).

    Raises:
        ValueError: the objective defines no Ω (with ``require_projection``); ``ema_weight`` (β0) outside (0, 1];
            a MOAP-V2 choice other than MOAP-V2's; from ``configure_optimizers``, an optimizer that is not an
            ``AdaptiveMomentum`` with the module's ``bias_correction``.

    Example:
        >>> import torch
        >>> from fccolit.models import LinearScorer
        >>> from fccolit.objectives import AveragePrecisionSurrogate
        >>> batch = {"x": torch.randn(6, 3), "y": torch.tensor([1, 0, 0, 1, 0, 0]), "index": torch.arange(6),
        ...          "pos_index": torch.tensor([0, -1, -1, 1, -1, -1])}  # row of u for each positive
        >>> sizes = {"num_samples": 6, "num_positives": 2, "num_features": 3}
        >>> from fccolit.algorithms import ADAP
        >>> module = ADAP(LinearScorer(), AveragePrecisionSurrogate(project=True), data_sizes=sizes)
        >>> group = module.configure_optimizers().param_groups[0]
        >>> group["second_moment_weight"], group["bias_correction"]  # β′ and Algorithm 3 as printed
        (0.1, False)
        >>> loss, f_u = module.compositional_loss(module(batch), batch)
        >>> module.state.visited()
        tensor([True, True])

    The paper gives neither β' (the second moment's weight) nor δ: the default β' is
    :attr:`default_second_moment_weight` = 0.1, the best of the a9a sweep over β' ∈ {0.1, 0.01, 0.001} × bias
    correction (``benchmarks/reproduce/auprc_linear.py``; numbers and command in
    ``benchmarks/results/algorithm_notes.md``); ``configs/libsvm/adap.yaml`` ships the sweep's best cell (bias
    correction on).
    """

    default_second_moment_weight = 0.1  # β' [not in the paper]: the a9a sweep's (benchmarks/results/algorithm_notes.md)

    def __init__(
        self,
        model: nn.Module,
        objective: FCCOObjective,
        ema_weight: float = 0.1,
        bias_correction: bool = False,
        **kwargs: Any,
    ) -> None:
        self.bias_correction = bool(bias_correction)
        super().__init__(model, objective, ema_weight=ema_weight, **kwargs)

    def default_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        return AdaptiveMomentum(params, lr=1e-3, momentum_weight=0.1, bias_correction=self.bias_correction,
                                second_moment_weight=self.default_second_moment_weight)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, AdaptiveMomentum) or any(
            bool(g["bias_correction"]) != self.bias_correction for g in optimizer.param_groups
        ):
            corrected = "with" if self.bias_correction else "without"
            raise ValueError(
                f"ADAP (bias_correction={self.bias_correction}) takes the Adam-type step of Wang et al. (AISTATS "
                f"2022), Algorithm 3 {corrected} bias correction: use fccolit.optim.AdaptiveMomentum (bias_correction: "
                f"{str(self.bias_correction).lower()}; second_moment: adam, amsgrad, adagrad or adabound), "
                f"got {_describe(optimizer)}"
            )
