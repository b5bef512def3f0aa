"""Fuzzing an env with hostile turns: ``fuzz_env(env, n, seed)`` plays ``n`` seeded random and
adversarial actions and checks every step.

The actions (``adversarial_action``) are what a policy early in RL, or a broken sampler,
writes: random unicode and binary, lone surrogates, NULs, huge turns (past
``max_action_chars``), nested / unclosed / stray tags, a model-written ``<information>``,
tool calls for tools the env lacks, JSON tool calls with wrong types, missing or unknown
arguments, double-encoded or deeply nested JSON, too many calls, and well-formed calls whose
arguments are hostile (huge, control characters, emoji, arithmetic bombs, boxes outside the
image). Each action carries what it *must* be: ``"malformed"`` (the strict parser has to
refuse it), ``"valid"`` (a well-formed tool call or answer) or ``None`` (anything goes).

Every step is checked: no exception escapes ``step``; the observation is in the
observation space; the reward is a finite float equal to the sum of its ``reward/*``
components; ``terminated`` and ``truncated`` are never both set; a malformed turn gets
a non-empty error observation (unless it was the last turn, which truncates), an error
message in ``info`` and the format penalty; an action built to be malformed is malformed,
one built to be valid is not; a tool call that does not end the episode gets an
observation. Episodes run on (several turns each) and are reset with the next seed when
they end. ``agentsearch check-env --fuzz N`` runs it on every env id; the tests run 10,000
actions per env id.
"""

from __future__ import annotations

import json
import math
import random
import time
import traceback
from dataclasses import dataclass, field

from agentsearch.envs.text_env import observation_text
from agentsearch.envs.tools.protocol import tag_argument

__all__ = ["FuzzReport", "adversarial_action", "fuzz_env"]

_WORDS = ("who", "founded", "the", "company", "city", "river", "born", "capital", "of", "what",
          "year", "Biagam", "Lorvik", "twin", "headquarters", "answer", "42", "x", "ß", "日本",
          "🙂", "مرحبا", "Ω")
_HOSTILE_CHARS = ("\x00", "\x07", "\x1b[31m", "\r", "\t", "\u202e", "\u200b", "\ufeff", "\ud800",
                  "\udfff", "\U0010ffff", "🙂", "\\", '"', "'", "{", "}", "<", ">", "&", "%s", "\n")
_PIECES = ("<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", "<information>",
           "</information>", "<tool_call>", "</tool_call>", "<tool_response>", "<calculator>",
           "</calculator>", "<python>", "</python>", "<crop>", "</crop>", "\\boxed{", "}", "{", "[",
           "<|im_end|>", "<|im_start|>", "<|endoftext|>", '"name"', '"arguments"', ":", ",",
           "\n", " ")
_HOSTILE_ARGS = {"calculator": ("9**9**9**9", "factorial(100000)", "(" * 600 + "1", "1/0",
                                "10**10**10", "comb(10**6, 5)", "sqrt(-1)", "1e308*10",
                                "__import__('os')", "a" * 1200),
                 "python": ("print(1)", "import os; os.getcwd()", "raise SystemExit(3)",
                            "print('x' * 10)"),
                 "crop": ("0 0 0 0", "-5 -5 10 10", "1e9 1e9 2e9 2e9", "nan nan 1 1", "top-left",
                          "center", "1 2 3", "[0, 0, 16, 16]", "whole")}


@dataclass
class FuzzReport:
    """What ``fuzz_env`` saw: counts, the slowest step, and every violated check."""

    steps: int = 0
    episodes: int = 0
    malformed: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    answers: int = 0
    max_step_s: float = 0.0
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: (len(v) if isinstance(v, list) else v) for k, v in vars(self).items()}


def _words(rng: random.Random, lo: int = 1, hi: int = 6) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def _hostile_text(rng: random.Random, hi: int = 40) -> str:
    kind = rng.randrange(4)
    if kind == 0:  # random code points, surrogates and controls included
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randint(0, hi)))
    if kind == 1:  # bytes read as text
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, hi))).decode("latin-1")
    if kind == 2:
        return "".join(rng.choice(_HOSTILE_CHARS + _WORDS) for _ in range(rng.randint(0, hi)))
    return "".join(rng.choice(_PIECES + _WORDS) for _ in range(rng.randint(0, hi)))


