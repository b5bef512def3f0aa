"""The hard world's experiments (docs/results/hard_world.md): pilot, comparison, final evals,
report.

    python scripts/experiments/hard_world.py pilot                      # -> runs/hard_world/pilot
    python scripts/experiments/hard_world.py pilot --name pilot2 --lrs 3e-4 1e-4 \\
        --eval-n 4 --eval-temperature 1
    python scripts/experiments/hard_world.py pilot --out runs/hard_world/worlds \\
        model=tiny-chain-base-worlds
    python scripts/experiments/hard_world.py compare --steps 200 --lr 3e-4 --latency lognormal:0.2
    python scripts/experiments/hard_world.py finals runs/hard_world/lat-0.2
    python scripts/experiments/hard_world.py report runs/hard_world/lat-0.2 [more suite folders]

``pilot``: on-policy GRPO on ``tiny-chains`` at two learning rates (``--lrs``), 300 steps, no
tool latency, evaluated every 20 steps on the dev slice (greedy, or ``--eval-n`` samples at
``--eval-temperature``), then the pre-registered rule (``analysis.hard_world.pilot_rule``) at
150/200/300 steps, written to ``OUT/<name>/pilot.json`` with the curves' figure.

``compare``: the comparison at one latency into ``OUT/lat-<mean>``, with replay_suite's run list
(``--preset tiny-chains``): first every method of ``--methods`` (default: the ``hard`` group)
on seeds 0-2, then ``--key`` methods (default hdr, on_policy_larger, dynamic_sampling) on seeds
3-4, so a suite cut short has whole seeds for every method. Each run is followed, in its own
slot, by its ``finals`` and its ``archive``. Before a session ends, ``touch OUT/lat-<mean>/HOLD``:
the runs in flight finish and no new one starts (an unfinished run does not outlive the
session's machine); ``compare`` lists the runs it held and starts none until the file is removed.

``compare --concurrency K``: the search service serves K calls at once and the rest queue
(``tool_latency.concurrency``), so a step's tool wait grows with its calls, into
``OUT/lat-<mean>-c<K>``. Without it every call overlaps, and a lock-step step waits about its
turns times the slowest call, whatever its number of episodes.

``compare --methods sweep --key ""`` adds HDR's τ / k_rep sweep (replay_suite's ``sweep``) to
the same suite, seeds 0-2; the report's replay table has its accept rates.

``calibrate``: this machine's speed, since each session gets a fresh machine and they differ
(1.8x on 2026-12-02): the first ``--steps`` (12) steps of on-policy GRPO on ``tiny-chains`` at
seed 1 (the same tokens every time on one CPU kind: seeded runs replay only within one), two
copies at once as the grid runs two, into ``OUT/calibration/<unix>.json`` (seconds and tokens
per step, torch's CPU capability; the runs' folders are removed). ``compare`` calibrates first
(``--no-calibrate`` skips it); ``report`` scales each run's seconds by the last calibration
before its first record to the reference machine (``hard_world.REFERENCE_S_PER_STEP``) before
any time column is computed, all but the seconds waiting on tools (``time/env``).

``finals``: every finished run's final model scored again: 8 samples at temperature 1 on the
dev slice (pass@1/4/8), greedily on a chain world never used in development (world seed
500), and ``agentsearch diagnose`` on the dev slice (P(correct | forced strategy) per k and the
per-hop success of its own episodes); written to ``RUN/final_evals.json`` (a run that has it
is skipped).

``report``: per suite folder, ``analysis.hard_world_report.report`` plus the final evals, into
``SUITE/analysis/``; one JSON line per suite. Only finished runs (with ``final_evals.json``) count.

``predict SUITE --concurrency K --mean M``: the suite's finished runs with each step's tool
wait replaced by what a search service of K slots (0: unlimited) and M seconds a call would
give its calls (``analysis.tool_queue``; a seeded run learns the same at any latency), as one
JSON line of times to the target and ratios: a latency suite's prediction before it runs.
``--priced-by SUITE``: each step's compute seconds too are priced by its work (the load
check's ``work_model``, fitted over SUITE's runs), so no machine's speed enters the times.
``--measured SUITE``: the prediction's test, on that service's own runs (finished or not):
each against its twin (the same name in the predicted suite), to its last evaluation.

``archive`` / ``restore``: a grid larger than one session goes on in the next from the
repository. ``archive SUITE...`` copies every finished, final-evaluated run's ``config.yaml``,
``metrics.jsonl`` (gzipped) and ``final_evals.json`` into ``docs/results/hard_world/runs/``
(no weights), and the machine calibrations into ``runs/calibration/``; ``restore`` puts them
back under ``--out`` (marked ``archived.json``): the suite skips them, the report reads them.

Records: ``pilot``, ``compare`` and ``calibrate`` refuse a tree with uncommitted changes
(``--allow-dirty``, development only: records not citable); each run is stamped
(``provenance.json``) and archived with it. Every command is resumable: rerun it and finished
runs are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite_analysis import predict, report  # this script's folder is on sys.path
from suite_archive import (
    archive,
    archive_run,
    copy_calibrations,
    restore,
)

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.core.provenance import stamp as provenance
from agentsearch.recipes.runner import (
    ARCHIVED,
    agentsearch_cli,
    run_finished,
    run_parallel,
    train_run,
)

PRESET = "tiny-chains"
PILOT_STEPS = 300
BUDGETS = (150, 200, 300)
UNSEEN_WORLD = 500
CALIBRATION_STEPS = 12
HOLD = "HOLD"  # in a suite folder: start no new run (compare's docstring)
ARCHIVE = Path(__file__).resolve().parents[2] / "docs" / "results" / "hard_world" / "runs"


def pilot(a) -> int:
    from agentsearch.analysis.hard_world import pilot_rule
    from agentsearch.analysis.runs import load_run

    out = Path(a.out) / a.name
    if not a.verdict_only:
        require_clean("hard_world pilot", a.allow_dirty)
    runs = {lr: out / f"on_policy-lr{lr}" for lr in a.lrs}
    common = ["replay.kind=none", f"steps={PILOT_STEPS}", "eval.every=20", "seed=0", "threads=1",
              "tensorboard=false", f"eval.n={a.eval_n}", f"eval.temperature={a.eval_temperature}",
              *a.overrides]
    if not a.verdict_only:
        def train(lr: str) -> bool:
            return train_run(runs[lr], PRESET, [*common, f"lr={lr}"], threads=1)

        run_parallel(train, list(a.lrs), a.parallel)
    verdict = {}
    for lr, run in runs.items():
        points = load_run(run).points
        verdict[lr] = {"curve": [[s, round(q, 4)] for _, q, s in points],
                       "rule": {b: pilot_rule(points, b) for b in BUDGETS}}
    (out / "pilot.json").write_text(json.dumps(verdict, indent=1))
    metric = "greedy" if a.eval_n == 1 else f"Mean@{a.eval_n}, temperature {a.eval_temperature}"
    _plot_pilot(verdict, out / "pilot.png", metric)
    print(json.dumps({lr: {b: v["rule"][b].get("accepted") for b in BUDGETS}
                      for lr, v in verdict.items()}))
    return 0


def _plot_pilot(verdict: dict, path: Path, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lr, v in verdict.items():
        steps, scores = zip(*v["curve"]) if v["curve"] else ((), ())
        ax.plot(steps, scores, marker="o", label=f"on-policy GRPO, lr {lr}")
    ax.set_xlabel("step")
    ax.set_ylabel(f"dev EM ({metric}, 200 questions)")
    ax.set_title("pilot: tiny-chains, on-policy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(a) -> int:
    """The suite's runs (replay_suite's run list), each followed in its own slot by its final
    evals and its archiving, so the load stays ``--parallel`` processes and every finished run
    is in the repository's archive at once."""
    mean = a.latency.partition(":")[2] or "0"
    out = Path(a.out) / (f"lat-{mean}" + (f"-c{a.concurrency}" if a.concurrency else ""))
    import replay_suite as suite  # this script's own folder is first on sys.path

    def specs(methods: str, seeds: list[int]):
        concurrency = [f"tool_latency.concurrency={a.concurrency}"] if a.concurrency else []
        ns = argparse.Namespace(out=str(out), seeds=seeds, methods=methods, steps=a.steps,
                                parallel=a.parallel, threads_per_run=1, preset=PRESET,
                                latency=a.latency, search_r1=False, port=0,
                                metric="eval/mean_at_n", dry_run=False,
                                overrides=[f"lr={a.lr}", "eval.every=20", *a.overrides,
                                           *concurrency])
        return suite.resolve(ns)

    prov = require_clean("hard_world compare", a.allow_dirty)
    runs, budget = specs(a.methods, [0, 1, 2])
    if a.key:
        runs += [s for s in specs(a.key, [3, 4])[0] if s.name not in {r.name for r in runs}]
    out.mkdir(parents=True, exist_ok=True)
    if a.calibrate and not (out / HOLD).exists():
        calibrate(argparse.Namespace(out=a.out, steps=CALIBRATION_STEPS))
        copy_calibrations(out.parent / "calibration", Path(a.to) / "calibration")
    listed = json.loads((out / "suite.json").read_text()) if (out / "suite.json").exists() else {}
    # a suite grows (e.g. the sweep's arms): merged
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    (out / "suite.json").write_text(json.dumps({
        "commands": list(dict.fromkeys([*listed.get("commands", []), command])), "budget": budget,
        "invocations": [*listed.get("invocations", []), {"command": command, "provenance": prov}],
        "runs": {**listed.get("runs", {}),
                 **{s.name: ["agentsearch", "train", "--preset", s.preset, "--out", str(s.run),
                             *s.overrides]
                    for s in runs}}}, indent=1))

    def job(spec) -> str:
        if (spec.run / ARCHIVED).exists():
            return "archived before"
        if (out / HOLD).exists():
            return "held"
        trained = train_run(spec.run, spec.preset, spec.overrides, threads=1)
        if not (spec.run / "final_evals.json").exists():
            _final_evals(spec.run)
        archive_run(spec.run, Path(a.to))
        print(f"[hard_world] {spec.name}: {'trained' if trained else 'finished before'}, "
              "evaluated, archived", file=sys.stderr, flush=True)
        return "done"

    results = run_parallel(job, runs, a.parallel)
    failed = [f"{s.name}: {str(r).splitlines()[0]}" for s, r in zip(runs, results)
              if isinstance(r, BaseException)]
    held = [s.name for s, r in zip(runs, results) if r == "held"]
    print(json.dumps({"suite": str(out), "runs": len(runs), "held": held, "failed": failed}))
    return 1 if failed else 0


