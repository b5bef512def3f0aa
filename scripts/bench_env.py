"""Benchmarks of the environment side of a rollout (no model: a scripted policy).

Prints one JSON line per measurement:

1. ``env_overhead``: per-turn cost of everything that is not generation or a tool's own
   latency (decoding the sampled ids, parsing the turn, the env step, tokenising the
   observations, growing token ids / masks / logprobs), with ``--episodes`` (256)
   concurrent episodes, for both turn formats. The tool is an instant canned search, so
   only our overhead is measured.
2. ``tool_overlap``: wall-clock of the env phases of ``--episodes`` episodes whose tool has
   a fixed latency ``--latency`` seconds; episode ``i`` makes ``1 + i % 3`` tool calls. The
   ideal is the longest episode's total tool time (``max_calls * latency``): what perfect
   overlap of all episodes' calls would give.
3. ``vision_overhead``: the same per-turn overhead on ``agentsearch/Vision-v0`` with images:
   turn 1 crops (the tool renders an enlarged region, an image observation), turn 2
   answers; observations are tokenised by the tiny VLM's tokenizer (each ``<image>`` expands
   to 16 image tokens), and ``pixels_ms_per_image`` is the processor's cost of turning an
   episode's images into pixels (what the trainer stores with each replay group).

    OMP_NUM_THREADS=1 python scripts/bench_env.py --episodes 256 --latency 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time

from agentsearch.core.provenance import ALLOW_DIRTY_HELP, require_clean
from agentsearch.envs import MathEnv, SearchEnv
from agentsearch.models import load_tokenizer
from agentsearch.retrievers.base import Hit
from agentsearch.rollout import SamplingParams, ScriptedBackend, rollout


class CannedSearch:
    """An instant retriever: three fixed passages per query."""

    def search(self, queries, k=3):
        return [[Hit(f"d{j}", f'"Title {j}"\nA passage of some forty words about {q[:30]} '
                     + "and more " * 20, 1.0) for j in range(k)] for q in queries]

    async def asearch(self, queries, k=3):
        return self.search(queries, k)


class FixedLatencyTool:
    name, description = "wait", "a remote call with a fixed latency"
    parameters = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    def __init__(self, latency: float):
        self.latency, self.timeout_s = latency, latency + 30

    async def __call__(self, x: str) -> str:
        await asyncio.sleep(self.latency)
        return f"result for {x}"


def bench_overhead(tok, episodes: int, fmt: str, turns: int = 3) -> dict:
    tasks = [{"id": f"t{i}", "question": f"Where was person number {i} born?",
              "golden_answers": ["x"]}
             for i in range(episodes)]
    if fmt == "tags":
        search = "<think>I should look this up.</think>\n<search> person {i} birthplace </search>"
        answer = "<think>Found it.</think>\n<answer> x </answer>"
    else:
        search = ('<tool_call>\n{{"name": "search", '
                  '"arguments": {{"query": "person {i} birthplace"}}}}\n'
                  "</tool_call><|im_end|>")
        answer = "<answer> x </answer><|im_end|>"

    def policy(conv: str) -> str:
        done = conv.count("Doc 1(Title:")
        return search.format(i=done) if done < turns - 1 else answer

    backend = ScriptedBackend(tok, policy)
    factory = lambda: SearchEnv(turn_format=fmt, retriever=CannedSearch(), max_turns=turns)  # noqa: E731
    rollout(factory, tasks, backend, SamplingParams(max_new_tokens=512))  # warm up (caches, heap)
    t0 = time.perf_counter()
    eps, st = rollout(factory, tasks, backend, SamplingParams(max_new_tokens=512))
    wall = time.perf_counter() - t0
    assert all(e.answer_correct for e in eps), "the scripted policy should always succeed"
    overhead = st.time_env + st.time_reward + st.time_tokenize
    n_turns = st.generate_calls
    return {"bench": "env_overhead", "format": fmt, "episodes": episodes, "turns": n_turns,
            "overhead_s_per_turn": round(overhead / n_turns, 5),
            "overhead_us_per_episode_turn": round(1e6 * overhead / st.turns, 1),
            "env_step_s_per_turn": round((st.time_env + st.time_reward) / n_turns, 5),
            "tokenize_mask_s_per_turn": round(st.time_tokenize / n_turns, 5),
            "scripted_generate_s_per_turn": round(st.time_generate / n_turns, 5),
            "tokens_per_episode": round(sum(len(e.token_ids) for e in eps) / episodes, 1),
            "wall_s": round(wall, 3)}


def bench_overlap(tok, episodes: int, latency: float) -> dict:
    tasks = [{"id": f"t{i}", "question": f"q{i}", "golden_answers": ["2"], "calls": 1 + i % 3}
             for i in range(episodes)]
    calls = {t["question"]: t["calls"] for t in tasks}

    def policy(conv: str) -> str:
        q = conv.rsplit("Problem: ", 1)[1].split("\n", 1)[0]
        done = conv.count("<information>result")
        return f"<wait>{done}</wait>" if done < calls[q] else "<answer>2</answer>"

    factory = lambda: MathEnv(tools=(FixedLatencyTool(latency),), max_turns=4)  # noqa: E731
    t0 = time.perf_counter()
    eps, st = rollout(factory, tasks, ScriptedBackend(tok, policy), SamplingParams())
    wall = time.perf_counter() - t0
    ideal = max(t["calls"] for t in tasks) * latency
    serial = sum(t["calls"] for t in tasks) * latency
    return {"bench": "tool_overlap", "episodes": episodes, "latency_s": latency,
            "tool_calls": st.tool_calls, "env_wall_s": round(st.time_env, 3),
            "ideal_s": round(ideal, 3),
            "env_over_ideal": round(st.time_env / ideal, 3), "serial_s": round(serial, 1),
            "rollout_wall_s": round(wall, 3), "all_correct": all(e.answer_correct for e in eps)}


def bench_vision(episodes: int) -> dict:
    from agentsearch.envs.vision import VisionEnv
    from agentsearch.models.processor import ImageTextTokenizer
    from agentsearch.models.vlm import load_vlm

    _, processor = load_vlm("tiny-vlm")
    tok = ImageTextTokenizer(processor)
    kw = dict(chat_template="none", system_prompt="Answer. ", image_size=64)
    tasks = VisionEnv(split="dev", **kw).tasks
    tasks = [tasks[i % len(tasks)] for i in range(episodes)]
    answers = {t["question"]: t["golden_answers"][0] for t in tasks}

    def policy(conv: str) -> str:
        if "<information>" not in conv:
            return "<crop> top-left </crop>"
        q = conv.split("Question: ", 1)[1].split("\n", 1)[0]
        return f"<answer> {answers.get(q, 'x')} </answer>"

    factory = lambda: VisionEnv(split="dev", max_turns=3, **kw)  # noqa: E731
    backend = ScriptedBackend(tok, policy)
    rollout(factory, tasks[:8], backend, SamplingParams(max_new_tokens=64))  # warm up
    eps, st = rollout(factory, tasks, backend, SamplingParams(max_new_tokens=64))
    images = [im for e in eps for im in e.info["images"]]
    t0 = time.perf_counter()
    for e in eps:
        tok.pixel_values(e.info["images"])
    pixels_s = time.perf_counter() - t0
    overhead = st.time_env + st.time_reward + st.time_tokenize
    return {"bench": "vision_overhead", "episodes": episodes, "turns": st.generate_calls,
            "images": len(images), "overhead_s_per_turn": round(overhead / st.generate_calls, 5),
            "overhead_us_per_episode_turn": round(1e6 * overhead / st.turns, 1),
            "env_step_s_per_turn": round((st.time_env + st.time_reward) / st.generate_calls, 5),
            "tokenize_mask_s_per_turn": round(st.time_tokenize / st.generate_calls, 5),
            "pixels_ms_per_image": round(1e3 * pixels_s / max(len(images), 1), 3),
            "tokens_per_episode": round(sum(len(e.token_ids) for e in eps) / episodes, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--latency", type=float, default=0.1, help="tool latency L in seconds")
    ap.add_argument("--tokenizer", default="tiny", help="tokenizer name (tiny, smollm2, a folder)")
    ap.add_argument("--allow-dirty", action="store_true", help=ALLOW_DIRTY_HELP)
    a = ap.parse_args()
    prov = require_clean("bench_env", a.allow_dirty)
    tok = load_tokenizer(a.tokenizer)
    host = {"machine": platform.machine(), "python": platform.python_version(), "provenance": prov}
    for fmt in ("tags", "json"):
        print(json.dumps({**bench_overhead(tok, a.episodes, fmt), **host}), flush=True)
    print(json.dumps({**bench_overlap(tok, a.episodes, a.latency), **host}), flush=True)
    print(json.dumps({**bench_vision(a.episodes), **host}), flush=True)


if __name__ == "__main__":
    main()
