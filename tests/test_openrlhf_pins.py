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
    assert _params(AgentExecutorBase.execute) == [
        "self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "llm_engine",
        "images"]
    assert "agent_module.AgentExecutor" in inspect.getsource(vllm_engine._load_agent_executor)
    rollout = vllm_engine.RolloutRayActor.__ray_actor_class__
    assert _params(rollout.generate)[:4] == ["self", "prompt_token_ids", "sampling_params",
                                             "multi_modal_data"]
    assert "generate_responses" in vars(rollout)
    # OpenRLHF builds engines in bf16, the dtype the LoRA sync casts to
    assert '"dtype": "bfloat16"' in inspect.getsource(vllm_engine.create_vllm_engines)
    # the experience maker and sample generator hooks HDR overrides or calls
    for name in ("make_experience_batch", "split_rollout_samples", "make_experience",
                 "compute_advantages_and_returns", "_flatten_results"):
        assert callable(getattr(RemoteExperienceMaker, name)), name
    assert _params(SamplesGenerator._generate_vllm)[:4] == ["self", "dataloader_iter",
                                                            "num_prompts", "dynamic_filtering"]
    assert _params(SamplesGenerator._process_response_into_experience)[:2] == ["self", "response"]
    trainer = PPOTrainer.__ray_actor_class__
    for name in ("train_step", "save_logs_and_checkpoints", "init_checkpoint_states"):
        assert name in vars(trainer) or hasattr(trainer, name), name
    # our trainer's hooks: train_step calls _compute_rollout_stats (where a step without signal
    # stops) after making the experience and before the actors get the rows; fit calls
    # init_checkpoint_states first (the step-0 evaluation), save_logs_and_checkpoints (ours
    # evaluates there) after each step, and its own evaluation only every args.eval.steps
    step_src = inspect.getsource(trainer.train_step)
    assert step_src.index("make_experience_batch(") < step_src.index("_compute_rollout_stats(") \
        < step_src.index('method_name="append"') < step_src.index("self.ppo_train(")
    fit_src = inspect.getsource(trainer.fit)
    order = ("self.init_checkpoint_states()", "self.train_step(", "self.save_logs_and_checkpoints(",
             "% self.args.eval.steps == 0")
    assert [fit_src.index(x) for x in order] == sorted(fit_src.index(x) for x in order)
    assert {"sequences", "action_mask", "action_log_probs", "base_action_log_probs", "kl",
            "rewards", "advantages", "index", "info"} <= set(Experience.__dataclass_fields__)
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
    # 8 fresh prompts + k_rep = 4 replay slots per step, one optimizer step on all slots
    assert args.rollout.batch_size == 8 + 4 and args.rollout.n_samples_per_prompt == 8
    assert args.train.batch_size == 12 * 8 and args.algo.advantage.estimator == "group_norm"
    assert args.ds.lora.rank == 8 and args.actor.eps_clip_low_high == [0.2, 0.28]
    assert args.ckpt.load_enable  # resume is on by default
    run = tmp_path / "run"
    settings = json.loads((run / "agentsearch.json").read_text())
    assert settings["replay"]["kind"] == "hdr" and settings["replay"]["k_rep"] == 4
    assert settings["lora_rank"] == 8 and settings["fresh_per_step"] == 8
    # steps x prompts_per_step prompts: an HDR run is `steps` long, like the on-policy one
    lines = (run / "train.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 8 and args.data.max_samples == 16
    spec = parse_label(json.loads(lines[0])["label"])
    assert (spec["env"] == "agentsearch/Search-v0" and spec["max_turns"] == 4
            and spec["task"]["question"])
    assert len((run / "eval.jsonl").read_text().splitlines()) == 20
    assert (run / "config.yaml").exists()  # what `agentsearch pareto` labels the run by


def test_on_policy_launch_has_no_replay_and_fresh_batch(tmp_path):
    from agentsearch.engines.openrlhf.launch import build_command, parse_openrlhf_args, settings

    cfg = _launch_cfg(tmp_path, "train.replay.kind=none")
    assert settings(cfg)["replay"] is None
    args = parse_openrlhf_args(build_command(cfg, write=False)[5:])
    assert (args.rollout.batch_size == 8 and args.train.batch_size == 8 * 8
            and args.data.max_samples == 16)


def test_every_built_in_model_name_becomes_a_folder_openrlhf_loads(tmp_path):
    from agentsearch.data.paths import BASE_DIRS
    from agentsearch.engines.openrlhf.launch import model_path

    for base, folder in BASE_DIRS.items():  # every shipped base, not only tiny-base
        assert (model_path(_launch_cfg(tmp_path, f"train.model={base}"), tmp_path, write=False)
                == str(folder))
    # built from a config, written for every node
    cfg = _launch_cfg(tmp_path, "train.model=tiny+worlds")
    assert model_path(cfg, tmp_path, write=False) == str((tmp_path / "model").resolve())


def test_every_shipped_openrlhf_preset_dry_runs(tmp_path, world_path, capsys):
    """The paper preset inherits kl_coef 0.001 with replay on: it used to exit 2."""
    from test_search_r1_data import _parquet, _rows

    from agentsearch.core.config import PRESET_DIRS
    from agentsearch.engines.openrlhf.launch import launch, load_config
    from agentsearch.retrievers import load_retriever, serve_in_thread, world_index

    presets = sorted(p.stem for d in PRESET_DIRS for p in d.glob("openrlhf-*.yaml"))
    assert {"openrlhf-tiny", "openrlhf-search-r1"} <= set(presets)
    # Search-R1's parquet layout; the paper preset's policy tokenizer (chat_template: policy,
    # max_obs_tokens) is Qwen2.5's, not on this machine: the tiny base's stands in for it
    train = _parquet(tmp_path / "train.parquet", _rows(world_path, 6, 6, "train"),
                     with_question=True)
    test = _parquet(tmp_path / "test.parquet", _rows(world_path, 3, 3, "test"), with_question=True)
    offline = {"openrlhf-search-r1": ["train.model=tiny-base"]}
    with serve_in_thread(load_retriever(world_index(seed=0, kind="bm25s"))) as url:
        for name in presets:
            cfg = load_config(name, [f"out={tmp_path / name}", "eval_questions=5",
                                     f"train.env_kwargs.index={url}",
                                     f"train.env_kwargs.questions={train}",
                                     f"train.eval.questions={test}", *offline.get(name, [])])
            assert launch(cfg, dry_run=True) == 0, name
    out = capsys.readouterr().out
    assert out.count("agentsearch.engines.openrlhf.entry") == len(presets)


def test_parsed_arguments_match_the_local_algorithm_field_by_field(tmp_path):
    import math

    from agentsearch.engines.openrlhf.launch import build_command, parse_openrlhf_args

    cfg = _launch_cfg(tmp_path, "micro_batch_size=null", "train.lr=2e-5",
                      "train.weight_decay=0.01", "train.warmup_steps=3", "train.steps=30",
                      "train.grad_clip=0.5", "train.clip_low=0.1", "train.clip_high=0.3",
                      "train.dual_clip=3.0", "train.agg=sequence", "train.kl_coef=0",
                      "train.advantage_scale=none", "train.seed=7", "train.micro_batch_size=4",
                      "train.checkpoint_every=5", "train.group_size=4",
                      "train.adam_betas=[0.9, 0.999]", "train.entropy_coef=0.001",
                      "train.update_epochs=2", "train.replay.kind=none",
                      "train.update_minibatch_size=16")
    a = parse_openrlhf_args(build_command(cfg, write=False)[5:])
    t = cfg.train
    assert ((a.actor.adam.lr, a.actor.adam.weight_decay, a.actor.max_norm)
            == (t.lr, t.weight_decay, t.grad_clip))
    assert list(a.actor.adam.betas) == t.adam_betas == [0.9, 0.999]
    assert a.actor.entropy_coef == 0.001 and a.train.max_epochs == 2 and a.train.batch_size == 16
    assert a.actor.lr_scheduler == "constant_with_warmup"
    # OpenRLHF's warmup, in optimizer steps: 8 prompts x 4 samples / 16 rows x 2 epochs = 4 a step
    assert math.ceil(t.steps * 4 * a.actor.lr_warmup_ratio) == t.warmup_steps * 4
    assert a.actor.eps_clip_low_high == [0.1, 0.3] and a.actor.dual_clip == 3.0
    assert a.actor.policy_loss_type == "ppo" and a.actor.loss_agg_mode == "seq-mean-token-mean"
    assert (a.algo.advantage.estimator == "dr_grpo" and a.train.seed == 7
            and a.rollout.n_samples_per_prompt == 4)
    assert a.train.micro_batch_size == 4 and a.ckpt.save_steps == 5 and not a.algo.kl.use_loss
    assert (a.algo.advantage.is_correction_level == "token"
            and a.algo.advantage.is_correction_mode == "clip")
    kl = parse_openrlhf_args(
        build_command(_launch_cfg(tmp_path, "train.kl_coef=0.01", "train.kl_kind=k2"),
                      write=False)[5:])
    assert kl.algo.kl.use_loss and kl.algo.kl.init_coef == 0.01 and kl.algo.kl.estimator == "k2"
    gspo = parse_openrlhf_args(
        build_command(_launch_cfg(tmp_path, "train.loss=gspo", "train.clip_low=3e-4",
                                  "train.clip_high=4e-4"), write=False)[5:])
    assert gspo.actor.policy_loss_type == "gspo" and gspo.actor.eps_clip_low_high == [3e-4, 4e-4]


def test_every_train_field_is_mapped_or_refused_and_documented():
    from pathlib import Path

    from agentsearch.engines.openrlhf.mapping import FIELDS, check_fields, table
    from agentsearch.trainer.train_config import TrainConfig

    check_fields(TrainConfig)  # every leaf has an entry, and every entry names a leaf
    assert FIELDS["lr"] == "`--actor.adam.lr`" and FIELDS["sft.*"].startswith("refused")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "openrlhf.md").read_text()
    assert table() in doc, "docs/openrlhf.md is stale: python scripts/config_reference.py --write"


