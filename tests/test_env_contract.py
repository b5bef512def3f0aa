"""The env contract: Gymnasium's check_env on every id, our checker, scripted episodes."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import agentsearch.envs  # noqa: F401 - registers the ids
from agentsearch.data import read_jsonl
from agentsearch.envs import MathEnv, SearchEnv, UnicodeText
from agentsearch.rollout.checker import check_rollout_masks, check_text_env
from agentsearch.rollout.checker import main as check_main

IDS = sorted(i for i in gymnasium.registry if i.startswith("agentsearch/"))


def test_every_id_is_registered():
    assert {"agentsearch/Search-v0", "agentsearch/Math-v0"} <= set(IDS)


@pytest.mark.parametrize("fmt", ["tags", "json"])
@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_check_env(env_id, fmt):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(env_id, turn_format=fmt)
        check_env(env.unwrapped)
    gym_warnings = [str(w.message) for w in caught if "gymnasium" in str(w.filename)]
    assert gym_warnings == []


@pytest.mark.parametrize("fmt", ["tags", "json"])
@pytest.mark.parametrize("make", [lambda f: SearchEnv(turn_format=f),
                                  lambda f: MathEnv(turn_format=f, tools=("calculator", "python"))],
                         ids=["search", "math-tools"])
def test_our_checks(make, fmt):
    passed = check_text_env(make(fmt))
    assert passed == ["reset", "tool-calls", "malformed", "correct-answer", "truncation"]
    check_rollout_masks(lambda: make(fmt))


def test_check_env_cli_entry(capsys):
    class A:
        ids = ["agentsearch/Math-v0", "agentsearch/Nope-v0"]

    assert check_main(A()) == 1  # the unknown id fails, Math passes
    out = capsys.readouterr().out
    assert "ok   agentsearch/Math-v0 [turn_format=tags, tools=('calculator', 'python')]" in out
    assert ("ok   agentsearch/Math-v0 [turn_format=json]" in out
            and "FAIL agentsearch/Nope-v0" in out)


def _titles(world_path) -> dict[str, str]:
    return {row["id"]: row["contents"].split("\n")[0].strip('"')
            for row in read_jsonl(world_path / "corpus.jsonl")}


@pytest.mark.parametrize("fmt", ["tags", "json"])
def test_scripted_correct_episode_scores_one(world_path, fmt):
    titles = _titles(world_path)
    task = next(q for q in read_jsonl(world_path / "dev.jsonl") if q["type"] == "bridge")
    env = gymnasium.make("agentsearch/Search-v0", turn_format=fmt)
    obs, info = env.reset(seed=0, options={"task": task})
    assert info["question"] == task["question"] and info["golden_answers"] == task["golden_answers"]
    assert task["question"] in obs
    for doc_id in task["gold_doc_ids"]:  # search each hop by its article's title
        if fmt == "tags":
            action = f"<think>look up {titles[doc_id]}</think>\n<search> {titles[doc_id]} </search>"
        else:
            call = json.dumps({"name": "search", "arguments": {"query": titles[doc_id]}})
            action = f"<tool_call>\n{call}\n</tool_call><|im_end|>"
        obs, reward, term, trunc, info = env.step(action)
        assert not term and not trunc and reward == 0.0 and info["tool"] == "search"
        assert f'(Title: "{titles[doc_id]}")' in obs
        assert ("<information>" in obs) == (fmt == "tags")
        assert ("<tool_response>" in obs) == (fmt == "json")
    end = "" if fmt == "tags" else "<|im_end|>"
    obs, reward, term, trunc, info = env.step(
        f"<answer> {task['golden_answers'][0]} </answer>{end}")
    assert (term, trunc, obs) == (True, False, "")
    assert info["answer_correct"] is True
    assert info["reward/answer"] == 1.0 and info["reward/format"] == 0.0 and reward == 1.0


def test_answer_correct_ignores_format_and_f1_metric():
    task = {"id": "t", "question": "Who?", "golden_answers": ["Ada Lovelace"]}
    env = SearchEnv(answer_metric="f1", max_turns=3)
    env.reset(options={"task": task})
    _, r, _, _, info = env.step("no action")  # malformed first: format penalty only
    assert info["reward/format"] == -0.1 and info["answer_correct"] is None
    _, r, term, _, info = env.step("<answer>Lovelace</answer>")
    assert term and info["answer_correct"] is False  # not an exact match
    assert info["reward/answer"] == pytest.approx(2 / 3) and info["metric/em"] == 0.0
    env.reset(options={"task": task})
    _, _, _, _, info = env.step("<think>unclosed <answer>the ada lovelace.</answer>")
    assert info["malformed"] and info["answer_correct"] is None  # bad turn, no answer read


def test_out_of_turns_is_truncated_not_terminated():
    env = SearchEnv(max_turns=2)
    env.reset(seed=1)
    out1 = env.step("<search>anything</search>")
    assert out1[2:4] == (False, False)
    obs, reward, term, trunc, info = env.step("<search>again</search>")
    assert (term, trunc, obs) == (False, True, "")
    assert info["answer_correct"] is False and info["error"] == "out of turns"
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("<answer>x</answer>")


def test_reset_samples_with_np_random_and_render():
    env = SearchEnv(split="dev", render_mode="ansi")

    def sequence(seed):
        return [env.reset(seed=seed)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(3)]

    assert sequence(5) == sequence(5)
    assert len(set(sequence(5))) > 1 and len({sequence(s)[0] for s in range(10)}) > 1
    assert all(t.startswith("dev-") for t in sequence(7))
    env.step("<answer>x</answer>")
    assert env.render().endswith("<answer>x</answer>")


def test_bad_settings_say_how_to_fix():
    with pytest.raises(TypeError, match="settings are"):
        SearchEnv(top_k=3)
    with pytest.raises(ValueError, match="turn_format"):
        SearchEnv(turn_format="xml")
    with pytest.raises(ValueError, match="needs a chat template"):
        SearchEnv(turn_format="json", chat_template="none")
    env = SearchEnv()
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("<answer>x</answer>")
    with pytest.raises(KeyError, match="golden_answers"):
        env.reset(options={"task": {"question": "q"}})


def test_raw_prompt_is_search_r1_base_prompt():
    env = SearchEnv(chat_template="none")
    obs, info = env.reset(options={"task": {"question": "Who?", "golden_answers": ["x"]}})
    assert obs.startswith("Answer the given question. You must conduct reasoning inside <think>")
    assert obs.endswith("For example, <answer> Beijing </answer>. Question: Who?\n")


def test_text_space_takes_any_unicode():
    space = UnicodeText(10)
    assert space.contains("日本語🙂\x00") and space.contains("") and not space.contains("x" * 11)
    assert not space.contains(b"bytes")
    assert isinstance(space.sample(), str)


def test_import_is_light():
    code = ("import sys, agentsearch.envs; "
            "print([m for m in ('torch', 'transformers', 'bm25s') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_env_templates_render_like_transformers():
    from agentsearch.envs.templates import ChatFormat
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny")
    env = MathEnv(turn_format="json", tools=("calculator",))
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? ünï"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function",
                 "function": {"name": "calculator", "arguments": {"expression": "2+2"}}}]},
            {"role": "tool", "content": "4"}]
    for m, gen in [(msgs[:2], True), (msgs, True), (msgs[:3], False)]:
        ours = ChatFormat(None).render(m, tools=env.tool_schemas(), add_generation_prompt=gen)
        assert ours == tok.apply_chat_template(m, tools=env.tool_schemas(), tokenize=False,
                                               add_generation_prompt=gen)
    fmt = ChatFormat(None)
    assert (fmt.close_turn("x<|im_end|>") == "\n"
            and fmt.close_turn("x</tool_call>") == "<|im_end|>\n")
    with pytest.raises(FileNotFoundError, match="neither a jinja template"):
        ChatFormat("no/such/template.jinja")


def test_sync_step_works_inside_a_running_event_loop():
    import asyncio

    env = MathEnv(tools=("calculator",))

    async def notebook_cell():  # e.g. Jupyter: a loop is already running
        env.reset(options={"task": {"question": "6*7?", "golden_answers": ["42"]}})
        obs, *_ = env.step("<calculator>6*7</calculator>")
        out = await env.astep("<answer>42</answer>")
        return obs, out

    obs, out = asyncio.run(notebook_cell())
    assert "<information>42</information>" in obs and out[2] is True and out[4]["answer_correct"]
