"""The plain helpers the tests share (the fixtures are in ``conftest.py``): paths, toy binary batches and the
drivers that step a module through them, a free TCP port for process groups, the partial-AUC toy problem and its
hand-written step, and the registry the config smoke test uses to feed each DataModule. Every test module imports
from here as ``from builders import ...`` (``tests/`` is on ``sys.path`` because ``tests/conftest.py`` is, in
pytest's default ``prepend`` import mode).

The registry's files are written by :mod:`fccolit.testing` in the real formats (LIBSVM text, MovieLens ``ratings.csv``, the
Netflix Prize ``combined_data_*.txt``, MSLR ``Fold1/{train,vali,test}.txt``, the CIFAR python pickles, CheXpert's
CSVs and JPEGs, BDD100K's labels JSON and JPEGs, UCI Adult, ProPublica COMPAS).

:data:`DATA_GENERATORS` maps a DataModule class to ``generate(root, init_args) -> list[str]``: it writes a tiny data
set under ``root`` (for the config's ``init_args``, e.g. the Adult or the COMPAS file) and returns the command-line
overrides that point the config at it and shrink what a fast smoke run cannot afford (batch sizes, image sizes,
DataLoader workers). A DataModule without a generator cannot be smoke-tested: :func:`generator_for` says so.
"""

from __future__ import annotations

import importlib
import math
import socket
from pathlib import Path
from typing import Any, Callable

import torch
from lightning.pytorch import Callback, Trainer
from torch.utils.data import DataLoader

from fccolit.algorithms.double_loop import proximal_step_
from fccolit.data import TensorDictDataset, binary_fields, binary_sizes
from fccolit.datamodules.base import FCCODataModule
from fccolit.datamodules.bdd100k import DEFAULT_CLASSES, BDD100KDataModule
from fccolit.datamodules.chexpert import CheXpertDataModule
from fccolit.datamodules.cifar import CIFARLTDataModule
from fccolit.datamodules.fairness import FairnessDataModule
from fccolit.datamodules.grouped import SyntheticGroupedDataModule
from fccolit.datamodules.hf import (
    HFClassificationDataModule, HFGroupedDataModule, HFRankingDataModule, HFRecommendationDataModule,
)
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.movielens import MovieLensDataModule
from fccolit.datamodules.mslr import MSLRDataModule
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule, SyntheticMultiLabelDataModule
from fccolit.datamodules.synthetic_multiclass import SyntheticMulticlassDataModule
from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule
from fccolit.models import LinearScorer
from fccolit.samplers import DualSampler
from fccolit.testing import (
    bdd_frames, cifar_arrays, write_adult_files, write_bdd100k, write_chexpert, write_cifar, write_compas_file,
    write_libsvm, write_movielens_csv, write_mslr_fold, write_netflix,
)


#: ``../shared/data`` beside the repository (the small real data sets; tests that use them skip without it)
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: the multi-process driver scripts (``tests/ddp/ddp_run*.py``), run by path in subprocesses
DDP_SCRIPTS = Path(__file__).resolve().parent / "ddp"
#: the benchmark scripts (``benchmarks/*.py``)
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def import_benchmark(name: str):
    """``benchmarks/<name>.py`` as a module (the folder is on ``sys.path`` while it and its sibling imports load)."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def toy_binary_data(n: int = 40, d: int = 5, m: int = 10, seed: int = 1):
    """``x [n, d]`` float64, ``y [n]`` with ``m`` positives, ``pos_index [n]`` (−1 for negatives)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(m)
    return x, y, pos_index


def dual_batches(x, y, pos_index, steps: int, positives: int = 3, negatives: int = 5, seed: int = 2):
    """Dual batches (distinct positives, then negatives) as dicts of the binary batch fields."""
    g = torch.Generator().manual_seed(seed)
    pos, neg = torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()
    out = []
    for _ in range(steps):
        idx = torch.cat([pos[torch.randperm(len(pos), generator=g)[:positives]],
                         neg[torch.randperm(len(neg), generator=g)[:negatives]]])
        out.append({"x": x[idx], "y": y[idx], "index": idx, "pos_index": pos_index[idx]})
    return out


