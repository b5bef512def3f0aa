"""The figures of the fourth real-LM design (the shared-prefix update, ``rl-v4-seed0`` and
``rl-v4-seed1``) in ``docs/results/real_lm.md`` and the README, for
``results_registry.FIGURES``; the earlier designs' are in ``results_real_lm.py``."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from results_real_lm import (
    _GAIN2B,
    EM_KEYS,
    README_,
    RL,
    RL2,
    RL2B,
    adapter_mb,
    gain,
    per_token_update_ms,
    rl2,
    run_median,
    table,
)
from results_sources import R, group, j

from agentsearch.analysis import figures as F

ROOT = Path(__file__).resolve().parents[1]
V4_FIGURES: list = []

RL4B = R + "real_lm/rl-v4-seed1/"


RL4A = R + "real_lm/rl-v4-seed0/"


def _rl4_rows(key: str, record: str = RL4B):
    """``key`` over a fourth-design run's RL steps (step > 0), in order."""
    return lambda root: [r[key] for r in F.json_lines(root / record / "metrics.jsonl")
                         if r["step"] > 0 and key in r]


def _rl4_evals(agg, record: str = RL4B):
    """``agg`` of a fourth-design run's eval seconds (steps 20..200)."""
    def value(root):
        rows = F.json_lines(root / record / "metrics.jsonl")
        return agg(r["time/eval"] for r in rows if r["step"] > 0 and "eval/mean_at_n" in r)
    return value


V4_FIGURES += table(RL4B, (
    ("| warm start (the second recipe's) | 0.830 | 0.859 |", 0), ("| step 20 (992 s) |", 20),
    ("| step 40 (2,023 s) |", 40), ("| step 80 (3,453 s) |", 80), ("| step 120 (4,782 s) |", 120),
    ("| step 160 (6,143 s) |", 160), ("| after RL (200 steps, 7,197 s) |", 200)))
_GAIN4B = [("10.3", gain(200, RL4B))]
V4_FIGURES += [
    *group(RL, "RL added 10.3 points on seed 1, past the target of 10 (the second recipe: 8.0",
           (RL4B, RL2B),
           [*_GAIN4B, _GAIN2B[0]]),
    *group(RL, "(0.877 at step 20 against 0.873, 0.890 at step 40\nagainst 0.897)", (RL4B, RL2B), [
        ("0.877", rl2("eval/mean_at_n", 20, RL4B)), ("0.873", rl2("eval/mean_at_n", 20, RL2B)),
        ("0.890", rl2("eval/mean_at_n", 40, RL4B)), ("0.897", rl2("eval/mean_at_n", 40, RL2B))]),
    *group(RL, "a median step of 33.7 s against 125.2 s", (RL4B, RL2B), [
        ("33.7", run_median("time/step", RL4B)), ("125.2", run_median("time/step", RL2B))]),
    *group(RL, "reached its 200-step cap 3 s before its 2 h budget", RL4B, [
        ("200", lambda root: len(_rl4_rows("time/step")(root))),
        ("3", lambda root: 7200 - rl2("time/train_cumulative", 200, RL4B)(root))]),
    *group(RL, "fell from a median 61.1 ms to 15.0 ms (4.1x) on a median 2.07", (RL4B, RL2B), [
        ("61.1", per_token_update_ms(RL2B)), ("15.0", per_token_update_ms(RL4B)),
        ("4.1", lambda root: per_token_update_ms(RL2B)(root) / per_token_update_ms(RL4B)(root)),
        ("2.07", lambda root: statistics.median(
            p / t for p, t in zip(_rl4_rows("train/positions_forwarded")(root),
                                  _rl4_rows("train/tokens_forwarded")(root), strict=True)))]),
    *group(RL, "(2,907 of\n7,197 s) and generation, a median 18.1 s", RL4B, [
        ("2,907", lambda root: sum(_rl4_rows("time/update")(root))),
        ("7,197", rl2("time/train_cumulative", 200, RL4B)),
        ("18.1", run_median("time/generate", RL4B))]),
    *group(RL, "took 170.0-246.2 s, 5.1-7.3 median steps", RL4B, [
        ("170.0", _rl4_evals(min)), ("246.2", _rl4_evals(max)),
        ("5.1", lambda root: _rl4_evals(min)(root) / run_median("time/step", RL4B)(root)),
        ("7.3", lambda root: _rl4_evals(max)(root) / run_median("time/step", RL4B)(root))]),
    *group(RL, "(5.21\nGB at step 1, 7.53 GB at step 151; 7.63 GB", RL4B, [
        ("5.21", rl2("sys/peak_rss_gb", 1, RL4B)), ("7.53", rl2("sys/peak_rss_gb", 151, RL4B)),
        ("7.63", lambda root: max(_rl4_rows("sys/peak_rss_gb")(root)))]),
    *group(RL, "fired at 10 steps (64 to 195; gaps 0.0016-0.0121 nats)", RL4B, [
        ("10", lambda root: sum(1 for r in F.json_lines(root / RL4B / "metrics.jsonl")
                                if r.get("health/logprob_gap_jumps", 0) == 1)),
        ("0.0016", lambda root: min(g for g, n in zip(_rl4_rows("rollout/logprob_gap")(root),
                                                      _rl4_rows("health/logprob_gap_jumps")(root),
                                                      strict=True) if n > 0)),
        ("0.0121", lambda root: max(g for g, n in zip(_rl4_rows("rollout/logprob_gap")(root),
                                                      _rl4_rows("health/logprob_gap_jumps")(root),
                                                      strict=True) if n > 0))]),
    *group(RL, "a step's gap ranges 1.5e-5 to 0.0123 nats here", RL4B, [
        ("1.5e-5", lambda root: min(_rl4_rows("rollout/logprob_gap")(root))),
        ("0.0123", lambda root: max(_rl4_rows("rollout/logprob_gap")(root)))]),
]
V4_FIGURES += group("docs/from-trl.md", "about 4x less update time per policy token",
                         (RL4B, RL2B), [
    ("4", lambda root: per_token_update_ms(RL2B)(root) / per_token_update_ms(RL4B)(root))])

