"""Multi-turn search QA: ``agentsearch/Search-v0``."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agentsearch.core.config import ConfigError
from agentsearch.envs.rewards import AnswerScore, answer_reward, qa_score
from agentsearch.envs.text_env import TextEnv
from agentsearch.envs.text_env_config import TextEnvConfig

__all__ = ["SearchEnv", "SearchEnvConfig", "SEARCH_R1_PROMPT"]

# Search-R1's instruction (its ``nq_search.py`` "base" template), verbatim.
SEARCH_R1_PROMPT = (
    "Answer the given question. "
    "You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search "
    "engine by <search> query </search> and it will return the top searched results between "
    "<information> and </information>. You can search as many times as your want. If you find "
    "no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: {question}\n")

JSON_SYSTEM_PROMPT = (
    "You answer questions by searching an encyclopedia. Call the search tool to look up facts "
    "you do not know; you can call it several times. When you know the answer, reply with it "
    "inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>.")


@dataclass
class SearchEnvConfig(TextEnvConfig):
    """Settings of ``SearchEnv`` (plus those of ``TextEnvConfig``)."""

    tools: tuple = ("search",)
    world_seed: int = 0
    """The synthetic world whose questions and corpus are used when nothing else is given."""
    world_entities: int | None = None
    """Size of that world (None: the default 1,400 entities)."""
    world_questions: str = "default"
    """Which questions of that world: ``"default"`` (single, bridge, comparison) or ``"chains"``
    (k-hop chain questions, k = 1-4, ``type="chain{k}"``; the same corpus and index;
    ``agentsearch.data.chains``)."""
    questions: str | None = None
    """A question file (JSONL/JSON/Search-R1 parquet) instead of the world's ``split``."""
    index: str | None = None
    """An index folder (``agentsearch index build``) or a retrieval server URL
    (``http://127.0.0.1:8000``, ``agentsearch serve``) instead of the world's bm25s index."""
    topk: int = 3
    """Passages per search (Search-R1 uses 3)."""
    answer_metric: str = "em"
    """The answer reward ``reward/answer`` is, by registered name: exact match (``"em"``), token
    F1 (``"f1"``) or one added with ``agentsearch.envs.rewards.register_answer_reward``."""
    question_types: tuple[str, ...] | None = None
    """Keep only tasks whose ``type`` is one of these (the world's ``single``, ``bridge``,
    ``comparison``); None keeps all. The demo drops ``comparison``: naming one of two
    candidates without reading pays ~0.5, a shortcut RL would learn instead of searching.
    A question file whose rows have no ``type`` (Search-R1 parquet) is not filtered (a
    warning says so); one with types that match none is an error."""
    prompt_source: str = "builtin"
    """The first user turn: ``"builtin"`` (our instruction, or ``system_prompt``, plus the
    row's question) or ``"parquet"`` (the row's own verl ``prompt`` chat list, as Search-R1's
    verl dataset feeds it; ``system_prompt`` is then unused)."""

    def __post_init__(self):
        super().__post_init__()
        answer_reward(self.answer_metric)  # an unknown name fails here, listing the known ones
        if self.prompt_source not in ("builtin", "parquet"):
            raise ValueError("prompt_source must be 'builtin' or 'parquet', got "
                             f"{self.prompt_source!r}")


_TASKS: dict[str, list[dict]] = {}


def _load_rows(path: Path) -> list[dict]:
    key = str(path)
    if key not in _TASKS:
        from agentsearch.data import load_questions

        _TASKS[key] = load_questions(path)
    return _TASKS[key]


