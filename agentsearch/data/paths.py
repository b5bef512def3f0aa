"""Where the shipped assets live (``agentsearch/data/assets/``): the world tokenizer, the
ChatML tool-call template, and the shipped base models (``tiny-base``, ``tiny-chain-base``,
``tiny-math-base``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ASSETS", "TOKENIZER_DIR", "TOKENIZER_DIRS", "tokenizer_dir", "CHAT_TEMPLATE",
           "BASE_DIR", "BASE_DIRS"]

ASSETS = Path(__file__).resolve().parent / "assets"
TOKENIZER_DIR = ASSETS / "tokenizer"
"""The byte-level BPE trained on the synthetic world (``models.train_world_tokenizer``)."""
TOKENIZER_DIRS = {"world": TOKENIZER_DIR, "worlds": ASSETS / "tokenizer-worlds"}
"""The shipped tokenizers by name. ``world`` (the default) was trained on the training world's
own text, so its names are shorter in tokens than any other world's; ``worlds`` was trained on
16 worlds used nowhere else and splits every world's names alike (``scripts/train_tokenizer.py
--worlds``). A model name picks one with ``+``: ``tiny`` is ``tiny+world``; ``tiny+worlds``."""


def tokenizer_dir(model: str) -> Path:
    """The shipped tokenizer folder of a built-from-config model name (``tiny`` -> ``world``'s,
    ``tiny+worlds`` -> ``worlds``')."""
    name = model.partition("+")[2] or "world"
    if name not in TOKENIZER_DIRS:
        raise ValueError(f"unknown tokenizer {name!r} in model name {model!r}; choose from "
                         f"{sorted(TOKENIZER_DIRS)}")
    return TOKENIZER_DIRS[name]
CHAT_TEMPLATE = ASSETS / "chatml_tools.jinja"
"""The ChatML template that renders ``tools=`` (given to tokenizers that lack one)."""
BASE_DIR = ASSETS / "tiny-base"
"""The shipped base model (``scripts/build_base.py`` writes it; ``models.load_base`` reads it)."""
BASE_DIRS = {"tiny-base": BASE_DIR, "tiny-chain-base": ASSETS / "tiny-chain-base",
             "tiny-chain-base-worlds": ASSETS / "tiny-chain-base-worlds",
             "tiny-math-base": ASSETS / "tiny-math-base"}
"""Every shipped base by name: ``tiny-base`` (the demo world), ``tiny-chain-base`` (the hard
world of k-hop chain questions), ``tiny-chain-base-worlds`` (the same, trained across worlds so
that it copies names on worlds it never saw) and ``tiny-math-base`` (math word problems with a
calculator)."""
