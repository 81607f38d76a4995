"""Where a config's runs keep their checkpoints, and the checks a checkpoint passes before a run uses it.

Every run of a config writes to its own folder, ``<save_dir>/<name>/version_<k>/`` (the logger's, as Lightning does by
default), with its checkpoints in ``checkpoints/`` below it: two runs of one config, one after the other or at the
same time, never replace each other's files. :class:`RunLayout` reads that layout from a trainer configuration, so
``--ckpt_path last`` / ``best`` find the newest run's files in a later process; :func:`claim_run_folder` gives a new run
its folder atomically (two processes started together get two folders). :func:`load_checkpoint` reads a checkpoint
the safe way (tensors and plain values only) and names the file in every error; :func:`hyperparameter_changes` and
:func:`state_mismatches` compare a checkpoint with the configured run before it is used.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from lightning.pytorch.utilities import rank_zero_info

#: the key of fccolit's own entries in a checkpoint (run seed, the epoch's running totals, the optimizer's settings)
RESUME_KEY = "fccolit_resume"
#: Lightning's name of the last checkpoint, with the version suffix it adds to avoid a clash (last-v1.ckpt)
LAST_NAME = re.compile(r"last(-v\d+)?\.ckpt")
#: the folder name of a run: Lightning's loggers number them version_0, version_1, ...
VERSION_NAME = re.compile(r"version_(\d+)")


class ConfigurationError(ValueError):
    """A run that cannot start as configured (a checkpoint that does not exist, metrics the data cannot feed).

    The console script reports it as one line. A ``ValueError``, so callers catching that see it too.

    Example:
        >>> try:
        ...     check_checkpoint_file("no/such/last.ckpt")
        ... except ConfigurationError as err:
        ...     print(err)
        checkpoint no/such/last.ckpt is not a regular file
    """


# ------------------------------------------------------------------------------------- reading a checkpoint
def check_checkpoint_file(path: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``path`` when it is not a complete PyTorch checkpoint: empty, truncated (a copy or
    a write cut short), corrupted (a member failing its CRC), or not a regular file. Reads the whole file once (the
    zip CRCs)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"checkpoint {path} is not a regular file")
    size = path.stat().st_size
    advice = "resume from an earlier checkpoint (or the last complete copy of this one)"
    if size == 0:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): it is incomplete (a write or copy cut short); {advice}")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic != b"PK":  # not the zip container torch.save writes (the legacy format starts with a pickle opcode)
        if magic[:1] == b"\x80":
            return
        raise ValueError(f"checkpoint {path} ({size} bytes) is not a PyTorch checkpoint (it does not start as one)")
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise ValueError(
            f"checkpoint {path} ({size} bytes) is incomplete: it is truncated or damaged ({err}); {advice}"
        ) from None
    if broken is not None:
        raise ValueError(f"checkpoint {path} is corrupted: its entry {broken!r} fails its CRC check; {advice}")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint at ``path``, loaded on the CPU with ``weights_only=True`` (tensors and plain values: no code
    from the file runs), memory-mapped. Raises ``ValueError`` naming the file when it holds a pickled Python object
    that such a load refuses (the object's class is named), instead of torch's unnamed report."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        what = f"a pickled {found.group(1)} object" if found else "a pickled Python object"
        raise ValueError(
            f"checkpoint {path} holds {what}, which a weights-only load refuses (loading it would run code from the "
            "file); fccolit loads checkpoints of tensors and plain values only. If you trust the file, load it with "
            "torch.load(weights_only=False) and save its state_dict again"
        ) from None


# ------------------------------------------------------------------------------------- comparing with the run
_NOT_COMPARED = {"_class_path", "_instantiator", "data_sizes"}  # bookkeeping and link targets (set from the data)


def plain(value: Any) -> Any:
    """A config value as plain Python (jsonargparse Namespaces as dicts, tuples as lists) for comparisons."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def _same(old: Any, new: Any) -> bool:
    old, new = plain(old), plain(new)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        return float(old) == float(new)
    return old == new