V4_FIGURES += table(RL4A, (
    ("| warm start (the second recipe's) | 0.820 |", 0), ("| step 20 (1,126 s) |", 20),
    ("| step 40 (1,987 s) |", 40), ("| step 80 (3,476 s) |", 80), ("| step 120 (4,687 s) |", 120),
    ("| step 160 (5,917 s) |", 160), ("| after RL (200 steps, 7,084 s) |", 200)))
_GAIN4A = [("12.7", gain(200, RL4A))]
V4_FIGURES += [
    *group(RL, "RL added 12.7 points on seed 0 (the second recipe: 11.0", (RL4A, RL2), [
        *_GAIN4A, ("11.0", gain(64))]),
    *group(RL, "on both seeds: +12.7 and +10.3, each in 200 steps", (RL4A, RL4B), [
        *_GAIN4A, *_GAIN4B, ("200", lambda root: len(_rl4_rows("time/step", RL4A)(root)))]),
    *group(RL, "Seed 0\nrose faster (0.913 at step 20)", RL4A, [
        ("0.913", rl2("eval/mean_at_n", 20, RL4A))]),
    *group(RL, "recipe scored 0.817 gave 0.820 here", (RL2, RL4A), [
        ("0.817", rl2("eval/mean_at_n", 0)), ("0.820", rl2("eval/mean_at_n", 0, RL4A))]),
    *group(RL, "34.4 s (generate 17.6 s), the update 14.2 ms per policy token forwarded, 2,924 "
               "of 7,084 s", RL4A, [
        ("34.4", run_median("time/step", RL4A)), ("17.6", run_median("time/generate", RL4A)),
        ("14.2", per_token_update_ms(RL4A)),
        ("2,924", lambda root: sum(_rl4_rows("time/update", RL4A)(root))),
        ("7,084", rl2("time/train_cumulative", 200, RL4A))]),
    *group(RL, "an eval took 181.5-213.6 s, 5.3-6.2 median steps", RL4A, [
        ("181.5", _rl4_evals(min, RL4A)), ("213.6", _rl4_evals(max, RL4A)),
        ("5.3", lambda root: _rl4_evals(min, RL4A)(root) / run_median("time/step", RL4A)(root)),
        ("6.2", lambda root: _rl4_evals(max, RL4A)(root) / run_median("time/step", RL4A)(root))]),
    *group(RL, "peak RSS 5.42 GB at step 1, 7.64 GB at\nthe end", RL4A, [
        ("5.42", rl2("sys/peak_rss_gb", 1, RL4A)),
        ("7.64", lambda root: max(_rl4_rows("sys/peak_rss_gb", RL4A)(root)))]),
    *group(RL, "No sync alarm fired: the gaps ranged\n1.5e-5 to 0.0079 nats", RL4A, [
        ("1.5e-5", lambda root: min(_rl4_rows("rollout/logprob_gap", RL4A)(root))),
        ("0.0079", lambda root: max(_rl4_rows("rollout/logprob_gap", RL4A)(root)))]),
]


