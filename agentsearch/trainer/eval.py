"""Evaluation: Mean@n and Best@n per benchmark, with macro and size-weighted averages.

A *benchmark* is a bucket of questions: the ``data_source`` field when the rows have one
(Search-R1 parquet: nq, hotpotqa, ...), else the synthetic world's question ``type``
(single, bridge, comparison), else one bucket ``all``. For each question, ``n`` episodes
are played (greedy when ``temperature`` is 0); Mean@n is the mean of ``answer_correct``
over the n samples, Best@n whether any of them was correct; with n > 1 also pass@1, pass@4
and pass@8 (those k <= n), by the unbiased estimator from the n samples. ``macro`` averages the
benchmarks equally, ``weighted`` by their sizes (= the plain mean over questions).

Which questions: ``eval.limit`` N (0 = all). When every row has a ``data_source`` and there
are several (Search-R1's merged ``test.parquet`` lists NQ first, so its first N rows are NQ
only), N are sampled per source (``sample_per_source``): ``equal`` (default) takes the same
number from each source (a source with fewer gives all it has, the others share the rest),
``proportional`` takes each source's share of the file, ``first`` the first N rows. The
sample is drawn with a fixed seed (0), so every run, whatever its seed, evaluates the same
questions, kept in file order. Other rows (the synthetic world) take the first N.

Behaviour per benchmark, to see *what* RL changed: ``searches`` (tool calls per episode),
``no_search_answer`` (share of episodes that answered without any tool call) and
``one_search_answer`` (answered after exactly one). ``write_samples`` saves a few decoded
episodes with their rewards.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

import numpy as np

from agentsearch.core.config import ConfigError
from agentsearch.core.cpu_memory import keep_freed_memory
from agentsearch.rollout import EventLoop, SamplingParams, derive_seed, rollout

__all__ = ["evaluate", "eval_settings", "eval_envs", "sample_per_source", "cli_policy", "main",
           "pass_at_k"]

PER_SOURCE = ("equal", "proportional", "first")


def eval_settings(cfg) -> dict:
    """The ``evaluate`` keyword arguments of a ``TrainConfig``: the run's periodic evals and
    ``agentsearch eval --run`` use exactly these, so a saved model reproduces its evals."""
    e = cfg.eval
    return dict(n=e.n, temperature=e.temperature, max_new_tokens=cfg.generation.max_new_tokens,
                max_turns=cfg.max_turns, max_seq_len=cfg.max_seq_len, seed=cfg.seed + 7,
                chunk=e.chunk)


def eval_envs(cfg, split: str | None = None, questions: str | None = None, limit: int | None = None,
              n: int | None = None) -> tuple[list, list[dict]]:
    """``(envs, tasks)`` for an evaluation: the first ``limit`` tasks (0 = all) of ``split`` or a
    ``questions`` file (defaults: the config's ``eval`` section), one env per episode."""
    from agentsearch.trainer.setup import build_envs

    split = split or cfg.eval.split
    questions = questions if questions is not None else cfg.eval.questions
    limit = cfg.eval.limit if limit is None else limit
    n = n or cfg.eval.n
    envs = build_envs(cfg, 1, split=split, questions=questions)
    tasks = sample_per_source(envs[0].tasks, limit, cfg.eval.per_source)
    envs += build_envs(cfg, len(tasks) * n - 1, split=split, questions=questions)
    return envs, tasks


def sample_per_source(tasks: list[dict], limit: int, how: str = "equal",
                      seed: int = 0) -> list[dict]:
    """``limit`` of ``tasks`` (0 = all): sampled per ``data_source`` (``how``: ``equal``,
    ``proportional`` or ``first``; see the module docstring), or the first ``limit``."""
    if how not in PER_SOURCE:
        raise ConfigError(f"eval.per_source={how!r} must be one of {', '.join(PER_SOURCE)}")
    if not limit or limit >= len(tasks):
        return list(tasks)
    sources = [t.get("data_source") for t in tasks]
    names = sorted({str(s) for s in sources if s is not None})
    if how == "first" or None in sources or len(names) < 2:
        return list(tasks[:limit])
    rows: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sources):
        rows[str(s)].append(i)
    take = _quotas({k: len(rows[k]) for k in names}, limit, how)
    rng = np.random.default_rng(seed)
    picked = [i for k in names for i in rng.choice(rows[k], size=take[k], replace=False).tolist()]
    return [tasks[i] for i in sorted(picked)]


def _quotas(sizes: dict[str, int], limit: int, how: str) -> dict[str, int]:
    """Questions per source, summing to ``limit`` (< the total), none above its size."""
    if how == "proportional":  # largest remainders
        total = sum(sizes.values())
        exact = {k: limit * n / total for k, n in sizes.items()}
        take = {k: int(x) for k, x in exact.items()}
        largest_remainder = sorted(sizes, key=lambda k: (-(exact[k] - take[k]), k))
        for k in largest_remainder[:limit - sum(take.values())]:
            take[k] += 1
        return take
    take, left, open_ = {}, limit, sorted(sizes)  # equal: fill small sources, share the rest
    while open_:
        share = left // len(open_)
        small = [k for k in open_ if sizes[k] <= share]
        if not small:
            for j, k in enumerate(open_):
                take[k] = share + (1 if j < left - share * len(open_) else 0)
            return take
        for k in small:
            take[k] = sizes[k]
            left -= sizes[k]
        open_ = [k for k in open_ if k not in small]
    return take


