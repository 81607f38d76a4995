"""One training run of a SOX-family method on synthetic data, for the multi-process tests of the AUPRC methods
(run as a script, not collected). The pattern of ``tests/ddp/ddp_run.py`` (whose batch trace it reuses):

    python tests/ddp/ddp_run_family.py --algo moapv2|adap|adap_multilabel|moap_local --devices 2 --max-steps 30 --out DIR
                                       [--save-every K] [--resume CKPT]

* ``moapv2``: MOAP-V2 on AP with Ω, momentum, the 1/√t schedule of η and β0 = β1 (lazy decay counters move with a
  changing β0);
* ``adap``: ADAP (AMSGrad second moment) on AP with Ω and the same schedule;
* ``adap_multilabel``: ADAP on mean AP over 3 tasks (multi-label batches: the ``task`` field is gathered with the
  scores, the state has one row per (task, positive));
* ``moap_local``: MOAP (n/B1 scaling) on a per-sample objective that each rank evaluates on its own slice: B1 must
  be the global number of sampled rows (all-reduced), not the rank's.

Every rank writes ``DIR/rank{r}.pt`` with the module's state dict, the optimizer state, the global step, the
batch trace and the schedule's initial values.
"""

import os
import sys

import torch
from lightning.pytorch import seed_everything

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import arguments, fit_and_save  # noqa: E402

from fccolit.algorithms.sox import ADAP, MOAP, MOAPV2  # noqa: E402
from fccolit.callbacks.schedules import InverseSqrtSchedule  # noqa: E402
from fccolit.datamodules import SyntheticBinaryDataModule, SyntheticMultiLabelDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.objectives import AveragePrecisionSurrogate  # noqa: E402
from fccolit.objectives.base import FCCOObjective, InnerBatch  # noqa: E402
from fccolit.optim import AdaptiveMomentum, Momentum  # noqa: E402


class PerSampleSquaredError(FCCOObjective):
    """A per-sample problem (each row's inner value needs only its own sample): ``g_i = sigmoid(s_i)``,
    ``f_i(u) = (u − y_i)²``. No global batch is needed, so under DDP each rank updates its own rows and B1 has
    to be all-reduced."""

    inner_dim = 1
    state_rows = "num_samples"
    needs_global_batch = False

    def inner(self, scores, batch):
        return InnerBatch(index=batch["index"], value=torch.sigmoid(scores).unsqueeze(-1),
                          context={"y": batch["y"].to(scores.dtype)})

    def outer(self, u, context):
        return (u[:, 0] - context["y"]).square()


def build(algo):
    seed_everything(0, workers=True)
    data = SyntheticBinaryDataModule(
        num_samples=400, num_features=6, pos_fraction=0.1, batch_size=16, num_positives=4, seed=0, eval_batch_size=64
    )
    common = dict(data_sizes=data.sizes, state_dtype="float64", metrics=["ap"])
    if algo == "moapv2":
        model = MOAPV2(MLP(hidden=[8]), AveragePrecisionSurrogate(margin=0.5, project=True), ema_weight=0.3,
                       optimizer=lambda p: Momentum(p, lr=0.5, momentum_weight=0.3), **common)
        callbacks = [InverseSqrtSchedule()]
    elif algo == "adap":
        model = ADAP(MLP(hidden=[8]), AveragePrecisionSurrogate(margin=0.5, project=True), ema_weight=0.3,
                     optimizer=lambda p: AdaptiveMomentum(p, lr=0.05, momentum_weight=0.3, second_moment="amsgrad"),
                     **common)
        callbacks = [InverseSqrtSchedule()]
    elif algo == "adap_multilabel":
        data = SyntheticMultiLabelDataModule(num_samples=600, num_features=6, num_tasks=3, batch_size=24,
                                             num_positives=4, seed=0, eval_batch_size=64)
        model = ADAP(MLP(hidden=[8], out_features=3), AveragePrecisionSurrogate(margin=0.5, project=True), ema_weight=0.05,
                     optimizer=lambda p: AdaptiveMomentum(p, lr=0.05, momentum_weight=0.3, second_moment="adam"),
                     data_sizes=data.sizes, state_dtype="float64", metrics=["ap"])
        callbacks = []
    elif algo == "moap_local":
        model = MOAP(MLP(hidden=[8]), PerSampleSquaredError(), ema_weight=0.3,
                     optimizer=lambda p: Momentum(p, lr=0.05, momentum_weight=0.3), **common)
        callbacks = []
    else:
        raise ValueError(f"unknown --algo {algo!r}")
    # float64 from construction (see tests/ddp/ddp_run.py)
    return model.double(), data, callbacks


def main():
    args = arguments(max_steps=30, add=lambda parser: parser.add_argument("--algo", required=True))
    model, data, callbacks = build(args.algo)
    schedules = [c for c in callbacks if isinstance(c, InverseSqrtSchedule)]
    fit_and_save(model, data, args, callbacks=callbacks, extras=lambda trainer: {
        "ema_weight": model.ema_weight, "schedule": schedules[0].state_dict() if schedules else None})


if __name__ == "__main__":
    main()
