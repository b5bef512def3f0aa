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
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from agentsearch.envs.text_env import TextEnv, observation_text
from agentsearch.rollout.backends import GenerationBackend, SamplingParams, derive_seed
from agentsearch.rollout.contract import steps_synchronously
from agentsearch.rollout.events import EventLoop

__all__ = ["Episode", "RolloutStats", "rollout", "arollout", "EventLoop"]


@dataclass
class Episode:
    """One finished episode, ready for advantages and replay."""

    task_id: str
    """The task's id: the GRPO group key."""
    token_ids: list[int]
    """Prompt + every turn, exactly what the model saw and sampled."""
    action_mask: list[int]
    """1 = sampled by the policy, 0 = prompt or environment token."""
    gen_logprobs: list[float]
    """The backend's logprob where ``action_mask`` is 1, 0.0 elsewhere."""
    prompt_len: int
    reward: float
    """Total reward: the sum of the rewards ``step`` returned (= the sum of
    ``reward_components``)."""
    reward_components: dict[str, float]
    answer_correct: bool | None
    terminated: bool
    truncated: bool
    num_turns: int
    info: dict = field(default_factory=dict)
    """question, golden_answers, answer, tool_calls, tool_errors, malformed_turns,
    truncated_by, turns (per turn: finish_reason, new_tokens, obs_tokens, tool,
    tool_latency_s, error, env_s), images (observation images, if any)."""


@dataclass
class RolloutStats:
    """What a rollout cost and produced; ``metrics()`` gives the logging keys. Its ``time/*``
    keys (generate, env, reward) are disjoint phases of the training step; the rollout's wall
    clock (which contains them) and its tokenizing time (inside the step's ``time/other``) are
    ``rollout/wall_seconds`` and ``rollout/tokenize_seconds``, so the ``time/*`` keys add up."""

    episodes: int = 0
    time_generate: float = 0.0
    time_env: float = 0.0
    time_reward: float = 0.0
    time_tokenize: float = 0.0
    time_total: float = 0.0
    generate_calls: int = 0
    tokens_generated: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    malformed_turns: int = 0
    truncated: int = 0
    answer_correct: float = 0.0
    reward_mean: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        n = max(self.episodes, 1)
        out = {"time/generate": self.time_generate, "time/env": self.time_env,
               "time/reward": self.time_reward, "rollout/tokenize_seconds": self.time_tokenize,
               "rollout/wall_seconds": self.time_total, "rollout/episodes": float(self.episodes),
               "rollout/generate_calls": float(self.generate_calls),
               "rollout/tokens_generated": float(self.tokens_generated),
               "rollout/turns_mean": self.turns / n, "rollout/tool_calls": float(self.tool_calls),
               "rollout/tool_errors": float(self.tool_errors),
               "rollout/tool_error_rate": self.tool_errors / max(self.tool_calls, 1),
               "rollout/malformed_turn_rate": self.malformed_turns / max(self.turns, 1),
               "rollout/truncated_frac": self.truncated / n,
               "rollout/answer_correct": self.answer_correct, "reward/total": self.reward_mean}
        out.update(self.reward_components)
        return out


@dataclass
class _Run:
    env: TextEnv
    task: dict
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    prompt_len: int
    info: dict
    rewards: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    turns: int = 0
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    answer_correct: bool | None = None


def _make_envs(envs_or_factory, n: int) -> list[TextEnv]:
    if isinstance(envs_or_factory, str):
        import gymnasium

        import agentsearch.envs  # noqa: F401 - registers the ids

        return [gymnasium.make(envs_or_factory, disable_env_checker=True).unwrapped for _ in range(n)]
    if callable(envs_or_factory):
        return [envs_or_factory() for _ in range(n)]
    envs = list(envs_or_factory)
    if len(envs) < n:
        raise ValueError(f"{n} episodes need {n} env instances (one per concurrent episode), "
                         f"got {len(envs)}; pass a factory (e.g. lambda: SearchEnv()) instead")
    return envs[:n]


def _stop_strings(params: SamplingParams, envs: Sequence[TextEnv]) -> tuple[str, ...]:
    stops = list(params.stop)
    for env in envs:
        stops += [s for s in getattr(env, "stop_strings", ()) if s not in stops]
    return tuple(stops)


