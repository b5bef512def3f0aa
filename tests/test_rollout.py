"""Rollouts with a scripted policy: masks, rewards, truncation, overlapping tool calls."""

from __future__ import annotations

import asyncio
import time

import pytest
from user_envs import CountingEnv

from agentsearch.envs import MathEnv, SearchEnv
from agentsearch.envs.text_env import TextEnv, run_sync
from agentsearch.models import load_tokenizer
from agentsearch.rollout import SamplingParams, ScriptedBackend, arollout, rollout
from agentsearch.warmstart.search_oracle import world_oracle


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def _runs(ep):
    runs = []
    for t, m in zip(ep.token_ids, ep.action_mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(t)
        else:
            runs.append((m, [t]))
    return runs


@pytest.mark.parametrize("fmt", ["tags", "json"])
def test_scripted_oracle_rollout_on_the_world(fmt, tok):
    tasks, policy = world_oracle(split="dev", turn_format=fmt)
    tasks = tasks[:12]
    episodes, stats = rollout(lambda: SearchEnv(split="dev", turn_format=fmt), tasks,
                              ScriptedBackend(tok, policy), SamplingParams(max_new_tokens=256),
                              n_per_task=2, seed=0)
    assert (len(episodes) == 24
            and [e.task_id for e in episodes[:4]] == [tasks[0]["id"]] * 2 + [tasks[1]["id"]] * 2)
    for ep, task in zip(episodes, [t for t in tasks for _ in range(2)]):
        assert ep.terminated and not ep.truncated and ep.answer_correct, ep.info
        assert (ep.reward == 1.0 and ep.reward_components == {"reward/answer": 1.0,
                                                              "reward/format": 0.0})
        assert ep.num_turns == len(task["gold_doc_ids"]) + 1
        assert (ep.info["tool_calls"] == len(task["gold_doc_ids"])
                and ep.info["answer"] == task["golden_answers"][0])
        runs = _runs(ep)
        assert runs[0][0] == 0 and len(runs[0][1]) == ep.prompt_len
        assert [m for m, _ in runs] == [0] + [1, 0] * (ep.num_turns - 1) + [1]
        obs = [tok.decode(ids) for m, ids in runs[1:] if m == 0]
        head = ("\n\n<information>Doc 1(Title: " if fmt == "tags"
                else "\n<|im_start|>user\n<tool_response>\nDoc 1")
        assert all(o.startswith(head) for o in obs)
    m = stats.metrics()
    assert (m["rollout/answer_correct"] == 1.0 and m["reward/answer"] == 1.0
            and m["rollout/tool_error_rate"] == 0.0)
    assert m["rollout/generate_calls"] == 3 and m["time/generate"] > 0 and m["time/env"] > 0
    assert m["rollout/tokens_generated"] == sum(sum(e.action_mask) for e in episodes)


class SleepTool:
    name, description, timeout_s = "wait", "waits", 5.0
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    def __init__(self, latency):
        self.latency = latency

    async def __call__(self, x):
        await asyncio.sleep(self.latency)
        return "done"


def test_tool_calls_of_all_episodes_overlap(tok):
    latency, n = 0.2, 48
    tasks = [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["2"]} for i in range(n)]
    turns = {"1": "<wait>now</wait>", "2": "<wait>again</wait>", "3": "<answer>2</answer>"}

    def policy(conv):
        return turns[str(conv.count("<information>done") + 1)]

    factory = lambda: MathEnv(tools=(SleepTool(latency),))  # noqa: E731
    t0 = time.perf_counter()
    episodes, stats = rollout(factory, tasks, ScriptedBackend(tok, policy), SamplingParams())
    wall = time.perf_counter() - t0
    assert all(e.answer_correct and e.num_turns == 3 for e in episodes)
    assert stats.tool_calls == 2 * n
    assert stats.time_env < 2 * latency * 2.5  # two tool turns, each ~latency, not n * latency
    assert wall < 2 * latency * n / 4


def test_max_seq_len_and_max_turns_truncate(tok):
    task = {"id": "t", "question": "q", "golden_answers": ["x"]}
    policy = lambda conv: "I keep talking " * 10  # noqa: E731 - malformed turns, forever
    env = lambda: MathEnv(max_turns=10)  # noqa: E731
    eps, _ = rollout(env, [task], ScriptedBackend(tok, policy), SamplingParams(), max_turns=3)
    assert eps[0].truncated and not eps[0].terminated and eps[0].num_turns == 3
    assert eps[0].info["truncated_by"] == "max_turns" and eps[0].answer_correct is False
    assert eps[0].reward_components["reward/format"] == pytest.approx(-0.3)
    eps, _ = rollout(env, [task], ScriptedBackend(tok, policy), SamplingParams(), max_seq_len=300)
    ep = eps[0]
    assert ep.truncated and ep.info["truncated_by"] == "max_seq_len"
    assert (len(ep.token_ids) <= 300
            and len(ep.token_ids) == len(ep.action_mask) == len(ep.gen_logprobs))
    eps, _ = rollout(env, [task], ScriptedBackend(tok, policy), SamplingParams(max_new_tokens=5),
                     max_turns=1)
    assert eps[0].info["turns"][0]["finish_reason"] == "length" and sum(eps[0].action_mask) == 5


