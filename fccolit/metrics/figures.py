"""TensorBoard pictures of what the evaluation metrics already hold: precision-recall and ROC curves (binary data;
one line per task for multi-label data), NDCG@k against k (ranking), and constraint values over the epochs.

The curves come from the metrics' last ``compute()`` (:meth:`~fccolit.metrics.EvaluationMetrics.named_curves`):
the binary metrics' ROC vertices (the sort AP, AUROC and pAUC are computed from) and the NDCG metrics' sums of
NDCG@j per cut-off j. Nothing passes over the data again, and under DDP the curves are the global ones (computed
from the synchronized states, like the logged values).

Written only on global rank 0 and only to a :class:`~lightning.pytorch.loggers.TensorBoardLogger` (any other
logger: nothing is drawn). A figure is a ``matplotlib.figure.Figure`` drawn on the Agg canvas (no ``pyplot``: no GUI
backend, no global list of open figures), rendered once to an RGB image for ``add_image`` and then released. Curves
with many vertices are thinned to at most ``MAX_POINTS`` points evenly spaced along the curve's length, which no
screen tells apart from the full curve. Tags, for an evaluation group ``val`` (``test``, ``val_anchor``, ...):

* ``val/figures/precision_recall``, ``val/figures/roc`` (images): one line per task, AP / AUROC in the legend, the
  positive rate and the diagonal dashed;
* ``val/pr_curve`` (``val/pr_curve/<task>``): TensorBoard's interactive PR-curve plugin, at most 127 thresholds;
* ``val/figures/ndcg_at_k`` (image): NDCG@k against k = 1..K for the largest cut-off K logged;
* ``<stage>/figures/constraints`` (image, from :class:`~fccolit.callbacks.ConstraintViolationLogger`): each
  constraint ``h_i`` against the epoch, with the feasibility line ``h = 0``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from fccolit.metrics.functional.classification import ROCVertices, _auroc_of, _average_precision_of

__all__ = [
    "MAX_POINTS",
    "figure_writer",
    "log_curve_figures",
    "log_constraint_figure",
    "thin",
    "render",
]

#: at most this many points per drawn line
MAX_POINTS = 1000
#: the constraint figure names its lines up to this many constraints
MAX_LEGEND = 20
#: TensorBoard's PR-curve plugin takes at most 127 thresholds
PR_PLUGIN_THRESHOLDS = 127


def figure_writer(trainer: Any) -> Any | None:
    """The ``SummaryWriter`` of the trainer's TensorBoard logger on global rank 0, else None.

    Args:
        trainer: a Lightning ``Trainer`` (or None).

    Returns:
        The writer; None on other ranks, without a trainer or without a TensorBoard logger.

    Raises:
        Nothing.

    Example:
        >>> figure_writer(None) is None
        True
    """
    from lightning.pytorch.loggers import TensorBoardLogger

    if trainer is None or trainer.global_rank != 0:
        return None
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def thin(x: Tensor, y: Tensor, max_points: int = MAX_POINTS) -> Tensor:
    """The indices of at most ``max_points`` points spread evenly along the length of the polyline ``(x, y)``.

    The points nearest to ``max_points − 1`` marks evenly spaced along the length (|Δx| + |Δy|), plus the first and
    last: the steep start of a PR curve keeps its points as well as the long flat tail.

    Args:
        x: ``[V]`` abscissas.
        y: ``[V]`` ordinates.
        max_points: the most points kept (``>= 2``).

    Returns:
        ``[P]`` increasing long indices, first and last included, ``P <= max_points`` (all of them when
        ``V <= max_points``).

    Raises:
        Nothing for ``[V]`` tensors of the same length.

    Example:
        >>> import torch
        >>> x = torch.linspace(0, 1, 101)
        >>> thin(x, x ** 2, max_points=5).tolist()
        [0, 46, 76, 100]
    """
    n = x.numel()
    if n <= max_points:
        return torch.arange(n)
    length = torch.cat([x.new_zeros(1), torch.cumsum((x.diff().abs() + y.diff().abs()).double(), 0)])
    marks = torch.linspace(0.0, float(length[-1]), max_points - 1, dtype=torch.float64)
    index = torch.searchsorted(length, marks).clamp_max(n - 1)
    return torch.unique(torch.cat([index, torch.tensor([0, n - 1])]))


def render(figure: Any) -> np.ndarray:
    """``figure`` drawn on a new Agg canvas as an ``[H, W, 3]`` uint8 image; the figure is cleared afterwards.

    Args:
        figure: a ``matplotlib.figure.Figure``.

    Returns:
        The RGB image, for ``SummaryWriter.add_image(..., dataformats="HWC")``.

    Raises:
        Whatever matplotlib raises while drawing.

    Example:
        >>> from matplotlib.figure import Figure
        >>> render(Figure(figsize=(2, 1), dpi=50)).shape
        (50, 100, 3)
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    figure.clear()
    return image


