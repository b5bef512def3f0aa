"""The oracle population (agents that differ only in when they stop searching), the demo's
question-type filter, and the warm start's transcript filter."""

import pytest

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.envs import SearchEnv
from agentsearch.models import load_tokenizer
from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.search_oracle import (
    STRATEGIES,
    check_strategies,
    oracle_episodes,
    world_oracle,
)


def test_strategy_shares_are_checked():
    assert check_strategies({"thorough": 0.25, "one_search": 0.75}) == {"thorough": 0.25,
                                                                        "one_search": 0.75}
    with pytest.raises(ValueError, match="unknown oracle strategies.*guess"):
        check_strategies({"thorough": 0.5, "guess": 0.5})
    with pytest.raises(ValueError, match="sum to 1"):
        check_strategies({"thorough": 0.5, "one_search": 0.4})
    with pytest.raises(ValueError, match="non-negative"):
        check_strategies({"thorough": 1.5, "one_search": -0.5})
    assert set(STRATEGIES) == {"thorough", "one_search"}


@pytest.mark.parametrize("bad", ["sft.strategies={thorough: 0.5, skim: 0.5}",
                                 "sft.pretrain_strategies={thorough: 0.2, one_search: 0.2}"])
def test_bad_shares_in_a_config_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="sft.*strateg"):
        apply_overrides(TrainConfig, "tiny", [bad])


def test_bad_shares_exit_2_from_the_cli(capsys):
    from agentsearch.cli import main

    assert main(["train", "--preset", "tiny", "--out", "/tmp/never",
                 "sft.strategies={thorough: 0.9}"]) == 2
    assert "sum to 1" in capsys.readouterr().err


def _play(strategies, n=40):
    tok = load_tokenizer("tiny")
    tasks, policy = world_oracle("dev", think=False, strategies=strategies)
    tasks = [t for t in tasks if t["type"] in ("single", "bridge")][:n]
    envs = [SearchEnv(topk=2, split="dev") for _ in tasks]
    eps, _ = rollout(envs, tasks, ScriptedBackend(tok, policy), SamplingParams(max_new_tokens=64),
                     max_turns=4, max_seq_len=1024)
    return tasks, eps, policy


def test_one_search_agents_copy_the_intermediate_entity_on_bridge_questions():
    tasks, eps, _ = _play({"one_search": 1.0})
    for t, e in zip(tasks, eps):
        assert e.info["tool_calls"] == 1 and e.terminated
        if t["type"] == "single":
            assert e.answer_correct  # on one-hop questions it is the thorough agent
        else:
            assert not e.answer_correct  # it answered with the entity the first article names
    tok = load_tokenizer("tiny")
    from agentsearch.warmstart.search_oracle import _evidence_ok

    assert all(_evidence_ok(e, tok) for e in eps)  # every answer was copied from what it read


def test_thorough_agents_search_every_hop_and_the_population_mixes_by_share():
    tasks, eps, _ = _play({"thorough": 1.0})
    assert all(e.answer_correct and e.info["tool_calls"] == t["hops"] for t, e in zip(tasks, eps))
    tasks, policy = world_oracle("train", strategies={"thorough": 0.3, "one_search": 0.7})
    share = sum(s == "thorough" for s in policy.strategy_of.values()) / len(policy.strategy_of)
    assert 0.27 < share < 0.33


def test_question_types_filter_the_tasks_and_say_when_nothing_matches():
    env = SearchEnv(split="dev", question_types=("single", "bridge"))
    assert env.tasks and {t["type"] for t in env.tasks} == {"single", "bridge"}
    assert len(env.tasks) >= 400  # the demo's dev set: >= 400 questions without comparisons
    with pytest.raises(ValueError, match="matches no question"):
        _ = SearchEnv(split="dev", question_types=("trivia",)).tasks


def test_warm_start_keeps_wrong_but_copied_answers_and_drops_unsupported_ones():
    tok = load_tokenizer("tiny")
    envs = [SearchEnv(topk=2, question_types=("single", "bridge")) for _ in range(16)]
    eps = oracle_episodes(envs, tok, count=32, strategies={"one_search": 1.0},
                          question_types=("single", "bridge"))
    assert len(eps) >= 28 and any(not e.answer_correct for e in eps)
    assert all(e.info["tool_calls"] == 1 for e in eps)
