"""The generation-backend contract, and a scripted backend that "generates" given text.

A backend turns token-id prompts into sampled continuations with their log-probs:
``generate(prompts, params) -> list[Generation]``, one call for a whole batch (on small
models generation is launch-bound: batch every episode's turn into one call). Backends:
``HFBackend`` (transformers ``generate``, ``hf.py``), ``VLLMBackend`` (``vllm.py``), and
``ScriptedBackend`` below, which lets a scripted agent (an oracle for SFT warm starts, a
test) drive the same rollout code as a model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["SamplingParams", "Generation", "GenerationBackend", "ScriptedBackend", "cut_at_stop",
           "derive_seed"]


def derive_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed for ``(seed, *keys)``: a hash, so distinct tuples give distinct seeds
    (a collision among a million seeds has odds ~1e-7) and nested calls compose. A ``str``
    key names a stream (``derive_seed(seed, step, "reset")``: the env resets of a step).

    Generation seeds are derived in three places, each from the one above: the trainer's
    step (``derive_seed(cfg.seed, step)``), the rollout's turn (``derive_seed(params.seed,
    turn)``) and a batch's request (``derive_seed(turn_seed, i)`` in the vLLM backend). Sums
    such as ``seed * 1_000_003 + step + 1000 * turn + i`` collide (step s turn 1 = step
    s + 1000 turn 0); hashes do not. Deterministic across processes (not Python's ``hash``).
    """
    data = ",".join(repr(x if isinstance(x, str) else int(x)) for x in (seed, *keys)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    """0 = greedy (its logprobs are then those of the unscaled logits)."""
    top_p: float = 1.0
    top_k: int = 0
    """0 = off."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends with the token that completes one."""
    seed: int | None = None


@dataclass
class Generation:
    token_ids: list[int]
    """The sampled ids, including the eos/stop-completing token; no padding."""
    logprobs: list[float]
    """Log-prob of each sampled token under ``logits / temperature`` (before top-k/top-p)."""
    finish_reason: str
    """``"stop"`` (a stop string), ``"eos"``, or ``"length"``."""
    version: int | None = None
    """The weight version that generated it (streaming engines set it; see ``engines``)."""


@runtime_checkable
class GenerationBackend(Protocol):
    """``generate`` may also be ``async def`` (a backend over an async engine, such as the
    OpenRLHF agent executor's): ``arollout`` awaits what it returns when it is awaitable.
    A backend with ``accepts_images = True`` is also called with ``images=`` (per prompt,
    the episode's images so far, in order) when an env gives images; a text-only backend
    on such an env is a ``ValueError``."""

    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to and including the earliest-ending stop string, and whether one was found."""
    ends = [i + len(s) for s in stop if s and (i := text.find(s)) != -1]
    return (text[: min(ends)], True) if ends else (text, False)


class ScriptedBackend:
    """A backend whose policy is a Python function of the conversation text.

    ``policy(conversation) -> turn_text`` receives the decoded conversation so far (prompt,
    earlier turns and observations, special tokens included) and returns the next turn.
    The text is cut after the first stop string, tokenised, and returned with logprob 0.0
    for every token, so scripted trajectories (e.g. an oracle agent's, for an SFT warm
    start) come out of ``rollout`` with the same token ids and action masks as sampled
    ones. End a turn with the tokenizer's eos text (e.g. ``<|im_end|>``) to end it with eos.
    """

    accepts_images = True  # a script reads text; an env's images are simply not its input

    def __init__(self, tokenizer, policy: Callable[[str], str]):
        self.tokenizer = tokenizer
        self.policy = policy

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 images: list[list] | None = None) -> list[Generation]:
        out = []
        eos = self.tokenizer.eos_token_id
        for prompt in prompts:
            conversation = self.tokenizer.decode(prompt, skip_special_tokens=False)
            text, stopped = cut_at_stop(self.policy(conversation), tuple(params.stop))
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if eos is not None and eos in ids:
                ids, reason = ids[: ids.index(eos) + 1], "eos"
            else:
                reason = "stop" if stopped else "length"
            if len(ids) > params.max_new_tokens:
                ids, reason = ids[: params.max_new_tokens], "length"
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=reason))
        return out
