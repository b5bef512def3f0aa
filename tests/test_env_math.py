"""MathEnv: the seeded problem generator, CHAMP answers, scripted episodes with tools."""

from __future__ import annotations

import pytest

from agentsearch.envs import MathEnv
from agentsearch.envs.rewards import math_equal
from agentsearch.envs.tasks.math_tasks import champ_alternatives, champ_tasks, synthetic_math
from agentsearch.envs.tools.sandbox import evaluate


def test_generator_is_seeded_and_splits_are_disjoint():
    a, b = synthetic_math("dev", 50, seed=0), synthetic_math("dev", 50, seed=0)
    assert a == b and synthetic_math("dev", 50, seed=1) != a
    train = {r["question"] for r in synthetic_math("train")}
    dev, test = synthetic_math("dev"), synthetic_math("test")
    assert len(train) == 5000 and len(dev) == len(test) == 500
    assert not train & {r["question"] for r in dev + test}
    assert len({r["type"] for r in dev}) == 10
    with pytest.raises(ValueError, match="splits are"):
        synthetic_math("validation")


def test_arithmetic_answers_check_out():
    # every kind's calculator expression
    for row in synthetic_math("dev") + synthetic_math("train", 2000):
        assert math_equal(str(evaluate(row["expression"])), row["golden_answers"]), row
    for row in synthetic_math("test", 200):
        if row["type"] in ("chain", "products"):
            expr = row["question"].split(" ", 1)[1].rstrip(".")
            assert str(evaluate(expr)) == row["golden_answers"][0]
        if row["type"] == "discount":
            assert ("." not in row["golden_answers"][0]
                    or len(row["golden_answers"][0].split(".")[1]) <= 4)


@pytest.mark.parametrize("raw,alts", [
    ("C(10, 5), or equivalently 252", ["C(10, 5), or equivalently 252", "C(10, 5)", "252"]),
    ("900 (i.e., all values)", ["900 (i.e., all values)", "900"]),
    ("3 is the only possible value", ["3 is the only possible value", "3"]),
    ("No", ["No"]),
])
def test_champ_alternatives(raw, alts):
    assert champ_alternatives(raw) == alts


def test_champ_is_a_held_out_split():
    rows = champ_tasks()
    assert len(rows) == 270 and all(r["id"].startswith("champ-") for r in rows)
    binom = next(r for r in rows if r["golden_answers"][0].startswith("C(10, 5)"))
    assert (math_equal("252", binom["golden_answers"])
            and math_equal("\\binom{10}{5}", binom["golden_answers"]))
    env = MathEnv(split="champ")
    obs, info = env.reset(seed=0)
    assert info["task_id"].startswith("champ-") and info["question"] in obs


@pytest.mark.parametrize("fmt", ["tags", "json"])
def test_scripted_episode_with_calculator_and_python(fmt):
    task = next(r for r in synthetic_math("dev") if r["type"] == "products")
    expr = task["question"].split(" ", 1)[1].rstrip(".")
    env = MathEnv(turn_format=fmt, tools=("calculator", "python"))
    obs, info = env.reset(options={"task": task})
    assert ("calculator" in obs) and ("python" in obs)

    def call(name, arg, value):
        if fmt == "tags":
            return f"<think>use {name}</think><{name}>{value}</{name}>"
        import json
        return (f"<tool_call>{json.dumps({'name': name, 'arguments': {arg: value}})}"
                "</tool_call><|im_end|>")

    obs, r, term, trunc, info = env.step(call("calculator", "expression", expr))
    assert task["golden_answers"][0] in obs and info["tool"] == "calculator" and not term
    obs, r, term, trunc, info = env.step(call("python", "code", f"print({expr})"))
    assert task["golden_answers"][0] in obs and info["tool"] == "python"
    obs, r, term, trunc, info = env.step("The result is "
                                         f"\\boxed{{{task['golden_answers'][0]}}}<|im_end|>")
    assert term and info["answer_correct"] and info["reward/answer"] == 1.0 and r == 1.0


def test_wrong_and_malformed_math_answers():
    task = {"id": "m", "question": "What is 1/2 + 1/4?", "golden_answers": ["3/4"]}
    env = MathEnv(max_turns=2)
    env.reset(options={"task": task})
    obs, r, term, trunc, info = env.step("<python>print(1)</python>")  # no python tool enabled
    assert info["malformed"] and "no action" in info["error"] and r == -0.1
    obs, r, term, trunc, info = env.step("<answer>0.75</answer>")
    assert term and info["answer_correct"] and r == 1.0
    env.reset(options={"task": task})
    _, r, term, _, info = env.step("\\boxed{0.7}")
    assert term and info["answer_correct"] is False and r == 0.0


SLOW = "9^{9^{9^{9}}}"
"""An answer sympy cannot finish evaluating (a power tower). Unbounded, it ran for minutes
inside one C call holding the GIL, freezing every thread of the process (before the fix this
test's own ``join`` timeout never got to run)."""


def test_grading_is_bounded_in_sync_code_and_in_an_event_loop(monkeypatch):
    """math-verify's own timeout (``signal.alarm``) works on the main thread only; an engine's
    event loop (OpenRLHF's rollout actor) runs elsewhere. Grading must return either way."""
    import asyncio
    import threading
    import time

    from agentsearch.envs import rewards

    monkeypatch.setattr(rewards, "GRADING_TIMEOUT_S", 1.0)
    assert math_equal("x + 1", ["1 + x"])  # also starts the grader: not counted below
    t0 = time.perf_counter()
    assert math_equal(SLOW, ["1"]) is False
    assert time.perf_counter() - t0 < 5.0  # generous: the limit is 1 s
    env = MathEnv(max_turns=2)

    async def answer():  # an episode's answer, graded inside a running loop on another thread
        env.reset(options={"task": {"id": "s", "question": "?", "golden_answers": ["1"]}})
        return await env.astep(f"<answer>{SLOW}</answer>")

    assert math_equal("x + 2", ["2 + x"])  # the grader replaced after the timeout is ready
    out: list = []
    worker = threading.Thread(target=lambda: out.append(asyncio.run(answer())), daemon=True)
    t0 = time.perf_counter()
    worker.start()
    worker.join(30)
    assert out, f"grading {SLOW!r} off the main thread did not return in 30 s"
    assert time.perf_counter() - t0 < 5.0
    _, r, term, _, info = out[0]
    assert term and info["answer_correct"] is False and r == 0.0
    assert info["metric/grading_timeout"] == 1.0
    # after a timeout the grader works again, and the first answer it grades (the replacement's
    # first comparison) records no timeout under production's limit: the replacement warms its
    # checker up before it says ready (its first comparison took ~1.1 s cold against 0.01 s
    # warm, and timed out at a 1 s limit beside two training runs on 2 cores)
    monkeypatch.setattr(rewards, "GRADING_TIMEOUT_S", 5.0)
    env.reset(options={"task": {"id": "p", "question": "?", "golden_answers": ["2^{2n}"]}})
    _, r, _, _, info = env.step("<answer>4^n</answer>")
    assert info["answer_correct"] and info["metric/grading_timeout"] == 0.0


def test_grading_fast_paths_do_not_need_the_grader(monkeypatch):
    from agentsearch.envs import rewards

    def no_grader():
        raise AssertionError("the checker process was asked")

    monkeypatch.setattr(rewards, "_get_grader", no_grader)
    assert math_equal("42", ["42"]) and math_equal("0.5", ["1/2"]) and math_equal("-007", ["-7"])
    assert not math_equal("41", ["42", "43"]) and not math_equal("9" * 1000, ["1"])
