"""``agentsearch diagnose``: P(correct | strategy) per question type, with strategies forced.

(Math, ``agentsearch/Math-v0`` with a tool: the same with the tool call forced off and on,
per problem kind; see the end.)

RL can only raise a search agent's score where a better strategy both exists and executes
well: the diagnostic measures that *before* training. For every dev question it plays the
model three times with the decision of *when to stop searching* forced and everything else
(the queries, the answer's text) left to the model, greedy:

- ``no_search``: the first turn must start with ``<answer>``;
- ``one_search``: the first turn must search, the second must answer;
- ``thorough``: search once per hop of the question (``hops``), then answer;
- ``natural``: nothing forced (what the model does by itself).

A turn is forced by appending the tokens of its opening tag to the prompt and letting the
model continue; the rollout then treats the tag as sampled. The table says which shortcuts
pay (``no_search`` on a two-candidate comparison pays ~0.5) and how well the good strategy
executes (``thorough`` on bridge questions).

For multi-hop questions with ``gold_doc_ids`` (chains, bridge) ``hop_reach`` adds, for the
model's own (natural) episodes, the share that retrieved each hop's article and the per-hop
success P(hop j retrieved | hop j-1 retrieved), per question type: where along a chain the
model stops or goes astray.

For math the strategies are ``MATH_FORCED``: ``no_tool`` (the first turn must answer: the
problem done in the head) and ``tool`` (the first turn must call the env's tool, e.g.
``<calculator>``, the second must answer); ``natural`` reports tool calls per episode.
"""

from __future__ import annotations

import re
from collections import defaultdict

from agentsearch.rollout.backends import Generation, SamplingParams

__all__ = ["FORCED", "MATH_FORCED", "ForcedStrategyBackend", "diagnose", "hop_reach", "main"]

FORCED = ("no_search", "one_search", "thorough")
MATH_FORCED = ("no_tool", "tool")
_CALLS = {"no_search": 0, "one_search": 1, "no_tool": 0, "tool": 1}  # thorough: the question's hops
_QUESTION = re.compile(r"Question: (.*?)(?:\n|<\|im_end\|>|$)")


class ForcedStrategyBackend:
    """Wraps a backend so that each turn opens with the tag ``strategy`` prescribes (tags
    format: ``<search>`` (``<{tool}>``) or ``<answer>``); ``hops`` maps a question to its
    number of hops (``thorough`` only)."""

    def __init__(self, inner, strategy: str, hops: dict[str, int] | None = None, *,
                 tool: str = "search"):
        if strategy not in FORCED + MATH_FORCED:
            raise ValueError(f"unknown strategy {strategy!r}; choose from {FORCED + MATH_FORCED}")
        self.inner, self.strategy, self.hops = inner, strategy, hops or {}
        self.tokenizer = inner.tokenizer
        self.call = f"<{tool}>"
        self._tag_ids = {t: self.tokenizer.encode(t, add_special_tokens=False)
                         for t in (self.call, "<answer>")}

    def _tag(self, conversation: str) -> str:
        if self.strategy == "thorough":
            m = _QUESTION.search(conversation)
            wanted = self.hops.get(m.group(1).strip(), 1) if m else 1
        else:
            wanted = _CALLS[self.strategy]
        # what the env shows (a prompt may name the tag)
        calls = conversation.count("\n\n<information>")
        return self.call if calls < wanted else "<answer>"

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        tags = [self._tag(self.tokenizer.decode(p)) for p in prompts]
        forced = [self._tag_ids[t] for t in tags]
        gens = self.inner.generate([p + f for p, f in zip(prompts, forced)], params)
        return [Generation(f + g.token_ids, [0.0] * len(f) + g.logprobs, g.finish_reason)
                for f, g in zip(forced, gens)]


