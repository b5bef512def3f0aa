"""OpenRLHF's own ``PPOTrainer.fit`` running a launched run: checkpoints and resume.

What runs is what ``agentsearch openrlhf launch`` starts, minus the GPUs: the launcher writes
the run folder and command, OpenRLHF's parser reads it, our trainer is built by its own
``__init__`` (OpenRLHF's datasets and dataloaders on the prompt files) and OpenRLHF's
``fit`` drives it. Checkpoints are OpenRLHF's ``PolicyModelActor.save_checkpoint`` and
``DeepspeedStrategy.save_ckpt`` / ``load_ckpt`` on a real ``DeepSpeedEngine`` (on CPU: a
small linear layer, ZeRO 0), so the tag a resume loads is DeepSpeed's ``latest``; the replay
scan is OpenRLHF's ``Actor`` behind its own dispatch (``smoke.LocalActorGroup``).

Stand-ins, where a GPU would be: vLLM (``_generate_vllm`` draws the prompts with OpenRLHF's
``_collect_prompt_batch`` and hands out rows OpenRLHF converted from episodes our HF
backend played: ``test_openrlhf_driver.rig``) and the actor's DeepSpeed-on-CUDA update
(``fit`` reports a status).
"""

import copy
import importlib
import json
import os
import socket
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")
pytest.importorskip("deepspeed")

from test_openrlhf_driver import FRESH, K_REP, N, rig  # noqa: E402, F401

pytestmark = [pytest.mark.openrlhf, pytest.mark.slow]

FIT_STATUS = {"policy_loss": 0.5, "actor_grad_norm": 1.5, "actor_lr": 1e-4}


@pytest.fixture(scope="module")
def ds_engine():
    """A real ``DeepSpeedEngine`` on CPU (one process, gloo) for OpenRLHF's checkpoint code."""
    import deepspeed
    import torch

    ds_comm = importlib.import_module("deepspeed.comm.torch")  # (the package's `torch` is torch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp = pytest.MonkeyPatch()
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0",
                 "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        mp.setenv(k, v)
    mp.setattr(ds_comm, "build_shm_op", lambda: None)  # else CPU DeepSpeed builds a C++ op (1 min)
    model = torch.nn.Linear(4, 2)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={
        "train_batch_size": 1, "zero_optimization": {"stage": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}})
    yield engine
    mp.undo()


@pytest.fixture
def cpu_sync(monkeypatch):
    """OpenRLHF's checkpoint barrier also syncs CUDA; a CPU build of torch has none."""
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def policy_actor(engine, args):
    """OpenRLHF's ``PolicyModelActor`` (undecorated) around ``engine``, its checkpoint states
    loaded as its ``init_model_from_pretrained`` loads them."""
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    actor = PolicyModelActor.__ray_actor_class__.__new__(PolicyModelActor.__ray_actor_class__)
    actor.strategy = DeepspeedStrategy(zero_stage=0, args=args)
    actor.actor = SimpleNamespace(model=engine)
    actor.disable_ds_ckpt, actor.save_hf_ckpt = args.ckpt.disable_ds, args.ckpt.save_hf
    actor.checkpoint_states = {}
    path = os.path.join(args.ckpt.path, "_actor")
    if args.ckpt.load_enable and os.path.exists(path):
        _, actor.checkpoint_states = actor.strategy.load_ckpt(engine, path)
    return actor


def actor_group(model, policy):
    """The actor group: forwards (the replay scan) through OpenRLHF's dispatch
    (``LocalActorGroup``); ``append`` collects each step's rows; ``fit`` reports
    ``FIT_STATUS``; checkpoint methods are ``policy``'s (a ``PolicyModelActor``)."""
    import ray

    from agentsearch.engines.openrlhf.smoke import LocalActorGroup

    class Group(LocalActorGroup):
        def async_run_method_batch(self, method_name, **kw):
            if method_name != "append":
                return super().async_run_method_batch(method_name, **kw)
            self.appended.append(list(kw["experience"]))
            return [ray.put(None)]

        def async_run_method(self, method_name, **kw):
            self.methods.append(method_name)
            if method_name in ("fit", "broadcast_to_vllm"):
                return [ray.put(FIT_STATUS if method_name == "fit" else None)]
            return [ray.put(getattr(policy, method_name)(**kw))]

    group = Group(model)
    group.appended, group.methods = [], []
    return group


