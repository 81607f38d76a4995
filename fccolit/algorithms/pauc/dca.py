r"""DCA and proximal DCA for the ranked-range DC programs: the baselines of Yao, Lin & Yang (NeurIPS 2022,
Appendix E.4, E.5)."""

from __future__ import annotations

import math
from typing import Any, Iterator

import torch
from torch import nn

from fccolit.algorithms.pauc.base import SBCDLoop
from fccolit.algorithms.pauc.thresholds import ThresholdTracker
from fccolit.objectives.pauc import RankedRangeObjective

__all__ = ["DCA", "ProximalDCA"]


class DCA(SBCDLoop):
    r"""DCA: the difference-of-convex baseline for the ranked-range programs (Yao, Lin & Yang, NeurIPS 2022).

    Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive
    Rates", NeurIPS 2022, arXiv:2203.01505, Appendix E.4, Algorithm 4 (DCA after Hu et al. 2020).

    Outer step k: a deterministic subgradient ``ξ^{(k)} ∈ ∂f^m(w^{(k)})`` from one pass over the whole training set
    (the ``m`` highest-scored negatives are the same for every positive, so it is
    ``Σ_i Σ_{j ∈ Top_m} ∇s_ij(w^{(k)})``), then ``T_k`` SBCD steps on the linearised problem (37)::

        w   ← w − η_t [ĝ_n − ξ + L(w − w^{(k)})]          (ĝ_n: masked at the n-level thresholds λ_n)
        λ_i ← λ_i + θ_t (p̂_i − n/N₋)

    and the **last** iterate ``(w^{(T)}, λ^{(T)})`` is the output (Algorithm 4, step 11), the next anchor
    ``w^{(k+1)}``. ``L = prox_weight``; ``L = 0`` is DCA, ``L > 0`` proximal DCA (subproblem (38)), whose quadratic
    term is taken in closed form like Algorithm 1's prox step (the proximal step with ν = 1/L,
    :class:`~fccolit.algorithms.double_loop.ProximalStep`; the paper only says "a SBCD method similar to
    Algorithm 1"). λ is warm-started across outer steps (an assumption: the paper does not say). Scale-free units as
    :class:`~fccolit.algorithms.pauc.PAUCRange` (η_t = c_k/(N₊N₋) ⇒ the step on ĝ is ``c_k``; ``ξ`` and L are
    divided by N₊N₋ too). E.2: T_k = C(k+1)² with C ∈ {100, 200, 500}, η_t and θ_t as for AGD-SBCD
    ("DCA.Changing.lr").

    The pass for ξ uses the model in eval mode (a deterministic function of w) in chunks of
    ``subgradient_batch_size``; it reads the training set from the trainer's DataModule (``train_dataset``) or
    training DataLoader. It counts ``N`` gradient evaluations. Under DDP every rank computes ξ on the whole training
    set (identical on every rank; a baseline, not optimised). Validation evaluates the live (last) iterate.

    Args:
        model, objective: as :class:`~fccolit.algorithms.pauc.PAUCRange` (PartialAUCRangeSurrogate or SumOfRankedRangeLoss).
        lr, lambda_lr, inner_steps, inner_growth, step_decay, lambda_init: as
            :class:`~fccolit.algorithms.pauc.PAUCRange` (default C = 100, the smallest of E.2's grid).
        prox_weight: L in scale-free units (L_paper / (N₊N₋)); 0 for DCA.
        subgradient_batch_size: samples per forward pass when computing ξ.

    Raises:
        ValueError: ``prox_weight`` not a finite number >= 0; ``subgradient_batch_size`` < 1;
            :class:`~fccolit.algorithms.pauc.SBCDLoop`'s argument checks; in a training step, a batch without
            positives or negatives.
        TypeError: ``objective`` not a :class:`~fccolit.objectives.pauc.RankedRangeObjective`.
        RuntimeError: at an outer step with α > 0, no training set to compute ξ on (the trainer has neither a
            DataModule with ``train_dataset`` nor a training DataLoader over a Dataset).

    Example:
        >>> from fccolit.algorithms.pauc import DCA
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = DCA(LinearScorer(), data_sizes=data.sizes)
        >>> module.loop, module.proximal_nu  # L = 0: no proximal term (ν = ∞)
        ({'grad_evals': 0, 'outer_step': 0, 'inner_step': 0}, inf)
        >>> module.lambda_n.values.shape, module.xi  # the n-level thresholds (one per positive) and ξ
        (torch.Size([7]), tensor([0., 0., 0., 0.]))
        >>> DCA(LinearScorer(), data_sizes=data.sizes, subgradient_batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: subgradient_batch_size must be >= 1, got 0
    """

    def __init__(
        self,
        model: nn.Module,
        objective: RankedRangeObjective | None = None,
        lr: float = 1.0,
        lambda_lr: float | None = None,
        inner_steps: int = 100,
        inner_growth: float = 2.0,
        step_decay: bool = True,
        lambda_init: str | float = "batch",
        prox_weight: float = 0.0,
        subgradient_batch_size: int = 4096,
        **kwargs: Any,
    ) -> None:
        if not (math.isfinite(prox_weight) and prox_weight >= 0.0):
            raise ValueError(f"prox_weight (L) must be a finite number >= 0, got {prox_weight}")
        if int(subgradient_batch_size) < 1:
            raise ValueError(f"subgradient_batch_size must be >= 1, got {subgradient_batch_size}")
        self.prox_weight = float(prox_weight)
        self.subgradient_batch_size = int(subgradient_batch_size)
        super().__init__(
            model, objective, lr=lr, lambda_lr=lambda_lr, inner_steps=inner_steps, inner_growth=inner_growth,
            step_decay=step_decay, lambda_init=lambda_init, **kwargs,
        )

    @property
    def proximal_nu(self) -> float:
        """ν = 1/L of the proximal term ``(L/2)‖w − w^{(k)}‖²`` (``math.inf`` for DCA, L = 0)."""
        return 1.0 / self.prox_weight if self.prox_weight > 0.0 else math.inf

    def configure_state(self) -> None:
        super().configure_state()
        self.lambda_n = ThresholdTracker(self.make_rows(), self.state_dtype, name="lambda_n")
        self.flat_buffer("xi", 0.0)  # ξ^{(k)} (scale-free)

    # ------------------------------------------------------------------ ξ = ∇f̃^m(w) on the whole training set
    def training_dataset(self) -> Any:
        """The training set, from the trainer's DataModule (``train_dataset``) or its training DataLoader."""
        trainer = self.trainer
        dataset = getattr(getattr(trainer, "datamodule", None), "train_dataset", None)
        if dataset is None:
            loader = trainer.train_dataloader
            dataset = getattr(loader, "dataset", None)
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__} computes a full-data subgradient every outer step and could not find the "
                "training set: fit with a DataModule that has train_dataset, or a DataLoader over a Dataset."
            )
        return dataset

    def dataset_chunks(self, dataset: Any) -> Iterator[dict[str, torch.Tensor]]:
        """``dataset`` in batches of ``subgradient_batch_size`` rows, on the module's device, floating fields in the
        parameters' dtype."""
        size, dtype = len(dataset), self.anchor.dtype
        for start in range(0, size, self.subgradient_batch_size):
            indices = list(range(start, min(start + self.subgradient_batch_size, size)))
            if hasattr(dataset, "__getitems__"):
                chunk = dataset.__getitems__(indices)
            else:
                chunk = torch.utils.data.default_collate([dataset[i] for i in indices])
            chunk = {k: v.to(self.device) for k, v in chunk.items()}
            yield {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in chunk.items()}

    def full_subgradient(self) -> tuple[torch.Tensor, int]:
        """``(ξ, N)``: ``∇f̃^m`` at the live parameters over the whole training set (scale-free), and N."""
        dataset = self.training_dataset()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                parts = list(self.dataset_chunks(dataset))
                scores = torch.cat([self.model(c[self.input_key]).reshape(-1) for c in parts])
            fields = {k: torch.cat([c[k] for c in parts]) for k in self.objective.batch_fields}
            coefficients = self.objective.component_score_gradient(scores, fields, self.objective.alpha)
            xi = torch.zeros_like(self.anchor)
            params = self.trainable()
            offset = 0
            for c in parts:
                size = c[self.input_key].shape[0]
                with torch.enable_grad():
                    out = self.model(c[self.input_key]).reshape(-1)
                    grads = torch.autograd.grad((out * coefficients[offset : offset + size].to(out.dtype)).sum(), params)
                xi += torch.cat([g.reshape(-1) for g in grads])
                offset += size
        finally:
            self.model.train(was_training)
        return xi, int(scores.shape[0])

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.ensure_anchor()
        if self.loop["inner_step"] == 0:  # a new outer step: ξ^{(k)} at the anchor w^{(k)}
            if self.objective.alpha > 0.0:
                xi, n = self.full_subgradient()
                self.xi.copy_(xi)
                self.count(n)
            else:  # f^0 ≡ 0
                self.xi.zero_()
        # the v step on ĝ − ξ (the linear term's gradient added in closed form) with the proximal term (L > 0)
        self.sbcd_step(batch, self.lambda_n, self.objective.beta, lambda: self.add_linear_gradient(self.xi, -1.0))
        if self.end_inner_step():
            self.end_outer_step()  # w^{(k+1)} = the last iterate