def diagnose(backend, envs, tasks: list[dict], *, max_new_tokens: int, max_turns: int,
             max_seq_len: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{strategy: {type: P(correct)}}`` (plus ``searches`` per type for ``natural``: tool
    calls per episode). ``envs`` of ``agentsearch/Math-v0`` get ``MATH_FORCED`` with their
    first tool; others (search) ``FORCED``."""
    from agentsearch.envs.math import MathEnv
    from agentsearch.trainer.eval import evaluate

    hops = {str(t["question"]).strip(): int(t.get("hops", 1)) for t in tasks}
    math = isinstance(envs[0], MathEnv)
    if math and not envs[0].tools:
        raise ValueError("diagnose for math forces a tool call: give the env a tool "
                         "(env_kwargs.tools=[calculator])")
    tool = next(iter(envs[0].tools)) if math else "search"
    out: dict[str, dict[str, float]] = {}
    for strategy in ("natural", *(MATH_FORCED if math else FORCED)):
        b = backend if strategy == "natural" \
            else ForcedStrategyBackend(backend, strategy, hops, tool=tool)
        res = evaluate(b, envs, tasks, n=1, temperature=0.0, max_new_tokens=max_new_tokens,
                       max_turns=max_turns, max_seq_len=max_seq_len, seed=seed)
        row: dict[str, float] = defaultdict(float)
        for k, v in res.items():
            parts = k.split("/")
            if len(parts) == 3 and parts[2] == "mean_at_n":
                row[parts[1]] = v
            if strategy == "natural" and len(parts) == 3 and parts[2] == "searches":
                row[f"{parts[1]} searches"] = v
        row["all"] = res["eval/mean_at_n"]
        out[strategy] = dict(row)
    return out


def hop_reach(backend, envs, tasks: list[dict], titles: dict[str, str], *, max_new_tokens: int,
              max_turns: int, max_seq_len: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per question type with two or more gold articles: ``reach{j}`` (the share of greedy
    episodes whose observations showed hop j's article, j = 1..k) and ``hop{j}`` (P(hop j
    shown | hop j-1 shown), j >= 2). ``titles`` maps document ids to titles."""
    from agentsearch.rollout import rollout

    multi = [t for t in tasks if len(t.get("gold_doc_ids") or []) > 1]
    if not multi:
        return {}
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    episodes, _ = rollout(envs, multi, backend, params, max_turns=max_turns,
                          max_seq_len=max_seq_len, seed=seed)
    tok = backend.tokenizer
    shown: dict[str, list[list[bool]]] = defaultdict(list)
    for task, ep in zip(multi, episodes):
        env_text = tok.decode([t for t, m in zip(ep.token_ids[ep.prompt_len:],
                                                 ep.action_mask[ep.prompt_len:]) if not m])
        shown[str(task.get("type", "all"))].append([f'(Title: "{titles.get(d, d)}")' in env_text
                                                    for d in task["gold_doc_ids"]])
    out: dict[str, dict[str, float]] = {}
    for typ, rows in sorted(shown.items()):
        k = max(len(r) for r in rows)
        row: dict[str, float] = {}
        for j in range(k):
            have = [r for r in rows if len(r) > j]
            reached = [all(r[:j + 1]) for r in have]
            row[f"reach{j + 1}"] = sum(reached) / len(have)
            if j:
                before = [r for r in have if all(r[:j])]
                row[f"hop{j + 1}"] = (sum(r[j] for r in before) / len(before) if before
                                      else float("nan"))
        out[typ] = row
    return out


def _titles(cfg) -> dict[str, str]:
    """Document id -> title of the synthetic world the config's env searches ({} otherwise)."""
    from agentsearch.data import read_jsonl, world_dir
    from agentsearch.data.loaders import split_contents

    kw = cfg.env_kwargs
    if cfg.env != "agentsearch/Search-v0" or kw.get("index") or kw.get("questions"):
        return {}
    folder = world_dir(seed=kw.get("world_seed", 0), entities=kw.get("world_entities"),
                       questions=kw.get("world_questions", "default"))
    return {r["id"]: split_contents(r["contents"])[0] for r in read_jsonl(folder / "corpus.jsonl")}


def main(a) -> int:
    """``agentsearch diagnose``: the table for a model (default: the preset's) or a run."""
    import json

    from rich.console import Console
    from rich.table import Table

    from agentsearch.rollout.hf import HFBackend
    from agentsearch.trainer.eval import cli_policy, eval_envs

    cfg, model, tok = cli_policy(a)
    envs, tasks = eval_envs(cfg, split=a.split, limit=a.limit, n=1)
    table = diagnose(HFBackend(model, tok), envs, tasks,
                     max_new_tokens=cfg.generation.max_new_tokens, max_turns=cfg.max_turns,
                     max_seq_len=cfg.max_seq_len, seed=cfg.seed)
    types = sorted({k for row in table.values() for k in row if " " not in k and k != "all"})
    t = Table(title=f"P(correct | strategy), {len(tasks)} {a.split or cfg.eval.split} "
                    "questions, greedy")
    for col in ["type", *table, "natural: tool calls / episode"]:
        t.add_column(col, justify="right")
    for typ in [*types, "all"]:  # one row per question type (math: problem kind)
        calls = table["natural"].get(f"{typ} searches")
        t.add_row(typ, *(f"{row.get(typ, 0.0):.3f}" for row in table.values()),
                  "" if calls is None else f"{calls:.2f}")
    Console().print(t)
    titles = _titles(cfg)
    hops = hop_reach(HFBackend(model, tok), envs, tasks, titles,
                     max_new_tokens=cfg.generation.max_new_tokens, max_turns=cfg.max_turns,
                     max_seq_len=cfg.max_seq_len, seed=cfg.seed) if titles else {}
    if hops:
        h = Table(title="per-hop success of the model's own episodes: "
                        "P(hop j's article shown | hop j-1's)")
        width = max(sum(1 for key in row if key.startswith("hop")) for row in hops.values()) + 1
        for col in ["type", *[f"hop {j}" for j in range(2, width + 1)], "all hops shown"]:
            h.add_column(col, justify="right")
        for typ, row in hops.items():
            k = sum(1 for key in row if key.startswith("reach"))
            h.add_row(typ, *(f"{row[f'hop{j}']:.3f}" if f"hop{j}" in row else ""
                             for j in range(2, width + 1)),
                      f"{row[f'reach{k}']:.3f}")
        Console().print(h)
    print(json.dumps({"questions": len(tasks), "table": table, "hops": hops}))
    return 0
