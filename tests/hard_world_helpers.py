"""A run folder as the trainer writes it, for the hard world's analysis and command tests
(conftest puts this folder on sys.path)."""

from __future__ import annotations

import json


def write_run(tmp_path, name, evals: dict[int, float], episodes=64, calls=100, sps=5.0,
              start=None, extra=None):
    """``tmp_path / name`` with a metrics.jsonl: ``evals`` ({step: score}) at their steps, ``sps``
    seconds a step, ``start`` the machine's clock at step 0 (None: no clock stamps), ``extra``
    logged every step; step 3 is logged twice, as after a resume."""
    d = tmp_path / name
    d.mkdir()
    recs = [{"step": 0, "eval/mean_at_n": evals[0], "time/train_cumulative": 0.0}]
    for s in range(1, max(evals) + 1):
        rec = {"step": s, "time/train_cumulative": sps * s, "rollout/episodes": episodes,
               "rollout/tool_calls": calls, "groups/zero_variance_frac": 0.5, **(extra or {})}
        if s in evals:
            rec.update({"eval/mean_at_n": evals[s], "eval/chain4/mean_at_n": evals[s] / 2})
        recs.append(rec)
    if start is not None:  # the machine's clock when each record was written
        for r in recs:
            r["clock/unix_seconds"] = start + r["time/train_cumulative"]
    recs.append(dict(recs[3]))  # a step logged twice (a resume) counts once
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return d
