"""Key-chain worlds: multi-hop search whose difficulty is set exactly, free of retrieval quality.

Every document is one link of a chain: its title is a random key, its text names the next key;
the last link holds the payload instead. A question gives a chain's first key; the answer is
its payload. Keys are random letter-digit tokens that occur in no other document's title, so
a search for the key read in one document finds the next one first (bm25s: the key is a rare
token), and what decides success is whether the policy reads the key and searches it again,
hop after hop. ``K`` links set the base pass rate: a policy that executes a hop with
probability ``q`` succeeds with about ``q ** K`` (a dose-response in ``K``).

``write_keychain_world(out, seed=0, hops=(1, 2, 3, 4, 5, 6), ...)`` writes ``corpus.jsonl``
(``{"id", "contents"}``, contents ``'"key"\\ntext'`` like every corpus here) and
``train/dev/test.jsonl`` (rows ``question``, ``golden_answers``, ``hops``, ``gold_doc_ids``,
``type="keychain{K}"``), each split with its own chains (none shared), the same number per
``K``; ``world.json``. Same seed, same bytes. ``keychain_dir(seed)`` builds and caches it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

__all__ = ["write_keychain_world", "keychain_dir", "KEYCHAIN_HOPS"]

KEYCHAIN_HOPS = (1, 2, 3, 4, 5, 6)
_COLOURS = ("amber", "azure", "crimson", "ivory", "jade", "ochre", "scarlet", "teal", "umber",
            "violet", "cobalt", "saffron", "russet", "silver", "olive", "coral")
_THINGS = ("fox", "lantern", "harbour", "falcon", "anchor", "meadow", "compass", "thistle",
           "beacon", "willow", "quarry", "otter", "spindle", "glacier", "heron", "marble")
_LETTERS = "bcdfghjklmnpqrstvwxz"
_VOWELS = "aeiou"


def _key(rng: random.Random, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(_LETTERS) + rng.choice(_VOWELS) for _ in range(3))
        key = f"{word}{rng.randrange(10, 100)}"
        if key not in used:
            used.add(key)
            return key


def _link(key: str, nxt: str | None, payload: str, rng: random.Random) -> str:
    """One link. Its key stands twice (title and text), the next key once, so a search for a
    key ranks the link it names above the link that points to it."""
    if nxt is None:
        text = rng.choice([f'Key {key} is the last of its chain. The payload is "{payload}".',
                           f'The chain ends at key {key}: the payload is "{payload}".'])
    else:
        text = rng.choice([f'Key {key}: the next key is "{nxt}".',
                           f'From key {key}, follow the chain to "{nxt}".',
                           f'Key {key} points to "{nxt}".'])
    return f'"{key}"\n{text}'


def write_keychain_world(out: str | Path, *, seed: int = 0, hops: tuple[int, ...] = KEYCHAIN_HOPS,
                         train_per_hop: int = 400, eval_per_hop: int = 100) -> dict[str, Path]:
    """A key-chain world into ``out`` (module notes); returns the paths written."""
    if min(hops) < 1:
        raise ValueError(f"a chain has at least one link, got hops={hops}")
    rng = random.Random(seed * 7919 + 3)
    used: set[str] = set()
    docs: list[str] = []  # link texts, by position of creation
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for split, per_hop in (("test", eval_per_hop), ("dev", eval_per_hop), ("train", train_per_hop)):
        for k in hops:
            for _ in range(per_hop):
                keys = [_key(rng, used) for _ in range(k)]
                payload = f"{rng.choice(_COLOURS)} {rng.choice(_THINGS)}"
                ids = list(range(len(docs), len(docs) + k))  # positions now, ids once shuffled
                for i, key in enumerate(keys):
                    docs.append(_link(key, keys[i + 1] if i + 1 < k else None, payload, rng))
                question = rng.choice([
                    f'Start at key "{keys[0]}" and follow its chain. What is the payload?',
                    f'Follow the chain that starts at key "{keys[0]}": what payload does it '
                    'end in?'])
                splits[split].append({"question": question, "golden_answers": [payload], "hops": k,
                                      "gold_doc_ids": ids, "type": f"keychain{k}"})
        rng.shuffle(splits[split])
    order = list(range(len(docs)))
    rng.shuffle(order)  # links of one chain neither sit together nor have neighbouring ids
    doc_id = {pos: f"link-{rank:06d}" for rank, pos in enumerate(order)}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"corpus": out / "corpus.jsonl"}
    with open(paths["corpus"], "w", encoding="utf-8") as f:
        for pos in order:
            f.write(json.dumps({"id": doc_id[pos], "contents": docs[pos]}) + "\n")
    for rows in splits.values():
        for row in rows:
            row["gold_doc_ids"] = [doc_id[pos] for pos in row["gold_doc_ids"]]
    for split, rows in splits.items():
        paths[split] = out / f"{split}.jsonl"
        with open(paths[split], "w", encoding="utf-8") as f:
            for i, row in enumerate(rows):
                f.write(json.dumps({"id": f"{split}-{i:05d}", **row}) + "\n")
    paths["world"] = out / "world.json"
    meta = {"kind": "keychain", "seed": seed, "hops": list(hops), "train_per_hop": train_per_hop,
            "eval_per_hop": eval_per_hop, "documents": len(docs),
            "counts": {k: len(v) for k, v in splits.items()}}
    paths["world"].write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return paths


def keychain_dir(seed: int = 0, hops: tuple[int, ...] = KEYCHAIN_HOPS) -> Path:
    """The folder of ``write_keychain_world(seed=seed, hops=hops)``, built on first use and
    cached under ``$AGENTSEARCH_CACHE/worlds`` (written aside and renamed)."""
    from agentsearch.core.cache import cache_dir, publish_dir

    out = cache_dir() / "worlds" / f"keychain-seed{seed}-k{'-'.join(map(str, hops))}"
    if (out / "world.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    write_keychain_world(tmp, seed=seed, hops=hops)
    return publish_dir(tmp, out)
