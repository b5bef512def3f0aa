"""A scripted oracle search agent (a population of them), for SFT warm starts and tests.

``search_oracle(tasks, titles)`` returns a policy for ``ScriptedBackend``: for the task
whose question is in the conversation it searches the title of each gold article in turn,
then answers with the first golden answer, in either turn format. Run through
``rollout`` it yields episodes with the same token ids and action masks as sampled ones
(environment tokens masked), which is what an SFT warm start trains on::

    from agentsearch.envs import SearchEnv
    from agentsearch.warmstart.search_oracle import world_oracle
    from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout

    tasks, policy = world_oracle(split="train")
    episodes, _ = rollout(lambda: SearchEnv(), tasks[:64], ScriptedBackend(tok, policy),
                          SamplingParams(max_new_tokens=256))

``think=False`` drops the ``<think>`` sentences (shorter turns for tiny models);
``noise`` > 0 makes that share of questions start with a search for a random wrong
entity first, so the agent also sees recovery from a useless search.

``strategies`` makes the oracle a *population* of scripted agents that differ only in when
they stop searching (``STRATEGIES``); each question is assigned one, seeded, by share:

- ``thorough``: search every gold article in turn, then answer;
- ``one_search``: stop after the first search and answer with what the first article
  names on the question's path (a bridge question's intermediate entity, a comparison's
  first candidate); on single-hop questions it is the same agent as ``thorough``.

Every answer is copied from the last document the agent read, so imitating any of them
never teaches a wrong reading; only the decision to search again differs. This stands for
the under-searching of real base models, and leaves RL a decision whose payoff it can see.

``oracle_episodes`` plays the population through the *real* environment and retriever via
``ScriptedBackend``, so its trajectories have exactly the token layout of sampled ones, and
keeps only those whose answer appears in what the environment showed (retrieval missed
otherwise): the warm start never teaches answering without evidence.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

from agentsearch.rollout import Episode, SamplingParams, ScriptedBackend, rollout

__all__ = ["STRATEGIES", "check_strategies", "search_oracle", "world_oracle", "wiki_oracle",
           "oracle_episodes"]

STRATEGIES = ("thorough", "one_search")
"""When a scripted agent stops searching (see the module docstring)."""


def check_strategies(shares: dict[str, float]) -> dict[str, float]:
    """``shares`` validated: known names, non-negative, summing to 1 (ValueError otherwise)."""
    unknown = sorted(set(shares) - set(STRATEGIES))
    if unknown:
        raise ValueError(f"unknown oracle strategies {unknown}; choose from {list(STRATEGIES)}")
    if not shares or any(v < 0 for v in shares.values()):
        raise ValueError(f"strategy shares must be non-negative and not empty: {shares}")
    if abs(sum(shares.values()) - 1.0) > 1e-6:
        raise ValueError(f"strategy shares must sum to 1, got {sum(shares.values()):.4g}: {shares}")
    return {k: float(v) for k, v in shares.items()}

# the question line ends at a newline (tags prompt) or at the user turn's end (JSON prompt)
_QUESTION = re.compile(r"Question: (.*?)(?:\n|<\|im_end\|>|</s>|$)")


def search_oracle(tasks: list[dict], titles: dict[str, str], turn_format: str = "tags",
                  eos: str = "<|im_end|>", *, think: bool = True, noise: float = 0.0,
                  seed: int = 0, strategies: dict[str, float] | None = None,
                  queries: Callable[[dict], list[str]] | None = None) -> Callable[[str], str]:
    """A policy ``conversation -> turn`` for tasks with ``gold_doc_ids``; ``titles`` maps
    document ids to article titles. ``eos`` ends JSON-format turns (the template's
    end-of-turn text). ``strategies``: shares of ``STRATEGIES`` (default all ``thorough``);
    ``policy.strategy_of`` maps each question to the strategy it was given. ``queries``: a
    task's searches in order, instead of its gold articles' titles (where a title would give
    the answer away, as in the real-text task's ``name`` questions)."""
    by_question = {str(t["question"]).strip(): t for t in tasks}
    rng = random.Random(seed)
    detour = {q: rng.random() < noise for q in by_question}
    wrong = {q: rng.choice(sorted(titles.values())) for q, d in detour.items() if d}
    shares = check_strategies(strategies or {"thorough": 1.0})
    names, weights = list(shares), list(shares.values())
    srng = random.Random(seed * 7 + 1)
    strategy_of = {q: srng.choices(names, weights)[0] for q in by_question}

    def find(conversation: str) -> dict:
        for m in _QUESTION.finditer(conversation):  # the user's question line
            if (task := by_question.get(m.group(1).strip())) is not None:
                return task
        raise KeyError("the oracle does not know this conversation's question")

    def policy(conversation: str) -> str:
        task = find(conversation)
        q = str(task["question"]).strip()
        hops = (queries(task) if queries is not None
                else [titles[d] for d in task.get("gold_doc_ids", []) if d in titles])
        answer = str(task["golden_answers"][0])
        if strategy_of[q] == "one_search" and len(hops) > 1:
            hops, answer = hops[:1], hops[1]  # the name the first article gives on the path
            if task.get("type") == "comparison":
                answer = hops[0]
        if q in wrong:
            hops = [wrong[q], *hops]
        done = (conversation.count("\n\n<information>") if turn_format == "tags"
                else conversation.count("<tool_response>"))
        if done < len(hops):
            title = hops[done]
            if turn_format == "tags":
                pre = f"<think>I need to look up {title}.</think>\n" if think else ""
                return f"{pre}<search> {title} </search>"
            call = json.dumps({"name": "search", "arguments": {"query": title}})
            return f"<tool_call>\n{call}\n</tool_call>{eos}"
        if turn_format == "tags":
            pre = "<think>The documents answer it.</think>\n" if think else ""
            return f"{pre}<answer> {answer} </answer>"
        return f"<answer> {answer} </answer>{eos}"

    policy.strategy_of = strategy_of  # type: ignore[attr-defined]
    return policy


def world_oracle(split: str = "train", seed: int = 0, entities: int | None = None,
                 turn_format: str = "tags", policy_seed: int = 0,
                 **policy_kwargs) -> tuple[list[dict], Callable[[str], str]]:
    """The synthetic world's ``split`` questions and an oracle policy for them
    (``policy_kwargs``: ``think``, ``noise``, ``eos``, ``strategies`` of ``search_oracle``;
    ``policy_seed`` is its ``seed``)."""
    from agentsearch.data import read_jsonl, world_dir
    from agentsearch.data.loaders import split_contents

    folder = world_dir(seed=seed, entities=entities)
    tasks = list(read_jsonl(folder / f"{split}.jsonl"))
    titles = {row["id"]: split_contents(row["contents"])[0]
              for row in read_jsonl(folder / "corpus.jsonl")}
    return tasks, search_oracle(tasks, titles, turn_format, seed=policy_seed, **policy_kwargs)


def wiki_oracle(split: str = "train", turn_format: str = "json", policy_seed: int = 0,
                **policy_kwargs) -> tuple[list[dict], Callable[[str], str]]:
    """The real-text task's ``split`` questions and an oracle that searches what the question
    says (``wiki_questions.oracle_query``: never the answer), then answers."""
    from agentsearch.data import read_jsonl
    from agentsearch.data.wiki_questions import oracle_query, wiki_dir

    tasks = list(read_jsonl(wiki_dir() / f"{split}.jsonl"))
    return tasks, search_oracle(tasks, {}, turn_format, seed=policy_seed,
                                queries=lambda t: [oracle_query(t)], **policy_kwargs)


def _evidence_ok(ep: Episode, tok) -> bool:
    """The episode ended in an answer that appears in what the environment showed the agent."""
    answer = str(ep.info.get("answer") or "").strip()
    if not ep.terminated or not answer:
        return False
    env_ids = [t for t, m in zip(ep.token_ids[ep.prompt_len:], ep.action_mask[ep.prompt_len:])
               if not m]
    return answer in tok.decode(env_ids)


def oracle_episodes(envs, tok, *, world_seed: int = 0, world_entities: int | None = None,
                    count: int = 2000, turn_format: str = "tags", think: bool = False,
                    noise: float = 0.0, seed: int = 0, max_turns: int = 4,
                    max_seq_len: int = 1024, strategies: dict[str, float] | None = None,
                    question_types=None, world: str = "synthetic") -> list[Episode]:
    """Play the oracle (a population when ``strategies`` is given) on ``count`` shuffled
    train questions (of ``question_types``, None = all) through ``envs``, one batch of
    ``len(envs)`` episodes at a time; keep the evidence-backed trajectories. ``world``:
    ``"synthetic"`` (the world ``world_seed``) or ``"wiki"`` (the real-text task)."""
    if world == "wiki":
        tasks, policy = wiki_oracle("train", turn_format, eos=tok.eos_token or "", think=think,
                                    noise=0.0, policy_seed=seed, strategies=strategies)
    else:
        tasks, policy = world_oracle("train", seed=world_seed, entities=world_entities,
                                     turn_format=turn_format, eos=tok.eos_token or "",
                                     think=think, noise=noise, policy_seed=seed,
                                     strategies=strategies)
    if question_types is not None:
        tasks = [t for t in tasks if t.get("type") in set(question_types)]
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
