r"""Plain (non-compositional) listwise ranking losses over the slates of a ranking batch: LambdaRank, ApproxNDCG,
NeuralNDCG and ListNet, the baselines that Qiu et al. (ICML 2022, §7, Tables 1, 5 and 6) compare SONG and K-SONG
against.

Each loss takes the scores of a batch of slates ``[B, L]`` (B query rows, each a list of L entries), their relevance
labels ``[B, L]`` and the padding mask ``[B, L]`` (True on real entries; the ``mask`` field of the ranking batch,
:mod:`fccolit.objectives.ranking_batch`), and returns one scalar: the mean over the batch's slates of the slate's loss.
They keep no per-index state; :class:`~fccolit.algorithms.ranking.MiniBatchRanking` trains them with the model, data,
warm-up and schedule of the FCCO ranking algorithms.

Conventions shared by all of them (:class:`ListwiseRankingLoss`):

* NDCG of a slate is computed on the slate itself: gain ``G(y) = 2^y − 1`` (``gain="exp2"``, the papers' and allRank's
  choice) or ``G(y) = y`` (``"linear"``), discount ``D(r) = 1/log2(1 + r)`` at the 1-based rank r among the slate's
  real entries, and the ideal DCG ``Z`` of the slate's own labels sorted in decreasing order (the training slate is
  what the loss sees, as in allRank; the batch field ``ideal_dcg`` of the query's whole list is not used).
* **A slate with Z = 0** (no entry with a positive gain: nothing to rank) **is masked out**: it adds nothing to the
  loss and is not counted in the mean over slates. A batch without any slate with Z > 0 has the loss 0 (with a
  gradient of zeros).
* **Padding is ignored**: padded entries take no part in ranks, pairs, sums or sorts, their scores may be anything
  (even NaN or ±inf), and they get a zero gradient.

References:
    * Burges, Ragno & Le (NeurIPS 2006): Christopher J. C. Burges, Robert Ragno and Quoc V. Le, "Learning to Rank
      with Nonsmooth Cost Functions", NeurIPS 2006; and Christopher J. C. Burges, "From RankNet to LambdaRank to
      LambdaMART: An Overview", Microsoft Research Technical Report MSR-TR-2010-82, 2010 (the σ and λ_ij used here).
    * Qin, Liu & Li (2010): Tao Qin, Tie-Yan Liu and Hang Li, "A general approximation framework for direct
      optimization of information retrieval measures", Information Retrieval 13(4), 375–397, 2010.
    * Pobrotyn & Białobrzeski (2021): Przemysław Pobrotyn and Radosław Białobrzeski, "NeuralNDCG: Direct Optimisation
      of a Ranking Metric via Differentiable Relaxation of Sorting", arXiv:2102.07831, 2021; NeuralSort: Aditya Grover,
      Eric Wang, Aaron Zweig and Stefano Ermon, "Stochastic Optimization of Sorting Networks via Continuous
      Relaxations", ICLR 2019, arXiv:1903.08850; Sinkhorn scaling: Richard Sinkhorn, "A Relationship Between
      Arbitrary Positive Matrices and Doubly Stochastic Matrices", Ann. Math. Statist. 35(2), 1964.
    * Qiu et al. (ICML 2022): Zi-Hao Qiu, Quanqi Hu, Yongjian Zhong, Lijun Zhang and Tianbao Yang, "Large-scale
      Stochastic Optimization of NDCG Surrogates for Deep Learning with Provable Convergence", ICML 2022,
      arXiv:2202.12183.
"""

from __future__ import annotations

from typing import Any, NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fccolit._checks import check_choice
from fccolit.metrics.functional.ranking import Gain

__all__ = [
    "ListwiseRankingLoss", "LambdaRankLoss", "ApproxNDCGLoss", "ListNetLoss", "NeuralNDCGLoss", "Slates", "neural_sort",
    "sinkhorn_scaling",
]

#: a column or row sum of the Sinkhorn iteration below this value is taken as this value (allRank's ``DEFAULT_EPS``)
SINKHORN_MIN_SUM = 1e-10


