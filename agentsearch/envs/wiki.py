"""Search QA over real Wikipedia text: ``agentsearch/WikiSearch-v0``."""

from __future__ import annotations

from dataclasses import dataclass

from agentsearch.core.config import ConfigError
from agentsearch.envs.search import SearchEnv, SearchEnvConfig, _filter_types, _load_rows

__all__ = ["WikiSearchEnv", "WikiSearchEnvConfig", "CONTEXTS"]

CONTEXTS = ("search", "none", "gold", "retrieved")

CONTEXT_PROMPT = (
    "Answer the question{using}. Reply with the answer only, inside <answer> and </answer>, "
    "without detailed illustrations. For example, <answer> Beijing </answer>.")


@dataclass
class WikiSearchEnvConfig(SearchEnvConfig):
    """Settings of ``WikiSearchEnv`` (plus those of ``SearchEnvConfig``; ``split`` is one of
    ``train``, ``dev``, ``test``, ``people``)."""

    index_kind: str = "bm25s"
    """The index built over the 10,033 summaries on first use when ``index`` is not given:
    ``bm25s``, ``bm25`` (Pyserini, Java 21) or a dense FAISS kind (``dense-flat``, ...)."""
    context: str = "search"
    """``"search"``: the agent searches (the task). The baselines answer in one turn with no
    tool: ``"none"`` (no retrieval, closed book), ``"gold"`` (the gold summary in the prompt,
    an oracle) or ``"retrieved"`` (the index's top ``topk`` passages for the question)."""

    def __post_init__(self):
        super().__post_init__()
        if self.context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {self.context!r}")
        if self.context != "search":  # a baseline: one answer turn, nothing to call
            self.tools, self.max_turns = (), 1


class WikiSearchEnv(SearchEnv):
    """Answer questions over the ovos wheel's English Wikipedia lead summaries by searching
    them (``agentsearch.data.wiki_questions`` builds the questions: ``name``, ``year`` and
    ``nationality`` types read off the summaries, split by page, and a ``people`` split of
    FanOutQA's human-written sub-questions).

    Everything else is ``SearchEnv``'s (the same actions, observations, rewards and episode
    end), with the index over the summaries built on first use (``index_kind``). ``context``
    turns it into one of the baselines: closed book, gold passage, or retrieved passages in
    the prompt, answered in one turn.

    ## Version history
    - v0: initial version (questions of ``wiki_questions.VERSION`` 1).
    """

    Config = WikiSearchEnvConfig

    def tool_kwargs(self) -> dict[str, dict]:
        kwargs = super().tool_kwargs()
        kwargs["search"]["index"] = self._index()
        return kwargs

    def _index(self) -> str:
        if self.config.index is not None:
            return str(self.config.index)
        from agentsearch.data.wiki_questions import wiki_dir
        from agentsearch.retrievers.index import folder_index

        return str(folder_index(wiki_dir(), self.config.index_kind))

    def load_tasks(self) -> list[dict]:
        from agentsearch.data.wiki_questions import SPLITS, wiki_dir

        if self.config.questions is not None:
            return super().load_tasks()
        if self.config.split not in SPLITS:
            raise ConfigError(f"WikiSearch-v0 has no split {self.config.split!r}; use one of "
                              f"{', '.join(SPLITS)}")
        rows = _load_rows(wiki_dir() / f"{self.config.split}.jsonl")
        return _filter_types(rows, self.config.question_types, "the Wikipedia questions")

    def instructions(self, task: dict) -> list[dict]:
        if self.config.context == "search":
            return super().instructions(task)
        passages = self._passages(task)
        using = " using the passages below" if passages else " from what you know"
        text = CONTEXT_PROMPT.format(using=using)
        if passages:
            text += "\n\n" + passages
        return [{"role": "system", "content": self.config.system_prompt or text},
                {"role": "user", "content": f"Question: {str(task['question']).strip()}"}]

    def _passages(self, task: dict) -> str:
        from agentsearch.envs.tools.retrieval import default_retriever
        from agentsearch.retrievers.base import Hit, format_hits

        if self.config.context == "none":
            return ""
        if self.config.context == "retrieved":
            hits = default_retriever(self._index()).search([str(task["question"])],
                                                           self.config.topk)[0]
            return format_hits(hits)
        corpus = _gold_passages()
        return format_hits([Hit(d, corpus[d], 1.0) for d in task.get("gold_doc_ids") or []])


_GOLD: dict[str, str] = {}


def _gold_passages() -> dict[str, str]:
    """The summaries by id (the task folder's corpus), read once per process."""
    if not _GOLD:
        from agentsearch.data import read_jsonl
        from agentsearch.data.wiki_questions import wiki_dir

        _GOLD.update((r["id"], r["contents"]) for r in read_jsonl(wiki_dir() / "corpus.jsonl"))
    return _GOLD
