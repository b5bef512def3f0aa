"""The OpenRLHF driver-side code no GPU test reaches: our trainer's step, logs and replay
checkpoints, the sample generator's fresh count, the entry point, a non-dry launch.

As OpenRLHF's own ``tests/test_ppo_trainer.py`` does, the trainer is built with ``__new__``
and stand-in actor groups; everything else is real: OpenRLHF's ``Actor`` (fp32 tiny-base)
behind OpenRLHF's own dispatch (``smoke.LocalActorGroup``), its experience and advantage
code, and rows made by OpenRLHF's conversion from episodes our HF backend played.
"""

import json
import math
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from agentsearch.models.tiny_base import BASE_DIR  # noqa: E402

pytestmark = pytest.mark.openrlhf

ENV_KWARGS = {"turn_format": "tags", "topk": 2, "chat_template": "none",
              "system_prompt": "Search, then answer. ", "question_types": ["single"]}
FRESH, K_REP, N = 3, 2, 4


@pytest.fixture(scope="module")
def rig():
    """Experience rows of 2 steps x FRESH prompts x N episodes, played by our HF backend on
    tiny-base and converted by OpenRLHF; an fp32 OpenRLHF Actor; parsed OpenRLHF args."""
    from agentsearch.engines.openrlhf.engine import ensure_local_ray
    from agentsearch.engines.openrlhf.executor import episode_response, task_label
    from agentsearch.engines.openrlhf.smoke import fp32_actor, openrlhf_args, to_experiences
    from agentsearch.envs.search import SearchEnv
    from agentsearch.models import load_base
    from agentsearch.rollout import SamplingParams, rollout
    from agentsearch.rollout.hf import HFBackend

    ensure_local_ray()
    model, tok = load_base()
    envs = [SearchEnv(**ENV_KWARGS) for _ in range(2 * FRESH * N)]
    tasks = envs[0].tasks[:2 * FRESH]
    eps, _ = rollout(envs, tasks, HFBackend(model, tok),
                     SamplingParams(32, temperature=1.0, seed=5), n_per_task=N, max_turns=4,
                     max_seq_len=768, seed=5)
    responses = [episode_response(ep, tasks[i // N]["question"],
                                  task_label("agentsearch/Search-v0", ENV_KWARGS, tasks[i // N],
                                             max_turns=4, max_new_tokens=32), logprobs=True)
                 for i, ep in enumerate(eps)]
    rows = to_experiences(responses)
    yield SimpleNamespace(rows=rows, tok=tok, actor=fp32_actor(BASE_DIR),
                          args=lambda ckpt: openrlhf_args(
                              BASE_DIR, batch=FRESH + K_REP, n=N,
                              extra=["--ckpt.path", str(ckpt), "--ckpt.save_steps", "1",
                                     "--ckpt.load_enable"]))
    import ray

    ray.shutdown()


class FakeActorGroup:
    """The trainer-facing actor group: ``append`` collects rows, ``fit`` reports a status,
    checkpoints are recorded; ``states`` is what ``get_checkpoint_states`` returns."""

    def __init__(self, states=None):
        self.appended, self.calls, self.states = [], [], states or {}

    def async_run_method_batch(self, method_name, **kw):
        import ray

        self.appended += list(kw["experience"])
        return [ray.put(None)]

    def async_run_method(self, method_name, **kw):
        import ray

        self.calls.append(method_name)
        out = {"fit": {"policy_loss": 0.5, "actor_grad_norm": 1.5, "actor_lr": 1e-4},
               "get_checkpoint_states": self.states}.get(method_name)
        return [ray.put(out)]


def make_trainer(rig, tmp_path, states=None, args=None):
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from agentsearch.engines.openrlhf.ppo_trainer import AgentsearchPPOTrainer
    from agentsearch.engines.openrlhf.smoke import make_hdr_maker

    args = args or rig.args(tmp_path / "ckpt")
    t = AgentsearchPPOTrainer.__new__(AgentsearchPPOTrainer)
    t.args, t.strategy, t.tokenizer = args, SimpleNamespace(args=args), rig.tok
    t.actor_model_group, t.critic_model_group, t.vllm_engines = FakeActorGroup(states), None, None
    t.kl_ctl = FixedKLController(0.0)
    t.experience_maker = make_hdr_maker(rig.actor, rig.tok, args, k_rep=K_REP, tau=math.inf)
    t.wandb_logger = t.tensorboard_logger = None
    t.best_eval_metric_key, t.best_eval_metric_value, t._latest_eval_metric_value = (
        "", -math.inf, None)
    t.settings, t.fresh_per_step, t.run_dir = None, FRESH, tmp_path
    t.train_cumulative, t.replaying = 0.0, True
    t.eval_dataloader, t.eval_every = None, 0
    t.prompts_dataloader = SimpleNamespace(dataset=list(range(7 * FRESH)))
    return t


def test_trainer_step_logs_fresh_stats_scan_time_and_fills_every_slot(rig, tmp_path):
    t = make_trainer(rig, tmp_path)
    assert t.get_max_steps() == 7  # steps by fresh prompts: the LR schedule ends with the run
    status, step = t.train_step(rig.rows[:FRESH * N], 0)
    assert step == 1 and t.actor_model_group.calls.count("fit") == 1  # one optimizer step
    # every slot
    assert sum(len(e.index) for e in t.actor_model_group.appended) == (FRESH + K_REP) * N
    assert status["rollout/num_samples"] == FRESH * N  # fresh rows only, no padding
    status2, _ = t.train_step(rig.rows[FRESH * N:], 1)
    k = int(status2["replay/accepted"])
    assert status2["replay/rows"] == k * N and status2["rollout/num_samples"] == FRESH * N
    mine = [float(r.rewards[0]) for r in rig.rows[FRESH * N:]]
    assert status2["rollout/reward_mean"] == pytest.approx(sum(mine) / len(mine))
    assert status2["timing/replay_scan"] > 0 and status2["timing/make_experience"] >= 0
    # fit() adds generation time; our log books every phase once, cumulatively
    status2["timing/generation"] = 2.0
    t.save_logs_and_checkpoints(2, status2, {"global_step": 2})
    rec = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    phases = ("time/generate", "time/logprobs", "time/replay_scan", "time/update", "time/sync")
    assert rec["step"] == 2 and rec["time/generate"] == 2.0 and rec["train/loss"] == 0.5
    assert rec["time/train_cumulative"] == pytest.approx(sum(rec[p] for p in phases if p in rec))
    assert rec["replay/accepted"] == k and "save_checkpoint" in t.actor_model_group.calls


def test_replay_checkpoint_per_step_tag_and_resume_refuses_a_mismatch(rig, tmp_path):
    from agentsearch.engines.openrlhf.ppo_trainer import replay_state_path

    t = make_trainer(rig, tmp_path)
    snapshot = {}
    for step, lo in ((1, 0), (2, FRESH * N)):
        status, _ = t.train_step(rig.rows[lo:lo + FRESH * N], step - 1)
        t.save_logs_and_checkpoints(step, status, {"global_step": step})
        snapshot[step] = [g.prompt_id for g in t.experience_maker.replay.groups]
    assert (replay_state_path(tmp_path / "ckpt", 1).exists()
            and replay_state_path(tmp_path / "ckpt", 2).exists())
    (tmp_path / "ckpt" / "_actor").mkdir(parents=True)
    # OpenRLHF restored step 1: our buffer of step 1 comes back, and the log is cut there
    again = make_trainer(rig, tmp_path,
                         states={"global_step": 1, "agentsearch_train_cumulative": 3.0})
    again.init_checkpoint_states()
    assert again.experience_maker.step == 1 and again.train_cumulative == 3.0
    assert ([json.loads(x)["step"]
             for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1])
    assert [g.prompt_id for g in again.experience_maker.replay.groups] == snapshot[1] != []
    assert set(again.experience_maker.rows) == set(snapshot[1])
    # a restored step with no replay file of its own: refused, not silently empty
    lost = make_trainer(rig, tmp_path, states={"global_step": 5})
    with pytest.raises(RuntimeError, match="global_step 5"):
        lost.init_checkpoint_states()


def test_sample_generator_plays_prompts_per_step_whatever_the_replay_accepts(rig):
    from agentsearch.engines.openrlhf.hdr import HDRSamplesGenerator

    gen = HDRSamplesGenerator.__new__(HDRSamplesGenerator)
    gen.args, gen.vllm_engines, gen.fresh = rig.args("unused"), [], FRESH
    gen.prompts_dataloader = [[None, [f"q{i}"], ["l"], [None]] for i in range(10)]
    asked = []

    def fake_generate(dataloader_iter, num_prompts, dynamic_filtering, **kw):
        asked.append((num_prompts, dynamic_filtering))
        got = [next(dataloader_iter, None) for _ in range(num_prompts)]
        return [g for g in got if g], len([g for g in got if g]), None in got

    gen._generate_vllm = fake_generate
    gen.args.vllm.enable_sleep = False
    _, _, consumed, exhausted = gen.generate_samples()
    # not slots (FRESH + K_REP)
    assert asked == [(FRESH, False)] and consumed == FRESH and not exhausted


def test_entry_main_hands_openrlhf_our_settings(tmp_path, monkeypatch):
    from agentsearch.engines.openrlhf import launch
    from agentsearch.engines.openrlhf.compat import import_openrlhf
    from agentsearch.engines.openrlhf.entry import main

    import_openrlhf()
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils as utils

    for mod, name in ((ppo_trainer, "PPOTrainer"), (ppo_actor, "PolicyModelActor"),
                      (utils, "get_strategy"), (ray_pkg, "create_vllm_engines")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    cfg = launch.load_config("openrlhf-tiny",
                             [f"out={tmp_path / 'run'}", "eval_questions=0", "train.steps=1"])
    cmd = launch.build_command(cfg, write=False)
    with launch._stop_before_ray(), pytest.raises(launch._Parsed) as got:
        main(cmd[3:])
    args = got.value.parsed
    assert args.agentsearch.fresh_per_step == 8 and args.agentsearch.replay["k_rep"] == 4
    from agentsearch.engines.openrlhf.ppo_trainer import AgentsearchPPOTrainerActor

    assert args.rollout.batch_size == 12 and ppo_trainer.PPOTrainer is AgentsearchPPOTrainerActor


def test_non_dry_launch_writes_the_run_and_runs_the_command(tmp_path, monkeypatch):
    import subprocess

    from agentsearch.engines.openrlhf import launch

    ran = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: ran.append(cmd) or 0)
    cfg = launch.load_config("openrlhf-tiny",
                             [f"out={tmp_path / 'run'}", "eval_questions=4", "train.steps=1",
                              "train.model=tiny", "train.init_from=null"])
    assert launch.launch(cfg) == 0 and len(ran) == 1
    model = tmp_path / "run" / "model"
    assert ((model / "config.json").exists()
            and ran[0][ran[0].index("--actor.model_name_or_path") + 1] == str(model.resolve()))
