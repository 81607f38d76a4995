"""What every fccolit DataModule shares: sizes for the model, and a resumable rank-aware training sampler."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset

from fccolit.data import TensorDictDataset, data_fingerprint, identity_collate
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

    It takes the arguments of :class:`torch.utils.data.DataLoader` (:meth:`FCCODataModule.train_dataloader` builds it).

    Example:
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> data = SyntheticBinaryDataModule(num_samples=200, batch_size=16, num_positives=4)
        >>> data.setup("fit")
        >>> loader = data.train_dataloader()
        >>> type(loader).__name__, loader.state_dict()
        ('ResumableDataLoader', {})
    """

    def state_dict(self) -> dict[str, Any]:
        """Empty: the stream position is in the DataModule's state."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore: :meth:`FCCODataModule.load_state_dict` restores the training sampler."""


class DataError(ValueError):
    """Data that cannot serve the run as configured, found when a DataModule is set up (e.g. an evaluation split
    without positives). The ``fccolit`` command reports it as one line, exit status 2, like a configuration error
    (``fccolit_configuration_error``), before any step.

    Raised by :meth:`FCCODataModule.check_evaluation_labels`; a ``ValueError``, so callers that catch those catch it.

    Example:
        >>> issubclass(DataError, ValueError), DataError.fccolit_configuration_error
        (True, True)
    """

    fccolit_configuration_error = True


def _labels(dataset: Dataset | None) -> torch.Tensor | None:
    """The ``y`` field of a dataset holding its rows' fields (``fields``: :class:`TensorDictDataset`, the image and
    Arrow datasets), or None."""
    fields = getattr(dataset, "fields", None)
    labels = fields.get("y") if isinstance(fields, dict) else None
    return labels if torch.is_tensor(labels) else None


def _binary_positives(dataset: Dataset) -> int | None:
    """The number of positive labels of a dataset (:func:`_labels`) whose ``y`` is one column of 0 / 1 labels
    (None for any other dataset or labels)."""
    labels = _labels(dataset)
    if labels is None or labels.dim() != 1 or labels.numel() == 0 or labels.is_floating_point() or int(labels.max()) > 1:
        return None
    return int((labels > 0).sum())


