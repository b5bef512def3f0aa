"""The hard world's pieces (issue 23): the chain population that stops too early, and the
three cheaper ways to avoid wasted groups that the comparison runs beside HDR: DAPO's dynamic
sampling with regeneration, GRESO-style prompt skipping and success-only replay."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.replay import ReplayGroup, make_replay
from agentsearch.rollout.turns import RolloutStats
from agentsearch.trainer.setup import TaskSampler
from agentsearch.trainer.train_config import TrainConfig
from agentsearch.warmstart.chain_oracle import CHAIN_STRATEGIES, chain_oracle, persistence_shares


@pytest.fixture(scope="module")
def tok():
    from agentsearch.models import load_tokenizer

    return load_tokenizer("tiny")


# ------------------------------------------------------------------ the chain population
def test_persistence_shares_go_on_after_each_hop_with_probability_q():
    s = persistence_shares(0.5)
    assert s == {"stop1": 0.5, "stop2": 0.25, "stop3": 0.125, "thorough": 0.125}
    # a k-hop question is answered after all k searches with probability q^(k-1)
    for k, want in {1: 1.0, 2: 0.5, 3: 0.25, 4: 0.125}.items():
        executes = sum(v for name, v in s.items() if name == "thorough" or int(name[4:]) >= k)
        assert executes == pytest.approx(want)
    assert persistence_shares(1.0)["thorough"] == 1.0
    with pytest.raises(ValueError):
        persistence_shares(1.5)


def test_chain_agents_search_the_path_and_stop_where_their_strategy_says(tok):
    """Played through the real env and retriever: thorough answers every 4-hop question right
    after 4 searches; stopj answers with the name its j-th article gives, after j searches."""
    from agentsearch.data import read_jsonl, world_dir
    from agentsearch.data.loaders import split_contents
    from agentsearch.envs import SearchEnv
    from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout

    folder = world_dir(seed=0, questions="chains")
    tasks = [t for t in read_jsonl(folder / "dev.jsonl") if t["hops"] == 4][:12]
    titles = {r["id"]: split_contents(r["contents"])[0]
              for r in read_jsonl(folder / "corpus.jsonl")}
    kw = dict(turn_format="tags", topk=2, chat_template="none",
              system_prompt="Search, then answer. ", world_questions="chains", split="dev",
              max_turns=6)
    envs = [SearchEnv(**kw) for _ in range(len(tasks))]
    for strategy in CHAIN_STRATEGIES:
        policy = chain_oracle(tasks, titles, strategies={strategy: 1.0})
        eps, _ = rollout(envs, tasks, ScriptedBackend(tok, policy),
                         SamplingParams(max_new_tokens=64), max_turns=6, seed=0)
        searches = 4 if strategy == "thorough" else int(strategy[4:])
        for t, e in zip(tasks, eps):
            assert e.info["tool_calls"] == searches, (strategy, e.info)
            answer = (str(t["golden_answers"][0]) if strategy == "thorough"
                      else titles[t["gold_doc_ids"][searches]])
            assert e.info["answer"] == answer
        correct = sum(bool(e.answer_correct) for e in eps)
        assert correct >= 11 if strategy == "thorough" else correct == 0, (strategy, correct)


def test_chain_strategies_are_seeded_per_question_and_checked_in_the_config():
    tasks = [{"question": f"q{i}", "golden_answers": ["a"], "gold_doc_ids": []}
             for i in range(2000)]
    shares = persistence_shares(0.5)
    a = chain_oracle(tasks, {}, seed=3, strategies=shares).strategy_of
    assert a == chain_oracle(tasks, {}, seed=3, strategies=shares).strategy_of
    for name, share in shares.items():
        assert abs(sum(v == name for v in a.values()) / 2000 - share) < 0.04
    cfg = apply_overrides(TrainConfig, "tiny", ["sft.strategies={stop1: 0.5, thorough: 0.5}"])
    assert cfg.sft.strategies == {"stop1": 0.5, "thorough": 0.5}
    with pytest.raises(ConfigError, match="stop9"):
        apply_overrides(TrainConfig, "tiny", ["sft.strategies={stop9: 1.0}"])


# ------------------------------------------------------------------ GRESO-style skipping
class _Ep:
    def __init__(self, task_id, reward):
        self.task_id, self.reward = task_id, reward


def _visit(sampler, task_id, zero_variance, n=4):
    rewards = [0.0] * n if zero_variance else [1.0] + [0.0] * (n - 1)
    sampler.observe([_Ep(task_id, r) for r in rewards], n)


TASKS = [{"id": f"t{i}", "question": f"q{i}"} for i in range(5)]


def test_a_prompt_zero_variance_on_its_last_two_visits_is_skipped():
    plain = TaskSampler(TASKS, seed=1).sample(15)
    s = TaskSampler(TASKS, seed=1, skip=2, explore=0.0)
    assert s.sample(15) == plain  # nothing observed yet: the plain shuffle, draw for draw
    _visit(s, "t0", True)
    _visit(s, "t0", True)
    _visit(s, "t1", True)
    _visit(s, "t1", False)  # its last visit had signal: kept
    _visit(s, "t2", False)
    _visit(s, "t2", True)   # one zero-variance visit of two: kept
    drawn = [t["id"] for t in s.sample(20)]
    assert "t0" not in drawn and {"t1", "t2", "t3", "t4"} <= set(drawn)
    # t0 once per epoch of 5
    assert s.metrics() == {"sampler/skipped": 5.0, "sampler/skippable": 1.0}
    assert s.metrics()["sampler/skipped"] == 0.0  # counted since the last call
    _visit(s, "t0", False)  # a visit with signal (e.g. explored) brings it back
    assert "t0" in [t["id"] for t in s.sample(5)]


def test_skipping_explores_saves_its_state_and_never_starves():
    s = TaskSampler(TASKS, seed=0, skip=2, explore=1.0)
    for _ in range(2):
        _visit(s, "t0", True)
    assert "t0" in [t["id"] for t in s.sample(10)]  # explore=1: tried anyway
    s = TaskSampler(TASKS, seed=0, skip=1, explore=0.0)
    for t in TASKS:
        _visit(s, t["id"], True)
    assert len(s.sample(3)) == 3  # all skippable: after two epochs it takes what comes
    again = TaskSampler(TASKS, seed=9, skip=1, explore=0.0)
    again.load_state_dict(s.state_dict())
    assert again.history == s.history and again.sample(7) == s.sample(7)


# ------------------------------------------------------------------ regeneration
def test_merged_rollout_stats_add_counts_and_weight_means():
    a = RolloutStats(episodes=8, time_generate=1.0, tool_calls=3, answer_correct=0.25,
                     reward_mean=0.5, reward_components={"reward/answer": 0.25})
    b = RolloutStats(episodes=24, time_generate=2.5, tool_calls=1, answer_correct=0.5,
                     reward_mean=0.0,
                     reward_components={"reward/answer": 0.5, "reward/format": -0.1})
    m = a.merged(b)
    assert (m.episodes, m.time_generate, m.tool_calls) == (32, 3.5, 4)
    assert m.answer_correct == pytest.approx((0.25 * 8 + 0.5 * 24) / 32)
    assert m.reward_mean == pytest.approx(0.125)
    assert m.reward_components == pytest.approx({"reward/answer": 0.4375, "reward/format": -0.075})


def _regenerating(tok, hard: set[str], rounds: int):
    """StepRollouts with a scripted policy: questions in ``hard`` are always answered wrong
    (zero variance), the others right on every other episode (signal)."""
    from agentsearch.envs import MathEnv
    from agentsearch.rollout import EventLoop, ScriptedBackend
    from agentsearch.trainer.rollouts import StepRollouts

    calls = itertools.count()

    def policy(conv):
        q = conv.split("Problem: ")[-1].split("\n")[0].strip()
        return "<answer>3</answer>" if q in hard or next(calls) % 2 else "<answer>2</answer>"

    cfg = apply_overrides(TrainConfig, "tiny", ["prompts_per_step=2", "group_size=4", "max_turns=2",
                                                 "dynamic_sampling=true",
                                                 f"regenerate_rounds={rounds}"])
    tasks = [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["2"]} for i in range(40)]
    sampler = TaskSampler(tasks, seed=0)
    events = EventLoop()
    envs = [MathEnv(tools=()) for _ in range(8)]
    return (StepRollouts(cfg, envs, ScriptedBackend(tok, policy), sampler, events, {}),
            sampler, events)


def test_regeneration_replaces_zero_variance_groups_with_new_prompts(tok):
    first = [t["question"] for t in TaskSampler([{"id": f"t{i}", "question": f"q{i}"}
                                                 for i in range(40)], seed=0).sample(2)]
    roll, sampler, events = _regenerating(tok, hard=set(first), rounds=3)
    with events:
        episodes, stats = events.run(roll.of(1))
    m = stats.metrics()
    # round 0: both groups zero-variance; round 1: two new prompts, both with signal
    assert (m["dynamic/rounds"], m["dynamic/groups_played"],
            m["dynamic/groups_with_signal"]) == (1.0, 4.0, 2.0)
    assert m["rollout/episodes"] == 16.0 and m["dynamic/zero_variance_frac_played"] == 0.5
    assert len(episodes) == 8 and not {e.info["question"] for e in episodes} & set(first)
    assert sorted(e.reward for e in episodes[:4]) != [episodes[0].reward] * 4


def test_regeneration_stops_after_its_rounds_and_keeps_a_full_batch(tok):
    every = {f"q{i}" for i in range(40)}
    roll, _, events = _regenerating(tok, hard=every, rounds=2)
    with events:
        episodes, stats = events.run(roll.of(1))
    m = stats.metrics()
    assert (m["dynamic/rounds"], m["dynamic/groups_played"],
            m["dynamic/groups_with_signal"]) == (2.0, 6.0, 0.0)
    assert m["rollout/episodes"] == 24.0 and len(episodes) == 8  # every round's cost counted
    with pytest.raises(ConfigError, match="regenerate_rounds"):
        apply_overrides(TrainConfig, "tiny", ["regenerate_rounds=2"])  # without dynamic_sampling


# ------------------------------------------------------------------ success-only replay
def test_success_only_replays_only_the_successful_responses():
    mask = torch.tensor([[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 0, 1]], dtype=torch.bool)
    g = ReplayGroup(prompt_id="p", token_ids=torch.arange(12).view(4, 3), action_mask=mask,
                    gen_logprobs=torch.full((4, 3), math.log(0.5)),
                    advantages=torch.tensor([1.5, -0.5, -0.5, -0.5]),
                    rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]),
                    answer_correct=torch.tensor([True, False, False, False]),
                    born_step=0)
    buf = make_replay("success_only", capacity=8, k_rep=1, seed=0)
    assert buf.add([g], step=0) == 1
    sel = buf.select(None, step=1)
    (r,) = sel.accepted
    assert r is not g and r.token_ids.tolist() == [[0, 1, 2]] and r.advantages.tolist() == [1.5]
    assert (r.action_mask.tolist() == [[False, True, True]]
            and sel.stats["replay/success_rows"] == 1.0)
    # the stored group is whole, counted once
    assert g.token_ids.shape == (4, 3) and g.replay_count == 1
    state = buf.state_dict()
    again = make_replay("success_only", capacity=8, k_rep=1, seed=0)
    again.load_state_dict(state)
    assert len(again) == 1


def test_pass_at_k_hand_worked():
    from agentsearch.trainer.eval import pass_at_k

    assert pass_at_k(8, 1, 4) == pytest.approx(1 - 35 / 70)  # C(7,4) / C(8,4)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 2, 8) == 1.0 and pass_at_k(8, 5, 4) == 1.0


def test_hop_reach_reads_which_hop_articles_each_episode_saw(tok):
    """diagnose's per-hop table on scripted agents: a thorough agent sees every hop's article,
    one that stops after two searches never sees the third."""
    from agentsearch.data import read_jsonl, world_dir
    from agentsearch.data.loaders import split_contents
    from agentsearch.envs import SearchEnv
    from agentsearch.recipes.diagnose import hop_reach
    from agentsearch.rollout import ScriptedBackend

    folder = world_dir(seed=0, questions="chains")
    tasks = [t for t in read_jsonl(folder / "dev.jsonl") if t["hops"] in (1, 3)][:10]
    titles = {r["id"]: split_contents(r["contents"])[0]
              for r in read_jsonl(folder / "corpus.jsonl")}
    envs = [SearchEnv(turn_format="tags", topk=2, chat_template="none", world_questions="chains",
                      split="dev", max_turns=6) for _ in tasks]
    kw = dict(max_new_tokens=64, max_turns=6, max_seq_len=1024)
    full = hop_reach(ScriptedBackend(tok, chain_oracle(tasks, titles)), envs, tasks, titles, **kw)
    assert (set(full) == {"chain3"} and full["chain3"]["reach3"] == 1.0
            and full["chain3"]["hop3"] == 1.0)
    two = hop_reach(ScriptedBackend(tok, chain_oracle(tasks, titles, strategies={"stop2": 1.0})),
                    envs, tasks, titles, **kw)
    assert two["chain3"]["reach2"] == 1.0 and two["chain3"]["hop3"] == 0.0
