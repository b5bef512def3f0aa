"""What an eval of 300 questions costs against an RL step, by ``eval.chunk``: one JSON line.

The real-LM recipe's evals (``smollm2-search``, the bf16 vLLM engine) played all 300 dev
questions at once and took 1.7-1.9 median RL steps (docs/results/real_lm.md). Played all at
once, the episodes' KV cache (``generation.vllm_kv_cache_gb``, 1 GB) holds only part of the
conversations, so each turn prefills evicted ones again; ``eval.chunk=K`` plays K episodes
through all their turns before the next K start. Here the kept run's final adapter
(``--run``, default ``docs/results/real_lm/rl-v2-seed0``) is scored by ``agentsearch eval``
with each chunk size in turn, in one run, alternating the order over ``--rounds``; each
reports the episodes' seconds (``time/eval``, the engine's start excluded) and dev EM, and
the figure is their median over the run's median RL step (``time/step`` of its record).

    python scripts/bench_eval_chunk.py --chunks 0 64 --rounds 1 \\
        --out docs/results/real_lm/bench_eval_chunk.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentsearch.core.provenance import (  # noqa: E402
    ALLOW_DIRTY_HELP,
    emit_records,
    require_clean,
)
from agentsearch.recipes.runner import agentsearch_eval  # noqa: E402

RUN = ROOT / "docs" / "results" / "real_lm" / "rl-v2-seed0"


def eval_once(run: Path, chunk: int, limit: int) -> dict:
    res = agentsearch_eval("--run", str(run), "--split", "dev", "--limit", str(limit),
                           f"eval.chunk={chunk}", "threads=2", threads=2)
    return {"seconds": res["time/eval"], "dev_em": res["eval/mean_at_n"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=RUN)
    ap.add_argument("--chunks", type=int, nargs="+", default=[0, 64])
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = ap.parse_args()
    prov = require_clean("bench_eval_chunk", a.allow_dirty)
    rows = [json.loads(x) for x in (a.run / "metrics.jsonl").open()]
    step_s = statistics.median(r["time/step"] for r in rows if "time/step" in r)
    runs: dict[int, list[dict]] = {c: [] for c in a.chunks}
    for r in range(a.rounds):
        for chunk in (a.chunks if r % 2 == 0 else a.chunks[::-1]):
            runs[chunk].append(eval_once(a.run, chunk, a.limit))
            print(f"[bench_eval_chunk] chunk {chunk}: {runs[chunk][-1]}", file=sys.stderr,
                  flush=True)
    line = {"bench": "eval_chunk", "run": str(a.run.resolve().relative_to(ROOT)),
            "questions": a.limit, "median_step_s": step_s, "rounds": a.rounds, "provenance": prov}
    for chunk, got in runs.items():
        seconds = statistics.median(g["seconds"] for g in got)
        line[f"chunk{chunk}"] = {"seconds": seconds, "steps": seconds / step_s,
                                 "dev_em": [g["dev_em"] for g in got]}
    emit_records([line], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
