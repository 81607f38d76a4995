"""A checkout that was never installed (``PYTHONPATH=<checkout>``, as the GPU machines run benchmarks/gpu.py) imports
the subpackages that pyproject's package-dir maps from top-level folders."""

import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.metadata as metadata
def not_installed(name):
    raise metadata.PackageNotFoundError(name)
metadata.version = not_installed  # as if fccolit had no distribution metadata
import fccolit, fccolit.datamodules, fccolit.callbacks, fccolit.configs
print(fccolit.__version__, fccolit.datamodules.__file__, fccolit.callbacks.__file__)
"""


def test_an_uninstalled_checkout_finds_datamodules_callbacks_and_configs(tmp_path):
    # -S: no site processing, so no .pth file (an editable install's import hook) maps the folders; the
    # environment's packages come from PYTHONPATH after the checkout
    path = ":".join([str(ROOT), *site.getsitepackages()])
    out = subprocess.run([sys.executable, "-S", "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    version, datamodules, callbacks = out.stdout.split()
    assert version == "0.0.0+unknown"
    assert Path(datamodules) == ROOT / "datamodules" / "__init__.py"
    assert Path(callbacks) == ROOT / "callbacks" / "__init__.py"
