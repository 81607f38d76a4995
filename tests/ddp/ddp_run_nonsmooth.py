"""Training runs of SONEX and ALEXR2 for the multi-process tests (run as a script, or ``run(...)`` in-process).

    python tests/ddp/ddp_run_nonsmooth.py --algo sonex|alexr2|continual --devices 2 --max-steps 12 --out DIR
        [--data DIR] [--save-every K] [--resume CKPT]

* ``sonex``: GDRO-CVaR on generated grouped data (group batches: each rank gets whole groups; the per-rank path,
  with the objective's own parameter s);
* ``continual``: SONEX with the continual-learning objective on a generated BDD100K in ``--data`` (with a tiny
  random CLIP in ``--data/clip``): class-balanced batches of 12 (2 per weather class), which the ranks split 6 / 6;
  the contrastive term and each constraint's class mean are taken over the global batch (``needs_global_batch``),
  the old model's scores computed by each rank on its own images and gathered;
* ``alexr2``: ROC-fairness AUC on generated Adult files in ``--data`` (the gathered global-batch path, independent
  value / gradient halves, constraint sampling); K = 3 inner steps, so checkpoints every 4 steps fall mid-loop.
  One epoch is 9 batches: at its end the ConstraintViolationLogger evaluates the training and validation splits
  in evaluation batches of 7 rows, which the two ranks split 4 / 3 (unequal shards); the values it logged and the
  module's state at that moment are saved.

Every rank writes ``DIR/rank{r}.pt``: the module's state dict, the optimizers' state dicts, the global step, the
batch indices seen per step and (alexr2) the logged constraint values with the state they were computed from.
"""

import argparse
import os
import sys

from lightning.pytorch import Callback, seed_everything

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddp_harness import arguments, fit_and_save  # noqa: E402

from fccolit.algorithms.alexr2 import ALEXR2  # noqa: E402
from fccolit.algorithms.sonex import SONEX  # noqa: E402
from fccolit.callbacks.constraints import ConstraintViolationLogger  # noqa: E402
from fccolit.datamodules.bdd100k import DEFAULT_CLASSES, BDD100KDataModule, class_prompts  # noqa: E402
from fccolit.datamodules.fairness import FairnessDataModule  # noqa: E402
from fccolit.datamodules.grouped import SyntheticGroupedDataModule  # noqa: E402
from fccolit.models import MLP  # noqa: E402
from fccolit.models.vision import CLIPClassifier  # noqa: E402
from fccolit.objectives.constrained import GroupDROCVaRLoss, ROCFairnessAUCObjective  # noqa: E402
from fccolit.objectives.continual import ContinualLearningObjective  # noqa: E402
from fccolit.optim import AdaptiveMomentum, Momentum  # noqa: E402


def build(args):
    seed_everything(0, workers=True)
    if args.algo == "sonex":
        data = SyntheticGroupedDataModule(
            num_groups=8, max_group_size=60, imbalance=3.0, num_features=5, groups_per_batch=4, samples_per_group=6,
            seed=0, eval_batch_size=64,
        )
        model = SONEX(
            MLP(hidden=[8]), GroupDROCVaRLoss(ratio=0.25), smoothing=0.05, ema_weight=0.6, correction_weight=0.2,
            optimizer=lambda p: Momentum(p, lr=0.3, momentum_weight=0.3), data_sizes=data.sizes,
            state_dtype="float64", metrics=["auroc"],
        )
    elif args.algo == "continual":
        data = BDD100KDataModule(args.data, task="weather", image_size=32, sampler="class_balanced", batch_size=12,
                                 num_batches=3, val_fraction=0.2, eval_batch_size=16,
                                 cache_dir=os.path.join(args.data, "cache"))
        clip = CLIPClassifier(pretrained_path=os.path.join(args.data, "clip"), logit_scale=1.0,
                              prompts=class_prompts("weather", DEFAULT_CLASSES["weather"]))
        model = SONEX(
            clip, ContinualLearningObjective(target=DEFAULT_CLASSES["weather"].index("foggy"), penalty="hinge", rho=10.0,
                                    slack=0.01),
            smoothing=0.05, ema_weight=0.8, correction_weight=0.1,
            # momentum SGD, not Adam: Adam's m/√v turns the rounding noise of exactly-zero gradients (the attention
            # key biases: softmax ignores a shift) into full-size steps, which differ between 1 and 2 processes
            optimizer=lambda p: Momentum(p, lr=0.5, momentum_weight=0.3), data_sizes=data.sizes,
            state_dtype="float64", metrics=["accuracy"],
        )
    else:
        data = FairnessDataModule(args.data, "adult", batch_size=32, eval_batch_size=7, seed=0,
                                  cache_dir=os.path.join(args.data, "cache"))
        model = ALEXR2(
            MLP(hidden=[8]), ROCFairnessAUCObjective(rho=5.0, kappa=0.001), smoothing=0.01, envelope_smoothing=0.2, inner_lr=0.2, inner_steps=3,
            constraints_per_step=10, sample_seed=3,
            optimizer=lambda p: AdaptiveMomentum(p, lr=0.01, bias_correction=True), data_sizes=data.sizes,
            state_dtype="float64", metrics=["auroc"],
        )
    # float64 from construction: checkpoints are restored before the precision plugin converts the module
    return model.double(), data


class StateAtValidation(Callback):
    """The module's state when the first validation ends (what the constraint logger evaluated)."""

    def __init__(self):
        self.state = None

    def on_validation_end(self, trainer, pl_module):
        if self.state is None:
            self.state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


def run(algo, devices, max_steps, out, data=None, save_every=0, resume=None):
    args = argparse.Namespace(algo=algo, devices=devices, max_steps=max_steps, out=out, data=data,
                              save_every=save_every, resume=resume)
    model, data = build(args)
    callbacks, logger_cb, at_validation = [], None, None
    if args.algo == "alexr2":
        logger_cb, at_validation = ConstraintViolationLogger(stages=("train", "val")), StateAtValidation()
        callbacks = [logger_cb, at_validation]
    fit_and_save(model, data, args, callbacks=callbacks, validate=args.algo == "alexr2", extras=lambda trainer: {
        "logged": logger_cb.last if logger_cb is not None else None,
        "state_at_validation": at_validation.state if at_validation is not None else None})
    return model, data


def main():
    def options(parser):
        parser.add_argument("--algo", choices=["sonex", "alexr2", "continual"], required=True)
        parser.add_argument("--data", default=None)

    a = arguments(max_steps=12, add=options)
    run(a.algo, a.devices, a.max_steps, a.out, a.data, a.save_every, a.resume)


if __name__ == "__main__":
    main()