def test_a_train_field_without_a_mapping_says_where_to_add_it_and_is_refused(tmp_path):
    """The leaves come from TrainConfig itself: a new field (here on a subclass) with no entry
    fails check_fields with the file to add it to, and a launch that sets it is refused."""
    import dataclasses

    from agentsearch.engines.openrlhf.mapping import check_fields, refusals
    from agentsearch.trainer.train_config import TrainConfig

    @dataclasses.dataclass
    class Grown(TrainConfig):
        new_knob: int = 0
        """A field added after the mapping was written."""

    where = r"\['new_knob'\]\. Add each to agentsearch/engines/openrlhf/mapping\.py: DIRECT"
    with pytest.raises(ValueError, match=where):
        check_fields(Grown)
    assert refusals(Grown()) == []  # at its default, the launch runs as the local trainer would
    assert any("train.new_knob" in r for r in refusals(Grown(new_knob=3)))


def test_fields_openrlhf_takes_as_they_are_reach_its_arguments(tmp_path):
    """mapping.DIRECT (field -> OpenRLHF argument) is what the launcher passes: each field set
    to a value that is no default comes back from OpenRLHF's parser unchanged."""
    from functools import reduce

    from agentsearch.engines.openrlhf.launch import build_command, parse_openrlhf_args
    from agentsearch.engines.openrlhf.mapping import DIRECT

    def bump(v):
        if isinstance(v, list):
            return [bump(x) for x in v]
        return v + 1 if isinstance(v, int) else v / 2 + 0.0625

    base = _launch_cfg(tmp_path).train
    values = {f: bump(reduce(getattr, f.split("."), base)) for f in DIRECT}
    cfg = _launch_cfg(tmp_path, *(f"train.{f}={json.dumps(v)}" for f, v in values.items()))
    args = parse_openrlhf_args(build_command(cfg, write=False)[5:])
    got = {f: reduce(getattr, flag.removeprefix("--").split("."), args)
           for f, flag in DIRECT.items()}
    assert {f: list(v) if isinstance(v, (list, tuple)) else v for f, v in got.items()} == values
    assert len(DIRECT) >= 10


