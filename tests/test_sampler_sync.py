"""The sampler provably serves the current adapter: a LoRA run on vLLM whose weight sync is
skipped once raises the sampler-sync health alarm at the very next step, and only there."""

from __future__ import annotations

import json
import logging

import pytest

from agentsearch.core.config import apply_overrides
from agentsearch.trainer import rollouts as rollouts_module
from agentsearch.trainer.loop import train
from agentsearch.trainer.train_config import TrainConfig

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUN = ["steps=4", "prompts_per_step=4", "group_size=4", "max_turns=3", "max_seq_len=512",
       "generation.max_new_tokens=16", "generation.backend=vllm", "lora.enabled=true",
       "lora.r=8", "lora.alpha=16", "lr=2e-2", "replay.kind=none", "eval.every=0",
       "eval.limit=4", "sft.steps=0", "threads=1", "tensorboard=false", "checkpoint_every=4"]


@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
def test_a_skipped_adapter_sync_raises_the_alarm_at_the_next_step(tmp_path, monkeypatch,
                                                                     caplog, lora_sync):
    real, calls = rollouts_module.StepRollouts.sync, []

    def sync_but_drop_the_second(self, model):
        calls.append(len(calls) + 1)
        if len(calls) != 2:  # the sync after step 2's update never reaches the engine
            real(self, model)

    monkeypatch.setattr(rollouts_module.StepRollouts, "sync", sync_but_drop_the_second)
    cfg = apply_overrides(TrainConfig, "tiny", RUN + [f"generation.vllm_lora_sync={lora_sync}"])
    with caplog.at_level(logging.WARNING):
        train(cfg, tmp_path, quiet=True)
    recs = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").open())
            if "rollout/logprob_gap" in r}
    gaps = {s: r["rollout/logprob_gap"] for s, r in recs.items()}
    assert sorted(recs) == [1, 2, 3, 4] and calls[:3] == [1, 2, 3]
    assert all(recs[s]["train/skipped_no_signal"] == 0 for s in (1, 2)), gaps  # weights moved
    assert [recs[s]["health/logprob_gap_jumps"] for s in (1, 2, 3, 4)] == [0, 0, 1, 0], gaps
    assert gaps[3] > 10 * max(gaps[1], gaps[2], gaps[4]), gaps
    alarms = [r.getMessage() for r in caplog.records if "health alarm" in r.getMessage()]
    assert len(alarms) == 1 and "step 3" in alarms[0] and "logprob_gap" in alarms[0]
