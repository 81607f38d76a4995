"""fccolit as an installable library: ranges in pyproject.toml, exact versions in constraints.txt, the packaged
configs found by a short name, ``python -m fccolit``, transformers as the ``clip`` extra, and a wheel built from the
clone's files that installs into a clean environment and runs the quickstart from another folder."""

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from fccolit.cli import main
from fccolit.resources import config_path, config_root, packaged_configs, resolve_config_args
from fccolit.resources import main as resources_main

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
REPOSITORY_CONFIGS = sorted(p.relative_to(ROOT / "configs").with_suffix("").as_posix()
                            for p in (ROOT / "configs").rglob("*.yaml"))


def declared_requirements() -> list[Requirement]:
    """The core requirements and those of every extra."""
    lines = PROJECT["dependencies"] + [r for extra in PROJECT["optional-dependencies"].values() for r in extra]
    return [Requirement(line) for line in lines]


def constraints() -> dict[str, str]:
    """constraints.txt as {canonical name: exact version}."""
    pins = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt:{number}: {line!r} is not 'name==version'"
            pins[canonicalize_name(name)] = version
    return pins


# ------------------------------------------------------------------------------------------- dependencies
def test_pyproject_declares_ranges_with_lower_and_upper_bounds():
    for requirement in declared_requirements():
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {">=", "<"}, f"pyproject.toml: {requirement} should be '>=tested,<next major'"


def test_constraints_pin_every_requirement_inside_its_declared_range():
    pins = constraints()
    for requirement in declared_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"constraints.txt has no exact version of {requirement.name} (run `make constraints`)"
        assert requirement.specifier.contains(pins[name]), (
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside pyproject.toml's {requirement}")


def test_the_environment_has_the_constrained_versions():
    """The tests run in the environment `make venv` builds from constraints.txt (a CPU build such as
    ``2.14.1+cpu`` satisfies the pin ``2.14.1``, as it does for pip)."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
                 if d.metadata["Name"]}
    for requirement in declared_requirements():
        assert canonicalize_name(requirement.name) in installed, f"{requirement.name} is not installed: make venv"
    wrong = {name: (installed[name], pin) for name, pin in constraints().items()
             if name in installed and not SpecifierSet(f"=={pin}").contains(installed[name])}
    assert not wrong, f"installed (version, constraints.txt version): {wrong}; run make venv"


def test_clip_without_transformers_says_how_to_install_it(monkeypatch):
    from fccolit.models import CLIPClassifier
    from fccolit.models.vision import write_tiny_clip

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else find_spec(name, *a))
    with pytest.raises(ImportError, match=r"^the CLIP models need transformers.*pip install 'fccolit\[clip\]'$"):
        CLIPClassifier(config={}, head="linear")
    with pytest.raises(ImportError, match=r"fccolit\[clip\]"):
        write_tiny_clip("unused")


# ------------------------------------------------------------------------------------- packaged configs
def test_every_repository_config_is_packaged():
    assert config_root().samefile(ROOT / "configs")  # the editable install maps fccolit.configs to configs/
    assert packaged_configs() == REPOSITORY_CONFIGS


@pytest.mark.parametrize("name", ["movielens/song", "movielens/song.yaml", "configs/movielens/song.yaml",
                                  "./configs/movielens/song.yaml"])
def test_a_packaged_config_is_found_by_its_short_name(name):
    assert config_path(name).samefile(ROOT / "configs" / "movielens" / "song.yaml")


def test_config_args_resolve_to_packaged_files_and_an_existing_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    packaged = str(config_path("quickstart"))
    args = ["fit", "--config", "quickstart", "-c", "trainer/ddp", "--config=configs/quickstart.yaml",
            "--config", "{trainer: {max_epochs: 1}}", "--trainer.max_epochs", "quickstart"]
    assert resolve_config_args(args) == [
        "fit", "--config", packaged, "-c", str(config_path("trainer/ddp")), f"--config={packaged}",
        "--config", "{trainer: {max_epochs: 1}}", "--trainer.max_epochs", "quickstart"]
    (tmp_path / "configs").mkdir()
    for local in ("quickstart", "quickstart.yaml", "configs/quickstart.yaml"):
        (tmp_path / local).write_text("seed_everything: 1\n")
        assert resolve_config_args(["--config", local]) == ["--config", local]


def test_an_unknown_config_name_fails_with_the_closest_packaged_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"--config movielens/sng: no such file, nor a packaged config\. "
                                                r"Did you mean 'movielens/song'.*python -m fccolit\.resources"):
        resolve_config_args(["fit", "--config", "movielens/sng"])
    with pytest.raises(SystemExit) as exit_status:
        main(["fit", "--config", "configs/quickstrt.yaml"], run=False)
    assert exit_status.value.code == 2
    assert re.fullmatch(r"fccolit: error: --config configs/quickstrt\.yaml: no such file, nor a packaged config\. "
                        r"Did you mean 'quickstart'\?.*\n", capsys.readouterr().err)


def test_the_resources_listing_names_the_folder_and_every_packaged_config(capsys):
    resources_main()  # python -m fccolit.resources
    folder, *names = capsys.readouterr().out.splitlines()
    assert Path(folder.removeprefix("# ")).samefile(ROOT / "configs") and names == REPOSITORY_CONFIGS


@pytest.mark.slow
def test_python_m_fccolit_runs_the_cli_with_a_packaged_config_from_any_folder(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fccolit", "fit", "--config", "quickstart", "--print_config"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "class_path: fccolit.algorithms.SOX" in out.stdout
    assert "class_path: fccolit.datamodules.SyntheticBinaryDataModule" in out.stdout


# ------------------------------------------------------------------------------------------------ wheel
CHECK_INSTALLED = """
import importlib, importlib.util, json, pkgutil, sys
from pathlib import Path
import fccolit
from fccolit.resources import config_root, packaged_configs
modules = [m.name for m in pkgutil.walk_packages(fccolit.__path__, "fccolit.") if not m.name.endswith("__main__")]
files = [importlib.import_module(name).__file__ for name in modules]
try:
    fccolit.models.CLIPClassifier(config={}, head="linear")
    clip_error = ""
except ImportError as err:
    clip_error = str(err)
print(json.dumps({"version": fccolit.__version__, "package": fccolit.__file__, "modules": modules, "files": files,
                  "configs": packaged_configs(), "config_root": str(config_root()), "clip_error": clip_error,
                  "transformers": importlib.util.find_spec("transformers") is not None}))
"""


def clean_environment(folder: Path) -> Path:
    """A venv in ``folder`` that sees the dependencies installed in this interpreter's environment (through a
    folder of links named in a .pth file), without fccolit, its editable-install hooks or transformers (the clip
    extra, left out to show that fccolit needs it only for CLIP). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True, timeout=120)
    python = folder / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    links = folder / "dependencies"
    links.mkdir()
    hidden = re.compile(r"(fccolit|__editable__|transformers)([-_.].*)?$|.*\.pth$", re.IGNORECASE)
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not hidden.match(entry.name):
            (links / entry.name).symlink_to(entry)
    (site / "dependencies.pth").write_text(str(links) + "\n")
    return python