@pytest.mark.parametrize("override, words", [
    ("train.dynamic_sampling=true", "resamples prompts"),
    ("train.overlong_buffer=8", "max_response_tokens"),
    ("train.sft.steps=10", "init_from"),
    ("train.loss=cispo", "gspo"),
    ("train.clip_low=null", "no lower clip"),
    ("train.tool_latency.kind=fixed", "local trainer only"),
    ("train.async.tool_timeout_s=5", "keep their own timeouts"),
    ("train.env=agentsearch/Vision-v0", "Vision-v0"),
])
def test_settings_openrlhf_would_run_differently_are_refused(tmp_path, override, words):
    from agentsearch.engines.openrlhf.launch import preflight

    with pytest.raises(ConfigError, match=words):
        preflight(_launch_cfg(tmp_path, override))


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
    with pytest.raises(ConfigError, match="parser refused"):
        parse_openrlhf_args(["--no.such.option", "1"])
    with pytest.raises(ConfigError, match="OpenRLHF refused"):  # one of OpenRLHF's own checks
        parse_openrlhf_args(["--actor.model_name_or_path", "x", "--train.agent_func_path", "a.py",
                             "--algo.advantage.estimator", "group_norm",
                             "--rollout.n_samples_per_prompt", "1"])
    assert ray.is_initialized() == was


