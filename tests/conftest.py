"""Test-wide settings: offline, quiet, a repo-local cache, sized thread pools, and an exit
that skips native library teardown.

Two cores here: every test runs torch with at most 2 threads, and components that start
their own pools (vLLM, Pyserini's JVM, FAISS) are sized in their tests.

The exit: once every test has run and the summary is printed, the pytest process stops its
child processes and leaves with ``os._exit(status)``, skipping the interpreter's teardown of
native libraries. A CI run of the suite died after "681 passed" with a bare SIGSEGV (make
reported "Segmentation fault"): the process had loaded torch, vLLM (zmq), Ray (gRPC), FAISS
and numba, and kept their native threads and atexit hooks to the end; one of their teardowns
crashed, now and then. Nothing of a test's result depends on that teardown, and a crash
there turned a green suite red. ``AGENTSEARCH_TEST_FULL_EXIT=1`` keeps the normal exit (to
chase the crash: with ``PYTHONFAULTHANDLER=1``, which ``make test`` sets, it prints where).
"""

import os
import signal
import sys
import time
from pathlib import Path

# shared test helpers (user_envs.py) import by name under --import-mode=importlib
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("AGENTSEARCH_CACHE",
                      str(Path(__file__).resolve().parent.parent / ".cache" / "test"))

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
def quick_outages():
    """The process's tracker with short backoffs for the test, restored after it."""
    from agentsearch.core.reliability import outages

    saved = (outages.budget_s, outages.warn_every_s, outages.backoff_s, outages.backoff_max_s)
    outages.configure(budget_s=30, warn_every_s=30, backoff_s=0.05, backoff_max_s=0.2)
    yield outages
    outages.recovered()
    outages.configure(budget_s=saved[0], warn_every_s=saved[1], backoff_s=saved[2],
                      backoff_max_s=saved[3])


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


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


_EXIT_STATUS = pytest.StashKey[int]()


def _children() -> list[int]:
    """This process's direct children (from /proc)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(entry))
    return out


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave without native library teardown (module docstring), after stopping children."""
    if os.environ.get("AGENTSEARCH_TEST_FULL_EXIT") == "1" or _EXIT_STATUS not in config.stash:
        return
    kids = _children()
    for pid in kids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while kids and time.monotonic() < deadline:
        for pid in list(kids):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    kids.remove(pid)
            except ChildProcessError:  # not ours to wait for, or already reaped
                kids.remove(pid)
        time.sleep(0.05)
    for pid in kids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[_EXIT_STATUS])
