"""Follow a chain of keys by search: ``agentsearch/KeyChain-v0``.

The corpus is a key-chain world (``agentsearch.data.keychain_world``): each document is titled by a
random key and names the next key; the last link of a chain holds its payload. The question
gives a chain's first key; the answer is the payload. A search for a key returns its link
first (``topk=1`` by default: the link and nothing else), so the task measures one thing, the
policy's executing hop after hop, and the chain length ``K`` (``type="keychain{K}"``, 1-6) sets
the base pass rate. Everything else is ``agentsearch/Search-v0``: turn formats, parsers,
rewards, the search tool (a bm25s index of the key-chain corpus, built on first use and
cached), ``question_types`` to pick chain lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsearch.data.keychain_world import KEYCHAIN_HOPS
from agentsearch.envs.search import SearchEnv, SearchEnvConfig, _filter_types, _load_rows

__all__ = ["KeyChainEnv", "KeyChainEnvConfig", "KEYCHAIN_PROMPT"]

KEYCHAIN_PROMPT = ("Follow the chain of keys. Search for a key with <search> key </search>: the "
                   "result names the next key. Search each key in turn until a result gives the "
                   "payload, then answer it inside <answer> and </answer>. ")


@dataclass
class KeyChainEnvConfig(SearchEnvConfig):
    """Settings of ``KeyChainEnv`` (plus those of ``SearchEnvConfig``)."""

    keychain_seed: int = 0
    """The key-chain world (``agentsearch.data.keychain_world.keychain_dir``)."""
    hops: tuple[int, ...] = KEYCHAIN_HOPS
    """Chain lengths the world holds (each split has the same number of chains per length)."""
    topk: int = 1
    """One passage per search: the link the key names."""
    max_turns: int = 8
    """Agent turns: ``K`` searches and the answer, for chains up to 7 links."""

    def __post_init__(self):
        super().__post_init__()
        self.hops = tuple(int(k) for k in self.hops)


class KeyChainEnv(SearchEnv):
    """A ``SearchEnv`` over a key-chain world (module notes)."""

    Config = KeyChainEnvConfig

    def _world(self):
        from agentsearch.data.keychain_world import keychain_dir

        return keychain_dir(seed=self.config.keychain_seed, hops=self.config.hops)

    def tool_kwargs(self) -> dict[str, dict]:
        kw = super().tool_kwargs()
        if self.config.index is None and self._retriever is None:
            from agentsearch.retrievers.index import folder_index

            kw["search"] = {**kw["search"], "index": str(folder_index(self._world(), "bm25s"))}
        return kw

    def load_tasks(self) -> list[dict]:
        if self.config.questions is not None:
            return super().load_tasks()
        split = self.config.split
        path = self._world() / f"{split}.jsonl"
        if not path.exists():
            raise ValueError(f"the key-chain world has no split {split!r}; use train, dev or test")
        return _filter_types(_load_rows(path), self.config.question_types, "the key-chain world")

    def instructions(self, task: dict) -> list[dict]:
        if self.config.turn_format == "tags" and self.config.system_prompt is None \
                and self.config.prompt_source == "builtin":
            return [{"role": "user",
                     "content": f"{KEYCHAIN_PROMPT}Question: {str(task['question']).strip()}\n"}]
        return super().instructions(task)
