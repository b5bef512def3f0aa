"""The env <-> rollout contract: what ``agentsearch.rollout`` relies on in an environment.

``RolloutEnv`` writes it down as a ``typing.Protocol``; ``check_rollout_contract(env)``
checks one env instance against it at runtime (``agentsearch check-env`` runs it on every
registered id). Subclassing ``agentsearch.envs.TextEnv`` gives you all of it; an env written
from scratch needs exactly this:

- ``reset(*, seed=None, options=None) -> (observation, info)``: the rollout calls it with
  ``options={"task": row}`` (the task row to play) and a seed (or ``None``);
- ``async astep(action) -> (observation, reward, terminated, truncated, info)``: one turn;
  a ``TextEnv`` subclass may override only the synchronous ``step`` instead;
- ``stop_strings``: a ``tuple`` of strings that end a turn (``()`` if none);
- ``async aclose()``: release what the env holds open, at the end of a run.

Observations are a ``str`` or ``{"text": str, "images": list | tuple}`` (text is what is
tokenised into the conversation; images are collected into ``Episode.info["images"]``).
Per-step ``info`` keys the rollout reads are in ``STEP_INFO_KEYS``; every one is optional
except that an episode's outcome, ``answer_correct``, comes only from them. An env must end
its episodes itself (terminated or truncated): the rollout's ``max_turns`` is optional.

Optional: ``last_step_timing``, a dict whose ``reward_s`` (seconds spent scoring in the
last step) is booked as ``time/reward`` instead of ``time/env``.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentsearch.envs.text_env import TextEnv, run_sync
from agentsearch.envs.tools.protocol import tag_argument

__all__ = ["RolloutEnv", "RolloutContractError", "STEP_INFO_KEYS", "check_rollout_contract",
           "probe_action", "answer_action", "steps_synchronously"]

Observation = str | dict[str, Any]
"""``str``, or ``{"text": str, "images": list | tuple}`` for a multimodal env."""

STEP_INFO_KEYS: dict[str, str] = {
    "reward/<name>": "float components of the step's reward; when any is present they must sum "
                     "to the reward ``astep`` returned (else the whole reward is ``reward/env``)",
    "answer_correct": "``None`` (or absent) on every step that does not end the episode; a bool "
                      "on the step that terminates it (``None`` or a bool when it truncates). "
                      "The rollout keeps the last non-None value as ``Episode.answer_correct``",
    "answer": "the final answer text (str) on the answering step, else None",
    "tool": "name(s) of the tool(s) called this step (str, comma-separated) or None",
    "tool_calls": "int: how many tool calls this step made (summed into tool_calls)",
    "tool_error": "bool: a tool raised or timed out (counted into tool_errors)",
    "tool_latency_s": "float >= 0: seconds the step's tool calls took (per-turn timing)",
    "malformed": "bool: the turn broke the format (counted into malformed_turns)",
    "error": "str describing what went wrong this step, or None",
}
"""The per-step ``info`` keys the rollout reads, and what it expects of them."""

_MALFORMED = "not an action"
_TOL = 1e-6  # the rollout's own tolerance for reward components vs. the reward


@runtime_checkable
class RolloutEnv(Protocol):
    """What ``agentsearch.rollout.rollout`` needs of an environment (one instance per
    concurrent episode; instances are reused across rollouts, so ``reset`` must start afresh).

    ``isinstance(env, RolloutEnv)`` only checks that the members exist; use
    ``check_rollout_contract(env)`` to check what they return.
    """

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end an agent turn, e.g. ``("</search>", "</answer>")``: a ``tuple`` of
        non-empty ``str``. The rollout adds them (from every env, deduplicated) to the
        generation's stop strings, so a turn ends where your parser expects it to; the
        stop string itself stays in the turn's text. ``()`` when turns end at EOS only."""
        ...

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        """Start an episode. The rollout calls ``reset(seed=s, options={"task": row})`` with
        the task row to play (``seed`` is ``None`` unless the rollout was seeded) and must get
        ``(observation, info)``: the observation is the whole prompt (non-empty text, chat
        template applied; it is tokenised as is), or ``{"text": prompt, "images": [...]}``;
        ``info`` is a dict (copied into ``Episode.info``; ``task_id`` there names the task
        when the row has no ``id``)."""
        ...

    async def astep(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Play one agent turn: ``action`` is the decoded text the policy generated (any
        text: a turn the env cannot parse must come back as an error observation with
        ``info["malformed"] = True``, never as an exception). Returns ``(observation, reward,
        terminated, truncated, info)``:

        - observation: the text appended to the conversation (tokenised and masked out of
          the loss), ``""`` when the episode is over; or ``{"text", "images"}``;
        - reward: a finite float; the episode's reward is the sum over its steps;
        - terminated (the agent ended it, e.g. by answering) and truncated (out of turns)
          are bools, never both True; the env must end every episode itself;
        - info: a dict; the keys in ``STEP_INFO_KEYS`` are read when present.

        The rollout awaits all episodes' ``astep`` concurrently in one event loop, so tool
        calls should be awaited, not run blocking. A ``TextEnv`` subclass may instead
        override only the synchronous ``step`` (the rollout then calls that)."""
        ...

    async def aclose(self) -> None:
        """Close what the env holds open (tool clients, connection pools) on the event loop
        the rollouts ran on: ``EventLoop.close(envs)`` awaits it at the end of a run. Must be
        idempotent, and may be a no-op."""
        ...


class RolloutContractError(AssertionError):
    """An env breaks the rollout contract; the message lists every problem found."""


def steps_synchronously(env: Any) -> bool:
    """True when the rollout steps ``env`` with its synchronous ``step``: a ``TextEnv``
    subclass that overrides ``step`` but not ``astep``. Every other env is awaited via
    ``astep``."""
    cls = type(env)
    return isinstance(env, TextEnv) and cls.step is not TextEnv.step and cls.astep is TextEnv.astep


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool) or type(x).__name__ == "bool_"  # numpy.bool_ too


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not _is_bool(x) and math.isfinite(float(x))


def _obs_problems(obs: Any) -> list[str]:
    fix = 'return a str, or {"text": str, "images": [...]} for a multimodal env'
    if isinstance(obs, str):
        return []
    if isinstance(obs, Mapping):
        out = []
        if not isinstance(obs.get("text"), str):
            out.append(f"a dict observation needs a str 'text' (got "
                       f"{type(obs.get('text')).__name__}); {fix}")
        if "images" in obs and not isinstance(obs["images"], (list, tuple)):
            out.append(f"observation 'images' must be a list or tuple, got "
                       f"{type(obs['images']).__name__}")
        return out
    return [f"the observation is a {type(obs).__name__}; {fix}"]


def _text(obs: Any) -> str:
    return obs if isinstance(obs, str) else str(obs.get("text", ""))


def _member_problems(env: Any) -> tuple[list[str], bool]:
    """Problems with the members themselves, and whether stepping can go on."""
    name = type(env).__name__
    out: list[str] = []
    can_step = True
    if not callable(getattr(env, "reset", None)):
        out.append(f"{name} has no reset(): define reset(self, *, seed=None, options=None) "
                   "returning (observation, info); the rollout passes options={'task': row}")
        can_step = False
    if not callable(getattr(env, "astep", None)):
        out.append(f"{name} has no astep(): the rollout plays each turn with `await "
                   "env.astep(action)`; define `async def astep(self, action: str)` returning "
                   "(observation, reward, terminated, truncated, info), or subclass "
                   "agentsearch.envs.TextEnv (then overriding only `step` is enough)")
        can_step = False
    elif not steps_synchronously(env) and not inspect.iscoroutinefunction(env.astep):
        out.append(f"{name}.astep is not a coroutine function: declare it `async def astep(self, "
                   "action)` (the rollout awaits it; blocking work belongs in an executor)")
    if not hasattr(env, "stop_strings"):
        out.append(f"{name} has no stop_strings: define a tuple of the strings that end a turn "
                   "(e.g. stop_strings = ('</answer>',)), or stop_strings = () for none")
    else:
        stops = env.stop_strings
        if not isinstance(stops, tuple):
            out.append(f"{name}.stop_strings is a {type(stops).__name__} ({stops!r}); make it a "
                       "tuple of str, e.g. ('</answer>',)")
        if isinstance(stops, (tuple, list)):
            bad = [s for s in stops if not isinstance(s, str) or not s]
            if bad:
                out.append(f"{name}.stop_strings has entries that are not non-empty str: {bad!r}; "
                           "each stop string is text that ends a turn")
    if not callable(getattr(env, "aclose", None)):
        out.append(f"{name} has no aclose(): define `async def aclose(self) -> None` that closes "
                   "tool clients (a no-op is fine); EventLoop.close(envs) awaits it")
    elif not inspect.iscoroutinefunction(env.aclose):
        out.append(f"{name}.aclose is not a coroutine function: "
                   "declare it `async def aclose(self)`")
    return out, can_step


def _step_problems(env: Any, out: Any) -> tuple[list[str], bool]:
    """Problems with one step's result, and whether the episode is over."""
    if not isinstance(out, tuple) or len(out) != 5:
        return [f"astep returned {type(out).__name__} "
                f"{'of length ' + str(len(out)) if isinstance(out, Sequence) else ''}; return the "
                "tuple (observation, reward, terminated, truncated, info)"], True
    obs, reward, terminated, truncated, info = out
    probs = _obs_problems(obs)
    if not _is_real(reward):
        probs.append(f"the reward {reward!r} ({type(reward).__name__}) is not a finite "
                     "number; return a float")
    for label, flag in (("terminated", terminated), ("truncated", truncated)):
        if not _is_bool(flag):
            probs.append(f"{label} is {flag!r} ({type(flag).__name__}); return a bool")
    done = bool(terminated) or bool(truncated)
    if terminated and truncated:
        probs.append("terminated and truncated are both True; an episode ends one way: "
                     "terminated when the agent ends it (e.g. answers), truncated when it runs "
                     "out of turns")
    if not isinstance(info, dict):
        probs.append(f"info is a {type(info).__name__}; return a dict")
        return probs, done
    comps = {k: v for k, v in info.items() if isinstance(k, str) and k.startswith("reward/")}
    bad = {k: v for k, v in comps.items() if not _is_real(v)}
    if bad:
        probs.append(f"reward components must be finite numbers, got {bad!r}")
    elif comps and _is_real(reward):
        total = sum(float(v) for v in comps.values())
        if not math.isclose(total, float(reward), rel_tol=_TOL, abs_tol=_TOL):
            probs.append(f"the reward is {float(reward)!r} but the info's reward "
                         f"components {comps} sum to {total!r}; make the reward/* components add "
                         "up to the reward astep returns (or put no reward/* keys in info: the "
                         "rollout then books the whole reward as reward/env)")
    ac = info.get("answer_correct")
    if not done and ac is not None:
        probs.append(f"info['answer_correct'] is {ac!r} on a step that did not end the "
                     "episode; leave it None until the final step (the rollout takes the last "
                     "non-None value as the episode's outcome)")
    elif terminated and not _is_bool(ac):
        probs.append(f"the episode terminated but info['answer_correct'] is {ac!r}; set "
                     "it to True or False on the terminating step")
    elif truncated and ac is not None and not _is_bool(ac):
        probs.append(f"info['answer_correct'] is {ac!r} at truncation; use None or a bool")
    checks = (("answer", lambda v: v is None or isinstance(v, str), "a str or None"),
              ("tool", lambda v: v is None or isinstance(v, str),
               "a str (comma-separated names) or None"),
              ("error", lambda v: v is None or isinstance(v, str), "a str or None"),
              ("tool_calls", lambda v: isinstance(v, int) and not _is_bool(v) and v >= 0,
               "an int >= 0"),
              ("tool_error", _is_bool, "a bool"),
              ("malformed", _is_bool, "a bool"),
              ("tool_latency_s", lambda v: _is_real(v) and v >= 0, "a float >= 0 (seconds)"))
    for key, ok, what in checks:
        if key in info and not ok(info[key]):
            probs.append(f"info[{key!r}] is {info[key]!r}; it must be {what}")
    timing = getattr(env, "last_step_timing", None)
    if timing is not None and (not isinstance(timing, Mapping)
                               or not all(_is_real(v) and v >= 0 for v in timing.values())):
        probs.append(f"last_step_timing is {timing!r}; it must be a dict of seconds "
                     "(e.g. {'reward_s': 0.01}) or absent")
    return probs, done


def _default_task(env: Any) -> dict:
    tasks = getattr(env, "tasks", None) if isinstance(env, TextEnv) else None
    if tasks:
        return dict(tasks[0])
    return {"id": "rollout-contract", "question": "What is 6 times 7?", "golden_answers": ["42"]}


def probe_action(env, name: str) -> str:
    """A well-formed call of the env's tool ``name`` in the env's turn format."""
    tool = env.tools[name]
    arg = tag_argument(tool)
    value = {"search": env.task["question"], "calculator": "6 * 7",
             "python": "print(6 * 7)", "crop": "top-left"}.get(name, "test")
    if env.config.turn_format == "tags":
        return f"<think>I should use {name}.</think>\n<{name}> {value} </{name}>"
    call = json.dumps({"name": name, "arguments": {arg: value}})
    return f"<tool_call>\n{call}\n</tool_call><|im_end|>"


def answer_action(env, answer: str) -> str:
    """A turn that answers ``answer`` in the env's turn format."""
    end = "" if env.config.turn_format == "tags" else "<|im_end|>"
    return f"<think>I know it.</think>\n<answer> {answer} </answer>{end}"


def _default_episodes(env: Any, task: dict) -> list[list[str]]:
    cfg = getattr(env, "config", None)
    if not (isinstance(env, TextEnv) and getattr(cfg, "turn_format", None) in ("tags", "json")
            and task.get("golden_answers")):
        return [[_MALFORMED]]
    golden = task["golden_answers"]
    answer = answer_action(env, str(golden if isinstance(golden, str) else golden[0]))
    episodes = [[_MALFORMED, answer], [_MALFORMED]]
    if getattr(env, "tools", None):
        env.reset(options={"task": task})  # the probes read env.task
        episodes.insert(1, [probe_action(env, n) for n in env.tools] + [answer])
    return episodes


def _await(result: Any, what: str) -> Any:
    if not inspect.isawaitable(result):
        raise TypeError(f"{what} returned a {type(result).__name__}, not an awaitable: declare "
                        "it `async def`")
    return run_sync(result)


def check_rollout_contract(env: Any, *, task: dict | None = None,
                           episodes: Sequence[Sequence[str]] | None = None, max_steps: int = 64,
                           raise_errors: bool = False) -> list[str]:
    """Check one env instance against ``RolloutEnv``, the way the rollout uses it.

    Checks the members (``reset``, ``astep`` as a coroutine function, ``stop_strings`` a
    tuple of non-empty str, ``aclose``), then plays each of ``episodes`` (lists of actions;
    the last action repeats until the episode ends) from ``reset(seed=i, options={"task":
    task})``, stepping as the rollout does, and checks every result: observation types,
    a finite float reward equal to the sum of the ``reward/*`` info keys (when present),
    bool ``terminated``/``truncated`` never both True, ``answer_correct`` None before the
    end and a bool at termination, the types of the other ``STEP_INFO_KEYS``; that each
    episode ends within ``max_steps``; and finally that ``aclose()`` can be awaited twice.

    ``task``: the row passed to ``reset`` (default: a ``TextEnv``'s first task, else a small
    arithmetic question). ``episodes``: default for a ``TextEnv``: a malformed turn then the
    golden answer, each tool's simple call then the answer, and malformed turns until the
    env truncates; for any other env, malformed turns until it ends.

    Returns the problems found (``[]``: the env keeps the contract), each saying where it
    happened and how to fix the env; with ``raise_errors=True`` raises
    ``RolloutContractError`` listing them instead.
    """
    problems, can_step = _member_problems(env)
    if can_step:
        try:
            task = dict(task) if task is not None else _default_task(env)
            episodes = ([list(e) for e in episodes] if episodes is not None
                        else _default_episodes(env, task))
        except Exception as e:  # noqa: BLE001 - a broken env is a finding, not a crash
            problems.append(f"preparing the check (loading a task) raised {type(e).__name__}: {e}")
            episodes = []
        seen: set[str] = set()
        for i, actions in enumerate(a for a in episodes if a):
            for where, msg in _play(env, task, actions, seed=i, max_steps=max_steps):
                if msg not in seen:  # report each problem once, where it first showed
                    seen.add(msg)
                    problems.append(f"{where}: {msg}")
    if callable(getattr(env, "aclose", None)):
        for _ in range(2):
            try:
                _await(env.aclose(), "aclose()")
            except Exception as e:  # noqa: BLE001
                problems.append(f"aclose() raised {type(e).__name__}: {e}; it must close what the "
                                "env holds and be safe to call twice")
                break
    if problems and raise_errors:
        raise RolloutContractError(f"{type(env).__name__} breaks the rollout contract:\n- "
                                   + "\n- ".join(problems))
    return problems


def _play(env: Any, task: dict, actions: list[str], *, seed: int,
          max_steps: int) -> list[tuple[str, str]]:
    """One episode's problems as (where, what); stops at the first step with problems."""
    call = f"reset(seed={seed}, options={{'task': ...}})"
    try:
        out = env.reset(seed=seed, options={"task": task})
    except Exception as e:  # noqa: BLE001
        return [(call, f"raised {type(e).__name__}: {e}; reset must accept the keyword arguments "
                "seed and options, and play options['task']")]
    if not isinstance(out, tuple) or len(out) != 2:
        return [(call, f"returned {type(out).__name__}; return the tuple (observation, info)")]
    obs, info = out
    probs = _obs_problems(obs)
    if not probs and not _text(obs):
        probs.append("the observation (the prompt) is empty; it must be the whole prompt "
                     "text the policy continues from")
    if not isinstance(info, dict):
        probs.append(f"info is a {type(info).__name__}; return a dict")
    if probs:
        return [(call, p) for p in probs]
    sync = steps_synchronously(env)
    for k in range(max_steps):
        action = actions[min(k, len(actions) - 1)]
        where = f"step {k + 1} (action {action[:60]!r}) after {call}"
        try:
            out = env.step(action) if sync else env.astep(action)
            if not sync:
                if not inspect.isawaitable(out):
                    return [(where, f"astep returned a {type(out).__name__}, not an awaitable: "
                             "declare it `async def astep(self, action)`")]
                out = run_sync(out)
        except Exception as e:  # noqa: BLE001
            return [(where, f"raised {type(e).__name__}: {e}; the policy can write any text: "
                     "a turn the env cannot use must return an error observation (with "
                     "info['malformed']=True), not raise")]
        probs, done = _step_problems(env, out)
        if probs:
            return [(where, p) for p in probs]
        if done:
            return []
    return [(f"episode {actions[:3]!r} after {call}", f"did not end after {max_steps} steps; end "
             "episodes in the env (truncated=True after a turn limit): the rollout's max_turns "
             "is optional")]
