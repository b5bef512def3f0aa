"""Math through the trainer (issue 25): the calculator/head population, its warm start, and
``diagnose`` with the tool call forced off and on."""

from __future__ import annotations

import pytest

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.envs import MathEnv
from agentsearch.envs.tasks.math_tasks import synthetic_math
from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.math_oracle import math_oracle, math_oracle_episodes

ENV = dict(turn_format="tags", tools=("calculator",), chat_template="none",
           system_prompt="Compute, then answer. ")


@pytest.fixture(scope="module")
def tok():
    from agentsearch.models import load_tokenizer

    return load_tokenizer("tiny")


def _envs(n: int, **kw) -> list[MathEnv]:
    return [MathEnv(**{**ENV, **kw}) for _ in range(n)]


def test_the_population_calls_the_calculator_or_answers_in_its_head_and_is_right(tok):
    eps = math_oracle_episodes(_envs(16), tok, task_seed=7, count=96, seed=1,
                               strategies={"calculator": 0.5, "head": 0.5})
    assert len(eps) == 96 and all(e.answer_correct for e in eps)  # every transcript kept
    calls = [int(e.info["tool_calls"]) for e in eps]
    assert set(calls) == {0, 1} and 30 <= sum(calls) <= 66  # about half call, once
    ep = next(e for e in eps if e.info["tool_calls"])
    text = tok.decode(ep.token_ids[ep.prompt_len:])
    # the answer is the result the calculator showed, digits right after the tags (same tokens)
    result = text.split("<information>")[1].split("</information>")[0]
    assert text.startswith("<calculator> ") and text.endswith(f"<answer>{result}</answer>")
    env_text = tok.decode([t for t, m in zip(ep.token_ids[ep.prompt_len:],
                                             ep.action_mask[ep.prompt_len:]) if not m])
    assert f"<information>{result}</information>" in env_text and "<calculator>" not in env_text


def test_the_oracle_needs_expressions_and_the_calculator(tok):
    with pytest.raises(ValueError, match="expression"):
        math_oracle([{"question": "What is 2 + 2?", "golden_answers": ["4"]}])
    with pytest.raises(ValueError, match="calculator"):
        math_oracle_episodes(_envs(2, tools=()), tok, count=2)
    with pytest.raises(ValueError, match="unknown math oracle strategies"):
        math_oracle(synthetic_math("dev", 5), strategies={"calculator": 0.5, "guess": 0.5})


def test_math_shares_are_a_valid_sft_population_and_a_bad_one_names_all_populations():
    cfg = apply_overrides(TrainConfig, "base-math", [])
    assert cfg.sft.strategies == {"calculator": 0.25, "head": 0.75}
    with pytest.raises(ConfigError, match="or math: unknown math oracle strategies"):
        apply_overrides(TrainConfig, "base-math", ["sft.strategies={calculator: 0.5, abacus: 0.5}"])


def test_math_warm_start_plays_other_seeds_then_the_training_split():
    from agentsearch.models import load_model
    from agentsearch.trainer.setup import build_envs
    from agentsearch.warmstart.stages import warm_start

    cfg = apply_overrides(TrainConfig, "base-math", [
        "sft.pretrain_steps=2", "sft.pretrain_worlds=2", "sft.pretrain_episodes=16", "sft.steps=2",
        "sft.episodes=32", "sft.batch_size=8", "sft.log_every=0", "threads=1"])
    model, tok = load_model("tiny", seed=0)
    out = warm_start(cfg, model, tok, build_envs(cfg, 16, split="train"))
    assert out["sft/pretrain_episodes"] == 32 and out["sft/episodes"] == 32
    assert (out["sft/pretrain_calculator_share"] + out["sft/pretrain_head_share"]
            == pytest.approx(1.0))
    assert 0.05 <= out["sft/calculator_share"] <= 0.5  # the recipe's 25 % calculator
    bad = apply_overrides(TrainConfig, "base-math", ["sft.pretrain_world_seed=0"])
    with pytest.raises(ConfigError, match="task_seed"):
        warm_start(bad, model, tok, build_envs(bad, 2, split="train"))