def test_cli_reports_bad_input_with_exit_code_2(tmp_path, capsys):
    from agentsearch.cli import main

    rc = main(["openrlhf", "launch", "--dry-run", f"out={tmp_path}",
               "train.env=agentsearch/Nope-v0"])
    assert rc == 2 and "not a registered env" in capsys.readouterr().err


def test_entry_swaps_in_our_trainer_policy_actor_and_lora_engines(monkeypatch):
    import_openrlhf()
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils as utils

    from agentsearch.engines.openrlhf.entry import install
    from agentsearch.engines.openrlhf.lora_sync import LoraSyncPolicyModelActor
    from agentsearch.engines.openrlhf.ppo_trainer import AgentsearchPPOTrainerActor

    for mod, name in ((ppo_trainer, "PPOTrainer"), (ppo_actor, "PolicyModelActor"),
                      (utils, "get_strategy"), (ray_pkg, "create_vllm_engines")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    original = ray_pkg.create_vllm_engines
    install({"replay": None, "lora_rank": 0, "fresh_per_step": 4, "out": "x"})
    assert ppo_trainer.PPOTrainer is AgentsearchPPOTrainerActor  # always: our logs and checkpoints
    assert ray_pkg.create_vllm_engines is original
    install({"replay": {"kind": "hdr", "k_rep": 2, "capacity": 8, "tau": 0.01}, "lora_rank": 8,
             "fresh_per_step": 4, "out": "x"})
    assert ppo_actor.PolicyModelActor is LoraSyncPolicyModelActor
    assert ray_pkg.create_vllm_engines is not original  # engines with vLLM's LoRA


def test_adapter_state_is_the_peft_adapter_and_vllm_ranks(tmp_path):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model

    from agentsearch.engines.openrlhf.lora_sync import adapter_state, vllm_lora_rank, write_adapter
    from agentsearch.models import load_model

    model, _ = load_model("tiny", seed=1)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8,
                                            target_modules=["q_proj", "down_proj"]))
    for n, p in peft.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 1e-4)  # a small update: the adapter carries it exactly
    folder = write_adapter(adapter_state(peft), tmp_path / "adapter")
    again, _ = load_model("tiny", seed=1)
    loaded = PeftModel.from_pretrained(again, str(folder))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, peft(ids).logits)
    assert (vllm_lora_rank(4), vllm_lora_rank(16), vllm_lora_rank(17)) == (8, 16, 32)


def test_launch_accepts_search_r1s_own_retrieval_server(tmp_path):
    """Search-R1's retrieval_server.py has no /health: the preflight used to refuse it."""
    from search_r1_stub import search_r1_server

    from agentsearch.engines.openrlhf.launch import preflight
    from agentsearch.retrievers import load_retriever, world_index

    with search_r1_server(load_retriever(world_index(seed=0, kind="bm25s"))) as (url, seen):
        preflight(_launch_cfg(tmp_path, f"train.env_kwargs.index={url}"))
    assert seen and set(seen[0]) == {"queries", "topk", "return_scores"}
