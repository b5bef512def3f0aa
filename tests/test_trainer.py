"""The training loop end to end on CPU with a tiny model: it trains, logs every phase and
replay metric, resumes exactly after a kill, and fails clearly on bad input."""

import json
import math
from pathlib import Path

import pytest
import torch
from episode_log_helpers import replay_episodes_are_the_stored_rows

from agentsearch.core.config import ConfigError, apply_overrides
from agentsearch.trainer.loop import train
from agentsearch.trainer.timing import PHASES
from agentsearch.trainer.train_config import TrainConfig

SMALL = ["model=tiny-s", "steps=3", "prompts_per_step=2", "group_size=4", "max_turns=3",
         "max_seq_len=512", "generation.max_new_tokens=16", "eval.limit=4", "eval.every=0",
         "replay.k_rep=2", "replay.capacity=16", "replay.scan_chunk=2", "replay.tau=1e9",
         "sft.steps=0", "sft.pretrain_steps=0", "threads=1", "tensorboard=false",
         "checkpoint_every=2", "micro_batch_size=4", "lr=1e-3"]

ROOT = Path(__file__).resolve().parent.parent


def _cfg(*extra):
    return apply_overrides(TrainConfig, "tiny", SMALL + list(extra))


def _records(run):
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


# a short oracle warm start: a random tiny model never answers, so every group would have
# zero reward variance (and zero gradient); after it, rewards vary and GRPO has signal
WARM = ["sft.steps=100", "sft.episodes=128", "sft.batch_size=16", "sft.lr=1e-2"]


@pytest.mark.slow
def test_a_few_steps_train_and_log_every_phase(tmp_path):
    train(_cfg(*WARM), tmp_path, quiet=True)
    recs = _records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    assert "time/sft" in recs[0] and "sft/loss" in recs[0]
    for r in recs[1:]:
        for phase in PHASES + ("step", "train_cumulative", "eval", "checkpoint"):
            assert f"time/{phase}" in r, phase
        for key in ("replay/accept_rate", "replay/scan_depth", "replay/buffer_size",
                    "replay/ingress", "replay/ingress_drought", "groups/zero_variance_frac",
                    "rollout/tool_error_rate", "reward/answer", "reward/format", "tokens/generated",
                    "tokens/scored", "tokens/trained", "train/grad_norm", "rollout/logprob_gap",
                    "rollout/entropy"):
            assert key in r, key
        assert r["time/step"] > 0 and r["tokens/generated"] > 0
        assert 0.1 < r["sys/peak_rss_gb"] < 64  # this process's peak RSS, in GB
        assert r["rollout/logprob_gap"] < 1e-3  # HF engine vs trainer forward, fp32
    assert recs[-1]["time/train_cumulative"] > recs[1]["time/train_cumulative"]
    assert "eval/mean_at_n" in recs[0] and "eval/mean_at_n" in recs[-1]
    assert any(r["train/grad_norm"] > 0 and r["groups/zero_variance_frac"] < 1 for r in recs[1:])
    # the run folder names the code and the machine it ran on (a record's provenance)
    stamp = json.loads((tmp_path / "provenance.json").read_text())["sessions"][0]
    assert len(stamp["git"]) == 40 and "cores" in stamp["machine"] and "clean" in stamp
    # the GRPO steps moved the weights: step 3 differs from the step-2 checkpoint
    from safetensors.torch import load_file

    final = load_file(tmp_path / "final" / "model.safetensors")
    step2 = torch.load(tmp_path / "checkpoints" / "step-000002" / "model.pt", weights_only=True)
    changed = [k for k, v in step2.items() if k in final and not torch.equal(v, final[k])]
    assert len(changed) > len(step2) // 2
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "checkpoints" / "latest").exists()


