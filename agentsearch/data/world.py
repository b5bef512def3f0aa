"""A seeded synthetic world: fictional people, organisations and places, their
encyclopedia articles, and questions that can only be answered by searching them.

No model has seen this world, so a correct answer is evidence of search, not memory.
The same seed gives the same bytes.

Entities carry typed attributes and relations (person -> employer, birthplace;
organisation -> founder, headquarters; place -> country, river). Each gets one article
(``corpus.jsonl`` rows ``{"id", "contents"}``, contents ``"Title"\\ntext`` as in
Search-R1 and Pyserini). About half also get a *confusable twin*: a distractor entity
with a near-identical name and different facts, so retrieval has to be precise.

Questions (``train/dev/test.jsonl``):
- ``single`` (1 hop): an attribute of one entity;
- ``bridge`` (2 hops): an attribute of an entity named only in another entity's article;
  the answer never occurs in the first article;
- ``comparison`` (2 hops): which of two entities is older / larger.
Every row has ``id, question, golden_answers, hops, gold_doc_ids, type, relation``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Entity", "World", "WorldConfig", "generate_world", "write_world"]

_ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kl", "l", "m", "n", "p", "r",
           "s", "st", "t", "th", "tr", "v", "w", "z", "sh", "c", "j"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ia", "ou", "ei", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "th", "m", "k", "rd", "nd", "x", "st"]
_PLACE_SUFFIX = ["haven", "moor", "ford", "wick", "dale", "mere", "holm", "burg", "stead", "vik",
                 "port", "field"]
_ORG_SUFFIX = ["Industries", "Holdings", "Institute", "Guild", "Works", "Company", "Foundation",
               "Collective", "Laboratories", "Trading House"]
_OCCUPATIONS = ["cartographer", "glassblower", "archivist", "botanist", "clockmaker",
                "shipwright", "astronomer", "linguist", "sculptor", "physician", "architect",
                "chemist", "composer", "engineer", "geologist", "jurist", "mathematician",
                "novelist", "painter", "pharmacist", "surveyor", "weaver", "beekeeper",
                "typographer"]
_INDUSTRIES = ["shipbuilding", "textiles", "printing", "mining", "banking", "brewing",
               "pharmaceuticals", "optics", "railways", "publishing", "ceramics", "insurance",
               "telegraphy", "clockmaking", "fisheries", "forestry"]
_HOBBIES = ["collecting antique maps", "breeding pigeons", "restoring old organs",
            "writing chess problems", "keeping bees", "building model ships",
            "translating folk songs", "studying lichens", "carving wooden masks"]


@dataclass
class WorldConfig:
    """Size and shape of a generated world."""

    seed: int = 0
    entities: int = 1400
    """Primary entities (people ~70%, organisations ~18%, places ~12%); twins come on top."""
    twin_rate: float = 0.5
    """Share of primary entities that get a confusable distractor twin."""
    countries: int = 10
    rivers: int = 30
    n_train: int = 3000
    n_dev: int = 600
    n_test: int = 600
    """600 dev / test questions: ~480 of them single or bridge, so a demo's dev EM is
    measured on >= 400 questions (+-2.3 points of binomial noise at 0.5)."""


@dataclass
class Entity:
    id: str
    kind: str  # "person" | "org" | "place"
    name: str
    attrs: dict = field(default_factory=dict)
    twin_of: str | None = None

    @property
    def aliases(self) -> list[str]:
        """Names accepted as this entity in a golden answer."""
        if self.kind == "org":
            base = self.attrs["base_name"]
            return [self.name, base] if base != self.name else [self.name]
        return [self.name]


@dataclass
class World:
    config: WorldConfig
    entities: dict[str, Entity]
    articles: dict[str, str]  # entity id -> article contents ("Title"\ntext)
    questions: list[dict]

    def doc(self, entity_id: str) -> str:
        return self.articles[entity_id]


class _Names:
    """Unique pronounceable names from a seeded RNG."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        r = self.rng
        s = "".join(r.choice(_ONSETS) + r.choice(_VOWELS) for _ in range(syllables))
        return (s + r.choice(_CODAS)).capitalize()

    def unique(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name space exhausted; lower the entity count")

    def person(self) -> str:
        return self.unique(lambda: f"{self.word(self.rng.randint(1, 2))} {self.word(2)}")

    def org(self) -> tuple[str, str]:
        base = self.unique(lambda: self.word(self.rng.randint(2, 3)))
        return f"{base} {self.rng.choice(_ORG_SUFFIX)}", base

    def place(self) -> str:
        return self.unique(lambda: self.word(self.rng.randint(1, 2))
                           + self.rng.choice(_PLACE_SUFFIX))

    def twin(self, name: str) -> str:
        """A confusable variant: one letter changed, or a letter added, in one word."""
        def make():
            words = name.split(" ")
            i = self.rng.randrange(len(words))
            w = words[i]
            j = self.rng.randrange(1, len(w))
            if self.rng.random() < 0.5:
                w = w[:j] + self.rng.choice("aeiouy") + w[j + 1:]
            else:
                w = w[:j] + self.rng.choice("aeiounrs") + w[j:]
            words[i] = w
            return " ".join(words)
        return self.unique(make)


def _make_entities(cfg: WorldConfig, rng: random.Random) -> dict[str, Entity]:
    names = _Names(rng)
    countries = [names.unique(lambda: names.word(2) + rng.choice(["ia", "land", "mark", "ora"]))
                 for _ in range(cfg.countries)]
    rivers = [names.unique(lambda: names.word(2)) for _ in range(cfg.rivers)]
    n_people = round(cfg.entities * 0.70)
    n_orgs = round(cfg.entities * 0.18)
    n_places = max(4, cfg.entities - n_people - n_orgs)
    ents: dict[str, Entity] = {}

    def place_attrs() -> dict:
        return {"country": rng.choice(countries), "river": rng.choice(rivers),
                "founded_year": rng.randint(900, 1750),
                "population": rng.randrange(2_000, 900_000, 10)}

    places = [Entity(f"place-{i:04d}", "place", names.place(), place_attrs())
              for i in range(n_places)]
    people = [Entity(f"person-{i:04d}", "person", names.person(),
                     {"birth_year": rng.randint(1820, 1990),
                      "birthplace": rng.choice(places).id,
                      "occupation": rng.choice(_OCCUPATIONS),
                      "hobby": rng.choice(_HOBBIES)}) for i in range(n_people)]
    orgs = []
    for i in range(n_orgs):
        name, base = names.org()
        founder = rng.choice(people)
        orgs.append(Entity(f"org-{i:04d}", "org", name, {
            "base_name": base, "founder": founder.id,
            "founded_year": min(2024, founder.attrs["birth_year"] + rng.randint(22, 60)),
            "headquarters": rng.choice(places).id, "industry": rng.choice(_INDUSTRIES),
            "employees": rng.randrange(40, 20_000, 10)}))
    for p in people:
        p.attrs["employer"] = rng.choice(orgs).id
    for e in places + people + orgs:
        ents[e.id] = e
    # confusable twins: same kind, near-identical name, independently drawn facts
    for e in list(ents.values()):
        if rng.random() >= cfg.twin_rate:
            continue
        if e.kind == "person":
            attrs = {"birth_year": rng.randint(1820, 1990), "birthplace": rng.choice(places).id,
                     "occupation": rng.choice(_OCCUPATIONS), "hobby": rng.choice(_HOBBIES),
                     "employer": rng.choice(orgs).id}
            ents[e.id + "-t"] = Entity(e.id + "-t", "person", names.twin(e.name), attrs, e.id)
        elif e.kind == "org":
            base = names.twin(e.attrs["base_name"])
            founder = rng.choice(people)
            attrs = {"base_name": base, "founder": founder.id,
                     "founded_year": min(2024, founder.attrs["birth_year"] + rng.randint(22, 60)),
                     "headquarters": rng.choice(places).id, "industry": rng.choice(_INDUSTRIES),
                     "employees": rng.randrange(40, 20_000, 10)}
            name = e.name.replace(e.attrs["base_name"], base)
            names.used.add(name.lower())
            ents[e.id + "-t"] = Entity(e.id + "-t", "org", name, attrs, e.id)
        else:
            ents[e.id + "-t"] = Entity(e.id + "-t", "place", names.twin(e.name), place_attrs(),
                                       e.id)
    return ents


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _article(e: Entity, ents: dict[str, Entity], rng: random.Random) -> str:
    a = e.attrs
    n = lambda key: ents[a[key]].name  # noqa: E731
    if e.kind == "person":
        last = e.name.split(" ")[-1]
        first = rng.choice([
            f"{e.name} (born {a['birth_year']}) is {_a(a['occupation'])} from {n('birthplace')}.",
            f"{e.name} is {_a(a['occupation'])} who was born in {n('birthplace')} in "
            f"{a['birth_year']}.",
        ])
        work = rng.choice([f"{last} works for {n('employer')}.",
                           f"{last} is employed by {n('employer')}.",
                           f"Since early in life, {last} has worked at {n('employer')}."])
        extra = f"Outside work, {last} is known for {a['hobby']}."
        body = " ".join([first, work, extra])
    elif e.kind == "org":
        first = rng.choice([
            f"{e.name} is {_a(a['industry'])} firm founded in {a['founded_year']} by "
            f"{n('founder')}.",
            f"{e.name} was founded by {n('founder')} in {a['founded_year']} and works in "
            f"{a['industry']}.",
        ])
        hq = rng.choice([f"It is headquartered in {n('headquarters')}.",
                         f"Its headquarters are in {n('headquarters')}."])
        body = " ".join([first, hq, f"It employs about {a['employees']} people."])
    else:
        first = rng.choice([
            f"{e.name} is a town in {a['country']} on the {a['river']} river.",
            f"{e.name} is a town on the {a['river']} river in {a['country']}.",
        ])
        body = " ".join([first, f"It was founded in {a['founded_year']}.",
                         f"It has a population of {a['population']}."])
    return f'"{e.name}"\n{body}'


# (relation, path of attribute keys, question templates); the path's last key is the answer
_SINGLE = [
    ("person", ("birth_year",), ["In what year was {x} born?", "When was {x} born?"]),
    ("person", ("birthplace",), ["Where was {x} born?", "In which town was {x} born?"]),
    ("person", ("occupation",),
     ["What is the occupation of {x}?", "What does {x} do for a living?"]),
    ("person", ("employer",), ["Which organisation does {x} work for?", "Who employs {x}?"]),
    ("org", ("founded_year",), ["In what year was {x} founded?", "When was {x} founded?"]),
    ("org", ("headquarters",), ["Where is {x} headquartered?", "In which town is {x} based?"]),
    ("org", ("founder",), ["Who founded {x}?", "Who is the founder of {x}?"]),
    ("org", ("industry",), ["What industry is {x} in?"]),
    ("place", ("country",), ["In which country is {x}?"]),
    ("place", ("river",), ["Which river flows through {x}?"]),
    ("place", ("founded_year",), ["In what year was {x} founded?"]),
]
_BRIDGE = [
    ("person", ("employer", "founded_year"), ["In what year was the employer of {x} founded?"]),
    ("person", ("employer", "headquarters"), ["Where is the employer of {x} headquartered?"]),
    ("person", ("employer", "founder"), ["Who founded the organisation that {x} works for?"]),
    ("person", ("birthplace", "country"), ["In which country was {x} born?"]),
    ("person", ("birthplace", "river"), ["Which river flows through the birthplace of {x}?"]),
    ("org", ("founder", "birth_year"), ["In what year was the founder of {x} born?"]),
    ("org", ("founder", "birthplace"), ["Where was the founder of {x} born?"]),
    ("org", ("headquarters", "country"), ["In which country is {x} headquartered?"]),
]
_COMPARE = [
    ("person", "birth_year", "Who was born earlier, {x} or {y}?", min),
    ("org", "founded_year", "Which was founded earlier, {x} or {y}?", min),
    ("place", "population", "Which town has the larger population, {x} or {y}?", max),
]


def _answer_value(ents: dict[str, Entity], key: str, value) -> tuple[str, list[str]]:
    """The answer text and its aliases for an attribute value (an entity id or a literal)."""
    if isinstance(value, str) and value in ents:
        e = ents[value]
        return e.name, e.aliases
    return str(value), [str(value)]


def _questions(ents: dict[str, Entity], articles: dict[str, str], rng: random.Random,
               n_total: int) -> list[dict]:
    primary = {k: [e for e in ents.values() if e.kind == k and e.twin_of is None]
               for k in ("person", "org", "place")}
    out: list[dict] = []
    seen: set[str] = set()
    kinds = ["single"] * 4 + ["bridge"] * 4 + ["comparison"] * 2
    tries = 0
    while len(out) < n_total and tries < n_total * 20:
        tries += 1
        qtype = rng.choice(kinds)
        if qtype == "comparison":
            kind, key, tmpl, pick = rng.choice(_COMPARE)
            x, y = rng.sample(primary[kind], 2)
            if x.attrs[key] == y.attrs[key]:
                continue
            win = x if pick(x.attrs[key], y.attrs[key]) == x.attrs[key] else y
            q = {"question": tmpl.format(x=x.name, y=y.name), "golden_answers": win.aliases,
                 "hops": 2, "gold_doc_ids": [x.id, y.id], "type": qtype,
                 "relation": f"{kind}.{key}.compare"}
        else:
            kind, path, tmpls = rng.choice(_SINGLE if qtype == "single" else _BRIDGE)
            x = rng.choice(primary[kind])
            hop = ents[x.attrs[path[0]]] if len(path) == 2 else x
            value = hop.attrs[path[-1]]
            answer, aliases = _answer_value(ents, path[-1], value)
            gold = [x.id] if len(path) == 1 else [x.id, hop.id]
            if len(path) == 2 and (hop.id == x.id or answer in articles[x.id]):
                continue  # the first article alone must not give the answer away
            if answer not in "".join(articles[g] for g in gold):
                continue
            q = {"question": rng.choice(tmpls).format(x=x.name), "golden_answers": aliases,
                 "hops": len(path), "gold_doc_ids": gold, "type": qtype,
                 "relation": f"{kind}." + ".".join(path)}
        if q["question"] in seen:
            continue
        seen.add(q["question"])
        out.append(q)
    return out


def generate_world(config: WorldConfig | None = None, **overrides) -> World:
    """Build a world in memory. ``generate_world(seed=3, entities=500)`` works too."""
    cfg = config or WorldConfig(**overrides)
    if config is not None and overrides:
        raise TypeError("pass either a WorldConfig or keyword overrides, not both")
    if cfg.entities < 20:
        raise ValueError(f"entities={cfg.entities}: a world needs at least 20 entities")
    rng = random.Random(cfg.seed)
    ents = _make_entities(cfg, rng)
    articles = {eid: _article(e, ents, rng) for eid, e in ents.items()}
    questions = _questions(ents, articles, rng, cfg.n_train + cfg.n_dev + cfg.n_test)
    return World(cfg, ents, articles, questions)


def write_world(world: World, out: str | Path) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``train/dev/test.jsonl`` and ``world.json`` into ``out``.

    Article order is shuffled (seeded) so document ids do not leak entity kinds by position.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = world.config
    rng = random.Random(cfg.seed + 1)
    ids = sorted(world.articles)
    rng.shuffle(ids)
    paths = {"corpus": out / "corpus.jsonl"}
    with open(paths["corpus"], "w", encoding="utf-8") as f:
        for eid in ids:
            f.write(json.dumps({"id": eid, "contents": world.articles[eid]},
                               ensure_ascii=False) + "\n")
    qs = world.questions
    n_test, n_dev = min(cfg.n_test, len(qs) // 5), min(cfg.n_dev, len(qs) // 5)
    splits = {"test": qs[:n_test], "dev": qs[n_test:n_test + n_dev], "train": qs[n_test + n_dev:]}
    for split, rows in splits.items():
        paths[split] = out / f"{split}.jsonl"
        with open(paths[split], "w", encoding="utf-8") as f:
            for i, row in enumerate(rows):
                f.write(json.dumps({"id": f"{split}-{i:05d}", **row}, ensure_ascii=False) + "\n")
    paths["world"] = out / "world.json"
    meta = {"config": cfg.__dict__, "counts": {k: len(v) for k, v in splits.items()},
            "articles": len(world.articles)}
    paths["world"].write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return paths
