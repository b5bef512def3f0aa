"""The figures of ``docs/results/real_lm.md`` (the real-LM issue's records), for
``results_registry.FIGURES``: the WikiSearch baselines, the first training runs of the
``smollm2-search`` preset and ``bench_real_lm``'s side-by-side line."""

from __future__ import annotations

from pathlib import Path

from results_sources import Figure, R, group, j

from agentsearch.analysis import figures as F

REAL_LM_FIGURES: list[Figure] = []
RL, RLB = R + "real_lm.md", R + "real_lm/baselines.jsonl"


def pct(dotted: str, **match):
    """A fraction of a baselines line, as the page prints it: a percentage."""
    return lambda root: 100 * F.field(root / RLB, dotted, **match)


_SPLITS = {"dev (493, constructed)": "dev", "people (69, FanOutQA)": "people"}
_KINDS = {"BM25 (bm25s)": "bm25s", "dense (MiniLM, flat)": "dense-flat"}
_CONTEXTS = {"none (closed book)": "none", "gold summary (oracle)": "gold",
             "BM25 top 3": "retrieved"}


def _row(text: str) -> list[str]:
    return [c.strip() for c in text.strip().strip("|").split("|")]


def _baseline_rows(root_page: str) -> list[Figure]:
    """Every number of the page's two baseline tables, each against its line of the record."""
    out, rows = [], 0
    for text in (Path(__file__).resolve().parents[1] / root_page).read_text().splitlines():
        cells = _row(text) if text.startswith("| ") else []
        if len(cells) == 6 and cells[0] in _SPLITS and cells[1] in _KINDS:
            m = dict(bench="wiki_retrieval", split=_SPLITS[cells[0]], kind=_KINDS[cells[1]])
            keys = ("recall_at_1", "recall_at_3", "recall_at_10", "answer_in_top3")
        elif len(cells) == 7 and cells[1] in _CONTEXTS:
            m = dict(bench="wiki_answering", split=cells[0], context=_CONTEXTS[cells[1]])
            keys = ("em", "in_reply", "by_type.name.in_reply", "by_type.year.in_reply",
                    "by_type.nationality.in_reply")
        else:
            continue
        shown, rows = cells[-len(keys):], rows + 1
        out += group(root_page, text, RLB, [(s.rstrip("%"), pct(k, **m))
                                             for s, k in zip(shown, keys) if s])
    if rows != 10:  # 4 retrieval rows, 6 answering rows: a renamed row must not go unchecked
        raise ValueError(f"{root_page}: {rows} baseline rows recognised, not 10")
    return out


REAL_LM_FIGURES += [
    *_baseline_rows(RL),
    *group(RL, "(closed book 12.8% -> 70.2% in reply with the gold summary)", RLB, [
        ("12.8", pct("in_reply", bench="wiki_answering", split="dev", context="none")),
        ("70.2", pct("in_reply", bench="wiki_answering", split="dev", context="gold"))]),
]

TRIAL = R + "real_lm/trial-sft8/"


def trial(key: str, step: int):
    return lambda root: F.run_metric(root / TRIAL, key, step)


REAL_LM_FIGURES += [
    *group(RL, "8 warm-start steps of 8 transcripts took 129.8 s", TRIAL, [
        ("129.8", trial("time/sft", 0))]),
    *group(RL, "(eval format reward -0.281, 2.875 turns per episode, 0 searches", TRIAL, [
        ("-0.281", trial("eval/format_reward", 0)), ("2.875", trial("eval/turns_mean", 0)),
        ("0", trial("eval/searches", 0))]),
    *group(RL, "step of 32 episodes took 147.8 s: generate 55.2 s (3,492 tokens", TRIAL, [
        ("147.8", trial("time/step", 1)), ("55.2", trial("time/generate", 1)),
        ("3,492", trial("tokens/generated", 1))]),
    *group(RL, "logprobs 36.0 s, update 56.0 s, sync 0.49 s", TRIAL, [
        ("36.0", trial("time/logprobs", 1)), ("56.0", trial("time/update", 1)),
        ("0.49", trial("time/sync", 1))]),
]

SFT24 = R + "real_lm/sft24-lr1e-3/"


def sft24(key: str):
    return lambda root: F.run_metric(root / SFT24, key, 0)