def _argument_value(rng: random.Random, tool: str) -> str:
    r = rng.random()
    if r < 0.3 and tool in _HOSTILE_ARGS:
        return rng.choice(_HOSTILE_ARGS[tool])
    if r < 0.5:
        return _words(rng)
    if r < 0.8:  # no tags, and not all whitespace (an empty block is malformed)
        text = _hostile_text(rng).replace("<", " ").replace(">", " ")
        return text if text.strip() else "x"
    return "w " * rng.randint(100, 2000)  # long but inside the turn limit


def _wrong_type(rng: random.Random):
    return rng.choice([123, -1.5, True, None, [], ["a", 1], {"q": "x"}, float("nan"), 10**40])


def _tag_action(env, rng: random.Random, tools: list[str]) -> tuple[str, str | None]:
    t = rng.choice(tools + ["answer"])
    x = _words(rng)
    k = rng.randrange(13)
    if k == 0:
        return f"<{t}><{t}>{x}</{t}></{t}>", "malformed"  # nested
    if k == 1:
        inner = rng.choice(tools or ["search"])
        return f"<answer>{x} <{inner}>{x}</{inner}></answer>", "malformed"
    if k == 2:
        return f"<think>{x} <{t}>{x}", "malformed"  # unclosed think, unclosed action
    if k == 3:
        return f"{x}</{t}>", "malformed"  # stray closing tag
    if k == 4:
        return f"<{t}>{rng.choice(['', ' ', chr(10) * 3])}</{t}>", "malformed"  # empty block
    if k == 5:
        # writes the env's tag
        return f"<information>{x}</information>\n<{t}>{x}</{t}>", "malformed"
    if k == 6:
        missing = rng.choice([n for n in ("search", "calculator", "python", "crop", "browser")
                              if n not in env.tools])
        return f"<{missing}>{x}</{missing}>", "malformed"  # a tool this env does not have
    if k == 7:
        return f"<think>{x}</think><think>{x}</think></think><{t}>{x}</{t}>", "malformed"
    if k in (8, 9) and tools:
        tool = rng.choice(tools)
        return (f"<think>{_words(rng)}</think>\n<{tool}>{_argument_value(rng, tool)}</{tool}>",
                "valid")
    if k == 10:
        return f"<think>{_words(rng)}</think>\n<answer>{_words(rng)}</answer>", "valid"
    return _hostile_text(rng, 200), None


def _json_action(env, rng: random.Random, tools: list[str]) -> tuple[str, str | None]:
    name = rng.choice(tools) if tools else "search"
    arg = tag_argument(env.tools[name]) if name in env.tools else "query"
    end = rng.choice(["", "<|im_end|>"])

    def call(obj) -> str:
        return f"<tool_call>\n{obj if isinstance(obj, str) else json.dumps(obj)}\n</tool_call>"

    k = rng.randrange(14)
    if k == 0:
        return call({"name": name, "arguments": {arg: _wrong_type(rng)}}) + end, "malformed"
    if k == 1:
        return call({"name": name, "arguments": {}}) + end, "malformed"  # missing argument
    if k == 2:
        return (call({"name": name, "arguments": {arg: "x", "zz" + _words(rng, 1, 1): 1}}) + end,
                "malformed")
    if k == 3:
        return call(rng.choice(['{"name": ', "{" + _words(rng), "null", "[1, 2]", '{"name": 7}',
                                '{"arguments": {}}'])) + end, "malformed"
    if k == 4:
        return call({"name": "no_such_" + name, "arguments": {arg: "x"}}) + end, "malformed"
    if k == 5:
        depth = rng.choice([50, 5000, 100_000])
        return call("[" * depth + "]" * depth) + end, "malformed"  # deeply nested JSON
    if k == 6:
        return call({"name": name, "arguments": json.dumps([1, 2])}) + end, "malformed"
    if k == 7:
        n = env.config.max_calls_per_turn + 1
        return ("".join(call({"name": name, "arguments": {arg: "x"}}) for _ in range(n)) + end,
                "malformed")
    if k == 8:
        return (rng.choice([f"<tool_call>{_words(rng)}", f"{_words(rng)}</tool_call>",
                            f"<tool_call><tool_call>{_words(rng)}</tool_call></tool_call>",
                            f"<answer>{_words(rng)}", "<answer> </answer>", _words(rng)]),
                "malformed")
    if k in (9, 10) and tools:
        value = _argument_value(rng, name)
        # double-encoded too
        args = json.dumps({arg: value}) if rng.random() < 0.2 else {arg: value}
        return call({"name": name, "arguments": args}) + end, "valid"
    if k == 11:
        return f"<think>{_words(rng)}</think>\n<answer>{_words(rng)}</answer>{end}", "valid"
    return _hostile_text(rng, 200), None


