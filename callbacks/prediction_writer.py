"""Write the scores of ``fccolit predict`` to a CSV file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, Sequence

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

#: the file name used when no path is given, in the logger's version folder (next to its ``config.yaml``)
DEFAULT_FILENAME = "predictions.csv"


class PredictionWriter(BasePredictionWriter):
    """Write every predicted score to a CSV file as the batches come (nothing is kept in memory).

    The rows go to ``<file>.partial``, renamed to the file when prediction ends (removed if it fails), so the file
    is always whole.

    The CSV's columns per kind of batch follow the Example.

    Args:
        path: the CSV file; None: ``predictions.csv`` in the logger's version folder
            (``lightning_logs/<name>/version_<k>/``), or in the trainer's ``default_root_dir`` without a logger.
            Under DDP each process writes its own ``<stem>.rank<r>.csv``.

    Raises:
        ValueError: at prediction start, the file is an existing folder; at a batch, the batch has neither an
            ``index`` field matching its scores nor a ``query`` field (:func:`prediction_rows`), or its columns
            differ from the earlier batches'.
        OSError: the finished file cannot be renamed into place (the side file is removed).

    Example:
        The file each process writes (a stand-in trainer: rank 1 of 2):

        >>> import tempfile
        >>> from types import SimpleNamespace
        >>> writer = PredictionWriter(path="out/predictions.csv")
        >>> writer.output_path(SimpleNamespace(world_size=2, global_rank=1)).as_posix()
        'out/predictions.rank1.csv'
        >>> PredictionWriter(path=tempfile.gettempdir()).on_predict_start(SimpleNamespace(world_size=1), None)
        Traceback (most recent call last):
            ...
        ValueError: --prediction_writer.path ... is a folder: give a file name, e.g. .../predictions.csv

    The rows depend on the batch (the DataModule's ``predict_dataloader``: its ``predict_split``, the test split):

    * one score per example, a batch with an ``index`` field (classification): ``index,score`` with the example's
      row in its split; scores ``[B, T]`` (one per task) give ``index,score_0,...,score_<T-1>``. When the split has
      binary or multi-label labels (``y`` of the scores' shape), ``probability`` (σ of the score, a logit) and
      ``label`` follow (``probability_<t>``, ``label_<t>`` per task; ``label`` −1 marks a missing label); with
      multi-class labels, ``label`` (the class);
    * a list of items per query, a batch with a ``query`` field and scores ``[Q, L]`` (ranking): ``query,item,score``,
      one row per real entry (the batch's ``mask``); ``item`` is the batch's ``items`` id where it has one
      (recommendation candidates) and otherwise the entry's position in the query's list (learning to rank: the
      documents' order in the file); without a ``mask`` (full ranking over all items) every item of every query.

    Scores are the module's evaluation scores (``predict_step``), written with 9 significant digits. When the file is
    complete, one line says where it is, how many rows of which split it holds and its columns.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        super().__init__(write_interval="batch")
        self.path = None if path is None else Path(path)
        self.written_to: Path | None = None  # the file of the last predict run
        self._file: IO[str] | None = None
        self._header: str | None = None

    def output_path(self, trainer: Trainer) -> Path:
        """The file this process writes: :attr:`path`, or the default above, with ``.rank<r>`` under DDP."""
        path = self.path
        if path is None:
            folder = trainer.log_dir if trainer.logger is not None and trainer.log_dir else trainer.default_root_dir
            path = Path(folder) / DEFAULT_FILENAME
        if trainer.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
        return path

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.written_to = self.output_path(trainer)
        if self.written_to.is_dir():  # found before any batch is scored, not when the finished file is renamed
            raise ValueError(
                f"--prediction_writer.path {self.written_to} is a folder: give a file name, e.g. "
                f"{self.written_to / DEFAULT_FILENAME}"
            )
        self.written_to.parent.mkdir(parents=True, exist_ok=True)
        # rows go to a side file, renamed into place when prediction ends: a crash leaves no half-written CSV
        self._file = open(self._partial_path(), "w", newline="")
        self._header = None
        self._rows = 0

    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        header, rows, formats = prediction_rows(torch.as_tensor(prediction), batch)
        if self._header is None:
            self._header = header
            self._file.write(header + "\n")
        elif header != self._header:
            raise ValueError(f"PredictionWriter: batch {batch_idx} gives columns {header!r}, earlier batches {self._header!r}")
        np.savetxt(self._file, rows, fmt=formats, delimiter=",")
        self._rows += rows.shape[0]

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._close():
            try:
                os.replace(self._partial_path(), self.written_to)
            except OSError:
                self._partial_path().unlink(missing_ok=True)
                raise
            split = getattr(getattr(trainer, "datamodule", None), "predict_split", None)
            rank_zero_info(f"predictions: {self.written_to} ({self._rows:,} rows"
                           f"{f' of the {split} split' if split else ''}; columns {self._header})")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._close():
            self._partial_path().unlink(missing_ok=True)

    def _partial_path(self) -> Path:
        return self.written_to.with_name(self.written_to.name + ".partial")

    def _close(self) -> bool:
        """Close the side file; whether one was open."""
        if self._file is None:
            return False
        self._file.close()
        self._file = None
        return True


def prediction_rows(scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[str, np.ndarray, list[str]]:
    """``(CSV header, rows [N, C] float64, one printf format per column)`` of one predicted batch (see
    :class:`PredictionWriter` for the layouts).

    Raises:
        ValueError: the batch has neither an ``index`` field matching ``scores [B]`` / ``[B, T]`` nor a ``query``
            field matching ``scores [Q, L]``.
    """
    scores = scores.detach().to("cpu", torch.float64)
    score_format = "%.9g"
    index = batch.get("index")
    if index is not None and scores.dim() in (1, 2) and scores.shape[0] == index.shape[0]:
        columns = scores.reshape(scores.shape[0], -1)
        suffixes = [""] if scores.dim() == 1 else [f"_{t}" for t in range(columns.shape[1])]
        parts, names, formats = [index.reshape(-1, 1).to("cpu", torch.float64)], ["index"], ["%d"]
        parts.append(columns)
        names += [f"score{s}" for s in suffixes]
        formats += [score_format] * len(suffixes)
        labels = batch.get("y")
        if labels is not None and tuple(labels.shape) == tuple(scores.shape) and not labels.is_floating_point():
            # binary or multi-label: the scores are logits, σ of which is the model's probability of the positive class
            parts += [torch.sigmoid(columns), labels.reshape(columns.shape).to("cpu", torch.float64)]
            names += [f"probability{s}" for s in suffixes] + [f"label{s}" for s in suffixes]
            formats += [score_format] * len(suffixes) + ["%d"] * len(suffixes)
        elif labels is not None and labels.reshape(-1).shape[0] == scores.shape[0] and scores.dim() == 2:
            parts.append(labels.reshape(-1, 1).to("cpu", torch.float64))  # multi-class: the class of each example
            names.append("label")
            formats.append("%d")
        return ",".join(names), torch.cat(parts, 1).numpy(), formats
    query = batch.get("query")
    if query is not None and scores.dim() == 2 and scores.shape[0] == query.shape[0]:
        items = batch.get("items")
        if items is None or tuple(items.shape) != tuple(scores.shape):
            items = torch.arange(scores.shape[1]).expand_as(scores)
        mask = batch.get("mask")
        mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.to("cpu", torch.bool)
        queries = query.reshape(-1, 1).expand_as(scores)
        rows = torch.stack([queries.cpu()[mask].double(), items.cpu()[mask].double(), scores[mask]], 1)
        return "query,item,score", rows.numpy(), ["%d", "%d", score_format]
    fields = {k: tuple(v.shape) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    raise ValueError(
        f"PredictionWriter: cannot name the rows of scores of shape {tuple(scores.shape)}: the batch needs an 'index' "
        f"field [B] (one score per example) or a 'query' field [Q] (scores [Q, L]); it has {fields}"
    )