def configured_optimizer_settings(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The settings the checkpoint's first optimizer was constructed with (its ``defaults``, which schedules and
    warm-ups do not change), as :class:`~fccolit.algorithms.FCCOModule` records them; for a checkpoint written
    without them, its first parameter group as it was at the start (``initial_lr`` for ``lr``, the rest as saved)."""
    recorded = (checkpoint.get(RESUME_KEY) or {}).get("optimizer_defaults")
    if recorded:
        return dict(recorded[0])
    groups = [state.get("param_groups", []) for state in checkpoint.get("optimizer_states", [])]
    if not groups or not groups[0]:
        return None
    group = dict(groups[0][0])
    if "initial_lr" in group:
        group["lr"] = group["initial_lr"]
    return group


def hyperparameter_changes(
    checkpoint: Mapping[str, Any], model_config: Any, optimizer: bool = True
) -> list[tuple[str, Any, Any]]:
    """``(key, checkpoint value, configured value)`` for every hyper-parameter the module saved in ``checkpoint``
    (``hyper_parameters``) that the configured model (``class_path`` / ``init_args``) sets to another value, the
    class included; then, with ``optimizer``, each setting of the configured optimizer
    (``optimizer.init_args.<key>``) that differs from what the checkpoint's optimizer was configured with
    (:func:`configured_optimizer_settings`: the values a run starts from, not the scheduled ones it ended with)."""
    saved = dict(checkpoint.get("hyper_parameters") or {})
    config = plain(model_config) or {}
    init_args = dict(config.get("init_args") or {})
    changes: list[tuple[str, Any, Any]] = []
    saved_class = saved.get("_class_path")
    if saved_class and config.get("class_path") and saved_class != config["class_path"]:
        changes.append(("class_path", saved_class, config["class_path"]))
    for key, old in saved.items():
        if key in _NOT_COMPARED or key not in init_args:
            continue
        if not _same(old, init_args[key]):
            changes.append((key, old, init_args[key]))
    configured = init_args.get("optimizer")
    settings = configured_optimizer_settings(checkpoint) if optimizer else None
    if isinstance(configured, dict) and settings is not None:
        for key, new in (configured.get("init_args") or {}).items():
            old = plain(settings.get(key))
            if old is not None and not isinstance(old, dict) and not _same(old, new):
                changes.append((f"optimizer.init_args.{key}", old, new))
    return changes


def state_mismatches(saved: Mapping[str, torch.Tensor], current: Mapping[str, torch.Tensor]) -> list[str]:
    """What keeps the checkpoint's ``state_dict`` (``saved``) from loading into a module whose ``state_dict()`` is
    ``current``: entries missing on either side and entries of another shape, one phrase each (empty when it fits)."""
    problems = [f"{k} has shape {list(saved[k].shape)} there and {list(current[k].shape)} here"
                for k in saved if k in current and torch.is_tensor(saved[k]) and saved[k].shape != current[k].shape]
    missing = [k for k in current if k not in saved]
    unexpected = [k for k in saved if k not in current]
    if missing:
        problems.append(f"{len(missing)} entries of the model are not in it ({', '.join(missing[:3])}"
                        f"{', ...' if len(missing) > 3 else ''})")
    if unexpected:
        problems.append(f"{len(unexpected)} of its entries are not in the model ({', '.join(unexpected[:3])}"
                        f"{', ...' if len(unexpected) > 3 else ''})")
    return problems


# ------------------------------------------------------------------------------------- where runs write
def import_class(path: Any) -> type | None:
    """The class a config's ``class_path`` names (None when it names none)."""
    if not isinstance(path, str) or "." not in path:
        return None
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def _init_args(entry: Any) -> dict[str, Any]:
    return dict((plain(entry) or {}).get("init_args") or {}) if isinstance(plain(entry), dict) else {}


