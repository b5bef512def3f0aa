"""``agentsearch diagnose``: P(correct | strategy) per question type, with strategies forced.

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
"""

from __future__ import annotations

import re
from collections import defaultdict

from agentsearch.rollout.backends import Generation, SamplingParams

__all__ = ["FORCED", "ForcedStrategyBackend", "diagnose", "main"]

FORCED = ("no_search", "one_search", "thorough")
_QUESTION = re.compile(r"Question: (.*?)(?:\n|<\|im_end\|>|$)")


class ForcedStrategyBackend:
    """Wraps a backend so that each turn opens with the tag ``strategy`` prescribes (tags
    format: ``<search>`` or ``<answer>``); ``hops`` maps a question to its number of hops."""

    def __init__(self, inner, strategy: str, hops: dict[str, int]):
        if strategy not in FORCED:
            raise ValueError(f"unknown strategy {strategy!r}; choose from {FORCED}")
        self.inner, self.strategy, self.hops = inner, strategy, hops
        self.tokenizer = inner.tokenizer
        self._tag_ids = {t: self.tokenizer.encode(t, add_special_tokens=False) for t in ("<search>", "<answer>")}

    def _tag(self, conversation: str) -> str:
        m = _QUESTION.search(conversation)
        hops = self.hops.get(m.group(1).strip(), 1) if m else 1
        searches = conversation.count("<information>")
        wanted = {"no_search": 0, "one_search": 1, "thorough": hops}[self.strategy]
        return "<search>" if searches < wanted else "<answer>"

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        tags = [self._tag(self.tokenizer.decode(p)) for p in prompts]
        forced = [self._tag_ids[t] for t in tags]
        gens = self.inner.generate([p + f for p, f in zip(prompts, forced)], params)
        return [Generation(f + g.token_ids, [0.0] * len(f) + g.logprobs, g.finish_reason)
                for f, g in zip(forced, gens)]


def diagnose(backend, envs, tasks: list[dict], *, max_new_tokens: int, max_turns: int,
             max_seq_len: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{strategy: {type: P(correct)}}`` (plus ``searches`` per type for ``natural``)."""
    from agentsearch.trainer.eval import evaluate

    hops = {str(t["question"]).strip(): int(t.get("hops", 1)) for t in tasks}
    out: dict[str, dict[str, float]] = {}
    for strategy in ("natural", *FORCED):
        b = backend if strategy == "natural" else ForcedStrategyBackend(backend, strategy, hops)
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


def main(a) -> int:
    """``agentsearch diagnose``: the table for a model (default: the preset's) or a run."""
    import json

    from rich.console import Console
    from rich.table import Table

    from agentsearch.rollout.hf import HFBackend
    from agentsearch.trainer.eval import cli_policy, eval_envs

    cfg, model, tok = cli_policy(a)
    envs, tasks = eval_envs(cfg, split=a.split, limit=a.limit, n=1)
    table = diagnose(HFBackend(model, tok), envs, tasks, max_new_tokens=cfg.generation.max_new_tokens,
                     max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len, seed=cfg.seed)
    types = sorted({k for row in table.values() for k in row if " " not in k and k != "all"})
    t = Table(title=f"P(correct | strategy), {len(tasks)} {a.split or cfg.eval.split} questions, greedy")
    for col in ["strategy", *types, "all"]:
        t.add_column(col, justify="right")
    for strategy, row in table.items():
        t.add_row(strategy, *(f"{row.get(c, 0.0):.3f}" for c in [*types, "all"]))
    Console().print(t)
    print(json.dumps({"questions": len(tasks), "table": table}))
    return 0
