"""The registry of quoted figures that ``scripts/check_results.py`` recomputes.

A ``Figure`` is one number as a page prints it: the page, the exact text quoting it (whitespace
may reflow), the number as printed, the record(s) under the checkout, a pure function of the
checkout's root that recomputes it from them (``agentsearch.analysis.figures``), a tolerance
(None: half a unit of the last printed digit), whether it comes from a model (``predicted``: its
sentence must say so) and whether its record is citable (False: a dirty tree; the page must say
"not citable"); ``results_sources.py`` defines them and the records' paths. ``NO_RECORD``
(``results_provenance.py``): quoted text (containing "no record") whose runs were not kept, with
the key of its rerun in ``RERUNS`` (command, estimated minutes on this 2-core machine).
``group(page, quote, records, [(shown, value), ...])`` registers several numbers of one quote.
"""

from __future__ import annotations

from results_sources import (  # noqa: F401 (Figure, README, ...: re-exported)
    AL,
    AS,
    ASYNC,
    C4_02,
    CLIENT,
    CRASH,
    DEMO,
    DIAG,
    ENV,
    FAULTS,
    FUZZ,
    HW,
    HWP,
    LAT02,
    LEARNING,
    LOAD,
    MATH,
    MATH10,
    OLD,
    PAIR,
    PAIR_CAL,
    README,
    ROLLOUT,
    ROLLOUT3,
    RS,
    RSD,
    SCALE,
    SCAN,
    SERVERS,
    SMOKE,
    VISION,
    WORLDS,
    Figure,
    R,
    csv_mean,
    demo,
    every,
    group,
    ival,
    j,
    math3,
    mean,
    old_seeds,
    pair,
    reached,
    rows,
    seed_pair,
    speedup,
    waits,
    zipped,
)

from agentsearch.analysis import figures as F