REAL_LM_FIGURES += [
    *group(RL, "24 steps took 468.5 s and the greedy policy then scored 0.604 EM on the first "
               "48 dev questions (name 0.515, year 0.889, nationality 0.667), 0.708 searches per "
               "episode", SFT24, [
                   ("468.5", sft24("time/sft")), ("0.604", sft24("eval/mean_at_n")),
                   ("48", sft24("eval/questions")), ("0.515", sft24("eval/name/mean_at_n")),
                   ("0.889", sft24("eval/year/mean_at_n")),
                   ("0.667", sft24("eval/nationality/mean_at_n")),
                   ("0.708", sft24("eval/searches"))], citable=False),
    *group(RL, "or the model answers without searching (27.3% of", SFT24, [
        ("27.3", lambda root: 100 * sft24("eval/name/no_search_answer")(root))], citable=False),
]

BENCH_LM = R + "real_lm/bench_real_lm.jsonl"
_PARTS = {"generate, HF `generate` (one batch)": "gen_hf",
          "generate, vLLM, adapter as a `LoRARequest`": "gen_vllm_adapter",
          "generate, vLLM, adapter merged": "gen_vllm_merged",
          "LoRA forward+backward, padded batches of 8": "update_padded8",
          "LoRA forward+backward, one unpadded row at a time": "update_packed",
          "full-weight fp32 forward+backward, one row at a time": "bare_fp32",
          "no-grad logprobs, one row at a time": "logprobs"}
for _label, _part in _PARTS.items():
    _text = next(t for t in (Path(__file__).resolve().parents[1] / RL).read_text().splitlines()
                 if t.startswith(f"| {_label} |"))
    _tps, _rss = _row(_text)[1], _row(_text)[2].removesuffix(" GB")
    REAL_LM_FIGURES += group(RL, _text, BENCH_LM, [
        (_tps, j(BENCH_LM, f"{_part}.tokens_per_s", bench="real_lm")),
        (_rss, j(BENCH_LM, f"{_part}.peak_rss_gb", bench="real_lm"))])
REAL_LM_FIGURES += [
    *group(RL, "the update's 261.3 tokens/s is 1.40x a bare fp32 forward+backward", BENCH_LM, [
        ("261.3", j(BENCH_LM, "update_packed.tokens_per_s", bench="real_lm")),
        ("1.40", j(BENCH_LM, "update_packed_over_bare_fp32", bench="real_lm"))]),
    *group(RL, "generation on vLLM is 1.78x HF's at the same batch", BENCH_LM, [
        ("1.78", j(BENCH_LM, "gen_vllm_merged_over_hf", bench="real_lm"))]),
    *group(RL, "the prompts are 265 tokens and the answers about 33", BENCH_LM, [
        ("265", lambda root: F.field(root / BENCH_LM, "gen_hf.prompt_tokens", bench="real_lm")
         / F.field(root / BENCH_LM, "episodes", bench="real_lm")),
        ("33", lambda root: F.field(root / BENCH_LM, "gen_vllm_merged.tokens", bench="real_lm")
         / F.field(root / BENCH_LM, "episodes", bench="real_lm"))]),
    *group(RL, "and 4.76x is what merging the adapter bought", BENCH_LM, [
        ("4.76", j(BENCH_LM, "gen_merged_over_adapter", bench="real_lm"))]),
]

PC = R + "real_lm/bench_real_lm_prefix_caching.jsonl"
REAL_LM_FIGURES += group(RL, "vLLM merged 68.6 tokens/s without and 97.6 with prefix caching, "
                             "against HF's 34.5: 2.83x HF at the same batch", PC, [
    ("68.6", j(PC, "gen_vllm_merged.tokens_per_s", bench="real_lm")),
    ("97.6", j(PC, "gen_vllm_merged_pc.tokens_per_s", bench="real_lm")),
    ("34.5", j(PC, "gen_hf.tokens_per_s", bench="real_lm")),
    ("2.83", j(PC, "gen_vllm_merged_pc_over_hf", bench="real_lm"))])

RL0 = R + "real_lm/rl-seed0/"


def rl0(key: str, step: int):
    return lambda root: F.run_metric(root / RL0, key, step)


def run_median(key: str, record: str = RL0):
    """The median of ``key`` over a run record's RL steps (step > 0)."""
    import statistics

    def value(root: Path) -> float:
        rows = F.json_lines(root / record / "metrics.jsonl")
        return statistics.median(r[key] for r in rows if r["step"] > 0 and key in r)
    return value