@dataclass
class RunLayout:
    """Where the runs of one trainer configuration write: the logger's run folders and fixed checkpoint folders.

    Usually built from a parsed ``trainer`` configuration with :meth:`of`. Nothing is raised: a configuration
    without a logger or checkpoint folders gives ``root=None`` / no fixed folders.

    Args:
        root: see Attributes.
        fixed_folders: see Attributes (default: none).
        default_root: see Attributes (default: the working folder).

    Example:
        >>> layout = RunLayout.of({
        ...     "default_root_dir": "runs",
        ...     "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        ...                "init_args": {"save_dir": "tb", "name": "sox"}},
        ...     "callbacks": [{"class_path": "fccolit.callbacks.RunCheckpoint", "init_args": {"dirpath": "ckpts"}}],
        ... })
        >>> layout.root.as_posix(), [f.as_posix() for f in layout.fixed_folders], layout.default_root.as_posix()
        ('tb/sox', ['ckpts'], 'runs')
        >>> layout.where()
        'ckpts, tb/sox/*/checkpoints'

    Attributes:
        root: the logger's folder ``<save_dir>/<name>``, holding one folder per run (``version_<k>``, each with its
            ``checkpoints/``); None without a logger.
        fixed_folders: the ``dirpath`` folders that checkpoint callbacks set explicitly (shared by the runs).
        default_root: ``trainer.default_root_dir`` (the working folder when unset).
    """

    root: Path | None
    fixed_folders: list[Path] = field(default_factory=list)
    default_root: Path = field(default_factory=Path.cwd)

    @classmethod
    def of(cls, trainer_config: Any) -> "RunLayout":
        """The layout of a parsed ``trainer`` configuration (a jsonargparse Namespace or a dict): its first logger
        (Lightning's default logger when ``logger`` is unset or true: ``<default_root_dir>/lightning_logs``) and the
        ``dirpath`` of its ``ModelCheckpoint`` callbacks."""
        from lightning.pytorch.callbacks import ModelCheckpoint

        config = plain(trainer_config) or {}
        default_root = Path(config.get("default_root_dir") or Path.cwd())
        logger = config.get("logger")
        if isinstance(logger, list):
            logger = logger[0] if logger else False
        root: Path | None
        if logger is None or logger is True:
            root = default_root / "lightning_logs"
        elif isinstance(logger, dict):
            args = _init_args(logger)
            save_dir = args.get("save_dir")
            root = None if save_dir is None else Path(save_dir) / str(args.get("name", "lightning_logs") or "")
        else:
            root = None
        fixed = []
        for entry in config.get("callbacks") or []:
            cls_ = import_class((plain(entry) or {}).get("class_path") if isinstance(plain(entry), dict) else None)
            dirpath = _init_args(entry).get("dirpath")
            if cls_ is not None and issubclass(cls_, ModelCheckpoint) and dirpath:
                fixed.append(Path(dirpath))
        return cls(root=root, fixed_folders=fixed, default_root=default_root)

    def checkpoint_folders(self) -> list[Path]:
        """Every folder a run of this layout writes checkpoints to: the fixed ones, each run's ``checkpoints/``, and
        ``<default_root>/checkpoints`` (Lightning's folder without a logger)."""
        folders = list(self.fixed_folders)
        if self.root is not None and self.root.is_dir():
            folders += sorted(p for p in self.root.glob("*/checkpoints") if p.is_dir())
        if self.root is None:
            folders.append(self.default_root / "checkpoints")
        return folders

    def where(self) -> str:
        """The folders searched, in words, for messages."""
        places = [str(f) for f in self.fixed_folders]
        if self.root is not None:
            places.append(f"{self.root}/*/checkpoints")
        else:
            places.append(str(self.default_root / "checkpoints"))
        return ", ".join(places)

    def last_checkpoints(self) -> list[Path]:
        """Every ``last.ckpt`` (``last-v<k>.ckpt`` too) of every run, newest (last written) first."""
        found = [p for folder in self.checkpoint_folders() if folder.is_dir() for p in folder.iterdir()
                 if LAST_NAME.fullmatch(p.name)]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)

    def run_of(self, checkpoint: str | os.PathLike) -> str | None:
        """The run folder's name (``version_3``) when ``checkpoint`` lies in ``<root>/<run>/checkpoints/``."""
        if self.root is None:
            return None
        path = Path(checkpoint).resolve()
        try:
            relative = path.relative_to(self.root.resolve())
        except ValueError:
            return None
        return relative.parts[0] if len(relative.parts) == 3 and relative.parts[1] == "checkpoints" else None


