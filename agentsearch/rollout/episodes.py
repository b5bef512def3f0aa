"""Rollouts: many multi-turn episodes at once, token in, token out.

``rollout(envs, tasks, backend, params, n_per_task=n)`` plays ``len(tasks) * n``
episodes concurrently. Each turn, the next turn of *every* active episode is generated
in one ``backend.generate`` call (on small models generation is launch-bound, so one
big batch beats many small ones); then all envs step concurrently in one asyncio loop, so
tool calls overlap (and a ``BatchingRetriever`` turns concurrent searches into one batch).

Token in, token out: an episode's ``token_ids`` are the prompt's tokens, then for each
turn the ids the policy sampled (kept as sampled, never decoded and re-tokenised) and the
tokens of the env's observation text. ``action_mask`` is 1 exactly on sampled tokens;
``gen_logprobs`` holds the backend's logprob there and 0.0 elsewhere. The decoded text of
a turn's tokens is what the env parses.

An episode ends when its env terminates or truncates, after ``max_turns`` turns (a
rollout-level cap on top of the env's own), or when the next tokens would pass
``max_seq_len`` (generation is cut there, an observation that does not fit is dropped;
``truncated=True``, ``info["truncated_by"]="max_seq_len"``). A prompt that does not leave
room for one generated token under ``max_seq_len`` is a ``ValueError``, never cut.

Rewards: an episode's ``reward`` is the sum of the rewards its ``step`` calls returned. A
step's ``reward/*`` info keys, when present, are its components and must sum to that
reward; a step without them (a user env that only returns a reward) counts it as
``reward/env``.

What the rollout needs of an env (``reset``, ``astep``, ``stop_strings``, ``aclose``, the
per-step info keys) is written down in ``agentsearch.rollout.contract.RolloutEnv``;
``check_rollout_contract(env)`` checks an env against it.

Event loops: ``rollout`` runs on a fresh loop per call unless given ``loop=`` (an
``EventLoop``); a training run passes one for the whole run, so loop-bound clients (the
remote retriever's HTTP connection pool) are made once and closed at the end.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from agentsearch.envs.text_env import TextEnv
from agentsearch.rollout.backends import GenerationBackend, SamplingParams, derive_seed
from agentsearch.rollout.events import EventLoop
from agentsearch.rollout.turns import (
    Episode,
    RolloutStats,
    finish_episodes,
    start_episodes,
    step_env,
    take_generation,
    take_observation,
)

__all__ = ["Episode", "RolloutStats", "rollout", "arollout", "EventLoop"]


async def arollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str,
                   tasks: list[dict], backend: GenerationBackend, params: SamplingParams, *,
                   n_per_task: int = 1, max_turns: int | None = None, seed: int | None = None,
                   max_seq_len: int | None = None,
                   on_turn: Callable[[int, int, int], None] | None = None,
                   ) -> tuple[list[Episode], RolloutStats]:
    """``rollout`` as a coroutine (use it when an event loop is already running)."""
    t_start = time.perf_counter()
    tok = backend.tokenizer
    runs, stats, stop = start_episodes(envs_or_factory, tasks, tok, params, n_per_task=n_per_task,
                                       seed=seed, max_seq_len=max_seq_len)
    turn = 0
    while active := [r for r in runs if not r.done]:
        budget = params.max_new_tokens
        if max_seq_len is not None:  # no episode can use more than its room left
            budget = min(budget, max(max_seq_len - len(r.ids) for r in active))
        gen_params = replace(params, stop=stop, max_new_tokens=budget,
                             seed=None if params.seed is None else derive_seed(params.seed, turn))
        t0 = time.perf_counter()
        images = [r.info.get("images") or [] for r in active]
        if any(images):  # a multimodal env: the backend must take the episodes' images
            if not getattr(backend, "accepts_images", False):
                raise ValueError(f"the env gives images but {type(backend).__name__} is text-only; "
                                 "use a vision-language model (e.g. model=tiny-vlm)")
            gens = backend.generate([r.ids for r in active], gen_params, images=images)
        else:
            gens = backend.generate([r.ids for r in active], gen_params)
        if inspect.isawaitable(gens):  # an async backend (e.g. a served engine's client)
            gens = await gens
        stats.time_generate += time.perf_counter() - t0
        stats.generate_calls += 1
        stats.generate_requests += len(active)
        turn += 1
        t0 = time.perf_counter()
        stepping = [(r, a) for r, g in zip(active, gens)
                    if (a := take_generation(r, g, tok, max_seq_len, stats)) is not None]
        stats.time_tokenize += time.perf_counter() - t0
        t0 = time.perf_counter()
        calls_before = sum(r.info["tool_calls"] for r, _ in stepping)
        results = await asyncio.gather(*(step_env(r, a) for r, a in stepping))
        stats.tool_calls_by_turn.append(sum(r.info["tool_calls"] for r, _ in stepping)
                                        - calls_before)
        reward_s = sum(res[3] for res in results)
        stats.time_reward += reward_s
        stats.time_env += time.perf_counter() - t0 - reward_s
        t0 = time.perf_counter()
        obs_texts = [res[0] for res in results]
        obs_ids = tok(obs_texts, add_special_tokens=False)["input_ids"] if obs_texts else []
        for (r, _), res, o_ids in zip(stepping, results, obs_ids):
            take_observation(r, res, o_ids, max_turns=max_turns, max_seq_len=max_seq_len)
        stats.time_tokenize += time.perf_counter() - t0
        if on_turn is not None:
            on_turn(turn, sum(r.done for r in runs), len(runs))
    return finish_episodes(runs, stats, t_start), stats


def rollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str, tasks: list[dict],
            backend: GenerationBackend, params: SamplingParams, *, n_per_task: int = 1,
            max_turns: int | None = None, seed: int | None = None,
            max_seq_len: int | None = None, loop: EventLoop | None = None,
            on_turn: Callable[[int, int, int], None] | None = None,
            ) -> tuple[list[Episode], RolloutStats]:
    """Play ``len(tasks) * n_per_task`` episodes; episode ``i`` plays ``tasks[i // n_per_task]``.

    ``envs_or_factory``: a list of env instances (one per episode, reused across calls), a
    zero-argument factory, or a registered env id. ``seed`` seeds the resets (episode ``i``
    gets ``backends.derive_seed(seed, i)``); ``params.seed`` seeds generation (turn ``t`` uses
    ``derive_seed(params.seed, t)``).
    Returns the episodes in task-major order (``n_per_task`` consecutive episodes per task)
    and a ``RolloutStats``. Inside a running event loop use ``await arollout(...)``.
    ``loop``: an ``EventLoop`` to run on (a training run passes one for all its rollouts);
    without it each call runs on a fresh loop (``asyncio.run``). ``on_turn(turn, done, total)``
    is called after each lock-step turn (progress lines for long evaluations).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        coro = arollout(envs_or_factory, tasks, backend, params, n_per_task=n_per_task,
                        max_turns=max_turns, seed=seed, max_seq_len=max_seq_len, on_turn=on_turn)
        return asyncio.run(coro) if loop is None else loop.run(coro)
    raise RuntimeError("rollout() was called inside a running event loop; use "
                       "`await arollout(...)` there")
