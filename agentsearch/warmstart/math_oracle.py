"""A scripted population for math word problems: agents that sometimes compute in their head.

``agentsearch/Math-v0`` with the calculator (``env_kwargs.tools=[calculator]``) leaves one
decision to the agent: call the calculator, or answer at once. The tiny math base imitates a
population that differs only in that decision (``MATH_STRATEGIES``):

- ``calculator``: write the problem's arithmetic as one calculator expression (the task's
  ``expression``, its numbers copied from the question), then answer with the result the
  environment showed;
- ``head``: answer at once with the exact value, as if computed in the head.

Imitating ``head`` cannot teach a 1.1M-parameter model multi-digit arithmetic: it learns
the answer's shape, not its value, so the base errs when it answers in its head (as a tiny
model does) and is right when it calls the calculator and copies the result. RL has a tool
decision to learn whose payoff it can see; ``agentsearch diagnose`` measures P(correct) with
the call forced on and off, per problem kind.

Answers are written right after the tag (``<answer>196.875</answer>``): the calculator's
result comes back as ``<information>196.875</information>``, so the copied digits tokenize
exactly as they were shown.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from agentsearch.rollout import Episode, SamplingParams, ScriptedBackend, rollout

__all__ = ["MATH_STRATEGIES", "check_math_strategies", "math_oracle", "math_oracle_episodes"]

MATH_STRATEGIES = ("calculator", "head")
"""Whether a scripted math agent calls the calculator (module docstring)."""

_PROBLEM = re.compile(r"Problem: (.*?)(?:\n|<\|im_end\|>|</s>|$)")
_RESULT = re.compile(r"<information>(.*?)</information>", re.S)


def check_math_strategies(shares: dict[str, float]) -> dict[str, float]:
    """``shares`` validated: names of ``MATH_STRATEGIES``, non-negative, summing to 1."""
    unknown = sorted(set(shares) - set(MATH_STRATEGIES))
    if unknown:
        raise ValueError(f"unknown math oracle strategies {unknown}; choose from "
                         f"{list(MATH_STRATEGIES)}")
    if not shares or any(v < 0 for v in shares.values()) or abs(sum(shares.values()) - 1.0) > 1e-6:
        raise ValueError(f"math strategy shares must be non-negative and sum to 1: {shares}")
    return {k: float(v) for k, v in shares.items()}


def math_oracle(tasks: list[dict], *, seed: int = 0,
                strategies: dict[str, float] | None = None) -> Callable[[str], str]:
    """A policy ``conversation -> turn`` (tags format) for synthetic math tasks (rows with
    ``expression``); ``policy.strategy_of`` maps each problem to its strategy (seeded)."""
    shares = check_math_strategies(strategies or {"calculator": 1.0})
    by_problem = {str(t["question"]).strip(): t for t in tasks}
    missing = [q for q, t in by_problem.items() if not t.get("expression")]
    if missing:
        raise ValueError(f"the math oracle needs each task's 'expression' (synthetic problems); "
                         f"{len(missing)} lack it, e.g. {missing[0][:80]!r}")
    rng = random.Random(seed * 7 + 5)
    names, weights = list(shares), list(shares.values())
    strategy_of = {q: rng.choices(names, weights)[0] for q in by_problem}

    def policy(conversation: str) -> str:
        m = next((m for m in _PROBLEM.finditer(conversation)
                  if m.group(1).strip() in by_problem), None)
        if m is None:
            raise KeyError("the math oracle does not know this conversation's problem")
        task = by_problem[m.group(1).strip()]
        if strategy_of[m.group(1).strip()] == "head":
            return f"<answer>{task['golden_answers'][0]}</answer>"
        shown = _RESULT.findall(conversation[m.end():])
        if not shown:
            return f"<calculator> {task['expression']} </calculator>"
        return f"<answer>{shown[-1].strip()}</answer>"

    policy.strategy_of = strategy_of  # type: ignore[attr-defined]
    return policy


def math_oracle_episodes(envs, tok, *, task_seed: int = 0, count: int = 2000, seed: int = 0,
                         max_turns: int = 3, max_seq_len: int = 512,
                         strategies: dict[str, float] | None = None) -> list[Episode]:
    """Play the population on ``count`` shuffled train problems of the generator seed
    ``task_seed`` through ``envs`` (``MathEnv``s with the calculator, tags format; a batch of
    ``len(envs)`` at a time); keep the episodes that end in a correct answer (a calculator
    result that is not the golden answer would teach a wrong reading)."""
    from agentsearch.envs.tasks.math_tasks import synthetic_math

    env = envs[0]
    if env.config.turn_format != "tags" or "calculator" not in env.tools:
        raise ValueError("the math oracle plays the tags format with the calculator tool "
                         "(env_kwargs: turn_format=tags, tools=[calculator])")
    tasks = synthetic_math("train", seed=task_seed)
    random.Random(seed).shuffle(tasks)
    backend = ScriptedBackend(tok, math_oracle(tasks, seed=seed, strategies=strategies))
    params = SamplingParams(max_new_tokens=256, temperature=1.0)
    kept: list[Episode] = []
    for s in range(0, min(count, len(tasks)), len(envs)):
        chunk = tasks[s:min(s + len(envs), count)]
        eps, _ = rollout(envs[:len(chunk)], chunk, backend, params, max_turns=max_turns,
                         max_seq_len=max_seq_len, seed=seed + s)
        kept += [e for e in eps if e.answer_correct]
    return kept
