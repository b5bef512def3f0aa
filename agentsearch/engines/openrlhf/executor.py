"""agentsearch environments inside OpenRLHF's rollout: the agent executor.

OpenRLHF (0.11.2) loads a Python file given by ``--train.agent_func_path`` in every vLLM
rollout actor and calls ``AgentExecutor().execute(prompt, label, sampling_params,
max_length, hf_tokenizer, llm_engine)`` once per sample, concurrently on the actor's event
loop. ``agent_func.py`` next to this module is that file; its ``AgentExecutor`` is the
class below. It plays one episode of any registered agentsearch env with our own
``arollout``, so the episode is token-for-token what our trainer would produce:

- generation is token in, token out through the engine OpenRLHF passes
  (``RolloutRayActor.generate``): sampled ids are kept as sampled, never decoded and
  re-tokenised; the env's stop strings, our turn cap (``max_turns``) and per-turn token cap
  (``max_new_tokens``) apply, and ``max_length`` is the episode's token budget;
- environment observations are tokenised by the env's own tokenizer and lie outside
  ``action_ranges``, so OpenRLHF's ``action_mask`` is 0 on them (and on the prompt);
- tool calls are ``async`` (``env.astep``), so a slow search never blocks the engine's loop;
  pointing ``env_kwargs.index`` at ``agentsearch serve`` makes every engine share one
  retriever service instead of loading an index each;
- the reward is the env's; its components, ``answer_correct``, turns and tool counts go to
  ``extra_logs`` (OpenRLHF logs them per step); ``scores`` is ``answer_correct`` (0/1), which
  OpenRLHF's dynamic filtering and pass@k evaluation read.

What to play comes in the **label** (``task_label``): the env id, its kwargs, the task and
the rollout caps, as JSON. ``agentsearch openrlhf launch`` writes such a prompt file
(``{"prompt": question, "label": ...}`` per line) from any env's split.

Text envs only: ``EngineBackend`` passes no images, so an env that gives them
(``agentsearch/Vision-v0``) is refused up front (``check_env_supported``; a launcher calls it
before starting). ``truncated`` is true for every episode that did not end on its own: a
turn cut at its token cap, the turn cap, the token budget or the env's own truncation.
Pooled env instances are closed by ``close()`` (``aclose()`` on the engine's loop), which
also runs when the executor is garbage-collected or the process exits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import weakref
from copy import deepcopy
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentsearch.core.reliability import outages
from agentsearch.engines.openrlhf.compat import import_openrlhf
from agentsearch.rollout.backends import Generation, SamplingParams
from agentsearch.rollout.episodes import Episode, arollout
from agentsearch.rollout.events import aclose_all

import_openrlhf()
from openrlhf.utils.agent import AgentExecutorBase  # noqa: E402

__all__ = ["AgentExecutor", "EngineBackend", "task_label", "parse_label", "episode_response",
           "action_ranges", "check_env_supported", "LABEL_FORMAT"]

LABEL_FORMAT = "agentsearch-task/1"
CLOSE_TIMEOUT_S = 10.0
"""How long ``AgentExecutor.close()`` waits for the envs' ``aclose()`` on a running loop."""

log = logging.getLogger(__name__)


