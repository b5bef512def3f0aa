import json

import pytest

from agentsearch.data import load_questions, wiki_corpus, write_jsonl
from agentsearch.data.loaders import load_corpus, math_problems, split_contents


def test_search_r1_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    # the layout of Search-R1's nq_search/train.parquet (verl format)
    rows = [{"id": "train_0", "question": "who got the first nobel prize in physics?",
             "golden_answers": ["Wilhelm Conrad Röntgen"], "data_source": "nq",
             "prompt": [{"role": "user",
                         "content": "Answer the given question... Question: who got the first "
                                    "nobel prize in physics?\n"}],
             "ability": "fact-reasoning",
             "reward_model": {"ground_truth": {"target": ["Wilhelm Conrad Röntgen"]},
                              "style": "rule"},
             "extra_info": {"index": 0, "split": "train"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    got = load_questions(tmp_path / "train.parquet")
    assert got[0]["question"] == rows[0]["question"]
    assert got[0]["golden_answers"] == ["Wilhelm Conrad Röntgen"]
    # verl rows without a plain question column: the prompt and the ground truth are used
    rows2 = [{"prompt": rows[0]["prompt"], "reward_model": rows[0]["reward_model"]}]
    pq.write_table(pa.Table.from_pylist(rows2), tmp_path / "verl.parquet")
    got2 = load_questions(tmp_path / "verl.parquet")
    assert got2[0]["golden_answers"] == ["Wilhelm Conrad Röntgen"]
    # the question is the prompt's text after "Question:" (the instruction is not kept twice),
    # and the prompt itself is kept for SearchEnv(prompt_source="parquet")
    assert got2[0]["question"] == "who got the first nobel prize in physics?"
    assert got[0]["prompt"] == got2[0]["prompt"] == rows[0]["prompt"]


def test_jsonl_questions_and_bad_rows(tmp_path):
    write_jsonl([{"question": "q1", "golden_answers": "a"}], tmp_path / "q.jsonl")
    assert load_questions(tmp_path / "q.jsonl")[0]["golden_answers"] == ["a"]
    write_jsonl([{"text": "no question"}], tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="needs 'question'"):
        load_questions(tmp_path / "bad.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"question": \n')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_questions(tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError):
        load_questions(tmp_path / "missing.jsonl")


def test_wiki_corpus_converter(tmp_path):
    rows = wiki_corpus(tmp_path / "wiki.jsonl")
    assert len(rows) > 9000
    assert load_corpus(tmp_path / "wiki.jsonl")[0] == rows[0]
    title, text = split_contents(rows[0]["contents"])
    assert title and len(text) > 50
    assert len({r["id"] for r in rows}) == len(rows)
    assert json.loads((tmp_path / "wiki.jsonl").read_text().splitlines()[1])[
        "contents"].startswith('"')


def test_champ_math_problems():
    rows = math_problems()
    assert len(rows) == 270
    assert all(r["question"] and r["golden_answers"][0] for r in rows)
