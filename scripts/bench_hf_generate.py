"""Side by side: agentsearch's ``HFBackend.generate`` against transformers' ``generate`` as TRL's
``GRPOTrainer`` calls it, on the same 64 first-turn prompts (8 WikiSearch tasks x 8) of
SmolLM2-135M-Instruct with the vs-TRL warm-start LoRA (a peft model, as both arms train it).

    python scripts/bench_hf_generate.py [--tokens 32] [--rounds 2]

Parts (``--parts``): ``trl`` (``GenerationConfig`` of TRL's transformers path: sampling, no
logits processor, no stopping criteria), ``trl_logprobs`` (the same plus agentsearch's
sampled-token logprob recorder), ``trl_stop`` (the same plus its stop-string criteria),
``ours`` (``HFBackend.generate``: both). Every part decodes exactly ``--tokens`` steps
(``min_new_tokens``), so seconds per decode step compare like for like; rounds alternate the
parts' order. One JSON line: seconds per decode step per part (median over rounds) and each
part's ratio to ``trl``.

``--rollout``: whole multi-turn rollouts instead, the work of one training step of the vs-TRL
arms (``--tasks`` x ``--group`` episodes, the tool called, up to 3 turns of 64 new tokens):
``trl`` is ``GRPOTrainer._generate`` (TRL's tool-call loop, stopped before its update),
``ours`` agentsearch's ``rollout`` over ``HFBackend`` (what the ``ours-hf`` arm runs). One JSON
line: each part's seconds, model tokens, generate calls, tokens per second, ratio to ``trl``.

``--malloc keep``: the process runs with ``agentsearch.core.cpu_memory.keep_freed_memory`` (what
agentsearch's train and eval set up, ``keep_freed_memory=true``); ``default``: glibc's
defaults, as a TRL process runs. The line names it and each part's system (kernel) seconds
and page faults, where the defaults' cost shows.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, emit_records, require_clean  # noqa: E402

PARTS = ("trl", "trl_logprobs", "trl_stop", "ours")


def prompts_and_stop(tok, n_tasks: int, group: int) -> tuple[list[list[int]], tuple[str, ...]]:
    """The first-turn prompt ids of ``n_tasks`` train tasks x ``group``, and the turns' stops."""
    from bench_vs_trl import ENV_ID, ENV_KWARGS

    import agentsearch
    from agentsearch.rollout.backends import SamplingParams
    from agentsearch.rollout.turns import start_episodes

    env = agentsearch.make_env(ENV_ID, **ENV_KWARGS)
    tasks = list(env.tasks)[:n_tasks]
    make = lambda: agentsearch.make_env(ENV_ID, **ENV_KWARGS)  # noqa: E731
    runs, _, stop = start_episodes(make, tasks, tok, SamplingParams(), n_per_task=group,
                                   seed=0, max_seq_len=None)
    return [r.ids for r in runs], stop


def timed_part(part: str, model, tok, prompts, stop, tokens: int) -> float:
    """Seconds per decode step of one ``part`` over ``prompts`` (exactly ``tokens`` steps)."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

    from agentsearch.rollout.backends import SamplingParams
    from agentsearch.rollout.hf import HFBackend, _LogprobRecorder, _StopInGenerated

    torch.manual_seed(0)
    if part == "ours":
        backend = HFBackend(model, tok)
        orig = backend._config

        def exact(p):  # the same decode length as the other parts
            cfg = orig(p)
            cfg.min_new_tokens = tokens
            return cfg

        backend._config = exact
        t0 = time.perf_counter()
        backend.generate(prompts, SamplingParams(max_new_tokens=tokens, temperature=1.0,
                                                 stop=stop, seed=0))
        return (time.perf_counter() - t0) / tokens
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(prompts):
        ids[i, width - len(x):], mask[i, width - len(x):] = torch.tensor(x), 1
    cfg = GenerationConfig(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                           temperature=1.0, top_p=1.0, top_k=0, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id, disable_compile=True)
    procs = LogitsProcessorList([_LogprobRecorder(1.0)] if part == "trl_logprobs" else [])
    stops = StoppingCriteriaList([_StopInGenerated(stop, tok, width)] if part == "trl_stop"
                                 else [])
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                       logits_processor=procs, stopping_criteria=stops)
    return (time.perf_counter() - t0) / tokens


class _Stop(Exception):
    """Raised after TRL's ``_generate`` returns: the rollout is all that is timed."""


def trl_rollout(model, tok, tasks: list[dict], group: int) -> dict:
    """One ``GRPOTrainer._generate`` over ``tasks`` x ``group`` (the arms' TRL settings)."""
    import tempfile

    from bench_vs_trl import ENV_ID, ENV_KWARGS, one_batch_trainer
    from trl_peer import task_rows

    import agentsearch

    env = agentsearch.make_env(ENV_ID, **ENV_KWARGS)
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = one_batch_trainer(model, tok, task_rows(env, tasks), generations=group,
                                    seed=0, out_dir=Path(tmp))
        generate = trainer._generate

        def timed(prompts):
            t0 = time.perf_counter()
            out = generate(prompts)
            result["seconds"] = time.perf_counter() - t0
            tool_mask, completions = out[2], out[1]
            result["tokens"] = sum(map(sum, tool_mask)) if tool_mask else \
                sum(map(len, completions))
            result["episodes"] = len(completions)
            raise _Stop

        trainer._generate = timed
        try:
            trainer.train()
        except _Stop:
            pass
    assert result.get("episodes") == len(tasks) * group, result
    return result