def float64_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with its floating-point fields in float64 (index fields unchanged)."""
    return {k: (v.double() if v.is_floating_point() else v) for k, v in batch.items()}


def whole_list_ltr_data() -> SyntheticRankingDataModule:
    """A small generated learning-to-rank set (12 queries of 6 to 14 items, 5 features, top-3) whose training batch
    holds every query with its whole list (no sampled positives or negatives): the inner values are exact on
    ``full_batch()``."""
    return SyntheticRankingDataModule(task="ltr", num_queries=12, num_features=5, list_size=(6, 14), num_positives=None,
                                      num_negatives=None, top_k=3, seed=3)


# ---------------------------------------------------------------------------------------------- drivers
def optimizer_of(module):
    """The optimizer of ``module.configure_optimizers()`` (a bare optimizer or Lightning's dict form)."""
    configured = module.configure_optimizers()
    return configured["optimizer"] if isinstance(configured, dict) else configured


def drive(module, batches, before_step=None) -> list[dict[str, torch.Tensor]]:
    """The module's own step (``compositional_loss`` + its optimizer) outside Lightning, for a linear scorer
    (``module.model.net``). ``before_step(module, optimizer, t)`` runs before step ``t`` (from 1). Returns one record
    per step: ``w`` the weights after the step ``[1, d]``, ``u`` the state's values after it, ``G`` the gradient the
    step used ``[1, d]``."""
    opt = optimizer_of(module)
    records = []
    for t, batch in enumerate(batches, 1):
        if before_step is not None:
            before_step(module, opt, t)
        loss, _ = module.compositional_loss(module(batch), batch)
        opt.zero_grad()
        loss.backward()
        grad = module.model.net.weight.grad.detach().clone()
        opt.step()
        records.append({"w": module.model.net.weight.detach().clone(), "u": module.state.values().clone(), "G": grad})
    return records


def fit_batches(module, batches, callbacks=(), max_steps=None, ckpt_path=None, **trainer_kw) -> Trainer:
    """``Trainer.fit`` in float64 on CPU over the given list of batches (one per step, no validation, no
    checkpoints unless ``enable_checkpointing=True``); ``max_steps`` defaults to one pass. Returns the trainer."""
    trainer = Trainer(accelerator="cpu", max_steps=max_steps or len(batches), logger=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                      precision="64-true", callbacks=list(callbacks), **{"enable_checkpointing": False, **trainer_kw})
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None), ckpt_path=ckpt_path)
    return trainer


def assert_rounding_close(expected: torch.Tensor, actual: torch.Tensor, what: Any, rtol: float = 1e-10) -> None:
    """``actual`` equals ``expected`` up to float64 rounding amplified by training (the 1 = 2 processes DDP tests).

    Element-wise ``rtol``, plus an absolute tolerance of ``rtol`` times the tensor's largest value: two processes
    sum in another order, a few steps amplify that to ~1e-11 of the tensor's scale, and an element near 0 carries its
    neighbours' rounding (on one CPU the element-wise 1e-12 failed a weight by 1.9e-11 on values of 3.6). A lost row,
    sample or collective moves values by 1e-3 and more, far beyond it.
    """
    atol = 1e-12 + rtol * float(expected.abs().max()) if expected.numel() else 1e-12
    assert torch.allclose(expected, actual, rtol=rtol, atol=atol), (what, float((expected - actual).abs().max()))


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- partial AUC
class ArrayData(FCCODataModule):
    """Given arrays as a binary DataModule (training batches from a DualSampler)."""

    def __init__(self, x, y, batch_size, num_positives, seed=0, val=None):
        super().__init__(eval_batch_size=1000)
        self.fields = binary_fields(x, y)
        self.val_fields = binary_fields(*val) if val is not None else self.fields
        self.sizes = binary_sizes(self.fields)
        self.batch_size, self.num_positives, self.seed = batch_size, num_positives, seed

    def setup(self, stage=None):
        self.train_dataset = TensorDictDataset(**self.fields)
        self.val_dataset = self.test_dataset = TensorDictDataset(**self.val_fields)

    def build_train_sampler(self):
        return DualSampler(self.fields["y"], self.batch_size, self.num_positives, seed=self.seed)