def recorded_best(last: Path) -> Path | None:
    """The best checkpoint that the first monitoring checkpoint callback recorded in the checkpoint ``last``
    (Lightning saves each callback's ``best_model_path`` in every checkpoint), looked up beside ``last`` when the
    recorded path has moved; None when none is recorded or the file is gone."""
    checkpoint = load_checkpoint(last)
    states = [s for s in (checkpoint.get("callbacks") or {}).values()
              if isinstance(s, dict) and s.get("monitor") and s.get("best_model_path")]
    for state in states:
        recorded = Path(state["best_model_path"])
        for candidate in (recorded, last.parent / recorded.name):
            if candidate.is_file():
                return candidate
    return None


def resolve_checkpoint(ckpt_path: str | os.PathLike, layout: RunLayout, subcommand: str) -> str | None:
    """The checkpoint file that ``--ckpt_path`` names for ``subcommand``:

    * ``"last"``: the newest ``last.ckpt`` of the config's runs (:meth:`RunLayout.last_checkpoints`); ``fit``
      without one returns None and starts from scratch (``--ckpt_path last`` may be set before the first run);
    * ``"best"``: the best checkpoint that the newest ``last.ckpt`` records (its monitoring callback's);
    * any other value: a file, which must exist.

    Raises:
        ConfigurationError: one line naming what is missing and where it was looked for.
    """
    ckpt_path = str(ckpt_path)
    if ckpt_path not in ("last", "best"):
        path = Path(ckpt_path)
        if not os.path.lexists(path):
            raise ConfigurationError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
        if path.is_symlink() and not path.exists():
            raise ConfigurationError(f"--ckpt_path {ckpt_path}: a symbolic link to nothing (or a link loop)")
        if not path.is_file():
            raise ConfigurationError(f"--ckpt_path {ckpt_path}: not a regular file")
        return ckpt_path
    lasts = layout.last_checkpoints()
    if ckpt_path == "last":
        if lasts:
            return str(lasts[0])
        if subcommand == "fit":
            return None
        raise ConfigurationError(
            f"--ckpt_path last: no last.ckpt in {layout.where()}: train first (fccolit fit with the same config) or "
            "give a checkpoint file"
        )
    for last in lasts:
        best = recorded_best(last)
        if best is not None:
            return str(best)
    raise ConfigurationError(
        f"--ckpt_path best: no best checkpoint recorded in {layout.where()} (the newest last.ckpt records it: train "
        "first with a checkpoint callback that has a monitor and save_last, or give a checkpoint file)"
    )


def claim_run_folder(root: Path) -> int:
    """Create ``<root>/version_<k>`` for the smallest free ``k`` above every existing run and return ``k``. The folder
    is created with ``os.mkdir``, which fails when it exists, so processes started at the same moment get different
    folders (a logger's own choice lists the folders first and can give two processes the same one)."""
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in root.iterdir() if (m := VERSION_NAME.fullmatch(p.name))]
    version = max(taken, default=-1) + 1
    while True:
        try:
            os.mkdir(root / f"version_{version}")
            return version
        except FileExistsError:
            version += 1