def calibrate(a) -> int:
    """This machine's seconds per step on the reference workload (module doc)."""
    import shutil
    import statistics
    import time

    import torch

    from agentsearch.trainer.metrics import read_metrics

    if getattr(a, "cmd", None) == "calibrate":  # compare's own calibration is covered by its check
        require_clean("hard_world calibrate", a.allow_dirty)
    cal = Path(a.out) / "calibration"
    stamp = int(time.time())
    runs = [cal / f"run-{stamp}" / x for x in ("a", "b")]
    over = ["seed=1", "replay.kind=none", "lr=3e-4", f"steps={a.steps}", "eval.every=0",
            "eval.limit=8", "eval.n=1", "threads=1", "tensorboard=false",
            "checkpoint_every=100000"]
    results = run_parallel(lambda r: train_run(r, PRESET, over, threads=1), runs, 2)
    if any(isinstance(r, BaseException) for r in results):
        raise RuntimeError(f"calibration failed: {results}")
    steps = [[x for x in read_metrics(r) if x.get("step", 0) > 0 and "time/step" in x]
             for r in runs]
    res = {"unix": stamp, "steps": a.steps,
           "s_per_step": statistics.fmean(x["time/step"] for xs in steps for x in xs),
           "phases": {k: statistics.fmean(x[f"time/{k}"] for xs in steps for x in xs)
                      for k in ("generate", "logprobs", "update")},
           "tokens_per_step": statistics.fmean(x["tokens/generated"] for xs in steps for x in xs),
           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "provenance": provenance()}
    (cal / f"{stamp}.json").write_text(json.dumps(res, indent=1))
    shutil.rmtree(cal / f"run-{stamp}")
    print(json.dumps(res), flush=True)
    return 0