def _axes(title: str, xlabel: str, ylabel: str, integer_x: bool = False, legend_right: bool = False) -> tuple[Any, Any]:
    """A figure with one axes; fixed margins (a layout engine costs more than the drawing). ``legend_right``: a
    wider figure with room for a legend right of the axes."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(7.0 if legend_right else 5.0, 3.8), dpi=100)
    figure.subplots_adjust(left=0.15 * 5 / 7 if legend_right else 0.15, right=0.72 if legend_right else 0.97,
                           bottom=0.13, top=0.92)
    axes = figure.add_subplot()
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.grid(alpha=0.3)
    if integer_x:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return figure, axes


def _task(key: str) -> str:
    """``"roc/<task>"`` -> ``"<task>: "``, ``"roc"`` -> ``""`` (the legend's prefix)."""
    return f"{key.split('/', 1)[1]}: " if "/" in key else ""


def _precision_recall_figure(curves: Mapping[str, ROCVertices], title: str) -> Any:
    figure, axes = _axes(title, "recall", "precision")
    for key, roc in curves.items():
        recall, precision = roc.precision_recall()
        keep = thin(recall, precision)
        line, = axes.plot(recall[keep].numpy(), precision[keep].numpy(), lw=1.5,
                          label=f"{_task(key)}AP {float(_average_precision_of(roc)):.4f}")
        rate = roc.num_positives / (roc.num_positives + roc.num_negatives)
        axes.axhline(rate, color=line.get_color(), ls="--", lw=0.8)  # a random ranking's precision
    axes.set(xlim=(0, 1), ylim=(0, 1.02))
    axes.legend(loc="upper right", fontsize="small")
    return figure


def _roc_figure(curves: Mapping[str, ROCVertices], title: str) -> Any:
    figure, axes = _axes(title, "false positive rate", "true positive rate")
    axes.plot([0, 1], [0, 1], color="grey", ls="--", lw=0.8)
    for key, roc in curves.items():
        if roc.num_negatives == 0:  # no ROC curve without negatives
            continue
        fpr, tpr = roc.roc()
        keep = thin(fpr, tpr)
        axes.plot(fpr[keep].numpy(), tpr[keep].numpy(), lw=1.5, label=f"{_task(key)}AUROC {float(_auroc_of(roc)):.4f}")
    axes.set(xlim=(0, 1), ylim=(0, 1.02))
    axes.legend(loc="lower right", fontsize="small")
    return figure


def _cutoff_figure(curves: Mapping[str, Tensor], title: str) -> Any:
    figure, axes = _axes(title, "cut-off k", "NDCG@k", integer_x=True)
    for key, values in curves.items():
        k = np.arange(1, values.numel() + 1)
        axes.plot(k, values.cpu().numpy(), marker="o" if values.numel() <= 50 else None, ms=3, lw=1.5,
                  label=key.replace("@k", ""))
    axes.legend(loc="lower right", fontsize="small")
    return figure


def _add_pr_curve(writer: Any, tag: str, roc: ROCVertices, step: int) -> None:
    """TensorBoard's PR-curve plugin from the ROC vertices, thinned to 127 thresholds (in its order: lowest
    threshold, everything predicted positive, first)."""
    recall, precision = roc.precision_recall()
    keep = thin(recall, precision, PR_PLUGIN_THRESHOLDS).flip(0)
    tp, fp = roc.tps[1:][keep], roc.fps[1:][keep]
    writer.add_pr_curve_raw(
        tag, tp.numpy(), fp.numpy(), (roc.num_negatives - fp).numpy(), (roc.num_positives - tp).numpy(),
        precision[keep].numpy(), recall[keep].numpy(), global_step=step, num_thresholds=keep.numel(),
    )


def log_curve_figures(writer: Any, group: str, curves: Mapping[str, Any], step: int) -> None:
    """Write the figures of ``curves`` under ``{group}/...`` at ``step`` (tags: see the module docstring).

    Args:
        writer: a ``SummaryWriter`` (anything with its ``add_image`` and ``add_pr_curve_raw``).
        group: the evaluation group, e.g. ``"val"``.
        curves: :meth:`~fccolit.metrics.EvaluationMetrics.named_curves`: ROC vertices (PR and ROC figures, the
            PR-curve plugin) and NDCG@1..K tensors (the NDCG@k figure); a task without positives is not drawn.
        step: the global step.

    Raises:
        Whatever ``writer`` or matplotlib raise.

    Example:
        >>> import torch
        >>> from fccolit.metrics import AUROCScore
        >>> class Recorder:  # stands for a SummaryWriter
        ...     def __init__(self):
        ...         self.tags = []
        ...     def add_image(self, tag, *args, **kwargs):
        ...         self.tags.append(tag)
        ...     add_pr_curve_raw = add_image
        >>> metric = AUROCScore()
        >>> metric.update(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0]))
        >>> _ = metric.compute()
        >>> writer = Recorder()
        >>> log_curve_figures(writer, "val", metric.named_curves(), step=0)
        >>> writer.tags
        ['val/figures/precision_recall', 'val/figures/roc', 'val/pr_curve']
    """
    curves = {key: c.cpu() if isinstance(c, Tensor) else ROCVertices(c.fps.cpu(), c.tps.cpu())
              for key, c in curves.items()}
    rocs = {key: c for key, c in curves.items() if isinstance(c, ROCVertices) and c.num_positives > 0}
    cutoffs = {key: c for key, c in curves.items() if isinstance(c, Tensor) and c.numel() > 1}
    if rocs:
        writer.add_image(f"{group}/figures/precision_recall",
                         render(_precision_recall_figure(rocs, f"{group}: precision-recall, step {step}")),
                         step, dataformats="HWC")
        writer.add_image(f"{group}/figures/roc", render(_roc_figure(rocs, f"{group}: ROC, step {step}")), step,
                         dataformats="HWC")
        for key, roc in rocs.items():
            _add_pr_curve(writer, f"{group}/pr_curve{key[len('roc'):]}", roc, step)
    if cutoffs:
        writer.add_image(f"{group}/figures/ndcg_at_k", render(_cutoff_figure(cutoffs, f"{group}: NDCG@k, step {step}")),
                         step, dataformats="HWC")


def log_constraint_figure(
    writer: Any, stage: str, epochs: Sequence[int], values: Tensor, names: Sequence[str], step: int
) -> None:
    """Write ``{stage}/figures/constraints``: each constraint's value against the epoch, with the line ``h = 0``.

    Args:
        writer: a ``SummaryWriter`` (anything with its ``add_image``).
        stage: the tag's prefix, e.g. ``"val"``.
        epochs: ``[E]`` the epochs.
        values: ``[E, m]`` the value of each of the m constraints ``h_i`` at each epoch (at or below 0: met).
        names: ``[m]`` the constraints' names (a legend right of the axes up to ``MAX_LEGEND`` constraints).
        step: the global step.

    Raises:
        IndexError: ``values`` has fewer columns than ``names``; or whatever ``writer`` or matplotlib raise.

    Example:
        >>> import torch
        >>> class Recorder:  # stands for a SummaryWriter
        ...     def add_image(self, tag, image, step, dataformats):
        ...         print(tag, image.shape, step)
        >>> values = torch.tensor([[0.2, -0.1], [0.0, -0.3]])  # two epochs, two constraints
        >>> log_constraint_figure(Recorder(), "val", [0, 1], values, ["h_1", "h_2"], step=7)
        val/figures/constraints (380, 700, 3) 7
    """
    legend = len(names) <= MAX_LEGEND
    figure, axes = _axes(f"{stage}: constraints h_i (<= 0: met), step {step}", "epoch", "h_i", integer_x=True,
                         legend_right=legend)
    axes.axhline(0.0, color="black", lw=0.8)
    values = values.detach().double().cpu().numpy()
    marker = "o" if len(epochs) <= 50 else None
    for i, name in enumerate(names):
        # ten colours, solid then dashed: 20 distinct lines (the fairness runs have 14 constraints)
        axes.plot(list(epochs), values[:, i], marker=marker, ms=3, lw=1.2, label=name, color=f"C{i % 10}",
                  ls="-" if i < 10 else "--")
    if legend:
        axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="x-small", borderaxespad=0.0)
    writer.add_image(f"{stage}/figures/constraints", render(figure), step, dataformats="HWC")