def newest_last_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest ``last.ckpt`` under ``folder``: a logger's folder of a config (``lightning_logs/quickstart``, each
    run's ``checkpoints/``), one run's folder or a checkpoint folder; None when there is none."""
    folder = Path(folder)
    found: Iterable[Path] = (p for p in folder.rglob("*.ckpt") if LAST_NAME.fullmatch(p.name))
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


#: ``--ckpt_path untrained``: evaluate the model as initialized (``validate`` / ``test`` / ``predict`` refuse to run
#: without a checkpoint otherwise)
UNTRAINED = "untrained"


def rank_zero_process() -> bool:
    """Whether this process is the first of its job (a DDP launcher's children have ``LOCAL_RANK`` / ``NODE_RANK``
    set), before any trainer exists."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def resolve_configured_checkpoint(config: Any, subcommand: str) -> bool:
    """Resolve and check the ``ckpt_path`` of a parsed subcommand configuration (``config``: its Namespace, with
    ``trainer``, ``model`` and ``ckpt_path``), in place.

    ``last`` / ``best`` are found among the config's runs (:class:`RunLayout`, :func:`resolve_checkpoint`) and the
    file is checked (:func:`check_checkpoint_file`, :func:`load_checkpoint`). When the configuration names a model,
    it is what runs: each module hyper-parameter that differs from the checkpoint's is printed (checkpoint → now);
    ``fit`` restores the optimizer (its settings included) from the checkpoint, so a configured optimizer setting that
    differs from what the checkpoint's optimizer was configured with is refused, listing the keys (a schedule's
    changes during the run are not differences). ``validate`` / ``test`` / ``predict`` without a ``ckpt_path`` are
    refused (they would evaluate the untrained model) unless it is :data:`UNTRAINED`.

    Args:
        config: the subcommand's configuration; its ``ckpt_path`` becomes the resolved file (or None).
        subcommand: ``fit``, ``validate``, ``test`` or ``predict``.

    Returns:
        True when a checkpoint is to be used and the configuration names no model: the checkpoint's
        hyper-parameters then configure it (LightningCLI's own parsing of the checkpoint).

    Raises:
        ConfigurationError: an evaluation without ``ckpt_path``; a ``last`` / ``best`` that names nothing to
            evaluate (:func:`resolve_checkpoint`); a file that is no complete checkpoint.
        ValueError: ``fit`` from a checkpoint with changed optimizer settings.
    """
    given = config.get("ckpt_path")
    if given == UNTRAINED or given is None:
        config.ckpt_path = None
        if given is None and subcommand != "fit":
            raise ConfigurationError(
                f"{subcommand} without --ckpt_path would evaluate the untrained model: give --ckpt_path last (the "
                f"newest run of this config), best, or a checkpoint file (--ckpt_path {UNTRAINED} evaluates the "
                "model as initialized)"
            )
        return False
    layout = RunLayout.of(config.trainer)
    resolved = resolve_checkpoint(given, layout, subcommand)
    config.ckpt_path = resolved
    if resolved is None:
        rank_zero_info(f"--ckpt_path {given}: no earlier run of this config in {layout.where()}; training starts "
                       "from scratch")
        return False
    if resolved != given:
        rank_zero_info(f"--ckpt_path {given}: {resolved}")
    check_checkpoint_file(resolved)
    checkpoint = load_checkpoint(resolved)
    model_config = config.get("model")
    if model_config is None or not getattr(model_config, "class_path", None):
        return True
    changes = hyperparameter_changes(checkpoint, model_config, optimizer=subcommand == "fit")
    optimizer_changes = [c for c in changes if c[0].startswith("optimizer.")]
    listing = lambda rows: "\n".join(f"  {k}: {old!r} (checkpoint) -> {new!r} (configured)" for k, old, new in rows)  # noqa: E731
    if optimizer_changes:
        raise ValueError(
            f"resuming from {resolved} with optimizer settings that differ from those the checkpoint's run was "
            f"configured with:\n{listing(optimizer_changes)}\nLightning restores the optimizer's state (its "
            "settings included) from the checkpoint, so these would be ignored: configure the checkpoint's values "
            "to resume, or start a new run from the checkpoint's weights (the model's pretrained weights)."
        )
    if changes and rank_zero_process():
        sys.stderr.write(
            f"{subcommand} from {resolved} with hyper-parameters that differ from the checkpoint's; the configured "
            f"values apply:\n{listing(changes)}\n"
        )
    return False
