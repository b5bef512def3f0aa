"""k-hop chain questions over the synthetic world: a world where sample efficiency decides.

A chain question names one entity and asks for an attribute ``k`` articles away: each hop's
entity is named only in the previous hop's article, so it takes ``k`` exact-name searches,
and the answer stands only in the last article. For ``k = 3``: "In which town is the
organisation that employs the founder of Biagam Company headquartered?" reads Biagam
Company's article (its founder), the founder's (the employer) and the employer's (the town).

Hops follow the world's entity-valued relations (person -> employer, birthplace;
organisation -> founder, headquarters); the last hop asks one attribute of the last entity
(a year, a town, a person, an industry, a country, ...). Confusable twins stay in the corpus,
so every search must be precise: a twin's article names other entities.

``chain_questions(world, rng, n, hop_weights)`` draws ``n`` distinct questions, ``k`` in the
proportions of ``hop_weights`` (``{1: 0.1, 2: 0.2, 3: 0.35, 4: 0.35}`` for a train mix weighted to
3-4 hops); rows are ``type="chain{k}"`` with ``hops``, ``gold_doc_ids`` (the ``k`` articles in
order) and ``relation`` (the path). ``write_chain_world`` writes the world's corpus (the same
bytes as ``write_world``'s) with chain splits: train by the mix, dev and test with the same
number of questions for every ``k`` (so per-``k`` scores are measured alike). Same seed, same
bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from agentsearch.data.world import World, WorldConfig, generate_world, write_world

__all__ = ["chain_questions", "write_chain_world", "TRAIN_HOPS", "HOP_RELATIONS"]

TRAIN_HOPS = {1: 0.10, 2: 0.20, 3: 0.35, 4: 0.35}
"""The train mix of the hard world: mostly 3-4 hops."""

# entity-valued relations: kind -> [(attribute, kind it leads to, noun phrase of {x})]
HOP_RELATIONS = {
    "person": [("employer", "org", "the organisation that employs {x}"),
               ("birthplace", "place", "the town where {x} was born")],
    "org": [("founder", "person", "the founder of {x}"),
            ("headquarters", "place", "the town where {x} is headquartered")],
    "place": [],
}
# the last hop: kind -> [(attribute, question about {x})]
_ASK = {
    "person": [("birth_year", "In what year was {x} born?"),
               ("occupation", "What is the occupation of {x}?"),
               ("birthplace", "Where was {x} born?"),
               ("employer", "Which organisation employs {x}?")],
    "org": [("founded_year", "In what year was {x} founded?"),
            ("headquarters", "Where is {x} headquartered?"),
            ("founder", "Who founded {x}?"), ("industry", "What industry is {x} in?")],
    "place": [("country", "In which country is {x}?"), ("river", "Which river flows through {x}?"),
              ("founded_year", "In what year was {x} founded?")],
}


def _chain(world: World, start, k: int, rng: random.Random) -> dict | None:
    """One ``k``-hop question from entity ``start``, or None when this walk does not make one."""
    ents, arts = world.entities, world.articles
    path, rels, phrase = [start], [], "{x}"
    for _ in range(k - 1):
        options = HOP_RELATIONS[path[-1].kind]
        if not options:
            return None
        attr, _, np = rng.choice(options)
        nxt = ents[path[-1].attrs[attr]]
        if any(nxt.id == e.id for e in path):
            return None  # a cycle: the chain would not need every hop
        path.append(nxt)
        rels.append(attr)
        phrase = np.replace("{x}", phrase)
    attr, question = rng.choice(_ASK[path[-1].kind])
    value = path[-1].attrs[attr]
    if isinstance(value, str) and value in ents:
        answer, aliases = ents[value].name, ents[value].aliases
    else:
        answer, aliases = str(value), [str(value)]
    if answer not in arts[path[-1].id] or any(answer in arts[e.id] for e in path[:-1]):
        return None  # the answer must stand in the last article, and only there
    if any(later.name in arts[e.id] for j, e in enumerate(path) for later in path[j + 2:]):
        return None  # a hop named two articles early would let a search skip one
    text = question.replace("{x}", phrase.replace("{x}", start.name))
    return {"question": text[0].upper() + text[1:], "golden_answers": aliases, "hops": k,
            "gold_doc_ids": [e.id for e in path], "type": f"chain{k}",
            "relation": f"{start.kind}." + ".".join([*rels, attr])}


def chain_questions(world: World, rng: random.Random, n: int, hop_weights: dict[int, float],
                    seen: set[str] | None = None) -> list[dict]:
    """``n`` distinct chain questions in the proportions of ``hop_weights`` (exactly: ``n_k``
    by largest remainder), shuffled (module notes)."""
    ks = sorted(hop_weights)
    if min(ks) < 1 or max(ks) > 6:
        raise ValueError(f"hop counts must be 1..6, got {ks}")
    total = sum(hop_weights.values())
    exact = {k: n * hop_weights[k] / total for k in ks}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(ks, key=lambda k: counts[k] - exact[k])[: n - sum(counts.values())]:
        counts[k] += 1
    starts = [e for e in world.entities.values()
              if e.twin_of is None and e.kind in ("person", "org")]
    seen = set() if seen is None else seen
    out: list[dict] = []
    for k in ks:
        made, tries = 0, 0
        while made < counts[k]:
            tries += 1
            if tries > 200 * counts[k] + 1000:
                raise RuntimeError(f"only {made} of {counts[k]} distinct {k}-hop questions after "
                                   f"{tries} tries: use a larger world (entities)")
            q = _chain(world, rng.choice(starts), k, rng)
            if q is None or q["question"] in seen:
                continue
            seen.add(q["question"])
            out.append(q)
            made += 1
    rng.shuffle(out)
    return out


def write_chain_world(config: WorldConfig, out: str | Path, *,
                      hop_weights: dict[int, float] | None = None,
                      n_per_hop_eval: int = 150) -> dict[str, Path]:
    """The world of ``config`` with chain questions (module notes): ``corpus.jsonl`` as
    ``write_world`` writes it, ``train.jsonl`` (``config.n_train`` questions by ``hop_weights``),
    ``dev.jsonl`` and ``test.jsonl`` (``n_per_hop_eval`` per hop count), ``world.json``."""
    hop_weights = dict(hop_weights or TRAIN_HOPS)
    world = generate_world(config)
    out = Path(out)
    # the corpus, same bytes
    paths = write_world(World(config, world.entities, world.articles, []), out)
    rng = random.Random(config.seed * 1_000_003 + 17)
    seen: set[str] = set()
    splits = {}
    for split in ("test", "dev"):
        splits[split] = chain_questions(world, rng, n_per_hop_eval * len(hop_weights),
                                        {k: 1.0 for k in hop_weights}, seen)
    splits["train"] = chain_questions(world, rng, config.n_train, hop_weights, seen)
    for split, rows in splits.items():
        with open(paths[split], "w", encoding="utf-8") as f:
            for i, row in enumerate(rows):
                f.write(json.dumps({"id": f"{split}-{i:05d}", **row}, ensure_ascii=False) + "\n")
    meta = {"config": config.__dict__, "questions": "chains", "hop_weights": hop_weights,
            "n_per_hop_eval": n_per_hop_eval, "counts": {k: len(v) for k, v in splits.items()},
            "articles": len(world.articles)}
    paths["world"].write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return paths
