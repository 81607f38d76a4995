"""A new DataModule: read your own files and reuse fccolit's samplers.

A DataModule for a CSV file ``<root>/<name>.csv`` (a header, numeric feature columns, a 0/1 ``label`` column).
What fccolit needs from a DataModule:

* ``sizes`` filled in ``__init__`` (the CLI links them to the model: state rows, input width) — here from
  :func:`fccolit.data.binary_sizes`;
* ``setup`` creating ``train_dataset`` / ``val_dataset`` / ``test_dataset``: ``set_datasets`` makes them from each
  split's :func:`~fccolit.data.binary_fields`, the batch fields the binary objectives read (``x``, ``y``, ``index``,
  ``pos_index``, ``neg_index``); :func:`~fccolit.data.random_splits` draws a seeded train / validation / test split;
* ``build_train_sampler`` returning a rank-aware sampler: :class:`~fccolit.samplers.DualSampler` puts a fixed number
  of positives in every batch, and makes the run resumable mid-epoch and exact under DDP. Evaluation loaders,
  checkpointing of the stream position and DDP slicing come from the base class.

Used from YAML like any other: ``data: {class_path: my_package.CSVBinaryDataModule, init_args: {root: ..., name: ...}}``.

    python examples/new_datamodule.py       # writes a CSV under a temporary folder, trains SOX on it
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

import torch
from lightning.pytorch import Trainer

from fccolit.algorithms import SOX
from fccolit.data import binary_fields, binary_sizes, random_splits
from fccolit.datamodules import FCCODataModule
from fccolit.models import MLP
from fccolit.objectives import AveragePrecisionSurrogate
from fccolit.samplers import DualSampler, RankAwareBatchSampler
from fccolit.testing import write_binary_csv


class CSVBinaryDataModule(FCCODataModule):
    """Binary classification from ``<root>/<name>.csv``, split train / validation / test at random (seeded).

    Args:
        root: the folder holding the file.
        name: the file's name without ``.csv``.
        label_column: the 0/1 target column; every other column is a feature.
        val_fraction, test_fraction: shares of the validation and test splits.
        batch_size, num_positives: global batch size B and positives per batch P (DualSampler).
        seed: seeds the split and the sampler.
    """

    def __init__(self, root: str | os.PathLike, name: str, label_column: str = "label", val_fraction: float = 0.2,
                 test_fraction: float = 0.2, batch_size: int = 64, num_positives: int = 16, seed: int = 0,
                 num_workers: int = 0, eval_batch_size: int = 1024) -> None:
        super().__init__(num_workers=num_workers, eval_batch_size=eval_batch_size)
        path = Path(root) / f"{name}.csv"
        if not path.is_file():  # say what is missing and how to fix it
            raise FileNotFoundError(f"CSV file not found: {path}. Put {name}.csv (a header and a '{label_column}' "
                                    f"column) into {root}, or pass the folder holding it as root.")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        features = [c for c in rows[0] if c != label_column]
        x = torch.tensor([[float(r[c]) for c in features] for r in rows], dtype=torch.float32)  # [N, D]
        y = torch.tensor([int(r[label_column]) for r in rows])                                # [N]
        parts = random_splits(len(y), val_fraction, test_fraction, seed)  # row indices of each split
        self._splits = {split: binary_fields(x[rows_], y[rows_]) for split, rows_ in parts.items()}
        self.sizes = binary_sizes(self._splits["train"])  # num_samples, num_positives, num_negatives, num_features
        self.batch_size, self.num_positives, self.seed = batch_size, num_positives, seed

    def setup(self, stage: str | None = None) -> None:
        self.set_datasets(self._splits)

    def build_train_sampler(self) -> RankAwareBatchSampler:
        return DualSampler(self._splits["train"]["y"], self.batch_size, self.num_positives, seed=self.seed)


def main(root: str | None = None, epochs: int = 2) -> dict[str, float]:
    root = Path(root or tempfile.mkdtemp())
    write_binary_csv(root / "toy.csv")  # a toy CSV in the layout above (about 8% positives)
    data = CSVBinaryDataModule(root, "toy", batch_size=64, num_positives=16)
    torch.manual_seed(0)
    module = SOX(MLP(hidden=[16]), AveragePrecisionSurrogate(), data_sizes=data.sizes, ema_weight=0.9,
                 optimizer=lambda params: torch.optim.Adam(params, lr=0.01))
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      use_distributed_sampler=False)
    trainer.fit(module, datamodule=data)
    batch = next(iter(data.train_dataloader()))
    positives = int(batch["y"].sum())
    ap = trainer.test(module, datamodule=data, verbose=False)[0]["test/ap"]
    print(f"{data.sizes}; a training batch holds {positives} positives of {len(batch['y'])}; test AP {ap:.3f}")
    return {"positives_per_batch": positives, "batch_size": len(batch["y"]), "ap": ap, **data.sizes}


if __name__ == "__main__":
    main()