async def arollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str,
                   tasks: list[dict], backend: GenerationBackend, params: SamplingParams, *,
                   n_per_task: int = 1, max_turns: int | None = None, seed: int | None = None,
                   max_seq_len: int | None = None) -> tuple[list[Episode], RolloutStats]:
    """``rollout`` as a coroutine (use it when an event loop is already running)."""
    t_start = time.perf_counter()
    tok = backend.tokenizer
    n = len(tasks) * n_per_task
    envs = _make_envs(envs_or_factory, n)
    stats = RolloutStats(episodes=n)
    runs: list[_Run] = []
    prompts = []
    for i in range(n):
        task = tasks[i // n_per_task]
        obs, info = envs[i].reset(seed=None if seed is None else derive_seed(seed, i), options={"task": task})
        prompts.append(observation_text(obs))
        info = {**info, "turns": [], "answer": None, "tool_calls": 0, "tool_errors": 0,
                "malformed_turns": 0, "truncated_by": None}
        if isinstance(obs, dict) and obs.get("images"):
            info["images"] = list(obs["images"])
        runs.append(_Run(envs[i], task, [], [], [], 0, info))
    t0 = time.perf_counter()
    prompt_ids = tok(prompts, add_special_tokens=False)["input_ids"] if prompts else []
    stats.time_tokenize += time.perf_counter() - t0
    for r, ids in zip(runs, prompt_ids):
        r.ids, r.mask, r.logprobs, r.prompt_len = list(ids), [0] * len(ids), [0.0] * len(ids), len(ids)
        if max_seq_len is not None and len(ids) >= max_seq_len:
            raise ValueError(f"the prompt of task {_task_id(r)!r} has {len(ids)} tokens, which leaves "
                             f"no room for a response under max_seq_len={max_seq_len}; raise "
                             "max_seq_len or shorten the prompt (it is never cut)")
    stop = _stop_strings(params, envs)
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
        turn += 1
        t0 = time.perf_counter()
        actions, stepping = [], []
        for r, g in zip(active, gens):
            ids, lps = list(g.token_ids), list(g.logprobs)
            cut = max_seq_len is not None and len(r.ids) + len(ids) > max_seq_len
            if cut:
                ids, lps = ids[: max_seq_len - len(r.ids)], lps[: max_seq_len - len(r.ids)]
            r.ids += ids
            r.mask += [1] * len(ids)
            r.logprobs += [float(x) for x in lps]
            r.turns += 1
            stats.tokens_generated += len(ids)
            r.info["turns"].append({"finish_reason": "length" if cut else g.finish_reason,
                                    "new_tokens": len(ids), "obs_tokens": 0})
            if cut:
                _truncate(r, "max_seq_len")
            else:
                actions.append(tok.decode(ids, skip_special_tokens=False))
                stepping.append(r)
        stats.time_tokenize += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_step(r, a) for r, a in zip(stepping, actions)))
        reward_s = sum(res[3] for res in results)
        stats.time_reward += reward_s
        stats.time_env += time.perf_counter() - t0 - reward_s
        t0 = time.perf_counter()
        obs_texts = [res[0] for res in results]
        obs_ids = tok(obs_texts, add_special_tokens=False)["input_ids"] if obs_texts else []
        for r, res, o_ids in zip(stepping, results, obs_ids):
            _, terminated, truncated = res[:3]
            if terminated or truncated:
                r.done, r.terminated, r.truncated = True, terminated, truncated
                r.info["truncated_by"] = "env" if truncated else None
            elif max_turns is not None and r.turns >= max_turns:
                _truncate(r, "max_turns")
            elif max_seq_len is not None and len(r.ids) + len(o_ids) >= max_seq_len:
                _truncate(r, "max_seq_len")
            else:
                r.ids += o_ids
                r.mask += [0] * len(o_ids)
                r.logprobs += [0.0] * len(o_ids)
                if res[4]:  # an observation's images are kept only with its tokens
                    r.info.setdefault("images", []).extend(res[4])
                r.info["turns"][-1]["obs_tokens"] = len(o_ids)
        stats.time_tokenize += time.perf_counter() - t0
    episodes = [_finish(r, stats) for r in runs]
    if n:
        stats.answer_correct = sum(bool(e.answer_correct) for e in episodes) / n
        stats.reward_mean = sum(e.reward for e in episodes) / n
        keys = sorted({k for e in episodes for k in e.reward_components})
        stats.reward_components = {k: sum(e.reward_components.get(k, 0.0) for e in episodes) / n
                                   for k in keys}
    stats.time_total = time.perf_counter() - t_start
    return episodes, stats


