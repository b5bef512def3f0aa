"""A few of each step's trained episodes, as the loss saw them, and the replay scan's drift and
headroom per scanned group: what ``agentsearch report`` shows beside the metrics.

``RUN_DIR/episodes.jsonl``: per training step at most ``per_step`` (default 4) episodes: the
highest- and the lowest-advantage response of the first fresh group with signal (advantages not
all 0), and the same two of the first replayed group, or of the next fresh group with signal
when nothing was replayed. One line per episode::

    {"step": 12, "source": "replay", "group": "q-31", "row": 3, "born_step": 9,
     "reward": 1.0, "advantage": 0.93, "correct": true, "drift": 0.004, "headroom": 0.21,
     "token_ids": [...], "action_mask": "0000111100011", "tokens": ["Search", ",", ...]}

The row is the one the update took (``algorithms.update.rows_of``): the group's *stored* token
ids and action mask (1: a policy token, which the loss trains on; 0: prompt and environment
tokens), cut after the last policy token. Nothing is re-tokenised: ``tokens`` decodes each id
on its own, for display only (a character split across tokens shows as a replacement mark).
``drift`` and ``headroom`` (replayed groups only) are the gate's values at this step's scan;
``correct`` is absent where the task has no verifiable answer.

``RUN_DIR/replay_scan.jsonl``: for each step whose replay selection scored groups, one line of
one entry per scanned group, in scan order::

    {"step": 12, "drift": [...], "headroom": [...], "age": [...], "passed": "1101",
     "accepted": "1100"}

Writing costs a decode of a few hundred tokens a step. A resumed run drops the lines of the steps
after its checkpoint, as ``metrics.jsonl`` does (``MetricsLogger.truncate_after``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EpisodeLog", "EPISODES_FILE", "SCAN_FILE", "PER_STEP"]

EPISODES_FILE = "episodes.jsonl"
SCAN_FILE = "replay_scan.jsonl"
PER_STEP = 4
"""Episodes stored per step: two from a fresh group, two from a replayed (or a second fresh)
group."""


class EpisodeLog:
    """Appends a step's sampled episodes and its replay scan to the run folder (module doc)."""

    def __init__(self, run_dir: str | Path, tokenizer, *, keep_through: int = -1,
                 per_step: int = PER_STEP):
        self.episodes = Path(run_dir) / EPISODES_FILE
        self.scan = Path(run_dir) / SCAN_FILE
        self.tokenizer, self.per_step = tokenizer, int(per_step)
        for path in (self.episodes, self.scan):
            _truncate_after(path, keep_through)

    def write(self, step: int, fresh: Sequence, selection) -> None:
        """Record ``step``: ``fresh`` are the fresh groups the update took, ``selection`` the
        replay strategy's ``Selection`` (its ``accepted`` groups and scan ``records``)."""
        records = list(getattr(selection, "records", []) or [])
        accepted = list(getattr(selection, "accepted", []) or [])
        taken = [r for r in records if r.accepted]
        scores = ([(r.drift, r.headroom) for r in taken] if len(taken) == len(accepted)
                  else [(None, None)] * len(accepted))
        lines = []
        with_signal = [g for g in fresh if bool((g.advantages != 0).any())]
        picks = [("fresh", g, None) for g in with_signal[:1]]
        replayed = [(g, s) for g, s in zip(accepted, scores) if bool((g.advantages != 0).any())]
        picks += ([("replay", g, s) for g, s in replayed[:1]] if replayed
                  else [("fresh", g, None) for g in with_signal[1:2]])
        for source, group, score in picks:
            for row in _extreme_rows(group):
                lines.append(self._episode(step, source, group, row, score))
        _append(self.episodes, lines[:self.per_step])
        if records:
            _append(self.scan, [{
                "step": int(step), "drift": [_num(r.drift) for r in records],
                "headroom": [_num(r.headroom) for r in records],
                "age": [int(r.age) for r in records],
                "passed": "".join("1" if r.passed else "0" for r in records),
                "accepted": "".join("1" if r.accepted else "0" for r in records)}])

    def _episode(self, step: int, source: str, group, row: int, score) -> dict:
        mask = group.action_mask[row]
        last = int(mask.nonzero().max()) + 1  # the update's row ends at its last policy token
        ids = [int(i) for i in group.token_ids[row, :last]]
        out = {"step": int(step), "source": source, "group": str(group.prompt_id), "row": row,
               "born_step": int(group.born_step), "reward": _num(group.rewards[row]),
               "advantage": _num(group.advantages[row])}
        if group.answer_correct is not None:
            out["correct"] = bool(group.answer_correct[row])
        if score is not None and score[0] is not None:
            out["drift"], out["headroom"] = _num(score[0]), _num(score[1])
        out.update(token_ids=ids, action_mask="".join("1" if m else "0" for m in mask[:last]),
                   tokens=_decode_each(self.tokenizer, ids))
        return out


def _extreme_rows(group) -> list[int]:
    """The rows of the highest and the lowest advantage (one row when they are the same), among
    rows with a policy token."""
    rows = [i for i in range(group.n) if bool(group.action_mask[i].any())]
    if not rows:
        return []
    hi = max(rows, key=lambda i: float(group.advantages[i]))
    lo = min(rows, key=lambda i: float(group.advantages[i]))
    return [hi] if hi == lo else [hi, lo]


def _decode_each(tokenizer, ids: list[int]) -> list[str]:
    """Each id decoded on its own (one batched call when the tokenizer has one)."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
    if hasattr(tok, "batch_decode"):
        return list(tok.batch_decode([[i] for i in ids]))
    return [tok.decode([i]) for i in ids]


def _num(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _append(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _truncate_after(path: Path, step: int) -> None:
    """Keep the lines of steps <= ``step`` (and none cut short by a crash); atomic."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and rec["step"] <= step:
            keep.append(line)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
    os.replace(tmp, path)