class Crash(Exception):
    pass


def rig_rollouts(rows, crash_at=None, reward=None):
    """``SamplesGenerator._generate_vllm`` without vLLM: draws the prompts as OpenRLHF does
    and returns FRESH x N of ``rows`` per step (the rig's two steps in turn; eval: N rows a
    prompt); raises ``Crash`` on training step ``crash_at``. ``reward``: every row's reward."""
    import torch
    from openrlhf.trainer.ppo_utils.samples_generator import _collect_prompt_batch

    calls = []

    def generate(dataloader_iter, num_prompts, dynamic_filtering, **kw):
        prompts, _, _, exhausted = _collect_prompt_batch(dataloader_iter, num_prompts)
        if not prompts:
            return [], 0, True
        training = num_prompts == FRESH
        if training:
            calls.append(1)
            if len(calls) == crash_at:
                raise Crash(f"killed in step {len(calls)}")
        lo = (len(calls) - 1) % 2 * FRESH * N if training else 0
        out = copy.deepcopy(rows[lo:lo + len(prompts) * N])
        for r in out if reward is not None else []:
            r.rewards = torch.full_like(r.rewards, reward)
        return out, len(prompts), exhausted

    return generate


def launched(tmp_path, *overrides):
    """``agentsearch openrlhf launch --dry-run`` of a small replay run in ``tmp_path/run``:
    OpenRLHF's parsed arguments, with our settings file attached as ``entry.py`` does."""
    from agentsearch.engines.openrlhf import launch

    run = tmp_path / "run"
    cfg = launch.load_config("openrlhf-tiny", [
        f"out={run}", "eval_questions=4", "colocate_all=false", "train.kl_coef=0",
        f"train.prompts_per_step={FRESH}", f"train.replay.k_rep={K_REP}", "train.replay.tau=1e9",
        f"train.group_size={N}", f"train.eval.n={N}", *overrides])
    args = launch.parse_openrlhf_args(launch.build_command(cfg, write=True)[5:])
    args.agentsearch = SimpleNamespace(**json.loads((run / "agentsearch.json").read_text()))
    return args


@contextmanager
def trainer_process():
    """The trainer's process is in no torch process group (``train_ppo_ray``'s driver strategy
    joins none); this test process is, for the DeepSpeed engine's checkpoints."""
    import torch.distributed as dist

    mp = pytest.MonkeyPatch()
    mp.setattr(dist, "is_initialized", lambda: False)
    try:
        yield
    finally:
        mp.undo()


def build_trainer(played, engine, args, crash_at=None, reward=None):
    """Our trainer as ``train_ppo_ray`` builds it (its own ``__init__``), over the stand-ins."""
    from openrlhf.utils import get_strategy

    from agentsearch.engines.openrlhf.ppo_trainer import AgentsearchPPOTrainer

    group = actor_group(played.actor, policy_actor(engine, args))
    with trainer_process():
        t = AgentsearchPPOTrainer(args.actor.model_name_or_path, get_strategy(args), group, None,
                                  None, None, None, do_sample=True, max_len=args.data.max_len,
                                  max_new_tokens=args.rollout.max_new_tokens,
                                  temperature=args.rollout.temperature, top_p=args.rollout.top_p)
    t.samples_generator._generate_vllm = rig_rollouts(played.rows, crash_at, reward)
    return t


def records(args):
    path = os.path.join(args.agentsearch.out, "metrics.jsonl")
    return [json.loads(x) for x in open(path).read().splitlines()]


