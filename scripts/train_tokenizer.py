"""Rebuild a shipped tiny-model tokenizer: the world tokenizer (agentsearch/data/assets/tokenizer,
trained on the training world) or, with --worlds, the one trained on 16 worlds used nowhere
else (agentsearch/data/assets/tokenizer-worlds; model names ``tiny+worlds``). ~10 s each.

The shipped world tokenizer dates from the first commit (2026-11-29); the world's text has
changed since, so rebuilding it today gives different merges (checked 2026-12-03) and makes
every shipped base stale: rebuild it only together with the bases."""
import argparse

from agentsearch.data.paths import TOKENIZER_DIRS
from agentsearch.models import train_world_tokenizer
from agentsearch.models.text import WORLDS_TOKENIZER_SEEDS

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--worlds", action="store_true", help="the tokenizer that privileges no world")
    a = ap.parse_args()
    if a.worlds:
        print(train_world_tokenizer(TOKENIZER_DIRS["worlds"], seeds=WORLDS_TOKENIZER_SEEDS))
    else:
        print(train_world_tokenizer())
