"""One training run of PAUCRange (AGD-SBCD) on synthetic data, for the multi-process test in test_pauc.py (run as
a script, not collected).

    python tests/ddp/ddp_run_pauc.py --devices 2 --out DIR [--max-steps 40] [--save-every K] [--resume CKPT]

T_k = 2(k+1)² per branch (4, 16, 36 steps per outer step), so 40 steps cross two outer steps and stop inside the
m-branch of the third. Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights, anchor, running
sums, averaged prox points, both λ tables and the loop position) and the indices of every training batch.
"""

import os
import sys

from lightning.pytorch import seed_everything

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import arguments, fit_and_save  # noqa: E402

from fccolit.algorithms.pauc import PAUCRange  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives.pauc import PartialAUCRangeSurrogate  # noqa: E402


def main():
    args = arguments(max_steps=40)
    seed_everything(0, workers=True)
    data = SyntheticBinaryDataModule(
        num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0, eval_batch_size=64
    )
    model = PAUCRange(
        MLP(hidden=[8]),
        PartialAUCRangeSurrogate(0.1, 0.5),
        envelope_smoothing=2.0,
        gamma=4.0,
        lr=0.5,
        inner_steps=2,
        data_sizes=data.sizes,
        metrics=["pauc_0.05_0.5"],
    ).double()  # float64 from construction (see tests/ddp/ddp_run.py)
    fit_and_save(model, data, args)


if __name__ == "__main__":
    main()
