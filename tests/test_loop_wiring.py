"""What ``trainer/loop.py`` wires together, on one-step tiny runs: the KL reference is the
warm-started policy (also with LoRA), a resumed run's RNGs are the checkpoint's even when
building the generation engine reseeds, the metrics sinks get the config as nested
sections, and a step's ``time/*`` keys are disjoint phases that add up to the step."""

import json

import numpy as np
import pytest
import torch

import agentsearch.trainer.loop as loop_module
import agentsearch.trainer.rollouts as rollouts_module
import agentsearch.trainer.start as start_module
from agentsearch.core.config import apply_overrides
from agentsearch.trainer.checkpoint import rng_state
from agentsearch.trainer.loop import train
from agentsearch.trainer.metrics import MetricsLogger
from agentsearch.trainer.setup import seed_everything
from agentsearch.trainer.timing import EXCLUDED, PHASES
from agentsearch.trainer.train_config import TrainConfig

ONE_STEP = ["model=tiny-s", "steps=1", "prompts_per_step=2", "group_size=2", "max_turns=2",
            "max_seq_len=384", "generation.max_new_tokens=8", "eval.limit=2", "eval.every=0",
            "replay.k_rep=1", "replay.capacity=8", "replay.scan_chunk=2", "sft.pretrain_steps=0",
            "threads=1", "tensorboard=false", "checkpoint_every=1", "micro_batch_size=4", "lr=1e-3"]
# a short, strong warm start: the policy moves far from its random init
WARM = ["sft.steps=8", "sft.episodes=16", "sft.batch_size=8", "sft.lr=3e-2", "sft.log_every=0"]


def _cfg(*extra):
    return apply_overrides(TrainConfig, "tiny", ONE_STEP + list(extra))


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def warm_kl_run(tmp_path_factory):
    """One step after a warm start with a KL term (full weights); the config the sinks got."""
    run = tmp_path_factory.mktemp("warm_kl")
    seen = {}

    class RecordingLogger(MetricsLogger):
        def __init__(self, *args, config=None, **kwargs):
            seen["config"] = config
            super().__init__(*args, config=config, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_module, "MetricsLogger", RecordingLogger)
        train(_cfg(*WARM, "kl_coef=0.1"), run, quiet=True)
    return run, _records(run), seen["config"]


def test_kl_reference_is_the_warm_started_policy(warm_kl_run):
    # at step 1 the policy is still the warm-started one: KL to the reference is 0, not the
    # distance the warm start travelled from the random init
    _, recs, _ = warm_kl_run
    assert recs[0]["sft/steps"] == 8.0
    assert recs[1]["train/kl_ref"] == pytest.approx(0.0, abs=1e-6)


def test_kl_reference_with_lora_is_the_warm_started_adapter(tmp_path):
    train(_cfg(*WARM, "kl_coef=0.1", "lora.enabled=true", "lora.r=4", "lora.alpha=8"), tmp_path,
          quiet=True)
    recs = _records(tmp_path)
    assert recs[1]["train/kl_ref"] == pytest.approx(0.0, abs=1e-6)
    weights = torch.load(tmp_path / "checkpoints" / "step-000001" / "model.pt", weights_only=True)
    # only the policy trains
    assert weights and all("lora_" in k and ".reference." not in k for k in weights)
    # the warm-started adapter is kept (fp16) beside the run: it is the KL reference
    from safetensors.torch import load_file

    from agentsearch.trainer.checkpoint import load_reference

    warm = load_file(str(tmp_path / "warm_start" / "adapter_model.safetensors"))
    ref = {k.replace(".default.", "."): v for k, v in load_reference(tmp_path).items()}
    assert warm.keys() == ref.keys()
    assert all(torch.allclose(warm[k].float(), ref[k], atol=1e-3, rtol=1e-3) for k in warm)

    # RL from that kept warm start (init_from=warm_start, no SFT): the same adapter trains on
    # and is kept again as the run's warm start
    again = tmp_path / "again"
    train(_cfg("sft.steps=0", "lora.enabled=true", "lora.r=4", "lora.alpha=8",
               f"init_from={tmp_path / 'warm_start'}"), again, quiet=True)
    kept = load_file(str(again / "warm_start" / "adapter_model.safetensors"))
    assert kept.keys() == warm.keys() and all(torch.equal(kept[k], warm[k]) for k in warm)