class FCCODataModule(LightningDataModule):
    """Base DataModule.

    Subclasses give :attr:`sizes` before ``setup``, so the CLI can link them to the model (``data_sizes`` of the
    algorithm: state rows, input widths): set in ``__init__`` when they are cheap (generated data, a metadata
    cache), or computed on first use by :meth:`read_data` (the HF DataModules: their constructors only store
    their arguments). They implement :meth:`build_train_sampler` plus the ``*_dataset`` attributes in ``setup``.

    The training sampler's position is saved in checkpoints (:meth:`state_dict`), so a run resumed from a
    checkpoint written mid-epoch continues with exactly the batches the interrupted run would have seen.

    Args:
        num_workers: DataLoader worker processes (0: batches are built in the main process).
        eval_batch_size: rows (or queries) per evaluation batch.

    Raises:
        ValueError: a subclass's batch-size argument (``batch_size``, ``eval_batch_size``, ``num_batches``,
            ``*_per_batch``: :func:`check_batch_sizes`) that is neither None nor an integer >= 1, before any data is
            read.
        DataError: in ``setup``, an evaluation split whose metrics are undefined (no positive, or no task with both
            classes: :meth:`check_evaluation_labels`).
        RuntimeError: a DataLoader asked for before ``setup``.
        NotImplementedError: a subclass without :meth:`build_train_sampler` asked for its training DataLoader.

    Example:
        >>> from fccolit.datamodules import SyntheticBinaryDataModule
        >>> SyntheticBinaryDataModule(batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: SyntheticBinaryDataModule: batch_size must be a positive integer, got 0
        >>> SyntheticBinaryDataModule(num_samples=200, batch_size=16, num_positives=4).val_dataloader()
        Traceback (most recent call last):
        ...
        RuntimeError: SyntheticBinaryDataModule has no validation data: call setup() first
    """

    #: a base to build on, not a choice of its own: the ``fccolit`` command's help and "Did you mean" leave it out
    cli_choice = False

    #: what one row of a split is, in :meth:`summary` ("rows" of a table, "queries" of a ranking data set)
    summary_unit = "rows"
    #: True when the data has no validation split and validates on the test split (the CLI warns when it does)
    val_is_test = False
    #: the split that ``predict`` scores (``"test"``, ``"val"`` or ``"train"``)
    predict_split = "test"

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
        setup = cls.__dict__.get("setup")
        if setup is not None:

            @functools.wraps(setup)
            def checked_setup(self: FCCODataModule, stage: str | None = None) -> None:
                depth = self.__dict__.get("_setup_depth", 0)  # a subclass's setup calling its parent's: check once
                self._setup_depth = depth + 1
                try:
                    setup(self, stage)
                finally:
                    self._setup_depth = depth
                if depth == 0 and getattr(self, "trainer", None) is not None:  # a run, not a look at the data
                    self.check_evaluation_labels(stage)

            cls.setup = checked_setup

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
    @property
    def sizes(self) -> dict[str, int]:
        """What the model needs to know of the data (the algorithm's ``data_sizes``), e.g. ``{"num_samples": 512,
        "num_positives": 64, "num_negatives": 448, "num_features": 10}``; reads the data first when the DataModule
        reads it on first use (:meth:`read_data`)."""
        self.read_data()
        return self._sizes

    @sizes.setter
    def sizes(self, sizes: dict[str, int]) -> None:
        self._sizes = sizes

    def read_data(self) -> None:
        """Read what :attr:`sizes` and ``setup`` need, once (nothing here: a DataModule that reads its data on
        first use overrides it)."""

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

    # ------------------------------------------------------------------ checks at set-up
    def split_source(self, split: str) -> str | None:
        """The file (or files) that the rows of ``split`` come from, for error messages, e.g. ``"/data/a9a.t"`` or
        ``"held out of /data/a9a"``; None when the DataModule has no files (generated data). Subclasses with files
        override it."""
        return None

    def check_evaluation_labels(self, stage: str | None = None) -> None:
        """Raise :class:`DataError` when an evaluation split that ``stage`` evaluates has binary labels (a ``y``
        field of 0 / 1 labels beside ``pos_index``) of one class only, or multi-label labels (``y`` ``[N, T]`` of
        1 / 0 / −1) with no task holding both classes: AP is undefined without positives and AUROC / pAUC without
        negatives too, so the run would otherwise stop at its first validation (or test), after training. The
        message names the split, its file (:meth:`split_source`) and what to change. Called after every
        subclass's ``setup`` when a Trainer sets the DataModule up (not when ``setup`` is called by hand to look
        at the data): ``fit`` and ``validate``: the validation split, unless the trainer runs no validation
        batch; ``test``: the test split; None: both; ``predict``: none."""
        splits = {"fit": ("val",), "validate": ("val",), "test": ("test",), None: ("val", "test")}.get(stage, ())
        trainer = getattr(self, "trainer", None)
        if stage == "fit" and trainer is not None and not getattr(trainer, "limit_val_batches", 1):
            splits = ()
        for split in splits:
            dataset = getattr(self, f"{split}_dataset", None)
            labels = _labels(dataset)
            fields = getattr(dataset, "fields", {})
            if labels is None or labels.numel() == 0 or labels.is_floating_point():
                continue
            if labels.dim() == 1 and "pos_index" in fields:
                positives = int((labels == 1).sum())
                negatives = int((labels == 0).sum())
                if positives and negatives:
                    continue
                missing = "positive" if not positives else "negative"
                needs = "AP, AUROC and pAUC need positives" if not positives else "AUROC and pAUC need negatives"
                counts = f"{positives:,} positives, {negatives:,} negatives"
            elif labels.dim() == 2 and int(labels.max()) <= 1 and int(labels.min()) >= -1:
                both = ((labels == 1).any(0) & (labels == 0).any(0))
                if bool(both.any()):
                    continue
                missing, needs = "task with both classes", "each task's AP, AUROC and pAUC need both"
                counts = f"{labels.shape[1]} tasks, {int((labels == 1).sum()):,} positive labels"
            else:
                continue
            source = self.split_source(split)
            origin = f" ({source})" if source else ""
            raise DataError(
                f"{type(self).__name__}: the {split} split{origin} has no {missing} among its {labels.shape[0]:,} rows "
                f"({counts}), so its metrics are undefined ({needs}); give the {split} split rows of both classes "
                "(e.g. a larger val_fraction / test_fraction, another seed, or another file)"
            )

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
            self._check_resumed_stream(self._sampler_state)
            self._train_sampler.load_state_dict(self._sampler_state["train_sampler"])
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
        return self._eval_loader(getattr(self, f"{self.predict_split}_dataset"), "predict")

    # ------------------------------------------------------------------ checkpointing of the stream position
    def train_fingerprint(self) -> str:
        """The training split's content hash (:func:`~fccolit.data.data_fingerprint`), computed once per setup."""
        if getattr(self, "_fingerprint", None) is None or self._fingerprint[0] is not self.train_dataset:
            self._fingerprint = (self.train_dataset, data_fingerprint(self.train_dataset))
        return self._fingerprint[1]

    def state_dict(self) -> dict[str, Any]:
        """The training stream's position (the sampler's epoch and the batches of it consumed), the global batch size
        and the training data's fingerprint, which a resumed run compares with its own."""
        if self._train_sampler is None or self.trainer is None:
            return {}
        consumed = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"train_sampler": self._train_sampler.state_dict(batches_consumed=consumed),
                "global_batch_size": int(self._train_sampler.global_batch_size()),
                "train_fingerprint": self.train_fingerprint()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._sampler_state = state_dict if state_dict.get("train_sampler") else None

    def _check_resumed_stream(self, state: dict[str, Any]) -> None:
        """Warn when the run resumes on training data whose content differs from the checkpoint's run (the per-index
        state's rows pair with the data by position) or with another global batch size (the stream's position counts
        batches)."""
        name = type(self).__name__
        saved = state.get("train_fingerprint")
        if saved is not None and saved != self.train_fingerprint():
            rank_zero_warn(
                f"{name}: resuming on training data that differs from the checkpoint's run (its content fingerprint "
                f"was {saved}, now {self.train_fingerprint()}): rows of the same size in another order or with other "
                "values; the per-index state restored from the checkpoint now pairs its rows with other examples. "
                "Resume on the data the run started with, or start a new run"
            )
        size, now = state.get("global_batch_size"), int(self._train_sampler.global_batch_size())
        if size is not None and int(size) != now:
            position = state["train_sampler"]
            rank_zero_warn(
                f"{name}: resuming with global batches of {now} rows where the checkpoint's run drew {size}: the "
                f"stream resumes after batch {position['batches_consumed']} of epoch {position['epoch']} counted in "
                "batches of the new size, so the rest of the run is not the one the interrupted run would have had"
            )
