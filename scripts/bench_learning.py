"""Does RL visibly improve the agent? A preset's setting over seeds and replay kinds.

For each seed and replay kind, trains ``--preset`` (default ``tiny``: RL from the shipped base
``tiny-base``) into ``OUT/<kind>-s<seed>`` (skipped when finished: resumable), then evaluates
the trained model, greedy, on the dev split (from the runs' own evals: before RL is the
step-0 eval) and the test split, and Mean@4 at the sampling temperature on dev. For the
search presets also the base on those, and both on a world seed neither has seen
(``--unseen-world``). Runs go ``--parallel`` at a time with ``--threads`` torch threads each.
Prints one JSON line; ``OUT/pareto.png`` plots dev score vs training wall-clock for all runs.

    python scripts/bench_learning.py                          # seeds 0 1 2, hdr and none
    python scripts/bench_learning.py --seeds 0 --kinds hdr steps=60
    python scripts/bench_learning.py --preset tiny-vision --kinds hdr --parallel 1 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.recipes.runner import agentsearch_cli, subprocess_env, train_run
from agentsearch.trainer.metrics import read_metrics


def _eval(*args: str, threads: int = 1) -> dict:
    out = agentsearch_cli("eval", *args, f"threads={threads}", threads=threads)
    return json.loads(out[out.index("{"):])


def _types(rec: dict) -> list[str]:
    """The question types an eval row reports (``eval/<type>/mean_at_n``)."""
    return sorted(k.split("/")[1] for k in rec if k.startswith("eval/") and k.count("/") == 2
                  and k.endswith("/mean_at_n"))


def one_run(out: Path, preset: str, kind: str, seed: int, extra: list[str], unseen: int | None,
            threads: int = 1) -> dict:
    run = out / f"{kind}-s{seed}"
    t0 = time.perf_counter()
    trained = train_run(run, preset, [f"seed={seed}", f"replay={kind}", f"threads={threads}",
                                      "tensorboard=false", *extra],
                        threads=threads, log_name="train.log")
    recs = [r for r in read_metrics(run) if "eval/mean_at_n" in r]
    first, last = recs[0], recs[-1]
    res = {"run": str(run), "kind": kind, "seed": seed, "dev_before": first["eval/mean_at_n"],
           "dev_after": last["eval/mean_at_n"], "train_seconds": last["time/train_cumulative"],
           "by_type": {t: {k: (first.get(f"eval/{t}/{k}"), last.get(f"eval/{t}/{k}"))
                           for k in ("mean_at_n", "searches", "one_search_answer",
                                     "no_search_answer")}
                       for t in _types(last)}}
    cache = run / "bench_evals.json"
    if cache.exists():
        res.update(json.loads(cache.read_text()))
    else:
        ev = {"test_after": _eval("--run", str(run), "--split", "test",
                                  threads=threads)["eval/mean_at_n"],
              "mean_at_4_after": _eval("--run", str(run), "--n", "4",
                                       threads=threads)["eval/mean_at_n"]}
        if unseen is not None:
            ev["unseen_after"] = _eval("--run", str(run), f"env_kwargs.world_seed={unseen}",
                                       threads=threads)["eval/mean_at_n"]
        cache.write_text(json.dumps(ev))
        res.update(ev)
    res["wall_s"] = time.perf_counter() - t0 if trained else None  # None: finished before
    print(f"[bench_learning] {kind} seed {seed}: dev {res['dev_before']:.3f} -> "
          f"{res['dev_after']:.3f}", file=sys.stderr, flush=True)
    return res


def base_evals(out: Path, unseen: int) -> dict:
    cache = out / "base_evals.json"
    if cache.exists():
        return json.loads(cache.read_text())
    base = ["--preset", "tiny", "--model", "tiny-base", "threads=1"]
    ev = {"test": _eval(*base, "--split", "test")["eval/mean_at_n"],
          "unseen": _eval(*base, f"env_kwargs.world_seed={unseen}")["eval/mean_at_n"],
          "mean_at_4": _eval(*base, "--n", "4")["eval/mean_at_n"]}
    cache.write_text(json.dumps(ev))
    return ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/bench_learning")
    ap.add_argument("--preset", default="tiny",
                    help="the setting to train (search presets get world checks)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--kinds", nargs="+", default=["hdr", "none"])
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--unseen-world", type=int, default=5000, help="a world seed no model has seen")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every training run")
    a = ap.parse_args()
    prov = require_clean("bench_learning", a.allow_dirty)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(k, s) for k in a.kinds for s in a.seeds]
    search = a.preset == "tiny"  # the shipped base and the world checks are the search demo's
    unseen = a.unseen_world if search else None
    with ThreadPoolExecutor(a.parallel) as pool:
        base_f = pool.submit(base_evals, out, a.unseen_world) if search else None
        runs = list(pool.map(lambda ks: one_run(out, a.preset, ks[0], ks[1], a.overrides, unseen,
                                                a.threads),
                             jobs))
        base = base_f.result() if base_f else None
    subprocess.run([sys.executable, "-m", "agentsearch", "pareto", *[r["run"] for r in runs],
                    "--out", str(out / "pareto.png")], env=subprocess_env(1),
                   stdout=subprocess.DEVNULL, check=False)
    summary = {"bench": "learning", "preset": a.preset,
               "machine": f"{platform.machine()} {os.cpu_count()} cores", "overrides": a.overrides,
               "base": base,
               "wall_s": round(time.perf_counter() - t0, 1), "provenance": prov}
    for kind in a.kinds:
        rs = [r for r in runs if r["kind"] == kind]
        gains = [r["dev_after"] - r["dev_before"] for r in rs]
        summary[kind] = {
            "seeds": [r["seed"] for r in rs], "dev_before": [round(r["dev_before"], 4) for r in rs],
            "dev_after": [round(r["dev_after"], 4) for r in rs],
            "gain_points": [round(100 * g, 1) for g in gains],
            "gain_points_mean": round(100 * statistics.mean(gains), 1),
            "test_after": [round(r["test_after"], 4) for r in rs],
            "mean_at_4_after": [round(r["mean_at_4_after"], 4) for r in rs],
            "tool_calls_by_type": {t: [r["by_type"][t]["searches"] for r in rs]
                                   for t in rs[0]["by_type"]},
            "train_seconds": [round(r["train_seconds"], 1) for r in rs],
            "wall_seconds": [None if r["wall_s"] is None else round(r["wall_s"], 1) for r in rs],
        }
        if search:
            summary[kind].update(
                unseen_world_after=[round(r["unseen_after"], 4) for r in rs],
                bridge_searches=[r["by_type"]["bridge"]["searches"] for r in rs],
                bridge_one_search_answers=[r["by_type"]["bridge"]["one_search_answer"] for r in rs])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