def shifted_gaussians(num_pos, num_neg, dim, seed=0, shift=0.5):
    """``x [num_pos + num_neg, dim]`` float64 (standard normal, the positives first and shifted by ``shift``),
    ``y`` (1 for the positives)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.randn(num_pos, dim, generator=g, dtype=torch.float64) + shift,
                   torch.randn(num_neg, dim, generator=g, dtype=torch.float64)])
    y = torch.cat([torch.ones(num_pos), torch.zeros(num_neg)]).long()
    return x, y


def prox_sgd_step(v, anchor, grad, eta, mu):
    """The closed form of eq. (14), ``argmin_x Gᵀx + ‖x − w‖²/(2μ) + ‖x − v‖²/(2η)``, out of place, from the
    library's one proximal step (:func:`fccolit.algorithms.double_loop.proximal_step_`)."""
    z = v.clone()
    proximal_step_([z], [grad.clone()], [anchor], eta, mu)
    return z


def linear_module(module_cls, data, w0=None, bias=False, **kw):
    """``module_cls`` with a :class:`LinearScorer` in float64 for ``data.sizes``, the weights set to ``w0`` if
    given."""
    torch.manual_seed(0)
    module = module_cls(LinearScorer(bias=bias), data_sizes=data.sizes, **kw).double()
    if w0 is not None:
        with torch.no_grad():
            module.model.net.weight.copy_(torch.as_tensor(w0, dtype=torch.float64).reshape(1, -1))
    return module


def fit_datamodule(module, data, steps, callbacks=(), **kw) -> Trainer:
    """``Trainer.fit`` in float64 on CPU for ``steps`` steps on a DataModule (no validation unless
    ``limit_val_batches`` is given); returns the trainer."""
    kw.setdefault("limit_val_batches", 0)
    trainer = Trainer(
        accelerator="cpu", max_steps=steps, precision="64-true", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, callbacks=list(callbacks), **kw,
    )
    trainer.fit(module, datamodule=data)
    return trainer


class PAUCRecorder(Callback):
    """For the pAUC modules (AGD-SBCD and the double-loop methods), per step: the batch, the live parameters, the λ tables and the loop position before the step, and the
    buffers after it."""

    def __init__(self):
        self.before, self.after = [], []

    @staticmethod
    def _tables(m):
        return {k: getattr(m, k).values.clone() for k in ("lambda_m", "lambda_n") if hasattr(m, k)}

    def on_train_batch_start(self, trainer, m, batch, batch_idx):
        self.before.append({"batch": {k: v.clone() for k, v in batch.items()}, "v": m.flat().clone(),
                            "loop": dict(m.loop), **self._tables(m)})

    def on_train_batch_end(self, trainer, m, outputs, batch, batch_idx):
        buffers = {k: getattr(m, k).clone() for k in ("anchor", "v_bar_m", "prox_point", "xi") if hasattr(m, k)}
        self.after.append({"v": m.flat().clone(), "loop": dict(m.loop), **buffers, **self._tables(m)})


def pauc_hand_step(batch, v, table, share, init="batch"):
    """Algorithm 1 steps 5 and 7 for a linear model without bias and the logistic ℓ, in the paper's sums:
    returns (index, ĝ = G_v/(N₊N₋), λ^(t) of the batch's positives, p̂)."""
    x, y = batch["x"], batch["y"]
    pos, neg = (y == 1).nonzero().flatten(), (y == 0).nonzero().flatten()
    h = x @ v
    diff = h[neg][None, :] - h[pos][:, None]  # h_j⁻ − h_i⁺
    s = torch.nn.functional.softplus(diff)  # s_ij = log(1 + exp(−(h_i − h_j)))
    index = batch["pos_index"][pos]
    lam = table[index].clone()
    for r in range(len(pos)):
        if math.isnan(float(lam[r])):  # first visit: the batch's (l/N₋)-quantile of row r, s_[⌈share·J⌉]
            ordered = torch.sort(s[r], descending=True).values
            lam[r] = ordered[max(1, math.ceil(share * len(neg) - 1e-9)) - 1] if init == "batch" else init
    mask = (s > lam[:, None]).double()
    grad = torch.zeros_like(v)
    for r in range(len(pos)):
        for c in range(len(neg)):  # ∇s_ij = σ(h_j − h_i)(x_j − x_i)
            grad += mask[r, c] * torch.sigmoid(diff[r, c]) * (x[neg[c]] - x[pos[r]])
    return index, grad / (len(pos) * len(neg)), lam, mask.mean(1)


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---------------------------------------------------------------------------------------------- the registry
def _shrink(init_args: dict[str, Any], **small: Any) -> list[str]:
    """Overrides ``--data.init_args.<key> <value>`` for the keys the config sets (a config that leaves a key at its
    default keeps the default)."""
    return [arg for key, value in small.items() if key in init_args for arg in (f"--data.init_args.{key}", str(value))]