def _final(key: str, field: str = "eval/mean_at_n", record: str = RL4A):
    """``field`` of the ``key`` eval (``policy/set``) in a run's final_evals.json."""
    return lambda root: json.loads((root / record / "final_evals.json").read_text())[key][field]


def _final_change(policy_set: str, record: str):
    """Points RL moved the ``set`` eval: the adapter's over the warm start's."""
    return lambda root: 100 * (_final(f"adapter/{policy_set}", record=record)(root)
                               - _final(f"warm_start/{policy_set}", record=record)(root))


def _copied_answers(policy: str, record: str):
    """How many of the people slice's decoded answers are a span of their question."""
    def value(root) -> int:
        text = (root / record / "finals" / f"{policy}-people.txt").read_text()
        n = 0
        for block in text.split("=== ")[1:]:
            question = re.findall(r"Question: (.*?)\n", block)
            answers = re.findall(r"<answer>(.*?)</answer>", block)
            n += bool(question and answers and answers[-1].strip().lower()
                      in question[0].lower())
        return n
    return value


_UNSEEN = ("eval/people/mean_at_n", "eval/mean_at_n", "eval/single/mean_at_n",
           "eval/bridge/mean_at_n", "eval/comparison/mean_at_n")  # the table's columns
for _seed, _rec in ((0, RL4A), (1, RL4B)):
    for _policy, _label in (("warm_start", "warm start"), ("adapter", "after RL")):
        _line = next(t for t in (ROOT / RL).read_text().splitlines()
                     if t.startswith(f"| seed {_seed}: {_label} | ") and t.count("|") == 7)
        _shown = [c.strip() for c in _line.strip("| ").split(" | ")[1:]]
        V4_FIGURES += group(RL, _line, _rec, [
            (v, _final(f"{_policy}/{'people' if k == _UNSEEN[0] else 'world500'}", k, _rec))
            for v, k in zip(_shown, _UNSEEN, strict=True)])
V4_FIGURES += [
    *group(RL, "on the people slice it cost 8.7\npoints on seed 0 and 15.9 on seed 1",
           (RL4A, RL4B), [
        ("8.7", lambda root: -_final_change("people", RL4A)(root)),
        ("15.9", lambda root: -_final_change("people", RL4B)(root))]),
    *group(RL, "it gave +1.3 on seed 0 and cost 11.0 on\nseed 1 (its single-hop questions 0.434 -> "
               "0.164)", (RL4A, RL4B), [
        ("1.3", _final_change("world500", RL4A)),
        ("11.0", lambda root: -_final_change("world500", RL4B)(root)),
        ("0.434", _final("warm_start/world500", "eval/single/mean_at_n", RL4B)),
        ("0.164", _final("adapter/world500", "eval/single/mean_at_n", RL4B))]),
    *group(RL, "went from 25 to 34 on seed 0 and from\n34 to 43 on seed 1", (RL4A, RL4B), [
        ("25", _copied_answers("warm_start", RL4A)), ("34", _copied_answers("adapter", RL4A)),
        ("34", _copied_answers("warm_start", RL4B)), ("43", _copied_answers("adapter", RL4B))]),
    *group(RL, "gave +12.7 on seed 0 and\n+10.3 on seed 1: the target is met", (RL4A, RL4B), [
        *_GAIN4A, *_GAIN4B]),
]


def _readme_rows(seed: int, sft_record: str, record: str) -> list:
    """The README's two rows of a seed: the warm start (its SFT seconds from the recipe that
    trained it, ``sft_record``; its EM from ``record``'s step 0) and after RL."""
    lines = (ROOT / README_).read_text().splitlines()
    out = []
    for label, step in (("warm start", 0), ("after RL", 200)):
        line = next(t for t in lines if t.startswith(f"| seed {seed}: {label} ("))
        head = line.split("(")[1].split(")")[0]  # "24 SFT steps, 936.1 s" / "200 steps, 7,084 s"
        secs = head.split(", ")[1].removesuffix(" s")
        shown = [c.strip() for c in line.strip("| ").split(" | ")[1:]]
        pairs = [(v, rl2(k, step, record)) for v, k in zip(shown, EM_KEYS, strict=True)]
        pairs += ([(secs, rl2("time/sft", 0, sft_record))] if step == 0 else
                  [(secs, rl2("time/train_cumulative", step, record)),
                   ("200", rl2("step", step, record))])
        out += group(README_, line, (record, sft_record) if step == 0 else record, pairs)
    return out