def _bucket(task: dict) -> str:
    return str(task.get("data_source") or task.get("type") or "all")


def evaluate(backend, envs, tasks: list[dict], *, n: int = 1, temperature: float = 0.0,
             max_new_tokens: int = 64, max_turns: int | None = None, max_seq_len: int | None = None,
             seed: int = 0, prefix: str = "eval", samples_to=None, loop=None,
             on_turn=None, chunk: int = 0, samples_per_type: int = 2) -> dict[str, float]:
    """Play every task ``n`` times; return ``{prefix}/...`` metrics. ``samples_to``: a text
    file for the first ``samples_per_type`` decoded episodes of each question type
    (``write_samples``). ``loop``: the run's ``EventLoop``.
    ``on_turn(turn, done, total)``: called after each turn (``rollout``). ``chunk``: episodes
    played at a time (``EvalConfig.chunk``; 0 = all); chunk ``k`` seeds with
    ``derive_seed(seed, k)`` (chunk 0 alone: ``seed``, the unchunked eval)."""
    per = max(chunk // n, 1) if chunk else max(len(tasks), 1)
    episodes, stats = [], None
    for k, lo in enumerate(range(0, len(tasks), per)):
        s = seed if k == 0 else derive_seed(seed, k)
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=s)
        turn_cb = on_turn and partial(_offset_turn, on_turn, lo * n, len(tasks) * n)
        eps, st = rollout(envs[lo * n:(lo + per) * n], tasks[lo:lo + per], backend, params,
                          n_per_task=n, max_turns=max_turns, seed=s, max_seq_len=max_seq_len,
                          loop=loop, on_turn=turn_cb)
        episodes, stats = episodes + eps, st if stats is None else stats.merged(st)
    per_bucket: dict[str, list[tuple[float, float]]] = defaultdict(list)
    behaviour: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    wins = []
    for i, task in enumerate(tasks):
        eps = episodes[i * n:(i + 1) * n]
        correct = [bool(e.answer_correct) for e in eps]
        wins.append(sum(correct))
        per_bucket[_bucket(task)].append((sum(correct) / n, float(any(correct))))
        behaviour[_bucket(task)] += [_behaviour(e) for e in eps]
    out: dict[str, float] = {}
    for b, vals in sorted(per_bucket.items()):
        out[f"{prefix}/{b}/mean_at_n"] = sum(v[0] for v in vals) / len(vals)
        out[f"{prefix}/{b}/best_at_n"] = sum(v[1] for v in vals) / len(vals)
        out[f"{prefix}/{b}/size"] = float(len(vals))
        for j, key in enumerate(("searches", "no_search_answer", "one_search_answer")):
            out[f"{prefix}/{b}/{key}"] = sum(v[j] for v in behaviour[b]) / len(behaviour[b])
    buckets = list(per_bucket)
    all_vals = [v for vals in per_bucket.values() for v in vals]
    out[f"{prefix}/mean_at_n"] = sum(v[0] for v in all_vals) / max(len(all_vals), 1)
    out[f"{prefix}/best_at_n"] = sum(v[1] for v in all_vals) / max(len(all_vals), 1)
    out[f"{prefix}/macro_mean_at_n"] = (sum(out[f"{prefix}/{b}/mean_at_n"] for b in buckets)
                                        / max(len(buckets), 1))
    for k in (1, 4, 8):  # pass@k, the unbiased estimator from n samples (Chen et al. 2021)
        if 1 < k <= n or (k == 1 and n > 1):
            out[f"{prefix}/pass_at_{k}"] = sum(pass_at_k(n, c, k) for c in wins) / max(len(wins), 1)
    out[f"{prefix}/n"] = float(n)
    out[f"{prefix}/questions"] = float(len(tasks))
    out[f"{prefix}/turns_mean"] = stats.turns / max(stats.episodes, 1)
    out[f"{prefix}/format_reward"] = stats.reward_components.get("reward/format", 0.0)
    all_b = [v for vals in behaviour.values() for v in vals]
    out[f"{prefix}/searches"] = sum(v[0] for v in all_b) / max(len(all_b), 1)
    if samples_to is not None:
        write_samples(episodes, tasks, n, samples_to, tokenizer=getattr(backend, "tokenizer", None),
                      per_bucket=samples_per_type)
    return out


