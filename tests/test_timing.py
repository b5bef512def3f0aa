"""PhaseTimer: the seconds a rollout played ahead runs past this step's update belong to the
next step (so a checkpoint between the two does not hold them), and nothing is lost."""

from __future__ import annotations

import time

import pytest

from agentsearch.trainer.timing import PhaseTimer


def test_the_rollouts_wait_past_the_update_moves_to_the_next_step():
    timer = PhaseTimer()

    def run_beside(work):  # the update (0.1 s) beside the next step's rollout (0.4 s)
        out = work()
        time.sleep(0.3)
        return out

    assert timer.beside(run_beside, lambda: time.sleep(0.1) or "learned") == "learned"
    assert timer.pending_train_time() == pytest.approx(0.1, abs=0.05)  # what a checkpoint holds
    first = timer.end_step()
    assert first["time/step"] == pytest.approx(0.1, abs=0.05)
    assert timer.pending_train_time() < 0.05  # the 0.3 s are not in the next checkpoint either
    time.sleep(0.1)
    second = timer.end_step()
    assert second["time/step"] == pytest.approx(0.4, abs=0.05)  # the wait, then its own work
    assert second["time/train_cumulative"] == pytest.approx(0.5, abs=0.05)