_T0 = "| warm start: 24 SFT steps, 468.8 s | 0.823 | 0.884 | 0.729 | 0.656 | 0.977 |"
_T1 = "| RL: 66 steps, 7,210 s | 0.907 | 0.929 | 0.843 | 0.906 | 0.980 |"
REAL_LM_FIGURES += [
    *group(RL, _T0, RL0, [("468.8", rl0("time/sft", 0)), ("0.823", rl0("eval/mean_at_n", 0)),
                          ("0.884", rl0("eval/name/mean_at_n", 0)),
                          ("0.729", rl0("eval/year/mean_at_n", 0)),
                          ("0.656", rl0("eval/nationality/mean_at_n", 0)),
                          ("0.977", rl0("eval/searches", 0))]),
    *group(RL, _T1, RL0, [("66", rl0("step", 66)), ("7,210", rl0("time/train_cumulative", 66)),
                          ("0.907", rl0("eval/mean_at_n", 66)),
                          ("0.929", rl0("eval/name/mean_at_n", 66)),
                          ("0.843", rl0("eval/year/mean_at_n", 66)),
                          ("0.906", rl0("eval/nationality/mean_at_n", 66)),
                          ("0.980", rl0("eval/searches", 66))]),
    *group(RL, "RL added 8.3 points (the target is 10)", RL0, [
        ("8.3", lambda root: 100 * (rl0("eval/mean_at_n", 66)(root)
                                    - rl0("eval/mean_at_n", 0)(root)))]),
    *group(RL, "a step 95.3 s, of which generate 18.3 s", RL0, [
        ("95.3", run_median("time/step")), ("18.3", run_median("time/generate"))]),
    *group(RL, "logprobs 3.6 s, update 73.1 s. In the median step 75% of the", RL0, [
        ("3.6", run_median("time/logprobs")), ("73.1", run_median("time/update")),
        ("75", lambda root: 100 * run_median("groups/zero_variance_frac")(root))]),
    *group(RL, "An eval of the 300 questions took 302.7 s and 230.7 s at steps 20 and 40", RL0, [
        ("302.7", rl0("time/eval", 20)), ("230.7", rl0("time/eval", 40))]),
    *group(RL, "(836.3 s and 531.9 s at", RL0, [
        ("836.3", rl0("time/eval", 60)), ("531.9", rl0("time/eval", 66))]),
]

BF16 = R + "real_lm/bench_real_lm_bf16.jsonl"
REAL_LM_FIGURES += [
    *group(RL, "vLLM merged with prefix caching 35.83 tokens/s in fp32", BF16, [
        ("35.83", j(BF16, "gen_vllm_merged_pc.tokens_per_s", bench="real_lm"))]),
    *group(RL, "and 70.68 in bf16 (1.97x), against HF's 9.16 (7.72x", BF16, [
        ("70.68", j(BF16, "gen_vllm_merged_pc_bf16.tokens_per_s", bench="real_lm")),
        ("1.97", j(BF16, "gen_bf16_over_fp32", bench="real_lm")),
        ("9.16", j(BF16, "gen_hf.tokens_per_s", bench="real_lm")),
        ("7.72", j(BF16, "gen_vllm_merged_pc_bf16_over_hf", bench="real_lm"))]),
    *group(RL, "peak RSS 5.25 GB fp32, 4.36 GB bf16", BF16, [
        ("5.25", j(BF16, "gen_vllm_merged_pc.peak_rss_gb", bench="real_lm")),
        ("4.36", j(BF16, "gen_vllm_merged_pc_bf16.peak_rss_gb", bench="real_lm"))]),
    *group(RL, "from the trainer's fp32 ones, against 0.000 for the fp32 engine", BF16, [
        ("0.000", j(BF16, "gen_vllm_merged_pc.logprob_gap", bench="real_lm"))]),
    *group(RL, "The price: the sampler's logprobs sit 0.035 nats", BF16, [
        ("0.035", j(BF16, "gen_vllm_merged_pc_bf16.logprob_gap", bench="real_lm"))]),
]

README_ = "README.md"


def adapter_mb(record: str):
    """The size in MB of a run record's kept fp16 adapter."""
    adapter = Path(record) / "adapter" / "adapter_model.safetensors"
    return lambda root: (root / adapter).stat().st_size / 1e6


def _eval_over_step(step: int):
    return lambda root: rl0("time/eval", step)(root) / run_median("time/step")(root)


REAL_LM_FIGURES += [
    *group(README_, "| base SmolLM2 (no adapter) | 0.000 | 0.000 | 0.000 | 0.000 |", RLB,
           [("0.000", lambda root: F.field(root / RLB, "em", bench="wiki_answering", split="dev",
                                           context="gold"))]
           + [("0.000", lambda root, t=t: F.field(root / RLB, f"by_type.{t}.em",
                                                  bench="wiki_answering", split="dev",
                                                  context="gold"))
              for t in ("name", "year", "nationality")]),
    *group(RL, "steps 60 and 66, beside other work on the machine): 2.4-3.2 median steps", RL0, [
        ("2.4", _eval_over_step(40)), ("3.2", _eval_over_step(20))]),
]