REL = "docs/reliability.md"  # its "In short" section
# ---------------------------------------------------------------- README.md
FIGURES: list[Figure] = [
    *group(README, "dev 0.235 → 0.97–1.0 after 40 steps, 3 seeds", VISION, [
        ("0.235", j(VISION, "hdr.dev_before")), ("0.97", j(VISION, "hdr.dev_after", min)),
        ("1.0", j(VISION, "hdr.dev_after", max))], citable=False),
    *group(README, "greedy dev 0.040 → 0.79–0.83 on 500 problems", MATH10, [
        ("0.040", math3(max, "dev_before")), ("0.79", math3(min, "dev_after")),
        ("0.83", math3(max, "dev_after"))]),
    *group(README, "66–102 s of training", MATH10, [
        ("66", math3(min, "train_seconds")), ("102", math3(max, "train_seconds"))]),
    *group(README, "3.15× (HF) and 2.90× (vLLM) the lock-step episodes/s", ROLLOUT, [
        ("3.15", j(ROLLOUT, "ratio", backend="hf", latency_mean_s=0.5)),
        ("2.90", j(ROLLOUT, "ratio", backend="vllm", latency_mean_s=0.5))]),
    *group(README, "1M vectors: recall@10 0.994 in 1/14 of Flat's memory", SCALE, [
        ("0.994", j(SCALE, "recall10", bench="index_scale", kind="dense-ivfpq", n=1000000)),
        ("14", j(SCALE, "memory_vs_flat", lambda m: 1 / m, bench="index_scale",
                 kind="dense-ivfpq", n=1000000))]),
    *group(README, "5.0× the q/s of Search-R1's own server dense, 4.5× BM25", SERVERS, [
        ("5.0", j(SERVERS, "speedup_default", bench="e_servers", mode="dense")),
        ("4.5", j(SERVERS, "speedup_default", bench="e_servers", mode="bm25"))]),
    *group(README, "`batch_search` gives 1.33–1.73× the q/s of a one-query loop", SERVERS, [
        ("1.33", j(SERVERS, "speedup", bench="b_pyserini_batch", java_threads=1)),
        ("1.73", j(SERVERS, "speedup", bench="b_pyserini_batch", java_threads=2))]),
    *group(REL, "the same dev EM (0.411/0.423/0.423)", FAULTS, [
        (shown, j(FAULTS, f"{cond}.dev_em.{i}")) for cond in ("none", "outage", "errors", "stalls")
        for i, shown in enumerate(("0.411", "0.423", "0.423"))]),
    *group(REL, "the first warning came 0.01-0.40 s after the first outage or 5xx", FAULTS, [
        ("0.01", j(FAULTS, "errors.warning_after_fault_s", min)),
        ("0.40", j(FAULTS, "outage.warning_after_fault_s", max))]),
    *group(REL, "the outage cost 25 s of wall-clock", FAULTS, [
        ("25", j(FAULTS, "outage.infra_outage_s", mean))]),
    *group(REL, "256 concurrent clients for 60 s, 0 errors", LOAD, [
        ("256", j(LOAD, "clients", mode="bm25")), ("60", j(LOAD, "seconds", mode="bm25")),
        ("0", lambda root: sum(F.field(root / LOAD, "errors", mode=m)
                               for m in ("bm25", "dense")))]),
    *group(REL, "bm25s 631 q/s (p50/p99 385/728 ms), dense MiniLM 47.5 q/s (5.4/5.9 s)", LOAD, [
        ("631", j(LOAD, "qps", mode="bm25")), ("385", j(LOAD, "p50_ms", mode="bm25")),
        ("728", j(LOAD, "p99_ms", mode="bm25")), ("47.5", j(LOAD, "qps", mode="dense")),
        ("5.4", j(LOAD, "p50_ms", lambda ms: ms / 1000, mode="dense")),
        ("5.9", j(LOAD, "p99_ms", lambda ms: ms / 1000, mode="dense"))]),
    *group(REL, "all 378 bad requests got a 4xx", LOAD, [
        ("378", lambda root: sum(F.field(root / LOAD, "bad_requests_4xx", mode=m)
                                 for m in ("bm25", "dense")))]),
    *group(REL, "a storm of 4,000 requests was shed", LOAD, [
        ("4,000", j(LOAD, "storm.sent", mode="bm25"))]),
    *group(REL, "10 `tiny` runs killed with SIGKILL (4 inside", CRASH, [
        ("10", j(CRASH, "exact")), ("4", j(CRASH, "kills_at_crash_points"))]),
    *group(REL, "6 at random instants, one twice", CRASH, [("6", j(CRASH, "random_kills"))]),
    *group(REL, "10,000 seeded adversarial actions per env", FUZZ, [
        ("10,000", every(FUZZ, "steps", min))]),
    *group(REL, "7,101-7,859 of them malformed", FUZZ, [
        ("7,101", every(FUZZ, "malformed", min)), ("7,859", every(FUZZ, "malformed", max))]),
    *group(README, "bridge │     0.000 -> 0.466 │       1.00 -> 2.05 │              1.00 -> 0.00",
           DEMO, [("0.000", demo("eval/bridge/mean_at_n", 0)),
                  ("0.466", demo("eval/bridge/mean_at_n", 40)),
                  ("1.00", demo("eval/bridge/searches", 0)),
                  ("2.05", demo("eval/bridge/searches", 40)),
                  ("1.00", demo("eval/bridge/one_search_answer", 0)),
                  ("0.00", demo("eval/bridge/one_search_answer", 40))]),
    *group(README, "single │     0.392 -> 0.367 │       1.00 -> 1.06 │              1.00 -> 0.94",
           DEMO, [("0.392", demo("eval/single/mean_at_n", 0)),
                  ("0.367", demo("eval/single/mean_at_n", 40)),
                  ("1.06", demo("eval/single/searches", 40)),
                  ("0.94", demo("eval/single/one_search_answer", 40))]),
    *group(README, "all │     0.196 -> 0.417 (+22.1 pts)", DEMO, [
        ("0.196", demo("eval/mean_at_n", 0)), ("0.417", demo("eval/mean_at_n", 40)),
        ("22.1", lambda root: 100 * (F.run_metric(root / DEMO, "eval/mean_at_n", 40)
                                     - F.run_metric(root / DEMO, "eval/mean_at_n", 0)))]),
    *group(README, "the demo took 106 s, of which RL 82 s", DEMO, [
        ("106", j(DEMO + "demo_summary.json", "wall_s")),
        ("82", demo("time/train_cumulative", 40))]),
    *group(README, "env overhead 183 µs per episode-turn (tags, 256 concurrent episodes)", ENV, [
        ("183", j(ENV, "overhead_us_per_episode_turn", bench="env_overhead", format="tags"))]),
    *group(README, "8.94× the q/s of one request per call, bm25s", CLIENT, [
        ("8.94", j(CLIENT, "speedup", index="bm25s"))]),
    *group(README, "the drift scan at 0.987× a plain forward's tokens/s", SCAN, [
        ("0.987", j(SCAN, "ratio"))]),
    *group(README, "0 action-mask mismatches in 32 episodes, logprob gap 1.3e-3 before and "
           "3.8e-6 after", SMOKE, [
        ("0", j(SMOKE, "mask_mismatches")), ("32", j(SMOKE, "episodes")),
        ("1.3e-3", j(SMOKE, "sync_logprob_gap_before")), ("3.8e-6", j(SMOKE, "sync_logprob_gap"))]),
    *group(ASYNC, "rerun 2026-12-05 on a 2-core Xeon: 67.7 vs 94.9 episodes/s, 1.40×", ROLLOUT3, [
        ("67.7", j(ROLLOUT3, "lockstep_eps_per_s")), ("94.9", j(ROLLOUT3, "async_eps_per_s")),
        ("1.40", j(ROLLOUT3, "ratio"))]),
    *group(README, "copying precision (0.41–0.46 even with the right strategy)", DIAG, [
        ("0.41", j(DIAG, "table.thorough.single")), ("0.46", j(DIAG, "table.thorough.bridge"))]),
    *group(README, "HDR's 40 steps take 1.56× on-policy GRPO's training time", LEARNING, [
        ("1.56", lambda root: mean(F.field(root / LEARNING, "hdr.train_seconds"))
         / mean(F.field(root / LEARNING, "none.train_seconds")))]),
    *group(README, "on the hard world HDR reaches 90% of on-policy-larger's final in 1.38× "
           "on-policy-larger's time to it (latency 0, 5 seeds; 1.11× on the better base) and, "
           "behind a 4-slot search service at 1.0 s a call, in 0.95× (one seed).",
           (OLD, WORLDS, PAIR), [("1.38", speedup(OLD, "hdr")), ("1.11", speedup(WORLDS, "hdr")),
                                 ("0.95", pair("measured"))]),
    *group(README, "Predicted for that service over 5 seeds by the work-priced queue model: 0.80× "
           "(95% bootstrap of the price fit: 0.79–0.81)", WORLDS,
           zipped(("0.80", "0.79", "0.81"), ival("hdr", 4, 1.0, "to_reference")), predicted=True),
    *group(README, "where on-policy GRPO is predicted at 0.80× and drift-only replay at 0.59×",
           WORLDS, [("0.80", ival("on_policy", 4, 1.0, "to_reference")[0]),
                    ("0.59", ival("drift_only", 4, 1.0, "to_reference")[0])], predicted=True),
]

