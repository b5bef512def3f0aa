"""One episode's turns, shared by the lock-step rollout (``episodes``) and the asynchronous one
(``streaming``): the episode record, the rollout's statistics, and the steps an episode goes
through (start, take a generation, step the env, take the observation, finish).

An episode's state is an ``EpisodeState``; every function here changes one episode, so the
lock-step rollout applies them to all active episodes per turn and the streaming rollout to
each episode on its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from agentsearch.envs.text_env import TextEnv, observation_text
from agentsearch.rollout.backends import Generation, SamplingParams, derive_seed
from agentsearch.rollout.contract import steps_synchronously

__all__ = ["Episode", "RolloutStats", "EpisodeState", "make_envs", "stop_strings", "start_episodes",
           "take_generation", "step_env", "take_observation", "finish_episodes"]


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
    """question, golden_answers, answer, tool_calls, tool_errors, infra_errors, malformed_turns,
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
    generate_requests: int = 0
    """Turns asked of the engine (``/ generate_calls``: the mean batch)."""
    tokens_generated: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_calls_by_turn: list[int] = field(default_factory=list)
    """Lock-step rollouts: the tool calls of each turn, in order (one entry per batched
    generation call; the calls of one turn wait in a search service together). Regeneration
    rounds concatenate. Empty for a streaming rollout, whose episodes have no common turns."""
    tool_errors: int = 0
    infra_errors: int = 0
    """Infrastructure errors its tool calls waited out (``core.reliability``); none reached
    an episode."""
    malformed_turns: int = 0
    truncated: int = 0
    answer_correct: float = 0.0
    reward_mean: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    extra_metrics: dict[str, float] = field(default_factory=dict)
    """Keys a rollout adds to ``metrics()`` (``GroupPool``: its ``async/*`` keys)."""

    def merged(self, other: RolloutStats) -> RolloutStats:
        """Two rollouts of one step as one: counts and seconds add; the per-episode means
        (``answer_correct``, ``reward_mean``, ``reward_components``) are weighted by episodes."""
        means = ("answer_correct", "reward_mean", "reward_components", "extra_metrics")
        a, b = self.episodes, other.episodes

        def mean(x: float, y: float) -> float:
            return (x * a + y * b) / max(a + b, 1)

        out = RolloutStats(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self) if f.name not in means})
        out.answer_correct = mean(self.answer_correct, other.answer_correct)
        out.reward_mean = mean(self.reward_mean, other.reward_mean)
        out.reward_components = {k: mean(self.reward_components.get(k, 0.0),
                                         other.reward_components.get(k, 0.0))
                                 for k in {**self.reward_components, **other.reward_components}}
        out.extra_metrics = {**self.extra_metrics, **other.extra_metrics}
        return out

    def metrics(self) -> dict[str, float]:
        n = max(self.episodes, 1)
        out = {"time/generate": self.time_generate, "time/env": self.time_env,
               "time/reward": self.time_reward, "rollout/tokenize_seconds": self.time_tokenize,
               "rollout/wall_seconds": self.time_total, "rollout/episodes": float(self.episodes),
               "rollout/generate_calls": float(self.generate_calls),
               "rollout/batch_mean": self.generate_requests / max(self.generate_calls, 1),
               "rollout/tokens_generated": float(self.tokens_generated),
               "rollout/turns_mean": self.turns / n, "rollout/tool_calls": float(self.tool_calls),
               "rollout/tool_errors": float(self.tool_errors),
               "rollout/tool_calls_by_turn": list(self.tool_calls_by_turn),
               "rollout/tool_error_rate": self.tool_errors / max(self.tool_calls, 1),
               "rollout/infra_errors": float(self.infra_errors),
               "rollout/malformed_turn_rate": self.malformed_turns / max(self.turns, 1),
               "rollout/truncated_frac": self.truncated / n,
               "rollout/answer_correct": self.answer_correct, "reward/total": self.reward_mean}
        out.update(self.reward_components)
        out.update(self.extra_metrics)
        return out