class SearchEnv(TextEnv):
    """Answer a question by searching a corpus, over several turns.

    The default works out of the box: questions of the embedded synthetic world
    (``split`` train/dev/test) and a bm25s index of its corpus, built on first use.

    ## Action space
    One turn of text (``UnicodeText``, up to ``max_action_chars``). Tag format (default,
    Search-R1): optional ``<think>…</think>``, then ``<search> query </search>`` or
    ``<answer> text </answer>``; the block closed first counts, text after it is ignored
    (generation stops at the first closing tag). ``parser="search_r1"`` reads the turn as
    Search-R1 does instead (``parsing.SearchR1Parser``). JSON format:
    ``<tool_call>{"name": "search", "arguments": {"query": "…"}}</tool_call>`` (up to
    ``max_calls_per_turn`` calls, run concurrently) or ``<answer>…</answer>``.

    ## Observation space
    Text (``UnicodeText``). At reset: the prompt (Search-R1's instruction in a user turn for
    tags; a system prompt with the tool schemas for JSON; with ``prompt_source="parquet"`` the
    row's own chat ``prompt``), rendered with the chat template and ending with the assistant
    generation prompt. After a search: tags
    ``\\n\\n<information>Doc 1(Title: …) …</information>\\n\\n``; JSON: the end of the
    assistant turn, the template's tool-response turn and the next generation prompt.
    After a malformed turn: an error message saying what to write. ``""`` at the end.

    ## Rewards
    ``reward/answer``: exact match of the SQuAD-normalised answer against any golden
    answer (or token F1 with ``answer_metric="f1"``, or any answer reward registered with
    ``register_answer_reward``) on the answering step.
    ``reward/format``: ``-format_penalty`` per malformed turn (0.1; 0 with
    ``parser="search_r1"``). ``answer_correct`` is exact match, whatever the format.

    ## Episode end
    Terminated by an answer; truncated when turn ``max_turns`` (default 4) is not an answer.

    ## Version history
    - v0: initial version; later options whose defaults keep v0's behaviour: ``parser``,
      ``prompt_source``, ``max_obs_tokens``, ``chat_template="policy"``.
    """

    Config = SearchEnvConfig

    def __init__(self, config: SearchEnvConfig | None = None, *, retriever=None, **kwargs):
        if isinstance(retriever, (str, os.PathLike)):  # a server URL or an index folder: = index
            index = kwargs.get("index", config.index if config is not None else None)
            if index is not None and str(index) != str(retriever):
                raise ValueError(f"retriever={str(retriever)!r} and index={str(index)!r} disagree: "
                                 "give the server URL or index folder once, as index=")
            kwargs["index"], retriever = str(retriever), None
        elif retriever is not None and not callable(getattr(retriever, "asearch", None)):
            raise TypeError("retriever= must be an agentsearch Retriever (with asearch), a server "
                            f"URL or an index folder; got {type(retriever).__name__}")
        self._retriever = retriever
        super().__init__(config, **kwargs)

    def tool_kwargs(self) -> dict[str, dict]:
        cfg = self.config
        search = {"topk": cfg.topk, "index": cfg.index, "world_seed": cfg.world_seed,
                  "world_entities": cfg.world_entities, "retriever": self._retriever}
        if cfg.parser == "search_r1":  # no hits: an empty <information></information>, as Search-R1
            search["no_results"] = ""
        return {"search": search, **cfg.tool_kwargs}

    def load_tasks(self) -> list[dict]:
        source = "the synthetic world"
        if self.config.questions is not None:
            source = str(self.config.questions)
            rows = _load_rows(Path(self.config.questions))
        else:
            from agentsearch.data import world_dir

            split = self.config.split
            path = world_dir(seed=self.config.world_seed, entities=self.config.world_entities,
                             questions=self.config.world_questions) / f"{split}.jsonl"
            if not path.exists():
                raise ValueError(f"the synthetic world has no split {split!r}; use train, dev or "
                                 "test")
            rows = _load_rows(path)
        if self.config.prompt_source == "parquet" and any(not r.get("prompt") for r in rows):
            raise ConfigError(f"env_kwargs.prompt_source=parquet: the questions of {source} have "
                              "no 'prompt' (a verl chat list); use prompt_source=builtin")
        return _filter_types(rows, self.config.question_types, source)

    def instructions(self, task: dict) -> list[dict]:
        if self.config.prompt_source == "parquet":
            if not task.get("prompt"):
                raise ValueError("prompt_source='parquet' needs tasks with a 'prompt' chat list "
                                 f"([{{'role': 'user', 'content': ...}}]); got keys {sorted(task)}")
            return [{"role": str(m.get("role") or "user"), "content": str(m["content"])}
                    for m in task["prompt"]]
        q = str(task["question"]).strip()
        if self.config.turn_format == "tags":
            prompt = self.config.system_prompt or SEARCH_R1_PROMPT.split("Question:")[0]
            extra = "".join(f"You can also use {n} ({t.description.rstrip('.')}) "
                            f"by <{n}> … </{n}>. "
                            for n, t in self.tools.items() if n != "search")
            return [{"role": "user", "content": f"{prompt}{extra}Question: {q}\n"}]
        return [{"role": "system", "content": self.config.system_prompt or JSON_SYSTEM_PROMPT},
                {"role": "user", "content": f"Question: {q}"}]

    def score(self, answer: str, task: dict) -> AnswerScore:
        return qa_score(answer, [str(g) for g in task["golden_answers"]], self.config.answer_metric)


_warned: set[tuple] = set()


def _filter_types(rows: list[dict], types, source: str) -> list[dict]:
    """``rows`` whose ``type`` is in ``types`` (``question_types``; None keeps all). Rows with no
    ``type`` at all (external data) are kept with a warning: the filter names the synthetic
    world's types. Typed rows of which none match are a one-line error saying how to clear it."""
    if types is None or not rows:
        return rows
    keep = set(types)
    if all(r.get("type") is None for r in rows):
        if (source, tuple(sorted(keep))) not in _warned:
            _warned.add((source, tuple(sorted(keep))))
            logging.getLogger(__name__).warning(
                "env_kwargs.question_types=%s is not applied to %s: its questions have no 'type' "
                "(set env_kwargs.question_types=null to silence this)", sorted(keep), source)
        return rows
    kept = [r for r in rows if r.get("type") in keep]
    if not kept:
        found = sorted({str(r.get("type")) for r in rows})
        raise ConfigError(f"env_kwargs.question_types={sorted(keep)} matches no question of "
                          f"{source} (its types are {found}); clear the filter with "
                          "env_kwargs.question_types=null or name some of those types")
    return kept
