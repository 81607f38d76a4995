"""The experiment configs that ship with fccolit, found by a short name.

The repository's ``configs/`` folder installs as the package data of ``fccolit.configs``, so a pip user without a
clone runs ``fccolit fit --config movielens/song``: a ``--config`` value that is not an existing file is looked up
here, as ``movielens/song``, ``movielens/song.yaml`` or ``configs/movielens/song.yaml`` (the repository path, so the
README's commands work from any folder). An existing file always wins. ``python -m fccolit.resources`` lists the
short names and the folder they are in.
"""

from __future__ import annotations

import difflib
import re
import sys
from importlib.resources import files
from pathlib import Path

_SUFFIX = ".yaml"
_REPOSITORY_PREFIX = "configs/"
# A --config value made only of these characters is a file name: jsonargparse would otherwise read it as YAML text,
# a bare scalar, which is never a valid config (the config itself is a mapping).
_PATH_LIKE = re.compile(r"[\w./\\-]+")


def config_root() -> Path:
    """The folder of the packaged configs (``configs/`` of the clone in an editable install, ``fccolit/configs/``
    of site-packages in a wheel install)."""
    return Path(str(files("fccolit.configs")))


def packaged_configs() -> list[str]:
    """The short names of the packaged configs, sorted: ``["adult/alexr2_fairness", ..., "quickstart", ...]``."""
    root = config_root()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*" + _SUFFIX))


def config_path(name: str) -> Path | None:
    """The packaged config file called ``name`` (``movielens/song``, ``movielens/song.yaml`` or
    ``configs/movielens/song.yaml``), or None when no packaged config has that name."""
    path = config_root() / (short_name(name) + _SUFFIX)
    return path if path.is_file() else None


def short_name(value: str) -> str:
    """``value`` as a packaged config's short name: ``configs/movielens/song.yaml`` -> ``movielens/song``."""
    return value.replace("\\", "/").removeprefix("./").removeprefix(_REPOSITORY_PREFIX).removesuffix(_SUFFIX)


def resolve_config_args(args: list[str]) -> list[str]:
    """``args`` (a command line after the program name) with the value of every ``--config`` / ``-c`` option
    (``--config X`` or ``--config=X``) that is not an existing file replaced by the packaged config it names.

    Raises:
        FileNotFoundError: a value that looks like a file name (no spaces, no YAML syntax) is neither an existing
            file nor a packaged config; the message names the closest packaged configs.
    """
    resolved = list(args)
    for i, arg in enumerate(resolved):
        if arg in ("--config", "-c") and i + 1 < len(resolved):
            resolved[i + 1] = _resolve(resolved[i + 1])
        elif arg.startswith("--config="):
            resolved[i] = "--config=" + _resolve(arg.removeprefix("--config="))
    return resolved


def _resolve(value: str) -> str:
    if Path(value).is_file() or not _PATH_LIKE.fullmatch(value):
        return value  # a file, or YAML text given inline
    packaged = config_path(value)
    if packaged is not None:
        return str(packaged)
    close = difflib.get_close_matches(short_name(value), packaged_configs(), n=3, cutoff=0.5)
    guess = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise FileNotFoundError(
        f"--config {value}: no such file, nor a packaged config.{guess} "
        "The packaged configs: python -m fccolit.resources"
    )


def main() -> None:
    """``python -m fccolit.resources``: the packaged configs' folder, then one short name a line."""
    sys.stdout.write(f"# {config_root()}\n" + "".join(name + "\n" for name in packaged_configs()))


if __name__ == "__main__":
    main()
