"""Turn parsing: the text of one agent turn -> a ``Turn`` (tool calls, an answer, or an error).

Two turn formats share one result type:

- ``TagParser`` reads Search-R1's tags. A turn is free text and ``<think>…</think>``
  blocks followed by one action block: ``<search>query</search>`` (or ``<NAME>…</NAME>``
  for any other tool the env offers) or ``<answer>…</answer>``. The first complete
  action block is the action; text after it is ignored, as in Search-R1, where
  generation stops at the first closing tag (a sampled token may run past it).
- ``SearchR1Parser`` (``parser="search_r1"``) reads tags exactly as Search-R1's
  ``generation.py`` does: the turn is cut after its first ``</search>`` (else its first
  ``</answer>``), then the first ``<(search|answer)>(.*?)</\\1>`` block is the action, whatever
  surrounds it (an unclosed ``<think>``, a model-written ``<information>``, an empty block).
- ``JsonToolParser`` reads the chat template's JSON tool calls: one or more
  ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks call tools; a turn
  without tool calls must carry ``<answer>…</answer>``.

Math envs also accept ``\\boxed{…}`` as the answer of a turn without tool calls
(``boxed=True``). A parser never raises on model text: anything malformed comes back as
``Turn(error=...)`` with a sentence that tells the model what to write instead.
Parsing does not know about rewards or dynamics (the env decides what an error costs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = ["ToolCall", "Turn", "TagParser", "SearchR1Parser", "JsonToolParser", "last_boxed",
           "strip_end"]

# Strings that end a turn without being part of it (template end-of-turn / eos markers).
END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
_PROTOCOL_TAGS = ("think", "search", "answer", "information", "tool_call", "tool_response")


@dataclass
class ToolCall:
    name: str
    arguments: dict


@dataclass
class Turn:
    """What one agent turn asked for. Exactly one of ``calls``/``answer``/``error`` is set."""

    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None

    @property
    def kind(self) -> str:
        return ("error" if self.error is not None else "answer" if self.answer is not None
                else "tool")


def strip_end(text: str, markers: tuple[str, ...] = END_MARKERS) -> str:
    """The turn without trailing end-of-turn markers and whitespace."""
    changed = True
    while changed:
        changed = False
        text = text.rstrip()
        for m in markers:
            if text.endswith(m):
                text = text[: -len(m)]
                changed = True
    return text


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` (balanced braces), or ``None``."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j].strip()
                j += 1
        start = text.rfind("\\boxed", 0, start)
    return None


def _tag_problem(text: str, tags: tuple[str, ...]) -> str | None:
    """Why ``text`` (outside an action) has badly formed tags, or ``None``."""
    for tag in tags:
        opens, closes = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        if tag == "think":
            depth = 0
            for m in re.finditer(r"</?think>", text):
                depth += 1 if m.group(0) == "<think>" else -1
                if depth not in (0, 1):
                    return "nested or stray <think> tags: write <think> … </think> once per thought"
            if depth:
                return "unclosed <think>: close it with </think> before the action"
        elif opens or closes:
            if tag in ("information", "tool_response"):
                return f"the turn writes <{tag}> itself: only the environment writes <{tag}> blocks"
            return f"unclosed or stray <{tag}> tag"
    return None


def _tag_usage(tools: dict[str, str]) -> str:
    """What to write, in Search-R1's words (its invalid-action text for the search tool)."""
    said = " ".join(f"If I want to {'search' if t == 'search' else 'use ' + t}, I should put "
                    f"the {a} between <{t}> and </{t}>." for t, a in tools.items())
    return (f"{said} If I want to give the final answer, I should put the answer between "
            "<answer> and </answer>.").strip()


