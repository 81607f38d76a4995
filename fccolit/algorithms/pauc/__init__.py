r"""Partial AUC on an FPR range and the sum of ranked range: AGD-SBCD, SoRR, DCA, proximal DCA and mini-batch
baselines (Yao, Lin & Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates",
NeurIPS 2022, arXiv:2203.01505).

==========================  ==================================================================================
module                      what
==========================  ==================================================================================
:mod:`.thresholds`          :class:`ThresholdTracker`: the per-row thresholds λ and their lazy running sums
:mod:`.base`                :class:`RankedRangeModule` (what every module here shares) and :class:`SBCDLoop`
                            (the double loop of SBCD steps around an anchor, shared by AGD-SBCD and DCA)
:mod:`.agd_sbcd`            :class:`PAUCRange` (AGD-SBCD, Algorithms 1–2) and :class:`SoRR` (Appendix A)
:mod:`.dca`                 :class:`DCA` and :class:`ProximalDCA` (Appendix E.4, E.5)
:mod:`.minibatch`           :class:`MiniBatchPAUC` and :class:`PairwiseAUC`
==========================  ==================================================================================

Units. Every hyper-parameter is in the paper's **scale-free** form, which does not depend on the data size: with
``N₊N₋`` pairs (``N`` samples for SoRR),

==================  ===================================  ==============================================
argument            paper                                meaning
==================  ===================================  ==============================================
``envelope_smoothing`` μ' = μ·N₊N₋  (E.2: 10² or 10³)  Moreau smoothing; ``c/μ'`` is the pull to w
``gamma``           γ' = γ·N₊N₋  (E.2: 2·10³, 5·10³)     outer step; only γ'/μ' = γ/μ matters
``lr``              c   (η_t = c/((k+1)N₊N₋))            step on the mean masked pair-loss gradient
``lambda_lr``       c   (θ_t = c/((k+1)N₋))              step of the thresholds (default: ``lr``)
``inner_steps``     C   (T_k = C(k+1)², C = 50)           SBCD steps per prox point at outer step k
==================  ===================================  ==============================================

The objectives (:mod:`fccolit.objectives.pauc`) are normalised by the number of entries, which is what makes these
units scale-free.
"""

from fccolit.algorithms.pauc.agd_sbcd import PAUCRange, SoRR
from fccolit.algorithms.pauc.base import RankedRangeModule, SBCDLoop
from fccolit.algorithms.pauc.dca import DCA, ProximalDCA
from fccolit.algorithms.pauc.minibatch import MiniBatchPAUC, PairwiseAUC
from fccolit.algorithms.pauc.thresholds import ThresholdTracker

__all__ = [
    "ThresholdTracker",
    "RankedRangeModule",
    "SBCDLoop",
    "PAUCRange",
    "SoRR",
    "DCA",
    "ProximalDCA",
    "MiniBatchPAUC",
    "PairwiseAUC",
]
