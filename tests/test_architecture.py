"""The house rules, checked: layers point one way and no import cycles (the import-linter
contract in pyproject.toml, also run by `make test`), files stay small, and no two modules
share a name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "agentsearch"
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with ``root``'s pyproject contracts on ``root``'s package."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-logo", "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def _copy_tree(tmp_path: Path) -> Path:
    """The package's Python files and pyproject.toml, copied to ``tmp_path``."""
    shutil.copytree(PKG, tmp_path / "agentsearch",
                    ignore=shutil.ignore_patterns("assets", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_import_contracts_are_kept():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout


@pytest.mark.parametrize("module, line, broken", [
    # a lower layer importing a higher one, even lazily inside a function
    ("core/_back_import.py", "def f():\n    import agentsearch.trainer.loop  # noqa\n",
     "Layers point one way"),
    # a cycle inside one folder: buffer imports scores, scores now imports buffer
    ("replay/scores.py", "\nimport agentsearch.replay.buffer  # noqa\n", "No import cycles"),
])
def test_contracts_fail_on_an_injected_violation(tmp_path, module, line, broken):
    root = _copy_tree(tmp_path)
    target = root / "agentsearch" / module
    target.write_text((target.read_text() if target.exists() else "") + line)
    out = _lint(root)
    assert out.returncode != 0, out.stdout
    assert broken in out.stdout and "BROKEN" in out.stdout, out.stdout


def _python_files() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts]


def test_no_file_over_400_lines():
    files = (_python_files() + list((ROOT / "scripts").rglob("*.py"))
             + list((ROOT / "tests").rglob("*.py")))
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these files (<= 400 lines each): {long}"


def test_no_two_modules_share_a_name():
    names = Counter(p.name for p in _python_files() if p.name not in ("__init__.py", "__main__.py"))
    twice = sorted(n for n, c in names.items() if c > 1)
    assert not twice, f"modules with the same name in different folders: {twice}"


def test_public_api_is_lazy_and_works():
    code = ("import sys, agentsearch; "
            "assert 'torch' not in sys.modules, 'import agentsearch pulled torch'; "
            "env = agentsearch.make_env('agentsearch/Math-v0'); obs, info = env.reset(seed=0); "
            "assert 'Question' in obs or obs, obs; "
            "assert agentsearch.TrainConfig().replay.kind; "
            "assert callable(agentsearch.train) and callable(agentsearch.load_model)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    import agentsearch

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        agentsearch.nope  # noqa: B018


def test_declared_python_floor_is_the_one_the_code_needs():
    """``rollout/events.py`` runs the rollouts' event loop with ``asyncio.Runner``, new in
    Python 3.11: the floor declared to installers (``requires-python``) and to the linter
    (ruff's ``target-version``) is 3.11, and the interpreter running the tests meets it."""
    import asyncio
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["requires-python"] == ">=3.11"
    assert meta["tool"]["ruff"]["target-version"] == "py311"
    assert "asyncio.Runner(" in (PKG / "rollout" / "events.py").read_text()  # what needs 3.11
    assert sys.version_info >= (3, 11) and hasattr(asyncio, "Runner")