RL2 = R + "real_lm/rl-v2-seed0/"


def rl2(key: str, step: int, record: str = RL2):
    return lambda root: F.run_metric(root / record, key, step)


def gain(step: int, record: str = RL2):
    """RL's points of dev EM in ``record``: the eval at ``step`` over the warm start's (step 0)."""
    return lambda root: 100 * (rl2("eval/mean_at_n", step, record)(root)
                               - rl2("eval/mean_at_n", 0, record)(root))


def _rl2_eval_over_step(fn, record: str = RL2):
    def value(root: Path) -> float:
        rows = F.json_lines(root / record / "metrics.jsonl")
        return fn(r["time/eval"] for r in rows if r["step"] > 0 and "eval/mean_at_n" in r) \
            / run_median("time/step", record)(root)
    return value


EM_KEYS = ("eval/mean_at_n", "eval/name/mean_at_n", "eval/year/mean_at_n",
           "eval/nationality/mean_at_n")  # a table row's EM columns, in order


def _rl2_rows(warm: str, after: str, record: str = RL2) -> list:
    """(quote, pairs) of a run's two table rows: ``| warm start (24 SFT steps, S s) | EM ...``
    and ``| after RL (N steps, T s) | EM ...``, every number against its record."""
    keys = EM_KEYS
    last = int(after.split("(")[1].split()[0])  # the final step, as the row says
    sft, train = warm.split(", ")[1].split()[0], after.split(", ")[1].split()[0]
    out = []
    for quote, step, head in ((warm, 0, [(sft, rl2("time/sft", 0, record))]),
                              (after, last, [(str(last), rl2("step", last, record)),
                                             (train, rl2("time/train_cumulative", last,
                                                         record))])):
        shown = quote.strip("| ").split(" | ")[1:]
        out.append((quote, head + [(v, rl2(k, step, record)) for v, k in zip(shown, keys)]))
    return out


_WARM2 = "| warm start (24 SFT steps, 936.1 s) | 0.817 | 0.874 | 0.743 | 0.625 |"
_AFTER2 = "| after RL (64 steps, 7,211 s) | 0.927 | 0.949 | 0.843 | 0.969 |"
_GAIN2 = [("11.0", gain(64))]
_EVAL2 = [("1.7", _rl2_eval_over_step(min)), ("1.9", _rl2_eval_over_step(max))]
REAL_LM_FIGURES += [
    *[f for quote, pairs in _rl2_rows(_WARM2.replace("| warm", "| seed 0: warm"),
                                      _AFTER2.replace("| after", "| seed 0: after"))
      for f in group(RL, quote, RL2, pairs)],
    *group(RL, "Seed 0: RL added 11.0 points", RL2, _GAIN2),
    *group(RL, "took\n184.2-207.7 s, 1.7-1.9 median steps", RL2, [
        ("184.2", lambda r: min(x for x in [rl2("time/eval", s)(r) for s in (20, 40, 60, 64)])),
        ("207.7", lambda r: max(x for x in [rl2("time/eval", s)(r) for s in (20, 40, 60, 64)])),
        *_EVAL2]),
    *group(RL, "peak RSS (vLLM engine and index\nin process) was 7.01 GB", RL2, [
        ("7.01", lambda root: max(r.get("sys/peak_rss_gb", 0)
                                  for r in F.json_lines(root / RL2 / "metrics.jsonl")))]),
]

