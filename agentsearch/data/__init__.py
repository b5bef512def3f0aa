"""Data: the synthetic search world and loaders for real question sets and corpora."""

from __future__ import annotations

import os
from pathlib import Path

from agentsearch.data.loaders import (
    load_corpus,
    load_questions,
    read_jsonl,
    wiki_corpus,
    write_jsonl,
)
from agentsearch.data.world import WorldConfig, generate_world, write_world

__all__ = ["WorldConfig", "generate_world", "write_world", "world_dir", "load_questions",
           "load_corpus", "read_jsonl", "write_jsonl", "wiki_corpus"]


def world_dir(seed: int = 0, entities: int | None = None, questions: str = "default") -> Path:
    """The folder of a generated world, built on first use and cached.

    ``questions``: ``"default"`` (single, bridge and comparison questions) or ``"chains"``
    (k-hop chain questions, ``agentsearch.data.chains``; the same corpus). Lives under
    ``$AGENTSEARCH_CACHE/worlds`` (default ``~/.cache/agentsearch``); written to a temporary
    folder and renamed, so concurrent first uses never see half a world.
    """
    from agentsearch.core.cache import cache_dir, publish_dir

    if questions not in ("default", "chains"):
        raise ValueError(f"world questions must be 'default' or 'chains', got {questions!r}")
    cfg = WorldConfig(seed=seed) if entities is None else WorldConfig(seed=seed, entities=entities)
    counts = f"q{cfg.n_train}-{cfg.n_dev}-{cfg.n_test}"
    name = (f"seed{cfg.seed}-n{cfg.entities}-{counts}"
            + ("" if questions == "default" else f"-{questions}"))
    out = cache_dir() / "worlds" / name
    if (out / "world.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    if questions == "chains":
        from agentsearch.data.chains import write_chain_world

        write_chain_world(cfg, tmp)
    else:
        write_world(generate_world(cfg), tmp)
    return publish_dir(tmp, out)
