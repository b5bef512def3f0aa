"""k-hop chain questions (issue 23, part 1): each hop needs an exact-name search, the answer
stands only in the last article, dev/test hold the same number of questions per k, and the
same seed gives the same bytes (and the default world's corpus)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentsearch.data import WorldConfig, generate_world, read_jsonl, write_world
from agentsearch.data.chains import write_chain_world

CFG = WorldConfig(seed=7, entities=300, n_train=400)


@pytest.fixture(scope="module")
def chain_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains")
    write_chain_world(CFG, out, n_per_hop_eval=25)
    return out


def _articles(folder) -> dict[str, str]:
    return {r["id"]: r["contents"] for r in read_jsonl(folder / "corpus.jsonl")}


def test_same_seed_same_bytes_and_the_default_worlds_corpus(chain_world, tmp_path):
    again = tmp_path / "again"
    write_chain_world(CFG, again, n_per_hop_eval=25)
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "world.json"):
        assert (again / name).read_bytes() == (chain_world / name).read_bytes(), name
    plain = tmp_path / "plain"
    write_world(generate_world(CFG), plain)
    assert (plain / "corpus.jsonl").read_bytes() == (chain_world / "corpus.jsonl").read_bytes()


def test_every_hop_needs_the_article_before_it(chain_world):
    arts = _articles(chain_world)
    names = {eid: text.split("\n", 1)[0].strip('"') for eid, text in arts.items()}
    rows = [r for split in ("train", "dev", "test")
            for r in read_jsonl(chain_world / f"{split}.jsonl")]
    for r in rows:
        gold, k = r["gold_doc_ids"], r["hops"]
        assert len(gold) == k and r["type"] == f"chain{k}" and len(set(gold)) == k
        assert names[gold[0]] in r["question"]
        # only the first entity is named
        assert not any(names[g] in r["question"] for g in gold[1:]), r
        for prev, nxt in zip(gold, gold[1:]):
            assert names[nxt] in arts[prev], r  # the next name is read in the previous article
        answer = r["golden_answers"][0]
        assert answer in arts[gold[-1]] and not any(answer in arts[g] for g in gold[:-1]), r
    assert len({r["question"] for r in rows}) == len(rows)  # no question twice, across splits


def test_dev_and_test_are_balanced_per_hop_and_train_follows_the_mix(chain_world):
    for split in ("dev", "test"):
        assert Counter(r["hops"] for r in read_jsonl(chain_world / f"{split}.jsonl")) == {
            1: 25, 2: 25, 3: 25, 4: 25}
    train = Counter(r["hops"] for r in read_jsonl(chain_world / "train.jsonl"))
    assert sum(train.values()) == 400
    for k, share in {1: 0.10, 2: 0.20, 3: 0.35, 4: 0.35}.items():
        assert abs(train[k] / 400 - share) < 0.06, train
    meta = json.loads((chain_world / "world.json").read_text())
    assert (meta["questions"] == "chains"
            and meta["counts"] == {"train": 400, "dev": 100, "test": 100})


def test_an_exact_name_search_finds_each_hop_despite_the_twins(chain_world):
    """What makes the chain solvable: searching the name read in one article returns the next
    article first (bm25s over the corpus; about half the entities have a confusable twin)."""
    from agentsearch.retrievers import build_index, load_retriever

    idx = build_index(chain_world / "corpus.jsonl", "bm25s", chain_world / "idx", progress=False)
    retriever = load_retriever(idx)
    arts = _articles(chain_world)
    names = {eid: text.split("\n", 1)[0].strip('"') for eid, text in arts.items()}
    rows = [r for r in read_jsonl(chain_world / "dev.jsonl") if r["hops"] == 4]
    hops = [g for r in rows for g in r["gold_doc_ids"]]
    hits = retriever.search([names[g] for g in hops], k=1)
    found = sum(h[0].doc_id == g for h, g in zip(hits, hops))
    assert found / len(hops) > 0.95, f"{found}/{len(hops)}"


def test_the_search_env_plays_chain_questions():
    from agentsearch.envs import make_env

    env = make_env("agentsearch/Search-v0", world_questions="chains", split="dev")
    assert {t["type"] for t in env.tasks} == {"chain1", "chain2", "chain3", "chain4"}
    env.reset(seed=0)
    obs, *_ , info = env.step(f"<search>{env.task['question']}</search>")
    assert "Doc 1(Title:" in obs and not info["tool_error"]
