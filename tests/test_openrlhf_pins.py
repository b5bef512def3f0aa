"""What the OpenRLHF engine relies on in OpenRLHF 0.11.2, pinned; the launcher's command is
one OpenRLHF's own parser accepts; bad input is refused before Ray starts.

If OpenRLHF moves an extension point, a test here fails and names it.
"""

import inspect
import json

import pytest

pytest.importorskip("ray")

from agentsearch.core.config import ConfigError  # noqa: E402
from agentsearch.engines.openrlhf.compat import SUPPORTED_VERSION, check_version, import_openrlhf  # noqa: E402

pytestmark = pytest.mark.openrlhf


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_openrlhf_version_is_the_supported_one(monkeypatch):
    assert check_version() == SUPPORTED_VERSION == "0.11.2"
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.12.0")
    with pytest.raises(ImportError, match="supports 0.11.2 only"):
        check_version()


def test_extension_points_we_use_are_where_we_expect_them():
    import_openrlhf()
    import openrlhf.cli.train_ppo_ray as cli
    from openrlhf.trainer.ppo_trainer import PPOTrainer
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray import vllm_engine
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer, PolicyModelActor
    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap
    from openrlhf.utils.agent import AgentExecutorBase

    # the agent executor API and how the rollout actor loads and calls it
    assert _params(AgentExecutorBase.execute) == ["self", "prompt", "label", "sampling_params", "max_length",
                                                  "hf_tokenizer", "llm_engine", "images"]
    assert "agent_module.AgentExecutor" in inspect.getsource(vllm_engine._load_agent_executor)
    rollout = vllm_engine.RolloutRayActor.__ray_actor_class__
    assert _params(rollout.generate)[:4] == ["self", "prompt_token_ids", "sampling_params", "multi_modal_data"]
    assert "generate_responses" in vars(rollout)
    # OpenRLHF builds engines in bf16, the dtype the LoRA sync casts to
    assert '"dtype": "bfloat16"' in inspect.getsource(vllm_engine.create_vllm_engines)
    # the experience maker and sample generator hooks HDR overrides or calls
    for name in ("make_experience_batch", "split_rollout_samples", "make_experience",
                 "compute_advantages_and_returns", "_flatten_results"):
        assert callable(getattr(RemoteExperienceMaker, name)), name
    assert _params(SamplesGenerator._generate_vllm)[:4] == ["self", "dataloader_iter", "num_prompts",
                                                            "dynamic_filtering"]
    assert _params(SamplesGenerator._process_response_into_experience)[:2] == ["self", "response"]
    trainer = PPOTrainer.__ray_actor_class__
    for name in ("train_step", "save_logs_and_checkpoints", "init_checkpoint_states"):
        assert name in vars(trainer) or hasattr(trainer, name), name
    assert {"sequences", "action_mask", "action_log_probs", "base_action_log_probs", "kl", "rewards",
            "advantages", "index", "info"} <= set(Experience.__dataclass_fields__)
    # the weight sync we replace under LoRA, and the engine-side method it calls
    assert callable(ActorPPOTrainer.broadcast_to_vllm)
    assert _params(WorkerWrap.update_weight) == ["self", "name", "dtype", "shape", "empty_cache"]
    assert "init_model_from_pretrained" in vars(PolicyModelActor.__ray_actor_class__)
    # train_ppo_ray imports PPOTrainer inside train() and reads PolicyModelActor from its
    # globals, so entry.install's swaps take effect
    src = inspect.getsource(cli.train)
    assert "from openrlhf.trainer.ppo_trainer import PPOTrainer" in src
    assert "PolicyModelActor," in src and hasattr(cli, "PolicyModelActor")
    assert "get_strategy(args)" in src


def _launch_cfg(tmp_path, *overrides):
    from agentsearch.engines.openrlhf.launch import load_config

    return load_config("openrlhf-tiny", [f"out={tmp_path / 'run'}", "eval_questions=20",
                                         "train.steps=2", *overrides])