def _check_positive(name: str, value: float, who: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{who}: {name} must be a number > 0, got {value!r}")
    return float(value)


def _check_top_k(top_k: int | None, who: str) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{who}: top_k must be a positive int or None (the whole slate), got {top_k!r}")
    return top_k


def _discounts(length: int, like: Tensor) -> Tensor:
    """``[length]``: ``1/log2(1 + r)`` for the ranks ``r = 1..length``, in the dtype and device of ``like``."""
    ranks = torch.arange(1, length + 1, dtype=like.dtype, device=like.device)
    return 1.0 / torch.log2(1.0 + ranks)


class Slates(NamedTuple):
    """A batch of slates as the losses read it (:meth:`ListwiseRankingLoss.slates`), every tensor zero on padding.

    Attributes:
        scores: ``[B, L]`` the scores, 0 on padding (padded scores, whatever they were, get no gradient).
        relevance: ``[B, L]`` the labels in the scores' dtype, 0 on padding.
        gains: ``[B, L]`` ``G(y)``, 0 on padding.
        mask: ``[B, L]`` bool, True on real entries.
        ideal_dcg: ``[B]`` Z of each slate (its real entries sorted by gain; cut at ``top_k`` when the loss has one).
        valid: ``[B]`` bool, ``ideal_dcg > 0``: the slates that count.
    """

    scores: Tensor
    relevance: Tensor
    gains: Tensor
    mask: Tensor
    ideal_dcg: Tensor
    valid: Tensor


class ListwiseRankingLoss(nn.Module):
    r"""Base of the plain listwise ranking losses: a batch of slates in, the mean over its slates with Z > 0 out.

    A subclass implements :meth:`slate_losses` (one loss per slate ``[B]`` from :class:`Slates`); :meth:`forward`
    checks the inputs, builds the slates (gains, the slate's ideal DCG Z, padding zeroed) and averages the losses of
    the slates with ``Z > 0`` (the module docstring's conventions).

    Args:
        gain: ``"exp2"`` for ``G(y) = 2^y − 1`` (default: Burges et al., Qin et al., Pobrotyn & Białobrzeski, Qiu et
            al. and allRank) or ``"linear"`` for ``G(y) = y``.

    Shapes:
        scores ``[B, L]``, relevance ``[B, L]`` (≥ 0 on real entries), mask ``[B, L]`` bool or None (no padding) →
        a scalar.

    Raises:
        ValueError: ``gain`` not one of the choices; in :meth:`forward`, scores that are not ``[B, L]``, relevance or
            mask of another shape, or a negative relevance label on a real entry.

    Example:
        >>> import torch
        >>> from fccolit.objectives import ApproxNDCGLoss
        >>> loss = ApproxNDCGLoss()
        >>> slates = loss.slates(torch.tensor([[0.5, 2.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]),
        ...                      torch.tensor([[True, True, False]]))
        >>> slates.gains, slates.ideal_dcg, slates.valid
        (tensor([[1., 0., 0.]]), tensor([1.]), tensor([True]))
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False
    #: cut the slate's ideal DCG at this rank (None: the whole slate); NeuralNDCG's ``top_k`` sets it
    top_k: int | None = None

    def __init__(self, gain: Gain = "exp2") -> None:
        super().__init__()
        check_choice("gain", gain, get_args(Gain))
        self.gain = gain

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options().items())

    def options(self) -> dict[str, Any]:
        """The loss's options, as its constructor takes them (for ``repr``)."""
        return {"gain": self.gain}

    # ------------------------------------------------------------------ inputs
    def slates(self, scores: Tensor, relevance: Tensor, mask: Tensor | None = None) -> Slates:
        """The checked inputs as :class:`Slates` (gains, Z, padding zeroed).

        Raises:
            ValueError: see the class docstring.
        """
        who = type(self).__name__
        if scores.dim() != 2:
            raise ValueError(f"{who} expects scores [B, L] (one score per slate entry), got {tuple(scores.shape)}")
        if relevance.shape != scores.shape:
            raise ValueError(f"{who}: relevance {tuple(relevance.shape)} must have the scores' shape {tuple(scores.shape)}")
        if mask is None:
            mask = torch.ones_like(scores, dtype=torch.bool)
        elif mask.shape != scores.shape:
            raise ValueError(f"{who}: mask {tuple(mask.shape)} must have the scores' shape {tuple(scores.shape)}")
        mask = mask.to(device=scores.device, dtype=torch.bool)
        zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
        y = torch.where(mask, relevance.to(device=scores.device, dtype=scores.dtype), zero)
        if bool((y < 0).any()):
            row = int(torch.nonzero(y < 0)[0, 0])
            raise ValueError(f"{who}: slate {row} has a negative relevance label on a real entry; labels must be ≥ 0 "
                             "(mark padding with the mask, not with a label of −1)")
        gains = torch.exp2(y) - 1.0 if self.gain == "exp2" else y
        gains = torch.where(mask, gains, zero)
        ideal = torch.sort(gains, dim=1, descending=True).values * _discounts(scores.shape[1], scores)
        if self.top_k is not None:
            ideal = ideal[:, : self.top_k]
        ideal_dcg = ideal.sum(1)
        return Slates(torch.where(mask, scores, zero), y, gains, mask, ideal_dcg, ideal_dcg > 0)

    # ------------------------------------------------------------------ the loss
    def slate_losses(self, slates: Slates) -> Tensor:
        """``[B]`` the loss of every slate (finite on the slates with Z = 0, which :meth:`forward` leaves out)."""
        raise NotImplementedError(f"{type(self).__name__} must implement slate_losses(slates) -> [B]")

    def forward(self, scores: Tensor, relevance: Tensor, mask: Tensor | None = None) -> Tensor:
        """The mean of :meth:`slate_losses` over the slates with Z > 0 (0 when there is none)."""
        slates = self.slates(scores, relevance, mask)
        losses = self.slate_losses(slates)
        count = slates.valid.sum().clamp_min(1).to(losses.dtype)
        return torch.where(slates.valid, losses, torch.zeros_like(losses)).sum() / count

    @staticmethod
    def safe_ideal_dcg(slates: Slates) -> Tensor:
        """``[B]`` Z, with 1 where Z = 0 (those slates' losses are left out; dividing by 1 keeps them finite)."""
        return torch.where(slates.valid, slates.ideal_dcg, torch.ones_like(slates.ideal_dcg))


class LambdaRankLoss(ListwiseRankingLoss):
    r"""LambdaRank: the pairwise logistic loss weighted by |ΔNDCG| of swapping the pair (Burges et al., NeurIPS 2006).

    For a slate with scores s, gains G, ranks r (by the current scores) and ideal DCG Z, over the pairs of real
    entries with ``y_i > y_j``:

    .. math::

        \ell = \sum_{y_i > y_j} |\Delta \mathrm{NDCG}_{ij}| \, \log\bigl(1 + e^{-\sigma (s_i - s_j)}\bigr), \qquad
        |\Delta \mathrm{NDCG}_{ij}| = \frac{|G_i - G_j| \, |D(r_i) - D(r_j)|}{Z}

    with the weight held constant (it depends on the scores only through the ranks), so the gradient is Burges's
    lambdas: ``∂ℓ/∂s_i = Σ_{j: y_i>y_j} λ_ij − Σ_{j: y_j>y_i} λ_ji`` with ``λ_ij = −σ |ΔNDCG_ij| / (1 + e^{σ(s_i −
    s_j)})`` (Burges, MSR-TR-2010-82, §4). This is allRank's ``lambdaLoss`` with ``weighing_scheme=
    "lambdaRank_scheme"`` (the loss Qiu et al. ran as "LambdaRank", σ = 1, k = None), up to two constant factors:
    the natural log here (allRank's default takes log2, i.e. 1/ln 2 times this) and the mean over slates (allRank
    sums over the batch). Ranks: by decreasing score, ties in list order (a stable sort); only ``|D(r_i) − D(r_j)|``
    depends on them.

    Args:
        slope: σ, the slope of the pairwise logistic (RankNet's σ; default 1.0, allRank's and Qiu et al.'s value).
        gain: ``"exp2"`` (``2^y − 1``, default) or ``"linear"``.

    Shapes:
        scores ``[B, L]``, relevance ``[B, L]``, mask ``[B, L]`` or None → a scalar. Memory ``O(B L²)``.

    Raises:
        ValueError: ``slope`` ≤ 0 or ``gain`` not a choice; in :meth:`forward`, inputs as
            :class:`ListwiseRankingLoss` says.

    Example:
        >>> import torch
        >>> from fccolit.objectives import LambdaRankLoss
        >>> scores = torch.tensor([[0.5, 2.0, 0.0], [1.0, 3.0, 7.0]], requires_grad=True)
        >>> relevance = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # the second slate has Z = 0: left out
        >>> mask = torch.tensor([[True, True, False], [True, True, True]])
        >>> loss = LambdaRankLoss()(scores, relevance, mask)
        >>> round(loss.item(), 4)  # |ΔNDCG| = 1 − 1/log2(3) for the one pair, times log(1 + e^{1.5})
        0.6279
        >>> loss.backward()
        >>> scores.grad  # Burges's lambdas; zero on padding and on the left-out slate
        tensor([[-0.3017,  0.3017,  0.0000],
                [ 0.0000,  0.0000,  0.0000]])
    """

    def __init__(self, slope: float = 1.0, gain: Gain = "exp2") -> None:
        super().__init__(gain=gain)
        self.slope = _check_positive("slope (σ)", slope, type(self).__name__)

    def options(self) -> dict[str, Any]:
        return {"slope": self.slope, **super().options()}

    @staticmethod
    def ranks(slates: Slates) -> Tensor:
        """``[B, L]`` the 1-based rank of every real entry by decreasing score, ties in list order (padding last)."""
        key = torch.where(slates.mask, slates.scores.detach(), torch.full_like(slates.scores, -torch.inf))
        order = torch.sort(key, dim=1, descending=True, stable=True).indices
        positions = torch.arange(1, key.shape[1] + 1, device=key.device).expand_as(order)
        return torch.empty_like(order).scatter_(1, order, positions)

    def delta_ndcg(self, slates: Slates) -> Tensor:
        """``[B, L, L]`` ``|ΔNDCG_ij|`` of swapping entries i and j at the current ranks (0 on padded pairs)."""
        discount = torch.where(slates.mask, 1.0 / torch.log2(1.0 + self.ranks(slates).to(slates.scores.dtype)),
                               torch.zeros_like(slates.scores))
        delta = (slates.gains.unsqueeze(2) - slates.gains.unsqueeze(1)).abs() \
            * (discount.unsqueeze(2) - discount.unsqueeze(1)).abs()
        return delta / self.safe_ideal_dcg(slates)[:, None, None]

    def slate_losses(self, slates: Slates) -> Tensor:
        pairs = (slates.relevance.unsqueeze(2) > slates.relevance.unsqueeze(1)) \
            & slates.mask.unsqueeze(2) & slates.mask.unsqueeze(1)
        margin = slates.scores.unsqueeze(2) - slates.scores.unsqueeze(1)  # s_i − s_j
        terms = self.delta_ndcg(slates).detach() * F.softplus(-self.slope * margin)
        return torch.where(pairs, terms, torch.zeros_like(terms)).sum((1, 2))


class ApproxNDCGLoss(ListwiseRankingLoss):
    r"""ApproxNDCG: minus NDCG with each rank replaced by a sigmoid-smoothed rank (Qin, Liu & Li, Inf. Retr. 2010).

    .. math::

        \hat\pi_i = 1 + \sum_{j \ne i} \frac{1}{1 + e^{\alpha (s_i - s_j)}}, \qquad
        \ell = -\frac{1}{Z} \sum_i \frac{2^{y_i} - 1}{\log_2(1 + \hat\pi_i)}

    over the slate's real entries (Qin et al., §4, the position function approximation; no truncation). As α → ∞ the
    approximate rank π̂_i tends to the true rank of a slate with distinct scores, and −ℓ to its NDCG. This is
    allRank's ``approxNDCGLoss`` (the loss Qiu et al. ran as "ApproxNDCG", α = 1) except that slates with Z = 0 are
    left out of the mean (allRank counts them as 0) and allRank's clamp of the sigmoid at 1e-10 is not applied.

    Args:
        slope: α, the sigmoid's slope in the approximate rank (default 1.0: allRank's default and the value of the
            ApproxNDCG runs of Pobrotyn & Białobrzeski and of Qiu et al.; Qin et al. treat α as a parameter that
            trades accuracy of the approximation against smoothness).
        gain: ``"exp2"`` (``2^y − 1``, Qin et al.'s, default) or ``"linear"``.

    Shapes:
        scores ``[B, L]``, relevance ``[B, L]``, mask ``[B, L]`` or None → a scalar. Memory ``O(B L²)``.

    Raises:
        ValueError: ``slope`` ≤ 0 or ``gain`` not a choice; in :meth:`forward`, inputs as
            :class:`ListwiseRankingLoss` says.

    Example:
        >>> import torch
        >>> from fccolit.objectives import ApproxNDCGLoss
        >>> scores, relevance = torch.tensor([[0.5, 2.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]])
        >>> round(float(ApproxNDCGLoss()(scores, relevance)), 4)  # π̂ ≈ 2.2 (the true rank is 2)
        -0.5967
        >>> round(float(ApproxNDCGLoss(slope=1e4)(scores, relevance)), 4)  # −NDCG = −1/log2(3)
        -0.6309
    """

    def __init__(self, slope: float = 1.0, gain: Gain = "exp2") -> None:
        super().__init__(gain=gain)
        self.slope = _check_positive("slope (α)", slope, type(self).__name__)

    def options(self) -> dict[str, Any]:
        return {"slope": self.slope, **super().options()}

    def approximate_ranks(self, slates: Slates) -> Tensor:
        """``[B, L]`` π̂ of every entry (1 on padding): ``1 + Σ_{real j ≠ i} σ(−α(s_i − s_j))``."""
        others = slates.mask.unsqueeze(1) & ~torch.eye(slates.mask.shape[1], dtype=torch.bool, device=slates.mask.device)
        below = torch.sigmoid(-self.slope * (slates.scores.unsqueeze(2) - slates.scores.unsqueeze(1)))
        return 1.0 + torch.where(others, below, torch.zeros_like(below)).sum(2)

    def slate_losses(self, slates: Slates) -> Tensor:
        dcg = (slates.gains / torch.log2(1.0 + self.approximate_ranks(slates))).sum(1)
        return -dcg / self.safe_ideal_dcg(slates)


class ListNetLoss(ListwiseRankingLoss):
    r"""ListNet: the cross-entropy between the labels' and the scores' top-one distributions (Cao et al., ICML 2007).

    .. math::

        \ell = -\sum_i \operatorname{softmax}(y)_i \, \log \operatorname{softmax}(s)_i

    over the slate's real entries, with the raw labels y as the target's logits (Cao et al., §4.2 with φ = exp: the
    top-one probabilities). This is allRank's ``listNet`` (the loss Qiu et al. ran as "ListNet" on learning-to-rank
    data, whose baselines come from allRank), computed with a log-softmax instead of allRank's
    ``log(softmax + 1e-10)``, and with slates without a relevant entry left out of the mean (the base class's rule).
    It differs from the listwise cross-entropy of SONG's warm-up (:class:`~fccolit.objectives.SOLCListwiseCELoss`,
    LibAUC's "ListNet"), which sums ``−log softmax(s)_i`` over the relevant entries alone, whatever their grade: on
    graded labels ListNet puts more of the target on the higher grades.

    Args:
        gain: only decides which slates count (``Z > 0``: a slate with a label above 0); the target is the labels'
            softmax either way.

    Shapes:
        scores ``[B, L]``, relevance ``[B, L]``, mask ``[B, L]`` or None → a scalar. Memory ``O(B L)``.

    Raises:
        ValueError: in :meth:`forward`, inputs as :class:`ListwiseRankingLoss` says.

    Example:
        >>> import torch
        >>> from fccolit.objectives import ListNetLoss
        >>> scores, relevance = torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]])
        >>> round(float(ListNetLoss()(scores, relevance)), 4)  # uniform scores: −log(1/2), whatever the target
        0.6931
        >>> round(float(ListNetLoss()(torch.tensor([[1.0, 0.0]]), relevance)), 4)  # the target itself: its entropy
        0.5822

    Reference: Zhe Cao, Tao Qin, Tie-Yan Liu, Ming-Feng Tsai and Hang Li, "Learning to Rank: From Pairwise Approach to
    Listwise Approach", ICML 2007.
    """

    def slate_losses(self, slates: Slates) -> Tensor:
        lowest = torch.finfo(slates.scores.dtype).min  # padding: no probability, and finite even on a padded slate
        target = torch.softmax(torch.where(slates.mask, slates.relevance, lowest), dim=1)
        log_p = torch.log_softmax(torch.where(slates.mask, slates.scores, lowest), dim=1)
        return -torch.where(slates.mask, target * log_p, torch.zeros_like(log_p)).sum(1)


def neural_sort(scores: Tensor, mask: Tensor, temperature: float) -> Tensor:
    r"""NeuralSort's relaxed sorting matrix P̂ (Grover et al., ICLR 2019, eq. (5)), per slate over its real entries.

    For a slate of n real entries, row i (rank i, 1-based, i ≤ n) is
    ``P̂[i, :] = softmax_j(((n + 1 − 2i) s_j − Σ_k |s_j − s_k|) / τ)`` over the real j and k; P̂ tends to the
    permutation matrix that sorts s in decreasing order as τ → 0 (distinct scores). Rows i > n and padded columns are 0.

    Args:
        scores: ``[B, L]``, any value on padding (not read).
        mask: ``[B, L]`` bool, True on real entries.
        temperature: τ > 0.

    Returns:
        ``[B, L, L]``: ``[b, i, j]`` the weight of entry j at rank i + 1 in slate b (each real row sums to 1).

    Raises:
        ValueError: ``temperature`` ≤ 0.

    Example:
        >>> import torch
        >>> p = neural_sort(torch.tensor([[0.0, 3.0, 1.0]]), torch.tensor([[True, True, True]]), temperature=0.01)
        >>> p[0].round()  # rank 1 is entry 1 (score 3), rank 2 entry 2, rank 3 entry 0
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
    """
    tau = _check_positive("temperature (τ)", temperature, "neural_sort")
    mask = mask.to(torch.bool)
    s = torch.where(mask, scores, torch.zeros_like(scores))
    pairs = mask.unsqueeze(2) & mask.unsqueeze(1)
    gaps = (s.unsqueeze(2) - s.unsqueeze(1)).abs()
    spread = torch.where(pairs, gaps, torch.zeros_like(gaps)).sum(2)  # [B, L]: Σ_k |s_j − s_k| over real k
    n = mask.sum(1, keepdim=True).to(s.dtype)  # [B, 1]
    rank = torch.arange(1, s.shape[1] + 1, dtype=s.dtype, device=s.device)  # i
    coefficient = (n + 1.0 - 2.0 * rank).unsqueeze(2)  # [B, L(i), 1]
    logits = (coefficient * s.unsqueeze(1) - spread.unsqueeze(1)) / tau  # [B, L(i), L(j)]
    real_rows = torch.arange(s.shape[1], device=s.device).unsqueeze(0) < n.to(torch.long)  # [B, L]: i ≤ n
    cells = real_rows.unsqueeze(2) & mask.unsqueeze(1)
    # padded columns of a real row take no weight; a padded row is all zeros (its logits never reach the softmax as
    # a row of −inf, whose backward would be NaN)
    logits = torch.where(cells, logits, torch.where(real_rows.unsqueeze(2), -torch.inf, 0.0).to(s.dtype))
    return torch.where(cells, torch.softmax(logits, dim=2), torch.zeros_like(logits))


def _clamped_sums(sums: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
    """The divisors of a Sinkhorn half-step and where the step's derivative goes through them.

    A sum below :data:`SINKHORN_MIN_SUM` is taken as that value (no derivative through it); an exactly zero sum (an
    all-zero row or column: padding) divides by 1, which leaves the zeros as they are; an inactive (converged)
    slate divides by 1 (no step)."""
    one = torch.ones((), dtype=sums.dtype, device=sums.device)
    divisor = torch.where(sums >= SINKHORN_MIN_SUM, sums, torch.where(sums > 0, SINKHORN_MIN_SUM * one, one))
    return torch.where(active, divisor, one), active & (sums >= SINKHORN_MIN_SUM)


def _p_times(p0: Tensor, x: Tensor) -> Tensor:
    """``P_0 x`` per slate, ``[B, L, L] × [B, L] → [B, L]`` (the vector as a ``[B, L, 1]`` view of a ``[B, 1, L]`` row:
    the layout CPU batched products run fastest on, 4-6× the contiguous column's speed, measured at B=256, L=310)."""
    return torch.bmm(p0, x.unsqueeze(1).mT).squeeze(2)


def _times_p(x: Tensor, p0: Tensor) -> Tensor:
    """``P_0ᵀ x`` per slate (``xᵀ P_0``), ``[B, L] × [B, L, L] → [B, L]``."""
    return torch.bmm(x.unsqueeze(1), p0).squeeze(1)


def _divided_back(grad: Tensor, quotient: Tensor, divisor: Tensor, through: Tensor) -> tuple[Tensor, Tensor]:
    """The backward of ``quotient = dividend / divisor``: the gradients of the dividend and of the divisor (0 where
    no derivative goes through it, :func:`_clamped_sums`)."""
    return grad / divisor, torch.where(through, -grad * quotient / divisor, 0.0)


class _SinkhornScaling(torch.autograd.Function):
    """Sinkhorn scaling as scaling vectors: every iterate is ``P_t = diag(u_t) P_0 diag(v_t)``.

    Iteration t: ``c_t = v_{t−1} ⊙ P_0ᵀ u_{t−1}`` (column sums), ``v_t = v_{t−1} / c_t``, ``r_t = u_{t−1} ⊙ P_0 v_t``
    (row sums), ``u_t = u_{t−1} / r_t``; the output is ``diag(u_T) P_0 diag(v_T)``. The forward keeps only vectors
    ``[T, B, L]``. The backward runs the recurrence in reverse on vectors, with the same two matrix-vector products
    with ``P_0`` an iteration; ``P_0`` enters each sum linearly, so its gradient through them is a sum of 2T outer
    products, formed at the end in one batched product ``[B, L, 2T] × [B, 2T, L]``. No iteration touches a whole
    matrix (the plain autograd of the loop keeps and revisits 2T matrices ``[B, L, L]``: 100 for T = 50).
    """

    @staticmethod
    def forward(ctx: Any, p0: Tensor, rows: Tensor, cols: Tensor, max_iter: int, tol: float) -> Tensor:
        b = p0.shape[0]
        u = torch.ones_like(p0[:, :, 0])  # [B, L] row scaling
        v = torch.ones_like(p0[:, 0, :])  # [B, L] column scaling
        p0_t_u = p0.sum(1)  # P_0ᵀ u of the current u, [B, L]
        converged = torch.zeros(b, 1, dtype=torch.bool, device=p0.device)
        steps: list[tuple[Tensor, ...]] = []  # per iteration: what the backward reads
        for _ in range(max_iter):
            if bool(converged.all()):
                break
            active = ~converged
            c, c_through = _clamped_sums(v * p0_t_u, active)
            u_before, v_before, v = u, v, v / c
            p0_v = _p_times(p0, v)  # P_0 v_t
            row_sums = u * p0_v
            r, r_through = _clamped_sums(row_sums, active)
            u = u / r
            steps.append((u_before, v_before, v, u, p0_t_u, p0_v, c, r, c_through, r_through))
            p0_t_u = _times_p(u, p0)  # P_0ᵀ u_t, for the next column sums
            row_error = torch.where(rows, (row_sums / r - 1.0).abs(), 0.0).amax(1)
            col_error = torch.where(cols, (v * p0_t_u - 1.0).abs(), 0.0).amax(1)
            converged = converged | ((row_error < tol) & (col_error < tol)).unsqueeze(1)
        ctx.save_for_backward(p0, rows, cols)
        ctx.steps = steps
        return u.unsqueeze(2) * p0 * v.unsqueeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        p0, rows, cols = ctx.saved_tensors
        real = rows.unsqueeze(2) & cols.unsqueeze(1)
        grad = torch.where(real, grad, 0.0)  # every iterate is 0 off the real block: no gradient flows there
        u_last, v_last = ctx.steps[-1][3], ctx.steps[-1][2]
        weighted = grad * p0  # the output is u_i P0_ij v_j
        du = _p_times(weighted, v_last)
        dv = _times_p(u_last, weighted)
        left: list[Tensor] = []  # P0's gradient through the sums: Σ_k left_k right_kᵀ
        right: list[Tensor] = []
        for u_before, v_before, v, u, p0_t_u, p0_v, c, r, c_through, r_through in reversed(ctx.steps):
            # u = u_before / r with r = u_before ⊙ P0 v: dr goes to u_before, to v (P0ᵀ) and to P0 (an outer product)
            du, dr = _divided_back(du, u, r, r_through)
            du = du + dr * p0_v
            a = dr * u_before
            dv = dv + _times_p(a, p0)
            left.append(a)
            right.append(v)
            # v = v_before / c with c = v_before ⊙ P0ᵀ u_before: the same, transposed
            dv, dc = _divided_back(dv, v, c, c_through)
            dv = dv + dc * p0_t_u
            b = dc * v_before
            du = du + _p_times(p0, b)
            left.append(u_before)
            right.append(b)
        through_sums = torch.bmm(torch.stack(left, 2), torch.stack(right, 1))  # [B, L, 2T] × [B, 2T, L]
        dp0 = grad.mul_(u_last.unsqueeze(2) * v_last.unsqueeze(1)).add_(through_sums)
        return dp0.masked_fill_(~real, 0.0), None, None, None, None


def sinkhorn_scaling(matrix: Tensor, rows: Tensor, cols: Tensor, max_iter: int = 50, tol: float = 1e-6) -> Tensor:
    r"""Sinkhorn scaling of nonnegative matrices towards doubly stochastic ones, each slate until it converges.

    Each iteration divides every column by its sum, then every row by its sum (a sum below 1e-10 is taken as 1e-10,
    as allRank does; an all-zero row or column stays zero); a slate stops when every real row and column sums to 1
    within ``tol``, or after ``max_iter`` iterations (allRank stops the whole batch together; here each slate's result
    does not depend on the others'). Computed as scaling vectors, ``diag(u) P_0 diag(v)``, with a hand-written backward:
    the memory is that of the input and the output, and an iteration costs two matrix-vector products a slate, forward
    and backward alike (the backward's gradient through the sums is one batched product at the end).

    Args:
        matrix: ``[B, L, L]``, nonnegative, zero outside the real rows and columns.
        rows: ``[B, L]`` bool, the real rows; cols: ``[B, L]`` bool, the real columns.
        max_iter: the most iterations (allRank's 50).
        tol: the convergence tolerance on the row and column sums (allRank's 1e-6; 0: always ``max_iter``).

    Returns:
        ``[B, L, L]``, zero outside the real rows and columns.

    Raises:
        ValueError: ``max_iter`` < 1, ``tol`` < 0, or shapes that do not match.

    Example:
        >>> import torch
        >>> real = torch.tensor([[True, True]])
        >>> p = sinkhorn_scaling(torch.tensor([[[0.9, 0.1], [0.6, 0.4]]], dtype=torch.float64), real, real)
        >>> p.sum(1).round(decimals=6).tolist(), p.sum(2).round(decimals=6).tolist()  # doubly stochastic
        ([[1.0, 1.0]], [[1.0, 1.0]])
    """
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"sinkhorn_scaling: max_iter must be a positive int, got {max_iter!r}")
    if not tol >= 0:
        raise ValueError(f"sinkhorn_scaling: tol must be ≥ 0, got {tol!r}")
    if matrix.dim() != 3 or matrix.shape[1] != matrix.shape[2] or rows.shape != matrix.shape[:2] or cols.shape != rows.shape:
        raise ValueError(f"sinkhorn_scaling expects matrices [B, L, L] with rows and cols [B, L], got "
                         f"{tuple(matrix.shape)}, {tuple(rows.shape)}, {tuple(cols.shape)}")
    return _SinkhornScaling.apply(matrix, rows.to(torch.bool), cols.to(torch.bool), max_iter, float(tol))


class NeuralNDCGLoss(ListwiseRankingLoss):
    r"""NeuralNDCG: minus NDCG@k of the Sinkhorn-scaled NeuralSort relaxation (Pobrotyn & Białobrzeski, arXiv 2021).

    For a slate of n real entries with gains g: ``P̂ = Sinkhorn(NeuralSort_τ(s))`` (:func:`neural_sort`,
    :func:`sinkhorn_scaling`; row i of P̂ is a distribution over the entries at rank i), and

    .. math::

        \ell = -\frac{1}{Z_k} \sum_{i=1}^{\min(k, n)} \frac{(\hat P g)_i}{\log_2(1 + i)}

    with ``Z_k`` the slate's ideal DCG@k (Pobrotyn & Białobrzeski, eq. (8), the deterministic NeuralNDCG; the Gumbel
    "stochastic" and the transposed variants are not implemented). As τ → 0 on distinct scores P̂ becomes the sorting
    permutation and −ℓ the slate's NDCG@k. This is allRank's ``neuralNDCG`` (the loss Qiu et al. ran as
    "NeuralNDCG": τ = 1, k = None, ``powered_relevancies``) with each slate's Sinkhorn iteration stopping on its own.

    Args:
        temperature: τ of NeuralSort (default 1.0: allRank's default, the value of Pobrotyn & Białobrzeski's
            reproducibility configs and of Qiu et al.'s runs).
        top_k: k, the truncation (None, default: the whole slate, "NeuralNDCG@max").
        sinkhorn_iterations: the most Sinkhorn iterations (50, allRank's).
        sinkhorn_tolerance: stop a slate's Sinkhorn iteration when its row and column sums are within this of 1
            (1e-6, allRank's; 0 runs every iteration).
        gain: ``"exp2"`` (``2^y − 1``, allRank's ``powered_relevancies=True``, default) or ``"linear"``.

    Shapes:
        scores ``[B, L]``, relevance ``[B, L]``, mask ``[B, L]`` or None → a scalar. Memory ``O(B L²)``: NeuralSort's
        and Sinkhorn's matrices are ``[B, L, L]`` (the Sinkhorn iteration keeps its input and output, not two
        matrices an iteration); 256 slates of 1,010 entries take about 1 GB a matrix in float32. Time: up to
        ``sinkhorn_iterations`` iterations of two matrix-vector products a slate, forward and backward alike (long
        slates rarely converge within 50); ``benchmarks/neuralndcg_step.py`` times it against plain autograd.

    Raises:
        ValueError: ``temperature`` ≤ 0, ``top_k`` not a positive int or None, ``sinkhorn_iterations`` < 1,
            ``sinkhorn_tolerance`` < 0, ``gain`` not a choice; in :meth:`forward`, inputs as
            :class:`ListwiseRankingLoss` says.

    Example:
        >>> import torch
        >>> from fccolit.objectives import NeuralNDCGLoss
        >>> scores, relevance = torch.tensor([[0.5, 2.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]])
        >>> round(float(NeuralNDCGLoss()(scores, relevance)), 4)
        -0.633
        >>> round(float(NeuralNDCGLoss(temperature=1e-3)(scores, relevance)), 4)  # −NDCG = −1/log2(3)
        -0.6309
        >>> round(float(NeuralNDCGLoss(temperature=1e-3, top_k=1)(scores, relevance)), 4)  # −NDCG@1
        0.0
    """

    def __init__(
        self,
        temperature: float = 1.0,
        top_k: int | None = None,
        sinkhorn_iterations: int = 50,
        sinkhorn_tolerance: float = 1e-6,
        gain: Gain = "exp2",
    ) -> None:
        super().__init__(gain=gain)
        who = type(self).__name__
        self.temperature = _check_positive("temperature (τ)", temperature, who)
        self.top_k = _check_top_k(top_k, who)
        if isinstance(sinkhorn_iterations, bool) or not isinstance(sinkhorn_iterations, int) or sinkhorn_iterations < 1:
            raise ValueError(f"{who}: sinkhorn_iterations must be a positive int, got {sinkhorn_iterations!r}")
        if isinstance(sinkhorn_tolerance, bool) or not isinstance(sinkhorn_tolerance, (int, float)) or not sinkhorn_tolerance >= 0:
            raise ValueError(f"{who}: sinkhorn_tolerance must be a number ≥ 0, got {sinkhorn_tolerance!r}")
        self.sinkhorn_iterations, self.sinkhorn_tolerance = sinkhorn_iterations, float(sinkhorn_tolerance)

    def options(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "sinkhorn_iterations": self.sinkhorn_iterations,
                "sinkhorn_tolerance": self.sinkhorn_tolerance, **super().options()}

    def relaxed_permutation(self, slates: Slates) -> Tensor:
        """``[B, L, L]`` P̂ = Sinkhorn(NeuralSort_τ(s)) of every slate (rows: ranks, columns: entries)."""
        p = neural_sort(slates.scores, slates.mask, self.temperature)
        real_rows = torch.arange(p.shape[1], device=p.device).unsqueeze(0) < slates.mask.sum(1, keepdim=True)
        return sinkhorn_scaling(p, real_rows, slates.mask, self.sinkhorn_iterations, self.sinkhorn_tolerance)

    def slate_losses(self, slates: Slates) -> Tensor:
        sorted_gains = torch.bmm(self.relaxed_permutation(slates), slates.gains.unsqueeze(2)).squeeze(2)  # [B, L(i)]
        discount = _discounts(sorted_gains.shape[1], sorted_gains)
        if self.top_k is not None:
            discount = torch.where(torch.arange(discount.shape[0], device=discount.device) < self.top_k, discount,
                                   torch.zeros_like(discount))
        return -(sorted_gains * discount).sum(1) / self.safe_ideal_dcg(slates)
