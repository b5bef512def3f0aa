"""The text-environment contract: Gymnasium's ``reset``/``step`` for multi-turn agents.

An episode is a conversation. ``reset(seed=None, options=None) -> (observation, info)``
starts it: the observation is the prompt text (rendered with the chat template),
``info`` has ``question``, ``golden_answers`` and ``task_id``. Each ``step(action)``
takes the text of one agent turn and returns ``(observation, reward, terminated,
truncated, info)``: the observation is the text the environment appends to the
conversation (a tool result, an error message, or ``""`` when the episode is over).
An answer ends the episode with ``terminated=True``; running out of turns ends it with
``truncated=True``; they are never merged.

Spaces: both are ``UnicodeText`` (a Gymnasium ``Text`` space that contains *any*
Unicode string up to a length; its ``sample()`` draws printable ASCII, protocol tags and a
few non-ASCII characters). A Gymnasium ``Text`` space with an explicit Unicode charset
would need ~1.1M characters in its index, and one without would reject any model output
outside its charset. Images (for vision tasks) are not in the text: a multimodal env
returns ``{"text": str, "images": tuple}`` observations with a ``Dict`` space;
``observation_text(obs)`` reads either form.

Per-step ``info``: ``answer_correct`` (``None`` until the episode ends, then a bool that
depends on the answer only), the reward components ``reward/answer`` and
``reward/format`` (they sum to the reward), ``tool`` (name(s) called, or ``None``),
``tool_latency_s``, ``tool_calls``, ``tool_error`` (the tool raised or timed out),
``malformed`` (the turn broke the format), ``error`` (what was wrong, or ``None``),
``answer``, ``turn``, and score metrics (``metric/…``, e.g. EM and F1) on answers.

Turn formats. ``"tags"`` (Search-R1): the env's text continues the assistant message
(``\n\n<information>…</information>\n\n``, or Search-R1's "My previous action is
invalid…" line: exactly Search-R1's with ``parser="search_r1"``, with the reason after
"invalid:" with the default ``parser="strict"``), as Search-R1 trains; ``stop_strings``
(``</search>``, ``</answer>``, ``</TOOL>``) end each turn. ``"json"``: the env first closes the
assistant turn the policy left open (e.g. appends ``<|im_end|>\n``, or just ``\n`` when the turn
ended with the eos token), then adds the chat template's tool-response (or user) turn and
the next assistant generation prompt.

Environments are async at heart: ``await env.astep(action)`` lets many episodes' tool
calls overlap in one event loop (what ``agentsearch.rollout`` does); ``step`` runs
``astep`` to completion for ordinary synchronous use.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import concurrent.futures
import copy
import dataclasses
import threading
import time
from typing import Any

import gymnasium as gym
from gymnasium.spaces import Text

from agentsearch.core.reliability import OutageError, call_until_up
from agentsearch.envs.parsing import JsonToolParser, SearchR1Parser, TagParser, Turn
from agentsearch.envs.rewards import AnswerScore, grade_off_loop, step_rewards
from agentsearch.envs.templates import ChatFormat, cut_to_tokens
from agentsearch.envs.text_env_config import TextEnvConfig
from agentsearch.envs.tools.protocol import Tool, call_once, load_tools, tag_argument, tool_schema

__all__ = ["TextEnv", "UnicodeText", "observation_text", "run_sync"]

_SAMPLE_CHARS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                 " \n\t.,;:!?'\"()[]{}<>/\\=+-*_#%&|~`@$^éüß中日é🙂")


class UnicodeText(Text):
    """A ``Text`` space containing any string of ``min_length``..``max_length`` characters."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed=None):
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


def observation_text(obs) -> str:
    """The text of an observation, whether it is a ``str`` or ``{"text": ..., "images": ...}``."""
    return obs if isinstance(obs, str) else obs["text"]


_local = threading.local()
_helper: concurrent.futures.ThreadPoolExecutor | None = None


def run_sync(coro):
    """Run a coroutine to completion from synchronous code (also inside a running loop)."""
    global _helper
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = getattr(_local, "loop", None)
        if loop is None or loop.is_closed():
            loop = _local.loop = asyncio.new_event_loop()
            atexit.register(loop.close)
        return loop.run_until_complete(coro)
    if _helper is None:  # called from async code (e.g. a notebook): use a helper thread
        _helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentsearch-env")
    return _helper.submit(run_sync, coro).result()


