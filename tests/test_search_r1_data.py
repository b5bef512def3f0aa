"""Search-R1 / verl data end to end: its parquet layout (as ``scripts/data_process/nq_search.py``
writes it) trains and evaluates with the tiny preset, per ``data_source``; its prompt is used
as given or replaced, never doubled; filters and evals that would silently do the wrong thing
on external data are one-line errors."""

from __future__ import annotations

import json
import logging

import pytest

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.envs import SearchEnv
from agentsearch.envs.search import SEARCH_R1_PROMPT
from agentsearch.trainer.train_config import TrainConfig

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SMALL = ["model=tiny-s", "steps=2", "prompts_per_step=2", "group_size=2", "max_turns=3",
         "max_seq_len=768", "generation.max_new_tokens=16", "eval.limit=4", "eval.every=0",
         "replay.k_rep=1", "replay.capacity=8", "replay.scan_chunk=2", "sft.steps=0",
         "sft.pretrain_steps=0", "threads=1", "tensorboard=false", "checkpoint_every=2",
         "micro_batch_size=4"]


def _rows(world_path, n_single: int, n_bridge: int, split: str) -> list[dict]:
    """World questions in Search-R1's layout: NQ (single-hop) first, then HotpotQA (bridge)."""
    from agentsearch.data import load_questions

    world = load_questions(world_path / "train.jsonl")
    picked = ([("nq", r) for r in world if r["type"] == "single"][:n_single]
              + [("hotpotqa", r) for r in world if r["type"] == "bridge"][:n_bridge])
    out = []
    for idx, (source, r) in enumerate(picked):
        q = r["question"].strip()
        out.append({"id": f"{split}_{idx}", "question": q, "golden_answers": r["golden_answers"],
                    "data_source": source,
                    "prompt": [{"role": "user", "content": SEARCH_R1_PROMPT.format(question=q)}],
                    "ability": "fact-reasoning",
                    "reward_model": {"style": "rule",
                                     "ground_truth": {"target": r["golden_answers"]}},
                    "extra_info": {"split": split, "index": idx}})
    return out


def _parquet(path, rows, with_question: bool):
    if not with_question:  # a verl file without the FlashRAG columns
        rows = [{k: v for k, v in r.items() if k not in ("id", "question", "golden_answers")}
                for r in rows]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("with_question", [True, False])
def test_the_prompt_is_the_files_or_ours_never_doubled(tmp_path, world_path, with_question):
    rows = _rows(world_path, 2, 1, "train")
    path = _parquet(tmp_path / "train.parquet", rows, with_question)
    q = rows[0]["question"]
    own = SearchEnv(questions=str(path), prompt_source="parquet", chat_template="none")
    assert own.reset(options={"task": own.tasks[0]})[0] == rows[0]["prompt"][0]["content"]
    ours = SearchEnv(questions=str(path), chat_template="none",
                     system_prompt="Search, then answer. ")
    assert ours.reset(options={"task": ours.tasks[0]})[0] == f"Search, then answer. Question: {q}\n"
    assert (ours.tasks[0]["question"] == q
            and ours.tasks[0]["golden_answers"] == rows[0]["golden_answers"])
    with pytest.raises(ConfigError, match="have no 'prompt'.*prompt_source=builtin"):
        _ = SearchEnv(prompt_source="parquet").tasks  # the synthetic world has no prompts


def test_a_type_filter_on_external_data(tmp_path, world_path, caplog):
    path = _parquet(tmp_path / "train.parquet", _rows(world_path, 2, 1, "train"), True)
    with caplog.at_level(logging.WARNING):
        env = SearchEnv(questions=str(path), question_types=("single", "bridge"))
        assert len(env.tasks) == 3  # no 'type' column: the world's filter does not apply
    assert "question_types=['bridge', 'single'] is not applied" in caplog.text
    from agentsearch.data import write_jsonl

    write_jsonl([{"question": "q", "golden_answers": ["a"], "type": "multi-hop"}],
                tmp_path / "typed.jsonl")
    with pytest.raises(ConfigError) as e:
        _ = SearchEnv(questions=str(tmp_path / "typed.jsonl"), question_types=("single",)).tasks
    msg = str(e.value)
    assert "\n" not in msg and "['multi-hop']" in msg and "env_kwargs.question_types=null" in msg


