"""Continual learning with non-forgetting constraints (Chen et al., NeurIPS 2025, §6 and Appendix F.3, after Li et
al. 2024, "model developmental safety")::

    min_w  F(w) = (1/n) Σ_{i ∈ D} L_GCL(w; x_i, t_i)                            (D: the target class's data)
    s.t.   h_k(w) = L_k(w, D_k) − L_k(w_old, D_k) − ε_k ≤ 0,    k = 1..m        (one per protected class)

solved through the penalty problem ``F + (1/m) Σ_k p(h_k)`` of :class:`~fccolit.objectives.constrained.ConstrainedObjective`
(SONEX smooths a hinge ``p`` with its λ: the paper's "SONEX + smoothed hinge"; PenaltySOX with the squared hinge is
its baseline). ``w_old`` is a frozen copy of the model (:meth:`ContinualLearningObjective.bind_model`). See
:class:`ContinualLearningObjective` for the exact estimators.

References:
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
    * Li et al. 2024: Gang Li, Wendi Yu, Yao Yao, Wei Tong, Yingbin Liang, Qihang Lin and Tianbao Yang, "Model
      Developmental Safety: A Safety-Centric Method and Applications in Vision-Language Models",
      arXiv:2410.03955.
"""

from __future__ import annotations

import copy
import os
from typing import ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fccolit.objectives.base import FCCOObjective, InnerBatch
from fccolit.objectives.constrained import ConstrainedObjective
from fccolit.objectives.nonsmooth import PenaltyName

__all__ = ["ContinualLearningObjective", "GlobalContrastiveLoss"]


