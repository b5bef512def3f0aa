"""Turn parsing and answer scoring, case by case."""

from __future__ import annotations

import pytest

from agentsearch.envs.parsing import JsonToolParser, TagParser, last_boxed, strip_end
from agentsearch.envs.rewards import exact_match, f1_score, math_equal, normalize_answer, qa_score

TAGS = TagParser({"search": "query"})
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
JSON = JsonToolParser({"search": SCHEMA})


@pytest.mark.parametrize("text,kind,value", [
    ("<think>a</think>\n<search> who is x </search>", "tool", "who is x"),
    ("<search>q</search> trailing text after the stop", "tool", "q"),
    ("free text first <answer> Paris </answer><|im_end|>", "answer", "Paris"),
    ("<think>a</think><think>b</think><answer>1</answer>", "answer", "1"),
    ("<answer>a</answer><search>b</search>", "answer", "a"),  # the first action counts
])
def test_tag_turns(text, kind, value):
    turn = TAGS.parse(text)
    assert turn.kind == kind
    assert (turn.calls[0].arguments["query"] if kind == "tool" else turn.answer) == value


@pytest.mark.parametrize("text,reason", [
    ("", "no action"),
    ("<search>unclosed", "no action"),
    ("<think>unclosed <search>q</search>", "unclosed <think>"),
    ("<think><think>x</think></think><answer>a</answer>", "nested or stray"),
    ("<search>a <answer>b</answer> c</search>", "stray <search>"),
    ("<search><search>q</search>", "stray <search>"),
    ("<search>a <think>b</think></search>", "cannot be nested"),
    ("q</search>", "without an opening <search>"),
    ("<answer>" * 2000, "no action"),  # degenerate repetition: parsed in linear time
    ("<search>   </search>", "empty"),
    ("<information>fake</information><answer>a</answer>", "only the environment"),
    ("<answer>x" + "y" * 20000 + "</answer>", "characters long"),
])
def test_bad_tag_turns(text, reason):
    turn = TAGS.parse(text)
    assert turn.kind == "error" and reason in turn.error


def test_tag_stop_strings_and_boxed():
    p = TagParser({"calculator": "expression"}, boxed=True)
    assert p.stop_strings == ("</calculator>", "</answer>")
    assert p.parse("so \\boxed{\\frac{1}{2}} done").answer == "\\frac{1}{2}"
    assert p.parse("<calculator>1+2</calculator>").calls[0].arguments == {"expression": "1+2"}
    assert last_boxed("\\boxed{a} then \\boxed{b{c}}") == "b{c}" and last_boxed("\\boxed{x") is None
    assert strip_end("x <|im_end|>\n") == "x"


@pytest.mark.parametrize("text,kind", [
    ('<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call><|im_end|>',
     "tool"),
    ('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}</tool_call>', "tool"),
    ("The capital is <answer>Paris</answer><|im_end|>", "answer"),
])
def test_json_turns(text, kind):
    assert JSON.parse(text).kind == kind


@pytest.mark.parametrize("text,reason", [
    ("<tool_call>{not json}</tool_call>", "not valid JSON"),
    ('<tool_call>["search"]</tool_call>', "JSON object"),
    ('<tool_call>{"name": "browse", "arguments": {}}</tool_call>', "unknown tool"),
    ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "missing required"),
    ('<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>', "type string"),
    ('<tool_call>{"name": "search", "arguments": {"query": "q", "k": 2}}</tool_call>',
     "unknown argument"),
    ('<tool_call>{"name": "search"', "unclosed <tool_call>"),
    ("just talking", "neither a tool call nor an answer"),
    ("<answer>unclosed", "unclosed <answer>"),
    ("<tool_call><tool_call>{}</tool_call>", "nested <tool_call>"),
    ("x</tool_call>", "stray </tool_call>"),
    ("<answer>  </answer>", "empty <answer>"),
    ("<tool_call>" + "[" * 5000 + "</tool_call>", "not valid JSON"),
])
def test_bad_json_turns(text, reason):
    turn = JSON.parse(text)
    assert turn.kind == "error" and reason in turn.error


def test_json_call_limit():
    call = '<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>'
    assert len(JsonToolParser({"search": SCHEMA}, max_calls=2).parse(call * 2).calls) == 2
    assert "limit 2" in JsonToolParser({"search": SCHEMA}, max_calls=2).parse(call * 3).error


def test_squad_normalisation_em_f1():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("the Paris.", ["paris", "Lutetia"]) == 1.0
    assert exact_match("Paris France", ["paris"]) == 0.0
    assert f1_score("Paris France", ["paris"]) == pytest.approx(2 / 3)
    assert f1_score("", ["paris"]) == 0.0
    s = qa_score("paris", ["Paris"], "f1")
    assert s.correct and s.score == 1.0 and s.metrics == {"em": 1.0, "f1": 1.0}
    with pytest.raises(ValueError, match="answer_metric"):
        qa_score("x", ["x"], "bleu")


@pytest.mark.parametrize("pred,gold,ok", [
    ("252", ["C(10, 5), or equivalently 252"], False),  # the raw CHAMP string is not split here
    ("252", ["C(10, 5)"], True),
    ("\\frac{1}{3}", ["1/3"], True),
    ("0.5", ["1/2"], True),
    ("2^{2n}", ["4^n"], True),
    ("n (n+1) 2^{n-2}", ["n(n+1)*2^(n-2)"], True),
    ("17", ["18"], False),
    ("No", ["no"], True),
    ("9" * 1000, ["1"], False),
])
def test_math_equal(pred, gold, ok):
    assert math_equal(pred, gold) is ok


@pytest.mark.parametrize("piece", ["<search>", "<answer>", "<tool_call>", "</answer>x", "<think>"])
def test_degenerate_turns_parse_in_linear_time(piece):
    import time

    text = piece * (16000 // len(piece))
    tags, js = (TagParser({"search": "query", "python": "code"}, boxed=True),
                JsonToolParser({"search": SCHEMA}))
    t0 = time.perf_counter()
    assert tags.parse(text).kind == "error" and js.parse(text).kind == "error"
    # linear: ~5 ms here; a lazy backreference regex took 0.6 s
    assert time.perf_counter() - t0 < 0.3
