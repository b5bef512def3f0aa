"""Evaluation: Mean@n and Best@n per benchmark, with macro and size-weighted averages.

A *benchmark* is a bucket of questions: the ``data_source`` field when the rows have one
(Search-R1 parquet: nq, hotpotqa, ...), else the synthetic world's question ``type``
(single, bridge, comparison), else one bucket ``all``. For each question, ``n`` episodes
are played (greedy when ``temperature`` is 0); Mean@n is the mean of ``answer_correct``
over the n samples, Best@n whether any of them was correct. ``macro`` averages the
benchmarks equally, ``weighted`` by their sizes (= the plain mean over questions).
"""

from __future__ import annotations

from collections import defaultdict

from agentsearch.envs.rollout import rollout
from agentsearch.trainer.generation.base import SamplingParams

__all__ = ["evaluate", "main"]


def _bucket(task: dict) -> str:
    return str(task.get("data_source") or task.get("type") or "all")


def evaluate(backend, envs, tasks: list[dict], *, n: int = 1, temperature: float = 0.0,
             max_new_tokens: int = 64, max_turns: int | None = None, max_seq_len: int | None = None,
             seed: int = 0, prefix: str = "eval") -> dict[str, float]:
    """Play every task ``n`` times; return ``{prefix}/...`` metrics."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    episodes, stats = rollout(envs, tasks, backend, params, n_per_task=n, max_turns=max_turns,
                              seed=seed, max_seq_len=max_seq_len)
    per_bucket: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i, task in enumerate(tasks):
        correct = [bool(e.answer_correct) for e in episodes[i * n:(i + 1) * n]]
        per_bucket[_bucket(task)].append((sum(correct) / n, float(any(correct))))
    out: dict[str, float] = {}
    for b, vals in sorted(per_bucket.items()):
        out[f"{prefix}/{b}/mean_at_n"] = sum(v[0] for v in vals) / len(vals)
        out[f"{prefix}/{b}/best_at_n"] = sum(v[1] for v in vals) / len(vals)
        out[f"{prefix}/{b}/size"] = float(len(vals))
    buckets = list(per_bucket)
    all_vals = [v for vals in per_bucket.values() for v in vals]
    out[f"{prefix}/mean_at_n"] = sum(v[0] for v in all_vals) / max(len(all_vals), 1)
    out[f"{prefix}/best_at_n"] = sum(v[1] for v in all_vals) / max(len(all_vals), 1)
    out[f"{prefix}/macro_mean_at_n"] = sum(out[f"{prefix}/{b}/mean_at_n"] for b in buckets) / max(len(buckets), 1)
    out[f"{prefix}/n"] = float(n)
    out[f"{prefix}/questions"] = float(len(tasks))
    out[f"{prefix}/turns_mean"] = stats.turns / max(stats.episodes, 1)
    out[f"{prefix}/format_reward"] = stats.reward_components.get("reward/format", 0.0)
    return out


def main(a) -> int:
    """``agentsearch eval``: a run's final model, or a model by name, on a split or file."""
    import json
    from pathlib import Path

    from agentsearch.config import apply_overrides
    from agentsearch.trainer.config import TrainConfig
    from agentsearch.trainer.setup import build_backend, build_envs, build_policy

    overrides = list(a.overrides)
    if a.run:
        final = Path(a.run) / "final"
        if not final.exists():
            raise FileNotFoundError(f"{a.run} has no final model (did the run finish?)")
        cfg_path = Path(a.run) / "config.yaml"
        cfg = apply_overrides(TrainConfig, str(cfg_path), overrides + [f"init_from={final}"])
    else:
        cfg = apply_overrides(TrainConfig, a.preset, overrides + ([f"model={a.model}"] if a.model else []))
    model, tok = build_policy(cfg)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    split = a.split
    env_split = split if split in ("train", "dev", "test") else "dev"
    if split not in ("train", "dev", "test"):
        cfg.env_kwargs = {**cfg.env_kwargs, "questions": split}
    envs = build_envs(cfg, 1, split=env_split)
    tasks = envs[0].tasks[: a.limit] if a.limit else envs[0].tasks
    envs += build_envs(cfg, len(tasks) * a.n - 1, split=env_split)
    backend = build_backend(cfg, model, tok)
    res = evaluate(backend, envs, tasks, n=a.n, temperature=0.0 if a.n == 1 else cfg.generation.temperature,
                   max_new_tokens=cfg.generation.max_new_tokens, max_turns=cfg.max_turns,
                   max_seq_len=cfg.max_seq_len, seed=cfg.seed)
    print(json.dumps(res, indent=1))
    return 0