def test_dry_run_prints_a_command_openrlhfs_parser_accepts(tmp_path, capsys):
    import shlex

    from agentsearch.engines.openrlhf.engine import AGENT_FUNC_PATH
    from agentsearch.engines.openrlhf.executor import parse_label
    from agentsearch.engines.openrlhf.launch import launch, parse_openrlhf_args

    cfg = _launch_cfg(tmp_path, "train.lora.enabled=true", "train.lora.r=8")
    assert launch(cfg, dry_run=True) == 0
    cmd = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert cmd[1:4] == ["-m", "agentsearch.engines.openrlhf.entry", "--agentsearch-config"]
    args = parse_openrlhf_args(cmd[5:])
    assert args.train.agent_func_path == AGENT_FUNC_PATH
    assert args.rollout.batch_size == 8 + 4 and args.rollout.n_samples_per_prompt == 8
    assert args.train.batch_size == 12 * 8 and args.algo.advantage.estimator == "group_norm"
    assert args.ds.lora.rank == 8 and args.actor.eps_clip_low_high == [0.2, 0.28]
    run = tmp_path / "run"
    settings = json.loads((run / "agentsearch.json").read_text())
    assert settings["replay"]["kind"] == "hdr" and settings["replay"]["k_rep"] == 4 and settings["lora"]
    lines = (run / "train.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 12
    spec = parse_label(json.loads(lines[0])["label"])
    assert spec["env"] == "agentsearch/Search-v0" and spec["max_turns"] == 4 and spec["task"]["question"]
    assert len((run / "eval.jsonl").read_text().splitlines()) == 20


def test_on_policy_launch_has_no_replay_and_fresh_batch(tmp_path):
    from agentsearch.engines.openrlhf.launch import build_command, parse_openrlhf_args, settings

    cfg = _launch_cfg(tmp_path, "train.replay.kind=none")
    assert settings(cfg)["replay"] is None
    cmd = build_command(cfg, write=False)
    assert parse_openrlhf_args(cmd[5:]).rollout.batch_size == 8


def test_bad_input_is_refused_before_ray_starts(tmp_path, monkeypatch):
    import ray

    from agentsearch.engines.openrlhf.launch import launch, parse_openrlhf_args

    def no_ray(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", no_ray)
    was = ray.is_initialized()
    with pytest.raises(ConfigError, match="not a registered env"):
        launch(_launch_cfg(tmp_path, "train.env=agentsearch/Nope-v0"), dry_run=True)
    with pytest.raises(ConfigError, match="does not answer"):
        launch(_launch_cfg(tmp_path, "train.env_kwargs.index=http://127.0.0.1:9"), dry_run=True)
    with pytest.raises(ConfigError, match="kl_coef=0"):
        launch(_launch_cfg(tmp_path, "train.kl_coef=0.01"), dry_run=True)
    with pytest.raises(ConfigError, match="parser refused"):
        parse_openrlhf_args(["--no.such.option", "1"])
    with pytest.raises(ConfigError, match="OpenRLHF refused"):  # one of OpenRLHF's own checks
        parse_openrlhf_args(["--actor.model_name_or_path", "x", "--train.agent_func_path", "a.py",
                             "--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "1"])
    assert ray.is_initialized() == was


def test_cli_reports_bad_input_with_exit_code_2(tmp_path, capsys):
    from agentsearch.cli import main

    rc = main(["openrlhf", "launch", "--dry-run", f"out={tmp_path}", "train.env=agentsearch/Nope-v0"])
    assert rc == 2 and "not a registered env" in capsys.readouterr().err


def test_entry_swaps_in_our_trainer_and_policy_actor(monkeypatch):
    import_openrlhf()
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils as utils

    from agentsearch.engines.openrlhf.entry import install
    from agentsearch.engines.openrlhf.hdr import HDRPPOTrainerActor
    from agentsearch.engines.openrlhf.lora_sync import LoraSyncPolicyModelActor

    for mod, name in ((ppo_trainer, "PPOTrainer"), (ppo_actor, "PolicyModelActor"), (utils, "get_strategy")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    install({"replay": {"kind": "hdr", "k_rep": 2, "capacity": 8, "tau": 0.01}, "lora": True})
    assert ppo_trainer.PPOTrainer is HDRPPOTrainerActor
    assert ppo_actor.PolicyModelActor is LoraSyncPolicyModelActor


def test_merged_lora_weights_use_base_names_and_the_delta(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    from agentsearch.engines.openrlhf.lora_sync import base_name, merged_lora_weights
    from agentsearch.models import load_model

    model, _ = load_model("tiny", seed=1)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    for n, p in peft.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.1)
    merged = dict(merged_lora_weights(peft, torch.bfloat16))
    assert set(merged) == {k for k in base if k != "lm_head.weight"}  # tied head: not a parameter
    assert all(t.dtype == torch.bfloat16 for t in merged.values())
    q = "model.layers.0.self_attn.q_proj.weight"
    layer = peft.base_model.model.model.layers[0].self_attn.q_proj
    want = base[q] + 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    assert torch.allclose(merged[q].float(), want, atol=1e-2)
    k = "model.layers.0.self_attn.k_proj.weight"  # not adapted: unchanged
    assert torch.equal(merged[k], base[k].to(torch.bfloat16))
    assert base_name("base_model.model.model.layers.1.mlp.down_proj.base_layer.weight") == \
        "model.layers.1.mlp.down_proj.weight"