@dataclass
class EpisodeState:
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


def make_envs(envs_or_factory, n: int) -> list[TextEnv]:
    if isinstance(envs_or_factory, str):
        import gymnasium

        import agentsearch.envs  # noqa: F401 - registers the ids

        return [gymnasium.make(envs_or_factory, disable_env_checker=True).unwrapped
                for _ in range(n)]
    if callable(envs_or_factory):
        return [envs_or_factory() for _ in range(n)]
    envs = list(envs_or_factory)
    if len(envs) < n:
        raise ValueError(f"{n} episodes need {n} env instances (one per concurrent episode), "
                         f"got {len(envs)}; pass a factory (e.g. lambda: SearchEnv()) instead")
    return envs[:n]


def stop_strings(params: SamplingParams, envs: Sequence[TextEnv]) -> tuple[str, ...]:
    stops = list(params.stop)
    for env in envs:
        stops += [s for s in getattr(env, "stop_strings", ()) if s not in stops]
    return tuple(stops)


def _task_id(r: EpisodeState) -> str:
    return str(r.task.get("id", r.info.get("task_id", "")))


async def step_env(r: EpisodeState, action: str):
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
        raise ValueError(f"{env_cls.__name__}.step returned reward {reward!r} but its info's "
                         f"reward components {comps} sum to {sum(comps.values())!r} (task "
                         f"{_task_id(r)!r}); they must agree (or put no reward/* keys in info)")
    r.reward += reward
    for key, value in comps.items():
        r.rewards[key] = r.rewards.get(key, 0.0) + value
    turn = r.info["turns"][-1]
    turn.update(tool=info.get("tool"), tool_latency_s=info.get("tool_latency_s", 0.0),
                error=info.get("error"), env_s=env_s)
    r.info["tool_calls"] += int(info.get("tool_calls", 0))
    r.info["tool_errors"] += int(bool(info.get("tool_error")))
    r.info["infra_errors"] += int(info.get("infra_errors", 0))
    r.info["malformed_turns"] += int(bool(info.get("malformed")))
    if info.get("answer") is not None:
        r.info["answer"] = info["answer"]
    if info.get("answer_correct") is not None:
        r.answer_correct = bool(info["answer_correct"])
    timing = getattr(r.env, "last_step_timing", {}) or {}
    images = list(obs["images"]) if isinstance(obs, dict) and obs.get("images") else []
    return observation_text(obs), terminated, truncated, float(timing.get("reward_s", 0.0)), images


def _truncate(r: EpisodeState, why: str) -> None:
    r.done, r.truncated = True, True
    r.info["truncated_by"] = why
    if r.answer_correct is None:
        r.answer_correct = False


def _finish(r: EpisodeState, stats: RolloutStats) -> Episode:
    stats.turns += r.turns
    stats.tool_calls += r.info["tool_calls"]
    stats.tool_errors += r.info["tool_errors"]
    stats.infra_errors += r.info["infra_errors"]
    stats.malformed_turns += r.info["malformed_turns"]
    stats.truncated += int(r.truncated)
    comps = {"reward/answer": 0.0, "reward/format": 0.0, **r.rewards}
    return Episode(task_id=_task_id(r), token_ids=r.ids,
                   action_mask=r.mask, gen_logprobs=r.logprobs, prompt_len=r.prompt_len,
                   reward=r.reward, reward_components=comps,
                   answer_correct=r.answer_correct, terminated=r.terminated,
                   truncated=r.truncated, num_turns=r.turns, info=r.info)




