"""CI reports skips and fails on a skip for a missing extra (``tests/required_extras.py``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import required_extras

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
FAKE = "agentsearch_fake_extra"
"""A module that never imports, made a required extra for these tests."""

SUITE = f"""
import pytest

{FAKE} = pytest.importorskip("{FAKE}")  # at collection, as tests/test_vllm_backend.py does


def test_uses_it():
    pass
"""

IN_A_TEST = f"""
import pytest


def test_a_fixture_needs_it():
    pytest.importorskip("{FAKE}.sub")


def test_other_skips_are_fine():
    pytest.importorskip("agentsearch_optional_thing")
    pytest.skip("not here")


def test_passes():
    pass
"""


ARGS = ("-p", "required_extras", "-rs", "-W", "ignore::pytest.PytestAssertRewriteWarning")


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setattr(required_extras, "REQUIRED_EXTRAS",
                        required_extras.REQUIRED_EXTRAS | {FAKE})
    pytester.makepyfile(test_needs_extra=SUITE, test_in_a_test=IN_A_TEST)
    return pytester


def test_a_missing_extra_fails_the_run_when_required(suite, monkeypatch):
    monkeypatch.setenv(required_extras.ENV_VAR, "1")
    res = suite.runpytest(*ARGS)
    res.assert_outcomes(passed=1, skipped=3)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    section = res.stdout.str().split("skipped for a missing extra that `make test` installs")[1]
    section = section.split("\n=")[0]  # up to the next section
    assert f"test_needs_extra.py: could not import '{FAKE}'" in section
    assert f"test_in_a_test.py::test_a_fixture_needs_it: could not import '{FAKE}.sub'" in section
    assert "agentsearch_optional_thing" not in section  # not a required extra: a plain skip


def test_a_missing_extra_is_a_reported_skip_when_not_required(suite, monkeypatch):
    monkeypatch.delenv(required_extras.ENV_VAR, raising=False)
    res = suite.runpytest(*ARGS)
    res.assert_outcomes(passed=1, skipped=3)
    assert res.ret == pytest.ExitCode.OK
    assert f"could not import '{FAKE}'" in res.stdout.str()  # -rs lists the skip reasons
    assert "missing extra" not in res.stdout.str()


def test_make_test_requires_the_extras_and_reports_skips(request):
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert re.search(rf"{required_extras.ENV_VAR}=1 \S*pytest",
                     test_target.replace("$(PY) -m ", "")), test_target
    addopts = re.search(r'^addopts = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert "-rs" in addopts.split()
    # this run: the plugin is on exactly when the variable is (tests/conftest.py)
    on = request.config.pluginmanager.has_plugin("agentsearch-required-extras")
    assert on == (os.environ.get(required_extras.ENV_VAR) == "1")
