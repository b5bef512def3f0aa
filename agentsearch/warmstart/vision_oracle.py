"""The scripted population of the ``agentsearch/Vision-v0`` warm start.

The population (``VISION_STRATEGIES``) differs in whether it *looks*, and how closely:

- ``look``: answers with the task's gold answer (the picture decides it);
- ``crop``: first zooms in (``<crop> REGION </crop>``, the quarter the question names, or
  ``full``), then answers with the gold answer (the enlarged region decides it);
- ``guess``: answers without looking closely: for "which is bigger, the green square or
  the blue square?" the first colour named; for a ``quarter`` question one of the picture's
  colours at random (a glance shows the colours, not where they are); otherwise a fixed
  plausible answer per question kind ("3" for counts, the most common colour, the first
  bar label).

All play the real env through ``ScriptedBackend`` (so the token layout is exactly a
sampled one: prompt, turns, observations); ``warmstart.sft.sft_train`` then trains on policy
tokens with the episode's images encoded (``ImageTextTokenizer.pixel_values``). A policy
imitating the mix answers some questions by looking closely and some at a glance; RL has to
find that looking closely pays.
"""

from __future__ import annotations

import random
import re

from agentsearch.envs.tasks.vision_tasks import QUARTERS
from agentsearch.rollout import Episode, EventLoop, SamplingParams, ScriptedBackend, rollout

__all__ = ["VISION_STRATEGIES", "check_vision_strategies", "guess_answer", "crop_region",
           "vision_oracle_episodes"]

VISION_STRATEGIES = ("look", "crop", "guess")
_GUESS = {"count": "3", "left_of": "red"}


def guess_answer(task: dict, rng: random.Random | None = None) -> str:
    """The ``guess`` agent's answer: from the question alone, or for ``quarter`` a colour of the
    picture drawn with ``rng`` (default: seeded by the task id)."""
    kind = task.get("type")
    if kind == "quarter":
        rng = rng or random.Random(str(task.get("id")))
        return rng.choice([o["colour"] for o in task["spec"]["shapes"]])
    if kind == "bigger":
        m = re.search(r"the (\w+) \w+ or", str(task["question"]))
        if m:
            return m.group(1)
    if kind == "bar":
        return "A"
    return _GUESS.get(kind, "3")


def crop_region(task: dict) -> str:
    """The region the ``crop`` agent zooms into: the quarter a ``quarter`` question names."""
    q = str(task.get("question", ""))
    return next((r for r in QUARTERS if f"the {r} quarter" in q), "full")


def _script(strategy: str, task: dict, rng: random.Random, turn_format: str = "tags"):
    """``policy(conversation) -> turn`` of one agent on one task (one episode: it is called
    once per turn)."""
    if strategy == "guess":
        answer = f"<answer> {guess_answer(task, rng)} </answer>"
        return lambda conversation: answer
    answer = f"<answer> {task['golden_answers'][0]} </answer>"
    if strategy == "look":
        return lambda conversation: answer
    region = crop_region(task)
    crop = (f'<tool_call>{{"name": "crop", "arguments": {{"box": "{region}"}}}}</tool_call>'
            if turn_format == "json" else f"<crop> {region} </crop>")
    turns = iter([crop])
    return lambda conversation: next(turns, answer)


def check_vision_strategies(shares: dict[str, float]) -> dict[str, float]:
    """``shares`` validated: names of ``VISION_STRATEGIES``, non-negative, summing to 1."""
    if not set(shares) <= set(VISION_STRATEGIES) or any(v < 0 for v in shares.values()) \
            or abs(sum(shares.values()) - 1) > 1e-6:
        raise ValueError(f"vision strategies must be shares of {'/'.join(VISION_STRATEGIES)}, "
                         f"non-negative, summing to 1: {shares}")
    return {k: float(v) for k, v in shares.items()}


def vision_oracle_episodes(env_factory, tok, tasks: list[dict], *, strategies: dict[str, float],
                           seed: int = 0, max_turns: int = 2, max_seq_len: int = 1024,
                           turn_format: str = "tags") -> list[Episode]:
    """One scripted episode per task, by an agent (``look``/``crop``/``guess``) drawn by
    ``strategies``; ``info["strategy"]`` says which. ``turn_format``: the env's (``tags``:
    ``<crop> … </crop>``; ``json``: a ``<tool_call>``)."""
    check_vision_strategies(strategies)
    rng = random.Random(seed)
    names, weights = list(strategies), list(strategies.values())
    episodes = []
    with EventLoop() as loop:  # one loop for all the per-task rollouts, not one each
        for task in tasks:
            strategy = rng.choices(names, weights)[0]
            backend = ScriptedBackend(tok, _script(strategy, task, rng, turn_format))
            (ep,), _ = rollout(env_factory, [task], backend, SamplingParams(max_new_tokens=64),
                               max_turns=max_turns, max_seq_len=max_seq_len, loop=loop)
            ep.info["strategy"] = strategy
            episodes.append(ep)
    return episodes
