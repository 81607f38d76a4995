"""Every package directory ships: pyproject's explicit package list must name them all."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {v: k for k, v in config["package-dir"].items()}  # directory -> package name
    found = set()
    for top in ("fccolit", *mapped):  # the package folders: fccolit/ and the mapped ones (datamodules/, configs/, ...)
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            head, _, rest = rel.partition("/")
            package = mapped.get(head, head) + ("." + rest.replace("/", ".") if rest else "")
            found.add(package)
    assert found == listed, f"add to pyproject [tool.setuptools] packages: {sorted(found - listed)}; stale: {sorted(listed - found)}"


def test_every_subpackage_imports_first_in_a_new_process():
    """``import fccolit`` is lazy (its classes load on first use), so each subpackage must import on its own, as the
    first fccolit import of a process (a subpackage that reached its classes through the top level imported itself in
    a circle)."""
    import subprocess
    import sys

    names = ["metrics", "callbacks", "datamodules", "models"]  # the ones a user imports alone (an import takes ~3 s)
    procs = {n: subprocess.Popen([sys.executable, "-c", f"import fccolit.{n}"], stderr=subprocess.PIPE, text=True)
             for n in names}
    failed = {n: p.communicate(timeout=300)[1].strip().splitlines()[-1:] for n, p in procs.items()}
    assert not {n: e for n, e in failed.items() if procs[n].returncode}, failed
