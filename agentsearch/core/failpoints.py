"""Crash points for recovery trials: the process kills itself (SIGKILL) at a named point.

``AGENTSEARCH_CRASH_AT=checkpoint:model`` makes the process die, with no cleanup and no
``finally`` blocks run (what ``kill -9`` or the OOM killer does), the first time it reaches
``crash_point("checkpoint:model")``; ``checkpoint:model@3`` the third time. Unset (always, in
normal use) a crash point costs one dictionary lookup. The points sit where a crash is
hardest to survive: between the files of a checkpoint, between its rename and the
``latest`` marker (``trainer/checkpoint.py``), between a step's metrics record and its
checkpoint (``trainer/loop.py``). ``agentsearch.recipes.crash_trials`` kills runs at each
of them (and at random times from outside) and checks that every resume is exact.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "ENV_VAR"]

ENV_VAR = "AGENTSEARCH_CRASH_AT"
_passes: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here if ``AGENTSEARCH_CRASH_AT`` names this point (and this is its n-th pass)."""
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    want, _, nth = spec.partition("@")
    if want != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