class TagParser:
    """Search-R1 tag turns. ``tools`` are the tag names the env executes (``search``, …)."""

    def __init__(self, tools: dict[str, str], *, boxed: bool = False, max_chars: int = 16384):
        # tools: tag name -> the argument the tag's text is passed as (e.g. search -> query)
        self.tools = dict(tools)
        self.boxed = boxed
        self.max_chars = max_chars
        self._actions = tuple(dict.fromkeys([*self.tools, "answer"]))
        self._all_tags = tuple(dict.fromkeys([*_PROTOCOL_TAGS, *self.tools]))

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(f"</{t}>" for t in [*self.tools, "answer"])

    def usage(self) -> str:
        return _tag_usage(self.tools)

    def parse(self, text: str) -> Turn:
        if len(text) > self.max_chars:
            return Turn(error=f"the turn is {len(text)} characters long (limit {self.max_chars})")
        text = strip_end(text)
        # The action is the block closed first (generation stops at the first closing tag).
        # Plain str.find scans keep parsing linear on degenerate turns ("<answer>" x 2000),
        # where a lazy regex with a backreference goes quadratic.
        close, tag = min(((text.find(f"</{t}>"), t) for t in self._actions
                          if f"</{t}>" in text), default=(-1, None))
        if tag is None:
            if self.boxed and (boxed := last_boxed(text)) is not None:
                problem = _tag_problem(text, self._all_tags)
                if problem:
                    return Turn(error=problem)
                return Turn(answer=boxed) if boxed else Turn(error="empty \\boxed{} answer")
            return Turn(error="no action found")
        start = text.rfind(f"<{tag}>", 0, close)
        if start == -1:
            return Turn(error=f"</{tag}> without an opening <{tag}>")
        content = text[start + len(tag) + 2: close].strip()
        before = text[:start]
        problem = _tag_problem(before, self._all_tags)
        if problem:
            return Turn(error=problem)
        for t in self._all_tags:
            if f"<{t}>" in content or f"</{t}>" in content:
                return Turn(error=f"<{t}> inside <{tag}>: tags cannot be nested")
        if not content:
            return Turn(error=f"empty <{tag}></{tag}> block")
        if tag == "answer":
            return Turn(answer=content)
        return Turn(calls=[ToolCall(tag, {self.tools[tag]: content})])


class SearchR1Parser:
    """Search-R1's own reading of a tag turn (``search_r1/llm_agent/generation.py``), for
    parity with its training: ``_postprocess_responses`` cuts the turn after the first
    ``</search>``, else after the first ``</answer>``; ``postprocess_predictions`` takes the
    first ``<(search|answer)>(.*?)</\\1>`` block (``re.DOTALL``), content stripped, as the
    action; no block is an invalid action. Nothing else is checked, so an unclosed
    ``<think>``, a stray ``</think>``, an answer inside ``<think>``, an empty block, a
    model-written ``<information>`` or an unclosed ``<search>`` before a complete block are
    all valid. The answer graded is the turn's last ``<answer>…</answer>`` block, the one
    Search-R1's reward (``qa_em.extract_solution``) reads. Other tools' tags come before
    ``answer`` in the cut, as ``search`` does. Linear time (``str.find``), same result as
    the regex."""

    def __init__(self, tools: dict[str, str], *, max_chars: int = 16384):
        self.tools = dict(tools)
        self.max_chars = max_chars
        self.boxed = False
        self._actions = tuple(dict.fromkeys([*self.tools, "answer"]))

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(f"</{t}>" for t in self._actions)

    def usage(self) -> str:
        return _tag_usage(self.tools)

    def parse(self, text: str) -> Turn:
        if len(text) > self.max_chars:
            return Turn(error=f"the turn is {len(text)} characters long (limit {self.max_chars})")
        text = strip_end(text)  # Search-R1 decodes with skip_special_tokens=True
        for tag in self._actions:
            cut = text.find(f"</{tag}>")
            if cut != -1:
                text = text[: cut + len(tag) + 3]
                break
        found = []  # (start, tag, content) of each tag's first complete block
        for tag in self._actions:
            i = text.find(f"<{tag}>")
            j = text.find(f"</{tag}>", i + len(tag) + 2) if i != -1 else -1
            if j != -1:
                found.append((i, tag, text[i + len(tag) + 2: j]))
        if not found:
            return Turn(error="no action found")
        _, tag, content = min(found)
        if tag == "answer":
            return Turn(answer=_blocks_nonoverlapping(text, "answer")[-1].strip())
        return Turn(calls=[ToolCall(tag, {self.tools[tag]: content.strip()})])


def _blocks_nonoverlapping(text: str, tag: str) -> list[str]:
    """What ``re.findall(r"<tag>(.*?)</tag>", text, re.DOTALL)`` returns, in linear time."""
    open_, close = f"<{tag}>", f"</{tag}>"
    out, pos = [], 0
    while (i := text.find(open_, pos)) != -1 and (j := text.find(close, i + len(open_))) != -1:
        out.append(text[i + len(open_): j])
        pos = j + len(close)
    return out


