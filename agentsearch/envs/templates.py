"""Chat-template rendering for environments (jinja2 only; no tokenizer, no transformers).

Environments produce text; the rollout tokenises it. To build the prompt and the
observation that follows a turn, an env renders messages with a chat template the way
``transformers``' ``apply_chat_template(..., tokenize=False)`` does (same jinja settings,
same ``tojson``), so a tokenizer is not needed to run an env.

``ChatFormat(None)`` uses the ChatML tool-call template shipped with agentsearch (what
``agentsearch.models.load_model`` gives every tokenizer); pass a template string (e.g.
``tokenizer.chat_template``) or a file path for another model; ``"none"`` renders no
template at all (raw text prompts, for base models); ``"policy"`` with ``tokenizer=`` renders
with that tokenizer's own ``apply_chat_template`` (its template, special-token variables and
all; a tokenizer without a chat template gives raw text, as Search-R1's verl dataset does).

Observations after a turn are computed as differences of renders: render the
conversation with the new messages and keep what comes after the conversation without
them. That works for any template that renders a conversation as a prefix of its
continuations, which ``ChatFormat`` checks and reports otherwise.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from agentsearch.data.paths import CHAT_TEMPLATE

__all__ = ["ChatFormat", "DEFAULT_TEMPLATE_PATH", "cut_to_tokens"]

DEFAULT_TEMPLATE_PATH = CHAT_TEMPLATE
_MARK = "\x00ASSISTANT\x00"


@lru_cache(maxsize=16)
def _compile(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


class ChatFormat:
    """Render conversations with one chat template (or none)."""

    def __init__(self, template: str | None = None, *, tokenizer=None, **template_vars):
        self._tokenizer = None
        if template == "policy":
            if tokenizer is None:
                raise ValueError("chat_template='policy' renders with the policy's tokenizer: pass "
                                 "tokenizer= (the trainer passes its own), or name a template")
            if getattr(tokenizer, "chat_template", None):
                self._tokenizer = tokenizer
            else:  # verl's RLHFDataset: no chat template -> the prompt's raw content
                template = "none"
        if self._tokenizer is not None:
            template = tokenizer.chat_template
        elif template is None:
            template = DEFAULT_TEMPLATE_PATH.read_text(encoding="utf-8")
        elif template != "none" and "{" not in template:
            path = Path(template)
            if not path.exists():
                raise FileNotFoundError(f"chat_template {template!r} is neither a jinja template "
                                        "nor a file; pass None for the shipped ChatML template "
                                        "or 'none' for raw prompts")
            template = path.read_text(encoding="utf-8")
        self.template = template
        self.vars = template_vars
        self.raw = template == "none"
        if not self.raw:
            if self._tokenizer is None:
                _compile(template)  # fail now on a broken template
            self.turn_suffix = self._assistant_suffix()

    def render(self, messages: list[dict], *, tools: list[dict] | None = None,
               add_generation_prompt: bool = False) -> str:
        if self.raw:
            return "".join(m["content"] for m in messages)
        if self._tokenizer is not None:
            return self._tokenizer.apply_chat_template(
                messages, tools=tools or None, tokenize=False,
                add_generation_prompt=add_generation_prompt, **self.vars)
        return _compile(self.template).render(messages=messages, tools=tools or None,
                                              add_generation_prompt=add_generation_prompt,
                                              **self.vars)

    def _assistant_suffix(self) -> str:
        text = self.render([{"role": "user", "content": "U"},
                            {"role": "assistant", "content": _MARK}])
        if _MARK not in text:
            raise ValueError("the chat template does not render assistant messages' content")
        return text.split(_MARK, 1)[1]

    def close_turn(self, action: str) -> str:
        """What must follow ``action`` to end the assistant turn (the part of the
        template's end-of-turn text, e.g. ``<|im_end|>\\n``, the action does not end with)."""
        if self.raw:
            return ""
        suffix = self.turn_suffix
        for k in range(len(suffix), 0, -1):
            if action.endswith(suffix[:k]):
                return suffix[k:]
        return suffix

    def continuation(self, new_messages: list[dict], *, tools: list[dict] | None = None) -> str:
        """The text the template adds for ``new_messages`` after an assistant turn, up to and
        including the next assistant generation prompt."""
        if self.raw:
            return "".join(m["content"] for m in new_messages)
        base = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
        before = self.render(base, tools=tools)
        after = self.render(base + new_messages, tools=tools, add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("this chat template does not render a conversation as a prefix of "
                             "its continuation, so turn-by-turn observations cannot be built "
                             "from it; use the shipped template (chat_template=None)")
        return after[len(before):]


def cut_to_tokens(text: str, tokenizer, max_tokens: int) -> str:
    """The longest prefix of ``text`` that is its first ``max_tokens`` tokens (cut at the
    character offset where token ``max_tokens`` ends, so no partial character is made up)."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError):  # slow tokenizers have no offsets
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else tokenizer.decode(ids[:max_tokens])
    if len(enc["input_ids"]) <= max_tokens:
        return text
    return text[: enc["offset_mapping"][max_tokens - 1][1]]
