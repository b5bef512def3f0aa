"""Chat-template rendering for environments (jinja2 only; no tokenizer, no transformers).

Environments produce text; the rollout tokenises it. To build the prompt and the
observation that follows a turn, an env renders messages with a chat template the way
``transformers``' ``apply_chat_template(..., tokenize=False)`` does (same jinja settings,
same ``tojson``), so a tokenizer is not needed to run an env.

``ChatFormat(None)`` uses the ChatML tool-call template shipped with agentsearch (what
``agentsearch.models.load_model`` gives every tokenizer); pass a template string (e.g.
``tokenizer.chat_template``) or a file path for another model; ``"none"`` renders no
template at all (raw text prompts, for base models).

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

__all__ = ["ChatFormat", "DEFAULT_TEMPLATE_PATH"]

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

    def __init__(self, template: str | None = None, **template_vars):
        if template is None:
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
            _compile(template)  # fail now on a broken template
            self.turn_suffix = self._assistant_suffix()

    def render(self, messages: list[dict], *, tools: list[dict] | None = None,
               add_generation_prompt: bool = False) -> str:
        if self.raw:
            return "".join(m["content"] for m in messages)
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
