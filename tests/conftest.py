"""Test-wide settings: offline, quiet, a repo-local cache, and sized thread pools.

Two cores here: every test runs torch with at most 2 threads, and components that start
their own pools (vLLM, Pyserini's JVM, FAISS) are sized in their tests.
"""

import os
import sys
from pathlib import Path

# shared test helpers (user_envs.py) import by name under --import-mode=importlib
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("AGENTSEARCH_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "test"))

import pytest  # noqa: E402
import required_extras  # noqa: E402


def pytest_configure(config):
    # AGENTSEARCH_REQUIRE_EXTRAS=1 (make test): a skip for a missing extra fails the run
    required_extras.pytest_configure(config)
    try:
        import torch

        torch.set_num_threads(min(2, os.cpu_count() or 1))
    except ImportError:
        pass


@pytest.fixture(scope="session")
def world_path():
    """The default synthetic world (seed 0), built once into the test cache."""
    from agentsearch.data import world_dir

    return world_dir(seed=0)


@pytest.fixture(scope="session")
def small_world_path(tmp_path_factory):
    """A small world (300 entities) for fast index/env tests."""
    from agentsearch.data import world_dir

    return world_dir(seed=7, entities=300)


@pytest.fixture
def httpx_clients(monkeypatch):
    """The list of every ``httpx.AsyncClient`` created during the test (instrumentation: the
    real clients still run)."""
    import httpx

    made = []
    real_init = httpx.AsyncClient.__init__

    def counting_init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", counting_init)
    return made