# ---------------------------------------------------------------- hard_world.md: the status block
FIGURES += [
    *group(HW, "HDR reaches that score on 0 of 5 seeds (old base) and 2 of 5 (new base, where "
           "on-policy larger itself does on 3 of 5 and dynamic sampling on 5 of 5).",
           (OLD, WORLDS), [
               ("0", reached(OLD, "hdr")), ("2", reached(WORLDS, "hdr")),
               ("3", reached(WORLDS, "on_policy_larger")),
               ("5", reached(WORLDS, "dynamic_sampling"))],
           tol=0.0),
    *group(HW, "Measured, HDR reaches the target in 1.38x on-policy-larger's time on the old base "
           "and 1.11x on the new one (5 seeds each), where on-policy GRPO takes 0.73x and 0.91x.",
           (OLD, WORLDS), [("1.38", speedup(OLD, "hdr")), ("1.11", speedup(WORLDS, "hdr")),
                           ("0.73", speedup(OLD, "on_policy")),
                           ("0.91", speedup(WORLDS, "on_policy"))]),
    *group(HW, "Predicted on the work-priced clock, same seed for same seed on the new base: naive "
           "replay 0.91x [0.89, 0.94], drift-only 0.91x [0.87, 0.95], dynamic sampling 0.92x "
           "[0.88, 0.97], success-only 0.98x [0.95, 1.03], on-policy GRPO 0.99x [0.91, 1.07], "
           "HDR 1.09x [1.02, 1.15], headroom-only 1.18x [1.15, 1.21].", WORLDS, [
               p for m, shown in (("naive", ("0.91", "0.89", "0.94")),
                                  ("drift_only", ("0.91", "0.87", "0.95")),
                                  ("dynamic_sampling", ("0.92", "0.88", "0.97")),
                                  ("success_replay", ("0.98", "0.95", "1.03")),
                                  ("on_policy", ("0.99", "0.91", "1.07")),
                                  ("hdr", ("1.09", "1.02", "1.15")),
                                  ("headroom_only", ("1.18", "1.15", "1.21")))
               for p in zipped(shown, ival(m))], predicted=True),
    *group(HW, "HDR's drift scan is 23% of its step (measured).", WORLDS, [
        ("23", lambda root: 100 * F.phase_share(root / WORLDS, "hdr"))]),
    *group(HW, "measured, HDR's paired ratio goes 1.78x -> 1.28x and 2.07x -> 1.57x (seeds 0-1)",
           (OLD, LAT02), [("1.78", seed_pair(OLD, 0)), ("1.28", seed_pair(LAT02, 0)),
                          ("2.07", seed_pair(OLD, 1)), ("1.57", seed_pair(LAT02, 1))]),
    *group(HW, "(within 0.6% at 0.2 s, 0.2% at 1.0 s)", (C4_02, PAIR), [
        ("0.6", waits(C4_02, OLD, 0.2, HWP + "runs/calibration")),
        ("0.2", waits(PAIR, WORLDS, 1.0, PAIR_CAL))], tol=0.05),
    *group(HW, "Measured at 0.2 s (one pair), HDR took 1.02x on-policy-larger's time on the "
           "calibrated clock.", C4_02, [("1.02", speedup(C4_02, "hdr"))]),
    *group(HW, "HDR reached the target in **0.95x** on-policy-larger's time", (PAIR, WORLDS), [
        ("0.95", pair("measured"))]),
    *group(HW, "Predicted for that service from the five seeds' latency-0 runs: **0.80x** [0.79, "
           "0.81] (0.81x [0.80, 0.82] same seed)", WORLDS,
           zipped(("0.80", "0.79", "0.81"), ival("hdr", 4, 1.0, "to_reference"))
           + zipped(("0.81", "0.80", "0.82"), ival("hdr", 4, 1.0)), predicted=True),
    *group(HW, "where on-policy GRPO is predicted at 0.80x [0.79, 0.81] too, and naive and "
           "drift-only replay level or ahead (0.81x [0.81, 0.82] and 0.70x [0.70, 0.71] same "
           "seed); predicted for the measured pair's own twins, 0.76x.", (WORLDS, PAIR),
           zipped(("0.80", "0.79", "0.81"), ival("on_policy", 4, 1.0, "to_reference"))
           + zipped(("0.81", "0.81", "0.82"), ival("naive", 4, 1.0))
           + zipped(("0.70", "0.70", "0.71"), ival("drift_only", 4, 1.0))
           + [("0.76", pair("predicted"))], predicted=True),
    *group(HW, "dynamic sampling (0.390 +- 0.008 on the new base", WORLDS, [
        ("0.390", rows(WORLDS, "dynamic_sampling", "final_mean")),
        ("0.008", rows(WORLDS, "dynamic_sampling", "final_std"))]),
    *group(HW, "success-only replay (0.369 +- 0.015, the highest time-averaged EM, 0.302)",
           WORLDS, [
        ("0.369", rows(WORLDS, "success_replay", "final_mean")),
        ("0.015", rows(WORLDS, "success_replay", "final_std")),
        ("0.302", rows(WORLDS, "success_replay", "auc"))]),
    *group(HW, "(6.5% / 29.5% / 88% for tight / moderate / loose tau", OLD, [
        (shown, old_seeds(m, "replay/accept_rate", scale=100))
        for shown, m in (("6.5", "hdr_tau1e-3"), ("29.5", "hdr"), ("88", "hdr_tau1e-1"))]),
    *group(HW, "(0.265 +- 0.012 against 0.251 for the grid's HDR on the same seeds)", OLD, [
        ("0.265", old_seeds("hdr_tau1e-3", "", "final_mean")),
        ("0.012", old_seeds("hdr_tau1e-3", "", "final_std")),
        ("0.251", old_seeds("hdr", "", "final_mean"))]),
    *group(HW, "Predicted on the work-priced clock, same seed: the tight gate at 2.32x [1.96, "
           "2.60] on-policy-larger's time, k_rep 2 the fastest arm at 1.16x [1.07, 1.24], "
           "k_rep 8 the slowest at 2.20x [2.05, 2.37]", OLD,
           zipped(("2.32", "1.96", "2.60"), ival("hdr_tau1e-3", suite=OLD))
           + zipped(("1.16", "1.07", "1.24"), ival("hdr_k2", suite=OLD))
           + zipped(("2.20", "2.05", "2.37"), ival("hdr_k8", suite=OLD)), predicted=True),
]

