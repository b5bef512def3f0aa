"""The side-by-side's figures (issue 51) for ``results_registry.FIGURES``: every number of the
measured table in ``docs/from-trl.md`` (``bench_vs_trl.py summary --markdown``), recomputed
from the kept runs under ``docs/results/vs_trl/`` by ``vs_trl_records``."""

from __future__ import annotations

import re
from pathlib import Path

import vs_trl_records as V
from results_sources import R, group, j

ROOT = Path(__file__).resolve().parents[1]
PAGE, VS = "docs/from-trl.md", R + "vs_trl/"
TARGET, ROLLOUTS = 0.88, 64
"""``bench_vs_trl.TARGET`` and its prompts x group (tests/test_vs_trl.py checks both)."""


def run_value(run: str, field: str):
    """A field (or median phase) of the kept run's summary line."""
    def value(root: Path) -> float:
        return V.field_of(V.run_line(root / VS / run, TARGET, ROLLOUTS), field)
    return value


def table_figures(page_text: str) -> list:
    """Each numeric cell of every table row that names a kept run (``| <run> | ...``)."""
    out = []
    for row in page_text.splitlines():
        name = row.split("|")[1].strip() if row.startswith("| ") else ""
        if not (ROOT / VS / name / "metrics.jsonl").exists() or not name:
            continue
        cells = [c.strip() for c in row.strip("| ").split(" | ")[1:]]
        pairs = [(shown, run_value(name, field))
                 for shown, (_, field) in zip(cells, V.COLUMNS, strict=True)
                 if field is not None and re.fullmatch(r"[\d,]+(\.\d+)?", shown)]
        out += group(PAGE, row, VS + name + "/metrics.jsonl", pairs)
    return out


def eval_at(run: str, step: int):
    """The kept run's dev EM at ``step``."""
    return lambda root: next(r["eval/mean_at_n"] for r in V.json_rows(root / VS / run)
                             if r.get("step") == step and "eval/mean_at_n" in r)


def over(run: str, key: str, pick=max):
    """``pick`` (max, min) of ``key`` over the kept run's records (``run``: a folder under
    ``vs_trl/``, e.g. ``cut/ours-hf-seed0`` for a run cut short)."""
    return lambda root: pick(r[key] for r in V.json_rows(root / VS / run) if key in r)


def ratio_bound(arm: str):
    """The arm's ``ratio_to_trl_at_most`` (TRL short of the target) from ``summary``."""
    return lambda root: next(x["ratio_to_trl_at_most"] for x in V.summary(
        root / VS, TARGET, ROLLOUTS) if x.get("bench") == "vs_trl_ratio" and x["arm"] == arm)


