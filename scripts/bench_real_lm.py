"""The real-LM path's speed and memory, side by side in one run: one JSON line.

SmolLM2-135M-Instruct with LoRA r16 (the ``smollm2-search`` preset), on the oracle's
WikiSearch-v0 transcripts (real token layouts: system prompt with the tool schema, question,
tool call, two summaries, answer). Each part runs in a child process of its own, so each
reports its own peak RSS:

- ``gen_*``: the same first-turn prompts, 48 new tokens each at temperature 1, with HF
  ``generate`` (batched), vLLM with the adapter as a ``LoRARequest``, and vLLM with the
  adapter merged (``generation.vllm_lora_sync``), the last also with prefix caching
  (``_pc``), and that in bfloat16 (``_bf16``: the engine's weights and KV cache; the trainer
  stays fp32; ``generation.vllm_dtype``); tokens/s of the second of two calls, the vLLM engine
  synced in between as after an update (which empties the prefix cache: only what the batch's
  prompts share is reused, as in a training step). Each vLLM part also reports
  ``logprob_gap``: the mean |sampler logprob - trainer (fp32) logprob| over the sampled tokens,
  what ``rollout/logprob_gap`` logs in training.
- ``update_*``: a LoRA forward+backward over the transcripts' tokens, padded batches of 8
  rows vs one unpadded row at a time (``micro_batch_size=1``), the latter also with the base
  weights in bf16 (``update_packed_bf16``: ``dtype=bfloat16``); ``bare_fp32``: a forward+
  backward of the plain model, every weight trained, one row at a time: the machine's limit
  for this work. ``update_tree``: the same rows as one prefix tree (``shared_prefix``: what
  rows share from their start is forwarded once; here one transcript per question, so only
  the system prompt is shared, not a group's question: a training step's groups share more);
  its tokens/s counts every row's tokens, so it reads against ``update_packed``.
  ``logprobs``: the no-grad scoring pass, one row at a time.

    python scripts/bench_real_lm.py --episodes 16 --out docs/results/real_lm/bench_real_lm.jsonl
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentsearch.core.provenance import (  # noqa: E402
    ALLOW_DIRTY_HELP,
    emit_records,
    require_clean,
)

PARTS = ("gen_hf", "gen_vllm_adapter", "gen_vllm_merged", "gen_vllm_merged_pc",
         "gen_vllm_merged_pc_bf16",
         "update_padded8", "update_packed", "update_packed_bf16", "update_tree", "bare_fp32",
         "logprobs")


RATIOS = {  # name -> (part, reference part): tokens/s over tokens/s, measured in one run
    "gen_vllm_merged_over_hf": ("gen_vllm_merged", "gen_hf"),
    "gen_merged_over_adapter": ("gen_vllm_merged", "gen_vllm_adapter"),
    "gen_vllm_merged_pc_over_hf": ("gen_vllm_merged_pc", "gen_hf"),
    "gen_vllm_merged_pc_bf16_over_hf": ("gen_vllm_merged_pc_bf16", "gen_hf"),
    "gen_bf16_over_fp32": ("gen_vllm_merged_pc_bf16", "gen_vllm_merged_pc"),
    "update_packed_over_bare_fp32": ("update_packed", "bare_fp32"),
    "update_packed_over_padded8": ("update_packed", "update_padded8"),
    "update_bf16_over_fp32": ("update_packed_bf16", "update_packed"),
    "update_tree_over_packed": ("update_tree", "update_packed"),
}


def _setup(episodes: int, overrides: list[str]):
    import torch

    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.setup import build_envs, build_policy
    from agentsearch.trainer.train_config import TrainConfig
    from agentsearch.warmstart.search_oracle import oracle_episodes

    torch.set_num_threads(2)
    torch.manual_seed(0)
    cfg = apply_overrides(TrainConfig, "smollm2-search", overrides)
    model, tok = build_policy(cfg)
    eps = oracle_episodes(build_envs(cfg, episodes), tok, count=episodes, turn_format="json",
                          world="wiki", max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len)
    return cfg, model, tok, eps


def _generate(part: str, cfg, model, tok, eps) -> dict:
    from agentsearch.rollout.backends import SamplingParams

    prompts = [e.token_ids[:e.prompt_len] for e in eps]
    if part == "gen_hf":
        from agentsearch.rollout.hf import HFBackend

        backend = HFBackend(model, tok)
    else:
        from agentsearch.rollout.vllm import VLLMBackend

        backend = VLLMBackend(model, tok, max_model_len=cfg.max_seq_len + 64,
                              max_lora_rank=cfg.lora.r,
                              lora_sync="adapter" if part.endswith("adapter") else "merged",
                              prefix_caching="_pc" in part,
                              dtype="bfloat16" if part.endswith("_bf16") else "float32")
    params = SamplingParams(max_new_tokens=48, temperature=1.0, seed=0)
    backend.generate(prompts, params)  # warm-up (kernels, caches)
    if part != "gen_hf":
        backend.sync(model)  # as after an update: the prefix cache starts empty
    t0 = time.perf_counter()
    gens = backend.generate(prompts, params)
    seconds = time.perf_counter() - t0
    tokens = sum(len(g.token_ids) for g in gens)
    out = {"seconds": seconds, "tokens": tokens, "prompt_tokens": sum(map(len, prompts))}
    if part != "gen_hf":
        out["logprob_gap"] = _logprob_gap(model, prompts, gens)
    return out


def _logprob_gap(model, prompts, gens) -> float:
    """Mean |sampler - trainer| logprob over the sampled tokens (trainer: fp32, one row at a
    time, temperature 1 as sampled)."""
    import torch

    from agentsearch.models.logprobs import token_logprobs

    diffs = []
    with torch.no_grad():
        for p, g in zip(prompts, gens):
            ids = torch.tensor([list(p) + list(g.token_ids)])
            lp = token_logprobs(model, ids)[0, len(p):]
            diffs += (lp - torch.tensor(g.logprobs)).abs().tolist()
    return sum(diffs) / max(len(diffs), 1)


def _train_pass(part: str, cfg, model, tok, eps) -> dict:
    import torch

    from agentsearch.algorithms.update import pad_rows
    from agentsearch.models.logprobs import token_logprobs
    from agentsearch.warmstart.sft import _row

    rows = [_row(e, False, None) for e in eps]
    if part == "bare_fp32":
        model = model.get_base_model() if hasattr(model, "get_base_model") else model
        for p in model.parameters():
            p.requires_grad_(True)
    size = 8 if part == "update_padded8" else 1
    batches = [rows[s:s + size] for s in range(0, len(rows), size)]
    tokens = sum(len(r.ids) for r in rows)
    model.train(part != "logprobs")
    t0 = time.perf_counter()
    if part == "update_tree":
        from agentsearch.models.prefix_tree import tree_backward

        forwarded = tree_backward(model, [r.ids for r in rows], [r.mask for r in rows],
                                  lambda i, lp: -lp.sum())
        return {"seconds": time.perf_counter() - t0, "tokens": tokens,
                "tokens_forwarded": forwarded}
    for b in batches:
        mb = pad_rows(b, "cpu")
        if part == "logprobs":
            with torch.no_grad():
                token_logprobs(model, mb["ids"], mb["attn"], target_mask=mb["mask"])
            continue
        lp = token_logprobs(model, mb["ids"], mb["attn"], target_mask=mb["mask"])
        (-lp.sum()).backward()
    return {"seconds": time.perf_counter() - t0, "tokens": tokens}


def child(part: str, episodes: int) -> dict:
    # update_packed_bf16: the trainer's base weights in bf16 (``dtype=bfloat16``; the adapter
    # and its gradients stay fp32)
    cfg, model, tok, eps = _setup(episodes, ["dtype=bfloat16"] if part.startswith("update_")
                                  and part.endswith("_bf16") else [])
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    out = (_generate if part.startswith("gen_") else _train_pass)(part, cfg, model, tok, eps)
    out["tokens_per_s"] = out["tokens"] / out["seconds"]
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    out["rss_before_gb"] = base_rss
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--parts", nargs="*", default=list(PARTS))
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every part this many times, alternating the order; each part "
                         "reports its median round (the machine's speed drifts: one run of "
                         "2026-12-06 measured HF 3.8x slower than the day before)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="append the JSON line to this file too")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a.child, a.episodes)), flush=True)
        return 0
    import torch  # noqa: F401  (imported here so the provenance's machine line names the
    # CPU capability: the parts' speeds differ between AVX2 and AVX512 machines)

    prov = require_clean("bench_real_lm", a.allow_dirty)
    runs: dict[str, list[dict]] = {part: [] for part in a.parts}
    for r in range(a.rounds):  # rounds alternate the order: a drift in the machine's speed
        for part in (a.parts if r % 2 == 0 else a.parts[::-1]):  # falls on every part alike
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--child", part, "--episodes",
                                   str(a.episodes)], capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"bench_real_lm: part {part} failed:\n{proc.stderr[-3000:]}")
            runs[part].append(json.loads(line[-1][len("RESULT "):]))
            print(f"[bench_real_lm] round {r + 1}/{a.rounds} {part}: {runs[part][-1]} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    res = {}  # per part: its median round by tokens/s, and every round's tokens/s
    for part, rs in runs.items():
        ordered = sorted(rs, key=lambda x: x["tokens_per_s"])
        res[part] = {**ordered[(len(ordered) - 1) // 2],
                     "tokens_per_s_rounds": [x["tokens_per_s"] for x in rs]}
    ratio = {name: res[a]["tokens_per_s"] / res[b]["tokens_per_s"]
             for name, (a, b) in RATIOS.items() if {a, b} <= set(res)}
    line = {"bench": "real_lm", "model": "smollm2 + LoRA r16", "episodes": a.episodes, **res,
            **{k: round(v, 3) for k, v in ratio.items()}, "provenance": prov}
    emit_records([line], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
