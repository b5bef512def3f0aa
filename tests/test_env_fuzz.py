"""Fuzzing the envs with hostile turns: no exception ever escapes ``step``, every malformed turn
is an error observation with the format penalty, every well-formed one is accepted.

Two generators: the seeded adversarial one of ``agentsearch.envs.fuzz`` (10,000 actions per
env id, split over its turn formats and settings; what ``agentsearch check-env --fuzz`` runs)
and a hypothesis strategy (shrinks a failure to its smallest turn). The search envs search the
synthetic world's real bm25s index; Math runs its real calculator (and, on fewer actions, the
python sandbox); Vision its real crop tool.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsearch.envs import make_env
from agentsearch.envs.fuzz import fuzz_env

# (env id, settings, actions): 10,000 actions per env id
FUZZ_RUNS = {
    "search": [("agentsearch/Search-v0", {}, 4000),
               ("agentsearch/Search-v0", {"turn_format": "json"}, 4000),
               ("agentsearch/Search-v0", {"parser": "search_r1"}, 2000)],
    "math": [("agentsearch/Math-v0", {"tools": ("calculator",)}, 4750),
             ("agentsearch/Math-v0", {"turn_format": "json", "tools": ("calculator",)}, 4750),
             ("agentsearch/Math-v0", {"tools": ("calculator", "python")}, 500)],
    "vision": [("agentsearch/Vision-v0", {}, 5000),
               ("agentsearch/Vision-v0", {"turn_format": "json"}, 5000)],
    "keychain": [("agentsearch/KeyChain-v0", {}, 5000),
                 ("agentsearch/KeyChain-v0", {"turn_format": "json"}, 5000)],
}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FUZZ_RUNS))
def test_10000_adversarial_actions_per_env(family):
    assert sum(n for _, _, n in FUZZ_RUNS[family]) == 10_000
    for seed, (env_id, kw, n) in enumerate(FUZZ_RUNS[family]):
        report = fuzz_env(make_env(env_id, **kw), n, seed=seed)
        assert report.failures == [], f"{env_id} {kw}:\n" + "\n".join(report.failures)
        assert report.steps == n
        # the generator reaches every kind of turn: malformed ones, tool calls, answers
        assert (report.malformed > n // 4 and report.tool_calls > n // 40
                and report.answers > n // 40), report


def test_fuzz_catches_an_env_that_breaks_the_contract():
    """The checks can fail: an env whose malformed turns get no observation is reported."""
    env = make_env("agentsearch/Search-v0")
    real = env.astep

    async def silent(action):
        obs, reward, term, trunc, info = await real(action)
        return ("" if info["malformed"] else obs), reward, term, trunc, info

    env.astep = silent
    report = fuzz_env(env, 200, seed=0)
    assert any("without an error observation" in f for f in report.failures)

    def raising(action):
        raise ValueError("boom")

    env.step = raising
    assert "step raised ValueError: boom" in fuzz_env(env, 5, seed=0).failures[0]


PIECES = ["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>",
          "<information>", "</information>", "<tool_call>", "</tool_call>", "<calculator>",
          "</calculator>", "\\boxed{", "}", "{", "<|im_end|>", "<|im_start|>", '"name"',
          '{"name": "search", "arguments": {"query": ',
          '{"name": "calculator", "arguments": {"expression": ',
          '"}}', "\n", " ", "🙂", "\x00", "日本"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                      max_size=4),
    max_leaves=12)

actions = st.one_of(
    st.text(max_size=200),                                                    # random unicode
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=14).map("".join),
    st.builds(lambda n, c: f"<search>{c * n}</search>", st.integers(0, 60_000),
              st.sampled_from("a 日")),
    json_values.map(lambda v: f"<tool_call>{json.dumps(v)}</tool_call>"),     # JSON garbage
    st.builds(lambda q: "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": q}})
              + "</tool_call>", st.text(max_size=30)),
    st.builds(lambda e: f"<calculator>{e}</calculator>",
              st.text(alphabet="0123456789+-*/^().e ", max_size=40)),
    st.just(""),
)

_ENVS = {
    "search-tags": lambda: make_env("agentsearch/Search-v0"),
    "search-json": lambda: make_env("agentsearch/Search-v0", turn_format="json"),
    "math-tags": lambda: make_env("agentsearch/Math-v0", tools=("calculator",)),
    "math-json": lambda: make_env("agentsearch/Math-v0", turn_format="json", tools=("calculator",)),
}
_BUILT: dict = {}


def _check_step(name, action):
    env = _BUILT.get(name) or _BUILT.setdefault(name, _ENVS[name]())
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(action)
    assert isinstance(obs, str) and isinstance(reward, float)
    assert reward == info["reward/answer"] + info["reward/format"]
    assert not (term and trunc)
    if info["malformed"]:
        assert obs and info["error"] and not term and not trunc
        assert info["reward/format"] == -env.config.format_penalty
    else:
        assert info["reward/format"] == 0.0
    if info["tool"] is not None and not term:
        assert obs  # a tool call always gets an observation (a result or an error)
    assert env.observation_space.contains(obs)


FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(action=actions, name=st.sampled_from(sorted(_ENVS)))
def test_hypothesis_hostile_turns(action, name):
    _check_step(name, action)


def test_huge_query_is_cut_not_fatal():
    env = make_env("agentsearch/Search-v0")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(f"<search>{env.task['question']} " + "word " * 3000 + "</search>")
    assert (info["error"] is None and obs.count("Doc ") >= 1
            and len(obs) < env.config.max_obs_chars + 100)