def _final_evals(run: Path) -> dict:
    log = run / "final_evals.log"
    dev = json.loads(agentsearch_cli("eval", "--run", str(run), "--n", "8", log=log))
    unseen = json.loads(agentsearch_cli("eval", "--run", str(run),
                                        f"env_kwargs.world_seed={UNSEEN_WORLD}", log=log))
    diag = json.loads(agentsearch_cli("diagnose", "--run", str(run),
                                      log=log).strip().splitlines()[-1])
    keep = ("pass_at_1", "pass_at_4", "pass_at_8", "mean_at_n")
    res = {"dev_n8": {k: dev.get(f"eval/{k}") for k in keep}, "diagnose": diag,
           "unseen_world": {"world_seed": UNSEEN_WORLD, "mean_at_n": unseen["eval/mean_at_n"],
                            **{f"chain{k}": unseen.get(f"eval/chain{k}/mean_at_n")
                               for k in (1, 2, 3, 4)}}}
    (run / "final_evals.json").write_text(json.dumps(res, indent=1))
    return res


def finals(a) -> int:
    runs = sorted(r for s in a.suites for r in Path(s).iterdir()
                  if r.is_dir() and (r / "final").exists() and run_finished(r)
                  and not (r / "final_evals.json").exists())
    results = run_parallel(_final_evals, runs, a.parallel)
    failed = [f"{r}: {e}" for r, e in zip(runs, results) if isinstance(e, BaseException)]
    print(json.dumps({"evaluated": len(runs) - len(failed), "failed": failed}))
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pilot")
    p.add_argument("--out", default="runs/hard_world")
    p.add_argument("--name", default="pilot", help="the pilot's folder under --out")
    p.add_argument("--lrs", nargs="+", default=["3e-4", "1e-3"])
    p.add_argument("--eval-n", type=int, default=1)
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--verdict-only", action="store_true",
                   help="apply the rule to the runs as they are; train nothing")
    p.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    p.add_argument("overrides", nargs="*",
                   help="key=value for every pilot run (e.g. model=tiny-chain-base-worlds)")
    c = sub.add_parser("compare")
    c.add_argument("--out", default="runs/hard_world")
    c.add_argument("--steps", type=int, required=True, help="the budget the pilot chose")
    c.add_argument("--lr", required=True, help="the learning rate the pilot chose")
    c.add_argument("--latency", default="lognormal:0.2", help="KIND:MEAN_S, or none")
    c.add_argument("--concurrency", type=int, default=0,
                   help="the search service's slots (tool_latency.concurrency; 0: unlimited); "
                        "suite lat-<mean>-c<k>")
    c.add_argument("--methods", default="hard")
    c.add_argument("--key", default="hdr,on_policy_larger,dynamic_sampling",
                   help="methods also run on seeds 3-4")
    c.add_argument("--parallel", type=int, default=2)
    c.add_argument("--to", default=str(ARCHIVE),
                   help="the archive every finished run is copied into")
    c.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="skip the speed calibration")
    c.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    c.add_argument("overrides", nargs="*")
    k = sub.add_parser("calibrate")
    k.add_argument("--out", default="runs/hard_world")
    k.add_argument("--steps", type=int, default=CALIBRATION_STEPS)
    k.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    for name in ("finals", "report", "archive"):
        s = sub.add_parser(name)
        s.add_argument("suites", nargs="+")
        s.add_argument("--parallel", type=int, default=2)
        s.add_argument("--to", default=str(ARCHIVE))
    q = sub.add_parser("predict")
    q.add_argument("suite")
    q.add_argument("--concurrency", type=int, default=0, help="the service's slots (0: unlimited)")
    q.add_argument("--mean", type=float, required=True, help="mean seconds a search call takes")
    q.add_argument("--seed", type=int, default=0, help="seed of the latency draws")
    q.add_argument("--priced-by", default=None,
                   help="price compute by work, the prices fitted over this suite")
    q.add_argument("--measured", default=None,
                   help="a suite run under this service: its runs against the prediction")
    r = sub.add_parser("restore")
    r.add_argument("--source", default=str(ARCHIVE))
    r.add_argument("--out", default="runs/hard_world")
    a = ap.parse_args()
    return {"pilot": pilot, "compare": compare, "calibrate": calibrate, "finals": finals,
            "report": report, "archive": archive, "restore": restore, "predict": predict}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