def test_metrics_sinks_get_the_config_as_nested_sections(warm_kl_run):
    _, _, config = warm_kl_run
    assert config["replay"]["k_rep"] == 1 and isinstance(config["replay"]["k_rep"], int)
    assert config["sft"]["steps"] == 8 and config["generation"]["max_new_tokens"] == 8
    assert config["kl_coef"] == 0.1 and config["env_kwargs"]["topk"] == 2


def test_time_keys_of_a_step_are_disjoint_phases(warm_kl_run):
    _, recs, _ = warm_kl_run
    step = recs[1]
    times = {k for k in step if k.startswith("time/")}
    assert times == {f"time/{p}"
                     for p in PHASES + EXCLUDED + ("other", "overlap", "step", "train_cumulative")}
    assert step["time/overlap"] == 0  # lock-step: no phase runs beside another
    # the training phases and the rest ("other") partition the step: no key counts time twice
    assert (sum(step[f"time/{p}"] for p in PHASES + ("other",))
            == pytest.approx(step["time/step"], abs=1e-6))
    assert (step["rollout/wall_seconds"]
            >= step["time/generate"] + step["time/env"] + step["time/reward"])
    assert step["rollout/tokenize_seconds"] > 0


def _same_rng(a: dict, b: dict) -> bool:
    return (a["python"] == b["python"] and torch.equal(a["torch"], b["torch"])
            and all(np.array_equal(x, y) for x, y in zip(a["numpy"], b["numpy"])))


def test_resume_restores_the_checkpoint_rngs_after_everything_that_reseeds(tmp_path, monkeypatch):
    """A vLLM engine seeds python/numpy/torch when it starts (vllm/v1/worker/*_worker.py calls
    ``set_random_seed``); here a backend builder that reseeds the same way stands in for it.
    The first step after a resume must start from the checkpoint's RNG states."""
    real_build, real_rollout, seen = start_module.build_backend, rollouts_module.arollout, []

    def reseeding_build(*args, **kwargs):
        backend = real_build(*args, **kwargs)
        seed_everything(12345)
        return backend

    def recording_rollout(*args, **kwargs):
        seen.append(rng_state())
        return real_rollout(*args, **kwargs)

    train(_cfg(), tmp_path, quiet=True)
    saved = torch.load(tmp_path / "checkpoints" / "step-000001" / "trainer.pt",
                       weights_only=False)["rng"]
    monkeypatch.setattr(start_module, "build_backend", reseeding_build)  # open_engines' call
    monkeypatch.setattr(rollouts_module, "arollout", recording_rollout)
    train(_cfg("steps=2"), tmp_path, resume=True, quiet=True)
    assert [r["step"] for r in _records(tmp_path)] == [0, 1, 2]
    assert _same_rng(seen[0], saved)


def test_query_recycling_puts_each_zero_variance_task_back_in_the_order(tmp_path):
    """``replay=recycle``: every step's zero-variance groups (rewards all equal) are counted
    and their tasks go back into the sampler's order (here 100 steps ahead: past the epoch's
    end, so none is drawn again within the run and the order grows by exactly their count)."""
    from agentsearch.trainer.setup import build_envs

    cfg = _cfg("replay=recycle", "steps=3", "prompts_per_step=4", "replay.recycle_after=100")
    train(cfg, tmp_path, quiet=True)
    recs = _records(tmp_path)[1:]
    zero = [round(r["groups/zero_variance_frac"] * 4) for r in recs]
    assert [r["replay/recycled"] for r in recs] == zero and sum(zero) > 0
    assert recs[-1]["replay/recycled_total"] == sum(zero) and recs[-1]["health/alarms"] == 0
    trainer = torch.load(tmp_path / "checkpoints" / "step-000003" / "trainer.pt",
                         weights_only=False)
    tasks = len(build_envs(cfg, 1)[0].tasks)
    assert len(trainer["state"]["sampler"]["order"]) == tasks - 12 + sum(zero)
