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