def _register_parity_env():
    """A plug-in env for the tests: the search env, but an answer counts as correct when it
    has an even number of characters, so a barely trained model gets mixed outcomes."""
    import gymnasium

    from agentsearch.envs.rewards import AnswerScore
    from agentsearch.envs.search import SearchEnv

    class _Parity(SearchEnv):
        def score(self, answer, task):
            ok = len(answer.strip()) % 2 == 0
            return AnswerScore(correct=ok, score=float(ok))

    if "tests/ParitySearch-v0" not in gymnasium.registry:
        gymnasium.register("tests/ParitySearch-v0", entry_point=_Parity)


@pytest.mark.slow
def test_replayed_groups_reach_the_update(tmp_path):
    # mixed outcomes -> ingress; tau huge -> every stored group passes the gate
    _register_parity_env()
    train(_cfg("steps=4", "env=tests/ParitySearch-v0", *WARM), tmp_path, quiet=True)
    recs = _records(tmp_path)[1:]
    assert sum(r["replay/ingress"] for r in recs) > 0
    replayed = [r for r in recs if r["replay/accepted"] > 0]
    assert replayed, "groups stored before a step must be scanned and (tau=1e9) accepted"
    assert all(r["train/replayed_rows"] > 0 and r["replay/accept_rate"] == 1.0 for r in replayed)
    assert all(r["replay/accepted"] <= 2 for r in recs)  # k_rep