V4_FIGURES += [
    *_readme_rows(0, RL2, RL4A), *_readme_rows(1, RL2B, RL4B),
    *group(README_, "RL adds +12.7 and +10.3 points", (RL4A, RL4B), [*_GAIN4A, *_GAIN4B]),
    *group(README_, "a median RL step of 34.4 s and\n33.7 s", (RL4A, RL4B), [
        ("34.4", run_median("time/step", RL4A)), ("33.7", run_median("time/step", RL4B))]),
    *group(README_, "RL lost 8.7 and 15.9 points", (RL4A, RL4B), [
        ("8.7", lambda root: -_final_change("people", RL4A)(root)),
        ("15.9", lambda root: -_final_change("people", RL4B)(root))]),
    *group(README_, "+1.3 and -11.0 (it learned", (RL4A, RL4B), [
        ("1.3", _final_change("world500", RL4A)), ("-11.0", _final_change("world500", RL4B))]),
    *group(README_, "The fp16 adapter (9.8 MB)", RL4A, [("9.8", adapter_mb(RL4A))]),
]

CHUNK = R + "real_lm/bench_eval_chunk.jsonl"


def _generate_quartile(i: int):
    """Quartile ``i`` (0, 1, 2) of seed 0's generate phase over its RL steps."""
    return lambda root: statistics.quantiles(_rl4_rows("time/generate", RL4A)(root), n=4)[i]


def _eval_floor(i: int, steps: bool):
    """300 episodes at the step's sampling throughput (64 a step): predicted seconds, or steps."""
    def value(root) -> float:
        sec = _generate_quartile(i)(root) * 300 / 64
        return sec / run_median("time/step", RL4A)(root) if steps else sec
    return value


V4_FIGURES += [
    *group(RL, "all at once 200.6 s (5.8 median steps of that run), chunks of 32 152.6 s (4.4), "
               "chunks of 16\n155.4 s (4.5), the same 0.947 dev EM each", CHUNK, [
        (v, j(CHUNK, k, bench="eval_chunk")) for v, k in (
            ("200.6", "chunk0.seconds"), ("5.8", "chunk0.steps"),
            ("152.6", "chunk32.seconds"), ("4.4", "chunk32.steps"),
            ("155.4", "chunk16.seconds"), ("4.5", "chunk16.steps"))]),
    *group(RL, "a generate phase of 16.4-18.9 s", RL4A, [
        ("16.4", _generate_quartile(0)), ("18.9", _generate_quartile(2))]),
    *group(RL, "would take 77-89 s, 2.2-2.6 median steps (predicted", RL4A, [
        ("77", _eval_floor(0, False)), ("89", _eval_floor(2, False)),
        ("2.2", _eval_floor(0, True)), ("2.6", _eval_floor(2, True))], predicted=True),
    *group(RL, "costs 4.4\nRL steps in chunks of 32", CHUNK, [
        ("4.4", j(CHUNK, "chunk32.steps", bench="eval_chunk"))]),
    *group(README_, "costs 4.4 RL steps (target: one;", CHUNK, [
        ("4.4", j(CHUNK, "chunk32.steps", bench="eval_chunk"))]),
    *group(README_, "(target: one; 2.2-2.6 predicted as this CPU's floor)", RL4A, [
        ("2.2", _eval_floor(0, True)), ("2.6", _eval_floor(2, True))], predicted=True),
]

BF16_BENCH = R + "real_lm/bench_real_lm_bf16.jsonl"
BENCH_LM = R + "real_lm/bench_real_lm.jsonl"
V4_FIGURES += [
    *group(RL, "| +12.7 and +10.3 points, 200 steps in 7,084 and 7,197 s |", (RL4A, RL4B), [
        *_GAIN4A, *_GAIN4B, ("200", rl2("step", 200, RL4A)),
        ("7,084", rl2("time/train_cumulative", 200, RL4A)),
        ("7,197", rl2("time/train_cumulative", 200, RL4B))]),
    *group(RL, "| 7.72x (bf16 engine, prefix caching) |", BF16_BENCH, [
        ("7.72", j(BF16_BENCH, "gen_vllm_merged_pc_bf16_over_hf", bench="real_lm"))]),
    *group(RL, "| 1.40x |", BENCH_LM, [
        ("1.40", j(BENCH_LM, "update_packed_over_bare_fp32", bench="real_lm"))]),
    *group(RL, "| 7.64 and 7.63 GB (the two runs) |", (RL4A, RL4B), [
        ("7.64", lambda root: max(_rl4_rows("sys/peak_rss_gb", RL4A)(root))),
        ("7.63", lambda root: max(_rl4_rows("sys/peak_rss_gb", RL4B)(root)))]),
    *group(RL, "| an eval of 300 questions <= one RL step | 4.4 steps |", CHUNK, [
        ("4.4", j(CHUNK, "chunk32.steps", bench="eval_chunk"))]),
]
