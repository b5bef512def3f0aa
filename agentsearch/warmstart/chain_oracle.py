"""A scripted population for k-hop chain questions: agents that stop searching too early.

The hard world (``env_kwargs.world_questions=chains``, ``agentsearch.data.chains``) asks
questions ``k`` articles away. Its base imitates a population that differs only in *how many
hops it executes* before answering (``CHAIN_STRATEGIES``):

- ``thorough``: search every article of the chain in turn, then answer (always right when
  the copying is right);
- ``stop1``, ``stop2``, ``stop3``: stop after 1, 2 or 3 searches and answer with the name the
  last article read gives on the path (the next hop's entity: a wrong answer that was *read*,
  never guessed). On a question of ``k <= j`` hops ``stopj`` is ``thorough``.

Shares ``{stop1: 1 - q, stop2: q(1 - q), stop3: q^2(1 - q), thorough: q^3}`` make an agent
that goes on after each hop with probability ``q``: a ``k``-hop question is answered right
with probability ``q^(k-1)`` times the copying accuracy, so the base pass rate falls with
``k`` (a dose-response), and RL must learn to go on searching *and* to stop at the right hop
(searching past the last article reads the answer entity's own article and answers wrong).

The policy wraps ``search_oracle``'s thorough agent (same turns, same formats) and only moves
the stop; ``chain_oracle_episodes`` plays it through the real env like ``oracle_episodes``,
keeping evidence-backed transcripts.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from agentsearch.rollout import Episode, SamplingParams, ScriptedBackend, rollout
from agentsearch.warmstart.search_oracle import _QUESTION, _evidence_ok, search_oracle

__all__ = ["CHAIN_STRATEGIES", "check_chain_strategies", "chain_oracle", "chain_oracle_episodes",
           "persistence_shares"]

CHAIN_STRATEGIES = ("thorough", "stop1", "stop2", "stop3")
"""How many searches a chain agent makes before answering (module docstring)."""


def check_chain_strategies(shares: dict[str, float]) -> dict[str, float]:
    """``shares`` validated: names of ``CHAIN_STRATEGIES``, non-negative, summing to 1."""
    unknown = sorted(set(shares) - set(CHAIN_STRATEGIES))
    if unknown:
        raise ValueError(f"unknown chain oracle strategies {unknown}; choose from "
                         f"{list(CHAIN_STRATEGIES)} (env_kwargs.world_questions=chains)")
    if not shares or any(v < 0 for v in shares.values()) or abs(sum(shares.values()) - 1.0) > 1e-6:
        raise ValueError(f"chain strategy shares must be non-negative and sum to 1: {shares}")
    return {k: float(v) for k, v in shares.items()}


def persistence_shares(q: float) -> dict[str, float]:
    """The population that goes on after each hop with probability ``q`` (module docstring)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    return {"stop1": 1 - q, "stop2": q * (1 - q), "stop3": q * q * (1 - q), "thorough": q ** 3}


def chain_oracle(tasks: list[dict], titles: dict[str, str], turn_format: str = "tags",
                 eos: str = "<|im_end|>", *, think: bool = False, seed: int = 0,
                 strategies: dict[str, float] | None = None) -> Callable[[str], str]:
    """A policy ``conversation -> turn`` for chain tasks (``gold_doc_ids`` in hop order);
    ``policy.strategy_of`` maps each question to the strategy it was given (seeded)."""
    shares = check_chain_strategies(strategies or {"thorough": 1.0})
    thorough = search_oracle(tasks, titles, turn_format, eos, think=think, seed=seed)
    by_question = {str(t["question"]).strip(): t for t in tasks}
    rng = random.Random(seed * 7 + 3)
    names, weights = list(shares), list(shares.values())
    strategy_of = {q: rng.choices(names, weights)[0] for q in by_question}

    def policy(conversation: str) -> str:
        m = next((m for m in _QUESTION.finditer(conversation)
                  if m.group(1).strip() in by_question), None)
        if m is None:
            raise KeyError("the chain oracle does not know this conversation's question")
        q = m.group(1).strip()
        hops = [titles[d] for d in by_question[q].get("gold_doc_ids", []) if d in titles]
        stop = len(hops) if strategy_of[q] == "thorough" else int(strategy_of[q][len("stop"):])
        done = (conversation.count("\n\n<information>") if turn_format == "tags"
                else conversation.count("<tool_response>"))
        # answer with the next hop's name, read in the last article
        if stop < len(hops) and done >= stop:
            if turn_format == "tags":
                pre = "<think>The documents answer it.</think>\n" if think else ""
                return f"{pre}<answer> {hops[stop]} </answer>"
            return f"<answer> {hops[stop]} </answer>{eos}"
        return thorough(conversation)

    policy.strategy_of = strategy_of  # type: ignore[attr-defined]
    return policy


def chain_oracle_episodes(envs, tok, *, world_seed: int = 0, world_entities: int | None = None,
                          count: int = 2000, turn_format: str = "tags", think: bool = False,
                          seed: int = 0, max_turns: int = 6, max_seq_len: int = 1024,
                          strategies: dict[str, float] | None = None, question_types=None,
                          noise: float = 0.0) -> list[Episode]:
    """Play the chain population on ``count`` shuffled train questions of the chain world
    ``world_seed`` through ``envs`` (a batch of ``len(envs)`` at a time); keep the transcripts
    whose answer appears in what the env showed. ``noise`` is refused (no detours here).

    Its play loop repeats ``search_oracle.oracle_episodes``'s on purpose: ``tiny-base``'s build
    record fingerprints that module's source, so sharing the loop would mark the shipped base
    stale without changing one transcript."""
    from agentsearch.data import read_jsonl, world_dir
    from agentsearch.data.loaders import split_contents

    if noise:
        raise ValueError("sft.noise is not supported with chain questions")
    folder = world_dir(seed=world_seed, entities=world_entities, questions="chains")
    tasks = list(read_jsonl(folder / "train.jsonl"))
    if question_types is not None:
        tasks = [t for t in tasks if t.get("type") in set(question_types)]
    titles = {row["id"]: split_contents(row["contents"])[0]
              for row in read_jsonl(folder / "corpus.jsonl")}
    policy = chain_oracle(tasks, titles, turn_format, eos=tok.eos_token or "", think=think,
                          seed=seed, strategies=strategies)
    random.Random(seed).shuffle(tasks)
    backend = ScriptedBackend(tok, policy)
    params = SamplingParams(max_new_tokens=256, temperature=1.0)
    kept = []
    for s in range(0, min(count, len(tasks)), len(envs)):
        chunk = tasks[s:min(s + len(envs), count)]
        eps, _ = rollout(envs[:len(chunk)], chunk, backend, params, max_turns=max_turns,
                         max_seq_len=max_seq_len, seed=seed + s)
        kept += [e for e in eps if _evidence_ok(e, tok)]
    return kept