def rollout_row(quote: str, backend: str, latency: float) -> list[Figure]:
    """A row of async.md's throughput table: lock-step and streaming episodes/s and their ratio,
    the row's three numbers in that order in ``quote``."""
    shown = [c.strip().rstrip("×") for c in quote.strip("| ").split("|")[2:5]]
    keys = ("lockstep_eps_per_s", "async_eps_per_s", "ratio")
    return group(ASYNC, quote, ROLLOUT, [(v, j(ROLLOUT, k, backend=backend, latency_mean_s=latency))
                                         for v, k in zip(shown, keys)])


# ---------------------------------------------------------------- async.md
_E2E = ("reaches the Search-R1-equivalent's final score (0.412) in 0.81× the "
        "Search-R1-equivalent's own time to it** (35.1 s against 43.2 s, 3/3 seeds each), and its "
        "steps take **0.93×** as long (per-step ratio: 4.37 s against 4.72 s)")
TTT, TIME = AS + "pareto_time_to_target.csv", AS + "pareto_time.csv"
FIGURES += [
    *rollout_row("| HF | log-normal, mean 0.5 s, σ 1.0 | 13.5 | 42.7 | 3.15× |", "hf", 0.5),
    *rollout_row("| HF | 0 | 34.6 | 51.3 | 1.48×", "hf", 0.0),
    *rollout_row("| vLLM | log-normal, mean 0.5 s, σ 1.0 | 16.9 | 49.1 | 2.90× |", "vllm", 0.5),
    *rollout_row("| vLLM | 0 | 84.5 | 82.5 | 0.98× |", "vllm", 0.0),
    *group(ASYNC, _E2E, (TTT, TIME), [
        ("0.81", lambda root: F.to_target(root / TTT, "full_stack_async", "search_r1_equivalent")),
        ("35.1", csv_mean(TTT, "time_to_target", method="full_stack_async")),
        ("43.2", csv_mean(TTT, "time_to_target", method="search_r1_equivalent")),
        ("0.93", lambda root: F.per_step(root / TIME, "full_stack_async", "search_r1_equivalent")),
        ("4.37", csv_mean(TIME, "step", method="full_stack_async")),
        ("4.72", csv_mean(TIME, "step", method="search_r1_equivalent"))], citable=False),
    *group(ASYNC, "| 35.1 s (3/3) | **0.81×** | 0.186 |", TTT, [
        ("0.186", csv_mean(TTT, "ratio", method="full_stack_async"))], citable=False),
    *group(ASYNC, "| 43.2 s (3/3) | 1.00× | 0.229 |", TTT, [
        ("0.229", csv_mean(TTT, "ratio", method="search_r1_equivalent"))], citable=False),
    *[f for arm, fin, secs in (("hdr (lock-step)", "0.428 ± 0.010", "278.7 ± 10.9"),
                               ("hdr_streaming", "0.410 ± 0.010", "254.1 ± 18.0"),
                               ("hdr_overlap", "0.408 ± 0.002", "187.7 ± 17.1"))
      for f in group(ASYNC, f"| {arm} | {fin} |", AL + "pareto_time_to_target.csv", [
          (fin.split()[0], csv_mean(AL + "pareto_time_to_target.csv", "final",
                                    method=arm.split()[0]))], citable=False)
      + group(ASYNC, f"| {secs}", AL + "pareto_time_to_target.csv", [
          (secs.split()[0], csv_mean(AL + "pareto_time_to_target.csv", "train_seconds",
                                     method=arm.split()[0]))], citable=False)],
]