def check_env_supported(env_id: str) -> None:
    """A ``ValueError`` unless the OpenRLHF engine can play ``env_id``: it must be registered
    (``import agentsearch.envs`` registers ours) and must not give images, which
    ``EngineBackend`` cannot pass to the engine. Loads the env's class, builds no env."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    import agentsearch.envs  # noqa: F401 - registers the ids
    from agentsearch.envs.vision import VisionEnv

    try:
        entry = gymnasium.spec(env_id).entry_point
        cls = load_env_creator(entry) if isinstance(entry, str) else entry
    except (gymnasium.error.Error, ImportError, AttributeError) as e:
        raise ValueError(f"the agentsearch executor cannot make env {env_id!r}: {e}") from None
    if isinstance(cls, type) and issubclass(cls, VisionEnv):
        raise ValueError(f"env {env_id!r} gives images, but the OpenRLHF engine's backend "
                         "(agentsearch.engines.openrlhf.executor.EngineBackend) passes text only, "
                         "no images; train multimodal envs with `agentsearch train` instead")


def task_label(env: str, env_kwargs: dict, task: dict, *, max_turns: int, max_new_tokens: int,
               reliability: dict | None = None) -> str:
    """The label OpenRLHF carries for one prompt: everything the executor needs to play it
    (``reliability``: ``{"outage_budget_s", "warn_every_s"}`` for the executor's envs)."""
    spec = {"format": LABEL_FORMAT, "env": env, "env_kwargs": env_kwargs, "task": task,
            "max_turns": int(max_turns), "max_new_tokens": int(max_new_tokens)}
    if reliability:
        spec["reliability"] = {k: float(reliability[k])
                               for k in ("outage_budget_s", "warn_every_s")}
    return json.dumps(spec, sort_keys=True)


def parse_label(label: Any) -> dict:
    """Check and decode a ``task_label``; a clear ``ValueError`` for anything else."""
    try:
        spec = json.loads(label) if isinstance(label, str) else label
    except json.JSONDecodeError as e:
        raise ValueError(f"the agentsearch executor got a label that is not JSON ({e}): "
                         f"{str(label)[:80]!r}; write the prompt file with "
                         "`agentsearch openrlhf launch`") from None
    if not isinstance(spec, dict) or spec.get("format") != LABEL_FORMAT:
        raise ValueError(f"the agentsearch executor needs labels of format {LABEL_FORMAT!r} "
                         "(agentsearch.engines.openrlhf.executor.task_label), got "
                         f"{str(label)[:80]!r}")
    return spec


def action_ranges(mask: list[int]) -> list[tuple[int, int]]:
    """The ``[start, end)`` runs of 1 in an action mask (OpenRLHF's ``action_ranges``)."""
    ranges, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ranges.append((start, i))
            start = None
    return ranges


def episode_response(ep: Episode, prompt: str, label: str, *, logprobs: bool) -> dict:
    """OpenRLHF's executor result for one of our episodes (the keys ``MultiTurnAgentExecutor``
    returns). ``extra_logs`` has the same keys for every episode of an env, as OpenRLHF's
    ``Experience`` merging needs. ``truncated``: the episode did not end on its own (its last
    turn was cut at the token cap, or it hit ``max_turns``, the token budget ``max_length``
    or the env's own turn limit: ``Episode.truncated``)."""
    turns = ep.info.get("turns") or [{}]
    logs = {k: float(v) for k, v in sorted(ep.reward_components.items())}
    logs.update({"answer_correct": float(bool(ep.answer_correct)), "turns": float(ep.num_turns),
                 "tool_calls": float(ep.info.get("tool_calls", 0)),
                 "tool_errors": float(ep.info.get("tool_errors", 0)),
                 "malformed_turns": float(ep.info.get("malformed_turns", 0))})
    return {"prompt": prompt, "label": label, "images": None, "mm_train_inputs": None,
            "reward": float(ep.reward), "scores": float(bool(ep.answer_correct)),
            "observation_tokens": list(ep.token_ids),
            "action_ranges": action_ranges(ep.action_mask),
            "rollout_log_probs": [float(x) for x in ep.gen_logprobs] if logprobs else None,
            "truncated": bool(ep.truncated) or turns[-1].get("finish_reason") == "length",
            "extra_logs": logs}


class EngineBackend:
    """Our ``GenerationBackend`` over the engine OpenRLHF hands to ``execute`` (anything with
    ``async generate(prompt_token_ids, vllm_sampling_params)`` returning a vLLM
    ``RequestOutput``). ``generate`` is ``async``; ``arollout`` awaits it. Text only: it
    passes no images (``check_env_supported`` refuses envs that give them)."""

    accepts_images = False

    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer = engine, tokenizer

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from agentsearch.rollout.vllm import generation_from_output, vllm_sampling_params

        outs = await asyncio.gather(*(self.engine.generate(list(p), vllm_sampling_params(params, i))
                                      for i, p in enumerate(prompts)))
        return [generation_from_output(o.outputs[0]) for o in outs]


@lru_cache(maxsize=8)
def _own_tokenizer(path: str):
    from agentsearch.models.text import load_tokenizer

    return load_tokenizer(path)


def env_tokenizer(hf_tokenizer):
    """The tokenizer episodes are tokenised with. For a local model folder it is
    ``agentsearch.models.load_tokenizer`` of that folder (it checks the folder's
    ``tokenizer.json``: transformers 5 reloads our tiny models' tokenizer as a class that
    pre-tokenises differently); otherwise the one OpenRLHF loaded."""
    path = getattr(hf_tokenizer, "name_or_path", "") or ""
    if path and (Path(path) / "tokenizer.json").exists():
        return _own_tokenizer(str(Path(path).resolve()))
    return hf_tokenizer


class _Pools:
    """The executor's idle envs per (env id, kwargs), the loop they ran on, and whether
    they were closed. Kept apart from the executor so its finalizer holds no reference to it."""

    def __init__(self):
        self.free: dict[str, list] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def drain(self) -> list:
        envs = [env for pool in self.free.values() for env in pool]
        self.free.clear()
        self.closed = True
        return envs


_closing: set = set()


def _close_pools(pools: _Pools) -> None:
    """Close every idle env (``aclose_all``): on the loop they ran on while it runs (their
    async clients are bound to it), else on a fresh loop."""
    envs = pools.drain()
    if not envs:
        return
    loop, pools.loop = pools.loop, None
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if loop is not None and loop is here:  # called on that loop: cannot block it, schedule
        task = loop.create_task(aclose_all(envs))
        _closing.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(_closing.discard)
        return
    if here is None and (loop is None or not loop.is_running()):
        asyncio.run(aclose_all(envs))
        return
    if loop is not None and loop.is_running():
        future = asyncio.run_coroutine_threadsafe(aclose_all(envs), loop)
    else:  # inside another running loop: close on a fresh loop in a helper thread
        helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentsearch-close")
        future = helper.submit(asyncio.run, aclose_all(envs))
        helper.shutdown(wait=False)
    try:
        future.result(timeout=CLOSE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        future.cancel()
        log.warning("closing %d env(s) took over %.0f s; left open", len(envs), CLOSE_TIMEOUT_S)


class AgentExecutor(AgentExecutorBase):
    """Plays one agentsearch episode per ``execute`` (module doc). Env instances are pooled per
    (env id, kwargs) and reused: building one may load tasks or connect a retriever.
    ``close()`` (or ``await aclose()``) closes them; it runs by itself when the executor is
    garbage-collected or at exit. An env still playing when it is called is closed when its
    episode ends."""

    def __init__(self):
        self._pools = _Pools()
        self._close = weakref.finalize(self, _close_pools, self._pools)

    def close(self) -> None:
        """Close every pooled env (their tools' clients); idempotent."""
        self._close()

    async def aclose(self) -> None:
        """``close()`` from a coroutine on the loop the episodes ran on."""
        self._close.detach()
        await aclose_all(self._pools.drain())

    def _acquire(self, spec: dict, tokenizer=None):
        key = json.dumps([spec["env"], spec.get("env_kwargs") or {}], sort_keys=True)
        pool = self._pools.free.setdefault(key, [])
        if pool:
            return key, pool.pop()
        import gymnasium

        import agentsearch.envs  # noqa: F401 - registers the ids

        kwargs = dict(spec.get("env_kwargs") or {})
        kwargs.setdefault("max_turns", spec["max_turns"])
        if kwargs.get("chat_template") == "policy" or kwargs.get("max_obs_tokens") is not None:
            # the policy's: its chat template, its token counts
            kwargs.setdefault("tokenizer", tokenizer)
        try:
            env = gymnasium.make(spec["env"], disable_env_checker=True, **kwargs).unwrapped
        except gymnasium.error.Error as e:
            raise ValueError(f"the agentsearch executor cannot make env {spec['env']!r}: "
                             f"{e}") from None
        return key, env

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer,
                      llm_engine, images=None):
        spec = parse_label(label)
        check_env_supported(spec["env"])
        if "reliability" in spec:  # how long this process's envs wait out an infra outage
            r = spec["reliability"]
            wanted = (r["outage_budget_s"], r["warn_every_s"])
            if (outages.budget_s, outages.warn_every_s) != wanted:
                outages.configure(budget_s=r["outage_budget_s"], warn_every_s=r["warn_every_s"])
        self._pools.loop = asyncio.get_running_loop()
        tok = env_tokenizer(hf_tokenizer)
        key, env = self._acquire(spec, tok)
        params = SamplingParams(max_new_tokens=spec["max_new_tokens"],
                                temperature=float(sampling_params.temperature),
                                top_p=float(sampling_params.top_p),
                                top_k=max(int(sampling_params.top_k or 0), 0))
        try:
            episodes, _ = await arollout([env], [deepcopy(spec["task"])],
                                         EngineBackend(llm_engine, tok), params,
                                         max_turns=spec["max_turns"], max_seq_len=int(max_length))
        finally:
            if self._pools.closed:
                await aclose_all([env])
            else:
                self._pools.free.setdefault(key, []).append(env)
        return episode_response(episodes[0], prompt, label,
                                logprobs=sampling_params.logprobs is not None)