RL2B = R + "real_lm/rl-v2-seed1/"
_WARM2B = "| seed 1: warm start (24 SFT steps, 856.3 s) | 0.830 | 0.854 | 0.729 | 0.906 |"
_AFTER2B = "| seed 1: after RL (58 steps, 7,252 s) | 0.910 | 0.919 | 0.886 | 0.906 |"
_GAIN2B = [("8.0", gain(58, RL2B))]
REAL_LM_FIGURES += [
    *[f for quote, pairs in _rl2_rows(_WARM2B, _AFTER2B, RL2B)
      for f in group(RL, quote, RL2B, pairs)],
    *group(RL, "and +8.0 on seed 1: the target", RL2B, _GAIN2B),
    *group(RL, "Seed 1 fell short: RL added 8.0 points (dev EM 0.873 at step 20, 0.897", RL2B, [
        *_GAIN2B, ("0.873", rl2("eval/mean_at_n", 20, RL2B)),
        ("0.897", rl2("eval/mean_at_n", 40, RL2B))]),
    *group(RL, "median 125.2 s against seed 0's 108.8 s: 58 steps", (RL2B, RL2), [
        ("125.2", run_median("time/step", RL2B)), ("108.8", run_median("time/step", RL2)),
        ("58", rl2("step", 58, RL2B))]),
    *group(RL, "An eval took 206.5-223.2 s, again 1.6-1.8 median steps", RL2B, [
        ("206.5", lambda r: min(rl2("time/eval", s, RL2B)(r) for s in (20, 40, 58))),
        ("223.2", lambda r: max(rl2("time/eval", s, RL2B)(r) for s in (20, 40, 58))),
        ("1.6", _rl2_eval_over_step(min, RL2B)), ("1.8", _rl2_eval_over_step(max, RL2B))]),
    *group(RL, "Peak RSS 6.92 GB; no sampler-sync alarm", RL2B, [
        ("6.92", lambda root: max(r.get("sys/peak_rss_gb", 0)
                                  for r in F.json_lines(root / RL2B / "metrics.jsonl")))]),
]

RL3B = R + "real_lm/rl-v3-seed1/"


def per_token_update_ms(record: str):
    """The median over a run's RL steps of update seconds per policy token forwarded, in ms."""
    import statistics

    def value(root: Path) -> float:
        rows = F.json_lines(root / record / "metrics.jsonl")
        return 1000 * statistics.median(r["time/update"] / r["train/tokens_forwarded"]
                                        for r in rows if r["step"] > 0
                                        and r.get("train/tokens_forwarded"))
    return value


def table(record: str, rows) -> list:
    """Figures of a per-step table in real_lm.md: each (row start, step) row's EM columns
    (EM_KEYS) and, past step 0, the training seconds in its label, from ``record``."""
    lines = (Path(__file__).resolve().parents[1] / RL).read_text().splitlines()
    out = []
    for quote, step in rows:
        line = next(t for t in lines if t.startswith(quote))
        shown = [c.strip() for c in line.strip("| ").split(" | ")[1:]]
        out += group(RL, line, record, [(v, rl2(k, step, record))
                                        for v, k in zip(shown, EM_KEYS, strict=True)])
        if step:
            secs = quote.split("(")[1].split(" s)")[0].split(", ")[-1]
            out += group(RL, line, record, [(secs, rl2("time/train_cumulative", step, record))])
    return out


REAL_LM_FIGURES += table(RL3B, (
    ("| warm start (the second recipe's) | 0.830 |", 0), ("| step 20 (2,266 s) | 0.870 |", 20),
    ("| step 40 (4,627 s) | 0.890 |", 40), ("| step 60 (6,742 s) | 0.890 |", 60),
    ("| after RL (65 steps, 7,216 s) | 0.920 |", 65)))
REAL_LM_FIGURES += [
    *group(RL, "RL added 9.0 points: more than the second recipe's 8.0", (RL3B, RL2B), [
        ("9.0", gain(65, RL3B)),
        ("8.0", _GAIN2B[0][1])]),
    *group(RL, "(median step 105.8 s against 125.2 s: 65 steps", (RL3B, RL2B), [
        ("105.8", run_median("time/step", RL3B)), ("125.2", run_median("time/step", RL2B)),
        ("65", rl2("step", 65, RL3B))]),
    *group(RL, "a median 54.6 against 61.1 ms of update", (RL3B, RL2B), [
        ("54.6", per_token_update_ms(RL3B)), ("61.1", per_token_update_ms(RL2B))]),
    *group(RL, "(0.870 at step 20 against\n0.873, 0.890 at step 40 against 0.897)", (RL3B, RL2B), [
        ("0.870", rl2("eval/mean_at_n", 20, RL3B)), ("0.873", rl2("eval/mean_at_n", 20, RL2B)),
        ("0.890", rl2("eval/mean_at_n", 40, RL3B)), ("0.897", rl2("eval/mean_at_n", 40, RL2B))]),
    *group(RL, "(5,369 of 7,252 s)", RL2B, [
        ("5,369", lambda root: sum(r.get("time/update", 0) for r in
                                   F.json_lines(root / RL2B / "metrics.jsonl"))),
        ("7,252", rl2("time/train_cumulative", 58, RL2B))]),
    *group(RL, "step after step to 11.38 GB", RL3B, [
        ("11.38", lambda root: max(r.get("sys/peak_rss_gb", 0)
                                   for r in F.json_lines(root / RL3B / "metrics.jsonl")))]),
]