def test_rollout_takes_env_lists_ids_and_runs_inside_a_loop(tok):
    task = {"id": "t", "question": "1+1?", "golden_answers": ["2"]}
    backend = ScriptedBackend(tok, lambda conv: "\\boxed{2}<|im_end|>")
    envs = [MathEnv(), MathEnv()]
    eps, _ = rollout(envs, [task], backend, SamplingParams(), n_per_task=2)
    assert all(e.answer_correct for e in eps) and eps[0].info["turns"][0]["finish_reason"] == "eos"
    eps, _ = rollout("agentsearch/Math-v0", [task], backend, SamplingParams())
    assert eps[0].answer_correct
    with pytest.raises(ValueError, match="one per concurrent episode"):
        rollout(envs, [task], backend, SamplingParams(), n_per_task=3)

    async def inside():
        with pytest.raises(RuntimeError, match="await arollout"):
            rollout(envs, [task], backend, SamplingParams())
        return await arollout(envs, [task], backend, SamplingParams())

    eps, _ = asyncio.run(inside())
    assert eps[0].answer_correct


def test_json_format_rollout_masks(tok):
    """Chat-template turns: the env closes the assistant turn the policy left open."""
    task = {"id": "t", "question": "6*7?", "golden_answers": ["42"]}
    turns = ['<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>',
             "<answer>42</answer><|im_end|>"]
    backend = ScriptedBackend(tok, lambda conv: turns[conv.count("<tool_response>")])
    eps, _ = rollout(lambda: MathEnv(turn_format="json", tools=("calculator",)), [task], backend,
                     SamplingParams())
    ep = eps[0]
    assert ep.answer_correct and ep.info["turns"][0]["finish_reason"] == "length"
    obs = [tok.decode(ids) for m, ids in _runs(ep)[1:] if m == 0]
    assert obs == ["<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n"]


class _SyncStepEnv(CountingEnv):
    """The same env written the Gymnasium way: only the synchronous ``step`` is overridden."""

    astep = TextEnv.astep

    def step(self, action):
        return run_sync(CountingEnv.astep(self, action))


@pytest.mark.parametrize("env_cls,named", [(CountingEnv, False), (CountingEnv, True),
                                           (_SyncStepEnv, False)])
def test_user_env_rewards_from_step_count(tok, env_cls, named):
    task = {"id": "c", "question": "count", "golden_answers": ["3"]}
    eps, stats = rollout(lambda: env_cls(named=named), [task], ScriptedBackend(tok, lambda c: "go"),
                         SamplingParams(max_new_tokens=4), n_per_task=2)
    for ep in eps:
        assert ep.terminated and ep.num_turns == 3
        assert ep.reward == pytest.approx(1.5)  # 0.25 + 0.25 + 1.0, as step returned
        assert sum(ep.reward_components.values()) == pytest.approx(ep.reward)
        if named:
            assert ep.reward_components["reward/progress"] == pytest.approx(0.75)
            assert ep.reward_components["reward/answer"] == pytest.approx(0.75)
        else:
            assert ep.reward_components["reward/env"] == pytest.approx(1.5)
    assert stats.reward_mean == pytest.approx(1.5)


def test_reward_components_must_sum_to_the_step_reward(tok):
    class Inconsistent(CountingEnv):
        async def astep(self, action):
            obs, reward, term, trunc, info = await super().astep(action)
            return obs, reward, term, trunc, {**info, "reward/answer": reward + 1.0}

    task = {"id": "c", "question": "count", "golden_answers": ["3"]}
    with pytest.raises(ValueError, match="reward components .* sum to"):
        rollout(lambda: Inconsistent(), [task], ScriptedBackend(tok, lambda c: "go"),
                SamplingParams())


def test_prompt_longer_than_max_seq_len_is_an_error_not_a_cut(tok):
    long_task = {"id": "long-one", "question": "word " * 400, "golden_answers": ["3"]}
    short_task = {"id": "short", "question": "count", "golden_answers": ["3"]}
    backend = ScriptedBackend(tok, lambda c: "go")
    with pytest.raises(ValueError, match=r"task 'long-one' has \d+ tokens.*max_seq_len=64"):
        rollout(lambda: CountingEnv(), [short_task, long_task], backend, SamplingParams(),
                max_seq_len=64)
    eps, _ = rollout(lambda: CountingEnv(), [short_task], backend, SamplingParams(), max_seq_len=64)
    assert eps[0].terminated and len(eps[0].token_ids) <= 64


def test_generation_seeds_of_steps_turns_and_requests_never_collide(tok):
    """One seed per (run seed, step, turn, request), derived by ``derive_seed`` at each level
    (trainer: step; rollout: turn; vLLM backend: request). Sums collided: with
    ``seed * 1_000_003 + step + 1000 * turn + i``, step 1 turn 1 was step 1001 turn 0."""
    from agentsearch.rollout import derive_seed

    grid = [(s, step, turn, i) for s in (0, 1) for step in range(1, 1101) for turn in range(4)
            for i in (0, 1, 999, 1000, 1001)]
    seeds = {derive_seed(derive_seed(derive_seed(s, step), turn), i) for s, step, turn, i in grid}
    assert len(seeds) == len(grid) and all(0 <= x < 2**63 for x in seeds)
    assert derive_seed(0, 1) == 2024819301478721300  # deterministic: the same in every process
    assert derive_seed(3, 7) != derive_seed(7, 3)

    class Recording(ScriptedBackend):  # the seed of each generate call (one call per turn)
        seeds: list = []

        def generate(self, prompts, params, images=None):
            self.seeds.append(params.seed)
            return super().generate(prompts, params, images)

    step_seed = derive_seed(0, 5)
    rollout(lambda: CountingEnv(), [CountingEnv().tasks[0]], Recording(tok, lambda conv: "go"),
            SamplingParams(max_new_tokens=4, seed=step_seed), n_per_task=2)
    assert Recording.seeds == [derive_seed(step_seed, t) for t in range(3)]
