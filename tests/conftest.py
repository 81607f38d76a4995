"""The fixtures the tests share; the plain helpers are in ``builders.py``. A module takes an autouse-style fixture
with ``pytestmark = pytest.mark.usefixtures("one_thread")``; only :func:`user_cache_of_the_session` applies to every
test."""

import os

import pytest
import torch

from fccolit.testing import bdd_frames, write_adult_files, write_bdd100k

os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(autouse=True, scope="session")
def user_cache_of_the_session(tmp_path_factory):
    """DataModules built without ``cache_dir`` cache into a folder of this test session (``FCCOLIT_CACHE_DIR``, which
    the console-script subprocesses inherit), never the user's ``~/.cache/fccolit``."""
    patch = pytest.MonkeyPatch()
    patch.setenv("FCCOLIT_CACHE_DIR", str(tmp_path_factory.mktemp("fccolit-cache")))
    yield
    patch.undo()


@pytest.fixture
def binary_batch():
    """A small imbalanced binary problem as one full batch (float64)."""
    g = torch.Generator().manual_seed(0)
    n, d, m = 30, 4, 8
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:m]] = 1
    pos_index = torch.full_like(y, -1)
    pos_index[y == 1] = torch.arange(m)
    return {"x": x, "y": y, "index": torch.arange(n), "pos_index": pos_index}


@pytest.fixture
def one_thread():
    """One intra-op thread: these tiny models gain nothing from more, and on a shared machine oversubscribed
    threads make each step ~40× slower. Restored after each test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_downloads(monkeypatch):
    """Any attempt to fetch weights or hub files fails the test."""
    import torch.hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args[:1]}")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def adult_files(tmp_path_factory):
    """A generated UCI Adult (``adult.data`` 300 rows, ``adult.test`` 120 rows) in the exact format: its folder."""
    root = tmp_path_factory.mktemp("adult")
    write_adult_files(root, 300, 120, seed=1)
    return root


@pytest.fixture(scope="module")
def bdd_root(tmp_path_factory):
    """A generated BDD100K (2018 labels JSON and 96 × 54 JPEGs; every weather class present): ``(root, frames)``."""
    root = tmp_path_factory.mktemp("bdd")
    frames = bdd_frames()
    write_bdd100k(root, frames=frames, version="2018", image_size=(96, 54), seed=0)
    return root, frames
