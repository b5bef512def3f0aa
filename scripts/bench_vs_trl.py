"""agentsearch beside TRL's GRPOTrainer on the same model, task, tool and retriever (issue 51).

    python scripts/bench_vs_trl.py check   # equivalence: the same tokens in both systems
    python scripts/bench_vs_trl.py run --arms trl ours-hf ours-best --seeds 0 1 [--latency]
    python scripts/bench_vs_trl.py keep     # finished runs' records -> docs/results/vs_trl/
    python scripts/bench_vs_trl.py summary [--markdown]  # one JSON line per run and ratio

``check`` (equivalence first, timing second): TRL 1.16's ``GRPOTrainer`` takes one real step on
SmolLM2-135M-Instruct (the warm-start adapter of the kept run merged in, LoRA on top) over
``agentsearch/WikiSearch-v0`` with the env's ``search`` tool (``scripts/trl_peer.py``); the
first rollout TRL generated (prompt ids, completion ids, its tool mask) is then played through
agentsearch's own rollout, the model's turns forced to TRL's sampled ids. Both must build the
same first-prompt token ids, the same tokens for every tool turn, and the same loss mask (tool
results masked out in both); otherwise it prints the first difference and exits 1. One JSON line.
A rollout without a tool call proves nothing about tool turns: the check takes the first
rollout of the batch that made one (and fails if none did).

``run`` (resumable; a finished run is skipped, a cut one resumes from its checkpoint): each arm
from the same warm start (``WARM_START`` merged into SmolLM2), the same ``SETTINGS`` (prompts
per step in agentsearch's sampler order for the seed, group size, turns, tokens per turn,
temperature, lr, clip, LoRA), until the first eval at ``TARGET`` or 2 h of training wall
clock (``stop_at``, ``time_budget_s``), scored by agentsearch's
evaluator (greedy, the same 300 dev questions) at step 0 and every ``eval_every`` steps, its
time outside the clock. Arms: ``trl`` (GRPOTrainer, HF generation, ``trl_peer.run_trl``),
``ours-hf`` (agentsearch, HF generation: like for like), ``ours-best`` (agentsearch with the
vLLM engine in the CPU's fastest dtype, streaming rollout beside the update, HDR replay:
``OURS``, ``fastest_cpu_engine_dtype``). ``--latency``: every search call also waits a log-normal
delay of mean 0.5 s (sigma 0.5), in TRL one call after another.
Runs go to ``runs/vs_trl/<arm>[-lat]-seed<k>``, nothing else should run beside them; ``keep``
copies a finished run's records into ``docs/results/vs_trl/`` (``runs/`` does not outlive a
session's machine: keep each run as it finishes; ``run`` skips a kept one).

``summary``: per run, the training seconds to reach ``TARGET`` (fixed before the first run),
seconds per step by phase, generated tokens per second, final dev EM; per arm, its mean time
to target over TRL's, only between runs on one CPU kind (provenance); one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vs_trl_records  # noqa: E402

from agentsearch.core.provenance import (  # noqa: E402
    ALLOW_DIRTY_HELP,
    require_clean,
    stamp_run,
)
from agentsearch.rollout.backends import Generation, SamplingParams  # noqa: E402

WARM_START = ROOT / "docs" / "results" / "real_lm" / "rl-v2-seed0" / "warm_start"
OUT = ROOT / "runs" / "vs_trl"
KEPT = ROOT / "docs" / "results" / "vs_trl"
"""Finished runs' records (``keep``): what lands, so the grid goes on in the next session
(``runs/`` does not outlive a session's machine) and ``summary`` reads them."""
TARGET = 0.88
"""Greedy dev EM (300 dev questions) each arm's time is measured to; the warm start has 0.817
(docs/results/real_lm/rl-v2-seed0). Fixed on 2026-12-06, before any timing run."""
SETTINGS = {"prompts": 8, "group": 8, "max_turns": 3, "max_new_tokens": 64, "max_seq_len": 1024,
            "prompt_allowance": 280, "temperature": 1.0, "lr": 1e-4, "clip": 0.2,
            "eval_every": 4, "eval_limit": 300, "time_budget_s": 7200, "max_steps": 100,
            "stop_at": TARGET,
            "lora": {"r": 16, "alpha": 32,
                     "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                 "up_proj", "down_proj"]}}
"""What every arm shares (TRL's keys: ``trl_peer.trl_config``; ours: ``ours_overrides``)."""
LATENCY = {"kind": "lognormal", "mean_s": 0.5, "sigma": 0.5}
ENV_ID = "agentsearch/WikiSearch-v0"
ENV_KWARGS = {"turn_format": "json", "topk": 2, "max_turns": 3}


class ForcedTurns:
    """A backend that 'samples' the given turns' token ids, one per call (one episode)."""

    def __init__(self, tokenizer, turns: list[list[int]]) -> None:
        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        assert len(prompts) == 1, "one episode at a time"
        ids = self.turns[self.calls]
        self.calls += 1
        reason = "eos" if ids and ids[-1] == self.tokenizer.eos_token_id else "length"
        return [Generation(token_ids=list(ids), logprobs=[0.0] * len(ids), finish_reason=reason)]


def policy(init_from: Path | None, *, trainable: bool = False):
    """SmolLM2 (fp32, agentsearch's tool template) with the warm-start adapter merged in, or
    (``trainable``) loaded as the LoRA that trains on: what agentsearch's arms get from
    ``init_from=ADAPTER`` under LoRA (``models.lora.continue_adapter``), so both systems start
    from the same parameters, not only the same function."""
    import torch

    from agentsearch.models.lora import merge_adapter
    from agentsearch.models.text import load_model

    model, tok = load_model("smollm2", dtype=torch.float32)
    if init_from is not None and trainable:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, str(init_from), is_trainable=True), tok
    if init_from is not None:
        model = merge_adapter(model, init_from)
    return model, tok


def one_batch_trainer(model, tok, rows: list[dict], *, generations: int, seed: int,
                      out_dir: Path, **over):
    """TRL's ``GRPOTrainer`` (the shared settings) for one optimizer step whose single
    generation batch is every row of ``rows`` x ``generations``."""
    from trl_peer import build_trainer, trl_config

    args = trl_config(SETTINGS, out_dir, seed, max_steps=1, save_strategy="no",
                      per_device_train_batch_size=generations, num_generations=generations,
                      gradient_accumulation_steps=len(rows), **over)
    return build_trainer(SETTINGS, args, rows, model, tok, env_id=ENV_ID,
                         env_kwargs=ENV_KWARGS)


def trl_first_batch(model, tok, rows: list[dict], *, generations: int, seed: int,
                    max_completion_length: int, out_dir: Path) -> tuple[list, float]:
    """One real ``GRPOTrainer`` step over ``rows`` (the shared settings, ``generations``
    rollouts of each row); what its first ``_generate`` returned (recorded on the way through)
    and the step's seconds."""
    trainer = one_batch_trainer(model, tok, rows, generations=generations, seed=seed,
                                out_dir=out_dir, max_completion_length=max_completion_length)
    recorded, generate = [], trainer._generate

    def recording(prompts):
        out = generate(prompts)
        recorded.append(out)
        return out

    trainer._generate = recording
    t0 = time.perf_counter()
    trainer.train()
    return recorded[0], time.perf_counter() - t0


def agentsearch_episode(tok, task: dict, turns: list[list[int]]):
    """agentsearch's rollout of ``task`` with the model's turns forced to ``turns``."""
    import agentsearch
    from agentsearch.rollout.episodes import rollout

    env = agentsearch.make_env(ENV_ID, **ENV_KWARGS)
    params = SamplingParams(max_new_tokens=max(len(t) for t in turns), stop=env.stop_strings)
    episodes, _ = rollout([env], [task], ForcedTurns(tok, turns), params,
                          max_turns=ENV_KWARGS["max_turns"])
    return episodes[0]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(tok, trl_prompt: list[int], trl_completion: list[int], trl_mask: list[int],
            episode) -> dict:
    """Where the two systems' tokens and loss masks differ (empty ``diffs``: nowhere)."""
    ours_prompt = episode.token_ids[:episode.prompt_len]
    ours_mask = episode.action_mask[episode.prompt_len:]
    diffs = []
    for what, theirs, ours in (("first prompt ids", trl_prompt, ours_prompt),
                               ("conversation ids", trl_prompt + trl_completion,
                                episode.token_ids),
                               ("loss mask after the prompt", trl_mask, ours_mask)):
        i = first_difference(theirs, ours)
        if i is not None:
            ids = theirs if what != "loss mask after the prompt" else trl_completion
            diffs.append({"what": what, "index": i, "trl": theirs[i:i + 8], "agentsearch":
                          ours[i:i + 8], "context": tok.decode(ids[max(0, i - 24):i + 8])})
    return {"diffs": diffs, "prompt_tokens": len(trl_prompt),
            "completion_tokens": len(trl_completion),
            "tool_tokens": trl_mask.count(0), "model_tokens": trl_mask.count(1)}


def check(a) -> int:
    from trl_peer import split_turns, task_rows

    import agentsearch

    prov = require_clean("bench_vs_trl", a.allow_dirty)
    env = agentsearch.make_env(ENV_ID, **{**ENV_KWARGS, "split": a.split})
    tasks = env.tasks[a.offset:a.offset + a.prompts]
    rows = task_rows(env, tasks)
    model, tok = policy(a.init_from)
    with tempfile.TemporaryDirectory() as tmp:
        batch, seconds = trl_first_batch(model, tok, rows, generations=a.generations,
                                         seed=a.seed, max_completion_length=a.max_completion,
                                         out_dir=Path(tmp))
    prompt_ids, completion_ids, tool_mask = batch[0], batch[1], batch[2]
    with_tool = [i for i, m in enumerate(tool_mask or []) if 0 in m]
    result = {"bench": "vs_trl_check", "trl_step_s": round(seconds, 1),
              "rollouts": len(prompt_ids), "with_tool_call": len(with_tool), "provenance": prov}
    if not with_tool:
        result["diffs"] = [{"what": "no TRL rollout made a tool call: nothing to compare"}]
    else:
        i = with_tool[0]
        task = tasks[i // a.generations]  # TRL repeats each row num_generations times
        turns = split_turns(completion_ids[i], tool_mask[i])
        episode = agentsearch_episode(tok, task, turns)
        result.update(compare(tok, prompt_ids[i], completion_ids[i], tool_mask[i], episode),
                      task_id=str(task.get("id")), turns=len(turns))
    print(json.dumps(result), flush=True)
    return 1 if result["diffs"] else 0


def ours_overrides(seed: int, latency: bool) -> list[str]:
    """``agentsearch train --preset smollm2-search`` overrides for ``SETTINGS`` (the preset's
    own values are restated: what the runs compare must not move with the preset)."""
    s, lora = SETTINGS, SETTINGS["lora"]
    out = [f"seed={seed}", f"init_from={WARM_START}", "sft.steps=0",
           f"prompts_per_step={s['prompts']}", f"group_size={s['group']}",
           f"max_turns={s['max_turns']}", f"generation.max_new_tokens={s['max_new_tokens']}",
           f"max_seq_len={s['max_seq_len']}", f"generation.temperature={s['temperature']}",
           "generation.top_p=1.0", f"lr={s['lr']}", "warmup_steps=0", "weight_decay=0.0",
           "adam_betas=[0.9,0.999]", "grad_clip=1.0", "loss=grpo", "agg=token",
           f"clip_low={s['clip']}", f"clip_high={s['clip']}", "kl_coef=0.0",
           "advantage_scale=std", f"lora.r={lora['r']}", f"lora.alpha={lora['alpha']}",
           "lora.dropout=0.0", f"lora.target_modules=[{','.join(lora['targets'])}]",
           f"eval.every={s['eval_every']}", f"eval.limit={s['eval_limit']}", "eval.n=1",
           "eval.temperature=0.0", "eval.backend=vllm", "eval.vllm_dtype=float32",
           f"checkpoint_every={s['eval_every']}",
           f"time_budget_s={s['time_budget_s']}", f"steps={s['max_steps']}",
           f"eval.stop_at={s['stop_at']}"]
    if latency:
        out += [f"tool_latency.{k}={v}" for k, v in LATENCY.items()]
    return out


OURS = {"ours-hf": ["generation.backend=hf", "replay.kind=none", "async.enabled=false"],
        "ours-best": ["generation.backend=vllm", "async.enabled=true", "async.max_staleness=1",
                      "replay.kind=hdr", "rescore_groups=none"]}
"""agentsearch's arms: like for like (HF generation, lock-step, no replay), and at its best
(the overlapped rollout needs every group rescored: ``rescore_groups=none``), whose vLLM engine
runs in the dtype fastest on the machine's CPU (``fastest_cpu_engine_dtype``)."""


def arm_overrides(arm: str, seed: int, latency: bool) -> list[str]:
    """An agentsearch arm's overrides on the preset: the shared settings, the arm's own."""
    from agentsearch.trainer.setup import fastest_cpu_engine_dtype

    extra = [f"generation.vllm_dtype={fastest_cpu_engine_dtype()}"] if arm == "ours-best" \
        else []
    return ours_overrides(seed, latency) + OURS[arm] + extra


def trl_evaluate(tok, folder: Path, seed: int, log: Path):
    """The TRL arm's scorer: agentsearch's evaluator (``agentsearch eval``, the ours-hf arm's
    config: the fp32 vLLM engine of ``eval.backend=vllm``, whose greedy tokens are HF's, which
    scores agentsearch's arms too) on the policy so far, saved merged into ``folder`` for the
    call and removed after; its ``eval/*`` and ``time/eval`` as agentsearch's runs log them."""
    import shutil

    from trl_peer import save_merged

    from agentsearch.recipes.runner import agentsearch_eval

    def evaluate(model, step: int) -> dict:
        path = save_merged(model, tok, folder / f"policy-step{step}")
        res = agentsearch_eval("--preset", "smollm2-search", "--split", "dev",
                               "--limit", str(SETTINGS["eval_limit"]),
                               *ours_overrides(seed, False), f"init_from={path}",
                               "generation.backend=vllm", "generation.vllm_dtype=float32",
                               "threads=2", threads=2, log=log)
        shutil.rmtree(path)
        # time/eval: the evaluator's episodes, as agentsearch's runs log it (outside the clock)
        return {k: v for k, v in res.items() if k.startswith("eval/") or k == "time/eval"}

    return evaluate


def run(a) -> int:
    from trl_peer import run_trl, task_rows

    import agentsearch
    from agentsearch.recipes.runner import train_run
    from agentsearch.trainer.setup import TaskSampler

    require_clean("bench_vs_trl", a.allow_dirty)
    for seed in a.seeds:
        for arm in a.arms:
            if (a.out / "HOLD").exists():
                print(f"[vs_trl] {a.out}/HOLD: no new run starts", flush=True)
                return 0
            folder = a.out / f"{arm}{'-lat' if a.latency else ''}-seed{seed}"
            if (KEPT / folder.name / "metrics.jsonl").exists():
                print(f"[vs_trl] {folder.name}: kept in {KEPT} already", flush=True)
                continue
            print(f"[vs_trl] {folder}", flush=True)
            if arm in OURS:
                train_run(folder, "smollm2-search", arm_overrides(arm, seed, a.latency),
                          threads=2)
                continue
            if vs_trl_records.finished(folder):
                continue
            env = agentsearch.make_env(ENV_ID, **ENV_KWARGS)
            sampler = TaskSampler(env.tasks, seed=seed)  # agentsearch's order for this seed
            tasks = [t for _ in range(SETTINGS["max_steps"])
                     for t in sampler.sample(SETTINGS["prompts"])]
            model, tok = policy(WARM_START, trainable=True)
            stamp_run(folder)  # provenance.json, as agentsearch's runs have
            run_trl(folder, SETTINGS, task_rows(env, tasks), model, tok, seed=seed,
                    evaluate=trl_evaluate(tok, folder, seed, folder / "eval.log"),
                    env_id=ENV_ID, env_kwargs=ENV_KWARGS,
                    latency=LATENCY if a.latency else None)
            (folder / "DONE").write_text("finished\n")
    return 0


def keep(a) -> int:
    settings = {"settings": SETTINGS, "target": TARGET, "env": ENV_ID, "env_kwargs": ENV_KWARGS}
    print(json.dumps(vs_trl_records.keep(a.out, a.to, settings, LATENCY)))
    return 0


def summary(a) -> int:
    lines = vs_trl_records.summary(a.out, TARGET, SETTINGS["prompts"] * SETTINGS["group"])
    print(vs_trl_records.markdown(lines) if a.markdown else
          "\n".join(json.dumps(line) for line in lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="equivalence of the two systems' tokens and masks")
    c.add_argument("--init-from", type=Path, default=WARM_START,
                   help="a LoRA adapter merged into SmolLM2 first (default: the kept warm start)")
    c.add_argument("--split", default="train")
    c.add_argument("--offset", type=int, default=0)
    c.add_argument("--prompts", type=int, default=1)
    c.add_argument("--generations", type=int, default=2)
    c.add_argument("--max-completion", type=int,
                   default=SETTINGS["max_seq_len"] - SETTINGS["prompt_allowance"])
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    r = sub.add_parser("run", help="the timing runs (resumable)")
    r.add_argument("--arms", nargs="+", default=["trl", "ours-hf", "ours-best"],
                   choices=["trl", *OURS])
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    r.add_argument("--latency", action="store_true")
    r.add_argument("--out", type=Path, default=OUT)
    r.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    k = sub.add_parser("keep", help="finished runs' records into the repository")
    k.add_argument("--out", type=Path, default=OUT)
    k.add_argument("--to", type=Path, default=KEPT)
    m = sub.add_parser("summary", help="time to target per arm, one JSON line each")
    m.add_argument("--out", type=Path, default=KEPT, help="the runs (default: the kept ones)")
    m.add_argument("--markdown", action="store_true",
                   help="the runs' table as docs/from-trl.md prints it, not JSON lines")
    a = ap.parse_args()
    return {"check": check, "run": run, "keep": keep, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
