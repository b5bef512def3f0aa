"""OpenRLHF's own ``PPOTrainer.fit`` loop running our trainer: checkpoints and resume.

Real: OpenRLHF's ``fit``, ``train_step`` and ``save_best_checkpoint``; its
``PolicyModelActor.save_checkpoint`` and ``DeepspeedStrategy.save_ckpt`` / ``load_ckpt`` on a
real ``DeepSpeedEngine`` (on CPU: a small linear layer, ZeRO 0), so which tag a resume loads
is DeepSpeed's ``latest``; OpenRLHF's ``Actor`` doing the replay scan; rows OpenRLHF converted
from episodes our HF backend played (``test_openrlhf_driver.rig``). Stand-ins, as in
``test_openrlhf_driver``: the actor group's dispatch (one in-process actor; ``fit`` reports a
status, as the policy update is DeepSpeed-on-CUDA code), the samples generator (it hands
out the rig's rows) and the prompt dataloader.
"""

import copy
import json
import os
import socket

import pytest

pytest.importorskip("ray")
pytest.importorskip("deepspeed")

from test_openrlhf_driver import FRESH, K_REP, N, make_trainer, rig  # noqa: E402, F401

from agentsearch.models.tiny_base import BASE_DIR  # noqa: E402

pytestmark = [pytest.mark.openrlhf, pytest.mark.slow]


@pytest.fixture(scope="module")
def ds_engine():
    """A real ``DeepSpeedEngine`` on CPU (one process, gloo) for OpenRLHF's checkpoint code."""
    import importlib

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


def policy_actor(engine, args):
    """OpenRLHF's ``PolicyModelActor`` (undecorated) around ``engine``, its checkpoint states
    loaded as ``init_model_from_pretrained`` loads them."""
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    actor = PolicyModelActor.__ray_actor_class__.__new__(PolicyModelActor.__ray_actor_class__)
    actor.strategy = DeepspeedStrategy(zero_stage=0, args=args)
    actor.actor = type("Model", (), {"model": engine})()
    actor.disable_ds_ckpt, actor.save_hf_ckpt = args.ckpt.disable_ds, args.ckpt.save_hf
    actor.checkpoint_states = {}
    path = os.path.join(args.ckpt.path, "_actor")
    if args.ckpt.load_enable and os.path.exists(path):
        _, actor.checkpoint_states = actor.strategy.load_ckpt(engine, path)
    return actor


class OneActorGroup:
    """The actor group over one in-process ``PolicyModelActor``: ``append`` collects rows,
    ``fit`` reports a status; checkpoint methods are the actor's own."""

    def __init__(self, actor):
        self.actor, self.appended, self.calls = actor, [], []

    def async_run_method_batch(self, method_name, **kw):
        import ray

        self.appended += list(kw["experience"])
        return [ray.put(None)]

    def async_run_method(self, method_name, **kw):
        import ray

        self.calls.append(method_name)
        if method_name == "fit":
            out = {"policy_loss": 0.5, "actor_grad_norm": 1.5, "actor_lr": 1e-4}
        elif method_name == "broadcast_to_vllm":
            out = None
        else:
            out = getattr(self.actor, method_name)(**kw)
        return [ray.put(out)]


class Crash(Exception):
    pass


class Prompts:
    """The prompt dataloader as ``fit`` sees it: a length, a state and the dataset."""

    def __init__(self, steps: int):
        self.dataset, self.consumed = list(range(steps * FRESH)), 0

    def __len__(self):
        return len(self.dataset)

    def state_dict(self):
        return {"consumed": self.consumed}

    def load_state_dict(self, state):
        self.consumed = state["consumed"]


class Samples:
    """``SamplesGenerator``'s face to ``fit``: FRESH prompts a step (the rig's rows, the two
    recorded steps in turn); raises ``Crash`` when asked for step ``crash_at`` (1-based)."""

    def __init__(self, rows, prompts: Prompts, crash_at: int | None = None):
        self.rows, self.prompts, self.crash_at = rows, prompts, crash_at

    def generate_samples(self, **kw):
        step = self.prompts.consumed // FRESH
        if step + 1 == self.crash_at:
            raise Crash(f"killed in step {step + 1}")
        lo = (step % 2) * FRESH * N
        self.prompts.consumed += FRESH
        return (copy.deepcopy(self.rows[lo:lo + FRESH * N]), None, FRESH,
                self.prompts.consumed >= len(self.prompts))

    def generate_eval_samples(self, **kw):
        return copy.deepcopy(self.rows[:FRESH * N])


def fit_trainer(played, tmp_path, engine, args, steps: int, crash_at=None):
    """Our trainer on OpenRLHF's ``fit`` path (``steps`` steps of prompts; ``played``: the rig)."""
    t = make_trainer(played, tmp_path, args=args)
    t.actor_model_group = OneActorGroup(policy_actor(engine, args))
    t.prompts_dataloader = Prompts(steps)
    t.samples_generator = Samples(played.rows, t.prompts_dataloader, crash_at)
    t.eval_dataloader = [(["src"], [r.prompts[0]], [None], [None])
                         for r in played.rows[:FRESH * N:N]]
    t.generate_kwargs = {}
    return t


def fit_args(ckpt, *extra):
    from agentsearch.engines.openrlhf.smoke import openrlhf_args

    return openrlhf_args(BASE_DIR, batch=FRESH + K_REP, n=N, extra=[
        "--ckpt.path", str(ckpt), "--ckpt.load_enable", *extra])


@pytest.fixture
def cpu_sync(monkeypatch):
    """OpenRLHF's checkpoint barrier also syncs CUDA; a CPU build of torch has none."""
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def test_resume_when_the_best_checkpoint_is_the_latest(rig, tmp_path, ds_engine,  # noqa: F811
                                                       cpu_sync):
    """eval every 3 steps, checkpoints every 2: OpenRLHF saves ``best_global_step3`` at the
    step-3 evaluation and DeepSpeed makes it ``latest``. A run killed in step 4 resumes from
    it: the replay buffer and train time of step 3 come back (the resume used to stop: no
    replay file of step 3)."""
    args = fit_args(tmp_path / "ckpt", "--ckpt.save_steps", "2", "--eval.steps", "3")
    t = fit_trainer(rig, tmp_path, ds_engine, args, steps=5, crash_at=4)
    with pytest.raises(Crash):
        t.fit()
    actor_dir = tmp_path / "ckpt" / "_actor"
    assert (actor_dir / "latest").read_text() == "best_global_step3"
    buffer3 = [g.prompt_id for g in t.experience_maker.replay.groups]
    rows3, cumulative3 = set(t.experience_maker.rows), t.train_cumulative
    assert buffer3 and cumulative3 > 0

    # a relaunch restores step 3: the killed run's buffer, rows and train time
    check = fit_trainer(rig, tmp_path, ds_engine, args, steps=5)
    states = check.init_checkpoint_states()
    assert states["global_step"] == 3 and check.train_cumulative == pytest.approx(cumulative3)
    assert [g.prompt_id for g in check.experience_maker.replay.groups] == buffer3
    assert set(check.experience_maker.rows) == rows3

    again = fit_trainer(rig, tmp_path, ds_engine, args, steps=5)
    again.fit()  # resumes at step 3 and runs steps 4 and 5
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/mean_at_n" not in r] == [1, 2, 3, 4, 5]
    step4 = next(r for r in records if r["step"] == 4)
    assert step4["time/train_cumulative"] == pytest.approx(cumulative3 + step4["time/step"])