# ---------------------------------------------------------------- replay_suite.md
RTTT = RSD + "pareto_time_to_target.csv"
FIGURES += [
    *group(RS, "HDR reaches `on_policy_larger`'s final score in 0.62× `on_policy_larger`'s own "
           "time to it (109.6 s against 176.2 s, mean over the seeds that reach it)", RTTT, [
               ("0.62", lambda root: F.to_target(root / RTTT, "hdr", "on_policy_larger")),
               ("109.6", csv_mean(RTTT, "time_to_target", method="hdr")),
               ("176.2", csv_mean(RTTT, "time_to_target", method="on_policy_larger"))]),
    *group(RS, "matched on-policy GRPO gets there fastest: 0.25× `on_policy_larger`'s time to the "
           "target, and HDR takes 2.48× on-policy GRPO's.", RTTT, [
               ("0.25", lambda root: F.to_target(root / RTTT, "on_policy", "on_policy_larger")),
               ("2.48", lambda root: F.to_target(root / RTTT, "hdr", "on_policy"))]),
    *group(RS, "The target is `on_policy_larger`'s final dev EM, 0.4365.", RSD + "summary.jsonl", [
        ("0.4365", j(RSD + "summary.jsonl", "target.score"))]),
    *group(RS, "**On this CPU HDR's selection cost is 19.2% of its step time above naive replay.**",
           RSD + "pareto_time.csv", [("19.2", lambda root: 100 * float(F.csv_rows(
               root / RSD / "pareto_time.csv", method="hdr")[0]["scan_over_naive"]))]),
]

