"""One training run of SOX on synthetic data, for the multi-process tests (run as a script, not collected).

    python tests/ddp/ddp_run.py --devices 2 --max-steps 30 --out DIR [--save-every K] [--resume CKPT]

Every rank writes ``DIR/rank{r}.pt`` with the module's state dict (weights and per-index state) and the
optimizer state at the end. ``--save-every`` writes checkpoints ``DIR/step={k}.ckpt`` every K steps.
"""

import os
import sys

from lightning.pytorch import seed_everything

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import arguments, fit_and_save  # noqa: E402

from fccolit.algorithms import SOX  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.optim import Momentum  # noqa: E402


def build(args):
    seed_everything(0, workers=True)
    data = SyntheticBinaryDataModule(
        num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0, eval_batch_size=64
    )
    model = SOX(
        MLP(hidden=[8]),
        AveragePrecisionSurrogate(margin=0.5),
        optimizer=lambda p: Momentum(p, lr=0.5, momentum_weight=0.2),
        ema_weight=0.3,
        data_sizes=data.sizes,
        state_dtype="float64",
        metrics=["ap"],
    )
    # float64 from construction: Lightning restores checkpoints before the precision plugin converts the
    # module, so a float32-built module would round the restored float64 weights.
    return model.double(), data


def main():
    args = arguments(max_steps=30)
    model, data = build(args)
    fit_and_save(model, data, args, validate=True)


if __name__ == "__main__":
    main()