def _follower(tasks: list[dict]):
    """A scripted model that continues whatever turn it is forced into: a calculator call
    with the task's expression, or an answer, copied from the tool's result when it has one
    and otherwise off by one (arithmetic done wrong in the head). Unforced, it answers."""
    by_problem = {t["question"]: t for t in tasks}

    def policy(conversation: str) -> str:
        task = next(t for q, t in by_problem.items() if q in conversation)
        turn = conversation.rsplit("\n", 1)[-1]
        if turn == "<calculator>":
            return f" {task['expression']} </calculator>"
        shown = conversation.split("<information>")[1:]
        value = (shown[-1].split("</information>")[0] if shown
                 else str(int(float(task["golden_answers"][0])) + 1))
        return f"{value}</answer>" if turn == "<answer>" else f"<answer>{value}</answer>"

    return policy


def test_diagnose_forces_the_tool_call_off_and_on_per_problem_kind(tok):
    from agentsearch.recipes.diagnose import diagnose

    tasks = [t for t in synthetic_math("dev", 60) if t["type"] in ("products", "train")][:8]
    table = diagnose(ScriptedBackend(tok, _follower(tasks)), _envs(8, split="dev"), tasks,
                     max_new_tokens=48, max_turns=3, max_seq_len=256)
    assert set(table) == {"natural", "no_tool", "tool"}
    assert table["tool"] == {"products": 1.0, "train": 1.0, "all": 1.0}
    assert table["no_tool"]["all"] == 0.0 and table["natural"]["all"] == 0.0
    assert table["natural"]["products searches"] == 0.0  # unforced it never calls
    with pytest.raises(ValueError, match="tool"):
        diagnose(ScriptedBackend(tok, _follower(tasks)), _envs(8, split="dev", tools=()), tasks,
                 max_new_tokens=48, max_turns=3, max_seq_len=256)


def test_a_forced_call_is_the_model_calling(tok):
    """The forced tag is part of the turn: the env sees a calculator call, the episode's
    action tokens include the tag (the rollout treats it as sampled)."""
    from agentsearch.recipes.diagnose import ForcedStrategyBackend

    tasks = synthetic_math("dev", 4)
    backend = ForcedStrategyBackend(ScriptedBackend(tok, _follower(tasks)), "tool",
                                    tool="calculator")
    eps, _ = rollout(_envs(4, split="dev"), tasks, backend, SamplingParams(max_new_tokens=48),
                     max_turns=3, max_seq_len=256)
    for e in eps:
        assert e.info["tool_calls"] == 1 and e.answer_correct
        assert tok.decode(e.token_ids[e.prompt_len:]).startswith("<calculator> ")


def test_demo_of_tiny_math_prints_accuracy_and_calculator_calls_per_kind(tmp_path, monkeypatch,
                                                                         capsys):
    import json

    from agentsearch.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--preset", "tiny-math", "steps=1", "prompts_per_step=2", "group_size=2",
                 "eval.limit=6", "threads=1", "tensorboard=false"]) == 0
    out = capsys.readouterr().out
    assert "preset tiny-math" in out and "calculator calls" in out and "dev problems" in out
    s = json.loads(next((tmp_path / "runs").iterdir()).joinpath("demo_summary.json").read_text())
    assert s["eval_questions"] == 6 and set(s["searches_by_type"]) <= {
        "boxes", "chain", "consecutive", "discount", "marbles", "multiples", "powmod", "products",
        "square", "train"}


def test_champ_runs_through_the_same_env_and_eval(tmp_path, capsys):
    """``agentsearch eval --split champ``: a split the math env knows, not a questions file;
    stdout is the JSON alone, a progress line per turn goes to stderr, ``--samples`` decodes."""
    import json

    from agentsearch.cli import main

    assert main(["eval", "--preset", "tiny-math", "--split", "champ", "--limit", "3", "--samples",
                 str(tmp_path / "s.txt"), "threads=1"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert res["eval/questions"] == 3.0 and 0.0 <= res["eval/mean_at_n"] <= 1.0
    assert "[eval] 3 questions x 1 samples" in captured.err and "[eval] turn 1: " in captured.err
    assert "Problem: " in (tmp_path / "s.txt").read_text()