def _blocks(text: str, tag: str) -> tuple[list[str], str | None]:
    """The contents of the ``<tag>…</tag>`` blocks of ``text`` in order, or why they are
    malformed (unclosed, nested, a stray closing tag). Linear time."""
    open_, close = f"<{tag}>", f"</{tag}>"
    out, pos = [], 0
    while True:
        i, j = text.find(open_, pos), text.find(close, pos)
        if i == -1 or (j != -1 and j < i):
            return out, (None if j == -1 else f"stray {close} without {open_}")
        j = text.find(close, i + len(open_))
        if j == -1:
            return out, f"unclosed {open_}: close it with {close}"
        inner = text[i + len(open_): j]
        if open_ in inner:
            return out, f"nested {open_} blocks"
        out.append(inner)
        pos = j + len(close)


class JsonToolParser:
    """Chat-template tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    def __init__(self, tools: dict[str, dict], *, boxed: bool = False, max_calls: int = 4,
                 max_chars: int = 16384):
        # tools: name -> JSON schema of its arguments
        self.tools = dict(tools)
        self.boxed = boxed
        self.max_calls = max_calls
        self.max_chars = max_chars

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return ()  # a tool-call turn ends with the end-of-turn token

    def usage(self) -> str:
        names = ", ".join(sorted(self.tools)) or "none"
        return ('To call a tool, write <tool_call>{"name": NAME, "arguments": {...}}</tool_call> '
                f"(tools: {names}); to finish, write the answer between <answer> and </answer>.")

    def parse(self, text: str) -> Turn:
        if len(text) > self.max_chars:
            return Turn(error=f"the turn is {len(text)} characters long (limit {self.max_chars})")
        text = strip_end(text)
        blocks, problem = _blocks(text, "tool_call")
        if problem:
            return Turn(error=problem)
        if not blocks:
            return self._answer(text)
        if len(blocks) > self.max_calls:
            return Turn(error=f"{len(blocks)} tool calls in one turn (limit {self.max_calls})")
        calls = []
        for raw in blocks:
            call = self._call(raw)
            if isinstance(call, str):
                return Turn(error=call)
            calls.append(call)
        return Turn(calls=calls)

    def _answer(self, text: str) -> Turn:
        answers, problem = _blocks(text, "answer")
        if problem:
            return Turn(error=problem)
        if answers:
            ans = answers[-1].strip()
            return Turn(answer=ans) if ans else Turn(error="empty <answer></answer> block")
        if self.boxed and (boxed := last_boxed(text)) is not None:
            return Turn(answer=boxed) if boxed else Turn(error="empty \\boxed{} answer")
        return Turn(error="neither a tool call nor an answer")

    def _call(self, raw: str) -> ToolCall | str:
        try:
            obj = json.loads(raw.strip())
        except (json.JSONDecodeError, RecursionError) as e:
            return f"the tool call is not valid JSON ({type(e).__name__})"
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return 'a tool call must be a JSON object {"name": NAME, "arguments": {...}}'
        name, args = obj["name"], obj.get("arguments", {})
        if isinstance(args, str):  # some models double-encode the arguments
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError):
                return f"the arguments of {name!r} are not a JSON object"
        if name not in self.tools:
            return (f"unknown tool {name[:64]!r}; available: "
                    f"{', '.join(sorted(self.tools)) or 'none'}")
        if not isinstance(args, dict):
            return f"the arguments of {name!r} must be a JSON object"
        problem = check_arguments(args, self.tools[name])
        if problem:
            return f"bad arguments for {name!r}: {problem}"
        return ToolCall(name, args)


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "array": list, "object": dict}


def check_arguments(args: dict, schema: dict) -> str | None:
    """A small JSON-schema check (required keys, known keys, top-level types)."""
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in args:
            return f"missing required argument {key!r}"
    for key, value in args.items():
        if key not in props:
            if schema.get("additionalProperties", False) is False:
                return f"unknown argument {str(key)[:64]!r}; expected {sorted(props)}"
            continue
        typ = props[key].get("type")
        py = _JSON_TYPES.get(typ)
        if py is not None and (not isinstance(value, py) or (typ in ("integer", "number")
                                                             and isinstance(value, bool))):
            return f"argument {key!r} must be of type {typ}"
    return None