def labels_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The class index of every sample, ``[B]`` (``label`` if present, else ``y``)."""
    return (batch["label"] if "label" in batch else batch["y"]).reshape(-1).long()


class GlobalContrastiveLoss(FCCOObjective):
    r"""The two-way global contrastive loss of the target class's images, an FCCO of its own (Chen et al., App. F.3)::

        g_{0,a} = (mean_{j∈N} e^{z_{a,t_j} − z_{a,t_a}},  mean_{j∈N} e^{z_{j,t_a} − z_{a,t_a}})      [A, 2]
        f_0(u)  = τ Σ_k log(1 + n u_k)

    over the batch's target images a (rows: their ``index``) and its non-target samples N (the contrast set, n of
    them in the data), z = scores/τ. :class:`ContinualLearningObjective` holds it as its ``direct_objective``; SONEX tracks
    ``g_{0,a}`` in a state of its own (one row per training image, only target images visited, ``u_0 ≥ 0``).

    Args:
        target: the target class (column of the scores).
        temperature: τ.
        num_contrast: n (None: bound later by :class:`ContinualLearningObjective` from the data sizes).

    Raises:
        ValueError: in :meth:`num_rows`, sizes without ``num_samples``; in :meth:`inner`, a batch without ``index``;
            in :meth:`outer`, ``num_contrast`` not yet known.

    Example:
        >>> import torch
        >>> from fccolit.objectives.continual import GlobalContrastiveLoss
        >>> loss = GlobalContrastiveLoss(target=0, temperature=0.5, num_contrast=4)
        >>> batch = {"y": torch.tensor([0, 1, 2, 1]), "index": torch.arange(4)}
        >>> inner = loss.inner(torch.zeros(4, 3), batch)  # one row per target image
        >>> inner.index.tolist(), inner.value.tolist()
        ([0], [[1.0, 1.0]])
        >>> [round(v, 4) for v in loss.outer(inner.value, inner.context).tolist()]  # τ Σ_k log(1 + n u_k)
        [1.6094]
    """

    inner_dim: ClassVar[int] = 2

    def __init__(self, target: int, temperature: float, num_contrast: int | None = None) -> None:
        super().__init__()
        self.target, self.temperature = int(target), float(temperature)
        self.num_contrast = None if num_contrast is None else int(num_contrast)

    def num_rows(self, sizes: dict[str, int]) -> int:
        """One row per training sample (only the target class's images are ever visited)."""
        if "num_samples" not in sizes:
            raise ValueError(
                f"ContinualLearningObjective tracks one contrastive row per training image: the sizes lack 'num_samples' "
                f"({sorted(sizes)})"
            )
        return int(sizes["num_samples"])

    def state_bounds(self, sizes: dict[str, int]) -> tuple[object, object]:
        """``u_0 ≥ 0``: means of exponentials (an MSVR step may overshoot below 0)."""
        return 0.0, None

    def inner(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> InnerBatch:
        """The batch's target images (rows: their ``index``) and ``ĝ_{0,a}`` ``[A, 2]``: the means over the batch's
        non-target samples; no rows when the batch has no non-target sample."""
        if "index" not in batch:
            raise ValueError(
                "ContinualLearningObjective: the batch has no 'index' field (each sample's position in the training data), "
                f"which the contrastive term's rows need; it has {sorted(batch)}"
            )
        labels = labels_of(batch)
        logits = scores / self.temperature
        contrast = labels != self.target
        anchor = ~contrast if bool(contrast.any()) else torch.zeros_like(contrast)  # no contrast sample: no estimate
        positive = logits[anchor, self.target].unsqueeze(1)  # z_{a,t_a}, [A, 1]
        to_texts = logits[anchor][:, labels[contrast]]  # z_{a,t_j}, [A, N]
        to_images = logits[contrast, self.target].unsqueeze(0)  # z_{j,t_a}, [1, N]
        value = torch.stack([
            torch.exp(to_texts - positive).mean(1),
            torch.exp(to_images - positive).mean(1),
        ], dim=1)
        return InnerBatch(index=batch["index"].reshape(-1)[anchor].long(), value=value)

    def _contrast_count(self) -> int:
        if self.num_contrast is None:
            raise ValueError(
                "ContinualLearningObjective needs n, the number of training samples an anchor is contrasted with: pass "
                "num_contrast=..., or bind sizes with num_samples and num_class_<target> (BDD100KDataModule's)"
            )
        return self.num_contrast

    def outer(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``f_0(u) = τ Σ_k log(1 + n u_k)``, ``[A]``."""
        return self.temperature * torch.log1p(self._contrast_count() * u).sum(-1)

    def outer_grad(self, u: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
        """``∇f_0(u) = τ n / (1 + n u)``, ``[A, 2]``."""
        n = self._contrast_count()
        return self.temperature * n / (1.0 + n * u)

    def extra_repr(self) -> str:
        return f"target={self.target}, temperature={self.temperature}, num_contrast={self.num_contrast}"


class ContinualLearningObjective(ConstrainedObjective):
    r"""CLIP fine-tuning on a target class under non-forgetting constraints, penalized (Chen et al., NeurIPS 2025).

    One constraint per protected class (App. F.3).

    The model scores every image against every class prompt: ``scores [B, C]`` are cosine similarities
    (:class:`~fccolit.models.vision.CLIPClassifier` with ``logit_scale=1.0``) and ``z = s/τ`` the logits of both terms.
    The objective ``g_0`` is the two-way global contrastive loss of the target-class images (a
    :class:`GlobalContrastiveLoss`, :attr:`direct_objective`, tracked by SONEX in a state of its own; :meth:`direct` is
    its plug-in mini-batch value). Constraint k (one state row each, d' = 1), for protected class ``c_k`` with data
    ``D_k`` and ``ℓ(w; x, c) = CE(z(x), c)``::

        g_k(w) = (1/n_k) Σ_{x ∈ D_k} [ ℓ(w; x, c_k) − ℓ(w_old; x, c_k) ] − ε_k ≤ 0

    ``w_old`` is a frozen copy of the model taken by :meth:`bind_model` (every algorithm module calls it when built:
    the pre-trained weights), or the weights in ``old_weights_path``; it is a submodule without gradient, in eval mode,
    saved in every checkpoint (``objective.old_model.*``). At ``w = w_old`` every ``g_k`` is exactly ``−ε_k``. Batch
    fields: ``x`` (the images, for the old model), ``index`` (each sample's row in the training data) and the class
    index: ``label`` when present, else ``y``. Under DDP every rank evaluates both terms on the global batch (scores,
    labels and each rank's old-model scores gathered), so 2 processes train exactly as 1 (tested).

    Args:
        target: the target class (column of ``scores``), e.g. 5 = foggy in BDD100K's weather classes.
        protected: the constrained classes (None: every class of ``sizes["num_classes"]`` but the target).
        temperature: τ > 0 (0.05, the paper's).
        penalty: ``"hinge"``, ``"smoothed_hinge"`` or ``"squared_hinge"``
            (:class:`~fccolit.objectives.constrained.ConstrainedObjective`).
        rho: ρ, the penalty weight (the paper's grid: {0.01, 0.1, 1, 5, 10, 20, 40, 80} for SONEX + smoothed hinge,
            {1, 20, …, 800} for SOX + squared hinge).
        smoothing: λ of ``"smoothed_hinge"`` only.
        slack: ε ≥ 0, one value for every constraint or one per constraint (0: "no worse than the old model").
        old_weights_path: local weights of the old model (None: the model's own at :meth:`bind_model`).
        class_names: names of the classes (for :meth:`constraint_names`).
        num_contrast: ``n``, the training samples an anchor is contrasted with (None: the sizes' ``num_samples`` minus
            ``num_class_<target>``, or ``num_negatives`` of a binary target task; BDD100KDataModule gives both).

    Raises:
        ValueError: ``temperature ≤ 0``, ``num_contrast < 1``, protected classes that are not distinct class indices
            other than the target, a ``slack`` of the wrong length or negative, a target outside the data's classes
            (:meth:`bind_sizes`), or what :class:`~fccolit.objectives.constrained.ConstrainedObjective` raises.
        RuntimeError: constraints evaluated before the protected classes or the old model are known.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from fccolit.objectives import ContinualLearningObjective
        >>> model = nn.Linear(2, 3)  # scores of 3 classes
        >>> objective = ContinualLearningObjective(target=0, num_contrast=4)
        >>> objective.bind_sizes({"num_classes": 3}); objective.bind_model(model)
        >>> objective.constraint_names()
        ['no_worse_on_class_1', 'no_worse_on_class_2']
        >>> batch = {"x": torch.randn(4, 2), "y": torch.tensor([0, 1, 2, 1]), "index": torch.arange(4)}
        >>> objective.inner(model(batch["x"]), batch).value.tolist()  # g_k = 0 at w = w_old
        [[0.0], [0.0]]

    The contrastive term (paper F.3, with the printed second denominator's index corrected) and its FCCO form are in
    :class:`GlobalContrastiveLoss`. Its batch estimate is unbiased when the batch's non-target samples are a uniform
    draw of the data's, or a class-balanced draw of equally large classes (the BDD100K config caps every class at
    ``max_per_class``). Samples of classes neither target nor protected only serve as contrast negatives.
    """

    # Under DDP every rank evaluates the objective on the global batch (the contrast sets and each constraint's class
    # mean span all ranks' samples, as in one process): the scores, the labels and the old model's scores (computed on
    # each rank's own images, which are not gathered) are all-gathered.
    needs_global_batch: ClassVar[bool] = True
    batch_fields: ClassVar[tuple[str, ...]] = ("y", "label", "index", "old_scores")
    default_metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        target: int,
        protected: Sequence[int] | None = None,
        temperature: float = 0.05,
        penalty: PenaltyName = "hinge",
        rho: float = 10.0,
        smoothing: float | None = None,
        slack: float | Sequence[float] = 0.0,
        old_weights_path: str | os.PathLike | None = None,
        class_names: Sequence[str] | None = None,
        num_contrast: int | None = None,
    ) -> None:
        super().__init__(penalty=penalty, rho=rho, smoothing=smoothing)
        if not float(temperature) > 0.0:
            raise ValueError(f"the temperature τ must be > 0, got {temperature}")
        self.target, self.temperature = int(target), float(temperature)
        self.class_names = None if class_names is None else list(class_names)
        self.old_weights_path = None if old_weights_path is None else str(old_weights_path)
        self._slack = slack
        if num_contrast is not None and int(num_contrast) < 1:
            raise ValueError(f"num_contrast (n, the contrast samples of an anchor) must be >= 1, got {num_contrast}")
        # g_0, a global contrastive loss that is itself an FCCO: tracked by SONEX (CompositeObjective.direct_objective)
        self.contrastive = GlobalContrastiveLoss(self.target, self.temperature, num_contrast)
        self.protected: list[int] | None = None
        self.old_model: nn.Module | None = None
        self._memo: tuple[torch.Tensor, int | None, torch.Tensor] | None = None  # (images, their version, old scores)
        if protected is not None:
            self._set_protected(list(protected))

    # ------------------------------------------------------------------ configuration
    def _set_protected(self, protected: list[int], num_classes: int | None = None) -> None:
        protected = [int(c) for c in protected]
        bad = [c for c in protected if c < 0 or c == self.target or (num_classes is not None and c >= num_classes)]
        if bad or len(set(protected)) != len(protected) or not protected:
            raise ValueError(
                f"ContinualLearningObjective: protected classes must be distinct class indices other than the target "
                f"({self.target}){'' if num_classes is None else f' below num_classes={num_classes}'}; got {protected}"
            )
        slack = torch.as_tensor(self._slack, dtype=torch.float64).reshape(-1)
        if slack.numel() == 1:
            slack = slack.expand(len(protected)).clone()
        if slack.numel() != len(protected) or not bool((slack >= 0).all()):
            raise ValueError(f"slack (ε) must be one value >= 0 or one per protected class ({len(protected)}), got {self._slack}")
        self.protected, self.num_constraints = protected, len(protected)
        # class index → constraint row (−1: the target and unprotected classes); non-persistent, sized by the classes
        rows = torch.full((max(protected + [self.target]) + 1,), -1, dtype=torch.long)
        rows[torch.tensor(protected)] = torch.arange(len(protected))
        self.register_buffer("constraint_row", rows, persistent=False)
        self.register_buffer("slack", slack, persistent=False)

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        """Take the protected classes from ``sizes["num_classes"]`` (every class but the target) when not given."""
        super().bind_sizes(sizes)
        num_classes = sizes.get("num_classes")
        if num_classes is not None and not 0 <= self.target < int(num_classes):
            raise ValueError(f"ContinualLearningObjective: target={self.target} is not a class index (the data has {num_classes} classes)")
        if self.protected is None:
            if num_classes is None:
                raise ValueError(
                    "ContinualLearningObjective needs the protected classes: pass protected=[...] or use data with "
                    f"sizes['num_classes'] (e.g. BDD100KDataModule without target); the sizes are {sorted(sizes)}"
                )
            self._set_protected([c for c in range(int(num_classes)) if c != self.target], int(num_classes))
        elif num_classes is not None:
            self._set_protected(self.protected, int(num_classes))
        if self.num_contrast is None:
            if f"num_class_{self.target}" in sizes and "num_samples" in sizes:
                self.num_contrast = int(sizes["num_samples"]) - int(sizes[f"num_class_{self.target}"])
            elif "num_negatives" in sizes:
                self.num_contrast = int(sizes["num_negatives"])

    def bind_model(self, model: nn.Module) -> None:
        """Keep a frozen copy of ``model`` as ``w_old`` (then load ``old_weights_path`` into it, when given)."""
        old = copy.deepcopy(model)
        if self.old_weights_path is not None:
            from fccolit.models.vision import load_backbone_state

            load_backbone_state(old, self.old_weights_path, head_prefix="fc.", load_head=True)  # every tensor
        old.requires_grad_(False)
        self.old_model = old.eval()
        self._memo = None

    def train(self, mode: bool = True) -> "ContinualLearningObjective":
        super().train(mode)
        if self.old_model is not None:
            self.old_model.eval()  # w_old is evaluated, never trained (dropout, BatchNorm statistics)
        return self

    def constraint_names(self) -> list[str]:
        if self.protected is None:
            return super().constraint_names()
        names = self.class_names or [f"class_{c}" for c in range(max(self.protected) + 1)]
        return [f"no_worse_on_{names[c]}" for c in self.protected]

    # ------------------------------------------------------------------ the pieces
    labels_of = staticmethod(labels_of)

    @property
    def direct_objective(self) -> "GlobalContrastiveLoss":
        return self.contrastive

    @property
    def num_contrast(self) -> int | None:
        """n, the training samples an anchor is contrasted with (the contrastive term's)."""
        return self.contrastive.num_contrast

    @num_contrast.setter
    def num_contrast(self, value: int | None) -> None:
        self.contrastive.num_contrast = value

    def old_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``w_old``'s scores of the batch's images, ``[B, C]``, without gradient.

        A training step evaluates the constraints twice on the same images (at w_t and, for the MSVR correction, at
        w_{t−1}); the old model's scores of the last image tensor are reused while that tensor is unchanged.
        """
        if self.old_model is None:
            raise RuntimeError(
                "ContinualLearningObjective has no old model yet: the algorithm module binds it (every FCCOModule calls "
                "bind_model(model) when built); standalone, call objective.bind_model(model)"
            )
        if "old_scores" in batch:  # computed before the global batch was gathered (local_fields)
            return batch["old_scores"]
        x = batch["x"]
        version = None if x.is_inference() else x._version  # inference tensors (evaluation) cannot change in place
        memo = self._memo
        if memo is not None and memo[0] is x and memo[1] == version:
            return memo[2]
        with torch.no_grad():
            scores = self.old_model(x)
        self._memo = (x, version, scores)
        return scores

    def local_fields(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch plus ``old_scores`` ``[B, C]`` of this rank's images (gathered with the scores under DDP)."""
        return {**batch, "old_scores": self.old_scores(batch)}

    def sample_losses(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``ℓ(x, c) = CE(s(x)/τ, c)`` of every sample, ``[B]``."""
        if scores.dim() != 2:
            raise ValueError(
                f"ContinualLearningObjective needs scores [B, C] against every class prompt, got shape {tuple(scores.shape)}: "
                "use CLIPClassifier with one prompt per class, target=None (and logit_scale=1.0)"
            )
        return F.cross_entropy(scores / self.temperature, labels, reduction="none")

    def constraint_statistics(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per constraint k: ``Σ_{x∈batch∩D_k} (ℓ(w; x) − ℓ(w_old; x)) − ε_k n_k`` and ``n_k``, both ``[m, 1]``."""
        if self.protected is None:
            raise RuntimeError("ContinualLearningObjective: protected classes unknown; call bind_sizes(sizes) or pass protected")
        labels = self.labels_of(batch)
        old = self.old_scores(batch).to(scores.dtype)
        difference = self.sample_losses(scores, labels) - self.sample_losses(old, labels)
        known = labels < self.constraint_row.numel()
        rows = torch.where(known, self.constraint_row[labels.clamp(max=self.constraint_row.numel() - 1)], -1)
        member = (rows.unsqueeze(1) == torch.arange(self.num_constraints, device=rows.device)).to(scores.dtype)
        counts = member.sum(0)
        sums = member.t() @ difference - self.slack.to(scores.dtype) * counts
        return sums.unsqueeze(-1), counts.unsqueeze(-1)

    def extra_repr(self) -> str:
        return (f"target={self.target}, protected={self.protected}, temperature={self.temperature}, "
                f"penalty={self.outer_fn!r}, old_weights_path={self.old_weights_path!r}, num_contrast={self.num_contrast}")