T0 = VS + "trl-seed0/metrics.jsonl"
B0 = VS + "ours-best-seed0/metrics.jsonl"
C0 = VS + "cut/ours-hf-seed0/metrics.jsonl"
HR = VS + "bench_hf_rollout.jsonl"  # whole rollouts, TRL's and ours, by malloc setting
DEFAULT_MALLOC = {"provenance__git": "1a78085c1d0c83b09df73cdd07968583d7537aa0"}
HG = VS + "bench_hf_generate.jsonl"  # HFBackend vs TRL-style generate, per decode step
AB = R + "real_lm/bench_real_lm_avx2.jsonl"  # the engine dtypes on an AVX2-only CPU
VS_TRL_FIGURES = table_figures((ROOT / PAGE).read_text()) + [
    *group(PAGE, "0.853 at step 4, 0.870 at step 8, after\n7,701 s of training", T0, [
        ("0.853", eval_at("trl-seed0", 4)), ("0.870", eval_at("trl-seed0", 8)),
        ("7,701", run_value("trl-seed0", "training_s"))]),
    *group(PAGE, "0.843 at step 4, 0.877 at step 8,\n0.893 at step 12, after 2,370 s", B0, [
        ("0.843", eval_at("ours-best-seed0", 4)), ("0.877", eval_at("ours-best-seed0", 8)),
        ("0.893", eval_at("ours-best-seed0", 12)),
        ("2,370", run_value("ours-best-seed0", "seconds_to_target"))]),
    *group(PAGE, "took at most 0.31x TRL's time", B0, [("0.31", ratio_bound("ours-best"))],
           tol=0.005),
    *group(PAGE, "`ours-best`'s update took 92 s", B0, [
        ("92", run_value("ours-best-seed0", "update"))], tol=0.5),
    *group(PAGE, "25 to 50 s for 8", C0, [
        ("25", over("cut/ours-hf-seed0", "time/update", min)),
        ("50", over("cut/ours-hf-seed0", "time/update", max))], tol=0.5),
    *group(PAGE, "482 to 556 s of HF generation", C0, [
        ("482", over("cut/ours-hf-seed0", "time/generate", min)),
        ("556", over("cut/ours-hf-seed0", "time/generate", max))], tol=0.5),
    *group(PAGE, "`HFBackend.generate` takes 1.055x", HG, [
        ("1.055", j(HG, "ratio_to_trl.ours"))]),
    *group(PAGE, "| glibc's defaults (clean 1a78085) | 351, 334 | 505, 430 | 1.18 |", HR, [
        ("351", j(HR, "rounds.trl.0.seconds", **DEFAULT_MALLOC)),
        ("334", j(HR, "rounds.trl.1.seconds", **DEFAULT_MALLOC)),
        ("505", j(HR, "rounds.ours.0.seconds", **DEFAULT_MALLOC)),
        ("430", j(HR, "rounds.ours.1.seconds", **DEFAULT_MALLOC)),
        ("1.18", j(HR, "ours_time_per_token_over_trl", **DEFAULT_MALLOC))]),
    *group(PAGE, "| kept for reuse (clean 40a3300) | 213, 193 | 287, 296 | 1.25 |", HR, [
        ("213", j(HR, "rounds.trl.0.seconds", malloc="keep")),
        ("193", j(HR, "rounds.trl.1.seconds", malloc="keep")),
        ("287", j(HR, "rounds.ours.0.seconds", malloc="keep")),
        ("296", j(HR, "rounds.ours.1.seconds", malloc="keep")),
        ("1.25", j(HR, "ours_time_per_token_over_trl", malloc="keep"))]),
    *group(PAGE, "spent 25 to 28 s of system\ntime (1.4 to 1.5 million faults)", HR, [
        ("25", j(HR, "rounds.ours", lambda v: min(x["system_s"] for x in v), malloc="keep")),
        ("28", j(HR, "rounds.ours", lambda v: max(x["system_s"] for x in v), malloc="keep")),
        ("1.4", j(HR, "rounds.ours", lambda v: min(x["page_faults"] for x in v) / 1e6,
                  malloc="keep")),
        ("1.5", j(HR, "rounds.ours", lambda v: max(x["page_faults"] for x in v) / 1e6,
                  malloc="keep"))]),
    *group("docs/install.md", "took 430-505 s that way and 287-296 s", HR, [
        ("430", j(HR, "rounds.ours", lambda v: min(x["seconds"] for x in v), **DEFAULT_MALLOC)),
        ("505", j(HR, "rounds.ours", lambda v: max(x["seconds"] for x in v), **DEFAULT_MALLOC)),
        ("287", j(HR, "rounds.ours", lambda v: min(x["seconds"] for x in v), malloc="keep")),
        ("296", j(HR, "rounds.ours", lambda v: max(x["seconds"] for x in v), malloc="keep"))]),
    *group(PAGE, "reached 0.883 at step 8", VS + "ours-hf-seed0/metrics.jsonl", [
        ("0.883", eval_at("ours-hf-seed0", 8))]),
    *group(PAGE, "it took at most 0.32x\nTRL's time", VS + "ours-hf-seed0/metrics.jsonl",
           [("0.32", ratio_bound("ours-hf"))], tol=0.005),
    *group(PAGE, "Its median step spent 268.4 s generating, TRL's\n262.5 s", T0, [
        ("268.4", run_value("ours-hf-seed0", "generate")),
        ("262.5", run_value("trl-seed0", "generate"))]),
    *group(PAGE, "its update, 41.9 s against TRL's 690.6", T0, [
        ("41.9", run_value("ours-hf-seed0", "update")),
        ("690.6", run_value("trl-seed0", "update"))]),
    *group(PAGE, "15% more tokens (3,895 against 3,387", HR, [
        ("15", lambda root: 100 * (j(HR, "rounds.ours.0.tokens", malloc="keep")(root)
                                   / j(HR, "rounds.trl.0.tokens", malloc="keep")(root) - 1)),
        ("3,895", j(HR, "rounds.ours.0.tokens", malloc="keep")),
        ("3,387", j(HR, "rounds.trl.0.tokens", malloc="keep"))]),
    *group(PAGE, "its peak RSS was 14.9 GB", T0, [("14.9", over("trl-seed0", "sys/peak_rss_gb"))]),
    *group(PAGE, "the fp32 engine sampled\n65.5 tokens/s and the bf16 one 13.5", AB, [
        ("65.5", j(AB, "gen_vllm_merged_pc.tokens_per_s")),
        ("13.5", j(AB, "gen_vllm_merged_pc_bf16.tokens_per_s"))]),
    *group(PAGE, "(about 16 minutes a step", T0, [
        ("16", lambda root: run_value("trl-seed0", "median_step_s")(root) / 60)], tol=0.5),
]