def start_episodes(envs_or_factory, tasks: list[dict], tok, params: SamplingParams, *,
                   n_per_task: int, seed: int | None, max_seq_len: int | None,
                   ) -> tuple[list[EpisodeState], RolloutStats, tuple[str, ...]]:
    """The episodes' states, the rollout's stats and the turns' stop strings (``params.stop``
    and every env's): one env per episode (``make_envs``) is reset (episode ``i`` plays
    ``tasks[i // n_per_task]``, reset seed ``derive_seed(seed, i)``) and the prompts are
    tokenised in one call. A prompt that leaves no room for a generated token under
    ``max_seq_len`` is a ``ValueError``."""
    envs = make_envs(envs_or_factory, len(tasks) * n_per_task)
    stats = RolloutStats(episodes=len(envs))
    runs, prompts = [], []
    for i, env in enumerate(envs):
        task = tasks[i // n_per_task]
        obs, info = env.reset(seed=None if seed is None else derive_seed(seed, i),
                              options={"task": task})
        prompts.append(observation_text(obs))
        info = {**info, "turns": [], "answer": None, "tool_calls": 0, "tool_errors": 0,
                "infra_errors": 0, "malformed_turns": 0, "truncated_by": None}
        if isinstance(obs, dict) and obs.get("images"):
            info["images"] = list(obs["images"])
        runs.append(EpisodeState(env, task, [], [], [], 0, info))
    t0 = time.perf_counter()
    prompt_ids = tok(prompts, add_special_tokens=False)["input_ids"] if prompts else []
    stats.time_tokenize += time.perf_counter() - t0
    for r, ids in zip(runs, prompt_ids):
        r.ids, r.mask, r.logprobs = list(ids), [0] * len(ids), [0.0] * len(ids)
        r.prompt_len = len(ids)
        if max_seq_len is not None and len(ids) >= max_seq_len:
            raise ValueError(f"the prompt of task {_task_id(r)!r} has {len(ids)} tokens, which "
                             f"leaves no room for a response under max_seq_len={max_seq_len}; "
                             "raise max_seq_len or shorten the prompt (it is never cut)")
    return runs, stats, stop_strings(params, envs)


def take_generation(r: EpisodeState, g: Generation, tok, max_seq_len: int | None,
                    stats: RolloutStats) -> str | None:
    """Append a sampled turn to the episode (mask 1, its logprobs); returns the turn's decoded
    text for the env, or ``None`` when it ran past ``max_seq_len`` (cut there,
    episode truncated)."""
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
        return None
    return tok.decode(ids, skip_special_tokens=False)


def take_observation(r: EpisodeState, result: tuple, obs_ids: list[int], *, max_turns: int | None,
                     max_seq_len: int | None) -> None:
    """End the episode (the env ended it, or ``max_turns``, or the observation does not fit
    under ``max_seq_len``), or append the observation's tokens (mask 0) and images."""
    _, terminated, truncated = result[:3]
    if terminated or truncated:
        r.done, r.terminated, r.truncated = True, terminated, truncated
        r.info["truncated_by"] = "env" if truncated else None
    elif max_turns is not None and r.turns >= max_turns:
        _truncate(r, "max_turns")
    elif max_seq_len is not None and len(r.ids) + len(obs_ids) >= max_seq_len:
        _truncate(r, "max_seq_len")
    else:
        r.ids += obs_ids
        r.mask += [0] * len(obs_ids)
        r.logprobs += [0.0] * len(obs_ids)
        if result[4]:  # an observation's images are kept only with its tokens
            r.info.setdefault("images", []).extend(result[4])
        r.info["turns"][-1]["obs_tokens"] = len(obs_ids)


def finish_episodes(runs: list[EpisodeState], stats: RolloutStats, t_start: float) -> list[Episode]:
    """The finished episodes, with the rollout's outcome statistics and wall clock filled in."""
    episodes = [_finish(r, stats) for r in runs]
    n = len(episodes)
    if n:
        stats.answer_correct = sum(bool(e.answer_correct) for e in episodes) / n
        stats.reward_mean = sum(e.reward for e in episodes) / n
        keys = sorted({k for e in episodes for k in e.reward_components})
        stats.reward_components = {k: sum(e.reward_components.get(k, 0.0) for e in episodes) / n
                                   for k in keys}
    stats.time_total = time.perf_counter() - t_start
    return episodes
