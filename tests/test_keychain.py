"""The key-chain task (issue 23, part 2): K links set the difficulty exactly, a search for a key
returns its link, a policy that follows the chain always finds the payload, same seed same bytes."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from agentsearch.data import read_jsonl
from agentsearch.data.keychain_world import write_keychain_world


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("keychain")
    write_keychain_world(out, seed=3, hops=(1, 2, 4), train_per_hop=30, eval_per_hop=10)
    return out


def test_same_seed_same_bytes_and_disjoint_splits(small, tmp_path):
    write_keychain_world(tmp_path, seed=3, hops=(1, 2, 4), train_per_hop=30, eval_per_hop=10)
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "world.json"):
        assert (tmp_path / name).read_bytes() == (small / name).read_bytes(), name
    docs = {split: {d for r in read_jsonl(small / f"{split}.jsonl") for d in r["gold_doc_ids"]}
            for split in ("train", "dev", "test")}
    assert not (docs["train"] & docs["dev"] or docs["train"] & docs["test"]
                or docs["dev"] & docs["test"])
    for split, per in (("train", 30), ("dev", 10), ("test", 10)):
        rows = list(read_jsonl(small / f"{split}.jsonl"))
        assert Counter(r["hops"] for r in rows) == {1: per, 2: per, 4: per}
        assert all(r["type"] == f"keychain{r['hops']}"
                   and len(r["gold_doc_ids"]) == r["hops"] for r in rows)


def test_each_link_names_the_next_and_the_last_holds_the_payload(small):
    arts = {r["id"]: r["contents"] for r in read_jsonl(small / "corpus.jsonl")}
    for r in read_jsonl(small / "dev.jsonl"):
        links = [arts[d] for d in r["gold_doc_ids"]]
        keys = [text.split("\n", 1)[0].strip('"') for text in links]
        assert f'"{keys[0]}"' in r["question"]
        for text, nxt in zip(links, keys[1:]):
            assert f'"{nxt}"' in text.split("\n", 1)[1]
        assert (r["golden_answers"][0] in links[-1]
                and not any(r["golden_answers"][0] in t for t in links[:-1]))


PAYLOAD = re.compile(r'payload is "([^"]+)"')
KEY = re.compile(r'"([a-z]+[0-9]+)"')


def _follow(obs: str) -> str:
    """The scripted policy: search the quoted key the last passage names, or answer its payload."""
    passage = obs.rsplit("Doc 1", 1)[-1] if "Doc 1" in obs else obs
    if "payload is" in passage:
        return f"<answer>{PAYLOAD.findall(passage)[-1]}</answer>"
    return f"<search>{KEY.findall(passage)[-1]}</search>"


def test_following_the_keys_solves_every_chain_and_k_sets_the_turns():
    from agentsearch.envs import make_env

    env = make_env("agentsearch/KeyChain-v0", split="dev",
                   question_types=["keychain1", "keychain3", "keychain6"])
    turns = Counter()
    for task in env.tasks[:60]:
        obs, _ = env.reset(options={"task": task})
        for _ in range(env.config.max_turns):
            obs, reward, term, trunc, info = env.step(_follow(obs))
            if term or trunc:
                break
        assert term and info["answer_correct"], (task, info)
        turns[(task["hops"], info["turn"])] += 1
    assert {k: t for k, t in turns} == {1: 2, 3: 4, 6: 7}  # K searches and the answer


def test_the_keychain_env_passes_its_contract_checks():
    from agentsearch.envs import make_env
    from agentsearch.rollout.checker import check_text_env

    env = make_env("agentsearch/KeyChain-v0", split="dev")
    assert {t["type"] for t in env.tasks} == {f"keychain{k}" for k in range(1, 7)}
    assert "correct-answer" in check_text_env(env)
