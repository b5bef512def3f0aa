"""Fuzzing the envs with hostile turns: no exception, ever; bad turns cost a format penalty."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsearch.envs import MathEnv, SearchEnv
from agentsearch.retrievers.base import Hit

PIECES = ["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>",
          "<information>", "</information>", "<tool_call>", "</tool_call>", "<calculator>",
          "</calculator>", "\\boxed{", "}", "{", "<|im_end|>", "<|im_start|>", '"name"',
          '{"name": "search", "arguments": {"query": ', '{"name": "calculator", "arguments": {"expression": ',
          '"}}', "\n", " ", "🙂", "\x00", "日本"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)

actions = st.one_of(
    st.text(max_size=200),                                                    # random unicode
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=14).map("".join),
    st.builds(lambda n, c: f"<search>{c * n}</search>", st.integers(0, 60_000), st.sampled_from("a 日")),
    json_values.map(lambda v: f"<tool_call>{json.dumps(v)}</tool_call>"),     # JSON garbage
    st.builds(lambda q: "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": q}})
              + "</tool_call>", st.text(max_size=30)),
    st.builds(lambda e: f"<calculator>{e}</calculator>", st.text(alphabet="0123456789+-*/^().e ", max_size=40)),
    st.just(""),
)


class CannedRetriever:
    """A stand-in for the search index: fast, deterministic, one canned hit per query."""

    def search(self, queries, k=3):
        return [[Hit("d1", f'"Doc"\nabout {q[:40]}', 1.0)] for q in queries]

    async def asearch(self, queries, k=3):
        return self.search(queries, k)


def _check_step(env, action):
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


FUZZ = settings(max_examples=1200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(action=actions)
def test_fuzz_search_tags(action):
    _check_step(_ENVS["search-tags"], action)


@FUZZ
@given(action=actions)
def test_fuzz_search_json(action):
    _check_step(_ENVS["search-json"], action)


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(action=actions, fmt=st.sampled_from(["tags", "json"]))
def test_fuzz_math_with_calculator(action, fmt):
    _check_step(_ENVS[f"math-{fmt}"], action)


_ENVS = {
    "search-tags": SearchEnv(retriever=CannedRetriever(), tasks=[{"question": "q?", "golden_answers": ["a"]}]),
    "search-json": SearchEnv(turn_format="json", retriever=CannedRetriever(),
                             tasks=[{"question": "q?", "golden_answers": ["a"]}]),
    "math-tags": MathEnv(tools=("calculator",), tasks=[{"question": "1+1?", "golden_answers": ["2"]}]),
    "math-json": MathEnv(turn_format="json", tools=("calculator",),
                         tasks=[{"question": "1+1?", "golden_answers": ["2"]}]),
}


def test_huge_query_is_cut_not_fatal():
    env = SearchEnv(retriever=CannedRetriever(), tasks=[{"question": "q?", "golden_answers": ["a"]}])
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<search>" + "word " * 3000 + "</search>")
    assert info["error"] is None and "about word" in obs and len(obs) < env.config.max_obs_chars + 100