def ours_rollout(model, tok, tasks: list[dict], group: int) -> dict:
    """agentsearch's ``rollout`` over ``HFBackend`` on ``tasks`` x ``group`` (the ours-hf arm)."""
    from bench_vs_trl import ENV_ID, ENV_KWARGS, SETTINGS

    import agentsearch
    from agentsearch.rollout.backends import SamplingParams
    from agentsearch.rollout.episodes import rollout
    from agentsearch.rollout.hf import HFBackend

    make = lambda: agentsearch.make_env(ENV_ID, **ENV_KWARGS)  # noqa: E731
    params = SamplingParams(max_new_tokens=SETTINGS["max_new_tokens"],
                            temperature=SETTINGS["temperature"], top_p=1.0, seed=0)
    t0 = time.perf_counter()
    episodes, stats = rollout(make, tasks, HFBackend(model, tok), params, n_per_task=group,
                              max_turns=SETTINGS["max_turns"], seed=0,
                              max_seq_len=SETTINGS["max_seq_len"])
    return {"seconds": time.perf_counter() - t0, "tokens": stats.tokens_generated,
            "episodes": len(episodes), "generate_calls": stats.generate_calls,
            "generate_s": stats.time_generate}


def rollout_line(a, model, tok) -> dict:
    """``--rollout``: each part's whole rollout of ``a.tasks`` x ``a.group`` episodes."""
    import torch
    from bench_vs_trl import ENV_ID, ENV_KWARGS

    import agentsearch

    tasks = list(agentsearch.make_env(ENV_ID, **ENV_KWARGS).tasks)[:a.tasks]
    parts = {"trl": trl_rollout, "ours": ours_rollout}
    runs: dict[str, list[dict]] = {p: [] for p in parts}
    for r in range(a.rounds):
        for part in (list(parts) if r % 2 == 0 else list(parts)[::-1]):
            torch.manual_seed(r)
            before = resource.getrusage(resource.RUSAGE_SELF)
            res = parts[part](model, tok, tasks, a.group)
            after = resource.getrusage(resource.RUSAGE_SELF)
            res["system_s"] = after.ru_stime - before.ru_stime
            res["page_faults"] = after.ru_minflt - before.ru_minflt
            res["tokens_per_s"] = res["tokens"] / res["seconds"]
            runs[part].append(res)
            print(f"[bench_hf_generate] round {r} {part} rollout: {res['seconds']:.1f} s, "
                  f"{res['tokens']} tokens", file=sys.stderr, flush=True)
    rate = {p: statistics.median(x["tokens_per_s"] for x in v) for p, v in runs.items()}
    return {"bench": "hf_rollout", "episodes": a.tasks * a.group, "threads": a.threads,
            "tokens_per_s": {p: round(v, 2) for p, v in rate.items()},
            "ours_time_per_token_over_trl": round(rate["trl"] / rate["ours"], 3),
            "rounds": {p: [{k: round(x, 2) if isinstance(x, float) else x for k, x in r.items()}
                           for r in v] for p, v in runs.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--rollout", action="store_true",
                    help="time whole multi-turn rollouts (TRL's _generate, agentsearch's rollout)")
    ap.add_argument("--malloc", choices=("default", "keep"), default="default",
                    help="glibc malloc as is, or keep freed memory (agentsearch's runs)")
    ap.add_argument("--out", help="append the JSON line to this file too")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = ap.parse_args()
    import torch
    from bench_vs_trl import WARM_START, policy

    torch.set_num_threads(a.threads)
    if a.malloc == "keep":
        from agentsearch.core.cpu_memory import keep_freed_memory

        assert keep_freed_memory()["malloc"] == "keep", "glibc malloc settings refused"
    prov = require_clean("bench_hf_generate", a.allow_dirty)
    model, tok = policy(WARM_START, trainable=True)
    if a.rollout:
        emit_records([{**rollout_line(a, model, tok), "malloc": a.malloc, "provenance": prov}],
                     a.out)
        return 0
    prompts, stop = prompts_and_stop(tok, a.tasks, a.group)
    if not stop:  # the env's turns end at eos (json tool calls): no stop strings to check
        a.parts = [p for p in a.parts if p != "trl_stop"]
    timed_part(a.parts[0], model, tok, prompts[:2], stop, 2)  # warm-up
    runs: dict[str, list[float]] = {p: [] for p in a.parts}
    for r in range(a.rounds):
        for part in (a.parts if r % 2 == 0 else a.parts[::-1]):
            runs[part].append(timed_part(part, model, tok, prompts, stop, a.tokens))
            print(f"[bench_hf_generate] round {r} {part}: {runs[part][-1]:.3f} s/step",
                  file=sys.stderr, flush=True)
    per_step = {p: statistics.median(v) for p, v in runs.items()}
    base = per_step.get("trl")
    line = {"bench": "hf_generate", "rows": len(prompts), "tokens": a.tokens,
            "prompt_tokens_max": max(map(len, prompts)), "threads": a.threads,
            "s_per_step": {p: round(v, 4) for p, v in per_step.items()},
            "ratio_to_trl": {p: round(v / base, 3) for p, v in per_step.items()} if base else {},
            "rounds": {p: [round(x, 4) for x in v] for p, v in runs.items()}, "provenance": prov}
    emit_records([line], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