def _files(root: Path, extra: list[str]) -> list[str]:
    return ["--data.init_args.root", str(root), "--data.init_args.cache_dir", str(root / "cache"), *extra]


def _generated_in_memory(root: Path, init_args: dict[str, Any]) -> list[str]:
    return []


def _libsvm(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_libsvm(root, rows=800, test_rows=120)  # about 200 training positives: a batch of 100 fits
    return _files(root, ["--data.init_args.name", "toy"])


def _movielens(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_movielens_csv(root)
    return _files(root, _shrink({**init_args, "num_negatives": 0, "queries_per_batch": 0}, num_negatives=20,
                                queries_per_batch=16, num_positives=5, eval_batch_size=32))


def _netflix(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_netflix(root)
    return _files(root, _shrink({**init_args, "min_ratings": 0, "num_negatives": 0}, min_ratings=5, num_negatives=20,
                                queries_per_batch=16, num_positives=5, eval_batch_size=32))


def _mslr(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_mslr_fold(root, fold=int(init_args.get("fold", 1)))
    return _files(root, _shrink(init_args, queries_per_batch=8, num_positives=3, slate_length=30, eval_batch_size=16))


def _cifar(root: Path, init_args: dict[str, Any]) -> list[str]:
    # 100 images per class: binary_imbalanced keeps 10 of 500 positives, one_vs_rest (cat, imbalance 100) 21
    write_cifar(root, *cifar_arrays(100, 10, 5, seed=9), class_names=CIFAR10_NAMES)
    return _files(root, _shrink({**init_args, "num_workers": 0}, batch_size=8, num_positives=2, num_workers=0,
                                eval_batch_size=16))


def _chexpert(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_chexpert(root, num_patients=24, num_valid_patients=4, image_size=(78, 64), seed=1)
    tasks = int(init_args.get("tasks_per_batch") or 1)  # multi-label batches: tasks × (positives + negatives)
    return _files(root, _shrink({**init_args, "num_workers": 0, "image_size": 0}, image_size=32,
                                batch_size=2 * tasks if tasks > 1 else 8, num_positives=1 if tasks > 1 else 2,
                                num_workers=0, val_fraction=0.25, eval_batch_size=16))


def _bdd100k(root: Path, init_args: dict[str, Any]) -> list[str]:
    write_bdd100k(root, frames=bdd_frames(), version="2018", image_size=(96, 54), seed=0)
    batch_size = 8
    if init_args.get("sampler") == "class_balanced":  # classes_per_batch classes × 2 images
        classes = init_args.get("classes") or DEFAULT_CLASSES[init_args.get("task", "weather")]
        batch_size = 2 * int(init_args.get("classes_per_batch") or len(classes))
    return _files(root, _shrink({**init_args, "num_workers": 0, "image_size": 0}, image_size=32,
                                batch_size=batch_size, num_positives=2, num_workers=0, eval_batch_size=16))


def _fairness(root: Path, init_args: dict[str, Any]) -> list[str]:
    if init_args.get("dataset", "adult") == "adult":
        write_adult_files(root, 300, 120, seed=1)
    else:
        write_compas_file(root, 500, seed=2)
    return _files(root, [])


def _hf_table(root: Path, init_args: dict[str, Any]) -> list[str]:
    """The Parquet table of an HF DataModule's shape (fccolit.testing.hf), with the config's feature and label
    columns; recommendation reads a MovieLens ratings.csv through datasets' CSV builder."""
    from fccolit.testing.hf import write_binary_parquet, write_grouped_parquet, write_ltr_parquet, write_multilabel_parquet

    label, features = init_args.get("label"), init_args.get("features")
    if "user" in init_args:
        dataset = write_movielens_csv(root)
    elif "query" in init_args:
        dataset = write_ltr_parquet(root / "ltr.parquet")
    elif "group" in init_args:
        dataset = write_grouped_parquet(root / "grouped.parquet", num_features=len(features))
    elif isinstance(label, list):
        dataset = write_multilabel_parquet(root / "multilabel.parquet", num_features=len(features), num_tasks=len(label))
    else:
        dataset = write_binary_parquet(root / "binary.parquet")
    return ["--data.init_args.dataset", str(dataset), "--data.init_args.cache_dir", str(root / "hf-cache"),
            *_shrink(init_args, num_negatives=20)]


#: DataModule class → generator. A new DataModule used by a config in configs/ needs an entry here.
DATA_GENERATORS: dict[type, Callable[[Path, dict[str, Any]], list[str]]] = {
    SyntheticBinaryDataModule: _generated_in_memory,
    SyntheticMultiLabelDataModule: _generated_in_memory,
    SyntheticMulticlassDataModule: _generated_in_memory,
    SyntheticGroupedDataModule: _generated_in_memory,
    SyntheticRankingDataModule: _generated_in_memory,
    LibSVMDataModule: _libsvm,
    MovieLensDataModule: _movielens,
    NetflixDataModule: _netflix,
    MSLRDataModule: _mslr,
    CIFARLTDataModule: _cifar,
    CheXpertDataModule: _chexpert,
    BDD100KDataModule: _bdd100k,
    FairnessDataModule: _fairness,
    HFClassificationDataModule: _hf_table,
    HFGroupedDataModule: _hf_table,
    HFRankingDataModule: _hf_table,
    HFRecommendationDataModule: _hf_table,
}


def import_class(class_path: str) -> type:
    """``"a.b.C"`` → the class (configs name classes by their full import path)."""
    module, _, name = class_path.rpartition(".")
    if not module:
        raise ValueError(f"class_path {class_path!r} is not a full import path (module.Class)")
    return getattr(importlib.import_module(module), name)


def generator_for(class_path: str) -> Callable[[Path, dict[str, Any]], list[str]]:
    """The generator of the DataModule ``class_path``, or an AssertionError that says where to register one."""
    cls = import_class(class_path)
    if cls not in DATA_GENERATORS:
        raise AssertionError(
            f"no fixture generator for the DataModule {class_path}: register one in DATA_GENERATORS in "
            f"tests/builders.py (write a tiny data set in its real file format under the given root and return the "
            f"--data.init_args overrides that point the config at it)"
        )
    return DATA_GENERATORS[cls]


def model_overrides(model_init_args: dict[str, Any], root: Path) -> list[str]:
    """Overrides for backbones that need local files: a CLIP classifier gets a tiny random CLIP folder (nothing is
    ever downloaded) matching the smoke run's 32-pixel crops."""
    backbone = model_init_args.get("model") or {}
    if str(backbone.get("class_path", "")).endswith("CLIPClassifier"):
        from fccolit.models.vision import write_tiny_clip

        folder = write_tiny_clip(root / "tiny_clip", image_size=32, patch_size=16)
        return ["--model.init_args.model.init_args.pretrained_path", str(folder)]
    return []


#: a config that trains in a fraction of a second (6 steps of a linear model on 600 generated rows, validated at steps
#: 3 and 6): what `fccolit sweep` tests tune
SWEEP_CONFIG = """\
seed_everything: 0
trainer:
  accelerator: cpu
  devices: 1
  max_steps: 6
  val_check_interval: 3
  check_val_every_n_epoch: null
  logger: false
model:
  class_path: fccolit.algorithms.SOX
  init_args:
    model:
      class_path: fccolit.models.LinearScorer
    objective:
      class_path: fccolit.objectives.AveragePrecisionSurrogate
      init_args:
        surrogate: squared_hinge
        margin: 0.5
    ema_weight: 0.5
    optimizer:
      class_path: fccolit.optim.Momentum
      init_args:
        lr: 0.1
        momentum_weight: 0.1
    metrics: [ap, auroc]
data:
  class_path: fccolit.datamodules.SyntheticBinaryDataModule
  init_args:
    num_samples: 600
    num_features: 5
    pos_fraction: 0.2
    batch_size: 32
    num_positives: 8
"""
