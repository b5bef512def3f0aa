"""``agentsearch check-env [IDS...]``: Gymnasium's ``check_env`` plus agentsearch's own checks.

For every id (default: every registered ``agentsearch/*`` id), both turn formats and the
env's ``check_variants`` (e.g. Math with its calculator and python tools):

1. ``gymnasium.utils.env_checker.check_env`` on the unwrapped env (spaces, seeding,
   step determinism, data not shared between calls, render, close);
2. seeded resets are deterministic, and ``options={"task": row}`` plays that row;
3. a scripted correct answer terminates with ``reward/answer`` 1 and ``answer_correct``;
4. a malformed turn gets an error observation and ``reward/format = -format_penalty``;
5. every step's reward equals the sum of its ``reward/*`` components;
6. malformed turns until ``max_turns`` end the episode truncated, not terminated;
7. a scripted rollout through the real tokenizer (``agentsearch.rollout.checker``, one
   layer up, since envs never import the rollout).

This module holds the env-level checks (2-6, ``check_text_env``); the command itself,
``main``, and check 7 live in ``agentsearch.rollout.checker``.
"""

from __future__ import annotations

import json

__all__ = ["check_text_env"]


def _probe_action(env, name: str) -> str:
    tool = env.tools[name]
    from agentsearch.envs.tools import tag_argument

    arg = tag_argument(tool)
    value = {"search": env.task["question"], "calculator": "6 * 7",
             "python": "print(6 * 7)", "crop": "top-left"}.get(name, "test")
    if env.config.turn_format == "tags":
        return f"<think>I should use {name}.</think>\n<{name}> {value} </{name}>"
    call = json.dumps({"name": name, "arguments": {arg: value}})
    return f"<tool_call>\n{call}\n</tool_call><|im_end|>"


def _answer_action(env, answer: str) -> str:
    end = "" if env.config.turn_format == "tags" else "<|im_end|>"
    return f"<think>I know it.</think>\n<answer> {answer} </answer>{end}"


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def check_text_env(env) -> list[str]:
    """Our contract checks on one env instance; returns the names of the checks passed."""
    passed = []
    cfg = env.config
    o1, i1 = env.reset(seed=7)
    o2, i2 = env.reset(seed=7)
    _check(o1 == o2 and i1 == i2, "reset(seed=7) twice gave different prompts/infos: sample "
                                  "tasks with self.np_random after super().reset(seed=seed)")
    task = dict(env.tasks[0])
    obs, info = env.reset(options={"task": task})
    _check(info["question"] == task["question"], "reset(options={'task': row}) did not use that row")
    _check(isinstance(info.get("golden_answers"), list), "info['golden_answers'] must be a list")
    passed.append("reset")

    def step(action):
        out = env.step(action)
        _, reward, _, _, inf = out
        comps = {k: v for k, v in inf.items() if k.startswith("reward/")}
        _check({"reward/answer", "reward/format"} <= set(comps), f"missing reward components: {comps}")
        _check(abs(reward - sum(comps.values())) < 1e-9, f"reward {reward} != sum of {comps}")
        for key in ("answer_correct", "tool", "tool_latency_s", "error"):
            _check(key in inf, f"step info lacks {key!r}")
        return out

    env.reset(options={"task": task})
    for name in env.tools:
        obs, _, term, trunc, inf = step(_probe_action(env, name))
        _check(obs and not term and not trunc and inf["tool"] == name,
               f"a well-formed {name} call did not return an observation: {inf}")
        _check(not inf["tool_error"], f"{name} failed on a simple call: {inf['error']}")
    passed.append("tool-calls")

    env.reset(options={"task": task})
    obs, reward, term, trunc, inf = step("<answer unclosed")
    _check(obs != "" and inf["error"] and inf["malformed"], "a malformed turn must get an error observation")
    _check(inf["reward/format"] == -cfg.format_penalty and not term,
           f"a malformed turn must cost format_penalty and continue: {inf}")
    passed.append("malformed")

    env.reset(options={"task": task})
    obs, reward, term, trunc, inf = step(_answer_action(env, str(task["golden_answers"][0])))
    _check(term and not trunc and inf["answer_correct"] is True and inf["reward/answer"] == 1.0,
           f"the golden answer did not score: terminated={term} info={inf}")
    passed.append("correct-answer")

    env.reset(options={"task": task})
    for _ in range(cfg.max_turns):
        obs, reward, term, trunc, inf = step("no action here")
    _check(trunc and not term and inf["answer_correct"] is False,
           f"{cfg.max_turns} malformed turns must truncate (not terminate) the episode")
    passed.append("truncation")
    return passed
