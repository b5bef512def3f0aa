"""Crash recovery: a checkpoint half-written is never loaded, a metrics line cut by a crash is
dropped, and runs killed with SIGKILL (at a crash point and at a random instant) resume into
exactly the uninterrupted run: every step logged once, the same metrics, byte-identical
replay buffer, sampler state and final weights."""

from __future__ import annotations

import json
import logging
import time

import pytest
import torch

from agentsearch.recipes.crash_trials import compare_runs, is_timing, run_trials
from agentsearch.trainer.checkpoint import (
    MANIFEST,
    checkpoint_problem,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agentsearch.trainer.metrics import MetricsLogger


class _Buffer:
    def __init__(self, items):
        self.items = list(items)

    def state_dict(self):
        return {"items": torch.tensor(self.items)}

    def load_state_dict(self, s):
        self.items = s["items"].tolist()


def _save(run, step, value):
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(value)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return save_checkpoint(run, step, model=model, optimizer=opt, replay=_Buffer([step, value]),
                           state={"sampler": {"order": [step]}}, keep=3)


def _load(path):
    model = torch.nn.Linear(2, 1)
    buf = _Buffer([])
    state = load_checkpoint(path, model=model, replay=buf, restore_rng=False)
    return state["step"], model.weight.flatten().tolist(), buf.items


def test_latest_is_the_newest_intact_checkpoint(tmp_path, caplog):
    for step in (2, 4, 6):
        _save(tmp_path, step, float(step))
    root = tmp_path / "checkpoints"
    assert latest_checkpoint(tmp_path) == root / "step-000006"
    assert _load(root / "step-000006") == (6, [6.0, 6.0], [6, 6])
    # a byte changed in the newest: skipped with the reason, the one before is taken
    replay = root / "step-000006" / "replay.pt"
    data = bytearray(replay.read_bytes())
    data[len(data) // 2] ^= 0xFF
    replay.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="agentsearch.checkpoint"):
        assert latest_checkpoint(tmp_path) == root / "step-000004"
    assert "replay.pt does not match its manifest" in caplog.text
    # a file missing, or the manifest missing next to a partial set of files: never loaded
    (root / "step-000004" / "trainer.pt").unlink()
    assert "trainer.pt is missing" in checkpoint_problem(root / "step-000004")
    assert latest_checkpoint(tmp_path) == root / "step-000002"
    (root / "step-000002" / MANIFEST).unlink()
    (root / "step-000002" / "model.pt").unlink()
    assert "MANIFEST.json is missing" in checkpoint_problem(root / "step-000002")
    assert latest_checkpoint(tmp_path) is None


def test_a_crash_between_rename_and_marker_resumes_from_the_renamed_one(tmp_path):
    _save(tmp_path, 2, 2.0)
    _save(tmp_path, 4, 4.0)
    # the marker was not updated yet
    (tmp_path / "checkpoints" / "latest").write_text("step-000002\n")
    assert latest_checkpoint(tmp_path).name == "step-000004"


def test_leftover_temporary_folders_are_never_read_and_are_swept(tmp_path):
    _save(tmp_path, 2, 2.0)
    tmp = tmp_path / "checkpoints" / ".tmp-step-000004-999"
    tmp.mkdir()
    torch.save({"half": True}, tmp / "model.pt")  # what a writer killed mid-checkpoint leaves
    assert latest_checkpoint(tmp_path).name == "step-000002"
    _save(tmp_path, 4, 4.0)
    assert not tmp.exists() and latest_checkpoint(tmp_path).name == "step-000004"


def test_saving_the_same_step_again_replaces_it_whole(tmp_path):
    _save(tmp_path, 2, 2.0)
    _save(tmp_path, 2, 3.0)
    assert _load(latest_checkpoint(tmp_path)) == (2, [3.0, 3.0], [2, 3])
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_a_checkpoints_own_step_wins_over_a_stale_step_in_its_state(tmp_path):
    """A resumed loop once kept load_checkpoint's "step" in the state it saved again: resumed a
    second time, the run went back to the first resume's step (seen at step 66 of a SmolLM2 run
    resumed from 60). The checkpoint's step wins; the loop no longer carries one along."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    save_checkpoint(tmp_path, 66, model=model, optimizer=opt,
                    state={"step": 60, "train_cumulative": 1.0})
    state = load_checkpoint(latest_checkpoint(tmp_path), model=model, restore_rng=False)
    assert (state["step"], state["train_cumulative"]) == (66, 1.0)


def test_a_metrics_line_cut_by_a_crash_is_dropped_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n"
                            for s in range(4)) + '{"step": 4, "x"')
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.truncate_after(2)
    before = time.time()
    logger.log(3, {"x": 3})
    logger.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 3]
    # stamped with the clock (who shared the machine)
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["x"] == 3 and before - 0.1 <= last["clock/unix_seconds"] <= time.time() + 0.1
    assert is_timing("clock/unix_seconds")  # a resumed run's stamps differ from the reference's
    # damage that is not a crash's: an error
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        MetricsLogger(tmp_path, tensorboard=False).truncate_after(1)


def test_timing_metrics_are_told_apart():
    assert all(map(is_timing, ["time/step", "rollout/tokenize_seconds", "health/infra_outage_s",
                               "rollout/tool_latency_s"]))
    assert not any(map(is_timing, ["reward/total", "replay/buffer_mb", "train/loss",
                                   "rollout/infra_errors"]))


@pytest.mark.slow
def test_killed_runs_resume_into_the_uninterrupted_run(tmp_path):
    """Two trials: SIGKILL after a checkpoint's rename before its `latest` marker, and at a
    random instant; both resumes are the reference run, byte for byte."""
    over = ["steps=4", "prompts_per_step=4", "group_size=4", "checkpoint_every=1", "eval.every=0",
            "eval.limit=8", "threads=1", "tensorboard=false", "replay.capacity=16",
            "replay.k_rep=2", "replay.scan_chunk=2"]
    summary = run_trials(tmp_path, n=2, seed=3, overrides=over, points=("checkpoint:renamed@2",),
                         log=lambda *_: None)
    assert summary["exact"] == 2, json.dumps(summary["runs"], indent=1)
    renamed = summary["runs"][0]
    # the renamed one, not step 1's
    assert renamed["resumed_from"] == 2 and renamed["killed_at_step"] == 2
    ref = tmp_path / "reference"
    replay = torch.load(ref / "checkpoints" / "step-000004" / "replay.pt", weights_only=False)
    assert len(replay["groups"]) > 0  # the buffer compared byte for byte holds groups
    # and the comparison can fail: a run that differs in one metric is caught
    other = tmp_path / "trial-01" / "metrics.jsonl"
    recs = [json.loads(line) for line in other.read_text().splitlines()]
    recs[2]["reward/total"] = recs[2]["reward/total"] + 1.0
    other.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert any("reward/total" in p for p in compare_runs(ref, tmp_path / "trial-01"))


@pytest.mark.slow
def test_a_killed_overlap_run_resumes_without_counting_a_rollout_twice(tmp_path):
    """async.max_staleness=1: SIGKILL after step 2's record, before its checkpoint. The resume
    (from step 1's checkpoint) plays step 2's rollout again, so that rollout must count in step
    2's time only, not also in step 1's (where it was played beside step 1's update): mostly
    waiting on 1 s tool calls, it is much longer than the update it hid behind."""
    import shutil
    import subprocess
    import sys

    from agentsearch.core.failpoints import ENV_VAR
    from agentsearch.recipes.runner import subprocess_env

    over = ["steps=3", "prompts_per_step=2", "group_size=4", "checkpoint_every=1", "eval.every=0",
            "eval.limit=2", "threads=1", "tensorboard=false", "async.enabled=true",
            "async.max_staleness=1", "async.max_wait_s=0.01", "tool_latency.kind=fixed",
            "tool_latency.mean_s=1.0"]
    run, env = tmp_path / "run", subprocess_env(threads=1)
    env.pop(ENV_VAR, None)
    base = [sys.executable, "-m", "agentsearch", "train"]
    killed = subprocess.run([*base, "--preset", "tiny", "--out", str(run), *over],
                            capture_output=True, env={**env, ENV_VAR: "loop:logged@2"}, timeout=600)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    shutil.copy(run / "metrics.jsonl", tmp_path / "killed.jsonl")
    resumed = subprocess.run([*base, "--resume", str(run)], capture_output=True, env=env,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    killed_recs = [json.loads(x) for x in (tmp_path / "killed.jsonl").read_text().splitlines()]
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in killed_recs] == [0, 1, 2]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]  # every step logged once
    assert recs[1] == killed_recs[1]  # kept; steps 2 and 3 are the resume's
    for a, b in zip(recs[1:], recs[2:]):
        cum = a["time/train_cumulative"] + b["time/step"]
        assert b["time/train_cumulative"] == pytest.approx(cum, abs=0.05)
    # step 1: its own rollout, then its update (phases 2-6) while step 2's rollout played
    learn = sum(recs[1][f"time/{k}"] for k in ("logprobs", "replay_scan", "update", "sync"))
    beyond = recs[1]["time/step"] - recs[1]["rollout/wall_seconds"] - learn
    second = killed_recs[2]["rollout/wall_seconds"]  # step 2's rollout, as the killed run played it
    assert second > 1.0 and beyond < 0.25 * second, (beyond, second)  # not in step 1's time
    assert recs[2]["time/step"] > recs[2]["rollout/wall_seconds"]  # the resume played it again