class TextEnv(gym.Env, abc.ABC):
    """Base class of agentsearch's text environments (see the module docstring).

    Subclasses provide ``load_tasks()``, ``instructions(task)`` (the prompt messages) and
    ``score(answer, task) -> AnswerScore``, and set ``Config`` and ``boxed``.

    ``tokenizer``: the policy's tokenizer (or a model name/folder to load it from), needed by
    ``chat_template="policy"`` and ``max_obs_tokens``; the trainer passes its own.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    Config = TextEnvConfig
    boxed = False  # accept \boxed{...} as an answer
    check_variants: tuple[dict, ...] = ({},)  # settings `agentsearch check-env` also tries

    def __init__(self, config: TextEnvConfig | None = None, *, tasks: list[dict] | None = None,
                 render_mode: str | None = None, tokenizer=None, **overrides):
        cfg = config if config is not None else self.Config()
        if overrides:
            names = {f.name for f in dataclasses.fields(cfg)}
            unknown = sorted(set(overrides) - names)
            if unknown:
                raise TypeError(f"{type(self).__name__} has no setting(s) {unknown}; "
                                f"settings are {sorted(names)}")
            # a fresh config resolves defaults that depend on other settings (format_penalty)
            cfg = (self.Config(**overrides) if config is None
                   else dataclasses.replace(cfg, **overrides))
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        self.config = cfg
        self.render_mode = render_mode
        if isinstance(tokenizer, str):
            from agentsearch.models.text import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        if tokenizer is None and cfg.max_obs_tokens is not None:
            raise ValueError("max_obs_tokens counts tokens of the policy's tokenizer: pass "
                             "tokenizer= (the trainer passes its own), or use max_obs_chars")
        self.tokenizer = tokenizer
        self.chat = ChatFormat(cfg.chat_template, tokenizer=tokenizer)
        if cfg.turn_format == "json" and self.chat.raw:
            raise ValueError("turn_format='json' needs a chat template, and this tokenizer has "
                             "none; use chat_template=None (the shipped ChatML tool template)")
        self._tasks = list(tasks) if tasks is not None else None
        self.tools: dict[str, Tool] = {t.name: t
                                       for t in load_tools(cfg.tools, **self.tool_kwargs())}
        if cfg.turn_format == "tags" and cfg.parser == "search_r1":
            self.parser = SearchR1Parser({n: tag_argument(t) for n, t in self.tools.items()},
                                         max_chars=cfg.max_action_chars)
        elif cfg.turn_format == "tags":
            self.parser = TagParser({n: tag_argument(t) for n, t in self.tools.items()},
                                    boxed=self.boxed, max_chars=cfg.max_action_chars)
        else:
            self.parser = JsonToolParser({n: t.parameters for n, t in self.tools.items()},
                                         boxed=self.boxed, max_calls=cfg.max_calls_per_turn,
                                         max_chars=cfg.max_action_chars)
        self.action_space = UnicodeText(cfg.max_action_chars)
        self.observation_space = UnicodeText(cfg.obs_space_chars)
        self._task: dict | None = None
        self._turn = 0
        self._done = False
        self._transcript: list[str] = []
        self.last_step_timing: dict[str, float] = {}
        """Wall-clock of the last step's phases (``reward_s``); kept out of ``info``, which
        must be identical for a seeded reset and the same action."""

    # ------------------------------------------------------------------ subclass hooks
    @abc.abstractmethod
    def load_tasks(self) -> list[dict]:
        """The task rows of ``self.config.split`` (each with ``question``, ``golden_answers``)."""

    @abc.abstractmethod
    def instructions(self, task: dict) -> list[dict]:
        """The prompt as chat messages (``system``/``user``) for ``self.config.turn_format``."""

    @abc.abstractmethod
    def score(self, answer: str, task: dict) -> AnswerScore:
        """How good a final answer is for ``task`` (the success bit and the reward). Runs on
        the grading thread, off the event loop (``rewards.grade_off_loop``). A grader that
        failed (a service, a checker process) raises ``InfraError``: the step waits and asks
        again (``core.reliability``), the answer is never scored on the failure."""

    def tool_kwargs(self) -> dict[str, dict]:
        return dict(self.config.tool_kwargs)

    # ------------------------------------------------------------------ public API
    @property
    def tasks(self) -> list[dict]:
        if self._tasks is None:
            self._tasks = self.load_tasks()
            if not self._tasks:
                raise ValueError(f"{type(self).__name__}: split {self.config.split!r} has no tasks")
        return self._tasks

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end a turn in this format (pass them to the generator)."""
        return self.parser.stop_strings

    @property
    def task(self) -> dict | None:
        return self._task

    def tool_schemas(self) -> list[dict]:
        return [tool_schema(t) for t in self.tools.values()]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if "question" not in task or "golden_answers" not in task:
            raise KeyError("a task needs 'question' and 'golden_answers' (a list of strings); "
                           f"got keys {sorted(task)}")
        self._task = copy.deepcopy(dict(task))
        if isinstance(self._task["golden_answers"], str):  # one answer given as a string
            self._task["golden_answers"] = [self._task["golden_answers"]]
        self._turn, self._done = 0, False
        tools = self.tool_schemas() if self.config.turn_format == "json" else None
        prompt = self.chat.render(self.instructions(self._task), tools=tools,
                                  add_generation_prompt=True)
        if len(prompt) > self.config.obs_space_chars:
            raise ValueError(f"the prompt has {len(prompt)} characters, more than obs_space_chars="
                             f"{self.config.obs_space_chars}; raise that setting")
        self._transcript = [prompt]
        info = {"question": self._task["question"],
                "golden_answers": [str(g) for g in self._task["golden_answers"]],
                "task_id": str(self._task.get("id", ""))}
        return prompt, info

    def step(self, action: str):
        return run_sync(self.astep(action))

    async def astep(self, action: str):
        """``step`` as a coroutine: tool calls of concurrent episodes overlap."""
        if self._task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            raise gym.error.ResetNeeded("the episode is over (terminated or truncated); call "
                                        "reset()")
        if not isinstance(action, str):
            raise TypeError(f"an action is the text of one turn (str), got {type(action).__name__}")
        self._turn += 1
        last_turn = self._turn >= self.config.max_turns
        turn = self.parser.parse(action)
        info: dict[str, Any] = {"turn": self._turn, "answer_correct": None, "answer": None,
                                "tool": None, "tool_calls": 0, "tool_latency_s": 0.0,
                                "tool_error": False, "malformed": turn.kind == "error",
                                "error": turn.error}
        obs, terminated, truncated, answer_score = "", False, False, None
        self.last_step_timing = {"reward_s": 0.0}
        if turn.kind == "answer":
            counts = {"infra_errors": 0}
            # a failed grader is no verdict: wait
            answer_score, self.last_step_timing["reward_s"] = await call_until_up(
                lambda: grade_off_loop(self.score, turn.answer, self._task), "answer grading",
                counts)
            info.update(counts if counts["infra_errors"] else {})
            info.update(answer=turn.answer, answer_correct=bool(answer_score.correct))
            info.update({f"metric/{k}": float(v) for k, v in answer_score.metrics.items()})
            terminated = True
        elif last_turn:
            truncated = True
            info["answer_correct"] = False
            if turn.kind == "tool":
                info.update(tool=",".join(c.name for c in turn.calls), error="out of turns")
        elif turn.kind == "error":
            obs = self._error_observation(action, turn.error)
        else:
            obs = await self._run_tools(action, turn, info)
        rewards = step_rewards(answer=answer_score, malformed=turn.kind == "error",
                               format_penalty=self.config.format_penalty)
        info.update(rewards)
        self._done = terminated or truncated
        self._transcript += [action, obs]
        return obs, float(sum(rewards.values())), terminated, truncated, info

    async def aclose(self) -> None:
        """Close what the tools hold open (e.g. a remote retriever's HTTP client), in the loop
        they ran on: ``rollout``'s ``EventLoop.close(envs)`` calls it at the end of a run.
        Idempotent; the env stays usable (a tool re-opens its client on next use)."""
        for tool in self.tools.values():
            aclose = getattr(tool, "aclose", None)
            if aclose is not None:
                await aclose()

    def render(self):
        if self.render_mode == "ansi":
            return "".join(self._transcript)
        return None

    # ------------------------------------------------------------------ dynamics
    def _error_observation(self, action: str, error: str) -> str:
        usage = self.parser.usage()
        if self.config.parser == "search_r1":  # Search-R1's text, exactly: no reason given
            return f"\nMy previous action is invalid. {usage} Let me try again.\n"
        if self.config.turn_format == "tags":
            return f"\nMy previous action is invalid: {error}. {usage} Let me try again.\n"
        msg = f"Your last turn was invalid: {error}. {usage}"
        return self.chat.close_turn(action) + self.chat.continuation(
            [{"role": "user", "content": msg}], tools=self.tool_schemas())

    async def _call_tool(self, name: str, arguments: dict,
                         counts: dict) -> tuple[str, float, str | None]:
        tool = self.tools[name]
        t0 = time.perf_counter()
        try:
            # an infra error (a dead server) waits: it is no answer
            out = await call_until_up(lambda: call_once(tool, arguments), f"tool {name!r}",
                                      counts)
            out, err = ("" if out is None else str(out)), None
        except OutageError:
            raise  # the run stops: never an observation
        except TimeoutError:
            out = err = f"Error: {name} timed out after {tool.timeout_s:g} s"
        except Exception as e:  # noqa: BLE001 - any tool failure becomes an observation
            out = err = f"Error: {name} failed: {type(e).__name__}: {str(e)[:300]}"
        latency = time.perf_counter() - t0
        out = out.strip()
        if self.config.max_obs_tokens is not None:
            out = cut_to_tokens(out, self.tokenizer, self.config.max_obs_tokens)
        elif len(out) > self.config.max_obs_chars:
            out = out[: self.config.max_obs_chars] + " …[truncated]"
        return out, latency, err

    async def _run_tools(self, action: str, turn: Turn, info: dict) -> str:
        counts = {"infra_errors": 0}
        results = await asyncio.gather(*(self._call_tool(c.name, c.arguments, counts)
                                         for c in turn.calls))
        errors = [e for _, _, e in results if e]
        info.update(tool=",".join(c.name for c in turn.calls), tool_calls=len(turn.calls), **counts,
                    tool_latency_s=max(lat for _, lat, _ in results), tool_error=bool(errors),
                    error="; ".join(errors) if errors else None)
        if self.config.turn_format == "tags":
            return "".join(f"\n\n<information>{out}</information>\n\n" for out, _, _ in results)
        msgs = [{"role": "tool", "content": out} for out, _, _ in results]
        return (self.chat.close_turn(action)
                + self.chat.continuation(msgs, tools=self.tool_schemas()))