def test_eval_samples_per_source_hand_worked():
    from agentsearch.trainer.eval import sample_per_source

    tasks = ([{"id": f"n{i}", "data_source": "nq"} for i in range(10)]
             + [{"id": f"h{i}", "data_source": "hotpotqa"} for i in range(6)]
             + [{"id": f"b{i}", "data_source": "bamboogle"} for i in range(2)])

    def counts(got):
        return {s: sum(t["data_source"] == s for t in got) for s in ("nq", "hotpotqa", "bamboogle")}

    # equal: 12 over 3 sources = 4 each; bamboogle has 2, so nq and hotpotqa share 10
    equal = sample_per_source(tasks, 12)
    assert counts(equal) == {"nq": 5, "hotpotqa": 5, "bamboogle": 2}
    assert equal == sorted(equal, key=tasks.index) and equal == sample_per_source(tasks, 12)
    # proportional: 10 x (10, 6, 2) / 18 = 5.56, 3.33, 1.11 -> 5, 3, 1 and the largest
    # remainder (nq)
    assert counts(sample_per_source(tasks, 10, "proportional")) == {"nq": 6, "hotpotqa": 3,
                                                                    "bamboogle": 1}
    assert counts(sample_per_source(tasks, 4, "first")) == {"nq": 4, "hotpotqa": 0, "bamboogle": 0}
    assert sample_per_source(tasks, 0) == tasks and sample_per_source(tasks, 99) == tasks
    world = [{"id": i, "type": "single"} for i in range(5)]  # no data_source: the first N
    assert sample_per_source(world, 3) == world[:3]
    with pytest.raises(ConfigError, match="eval.per_source"):
        sample_per_source(tasks, 3, "random")


def test_build_envs_refuses_silent_fallbacks(tmp_path, world_path):
    from agentsearch.trainer.setup import build_envs

    path = _parquet(tmp_path / "train.parquet", _rows(world_path, 2, 1, "train"), True)
    cfg = apply_overrides(TrainConfig, "tiny", [f"env_kwargs.questions={path}"])
    assert len(build_envs(cfg, 1)[0].tasks) == 3
    with pytest.raises(ConfigError, match="eval.questions is not set"):
        build_envs(cfg, 1, split="dev")  # an eval would run on the training file
    assert len(build_envs(cfg, 1, split="dev", questions=str(path))[0].tasks) == 3
    two = apply_overrides(TrainConfig, "tiny", ["env_kwargs.max_turns=6"])
    with pytest.raises(ConfigError, match=r"env_kwargs.max_turns=6 and max_turns=4 disagree"):
        build_envs(two, 1)
    same = apply_overrides(TrainConfig, "tiny", ["env_kwargs.max_turns=4"])
    assert build_envs(same, 1)[0].config.max_turns == 4
    # envs that need the policy's tokenizer get it from the trainer
    policy = apply_overrides(TrainConfig, "tiny",
                             ["model=tiny-s", "env_kwargs.chat_template=policy",
                              "env_kwargs.max_obs_tokens=40"])
    (env,) = build_envs(policy, 1)
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny-s")
    assert env.tokenizer is not None and env.tokenizer.get_vocab() == tok.get_vocab()
    prompt, _ = env.reset(seed=0)
    assert prompt == tok.apply_chat_template(env.instructions(env.task), add_generation_prompt=True,
                                             tokenize=False)


@pytest.mark.parametrize("with_question,source", [(True, "builtin"), (False, "parquet")])
def test_search_r1_parquet_trains_and_evaluates_per_source(tmp_path, world_path, with_question,
                                                           source):
    from agentsearch.trainer.loop import train

    train_file = _parquet(tmp_path / "train.parquet", _rows(world_path, 4, 4, "train"),
                          with_question)
    test_file = _parquet(tmp_path / "test.parquet", _rows(world_path, 4, 2, "test"), with_question)
    cfg = apply_overrides(TrainConfig, "tiny", SMALL + [
        f"env_kwargs.questions={train_file}", f"eval.questions={test_file}",
        f"env_kwargs.prompt_source={source}"])
    train(cfg, tmp_path / "run", quiet=True)
    recs = [json.loads(line)
            for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2]
    for r in (recs[0], recs[-1]):  # 4 of the merged file, 2 per source (its first 4 are all NQ)
        assert r["eval/questions"] == 4 and r["eval/nq/size"] == 2 and r["eval/hotpotqa/size"] == 2
        assert {"eval/nq/mean_at_n", "eval/hotpotqa/mean_at_n", "eval/macro_mean_at_n"} <= set(r)
    assert recs[-1]["tokens/generated"] > 0


def test_cli_on_search_r1_parquet(tmp_path, world_path, capsys):
    from agentsearch.cli import main

    train_file = _parquet(tmp_path / "train.parquet", _rows(world_path, 2, 2, "train"), True)
    test_file = _parquet(tmp_path / "test.parquet", _rows(world_path, 4, 2, "test"), False)
    # training questions without eval questions: one line saying what to set
    assert main(["train", "--preset", "tiny", "--out", str(tmp_path / "run"), *SMALL,
                 f"env_kwargs.questions={train_file}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "eval.questions=TEST_FILE" in err
    # the tiny preset's type filter does not stop an eval on a parquet; sampled per source
    assert main(["eval", "--model", "tiny-s", "--split", str(test_file), "--limit", "4",
                 "threads=1", "max_turns=2", "generation.max_new_tokens=8"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{"):])
    assert res["eval/questions"] == 4 and res["eval/nq/size"] == res["eval/hotpotqa/size"] == 2
    # a model that is not on disk: one line, no traceback
    assert main(["eval", "--model", "no-such-org/no-such-model", "--split", str(test_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not load from local files" in err and "model=PATH" in err