# ---------------------------------------------------------------- math.md
MP = R + "math/pareto.json"
FIGURES += [
    *group(MATH, "on-policy reaches 0.732 in 46.3 s, HDR in 58.6 s (1.26× on-policy's time), naive "
           "replay in 57.8 s (1.25×).", MP, [
               ("46.3", lambda root: F.curve_to_target(root / MP, "none", 0.732)),
               ("58.6", lambda root: F.curve_to_target(root / MP, "hdr", 0.732)),
               ("57.8", lambda root: F.curve_to_target(root / MP, "naive", 0.732)),
               ("1.26", lambda root: F.curve_to_target(root / MP, "hdr", 0.732)
                / F.curve_to_target(root / MP, "none", 0.732)),
               ("1.25", lambda root: F.curve_to_target(root / MP, "naive", 0.732)
                / F.curve_to_target(root / MP, "none", 0.732))]),
    *group(MATH, "| **all** | **0.040** | **0.808** |", R + "math/diagnose-tiny-math-base.json", [
        ("0.040", j(R + "math/diagnose-tiny-math-base.json", "table.no_tool.all")),
        ("0.808", j(R + "math/diagnose-tiny-math-base.json", "table.tool.all"))]),
    *group(MATH, "Every run gains 75–79 points on 500 dev problems (test: 0.81–0.83)", MATH10, [
        ("75", math3(min, "gain_points")), ("79", math3(max, "gain_points")),
        ("0.81", math3(min, "test_after")), ("0.83", math3(max, "test_after"))]),
]

# ---------------------------------------------------------------- learning/ and vision/
LR, VR = R + "learning/README.md", R + "vision/README.md"
FIGURES += [
    *group(VR, "| training wall-clock, 40 steps | 79 / 87 / 92 s | 54 / 49 / 50 s |",
           (VISION, R + "vision/summary-on-policy.json"), [
               (shown, j(rec, f"{kind}.train_seconds.{i}"))
               for rec, kind, vals in ((VISION, "hdr", ("79", "87", "92")),
                                       (R + "vision/summary-on-policy.json", "none",
                                        ("54", "49", "50")))
               for i, shown in enumerate(vals)], citable=False),
    *group(VR, "| dev after 40 steps | 1.000 / 0.970 / 1.000 | 1.000 / 1.000 / 1.000 |",
           (VISION, R + "vision/summary-on-policy.json"), [
               (shown, j(rec, f"{kind}.dev_after.{i}"))
               for rec, kind, vals in ((VISION, "hdr", ("1.000", "0.970", "1.000")),
                                       (R + "vision/summary-on-policy.json", "none",
                                        ("1.000", "1.000", "1.000")))
               for i, shown in enumerate(vals)], citable=False),
]

# ---------------------------------------------------------------- real_lm.md
from results_real_lm import REAL_LM_FIGURES  # noqa: E402 (its own module: the registry's size)
from results_real_lm_v4 import V4_FIGURES  # noqa: E402
from results_vs_trl import VS_TRL_FIGURES  # noqa: E402 (from-trl.md's measured table)

FIGURES += REAL_LM_FIGURES + V4_FIGURES + VS_TRL_FIGURES
