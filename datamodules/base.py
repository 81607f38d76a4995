"""What every fccolit DataModule shares: sizes for the model, and a resumable rank-aware training sampler."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset

from fccolit.data import TensorDictDataset, identity_collate
from fccolit.io.cache import CacheUse, recording_cache_uses
from fccolit.samplers import RankAwareBatchSampler, SequentialShardSampler


#: constructor arguments that count batches or batch members: None (the default) or an integer >= 1
BATCH_SIZE_ARGUMENT = re.compile(r"^(batch_size|eval_batch_size|num_batches|\w+_per_batch)$")


def check_batch_sizes(owner: str, arguments: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first argument of ``arguments`` that :data:`BATCH_SIZE_ARGUMENT` covers and is
    neither None nor an integer >= 1 (e.g. ``batch_size=0``), before any data is read or any step is taken."""
    for name, value in arguments.items():
        if not BATCH_SIZE_ARGUMENT.match(name) or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


class ResumableDataLoader(DataLoader):
    """The training DataLoader of an :class:`FCCODataModule`.

    Its position is saved and restored by the DataModule (:meth:`FCCODataModule.state_dict` puts the training
    sampler's position in every checkpoint), so the loader keeps no state of its own; having ``state_dict`` /
    ``load_state_dict`` tells Lightning that it is resumable, instead of the warning, on a resume from a checkpoint
    written mid-epoch, that a plain DataLoader may repeat or skip batches.
    """

    def state_dict(self) -> dict[str, Any]:
        """Empty: the stream position is in the DataModule's state."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore: :meth:`FCCODataModule.load_state_dict` restores the training sampler."""


def _binary_positives(dataset: Dataset) -> int | None:
    """The number of positive labels of a :class:`TensorDictDataset` whose ``y`` is one column of 0 / 1 labels
    (None for any other dataset or labels)."""
    labels = dataset.fields.get("y") if isinstance(dataset, TensorDictDataset) else None
    if labels is None or labels.dim() != 1 or labels.numel() == 0 or labels.is_floating_point() or int(labels.max()) > 1:
        return None
    return int((labels > 0).sum())


class FCCODataModule(LightningDataModule):
    """Base DataModule.

    Subclasses fill :attr:`sizes` in ``__init__`` (cheaply: from generated data or a metadata cache), so the
    CLI can link them to the model before ``setup`` (``data_sizes`` of the algorithm: state rows, input widths),
    and implement :meth:`build_train_sampler` plus the ``*_dataset`` attributes in ``setup``.

    The training sampler's position is saved in checkpoints (:meth:`state_dict`), so a run resumed from a
    checkpoint written mid-epoch continues with exactly the batches the interrupted run would have seen.
    """

    #: what one row of a split is, in :meth:`summary` ("rows" of a table, "queries" of a ranking data set)
    summary_unit = "rows"
    #: True when the data has no validation split and validates on the test split (the CLI warns when it does)
    val_is_test = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's constructor checks its batch-size arguments (:func:`check_batch_sizes`) first, and
        records the cache entries it reads or writes (:attr:`cache_uses`)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def checked_init(self: FCCODataModule, *args: Any, **kw: Any) -> None:
            try:
                bound = signature.bind(self, *args, **kw)
            except TypeError:  # a wrong call: the constructor's own error says what
                bound = None
            if bound is not None:
                bound.apply_defaults()
                check_batch_sizes(type(self).__name__, {k: v for k, v in bound.arguments.items() if k != "self"})
            with recording_cache_uses() as uses:
                init(self, *args, **kw)
            self.cache_uses: list[CacheUse] = uses

        cls.__init__ = checked_init

    def __init__(self, num_workers: int = 0, eval_batch_size: int = 1024) -> None:
        check_batch_sizes(type(self).__name__, {"eval_batch_size": eval_batch_size})
        super().__init__()
        self.num_workers = num_workers
        self.eval_batch_size = eval_batch_size
        self.sizes: dict[str, int] = {}
        self.train_dataset: Dataset | None = None
        self.val_dataset: Dataset | None = None
        self.test_dataset: Dataset | None = None
        self._train_sampler: RankAwareBatchSampler | None = None
        self._sampler_state: dict[str, int] | None = None
        self.cache_uses = []

    # ------------------------------------------------------------------ what the data is
    def summary(self) -> str:
        """One line saying what was loaded: each split's size in :attr:`summary_unit` (with its positives when
        the split's labels ``y`` are one binary column), and each cache entry read (hit) or written (miss), e.g.
        ``LibSVMDataModule: train 26,049 rows (6,275 positives), val 6,512 rows (1,566 positives), test 16,281 rows
        (3,846 positives); cache hit /home/u/.cache/fccolit/libsvm-a9a-…``. Splits not set up yet are left out."""
        splits = []
        for split, dataset in (("train", self.train_dataset), ("val", self.val_dataset), ("test", self.test_dataset)):
            if dataset is None:
                continue
            text = f"{split} {len(dataset):,} {self.summary_unit}"
            positives = _binary_positives(dataset)
            if positives is not None:
                text += f" ({positives:,} positives)"
            if split == "val" and self.val_is_test:
                text += " (the test split)"
            splits.append(text)
        cache = "; ".join(use.describe() for use in self.cache_uses) or "no cache"
        return f"{type(self).__name__}: {', '.join(splits) or 'not set up'}; {cache}"

    # ------------------------------------------------------------------ to implement
    def build_train_sampler(self) -> RankAwareBatchSampler:
        raise NotImplementedError

    def set_datasets(self, splits: dict[str, dict[str, Any]]) -> None:
        """``train_dataset`` / ``val_dataset`` / ``test_dataset`` as :class:`~fccolit.data.TensorDictDataset` of the
        batch fields of each split (``splits["train"]`` etc.: field name → ``[N_s, ...]``), the usual ``setup``."""
        self.train_dataset = TensorDictDataset(**splits["train"])
        self.val_dataset = TensorDictDataset(**splits["val"])
        self.test_dataset = TensorDictDataset(**splits["test"])

    # ------------------------------------------------------------------ loaders
    def _loader(
        self, dataset: Dataset | None, batch_sampler: Any, stage: str, loader: type[DataLoader] = DataLoader
    ) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__} has no {stage} data: call setup() first")
        return loader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=identity_collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        if self._train_sampler is None:
            self._train_sampler = self.build_train_sampler()
        if self._sampler_state is not None:
            self._train_sampler.load_state_dict(self._sampler_state)
            self._sampler_state = None
        return self._loader(self.train_dataset, self._train_sampler, "training", ResumableDataLoader)

    def _eval_loader(self, dataset: Dataset | None, stage: str) -> DataLoader:
        size = len(dataset) if dataset is not None else 0
        return self._loader(dataset, SequentialShardSampler(size, self.eval_batch_size), stage)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_dataset, "validation")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_dataset, "test")

    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_dataset, "predict")

    # ------------------------------------------------------------------ checkpointing of the stream position
    def state_dict(self) -> dict[str, Any]:
        if self._train_sampler is None or self.trainer is None:
            return {}
        consumed = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"train_sampler": self._train_sampler.state_dict(batches_consumed=consumed)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._sampler_state = state_dict.get("train_sampler")
