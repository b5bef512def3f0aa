"""The math checker's failures are infrastructure failures, never a wrong answer: a checker
child that dies or cannot start raises ``InfraError``, the episode waits for it (like a dead
retriever) and an eval that meets the outage stops without a score. Only a live child that
runs out of time on an answer counts it as not equal. Real child processes throughout."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

import pytest

from agentsearch.core.reliability import InfraError, OutageError
from agentsearch.envs import MathEnv, rewards
from agentsearch.envs.math_grader import MathGrader

SLOW = "9^{9^{9^{9}}}"  # a power tower the checker cannot finish (test_env_math.SLOW)
TASK = {"id": "p", "question": "?", "golden_answers": ["2^{2n}"]}  # "4^n" needs the checker


@pytest.fixture
def own_grader(monkeypatch):
    """A fresh checker as the process's shared one (its child is this test's), closed after."""
    grader = MathGrader()
    monkeypatch.setattr(rewards, "_grader", grader)
    yield grader
    grader.close()


def _kill_soon(grader: MathGrader, after_s: float) -> threading.Timer:
    timer = threading.Timer(after_s, os.kill, (grader._proc.pid, signal.SIGKILL))
    timer.start()
    return timer


def test_a_checker_killed_while_it_grades_is_an_infra_error_not_a_wrong_answer(own_grader):
    assert own_grader.equal("x + 1", ["1 + x"], 30) is True  # started and ready
    _kill_soon(own_grader, 0.5)
    with pytest.raises(InfraError, match="checker died"):
        rewards.math_grade(SLOW, ["1"], timeout_s=30)
    assert rewards.math_grade("x + 2", ["2 + x"]).equal  # its replacement grades
    # the same answer killing the replacement too is the answer's doing: not equal
    _kill_soon(own_grader, 0.5)
    assert rewards.math_grade(SLOW, ["1"], timeout_s=30) == rewards.MathGrade(False, True)
    assert rewards.math_grade("x + 3", ["3 + x"]).equal


def test_a_checker_that_cannot_start_is_an_infra_error(monkeypatch):
    grader = MathGrader()
    try:
        monkeypatch.setattr(sys, "executable", "/bin/false")  # a child that exits at once
        with pytest.raises(InfraError, match="did not start"):
            grader.equal("x + 1", ["1 + x"], 5)
        monkeypatch.setattr(sys, "executable", "/no/such/python")  # a child that never runs
        with pytest.raises(InfraError, match="did not start"):
            grader.equal("x + 1", ["1 + x"], 5)
    finally:
        grader.close()


def test_a_busy_checker_is_waited_for_not_counted_as_a_timeout(own_grader):
    """Two answers at once (two env threads): the second waits for the checker the first
    holds; its own time limit starts when the checker takes it."""
    assert own_grader.equal("x + 1", ["1 + x"], 30)
    out: list = []
    first = threading.Thread(target=lambda: out.append(own_grader.equal(SLOW, ["1"], 1.0)))
    first.start()
    time.sleep(0.2)  # the first holds the checker now
    assert own_grader.equal("x + 2", ["2 + x"], 0.5) is True
    first.join(30)
    assert out == [None]  # the tower itself timed out


def test_an_answer_waits_for_the_checker_instead_of_scoring_zero(monkeypatch, own_grader,
                                                                   quick_outages):
    real = sys.executable
    monkeypatch.setattr(sys, "executable", "/bin/false")
    env = MathEnv(max_turns=2)
    env.reset(options={"task": TASK})
    errors0 = quick_outages.errors

    async def answer_while_the_checker_comes_back():
        step = asyncio.ensure_future(env.astep("<answer>4^n</answer>"))
        await asyncio.sleep(0.8)
        assert not step.done()  # paused, not scored
        monkeypatch.setattr(sys, "executable", real)
        return await asyncio.wait_for(step, timeout=60)

    _, reward, terminated, _, info = asyncio.run(answer_while_the_checker_comes_back())
    assert terminated and info["answer_correct"] and reward == 1.0
    assert info["infra_errors"] >= 2 and quick_outages.errors - errors0 == info["infra_errors"]


def test_an_eval_whose_checker_stays_down_stops_without_a_score(monkeypatch, own_grader,
                                                                quick_outages):
    """``evaluate`` raises ``OutageError`` past the budget (the trainer logs ``eval/invalid``,
    ``agentsearch eval`` prints it and exits 3): never a score of 0."""
    from agentsearch.models import load_tokenizer
    from agentsearch.rollout import ScriptedBackend
    from agentsearch.trainer.eval import evaluate

    monkeypatch.setattr(sys, "executable", "/bin/false")
    quick_outages.configure(budget_s=0.3, backoff_s=0.05, backoff_max_s=0.1)
    backend = ScriptedBackend(load_tokenizer("tiny"), lambda conv: "<answer>4^n</answer>")
    with pytest.raises(OutageError, match="past reliability.outage_budget_s=0.3"):
        evaluate(backend, [MathEnv(max_turns=2) for _ in range(2)], [TASK, TASK],
                 max_new_tokens=16)


def test_grading_runs_off_the_event_loop(monkeypatch, own_grader):
    """While an answer is graded (here the tower, for its whole 1 s limit), the loop's other
    coroutines (other episodes' tool calls, an engine's driver) keep running."""
    monkeypatch.setattr(rewards, "GRADING_TIMEOUT_S", 1.0)
    assert own_grader.equal("x + 1", ["1 + x"], 30)  # the checker starts: not timed below
    env = MathEnv(max_turns=2)
    env.reset(options={"task": {"id": "s", "question": "?", "golden_answers": ["1"]}})

    async def grade_and_tick():
        ticks, step = 0, asyncio.ensure_future(env.astep(f"<answer>{SLOW}</answer>"))
        while not step.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return ticks, step.result()

    ticks, (_, reward, terminated, _, info) = asyncio.run(grade_and_tick())
    assert terminated and reward == 0.0 and info["metric/grading_timeout"] == 1.0
    assert ticks >= 30, f"{ticks} ticks in ~1 s of grading: the grade blocked the event loop"