def test_resume_when_the_best_checkpoint_is_the_latest(rig, tmp_path, ds_engine,  # noqa: F811
                                                       cpu_sync):
    """eval every 3 steps, checkpoints every 2: OpenRLHF saves ``best_global_step3`` at the
    step-3 evaluation and DeepSpeed makes it ``latest``. A run killed in step 4 resumes from
    it: the replay buffer and train time of step 3 come back (the resume used to stop: no
    replay file of step 3)."""
    args = launched(tmp_path, "train.steps=5", "train.eval.every=3", "train.checkpoint_every=2")
    t = build_trainer(rig, ds_engine, args, crash_at=4)
    with pytest.raises(Crash):
        t.fit()
    assert (tmp_path / "run" / "ckpt" / "_actor" / "latest").read_text() == "best_global_step3"
    buffer3 = [g.prompt_id for g in t.experience_maker.replay.groups]
    rows3, cumulative3 = set(t.experience_maker.rows), t.train_cumulative
    assert buffer3 and cumulative3 > 0

    # a relaunch restores step 3: the killed run's buffer, rows and train time
    check = build_trainer(rig, ds_engine, args)
    states = check.init_checkpoint_states()
    assert states["global_step"] == 3 and check.train_cumulative == pytest.approx(cumulative3)
    assert [g.prompt_id for g in check.experience_maker.replay.groups] == buffer3
    assert set(check.experience_maker.rows) == rows3

    again = build_trainer(rig, ds_engine, args)
    again.fit()  # resumes at step 3 and runs steps 4 and 5
    steps = [r for r in records(args) if "eval/mean_at_n" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert steps[3]["time/train_cumulative"] == pytest.approx(cumulative3 + steps[3]["time/step"])


def _eval_steps(recs):
    return [r["step"] for r in recs if "eval/mean_at_n" in r]


@pytest.mark.parametrize("steps, every, expected", [(3, 0, [0, 3]), (5, 2, [0, 2, 4, 5])])
def test_eval_schedule_is_the_local_trainers(rig, tmp_path, ds_engine, cpu_sync,  # noqa: F811
                                             steps, every, expected):
    """``eval.every`` means the same on both engines: step 0, every ``every`` steps and the
    last step (0: step 0 and the last). OpenRLHF's ``--eval.steps`` evaluated every
    ``every`` steps only, and never with 0."""
    from test_trainer import _cfg

    from agentsearch.trainer.loop import train

    train(_cfg(f"steps={steps}", f"eval.every={every}", "eval.limit=2", "eval.n=1",
               "checkpoint_every=100"), tmp_path / "local", quiet=True)
    local = _eval_steps(json.loads(x) for x in (tmp_path / "local" / "metrics.jsonl").open())
    args = launched(tmp_path, f"train.steps={steps}", f"train.eval.every={every}",
                    "train.checkpoint_every=100")
    build_trainer(rig, ds_engine, args).fit()
    assert _eval_steps(records(args)) == local == expected


def test_a_step_without_signal_takes_no_optimizer_step(rig, tmp_path, ds_engine,  # noqa: F811
                                                       cpu_sync):
    """Every reward equal and nothing replayed: every advantage is 0. As the local update
    (``algorithms/update.py``) the step takes no optimizer (or LR) step: OpenRLHF's actor
    ``fit`` steps Adam on a zero gradient, and its momentum and weight decay move the weights.
    The rows never reach the actors, and the step's record says it was skipped."""
    args = launched(tmp_path, "train.steps=1", "train.eval.every=0", "eval_questions=0")
    t = build_trainer(rig, ds_engine, args, reward=1.0)
    t.fit()
    group = t.actor_model_group
    assert "fit" not in group.methods and group.appended == []
    (rec,) = records(args)
    assert rec["train/skipped"] == 1.0 and rec["train/skipped_no_signal"] == 1.0
    assert rec["rollout/num_samples"] == FRESH * N and rec["replay/padding_rows"] == K_REP * N

    args = launched(tmp_path / "signal", "train.steps=1", "eval_questions=0")
    t = build_trainer(rig, ds_engine, args)  # the rig's own rewards: some groups have signal
    t.fit()
    group = t.actor_model_group
    assert group.methods.count("fit") == 1 and len(group.appended) == 1
    assert records(args)[-1]["train/skipped"] == 0.0