def _task_id(r: _Run) -> str:
    return str(r.task.get("id", r.info.get("task_id", "")))


async def _step(r: _Run, action: str):
    t0 = time.perf_counter()
    env_cls = type(r.env)
    if steps_synchronously(r.env):
        out = r.env.step(action)  # a user env that overrides only the synchronous ``step``
    else:
        out = await r.env.astep(action)
    obs, reward, terminated, truncated, info = out
    env_s = time.perf_counter() - t0
    reward = float(reward)
    comps = {k: float(v) for k, v in info.items() if k.startswith("reward/")}
    if not comps:
        comps = {"reward/env": reward}
    elif not math.isclose(sum(comps.values()), reward, rel_tol=1e-6, abs_tol=1e-6):
        raise ValueError(f"{env_cls.__name__}.step returned reward {reward!r} but its info's reward "
                         f"components {comps} sum to {sum(comps.values())!r} (task {_task_id(r)!r}); "
                         "they must agree (or put no reward/* keys in info)")
    r.reward += reward
    for key, value in comps.items():
        r.rewards[key] = r.rewards.get(key, 0.0) + value
    turn = r.info["turns"][-1]
    turn.update(tool=info.get("tool"), tool_latency_s=info.get("tool_latency_s", 0.0),
                error=info.get("error"), env_s=env_s)
    r.info["tool_calls"] += int(info.get("tool_calls", 0))
    r.info["tool_errors"] += int(bool(info.get("tool_error")))
    r.info["malformed_turns"] += int(bool(info.get("malformed")))
    if info.get("answer") is not None:
        r.info["answer"] = info["answer"]
    if info.get("answer_correct") is not None:
        r.answer_correct = bool(info["answer_correct"])
    timing = getattr(r.env, "last_step_timing", {}) or {}
    images = list(obs["images"]) if isinstance(obs, dict) and obs.get("images") else []
    return observation_text(obs), terminated, truncated, float(timing.get("reward_s", 0.0)), images


def _truncate(r: _Run, why: str) -> None:
    r.done, r.truncated = True, True
    r.info["truncated_by"] = why
    if r.answer_correct is None:
        r.answer_correct = False


def _finish(r: _Run, stats: RolloutStats) -> Episode:
    stats.turns += r.turns
    stats.tool_calls += r.info["tool_calls"]
    stats.tool_errors += r.info["tool_errors"]
    stats.malformed_turns += r.info["malformed_turns"]
    stats.truncated += int(r.truncated)
    comps = {"reward/answer": 0.0, "reward/format": 0.0, **r.rewards}
    return Episode(task_id=_task_id(r), token_ids=r.ids,
                   action_mask=r.mask, gen_logprobs=r.logprobs, prompt_len=r.prompt_len,
                   reward=r.reward, reward_components=comps,
                   answer_correct=r.answer_correct, terminated=r.terminated,
                   truncated=r.truncated, num_turns=r.turns, info=r.info)


def rollout(envs_or_factory: Sequence[TextEnv] | Callable[[], TextEnv] | str, tasks: list[dict],
            backend: GenerationBackend, params: SamplingParams, *, n_per_task: int = 1,
            max_turns: int | None = None, seed: int | None = None,
            max_seq_len: int | None = None,
            loop: EventLoop | None = None) -> tuple[list[Episode], RolloutStats]:
    """Play ``len(tasks) * n_per_task`` episodes; episode ``i`` plays ``tasks[i // n_per_task]``.

    ``envs_or_factory``: a list of env instances (one per episode, reused across calls), a
    zero-argument factory, or a registered env id. ``seed`` seeds the resets (episode ``i``
    gets ``backends.derive_seed(seed, i)``); ``params.seed`` seeds generation (turn ``t`` uses
    ``derive_seed(params.seed, t)``).
    Returns the episodes in task-major order (``n_per_task`` consecutive episodes per task)
    and a ``RolloutStats``. Inside a running event loop use ``await arollout(...)``.
    ``loop``: an ``EventLoop`` to run on (a training run passes one for all its rollouts);
    without it each call runs on a fresh loop (``asyncio.run``).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        coro = arollout(envs_or_factory, tasks, backend, params, n_per_task=n_per_task,
                        max_turns=max_turns, seed=seed, max_seq_len=max_seq_len)
        return asyncio.run(coro) if loop is None else loop.run(coro)
    raise RuntimeError("rollout() was called inside a running event loop; use "
                       "`await arollout(...)` there")