def adversarial_action(env, rng: random.Random) -> tuple[str, str | None]:
    """One hostile turn for ``env`` and what it must be (``"malformed"``, ``"valid"``, ``None``).
    The expectations hold for the strict parser; with ``parser="search_r1"`` they are dropped."""
    tools = sorted(env.tools)
    if rng.random() < 0.03:  # longer than any turn may be
        return ("<answer>" + "a" * (env.config.max_action_chars + rng.randint(1, 50_000)),
                "malformed")
    fmt = env.config.turn_format
    action, expect = (_tag_action if fmt == "tags" else _json_action)(env, rng, tools)
    if env.config.parser != "strict":
        expect = None
    return action, expect


def _check_step(env, action: str, expect: str | None, out, report: FuzzReport) -> list[str]:
    obs, reward, term, trunc, info = out
    bad = []
    text = observation_text(obs) if isinstance(obs, (str, dict)) else None
    if text is None or not env.observation_space.contains(obs):
        bad.append(f"observation outside the observation space: {type(obs).__name__}")
    if not isinstance(reward, float) or not math.isfinite(reward):
        bad.append(f"reward {reward!r} is not a finite float")
    comps = {k: v for k, v in info.items() if k.startswith("reward/")}
    if (not {"reward/answer", "reward/format"} <= set(comps)
            or abs(reward - sum(comps.values())) > 1e-9):
        bad.append(f"reward {reward!r} != sum of its components {comps}")
    if term and trunc:
        bad.append("terminated and truncated both set")
    if info.get("malformed"):
        report.malformed += 1
        if not info.get("error"):
            bad.append("a malformed turn without an error message in info")
        if not trunc and not text:
            bad.append("a malformed turn without an error observation")
        if comps.get("reward/format") != -env.config.format_penalty:
            bad.append(f"a malformed turn did not cost the format penalty: {comps}")
    elif comps.get("reward/format", 0.0) != 0.0:
        bad.append(f"a well-formed turn paid a format penalty: {comps}")
    if expect == "malformed" and not info.get("malformed"):
        bad.append("a turn built to be malformed was accepted")
    if expect == "valid" and info.get("malformed"):
        bad.append(f"a well-formed turn was refused: {info.get('error')}")
    if info.get("tool") and not (term or trunc):
        report.tool_calls += 1
        report.tool_errors += bool(info.get("tool_error"))
        if not text:
            bad.append("a tool call without an observation")
    if term:
        report.answers += 1
    return [f"{b} (action {action[:120]!r})" for b in bad]


def fuzz_env(env, n: int = 10_000, seed: int = 0, max_failures: int = 20) -> FuzzReport:
    """Play ``n`` adversarial actions on ``env`` (module notes); returns the report, whose
    ``failures`` list every violated check (at most ``max_failures`` kept) and stays empty
    when the env holds up."""
    rng = random.Random(seed)
    report = FuzzReport()
    done, episode_seed = True, seed
    for _ in range(n):
        if done:
            env.reset(seed=episode_seed)
            episode_seed += 1
            report.episodes += 1
        action, expect = adversarial_action(env, rng)
        t0 = time.perf_counter()
        try:
            out = env.step(action)
        except Exception as e:  # noqa: BLE001 - the very thing this looks for
            report.failures.append(f"step raised {type(e).__name__}: {e} (action "
                                   f"{action[:120]!r})\n{traceback.format_exc(limit=4)}")
            done = True
            continue
        report.max_step_s = max(report.max_step_s, time.perf_counter() - t0)
        report.steps += 1
        report.failures.extend(_check_step(env, action, expect, out, report))
        del report.failures[max_failures:]
        done = out[2] or out[3]
    return report
