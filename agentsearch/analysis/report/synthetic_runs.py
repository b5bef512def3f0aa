"""Synthetic run folders shaped like the trainer's, for the report's tests and its benchmark
(``scripts/bench_report.py``): ``metrics.jsonl`` with every key family the report reads
(``time/*``, ``reward/*``, ``replay/*``, ``async/*``, ``health/*``, ``rollout/infra_*``,
``eval/<type>/*``), ``config.yaml``, ``provenance.json``, ``episodes.jsonl`` and
``replay_scan.jsonl`` (the formats of ``agentsearch.trainer.episode_log``), or the OpenRLHF
engine's folder (evaluations in records of their own, ``rollout/reward_mean``, no episodes).
Seeded: the same arguments write the same files.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

__all__ = ["write_run", "episode_mask"]

TYPES = ("single", "bridge")


def episode_mask(tokens: int, prompt: int = 40, policy: int = 16, env: int = 48) -> str:
    """A mask like a multi-turn episode's: a prompt, then policy and environment turns, ending
    on a policy turn."""
    mask, pol = "0" * prompt, True
    while len(mask) < tokens:
        mask += ("1" if pol else "0") * (policy if pol else env)
        pol = not pol
    mask = mask[:tokens]
    return mask if mask.endswith("1") else mask[:mask.rfind("1") + 1]


def _config(kind: str, seed: int, steps: int, async_: bool) -> str:
    import yaml

    cfg = {"seed": seed, "steps": steps, "model": "tiny-base", "loss": "grpo",
           "prompts_per_step": 8, "group_size": 8, "dynamic_sampling": False,
           "replay": {"kind": kind, "tau": 0.01, "k_rep": 4, "capacity": 64},
           "async": {"enabled": async_, "max_staleness": 1 if async_ else 0},
           "eval": {"every": 10, "split": "dev", "limit": 0, "n": 1, "temperature": 0.0}}
    return yaml.safe_dump(cfg, sort_keys=False)


def write_run(folder: str | Path, *, kind: str = "hdr", seed: int = 0, steps: int = 200,
              eval_every: int = 10, async_: bool = False, openrlhf: bool = False,
              alarms: bool = False, tokens_per_episode: int = 300, speed: float = 1.0,
              torn_last_line: bool = False) -> Path:
    """Write one run folder (module doc) and return it. ``speed`` scales its seconds per step
    (2.0: twice as fast); ``alarms``: a few health alarms and an infrastructure outage;
    ``torn_last_line``: the last record cut mid-line, as in a run being written."""
    run, rng = Path(folder), random.Random(f"{kind}-{seed}")
    run.mkdir(parents=True, exist_ok=True)
    replay = kind != "none"
    (run / "config.yaml").write_text(_config(kind, seed, steps, async_))
    (run / "provenance.json").write_text(json.dumps({"sessions": [{
        "git": "0123456789abcdef0123456789abcdef01234567", "clean": True, "citable": True,
        "machine": "x86_64, 2 cores, synthetic", "when": "2026-12-06 00:00 UTC"}]}))
    if openrlhf:
        (run / "agentsearch.json").write_text("{}")
    gain = 0.45 if replay else 0.35
    records, episodes, scans, total = [], [], [], 0.0

    def score(step: int) -> float:
        return 0.2 + gain * (1 - math.exp(-step / 40)) + rng.gauss(0, 0.01)

    def evals(step: int) -> dict:
        by_type = {t: min(max(score(step) + (0.1 if t == "single" else -0.1), 0.0), 1.0)
                   for t in TYPES}
        out = {f"eval/{t}/mean_at_n": v for t, v in by_type.items()}
        out["eval/mean_at_n"] = sum(by_type.values()) / len(by_type)
        return out

    records.append({"step": 0, **evals(0), "time/train_cumulative": 0.0, "time/eval": 2.0})
    for step in range(1, steps + 1):
        phases = {"generate": 1.2, "env": 0.3, "reward": 0.01, "logprobs": 0.4,
                  "replay_scan": 0.5 if replay else 0.0, "update": 1.5, "sync": 0.05}
        phases = {k: v * rng.uniform(0.85, 1.15) / speed for k, v in phases.items()}
        overlap = phases["env"] * 0.8 if async_ else 0.0
        busy = sum(phases.values())
        wall = busy - overlap + 0.1
        total += wall
        rec = {"step": step, **{f"time/{k}": v for k, v in phases.items()},
               "time/other": 0.1, "time/overlap": overlap, "time/step": wall,
               "time/train_cumulative": total, "time/checkpoint": 0.2 if step % 10 == 0 else 0.0}
        reward = score(step) + rng.gauss(0, 0.05)
        rec["rollout/reward_mean" if openrlhf else "reward/total"] = reward
        rec["rollout/answer_correct"] = reward
        if replay:
            depth = rng.randint(4, 12)
            drift = [rng.lognormvariate(math.log(0.005), 0.8) for _ in range(depth)]
            head = [rng.uniform(0.0, 1.0) for _ in range(depth)]
            passed = [d <= 0.01 for d in drift]
            accepted, left = [], 4
            for p in passed:
                accepted.append(p and left > 0)
                left -= accepted[-1]
            rec.update({"replay/candidates": 40.0, "replay/scan_depth": float(depth),
                        "replay/accepted": float(sum(accepted)),
                        "replay/accept_rate": sum(passed) / depth,
                        "replay/buffer_size": float(min(step * 3, 64)),
                        "replay/age_mean": rng.uniform(1, 6), "replay/age_max": 9.0,
                        "replay/drift_age_1": 0.002, "replay/drift_age_2_3": 0.006,
                        "replay/drift_age_4_7": 0.012})
            rec.update({f"replay/exposure_h0_decile_{d}": d * 0.1 * step / steps
                        for d in range(10)})
            scans.append({"step": step, "drift": drift, "headroom": head,
                          "age": [rng.randint(1, 8) for _ in range(depth)],
                          "passed": "".join("1" if p else "0" for p in passed),
                          "accepted": "".join("1" if a else "0" for a in accepted)})
        if async_:
            stale = float(rng.randint(2, 6))
            rec.update({"async/stale_groups": stale, "async/dropped_by_drift": float(
                rng.randint(0, 2)), "async/drift_fresh_mean": rng.uniform(0.002, 0.015),
                "async/staleness_mean": 0.6, "async/is_weight_mean": 0.98})
        rec.update({key: 0.0 for key in ("health/zero_reward_steps", "health/no_signal_steps",
                                         "health/alarms", "rollout/infra_errors",
                                         "health/infra_outage_s")})
        if alarms and step % 37 == 0:
            rec.update({"health/zero_reward_steps": 3.0, "health/alarms": 1.0,
                        "rollout/infra_errors": 5.0, "health/infra_outage_s": 12.5})
        if step % eval_every == 0 or step == steps:
            ev = {**evals(step), "time/eval": 2.0}
            if openrlhf:  # the engine logs its evaluation as a record of its own
                records.append(rec)
                rec = {"step": step, **ev, "time/train_cumulative": total}
            else:
                rec.update(ev)
        records.append(rec)
        if not openrlhf:
            episodes += _episodes(rng, step, replay, tokens_per_episode)
    lines = [json.dumps(r) for r in records]
    text = "\n".join(lines) + "\n"
    if torn_last_line:
        text = text[:-(len(lines[-1]) // 2 + 1)]  # half the last line, no newline
    (run / "metrics.jsonl").write_text(text)
    if episodes:
        (run / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    if scans:
        (run / "replay_scan.jsonl").write_text("".join(json.dumps(s) + "\n" for s in scans))
    return run


def _episodes(rng: random.Random, step: int, replay: bool, tokens: int) -> list[dict]:
    out = []
    for source in ("fresh", "replay" if replay else "fresh"):
        for sign in (1, -1):
            n = max(60, int(tokens * rng.uniform(0.7, 1.0)))
            mask = episode_mask(n)
            ids = [rng.randrange(5, 4000) for _ in mask]
            ep = {"step": step, "source": source, "group": f"train-{rng.randrange(10**5):05d}",
                  "row": rng.randrange(8), "born_step": step - (2 if source == "replay" else 0),
                  "reward": 1.0 if sign > 0 else 0.0, "advantage": sign * rng.uniform(0.3, 2.0),
                  "correct": sign > 0}
            if source == "replay":
                ep.update(drift=rng.uniform(0.001, 0.01), headroom=rng.uniform(0.1, 0.9))
            ep.update(token_ids=ids, action_mask=mask,
                      tokens=[f" w{i}" if m == "1" else f" e{i}" for i, m in zip(ids, mask)])
            out.append(ep)
    return out
