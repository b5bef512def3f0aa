"""Faults, crashes and hostile input: does training ever learn from the infrastructure's failures?

Modes (each prints ONE JSON line; progress goes to stderr):

- ``faults`` (default): the tiny preset (``tiny-base`` on the synthetic world, HDR) trains
  against ``agentsearch serve`` (bm25s) in a child process, one HTTP request per search
  (``?micro_batch=false``, as Search-R1's trainer sends them: ~100x the requests of the
  micro-batching default, so a 10% fault rate hits hundreds), under four conditions, each with
  ``--seeds`` (3): ``none`` (no fault), ``outage`` (the server is SIGKILLed after step
  ``--kill-after-step`` is logged and started again on the same port ``--outage-s`` (20) s
  later), ``errors`` (a chaos proxy answers 10% of requests with a 5xx) and ``stalls`` (the
  proxy holds 5% of requests for 2 s). For each faulty run it checks, from the run folders,
  that it is *the no-fault run of the same seed*: every step logged once with the same
  non-timing metrics (rewards, tool errors, losses, replay counts, dev EM) apart from the
  infra counters, the same ``replay.pt`` bytes at every checkpoint, the same final weights
  (``recipes.crash_trials.compare_runs``). That is what "0 groups with infra errors reached
  the update or the buffer" means here: nothing the policy saw or learned from changed.
  Also: the run finished (exit 0), infra errors were seen (``rollout/infra_errors``,
  ``health/infra_outage_s``), the warning came (seconds and logged steps after the kill),
  final dev EM per seed against the no-fault runs' spread, wall-clock cost.
- ``crash``: ``recipes.crash_trials.run_trials``: 10 runs killed with SIGKILL (4 at crash
  points inside checkpointing and logging, 6 at random instants, one of them twice), each
  resumed and compared byte for byte with an uninterrupted run.
- ``fuzz``: ``envs.fuzz.fuzz_env``: 10,000 seeded adversarial actions per env id (the
  settings of ``tests/test_env_fuzz.py``), checks on every step; failures, counts, steps/s.

Runs are resumable: a finished run folder (``final/`` plus ``fault.json``) is read, not
trained again. ``--out`` (default ``runs/bench_faults``).

    OMP_NUM_THREADS=1 python scripts/bench_faults.py --mode faults --seeds 0 1 2
    OMP_NUM_THREADS=1 python scripts/bench_faults.py --mode crash
    OMP_NUM_THREADS=1 python scripts/bench_faults.py --mode fuzz
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.recipes.crash_trials import compare_runs
from agentsearch.recipes.runner import subprocess_env
from agentsearch.retrievers import serve_in_thread, world_index
from agentsearch.retrievers.chaos import create_chaos_app
from agentsearch.retrievers.process import ServerProcess
from agentsearch.trainer.metrics import read_metrics

CONDITIONS = {"none": {}, "outage": {}, "errors": {"error_rate": 0.10},
              "stalls": {"stall_rate": 0.05, "stall_s": 2.0}}
TRAIN = ["steps=20", "eval.every=10", "checkpoint_every=10", "threads=1", "tensorboard=false"]
INFRA_KEYS = ("rollout/infra_", "health/infra_")  # what faults may change


def say(msg: str) -> None:
    print(f"[bench_faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _records(run: Path) -> list[dict]:  # also while it is being written
    return read_metrics(run) if (run / "metrics.jsonl").exists() else []


def train_with_fault(run: Path, condition: str, seed: int, args) -> dict:
    """One training run under ``condition``; returns what the bench saw of it (``fault.json``)."""
    run.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:  # the server and the proxy stop however the run ends
        server = stack.enter_context(ServerProcess(world_index(seed=0, kind="bm25s"), threads=1,
                                                   log=run / "server.log"))
        url = server.url
        if CONDITIONS[condition]:
            url = stack.enter_context(serve_in_thread(create_chaos_app(server.url, seed=seed,
                                                                       **CONDITIONS[condition])))
        return _play(run, condition, seed, args, server, url)


def _play(run: Path, condition: str, seed: int, args, server: ServerProcess, url: str) -> dict:
    cmd = [sys.executable, "-m", "agentsearch", "train", "--preset", "tiny", "--out", str(run),
           f"seed={seed}", f"env_kwargs.index={url}?micro_batch=false", *TRAIN, *args.overrides]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=subprocess_env(threads=1), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    warnings: list[tuple[float, str]] = []
    with open(run / "train.log", "w") as log:
        def read():
            for line in proc.stderr:
                log.write(line)
                if "infrastructure" in line:
                    warnings.append((time.monotonic() - t0, line.strip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen: dict[int, float] = {}  # step -> seconds when its record appeared
        killed_at = restarted_at = None
        while proc.poll() is None:
            for r in _records(run):
                seen.setdefault(r["step"], time.monotonic() - t0)
            if condition == "outage" and killed_at is None and args.kill_after_step in seen:
                server.kill()
                killed_at = time.monotonic() - t0
                say(f"  {run.name}: server killed after step {args.kill_after_step} at "
                    f"{killed_at:.1f} s")
            if (killed_at is not None and restarted_at is None
                    and time.monotonic() - t0 >= killed_at + args.outage_s):
                server.start()
                restarted_at = time.monotonic() - t0
                say(f"  {run.name}: server back at {restarted_at:.1f} s")
            time.sleep(0.1)
        reader.join(timeout=10)
    for r in _records(run):
        seen.setdefault(r["step"], time.monotonic() - t0)
    chaos = httpx.get(url + "/chaos", timeout=5).json() if url != server.url else None
    first = next((t for t, line in warnings if "infrastructure error" in line), None)
    first_fault = (chaos or {}).get("first_fault_monotonic")
    fault_at = killed_at if condition == "outage" else (first_fault - t0 if first_fault else None)
    info = {"condition": condition, "seed": seed, "exit": proc.returncode,
            "seconds": round(time.monotonic() - t0, 1),
            "killed_at_s": killed_at, "restarted_at_s": restarted_at, "chaos": chaos,
            "first_warning_s": first, "warnings": len(warnings), "fault_at_s": fault_at,
            "warning_after_fault_s": (None if None in (first, fault_at)
                                      else round(first - fault_at, 2)),
            "steps_logged_between_fault_and_warning": (
                None if None in (first, fault_at)
                else sum(1 for t in seen.values() if fault_at < t < first))}
    (run / "fault.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def mode_faults(args) -> dict:
    out = Path(args.out)
    runs: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    for seed in args.seeds:
        for condition in CONDITIONS:
            run = out / f"{condition}-s{seed}"
            if (run / "final").exists() and (run / "fault.json").exists():
                info = json.loads((run / "fault.json").read_text())
                say(f"{run.name}: finished before, read")
            else:
                say(f"{run.name}: training")
                info = train_with_fault(run, condition, seed, args)
            recs = _records(run)
            info["final_dev_em"] = next((r["eval/mean_at_n"] for r in reversed(recs)
                                         if "eval/mean_at_n" in r), None)
            info["infra_errors"] = sum(r.get("rollout/infra_errors", 0) for r in recs)
            info["infra_retried"] = sum(r.get("rollout/infra_retried", 0) for r in recs)
            info["infra_outage_s"] = round(sum(r.get("health/infra_outage_s", 0) for r in recs), 1)
            info["tool_errors"] = sum(r.get("rollout/tool_errors", 0) for r in recs)
            info["train_s"] = round(recs[-1]["time/train_cumulative"], 1) if recs else None
            if condition != "none":
                info["differences_from_no_fault"] = compare_runs(out / f"none-s{seed}", run,
                                                                 ignore=INFRA_KEYS)
            runs[condition].append(info)
            say(f"{run.name}: exit {info['exit']}, dev EM {info['final_dev_em']}, infra errors "
                f"{info['infra_errors']}, warning after {info['warning_after_fault_s']} s")
    base = [r["final_dev_em"] for r in runs["none"]]
    summary = {"bench": "faults", "seeds": args.seeds, "no_fault_dev_em": base,
               "no_fault_spread": [min(base), max(base)] if base else None}
    for condition in CONDITIONS:
        rs = runs[condition]
        ems = [r["final_dev_em"] for r in rs]
        row = {"completed": sum(r["exit"] == 0 for r in rs), "dev_em": ems,
               "dev_em_mean": round(statistics.mean(ems), 4) if ems else None,
               "train_s_mean": round(statistics.mean(r["train_s"] for r in rs), 1),
               "infra_errors": [r["infra_errors"] for r in rs],
               "infra_retried": [r.get("infra_retried") for r in rs],
               "infra_outage_s": [r["infra_outage_s"] for r in rs],
               "tool_errors": [r["tool_errors"] for r in rs]}
        if condition != "none":
            row.update(identical_to_no_fault=sum(not r["differences_from_no_fault"] for r in rs),
                       within_no_fault_spread=sum(base and min(base) <= e <= max(base)
                                                  for e in ems),
                       warning_after_fault_s=[r["warning_after_fault_s"] for r in rs],
                       steps_between_fault_and_warning=[
                           r["steps_logged_between_fault_and_warning"] for r in rs],
                       chaos=[r["chaos"] for r in rs] if rs and rs[0]["chaos"] else None,
                       differences=[r["differences_from_no_fault"][:3] for r in rs])
        summary[condition] = row
    return summary


def mode_crash(args) -> dict:
    from agentsearch.recipes.crash_trials import run_trials

    summary = run_trials(Path(args.out) / "crash", n=args.trials, seed=args.seeds[0], log=say)
    return {"bench": "crash", **{k: v for k, v in summary.items() if k != "runs"},
            "kills": [r["kill"] for r in summary["runs"]],
            "resumed_from": [r["resumed_from"] for r in summary["runs"]],
            "problems": [r["problems"][:2] for r in summary["runs"] if r["problems"]]}


def mode_fuzz(args) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_env_fuzz import FUZZ_RUNS

    from agentsearch.envs import make_env
    from agentsearch.envs.fuzz import fuzz_env

    rows = {}
    for family, settings in FUZZ_RUNS.items():
        t0, total, failures, counts = time.perf_counter(), 0, [], {}
        for seed, (env_id, kw, n) in enumerate(settings):
            report = fuzz_env(make_env(env_id, **kw), n, seed=seed)
            total += report.steps
            failures += report.failures
            for k, v in report.as_dict().items():
                counts[k] = max(counts.get(k, 0), v) if k == "max_step_s" else counts.get(k, 0) + v
        rows[family] = {**counts, "actions": total, "failures": failures[:5],
                        "actions_per_s": round(total / (time.perf_counter() - t0), 1)}
        say(f"fuzz {family}: {total} actions, {len(failures)} failures")
    return {"bench": "fuzz", **rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["faults", "crash", "fuzz"], default="faults")
    p.add_argument("--out", default="runs/bench_faults")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--kill-after-step", type=int, default=3)
    p.add_argument("--outage-s", type=float, default=20.0)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    p.add_argument("overrides", nargs="*",
                   help="extra key=value training overrides (all conditions)")
    args = p.parse_args()
    prov = require_clean("bench_faults", args.allow_dirty)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    row = {"faults": mode_faults, "crash": mode_crash, "fuzz": mode_fuzz}[args.mode](args)
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    row["provenance"] = prov
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
