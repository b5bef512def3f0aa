"""Rollout throughput: streaming (one asyncio task per episode) against lock-step turns.

The shipped base ``tiny-base`` plays ``--prompts`` x ``--group`` episodes on the demo's search
world (the ``tiny`` preset's env, in-process bm25s), with a log-normal latency added to every
search call (mean ``--latency`` s, shape ``--sigma``). For each backend and latency the two
rollouts run side by side in one process on the same tasks (``--repeats`` times, alternating;
medians), after one warm-up of each. One JSON line per (backend, latency):

- ``lockstep_eps_per_s``, ``async_eps_per_s`` and ``ratio`` (async / lock-step episodes per s);
- ``*_wall_s``, ``*_generate_s`` (engine busy seconds), ``*_batch_mean`` (turns per engine
  call; vLLM: sequences per engine step), ``turns_mean``.

    OMP_NUM_THREADS=1 python scripts/bench_rollout.py --backends hf,vllm --latencies 0.5,0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

# vLLM logs to stdout: keep it to the JSON lines
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from agentsearch.core.config import apply_overrides
from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.rollout import EventLoop, SamplingParams, rollout
from agentsearch.rollout.engines import make_stream_engine
from agentsearch.rollout.streaming import stream_rollout
from agentsearch.trainer.setup import TaskSampler, build_backend, build_envs, build_policy
from agentsearch.trainer.train_config import TrainConfig


def bench(backend_name: str, latency: float, args) -> dict:
    overrides = [f"generation.backend={backend_name}", f"threads={args.threads}"]
    if latency > 0:
        overrides += ["tool_latency.kind=lognormal", f"tool_latency.mean_s={latency}",
                      f"tool_latency.sigma={args.sigma}"]
    cfg = apply_overrides(TrainConfig, "tiny", overrides)
    torch.set_num_threads(cfg.threads)
    model, tok = build_policy(cfg)
    n = args.prompts * args.group
    envs = build_envs(cfg, n, split="train")
    tasks = TaskSampler(envs[0].tasks, seed=0).sample(args.prompts)
    backend = build_backend(cfg, model, tok)
    engine = make_stream_engine(backend)
    params = SamplingParams(max_new_tokens=cfg.generation.max_new_tokens, temperature=1.0, seed=1)
    kw = dict(n_per_task=args.group, max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len, seed=2)
    runs = {"lockstep": [], "async": []}
    with EventLoop() as events:
        events.own(envs, backend, engine)

        def once(mode: str):
            t0 = time.perf_counter()
            if mode == "lockstep":
                eps, st = rollout(envs, tasks, backend, params, loop=events, **kw)
            else:
                eps, st = stream_rollout(envs, tasks, engine, params, loop=events, **kw)
            return time.perf_counter() - t0, eps, st

        for mode in runs:  # warm-up: caches, allocator, the engine's first batches
            once(mode)
        for _ in range(args.repeats):
            for mode in runs:
                runs[mode].append(once(mode))
    out = {"bench": "rollout", "backend": backend_name, "latency_mean_s": latency,
           "sigma": args.sigma if latency > 0 else None, "episodes": n, "repeats": args.repeats}
    for mode, res in runs.items():
        wall = statistics.median(w for w, _, _ in res)
        out[f"{mode}_wall_s"] = round(wall, 3)
        out[f"{mode}_eps_per_s"] = round(n / wall, 2)
        out[f"{mode}_generate_s"] = round(statistics.median(st.time_generate
                                                            for _, _, st in res), 3)
        out[f"{mode}_batch_mean"] = round(statistics.median(
            st.metrics()["rollout/batch_mean"] for _, _, st in res), 1)
        out[f"{mode}_turns_mean"] = round(statistics.mean(
            st.metrics()["rollout/turns_mean"] for _, _, st in res), 2)
    out["ratio"] = round(out["async_eps_per_s"] / out["lockstep_eps_per_s"], 3)
    out["threads"] = cfg.threads
    out["machine"] = f"{platform.machine()}, {torch.get_num_threads()} torch threads"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="hf,vllm")
    ap.add_argument("--latencies", default="0.5,0", help="mean added seconds per search call")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    args = ap.parse_args()
    prov = require_clean("bench_rollout", args.allow_dirty)
    for backend in args.backends.split(","):
        for latency in (float(x) for x in args.latencies.split(",")):
            print(json.dumps({**bench(backend, latency, args), "provenance": prov}), flush=True)


if __name__ == "__main__":
    main()
