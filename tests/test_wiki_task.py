"""The real-text task: questions over the ovos Wikipedia summaries and ``WikiSearch-v0``."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentsearch.data import read_jsonl
from agentsearch.data.wiki_questions import (
    build_wiki_questions,
    gives_away,
    page_split,
    people_questions,
    wiki_dir,
)
from agentsearch.envs.registration import make_env
from agentsearch.envs.rewards import normalize_answer


@pytest.fixture(scope="module")
def task_dir():
    return wiki_dir()


@pytest.fixture(scope="module")
def splits(task_dir):
    return {s: list(read_jsonl(task_dir / f"{s}.jsonl")) for s in ("train", "dev", "test",
                                                                     "people")}


@pytest.fixture(scope="module")
def summaries(task_dir):
    return {r["id"]: r["contents"] for r in read_jsonl(task_dir / "corpus.jsonl")}


def test_the_construction_is_sized_and_split_by_page(splits):
    assert len(splits["train"]) >= 2000 and len(splits["dev"]) >= 300
    pages = {s: {r["title"] for r in rows} for s, rows in splits.items() if s != "people"}
    assert not pages["train"] & pages["dev"] and not pages["train"] & pages["test"]
    assert not pages["dev"] & pages["test"]
    assert all(page_split(r["title"]) == s for s in ("train", "dev", "test") for r in splits[s])
    assert set(Counter(r["type"] for r in splits["dev"])) == {"name", "year", "nationality"}
    ids = [r["id"] for rows in splits.values() for r in rows]
    assert len(ids) == len(set(ids))


def test_every_answer_is_in_its_gold_summary_and_not_in_its_question(splits, summaries):
    for rows in splits.values():
        for r in rows:
            (doc,) = r["gold_doc_ids"]
            assert r["golden_answers"][0] in summaries[doc].partition("\n")[2], r
            assert not gives_away(r["golden_answers"][0], r["question"]), r
            assert f" {normalize_answer(r['golden_answers'][0])} " not in \
                f" {normalize_answer(r['question'])} "


def test_the_construction_is_reproducible_and_reads_known_pages(splits, summaries):
    again = build_wiki_questions([{"id": k, "contents": v} for k, v in summaries.items()])
    assert again["dev"] == splits["dev"] and again["train"] == splits["train"]
    by_id = {r["id"]: r for rows in splits.values() for r in rows}
    tsinghua = next(k for k, v in summaries.items() if v.startswith('"Tsinghua University"'))
    q = by_id[f"{tsinghua}-name"]
    assert q["question"] == ("What is the name of the public research university in Haidian, "
                             "Beijing, China?")
    assert q["golden_answers"] == ["Tsinghua University"]
    warhol = next(k for k, v in summaries.items() if v.startswith('"Andy Warhol"'))
    assert by_id[f"{warhol}-nationality"]["golden_answers"] == ["American"]
    years = [r for r in splits["train"] if r["type"] == "year"]
    assert all("____" in r["question"] and r["golden_answers"][0].isdigit() for r in years)


def test_gives_away_by_hand():
    assert gives_away("Tsinghua University", "Is Tsinghua University in Beijing?")
    assert gives_away("Ford Motor Company", "Who founded Ford Motor?")  # 2 of 3 words
    assert not gives_away("Lake Titicaca", "Where is Titicaca?")  # 1 of 2: not more than half
    assert not gives_away("Lake Titicaca", "the large lake in the Andes")
    assert not gives_away("1945", "The Arab League was formed in Cairo on 22 March ____")


def test_the_people_slice_is_fanoutqas_sub_questions(splits):
    rows = splits["people"]
    assert rows == people_questions() and len(rows) >= 50
    assert all(r["id"].startswith("fanoutqa-") and r["type"] == "people" for r in rows)


def test_the_env_searches_the_summaries(splits):
    env = make_env("agentsearch/WikiSearch-v0", split="dev", turn_format="json")
    task = splits["dev"][0]
    obs, info = env.reset(options={"task": task})
    assert task["question"] in obs and '"name": "search"' in obs
    call = json.dumps({"name": "search", "arguments": {"query": task["question"]}})
    obs, reward, term, trunc, info = env.step(f"<tool_call>{call}</tool_call>")
    assert f'(Title: "{task["title"]}")' in obs and not term
    obs, reward, term, trunc, info = env.step(f"<answer> {task['golden_answers'][0]} </answer>")
    assert term and reward == 1.0 and info["answer_correct"]


@pytest.mark.parametrize("context", ["none", "gold", "retrieved"])
def test_the_baselines_answer_in_one_turn_without_a_tool(splits, context):
    env = make_env("agentsearch/WikiSearch-v0", split="dev", turn_format="json", context=context,
                   topk=3)
    task = next(r for r in splits["dev"] if r["type"] == "nationality")
    obs, _ = env.reset(options={"task": task})
    assert env.tools == {} and env.config.max_turns == 1 and "<tools>" not in obs
    gold_text = f'Doc 1(Title: "{task["title"]}")'
    assert (gold_text in obs) == (context in ("gold", "retrieved"))  # BM25 ranks it first here
    assert obs.count("Doc ") == {"none": 0, "gold": 1, "retrieved": 3}[context]
    *_, term, trunc, info = env.step("<answer> nobody </answer>")
    assert term and info["answer_correct"] is False


def test_an_unknown_split_is_a_clear_error():
    with pytest.raises(Exception, match="no split 'validation'.*train, dev, test, people"):
        make_env("agentsearch/WikiSearch-v0", split="validation").reset(seed=0)


def test_the_oracle_searches_what_the_question_says_never_the_answer(splits):
    from agentsearch.data.wiki_questions import oracle_query
    from agentsearch.envs.wiki import WikiSearchEnv
    from agentsearch.models import load_tokenizer
    from agentsearch.warmstart.search_oracle import oracle_episodes

    for r in splits["train"] + splits["people"]:
        assert not gives_away(r["golden_answers"][0], oracle_query(r))
    tok = load_tokenizer("tiny")
    envs = [WikiSearchEnv(turn_format="json", topk=2) for _ in range(16)]
    eps = oracle_episodes(envs, tok, count=48, turn_format="json", world="wiki",
                          max_seq_len=4096)  # the world tokenizer splits English finely
    assert len(eps) >= 40  # kept: the answer stood in what the search returned
    assert all(e.info["tool_calls"] == 1 and e.answer_correct for e in eps)
    calls = [tok.decode([t for t, m in zip(e.token_ids, e.action_mask) if m]) for e in eps]
    assert all('"name": "search"' in c for c in calls)
