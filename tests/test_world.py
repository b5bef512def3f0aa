import hashlib
import json

import pytest

from agentsearch.data import WorldConfig, generate_world, read_jsonl, write_world
from agentsearch.data.loaders import split_contents


def _digest(folder):
    h = hashlib.sha256()
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "world.json"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes(tmp_path):
    a = write_world(generate_world(seed=3, entities=200), tmp_path / "a")
    b = write_world(generate_world(seed=3, entities=200), tmp_path / "b")
    c = write_world(generate_world(seed=4, entities=200), tmp_path / "c")
    assert _digest(a["corpus"].parent) == _digest(b["corpus"].parent)
    assert _digest(a["corpus"].parent) != _digest(c["corpus"].parent)


def test_default_world_size_and_schema(world_path):
    corpus = list(read_jsonl(world_path / "corpus.jsonl"))
    assert 1500 <= len(corpus) <= 5000, "default world should be a few thousand articles"
    assert len({r["id"] for r in corpus}) == len(corpus)
    for r in corpus[:50]:
        assert set(r) == {"id", "contents"}
        title, text = split_contents(r["contents"])
        assert r["contents"].startswith(f'"{title}"\n') and text
    splits = {s: list(read_jsonl(world_path / f"{s}.jsonl")) for s in ("train", "dev", "test")}
    assert len(splits["dev"]) >= 200 and len(splits["test"]) >= 200 and len(splits["train"]) >= 1000
    questions = [q["question"] for rows in splits.values() for q in rows]
    assert len(set(questions)) == len(questions), "splits must not share questions"
    for q in splits["train"][:20]:
        assert {"id", "question", "golden_answers", "hops", "gold_doc_ids"} <= set(q)
    types = {q["type"] for q in splits["train"]}
    assert types == {"single", "bridge", "comparison"}


def test_every_question_answerable_from_its_gold_docs(world_path):
    docs = {r["id"]: r["contents"] for r in read_jsonl(world_path / "corpus.jsonl")}
    for split in ("train", "dev", "test"):
        for q in read_jsonl(world_path / f"{split}.jsonl"):
            gold = [docs[d] for d in q["gold_doc_ids"]]
            assert q["golden_answers"], q
            assert any(a in "\n".join(gold) for a in q["golden_answers"]), q
            assert q["hops"] == len(q["gold_doc_ids"])
            if q["hops"] == 2:
                assert len(set(q["gold_doc_ids"])) == 2, q
            if q["type"] == "bridge":
                # the first article names the bridge entity but not the answer
                assert not any(a in gold[0] for a in q["golden_answers"]), q
                bridge_title = split_contents(gold[1])[0]
                assert bridge_title in gold[0], q


def test_confusable_twins_exist(world_path):
    meta = json.loads((world_path / "world.json").read_text())
    w = generate_world(WorldConfig(**meta["config"]))
    twins = [e for e in w.entities.values() if e.twin_of]
    assert len(twins) > 0.3 * (len(w.entities) - len(twins))
    for t in twins[:50]:
        orig = w.entities[t.twin_of].name
        assert t.name != orig and abs(len(t.name) - len(orig)) <= 1


def test_too_small_world_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 20"):
        generate_world(seed=0, entities=5)
