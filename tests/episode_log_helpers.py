"""A check shared by the trainer's end-to-end HDR test: what ``trainer/episode_log.py`` wrote
matches the groups the replay buffer really returned."""

import json

import pytest


def replay_episodes_are_the_stored_rows(run, scans):
    """``episodes.jsonl`` shows a replayed group's rows as stored (ids and action mask, cut after
    the last policy token) with the drift the gate measured; ``replay_scan.jsonl`` holds every
    scored group's drift and decision in scan order (``trainer/episode_log.py``)."""
    eps = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    lines = {s["step"]: s for s in map(json.loads,
                                       (run / "replay_scan.jsonl").read_text().splitlines())}
    checked = 0
    for s in (s for s in scans if s["scored"]):
        line = lines[s["step"]]
        assert line["drift"] == pytest.approx([d for _, d in s["scored"]], rel=1e-6)
        assert line["accepted"] == "".join("1" if gid in s["accepted"] else "0"
                                           for gid, _ in s["scored"])
        shown = [e for e in eps if e["step"] == s["step"] and e["source"] == "replay"]
        signal = [g for g in s["groups"] if bool((g.advantages != 0).any())]
        if not signal:
            assert not shown
            continue
        group, drift = signal[0], dict(s["scored"])[id(signal[0])]
        for e in shown:
            mask = group.action_mask[e["row"]]
            last = int(mask.nonzero().max()) + 1
            assert e["token_ids"] == group.token_ids[e["row"], :last].tolist()
            assert e["action_mask"] == "".join("1" if m else "0" for m in mask[:last].tolist())
            assert e["drift"] == pytest.approx(drift, rel=1e-6)
            assert e["advantage"] == pytest.approx(float(group.advantages[e["row"]]))
            checked += 1
    assert checked >= 2
