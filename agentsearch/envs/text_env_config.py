"""``TextEnvConfig``: the settings every text environment shares (``TextEnv.Config``);
each environment's own config class extends it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TextEnvConfig"]


@dataclass
class TextEnvConfig:
    """Settings shared by every text environment (subclasses add their own)."""

    split: str = "train"
    """Which task split ``reset()`` samples from when no task is given."""
    turn_format: str = "tags"
    """``"tags"`` (Search-R1: ``<search>q</search>``, ``<answer>a</answer>``) or ``"json"``
    (the chat template's ``<tool_call>{...}</tool_call>``; answers in ``<answer>``)."""
    tools: tuple = ()
    """Tool names (``agentsearch.tools`` entry points), ``module:attr`` paths or tool objects."""
    tool_kwargs: dict = field(default_factory=dict)
    """Constructor arguments per tool name, e.g. ``{"python": {"time_limit_s": 2}}``."""
    parser: str = "strict"
    """How tag turns are read: ``"strict"`` (ours: a turn with badly formed tags is malformed,
    and the error observation says why) or ``"search_r1"`` (Search-R1's own: the first
    complete ``<search>``/``<answer>`` block counts whatever surrounds it, its exact invalid-
    action text, no format penalty by default; see ``parsing.SearchR1Parser``). Tags only."""
    max_turns: int = 4
    """Agent turns per episode; a turn that is not an answer on the last one truncates.
    Search-R1's ``max_turns=N`` (N search turns, then one answer turn) is ``N + 1`` here."""
    max_obs_chars: int = 2000
    """Characters kept of each tool result (longer results are cut and marked)."""
    max_obs_tokens: int | None = None
    """If set, each tool result is cut to this many tokens of the policy's tokenizer instead
    of ``max_obs_chars`` (Search-R1's ``max_obs_length``, 500; it cuts the whole observation,
    tags included, where this keeps the tags). Needs ``tokenizer=``."""
    max_action_chars: int = 16384
    """Longer turns are malformed (and the action space's bound)."""
    max_calls_per_turn: int = 4
    """Tool calls allowed in one JSON-format turn (they run concurrently)."""
    format_penalty: float | None = None
    """``reward/format`` is ``-format_penalty`` for each malformed turn; None: 0.1, or 0 with
    ``parser="search_r1"`` (Search-R1's EM reward has no format term)."""
    chat_template: str | None = None
    """None: the shipped ChatML tool template; a template string or path; ``"none"``: raw text;
    ``"policy"``: the policy tokenizer's own (``tokenizer.apply_chat_template``, e.g. Qwen2.5's
    with its default system line; raw text when it has none, as Search-R1). Needs ``tokenizer=``."""
    system_prompt: str | None = None
    """Replaces the env's default instructions (the question is still added)."""
    obs_space_chars: int = 1 << 16
    """Bound of the observation space (prompt or observation length in characters)."""

    def __post_init__(self):
        if self.turn_format not in ("tags", "json"):
            raise ValueError(f"turn_format must be 'tags' or 'json', got {self.turn_format!r}")
        if self.turn_format == "json" and self.chat_template == "none":
            raise ValueError("turn_format='json' needs a chat template (tool calls and tool "
                             "responses are template turns); use chat_template=None or a template")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.parser not in ("strict", "search_r1"):
            raise ValueError(f"parser must be 'strict' or 'search_r1', got {self.parser!r}")
        if self.parser == "search_r1" and self.turn_format != "tags":
            raise ValueError("parser='search_r1' reads Search-R1's tags: use turn_format='tags'")
        if self.max_obs_tokens is not None and self.max_obs_tokens < 1:
            raise ValueError(f"max_obs_tokens must be >= 1 (or None), got {self.max_obs_tokens}")
        if self.format_penalty is None:
            self.format_penalty = 0.0 if self.parser == "search_r1" else 0.1
        self.tools = tuple(self.tools)
