"""Baselines of the real-text task (``agentsearch/WikiSearch-v0``), one JSON line each.

Retrieval (no model): for each question of a split, whether its gold summary is in the top
1 / 3 / 10 of BM25 (bm25s) and dense FAISS (all-MiniLM-L6-v2, flat) searched with the
question itself, and whether the answer string is in the top 3's text.

Answering (SmolLM2-135M-Instruct as shipped, no adapter, greedy, vLLM): one turn, no tool,
with no passage (closed book), the gold summary (oracle) or BM25's top 3 for the question in
the prompt (``env_kwargs.context``: none / gold / retrieved). Two scores: exact match of the
``<answer>`` (the task's reward) and "in reply": a golden answer's normalised words occur in
the normalised reply, format ignored (the base model seldom writes the tags).

    python scripts/wiki_baselines.py --split dev --out docs/results/real_lm/baselines.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentsearch.core.provenance import (  # noqa: E402
    ALLOW_DIRTY_HELP,
    emit_records,
    require_clean,
)


def retrieval_row(kind: str, split: str, rows: list[dict], prov: dict) -> dict:
    from agentsearch.data.wiki_questions import wiki_dir
    from agentsearch.envs.rewards import normalize_answer
    from agentsearch.retrievers.index import folder_index, load_retriever

    t0 = time.perf_counter()
    retriever = load_retriever(folder_index(wiki_dir(), kind))
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits = retriever.search([r["question"] for r in rows], 10)
    search_s = time.perf_counter() - t0
    at = defaultdict(float)
    for r, hs in zip(rows, hits):
        ids = [h.doc_id for h in hs]
        gold = set(r["gold_doc_ids"])
        for k in (1, 3, 10):
            at[f"recall_at_{k}"] += bool(gold & set(ids[:k]))
        top3 = f" {normalize_answer(' '.join(h.text for h in hs[:3]))} "
        at["answer_in_top3"] += any(f" {normalize_answer(g)} " in top3
                                    for g in r["golden_answers"])
    return {"bench": "wiki_retrieval", "kind": kind, "split": split, "questions": len(rows),
            **{k: round(v / len(rows), 4) for k, v in at.items()},
            "index_load_or_build_s": round(built, 1), "search_s": round(search_s, 2),
            "provenance": prov}


def answering_rows(split: str, contexts: list[str], limit: int, prov: dict) -> list[dict]:
    from agentsearch.core.config import apply_overrides
    from agentsearch.envs.rewards import normalize_answer
    from agentsearch.rollout import EventLoop, SamplingParams, rollout
    from agentsearch.trainer.eval import eval_envs
    from agentsearch.trainer.setup import build_backend, build_policy
    from agentsearch.trainer.train_config import TrainConfig

    out, backend = [], None
    with EventLoop() as events:
        for context in contexts:
            cfg = apply_overrides(TrainConfig, "smollm2", [
                "env=agentsearch/WikiSearch-v0", f"env_kwargs.context={context}",
                "generation.backend=vllm", "lora.enabled=false", "generation.max_new_tokens=48",
                "max_turns=1"])
            if backend is None:
                model, tok = build_policy(cfg)
                backend = build_backend(cfg, model, tok)
                events.own(backend)
            envs, tasks = eval_envs(cfg, split, None, limit, 1)
            events.own(envs)
            t0 = time.perf_counter()
            params = SamplingParams(max_new_tokens=48, temperature=0.0, seed=0)
            episodes, stats = rollout(envs, tasks, backend, params, n_per_task=1, max_turns=1,
                                      seed=0, max_seq_len=cfg.max_seq_len, loop=events)
            wall = time.perf_counter() - t0
            by_type: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for task, ep in zip(tasks, episodes):
                reply = tok.decode([t for t, m in zip(ep.token_ids, ep.action_mask) if m],
                                   skip_special_tokens=True)
                said = f" {normalize_answer(reply)} "
                hit = any(f" {normalize_answer(g)} " in said for g in task["golden_answers"])
                by_type[task["type"]].append((float(bool(ep.answer_correct)), float(hit)))
            every = [v for vs in by_type.values() for v in vs]
            out.append({
                "bench": "wiki_answering", "model": "smollm2 (no adapter)", "context": context,
                "split": split, "questions": len(every),
                "em": round(sum(v[0] for v in every) / len(every), 4),
                "in_reply": round(sum(v[1] for v in every) / len(every), 4),
                "by_type": {t: {"n": len(vs), "em": round(sum(v[0] for v in vs) / len(vs), 4),
                                "in_reply": round(sum(v[1] for v in vs) / len(vs), 4)}
                            for t, vs in sorted(by_type.items())},
                "wall_s": round(wall, 1), "tokens_generated": stats.tokens_generated,
                "provenance": prov})
            print(json.dumps({k: v for k, v in out[-1].items() if k != "provenance"}),
                  file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="dev", help="train, dev, test or people")
    ap.add_argument("--kinds", nargs="*", default=["bm25s", "dense-flat"])
    ap.add_argument("--contexts", nargs="*", default=["none", "gold", "retrieved"])
    ap.add_argument("--limit", type=int, default=0, help="questions answered (0: all)")
    ap.add_argument("--out", help="append the JSON lines to this file too")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = ap.parse_args()
    prov = require_clean("wiki_baselines", a.allow_dirty)
    from agentsearch.data import read_jsonl
    from agentsearch.data.wiki_questions import wiki_dir

    rows = list(read_jsonl(wiki_dir() / f"{a.split}.jsonl"))
    lines = [retrieval_row(k, a.split, rows, prov) for k in a.kinds]
    lines += answering_rows(a.split, a.contexts, a.limit, prov) if a.contexts else []
    emit_records(lines, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