@pytest.mark.slow
def test_a_wheel_of_the_clone_installs_into_a_clean_environment_and_runs_the_quickstart(tmp_path):
    # the clone's files: tracked and new, not ignored (what a commit and so a fresh clone has)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    source = tmp_path / "clone"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--wheel-dir", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("fccolit-*.whl")
    assert wheel.name == f"fccolit-{PROJECT['version']}-py3-none-any.whl"

    python = clean_environment(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # With its dependencies (no index: they must all be satisfied by the environment's pinned versions).
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", str(wheel)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    assert re.search(r"^Successfully installed fccolit-[\w.]+$", install.stdout, re.MULTILINE), install.stdout  # only

    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    checked = subprocess.run([str(python), "-c", CHECK_INSTALLED], capture_output=True, text=True, cwd=run_dir,
                             env=env, timeout=300)
    assert checked.returncode == 0, checked.stderr
    found = json.loads(checked.stdout.splitlines()[-1])
    site = Path(found["package"]).parent.parent
    assert site.is_relative_to(tmp_path / "venv") and found["version"] == PROJECT["version"]
    expected = sorted({f"fccolit.{p.relative_to(ROOT / 'fccolit').with_suffix('').as_posix().replace('/', '.')}"
                       .removesuffix(".__init__") for p in (ROOT / "fccolit").rglob("*.py")} - {"fccolit", "fccolit.__main__"})
    assert set(expected) <= set(found["modules"]), sorted(set(expected) - set(found["modules"]))
    for subpackage in ("fccolit.datamodules", "fccolit.callbacks", "fccolit.configs"):
        assert subpackage in found["modules"]
    assert all(Path(f).is_relative_to(site) for f in found["files"]), "a module came from outside the wheel"
    assert Path(found["config_root"]) == site / "fccolit" / "configs" and found["configs"] == REPOSITORY_CONFIGS
    assert not found["transformers"] and "pip install 'fccolit[clip]'" in found["clip_error"]
    assert (site / f"fccolit-{PROJECT['version']}.dist-info" / "licenses" / "LICENSE").is_file()

    quickstart = subprocess.run(
        [str(python), "-m", "fccolit", "fit", "--config", "quickstart", "--trainer.max_epochs", "1",
         "--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2", "--data.init_args.num_samples", "2000"],
        capture_output=True, text=True, cwd=run_dir, env=env, timeout=600)
    assert quickstart.returncode == 0, quickstart.stderr[-3000:]
    assert re.search(r"val/ap\s+\d\.\d+", quickstart.stdout + quickstart.stderr)
    assert list((run_dir / "lightning_logs" / "quickstart").glob("version_0/events.out.tfevents.*"))
    assert (python.parent / "fccolit").is_file()  # the console script