def test_nonfinite_loss_skips_the_step():
    from agentsearch.algorithms.optim import make_optimizer
    from agentsearch.algorithms.update import Row, policy_update
    from agentsearch.models import load_model

    cfg = _cfg()
    model, _ = load_model("tiny-s")
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = [Row(torch.tensor([1, 2, 3, 4]), torch.tensor([False, True, True, True]),
                torch.tensor([0.0, math.nan, -1.0, -1.0]), 1.0, False)]
    out = policy_update(model, opt, sched, rows, cfg)
    assert out["train/skipped"] == 1.0 and out["train/nonfinite"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    rows[0].old_lp = torch.tensor([0.0, -1.0, -1.0, -1.0])
    out = policy_update(model, opt, sched, rows, cfg)
    assert out["train/skipped"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("overrides,msg", [
    (["stepz=3"], "did you mean steps"),
    (["steps=ten"], "steps: expected an integer"),
    (["group_size=1"], "at least 2 responses"),
    (["replay=bogus"], "not one of"),
    (["loss=ppo2"], "not one of"),
])
def test_bad_config_is_a_clear_error(overrides, msg):
    with pytest.raises(ConfigError, match=msg):
        apply_overrides(TrainConfig, "tiny", overrides)


def test_unknown_preset_via_cli(capsys):
    from agentsearch.cli import main

    assert main(["train", "--preset", "nope", "--out", "/tmp/x"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_retriever_down_at_start_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _cfg(f"env_kwargs.index=http://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="search failed at start"):
        train(cfg, tmp_path, quiet=True)


def test_update_moves_logprobs_the_way_advantages_ask():
    from agentsearch.algorithms.optim import make_optimizer
    from agentsearch.algorithms.update import Row, pad_rows, policy_update
    from agentsearch.models import load_model
    from agentsearch.models.logprobs import token_logprobs

    cfg = _cfg("lr=3e-3")
    model, _ = load_model("tiny-s", seed=1)
    opt, sched = make_optimizer(model, cfg.lr, weight_decay=cfg.weight_decay,
                                warmup_steps=cfg.warmup_steps)
    good, bad = torch.tensor([5, 6, 7, 8, 9]), torch.tensor([5, 6, 17, 18, 19])
    mask = torch.tensor([False, False, True, True, True])

    def logp(ids):
        b = pad_rows([Row(ids, mask, torch.zeros(5), 0.0, False)], "cpu")
        with torch.no_grad():
            return float(token_logprobs(model, b["ids"], b["attn"])[0][mask].sum())

    before = logp(good), logp(bad)
    for _ in range(5):  # on-policy: old logprobs = current ones
        rows = [Row(ids, mask, torch.zeros(5), adv, False)
                for ids, adv in ((good, 1.0), (bad, -1.0))]
        for r in rows:
            b = pad_rows([r], "cpu")
            with torch.no_grad():
                r.old_lp = token_logprobs(model, b["ids"], b["attn"])[0]
        policy_update(model, opt, sched, rows, cfg)
    after = logp(good), logp(bad)
    assert after[0] > before[0] + 0.1 and after[1] < before[1] - 0.1


def test_lora_run_trains_only_the_adapter(tmp_path):
    cfg = _cfg("steps=2", "lora.enabled=true", "lora.r=4", "lora.alpha=8", "eval.limit=2")
    train(cfg, tmp_path, quiet=True)
    weights = torch.load(tmp_path / "checkpoints" / "step-000002" / "model.pt", weights_only=True)
    assert weights and all("lora_" in k for k in weights)
    assert (tmp_path / "final" / "config.json").exists()  # merged, loadable


def test_presets_load_and_every_field_is_documented():
    from agentsearch.core.config import reference

    for preset in ("tiny", "smollm2", "search-r1-qwen2.5-3b"):
        cfg = apply_overrides(TrainConfig, preset, [])
        assert cfg.replay.kind == "hdr"
    paper = apply_overrides(TrainConfig, "search-r1-qwen2.5-3b", [])
    assert (paper.prompts_per_step, paper.replay.k_rep, paper.replay.tau,
            paper.replay.capacity) == (128, 64, 1e-2, 512)
    undocumented = [key for key, _, doc in reference(TrainConfig) if not doc]
    assert undocumented == []
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_reference",
                                                  ROOT / "scripts" / "config_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = (ROOT / "docs" / "config.md").read_text().splitlines()
    start = page.index(gen.HEADER)
    assert page[start:start + len(gen.table())] == gen.table(), \
        "docs/config.md is stale: run python scripts/config_reference.py --write"


def test_run_uses_one_event_loop_one_retriever_client_closed_at_end(tmp_path, monkeypatch,
                                                                    httpx_clients):
    """Every rollout and eval of a run share one event loop: against a real retrieval server
    the run opens ONE httpx.AsyncClient (not one per step) and closes it at the end."""

    from agentsearch.retrievers import load_retriever, serve_in_thread, world_index

    made = httpx_clients
    _register_every_turn_searches_env()  # a random tiny model searches every step and eval
    with serve_in_thread(load_retriever(world_index(seed=0, kind="bm25s"))) as url:
        train(_cfg("steps=3", "eval.limit=2", "eval.every=1", "env=tests/EverySearch-v0",
                   f"env_kwargs.index={url}"), tmp_path, quiet=True)
    recs = _records(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    assert all(r["rollout/tool_calls"] > 0 and r["rollout/tool_errors"] == 0 for r in recs[1:])
    assert all(r["eval/searches"] > 0 for r in recs)
    assert len(made) == 1 and made[0].is_closed


def test_a_run_that_crashes_still_closes_its_retriever_client(tmp_path, monkeypatch, httpx_clients):
    """A failure mid-run (here: the update raises on step 2) propagates, and the run's event
    loop still closes the envs' retriever client on the way out."""
    import agentsearch.trainer.loop as loop_module
    from agentsearch.retrievers import load_retriever, serve_in_thread, world_index

    real_update, calls = loop_module.policy_update, []

    def failing_update(*args, **kwargs):  # fault injection around the real update
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        return real_update(*args, **kwargs)

    monkeypatch.setattr(loop_module, "policy_update", failing_update)
    _register_every_turn_searches_env()
    with serve_in_thread(load_retriever(world_index(seed=0, kind="bm25s"))) as url:
        with pytest.raises(RuntimeError, match="injected failure"):
            train(_cfg("steps=3", "eval.limit=2", "env=tests/EverySearch-v0",
                       f"env_kwargs.index={url}"), tmp_path, quiet=True)
    assert len(httpx_clients) == 1 and httpx_clients[0].is_closed


def _register_every_turn_searches_env():
    """The search env, but every turn that is not the last searches for its own text."""
    import gymnasium

    from agentsearch.envs.parsing import ToolCall, Turn
    from agentsearch.envs.search import SearchEnv

    class _EverySearch(SearchEnv):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.parser.parse = lambda action: Turn(
                calls=[ToolCall("search", {"query": action[:100] or "x"})])

    if "tests/EverySearch-v0" not in gymnasium.registry:
        gymnasium.register("tests/EverySearch-v0", entry_point=_EverySearch)


# ------------------------------------------------------------------ HDR's gate, end to end
@pytest.fixture
def recording_hdr(monkeypatch):
    """``replay=tests_recording_hdr``: the real HDR buffer (``HeadroomDriftBuffer``, headroom
    order, drift gate, registered through ``register_replay``), instrumented. Before each
    ``select`` it snapshots the candidates in cached-headroom order and recomputes each one's
    drift with ``policy_drift`` on logprobs from its own ``make_score_fn`` of the live model (one
    row per batch, unlike the loop's scorer); it records which groups the buffer scored (in
    order) and what ``select`` returned."""
    import agentsearch.trainer.start as start_mod  # the loop's scorer is built there
    from agentsearch.models.logprobs import make_score_fn
    from agentsearch.replay import (
        HeadroomDriftBuffer,
        policy_drift,
        register_replay,
        unregister_replay,
    )

    live, scans = {}, []
    real_make_score_fn = start_mod.make_score_fn

    def spy(model, **kwargs):  # the loop builds its scorer once, on the policy it trains
        live.update(model=model, temperature=kwargs.get("temperature", 1.0))
        return real_make_score_fn(model, **kwargs)

    monkeypatch.setattr(start_mod, "make_score_fn", spy)

    class RecordingHDR(HeadroomDriftBuffer):
        def select(self, score_fn, step):
            pool = [g for g, added in zip(self._groups, self._added) if added < step]
            heads = [g.cached_headroom for g in pool]
            assert all(h == h for h in heads), "a NaN cached headroom"
            order = sorted(pool, key=lambda g: -g.cached_headroom)  # stable: ties oldest first
            own = make_score_fn(live["model"], temperature=live["temperature"], max_batch_tokens=1)
            drift = [float(policy_drift(lp, g.gen_logprobs, g.action_mask, self.drift_kind))
                     for g, lp in zip(order, own(order) if order else [])]
            scored = []

            def recording_score_fn(groups):
                out = score_fn(groups)
                scored.extend((id(g), float(policy_drift(lp, g.gen_logprobs, g.action_mask,
                                                         self.drift_kind)))
                              for g, lp in zip(groups, out))
                return out

            sel = super().select(recording_score_fn, step)
            scans.append({"step": step, "order": [id(g) for g in order],
                          "headroom": sorted(heads, reverse=True), "drift": drift,
                          "scored": scored, "accepted": [id(g) for g in sel.accepted],
                          "scanned": sel.scanned, "stats": dict(sel.stats),
                          "groups": list(sel.accepted)})
            return sel

    register_replay("tests_recording_hdr",
                    lambda **kw: RecordingHDR(order="headroom", gate=True, name="hdr", **kw))
    yield scans
    unregister_replay("tests_recording_hdr")


@pytest.mark.slow
def test_hdr_gate_rejects_and_accepts_the_first_feasible_groups_by_headroom(tmp_path,
                                                                            recording_hdr):
    # mixed outcomes (parity env) fill the buffer. At lr=1e-4 one update moves a stored group's
    # drift to ~1e-5..1e-3 and older groups drift further, so a small tau=1e-4 sits inside that
    # range: the gate rejects some scanned groups and accepts others (at lr=1e-2 it rejects all)
    _register_parity_env()
    tau, k_rep, chunk = 1e-4, 2, 2
    cfg = _cfg("steps=5", "env=tests/ParitySearch-v0", *WARM, "lr=1e-4", "prompts_per_step=3",
               "replay=tests_recording_hdr", f"replay.tau={tau}", f"replay.k_rep={k_rep}",
               f"replay.scan_chunk={chunk}", "checkpoint_every=5")
    assert cfg.replay.kind == "tests_recording_hdr"
    train(cfg, tmp_path, quiet=True)
    recs = {r["step"]: r for r in _records(tmp_path)[1:]}
    scans = [s for s in recording_hdr if s["order"]]
    assert scans, "groups stored before a step must be scanned"
    for s in scans:
        order, drift = s["order"], s["drift"]
        # the buffer scored exactly the first `scanned` groups in cached-headroom order, and its
        # drifts are the ones recomputed independently on the same weights
        assert [gid for gid, _ in s["scored"]] == order[:s["scanned"]]
        for (_, d_buf), d_own in zip(s["scored"], drift):
            assert d_buf == pytest.approx(d_own, rel=1e-3, abs=1e-10)
        # accepted = the first k_rep groups in that order whose drift <= tau, in scan order
        feasible = [i for i, d in enumerate(drift) if d <= tau]
        assert s["accepted"] == [order[i] for i in feasible[:k_rep]]
        # the scan stops after the chunk in which the k_rep-th group passed
        depth = len(order) if len(feasible) < k_rep else \
            min(len(order), (feasible[k_rep - 1] // chunk + 1) * chunk)
        assert s["scanned"] == depth
        r = recs[s["step"]]
        assert r["replay/scan_depth"] == depth and r["replay/accepted"] == len(s["accepted"])
        assert r["replay/candidates"] == len(order)
        assert r["replay/accept_rate"] == pytest.approx(
            sum(d <= tau for d in drift[:depth]) / depth)
        if s["accepted"]:
            assert r["train/replayed_rows"] > 0  # and they reached the update
    # the gate really rejected scanned groups, some groups still passed it, and at least once
    # it passed over a higher-headroom group for a lower one (where headroom_only would differ)
    assert any(r["replay/scan_depth"] > 0 and r["replay/accept_rate"] < 1 for r in recs.values())
    assert any(s["accepted"] for s in scans)
    assert any(s["accepted"] and s["accepted"] != s["order"][:len(s["accepted"])] for s in scans)
    replay_episodes_are_the_stored_rows(tmp_path, scans)  # episodes.jsonl, replay_scan.jsonl



def test_a_time_budget_ends_the_run_at_the_step_that_spends_it(tmp_path):
    """``time_budget_s``: the step whose training seconds pass the budget is the last one,
    evaluated and checkpointed; a resume of the finished run trains nothing more."""
    from agentsearch.trainer.checkpoint import latest_checkpoint

    over = ["eval.every=0", "eval.limit=2", "checkpoint_every=100", "replay.kind=none"]
    train(_cfg("steps=1", *over), tmp_path, quiet=True)
    step1 = _records(tmp_path)[1]["time/train_cumulative"]
    budget = 2.5 * step1  # three steps or so, whatever this machine's speed
    run = tmp_path / "budget"
    train(_cfg("steps=40", *over, f"time_budget_s={budget}"), run, quiet=True)
    recs = _records(run)
    last = recs[-1]
    assert 1 < last["step"] < 40
    assert last["time/train_cumulative"] >= budget > recs[-2]["time/train_cumulative"]
    assert "eval/mean_at_n" in last and "eval/mean_at_n" not in recs[-2]
    assert latest_checkpoint(run).name == f"step-{last['step']:06d}"
    assert (run / "final" / "model.safetensors").exists()
    train(_cfg("steps=40", *over, f"time_budget_s={budget}"), run, resume=True, quiet=True)
    assert _records(run)[-1]["step"] == last["step"]