class ProximalDCA(DCA):
    r"""Proximal DCA: :class:`DCA` with a proximal term in every subproblem (Yao, Lin & Yang, NeurIPS 2022).

    Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive
    Rates", NeurIPS 2022, arXiv:2203.01505, Appendix E.5 (proximal DCA after Wen et al. 2018): the proximal term
    ``(L/2)‖w − w^{(k)}‖²`` in every subproblem (38).

    Args: as :class:`DCA`; ``prox_weight`` (L, scale-free: L_paper/(N₊N₋)) must be > 0. Default 10⁻³ = 1/μ' of
    :class:`~fccolit.algorithms.pauc.PAUCRange`'s default, an assumption: the paper tunes L ∈ {10⁻⁵ … 1} in its own
    units, which after dividing by N₊N₋ (≈ 10⁸ on a9a) makes the term vanish, and its Table 2 shows proximal
    DCA ≈ DCA.

    Raises:
        ValueError: ``prox_weight`` not > 0 (``prox_weight=0`` is :class:`DCA`), and :class:`DCA`'s.
        TypeError, RuntimeError: as :class:`DCA`.

    Example:
        >>> from fccolit.algorithms.pauc import ProximalDCA
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> from fccolit.models import LinearScorer
        >>> data = SyntheticBinaryDataModule(num_samples=40, num_features=3, pos_fraction=0.25, batch_size=8,
        ...                                  num_positives=2)
        >>> module = ProximalDCA(LinearScorer(), data_sizes=data.sizes, prox_weight=0.01)
        >>> module.prox_weight, module.proximal_nu  # the v step's proximal term has ν = 1/L
        (0.01, 100.0)
        >>> ProximalDCA(LinearScorer(), data_sizes=data.sizes, prox_weight=0.0)
        Traceback (most recent call last):
        ...
        ValueError: ProximalDCA needs prox_weight (L) > 0, got 0.0; prox_weight=0 is DCA
    """

    def __init__(self, model: nn.Module, objective: RankedRangeObjective | None = None, prox_weight: float = 1e-3, **kwargs: Any) -> None:
        if not prox_weight > 0.0:
            raise ValueError(f"ProximalDCA needs prox_weight (L) > 0, got {prox_weight}; prox_weight=0 is DCA")
        super().__init__(model, objective, prox_weight=prox_weight, **kwargs)
