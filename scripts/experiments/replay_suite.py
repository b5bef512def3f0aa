"""The replay comparison: quality versus training wall-clock of on-policy GRPO, five replay
baselines and Headroom-Drift Replay, and HDR against on-policy under GSPO, CISPO and DAPO,
over seeds, from the shipped base (preset ``tiny``) with a search-latency profile.

Budget rule (the HDR paper's section 2, in our words). Let b be the preset's fresh groups
per step (``prompts_per_step``; 8 in ``tiny``) and k its replay budget (``replay.k_rep``; 4):

- every method runs the same number of optimizer steps (``steps``; ``--steps``);
- ``on_policy`` (matched) generates b fresh groups per step and replays nothing;
- ``on_policy_larger`` generates ceil(1.5 b) fresh groups per step (12 for b = 8: as many
  groups per update as a replay method that fills its budget when k = b/2);
- replay methods generate the same b fresh groups and add up to k stored groups per step,
  which cost no rollout, only (for the scoring kinds) a teacher-forced forward:
  ``naive`` (uniform, no gate), ``recency`` (the newest k), ``headroom_only`` (headroom order,
  no gate), ``drift_only`` (random order, drift gate), ``hdr`` (headroom order + drift gate);
- the loss variants keep b (and k for HDR): ``gspo_*`` (``loss=gspo clip_low=3e-4
  clip_high=4e-4``), ``cispo_*`` (``loss=cispo``), ``dapo_*`` (``loss=grpo`` with clip-higher
  0.2/0.28, token-level aggregation, ``dynamic_sampling=true``, which drops zero-variance
  groups from the update without generating replacements, so the rollout budget stays b, and
  soft overlong shaping over the last 20% of the policy-token budget, DAPO's 4,096 of 20,480).

- three cheaper ways to avoid wasted groups (``--methods cheap``; all on-policy, loss ``grpo``):
  ``dynamic_sampling`` (DAPO's dynamic sampling *with regeneration*: zero-variance groups are
  dropped and new prompts played, up to 4 more rounds, until the step holds b groups with
  signal; their generation counts in the step), ``greso`` (GRESO-style: a prompt whose last two
  visits were zero-variance is skipped, tried anyway with probability 0.1) and
  ``success_replay`` (``replay.kind=success_only``: k stored groups uniformly, only their
  successful responses replayed). ``--methods hard`` is the hard world's comparison: on-policy
  matched and larger, naive, headroom-only, drift-only, HDR and these three.

- the asynchronous rollout (``--methods async``: ``hdr`` beside its variants): ``hdr_streaming``
  (``async.enabled=true``: every episode on its own, no turn barrier) and ``hdr_overlap``
  (also ``async.max_staleness=1``: the next step's rollout runs while this step updates);
  ``hdr_oversample`` (also ``async.oversample=b/4``: b + b/4 groups in play, the first b to
  finish train, the rest are carried) and ``hdr_topup`` (also ``async.replay_topup=true``: a
  batch short of fresh groups when the update is done is filled with gated replay).

- the 2026 replay baselines (``--methods real_lm``: on-policy matched and larger, ``hdr``,
  ``fresh_per`` and ``recycle``; scripts/experiments/real_lm_replay.py runs it on the real LM):
  ``fresh_per`` (``replay.kind=fresh_per``: k groups drawn by (mean |A|)^0.6 x
  exp(-age / 8 steps), no gate, no scoring; arXiv 2604.16918) and ``recycle``
  (``replay.kind=recycle``: nothing replayed; zero-variance groups' prompts go back into the
  prompt order 4 steps ahead; arXiv 2606.10709).

- HDR's gate and budget (``--methods sweep``: ``hdr`` beside one change at a time):
  ``hdr_tau1e-3`` / ``hdr_tau1e-1`` (``replay.tau``, tight and loose around 1e-2) and
  ``hdr_k2`` / ``hdr_k8`` (``replay.k_rep`` around 4).

Methods are compared on ``time/train_cumulative`` (training seconds; evaluation and
checkpoints excluded), with the search-latency profile ``--latency lognormal:0.2`` (log-normal,
mean 0.2 s per search call, standing for a remote retriever) on every run.

``--search-r1`` runs the presets ``search-r1-equivalent`` (on-policy GRPO, Pyserini BM25 behind
``agentsearch serve`` with one HTTP request per search, HF generation) and ``full-stack`` (HDR,
bm25s in process with micro-batching, vLLM generation) instead, into ``OUT/search_r1``; it
builds the world's Pyserini index, starts the server on 127.0.0.1 and stops it at the end.
``full_stack_async`` is ``full-stack`` with the streaming rollout beside the update
(``async.enabled=true async.max_staleness=1``).
No latency profile is added there unless ``--latency`` is given: the server is the latency.

Records: the suite refuses to start on a tree with uncommitted changes (``--allow-dirty``, for
development, runs anyway and marks every record not citable); ``OUT/suite.json`` keeps one
entry per invocation (its command, revision, machine and runs), and each run folder gets a
``provenance.json`` stamp as it starts or resumes (``agentsearch.core.provenance``).

Each run trains in ``OUT/<method>-s<seed>`` in a subprocess with ``--threads-per-run`` torch
threads, ``--parallel`` at a time; a finished run (``final/`` + ``metrics.jsonl``) is skipped
and an interrupted one resumed, so rerunning the command continues the suite. At the end
``agentsearch pareto`` analyses every run folder into ``OUT/analysis/`` (curves per method,
frontier, time to target, replay diagnostics, seconds per phase) and ONE JSON line is printed.

    python scripts/experiments/replay_suite.py                             # 13 methods x 3 seeds
    python scripts/experiments/replay_suite.py --methods replay --seeds 0 1 --dry-run
    python scripts/experiments/replay_suite.py --methods hdr,on_policy --steps 2 eval.limit=20
    python scripts/experiments/replay_suite.py --search-r1
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.recipes.runner import (
    run_finished,
    run_parallel,
    train_command,
    train_run,
)

warnings.filterwarnings("ignore", message="The pynvml package is deprecated")

GSPO = ["loss=gspo", "clip_low=3e-4", "clip_high=4e-4"]
# dynamic_sampling: at most 4 more rollout rounds per step fill the batch with signal
REGENERATE_ROUNDS = 4
CISPO = ["loss=cispo"]
REPLAY = ["on_policy", "on_policy_larger", "naive", "recency", "headroom_only", "drift_only", "hdr"]
LOSSES = ["gspo_on_policy", "gspo_hdr", "cispo_on_policy", "cispo_hdr", "dapo_on_policy",
          "dapo_hdr"]
ASYNC = ["hdr_streaming", "hdr_overlap", "hdr_oversample", "hdr_topup"]
CHEAP = ["dynamic_sampling", "greso", "success_replay"]
BASELINES_2026 = ["fresh_per", "recycle"]
HARD = ["on_policy", "on_policy_larger", "naive", "headroom_only", "drift_only", "hdr", *CHEAP]
# around hdr's 1e-2 and 4
SWEEP = {"hdr_tau1e-3": ["replay.tau=1e-3"], "hdr_tau1e-1": ["replay.tau=1e-1"],
         "hdr_k2": ["replay.k_rep=2"], "hdr_k8": ["replay.k_rep=8"]}
SEARCH_R1 = {"search_r1_equivalent": "search-r1-equivalent", "full_stack": "full-stack",
             "full_stack_async": "full-stack"}
SEARCH_R1_OVERRIDES = {"full_stack_async": ["async.enabled=true", "async.max_staleness=1"]}
ALIASES = {"all": REPLAY + LOSSES, "replay": REPLAY, "losses": LOSSES, "async": ["hdr", *ASYNC],
           "cheap": CHEAP, "hard": HARD, "sweep": ["hdr", *SWEEP],
           "real_lm": ["on_policy", "on_policy_larger", "hdr", *BASELINES_2026]}


@dataclass
class Spec:
    """One training run of the suite."""

    method: str
    seed: int
    preset: str
    overrides: list[str]
    run: Path
    resume_overrides: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.run.name


def method_overrides(method: str, b: int, budget: int) -> list[str]:
    """The overrides that make ``method`` out of the preset (module doc: the budget rule)."""
    dapo = ["loss=grpo", "clip_low=0.2", "clip_high=0.28", "agg=token", "dynamic_sampling=true",
            f"overlong_buffer={max(1, round(0.2 * budget))}"]
    table = {
        "on_policy": ["replay.kind=none"],
        "on_policy_larger": ["replay.kind=none", f"prompts_per_step={math.ceil(1.5 * b)}"],
        **{k: [f"replay.kind={k}"]
           for k in ("naive", "recency", "headroom_only", "drift_only", "hdr")},
        "gspo_on_policy": ["replay.kind=none", *GSPO], "gspo_hdr": ["replay.kind=hdr", *GSPO],
        "cispo_on_policy": ["replay.kind=none", *CISPO], "cispo_hdr": ["replay.kind=hdr", *CISPO],
        "dapo_on_policy": ["replay.kind=none", *dapo], "dapo_hdr": ["replay.kind=hdr", *dapo],
        "dynamic_sampling": ["replay.kind=none", "dynamic_sampling=true",
                             f"regenerate_rounds={REGENERATE_ROUNDS}"],
        "greso": ["replay.kind=none", "prompt_skip=2"],
        "success_replay": ["replay.kind=success_only"],
        "fresh_per": ["replay.kind=fresh_per"], "recycle": ["replay.kind=recycle"],
        "hdr_streaming": ["replay.kind=hdr", "async.enabled=true"],
        "hdr_overlap": ["replay.kind=hdr", "async.enabled=true", "async.max_staleness=1"],
        "hdr_oversample": ["replay.kind=hdr", "async.enabled=true", "async.max_staleness=1",
                           f"async.oversample={max(1, b // 4)}"],
        "hdr_topup": ["replay.kind=hdr", "async.enabled=true", "async.max_staleness=1",
                      f"async.oversample={max(1, b // 4)}", "async.replay_topup=true"],
        **{name: ["replay.kind=hdr", *own] for name, own in SWEEP.items()},
    }
    return table[method]


def parse_methods(text: str, search_r1: bool) -> list[str]:
    known = (list(SEARCH_R1) if search_r1
             else REPLAY + LOSSES + ASYNC + CHEAP + BASELINES_2026 + list(SWEEP))
    out: list[str] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        names = ALIASES.get(item, [item]) if not search_r1 else (known if item == "all" else [item])
        for n in names:
            if n not in known:
                raise SystemExit(f"replay_suite: unknown method {n!r}; known: {', '.join(known)}"
                                 + ("" if search_r1 else f" (or {', '.join(ALIASES)})"))
            if n not in out:
                out.append(n)
    return out


def resolve(a) -> tuple[list[Spec], dict]:
    """Every run of the suite (seed-major, so a partial suite has whole seeds) and the budget."""
    from agentsearch.core.config import ConfigError, apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    common = [f"threads={a.threads_per_run}", "tensorboard=false"]
    if a.steps is not None:
        common.append(f"steps={a.steps}")
    latency = a.latency if a.latency is not None else (None if a.search_r1 else "lognormal:0.2")
    if latency and latency != "none":
        kind, _, mean = latency.partition(":")
        common += [f"tool_latency.kind={kind}", f"tool_latency.mean_s={mean or 0.2}"]
    methods = parse_methods(a.methods, a.search_r1)
    base_preset = "full-stack" if a.search_r1 else a.preset
    try:
        base = apply_overrides(TrainConfig, base_preset, common + a.overrides)
    except ConfigError as e:
        raise SystemExit(f"replay_suite: {e}") from None
    b, k = base.prompts_per_step, base.replay.k_rep
    budget = {"steps": base.steps, "fresh_groups_per_step": b, "replay_k_rep": k,
              "group_size": base.group_size, "latency": latency or "none"}
    if not a.search_r1:
        budget.update(on_policy_larger_fresh_groups=math.ceil(1.5 * b),
                      dapo_overlong_buffer=max(1, round(0.2 * base.response_budget)))
    out = Path(a.out) / "search_r1" if a.search_r1 else Path(a.out)
    specs = []
    for seed in a.seeds:
        for m in methods:
            if a.search_r1:
                preset, own = SEARCH_R1[m], SEARCH_R1_OVERRIDES.get(m, [])
            else:
                preset, own = a.preset, method_overrides(m, b, base.response_budget)
            specs.append(Spec(m, seed, preset, [f"seed={seed}", *common, *a.overrides, *own],
                              out / f"{m}-s{seed}"))
    for s in specs:  # validate every run before any starts
        try:
            apply_overrides(TrainConfig, s.preset, s.overrides)
        except ConfigError as e:
            raise SystemExit(f"replay_suite: {s.name}: {e}") from None
    return specs, budget


# ------------------------------------------------------------------ running and reporting
def one(spec: Spec, threads: int) -> dict:
    t0 = time.perf_counter()
    trained = train_run(spec.run, spec.preset, spec.overrides, threads=threads,
                        resume_overrides=spec.resume_overrides)
    took = time.perf_counter() - t0
    print(f"[replay_suite] {spec.name}: {'trained' if trained else 'finished before; skipped'}"
          f"{f' in {took:.0f} s' if trained else ''}", file=sys.stderr, flush=True)
    return {"run": str(spec.run), "trained": trained, "wall_s": round(took, 1)}


def summarise(result: dict, specs: list[Spec], failed: list[dict], budget: dict, a, t0: float,
              prov: dict) -> dict:
    target = result.get("target") or {}
    def r(x):
        return None if x is None else round(x, 4)

    methods = {}
    for m in result["methods"]:
        methods[m["method"]] = {"seeds": m["seeds"], "final_dev_em_mean": r(m["final_mean"]),
                                "final_dev_em_std": r(m["final_std"]),
                                "train_s_mean": r(m["train_s_mean"]),
                                "train_s_std": r(m["train_s_std"]), "reached_target": m["reached"],
                                "speedup": r(m.get("speedup")),
                                "time_to_target_ratio": r(m["ratio_mean"]),
                                "time_to_target_ratio_std": r(m["ratio_std"])}
    return {"suite": "search_r1" if a.search_r1 else "replay",
            "out": str(specs[0].run.parent) if specs else a.out,
            "git": prov["git"], "citable": prov["citable"], "machine": prov["machine"],
            "budget": budget, "seeds": a.seeds, "parallel": a.parallel,
            "threads_per_run": a.threads_per_run,
            "overrides": a.overrides, "metric": result["metric"],
            "target": {"method": target.get("method"), "score": target.get("score"),
                       "baseline_train_s": target.get("baseline_train_seconds")},
            "methods": methods, "failed": failed, "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/replay_suite",
                    help="suite folder (runs, analysis, summary)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", default="all",
                    help="comma-separated methods or groups: "
                         f"{', '.join(REPLAY + LOSSES + CHEAP + ASYNC)}; "
                         f"groups {', '.join(ALIASES)}. With --search-r1: {', '.join(SEARCH_R1)}")
    ap.add_argument("--steps", type=int, default=None,
                    help="optimizer steps of every run (default: the preset's)")
    ap.add_argument("--parallel", type=int, default=2, help="runs at a time")
    ap.add_argument("--threads-per-run", type=int, default=1, help="torch threads per run")
    ap.add_argument("--preset", default="tiny", help="the base preset of the replay suite")
    ap.add_argument("--latency", default=None,
                    help="search-latency profile KIND:MEAN_S (lognormal:0.2 by default; "
                         "none with --search-r1)")
    ap.add_argument("--search-r1", action="store_true",
                    help="run search-r1-equivalent vs full-stack (starts agentsearch serve)")
    ap.add_argument("--port", type=int, default=0, help="--search-r1 server port (0: a free one)")
    ap.add_argument("--metric", default="eval/mean_at_n", help="the quality metric of the analysis")
    ap.add_argument("--target-score", type=float, default=None,
                    help="a target fixed before the runs (default: the baseline's final score); "
                         "ratios stay relative to the baseline's time to it")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the runs and their commands; run nothing")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    ap.add_argument("overrides", nargs="*",
                    help="key=value overrides for every run (e.g. eval.limit=100)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    specs, budget = resolve(a)
    if not specs:
        raise SystemExit("replay_suite: no runs (give --methods and --seeds)")
    if a.dry_run:
        print(f"budget: {json.dumps(budget)}")
        for s in specs:
            state = ("finished (skip)" if run_finished(s.run)
                     else ("resume" if (s.run / "config.yaml").exists() else "new"))
            print(f"{s.name:28s} {state:16s} agentsearch "
                  f"{' '.join(train_command(s.run, s.preset, s.overrides))}")
        if a.search_r1:
            print("(--search-r1: agentsearch serve is started on 127.0.0.1 first; "
                  "search_r1_equivalent runs get env_kwargs.index=http://127.0.0.1:PORT?micro_batch=false)")
        return 0
    prov = require_clean("replay_suite", a.allow_dirty)
    out = Path(specs[0].run.parent)
    out.mkdir(parents=True, exist_ok=True)
    listed = json.loads((out / "suite.json").read_text()) if (out / "suite.json").exists() else {}
    # one entry per invocation: a later arm never overwrites an earlier one's revision
    (out / "suite.json").write_text(json.dumps({"invocations": [*listed.get("invocations", []), {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "provenance": prov,
        "budget": budget, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": {s.name: ["agentsearch", *train_command(s.run, s.preset, s.overrides)]
                 for s in specs}}]},
        indent=1))
    server = None
    try:
        if a.search_r1 and any(s.method == "search_r1_equivalent" and not run_finished(s.run)
                               for s in specs):
            from search_server import free_port, start_server  # beside this script: on sys.path

            from agentsearch.core.config import apply_overrides
            from agentsearch.trainer.train_config import TrainConfig

            cfg = apply_overrides(TrainConfig, "search-r1-equivalent", a.overrides)
            world = cfg.env_kwargs.get("world_seed", 0)
            server, url = start_server(out, int(world), a.port or free_port())
            print(f"[replay_suite] agentsearch serve (Pyserini BM25) on {url}", file=sys.stderr,
                  flush=True)
            for s in specs:
                if s.method == "search_r1_equivalent":
                    index = [f"env_kwargs.index={url}?micro_batch=false"]
                    s.overrides += index
                    s.resume_overrides += index  # a resumed run's config names an old port
        results = run_parallel(lambda s: one(s, a.threads_per_run), specs, a.parallel)
    finally:
        if server is not None:
            from search_server import stop_server

            stop_server(server)
    failed = [{"run": str(s.run), "error": str(r).splitlines()[0], "log": str(s.run / "train.log")}
              for s, r in zip(specs, results) if isinstance(r, BaseException)]
    for f in failed:
        print(f"[replay_suite] FAILED {f['run']}: {f['error']} (see {f['log']})", file=sys.stderr)
    from agentsearch.analysis.pareto import analyse, tables_markdown, write_outputs

    # the target: on_policy_larger's final score when it ran, else the best on-policy method;
    # search_r1_equivalent's in --search-r1 mode
    target = "search_r1_equivalent" if a.search_r1 and any(s.method == "search_r1_equivalent"
                                                           for s in specs) else None
    result = analyse([s.run for s in specs], a.metric, label_by="dir", target_method=target,
                     target_score=a.target_score)
    if result["runs"]:
        write_outputs(result, out / "analysis" / "pareto.png")
    print(tables_markdown(result) + "\n" + result.get("_diagnostics_markdown", ""), file=sys.stderr)
    summary = summarise(result, specs, failed, budget, a, t0, prov)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)
    if not result["ok"]:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
