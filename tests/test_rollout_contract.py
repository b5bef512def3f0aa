"""The env <-> rollout contract (``RolloutEnv``): registered envs keep it, broken user envs
are caught with a message naming the problem, and ``check-env`` reports it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest
from user_envs import CountingEnv

import agentsearch.envs  # noqa: F401 - registers the ids
from agentsearch.envs import MathEnv, SearchEnv
from agentsearch.rollout import (
    RolloutEnv,
    SamplingParams,
    ScriptedBackend,
    check_rollout_contract,
    rollout,
)
from agentsearch.rollout import checker as rollout_checker
from agentsearch.rollout.contract import RolloutContractError

IDS = sorted(i for i in gymnasium.registry if i.startswith("agentsearch/"))
CASES = [(i, {"turn_format": fmt, **v}) for i in IDS
         for v in getattr(gymnasium.spec(i).make().unwrapped, "check_variants", ({},))
         for fmt in ("tags", "json")]


@pytest.mark.parametrize("env_id,kw", CASES, ids=[f"{i}-{kw}" for i, kw in CASES])
def test_every_registered_env_keeps_the_contract(env_id, kw):
    env = gymnasium.make(env_id, **kw).unwrapped
    assert isinstance(env, RolloutEnv)
    assert check_rollout_contract(env) == []


def test_search_env_is_a_rollout_env():
    assert isinstance(SearchEnv(), RolloutEnv) and isinstance(MathEnv(), RolloutEnv)


class _Counting(CountingEnv):
    """A conforming user env with named reward components (``user_envs.CountingEnv``)."""

    named = True


class _Minimal:
    """A from-scratch env (no TextEnv, no Gymnasium): exactly what RolloutEnv asks for."""

    stop_strings = ("</answer>",)

    def reset(self, *, seed=None, options=None):
        self.turn, self.task = 0, (options or {}).get("task") or {}
        return f"Q: {self.task.get('question', '?')}\nA:", {"task_id": "m"}

    async def astep(self, action):
        self.turn += 1
        done = "</answer>" in action or self.turn >= 2
        return "" if done else " again:", float(done), done and "</answer>" in action, \
            done and "</answer>" not in action, \
            {"answer_correct": (self.turn == 1) if done else None}

    async def aclose(self):
        pass


def _problems(env) -> str:
    probs = check_rollout_contract(env)
    assert probs, f"{type(env).__name__} should break the contract"
    return "\n".join(probs)


def test_conforming_user_envs_pass():
    assert check_rollout_contract(_Counting()) == []
    assert isinstance(_Minimal(), RolloutEnv)
    assert check_rollout_contract(_Minimal()) == []


def test_minimal_env_runs_in_a_rollout():
    from agentsearch.models import load_tokenizer

    backend = ScriptedBackend(load_tokenizer("tiny"), lambda c: "<answer> 42 </answer>")
    eps, _ = rollout(lambda: _Minimal(), [{"id": "m", "question": "6*7?"}], backend,
                     SamplingParams(max_new_tokens=16))
    assert eps[0].terminated and eps[0].answer_correct is True and eps[0].reward == 1.0


def test_reward_components_not_summing_to_the_reward():
    class Env(_Counting):
        def _info(self, done):
            return {**super()._info(done), "reward/progress": 0.5}

    msg = _problems(Env())
    assert "sum to" in msg and "reward/progress" in msg and "add up to the reward" in msg


def test_answer_correct_before_the_end():
    class Env(_Counting):
        def _info(self, done):
            return {**super()._info(done), "answer_correct": False}

    msg = _problems(Env())
    assert "answer_correct" in msg and "did not end the episode" in msg and "leave it None" in msg


def test_no_answer_correct_at_termination():
    class Env(_Counting):
        def _info(self, done):
            return {**super()._info(done), "answer_correct": None}

    assert "set it to True or False on the terminating step" in _problems(Env())


def test_stop_strings_must_be_a_tuple_of_str():
    class Env(_Counting):
        stop_strings = [1, 2]

    msg = _problems(Env())
    assert "stop_strings is a list" in msg and "tuple of str" in msg and "[1, 2]" in msg


def test_missing_astep():
    class NoAstep:
        stop_strings = ()

        def reset(self, *, seed=None, options=None):
            return "prompt", {}

        def step(self, action):
            return "", 0.0, True, False, {"answer_correct": False}

        async def aclose(self):
            pass

    assert not isinstance(NoAstep(), RolloutEnv)
    msg = _problems(NoAstep())
    assert "has no astep()" in msg and "async def astep" in msg


def test_sync_astep_and_missing_aclose():
    class Env:
        stop_strings = ()

        def reset(self, *, seed=None, options=None):
            return "prompt", {}

        def astep(self, action):
            return "", 0.0, True, False, {"answer_correct": False}

    msg = _problems(Env())
    assert "astep is not a coroutine function" in msg and "has no aclose()" in msg
    assert "not an awaitable" in msg


def test_terminated_and_truncated_together():
    class Env(_Counting):
        async def astep(self, action):
            obs, reward, term, trunc, info = await super().astep(action)
            return obs, reward, term, term, info

    assert "both True" in _problems(Env())


def test_malformed_turn_must_not_raise_and_episodes_must_end():
    class Raises(_Counting):
        async def astep(self, action):
            raise ValueError("cannot parse")

    class Endless(_Counting):
        async def astep(self, action):
            return " more", 0.0, False, False, {}

    assert "must return an error observation" in _problems(Raises())
    assert "did not end after" in _problems(Endless())


def test_bad_observation_and_info_types():
    class Env(_Counting):
        async def astep(self, action):
            obs, reward, term, trunc, info = await super().astep(action)
            return {"images": 3}, reward, term, trunc, {**info, "tool_calls": "one"}

    msg = _problems(Env())
    assert "needs a str 'text'" in msg and "'images' must be a list or tuple" in msg
    assert "info['tool_calls']" in msg


def test_raise_errors_lists_every_problem():
    class Env(_Counting):
        stop_strings = ["</answer>"]

        def _info(self, done):
            return {**super()._info(done), "reward/progress": 9.0}

    with pytest.raises(RolloutContractError,
                       match=r"(?s)breaks the rollout contract.*tuple.*sum to"):
        check_rollout_contract(Env(), raise_errors=True)


def test_check_env_reports_contract_failures(monkeypatch, capsys):
    monkeypatch.setattr(rollout_checker, "check_rollout_contract",
                        lambda env: ["info['answer_correct'] is set too early"])

    class A:
        ids = ["agentsearch/Math-v0"]

    assert rollout_checker.main(A()) == 1
    out = capsys.readouterr().out
    assert "FAIL agentsearch/Math-v0 [turn_format=tags]" in out
    assert "rollout contract is broken" in out and "set too early" in out


def test_import_rollout_stays_light():
    code = ("import sys, agentsearch.rollout as r; r.RolloutEnv, r.check_rollout_contract; "
            "print([m for m in ('torch', 'transformers', 'vllm') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