def _offset_turn(on_turn, before: int, total: int, turn: int, done: int, _chunk_total: int):
    """A chunk's ``on_turn`` as the whole eval's: episodes done so far out of all of them."""
    on_turn(turn, before + done, total)


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples is correct) given c correct of n: 1 - C(n-c, k) / C(n, k)."""
    from math import comb

    return 1.0 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0


def _behaviour(ep) -> tuple[float, float, float]:
    """(tool calls, answered without a call, answered after exactly one call) of an episode."""
    calls = int(ep.info.get("tool_calls", 0))
    answered = ep.info.get("answer") is not None
    return float(calls), float(answered and calls == 0), float(answered and calls == 1)


def write_samples(episodes, tasks: list[dict], n: int, path, *, tokenizer,
                  per_bucket: int = 2) -> None:
    """Decode the first ``per_bucket`` questions of each benchmark (their first sample) into
    the text file ``path``, with the reward, its components and the golden answers."""
    from pathlib import Path

    if tokenizer is None:
        return
    seen: dict[str, int] = defaultdict(int)
    parts = []
    for i, task in enumerate(tasks):
        b = _bucket(task)
        if seen[b] >= per_bucket:
            continue
        seen[b] += 1
        e = episodes[i * n]
        comps = ", ".join(f"{k}={v:g}" for k, v in sorted(e.reward_components.items()))
        parts.append(f"=== {b} | reward {e.reward:g} ({comps}) | correct {e.answer_correct} | "
                     f"searches {e.info.get('tool_calls', 0)} | gold {task.get('golden_answers')}\n"
                     f"{tokenizer.decode(e.token_ids)}\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))


def cli_policy(a):
    """``(cfg, model, tok)`` for a CLI command that evaluates a model: ``--run RUN`` (its
    config and final weights) or ``--preset``/``--model``, plus ``key=value`` overrides; torch
    threads as the config says."""
    from pathlib import Path

    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.setup import build_policy
    from agentsearch.trainer.train_config import TrainConfig

    overrides = list(a.overrides)
    if a.run:  # its final model, or its adapter alone (a kept record: docs/results/real_lm/)
        final = next((Path(a.run) / f for f in ("final", "adapter") if (Path(a.run) / f).exists()),
                     None)
        if final is None:
            raise FileNotFoundError(f"{a.run} has no final model or adapter (did the run finish?)")
        cfg = apply_overrides(TrainConfig, str(Path(a.run) / "config.yaml"),
                              overrides + [f"init_from={final}"])
    else:
        cfg = apply_overrides(TrainConfig, a.preset,
                              overrides + ([f"model={a.model}"] if a.model else []))
    if cfg.keep_freed_memory:
        keep_freed_memory()
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    model, tok = build_policy(cfg)
    return cfg, model, tok


def main(a) -> int:
    """``agentsearch eval``: a run's final model, or a model by name, on a split or file.
    Unless given on the command line, the split, question count, samples and temperature are
    the run's (or preset's) ``eval`` settings. An infrastructure outage past
    ``reliability.outage_budget_s`` prints ``{"eval/invalid": 1.0, "reason": ...}``, never a
    score, and exits with code 3."""
    import json
    import sys
    import time
    from pathlib import Path

    from agentsearch.core.reliability import OutageError, outages
    from agentsearch.trainer.setup import build_backend, eval_engine_config, preflight

    cfg, model, tok = cli_policy(a)
    outages.configure(budget_s=cfg.reliability.outage_budget_s,
                      warn_every_s=cfg.reliability.warn_every_s)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    split = a.split or cfg.eval.split
    # a questions file (jsonl/parquet), or a split the env knows (train/dev/test; math: champ)
    is_file = Path(split).suffix in (".jsonl", ".json", ".parquet") or Path(split).is_file()
    questions = split if is_file else None
    settings = eval_settings(cfg)
    if a.n is not None:
        settings["n"] = a.n
        if a.n > 1 and cfg.eval.temperature == 0:  # n greedy samples would all be the same
            settings["temperature"] = cfg.generation.temperature
    envs, tasks = eval_envs(cfg, "dev" if questions else split, questions or cfg.eval.questions,
                            a.limit, settings["n"])
    with EventLoop() as events:
        events.own(envs)
        preflight(envs[0], loop=events)  # a dead retriever is a one-line error, not zero scores
        backend = build_backend(eval_engine_config(cfg), model, tok)
        events.own(backend)
        t0 = time.perf_counter()
        # progress on stderr, one line per turn (terminal or not); stdout stays the JSON alone
        print(f"[eval] {len(tasks)} questions x {settings['n']} samples, up to {cfg.max_turns} "
              "turns", file=sys.stderr, flush=True)

        def progress(turn: int, done: int, total: int) -> None:
            print(f"[eval] turn {turn}: {done}/{total} episodes done "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

        try:
            res = evaluate(backend, envs, tasks, **settings, loop=events, samples_to=a.samples,
                           samples_per_type=a.samples_per_type,
                           on_turn=progress)
        except OutageError as e:  # a retriever or grader down past the budget: no score at all
            print(json.dumps({"eval/invalid": 1.0, "reason": str(e)}, indent=1))
            raise  # exit code 3
        res["time/eval"] = time.perf_counter() - t0  # the episodes, not the engine's start
    print(json.dumps(res, indent=1))
    return 0
