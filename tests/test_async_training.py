"""Training with the streaming rollout (``async.enabled``): the config round-trips under its
keyword name, the run trains and logs truthful overlapping time, tool timeouts apply."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from test_trainer import WARM, _cfg, _records

from agentsearch.core.config import ConfigError, apply_overrides, to_dict
from agentsearch.trainer.loop import train
from agentsearch.trainer.setup import build_envs
from agentsearch.trainer.train_config import TrainConfig


def test_async_section_is_keyed_async_everywhere(tmp_path):
    cfg = apply_overrides(TrainConfig, "tiny", ["async.enabled=true", "async.max_wait_s=0.01"])
    assert cfg.async_.enabled and cfg.async_.max_wait_s == 0.01
    d = to_dict(cfg)
    assert "async" in d and "async_" not in d and d["async"]["enabled"] is True
    assert json.dumps(d)  # plain data, for the metrics sinks
    again = apply_overrides(TrainConfig, d, [])  # a run folder's config.yaml resumes the same run
    assert again == cfg


@pytest.mark.parametrize("overrides,msg", [
    (["async.max_staleness=-1"], "max_staleness=-1 must be >= 0"),
    (["async.max_batch=0"], "max_batch must be >= 1"),
    (["async.tool_timeout_s=0"], "tool_timeout_s=0.0 must be > 0"),
    (["async.enabled=maybe"], "async.enabled"),
    (["async.oversample=-1"], "oversample=-1 must be >= 0"),
    (["async.enabled=true", "async.oversample=2"], "carry groups across an update"),
    (["async.enabled=true", "async.replay_topup=true"], "carry groups across an update"),
])
def test_bad_async_settings_are_clear_errors(overrides, msg):
    with pytest.raises(ConfigError, match=msg):
        apply_overrides(TrainConfig, "tiny", overrides)


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_oversample_and_topup_run_on_either_backend(backend):
    """Groups carried across steps are built on HF and vLLM generation (vLLM: an eval holds
    them out of the engine, tests/test_vllm_async.py)."""
    cfg = apply_overrides(TrainConfig, "tiny", [
        f"generation.backend={backend}", "async.enabled=true", "async.max_staleness=1",
        "async.oversample=1", "async.replay_topup=true"])
    assert cfg.async_.oversample == 1 and cfg.async_.replay_topup


def test_tool_timeout_reaches_every_tool():
    cfg = _cfg("async.tool_timeout_s=0.25", "tool_latency.kind=fixed", "tool_latency.mean_s=0.1")
    envs = build_envs(cfg, 2)
    assert [t.timeout_s for e in envs for t in e.tools.values()] == [0.25] * 2


def test_streaming_run_trains_and_logs_overlapping_time(tmp_path):
    train(_cfg("steps=2", "eval.limit=2", "async.enabled=true", "async.max_wait_s=0.01",
               "tool_latency.kind=lognormal", "tool_latency.mean_s=0.05", "tool_latency.sigma=1.0"),
          tmp_path, quiet=True)
    recs = _records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2]
    for r in recs[1:]:
        assert r["rollout/episodes"] == 8 and r["tokens/generated"] > 0 and r["tokens/scored"] > 0
        assert r["time/generate"] > 0 and r["time/env"] > 0 and r["time/step"] > 0
        assert r["time/overlap"] >= 0 and r["rollout/batch_mean"] >= 1
        assert r["rollout/logprob_gap"] < 1e-3  # the engine's logprobs are the trainer's
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["async"]["enabled"] is True


@pytest.mark.slow
def test_overlapped_run_trains_on_stale_groups_through_the_drift_gate(tmp_path):
    """max_staleness=1: the next step's rollout runs while this step updates, so turns arrive
    one version behind, measurably drifted (a warm-started policy has signal to move on)."""
    train(_cfg("steps=4", "eval.limit=2", "async.enabled=true", "async.max_staleness=1",
               "async.max_wait_s=0.01", "replay.tau=1e-2", "tool_latency.kind=lognormal",
               "tool_latency.mean_s=0.05", "tool_latency.sigma=1.0", *WARM), tmp_path, quiet=True)
    recs = _records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4]
    assert any(r["async/drift_fresh_mean"] > 0 for r in recs[2:])
    assert all(r["async/dropped_by_drift"] <= r["async/stale_groups"] for r in recs[1:])
    for r in recs[1:]:
        for key in ("async/staleness_mean", "async/stale_groups", "async/drift_fresh_mean",
                    "async/dropped_by_drift", "async/is_weight_mean", "time/overlap"):
            assert key in r, key
        assert 0 <= r["async/staleness_mean"] <= 1
    assert recs[1]["async/staleness_mean"] == 0  # the first rollout ran before any update
    assert any(r["async/stale_groups"] > 0 for r in recs[2:])  # later ones saw a sync mid-rollout
    assert recs[2]["time/overlap"] > 0


@pytest.mark.slow
def test_oversampled_run_carries_groups_tops_up_with_replay_and_resumes(tmp_path):
    """async.oversample=2: four groups in play for two per step; the stragglers (a slow tool
    call) are carried and their length bias logged; replay_topup fills the batch with replayed
    groups when the update is done first. A resume restarts the tasks that were in play."""
    over = ["async.enabled=true", "async.max_staleness=1", "async.max_wait_s=0.01",
            "async.oversample=2", "async.replay_topup=true", "replay.kind=hdr",
            "tool_latency.kind=lognormal", "tool_latency.mean_s=0.1", "tool_latency.sigma=1.5",
            *WARM]
    train(_cfg("steps=4", "checkpoint_every=2", *over), tmp_path, quiet=True)
    recs = _records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4]
    for r in recs[1:]:
        for key in ("async/carried_groups", "async/taken_carried", "async/len_carried",
                    "async/len_uncarried", "async/fresh_short", "async/replay_topup"):
            assert key in r, key
        assert (r["rollout/episodes"] == 4 * (2 - r["async/fresh_short"])
                and r["async/fresh_short"] <= 1)
        assert 0 <= r["async/replay_topup"] <= r["async/fresh_short"]
    assert sum(r["async/carried_groups"] for r in recs[1:]) > 0
    state = torch.load(tmp_path / "checkpoints" / "step-000002" / "trainer.pt",
                       weights_only=False)["state"]
    # the step-3 groups taken ahead (2 - short) and the groups in play are the tasks a
    # resume restarts
    assert state["pool"]["serial"] >= 6 and len(state["pool"]["tasks"]) >= 3
    train(_cfg("steps=4", "checkpoint_every=2", *over), tmp_path, resume=True, quiet=True)
    assert [r["step"] for r in _records(tmp_path)] == [0, 1, 2, 3, 4]
