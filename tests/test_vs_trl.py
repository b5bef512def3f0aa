"""TRL's side of the side-by-side (scripts/trl_peer.py, scripts/bench_vs_trl.py): the TRL
environment serves the env's own tool and schema, its reward is the env's, and a real TRL
GRPOTrainer step and agentsearch's rollout of the same turns see the same tokens and masks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import agentsearch
from agentsearch.trainer.setup import fastest_cpu_engine_dtype

ROOT = Path(__file__).resolve().parents[1]
KW = {"turn_format": "json", "topk": 2, "max_turns": 3, "split": "dev"}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


peer = _script("trl_peer")


def test_the_trl_tool_has_the_envs_schema_and_returns_its_observation():
    """transformers derives TRL's tool schema from ``SearchTaskEnv.search``: it must equal the
    env's ``search`` schema, and a call must return what the env's own tool turn shows."""
    from transformers.utils import get_json_schema

    env = agentsearch.make_env("agentsearch/WikiSearch-v0", **KW)
    wrapper = peer.SearchTaskEnv(agentsearch.make_env("agentsearch/WikiSearch-v0", **KW))
    assert get_json_schema(wrapper.search) == env.tool_schemas()[0]
    task = env.tasks[0]
    env.reset(options={"task": task})
    wrapper.reset(**peer.task_rows(env, [task])[0])
    query = str(task["question"])
    call = json.dumps({"name": "search", "arguments": {"query": query}})
    obs, *_ = env.step(f"<tool_call>\n{call}\n</tool_call><|im_end|>")
    out = wrapper.search(query)
    assert out.startswith("Doc 1(Title:") and f"<tool_response>\n{out}\n</tool_response>" in obs


def test_the_trl_reward_is_the_envs_reward_of_the_final_turn():
    env = agentsearch.make_env("agentsearch/WikiSearch-v0", **KW)
    task = env.tasks[0]
    wrappers = [peer.SearchTaskEnv(agentsearch.make_env("agentsearch/WikiSearch-v0", **KW))
                for _ in range(4)]
    for w in wrappers:
        w.reset(**peer.task_rows(env, [task])[0])
    gold = task["golden_answers"][0]
    completions = [
        [{"role": "assistant", "content": f"<answer> {gold} </answer>"}],
        [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]},
         {"role": "tool", "content": "Doc 1"},
         {"role": "assistant", "content": "<answer> not it </answer>"}],
        [{"role": "assistant", "content": "I think it is something."}],  # neither: malformed
        [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}],
    ]
    assert peer.answer_reward(completions, wrappers) == [1.0, 0.0, -0.1, 0.0]


def test_split_turns_and_first_difference_by_hand():
    bench = _script("bench_vs_trl")
    assert peer.split_turns([5, 6, 7, 8, 9, 10], [1, 1, 0, 0, 1, 1]) == [[5, 6], [9, 10]]
    assert peer.split_turns([1, 2], [1, 1]) == [[1, 2]]
    assert bench.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert bench.first_difference([1, 2, 3], [1, 4, 3]) == 1
    assert bench.first_difference([1, 2], [1, 2, 3]) == 2


@pytest.mark.slow
def test_trl_and_agentsearch_see_the_same_tokens_and_masks():
    """One real TRL GRPOTrainer step (1 prompt x 2, the kept warm start, LoRA) and agentsearch's
    rollout of TRL's sampled turns: the same first-prompt ids, conversation ids and loss mask."""
    pytest.importorskip("trl")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_vs_trl.py"), "check",
                          "--allow-dirty"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and line["diffs"] == [], (line, out.stderr[-2000:])
    assert line["with_tool_call"] >= 1 and line["turns"] >= 2 and line["tool_tokens"] > 0
    assert line["prompt_tokens"] > 200 and line["model_tokens"] > 0


def test_the_trl_callback_stops_after_the_first_eval_at_the_target(tmp_path):
    """The TRL arm is timed to the same target as agentsearch's ``eval.stop_at``: the callback
    evaluates every ``eval_every`` steps, logs the training seconds, and ends training after the
    first eval that reaches ``stop_at`` (transformers' own TrainerState and TrainerControl)."""
    from transformers import TrainerControl, TrainerState

    scores = {0: 0.5, 2: 0.7, 4: 0.9}
    s = {"eval_every": 2, "time_budget_s": 1e9, "stop_at": 0.88}
    cb = peer._eval_callback(tmp_path, s, lambda model, step: {"eval/mean_at_n": scores[step]})
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(None, state, control)
    stops = []
    for step in range(1, 5):
        state.global_step = step
        cb.on_step_end(None, state, control)
        cb.on_log(None, state, control, logs={"loss": 0.0})
        stops.append(control.should_training_stop)
    assert stops == [False, False, False, True]
    recs = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4]
    assert [r.get("eval/mean_at_n") for r in recs] == [0.5, None, 0.7, None, 0.9]
    assert all(r["time/train_cumulative"] >= 0 for r in recs[1:])


def test_kept_records_and_time_to_target_by_hand(tmp_path):
    """``keep`` copies a finished run's records (not an unfinished one's); ``summary`` reads
    the training seconds at the first eval at the target and the ratio of the arm means."""
    records = _script("vs_trl_records")
    runs, kept = tmp_path / "runs", tmp_path / "kept"
    evals = {"trl-seed0": [(0, 0.80), (400.0, 0.85), (800.0, 0.88)],
             "ours-best-seed0": [(0, 0.80), (100.0, 0.90)],
             "ours-best-seed1": [(0, 0.80), (150.0, 0.87), (300.0, 0.89)],
             "ours-hf-seed0": [(0, 0.80), (500.0, 0.86)]}  # not finished: not kept
    for name, rows in evals.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.jsonl").write_text("".join(
            json.dumps({"step": i, "time/train_cumulative": t, "eval/mean_at_n": em}) + "\n"
            for i, (t, em) in enumerate(rows)))
        (runs / name / "provenance.json").write_text("{}\n")
        if name != "ours-hf-seed0":
            (runs / name / "DONE").write_text("finished\n")
    out = records.keep(runs, kept, {"target": 0.88}, {"kind": "lognormal"})
    assert out["kept"] == ["ours-best-seed0", "ours-best-seed1", "trl-seed0"]
    assert json.loads((kept / "trl-seed0" / "settings.json").read_text()) == \
        {"target": 0.88, "latency": None}
    lines = records.summary(kept, 0.88, 64)
    by_run = {x["run"]: x for x in lines if x["bench"] == "vs_trl"}
    assert by_run["trl-seed0"]["seconds_to_target"] == 800.0
    assert by_run["ours-best-seed1"]["seconds_to_target"] == 300.0
    assert by_run["ours-best-seed1"]["final_dev_em"] == 0.89
    assert records.median_phases([{"time/step": 9.0, "time/generate": 4.0, "time/update": 3.0},
                                  {"time/step": 7.0, "time/generate": 2.0},
                                  {"time/step": 8.0, "time/generate": 3.0}]) == \
        {"generate": 3.0, "update": 3.0}
    ratio = next(x for x in lines if x["bench"] == "vs_trl_ratio")
    assert ratio["arm"] == "ours-best" and ratio["ratio_to_trl"] == (100.0 + 300.0) / 2 / 800.0


def test_summary_pairs_runs_on_one_cpu_kind_and_rates_tokens_by_hand(tmp_path):
    """A ratio pairs only runs whose provenance names the same CPU capability (an AVX512 run
    never against an AVX2 TRL run); generated tokens per second from agentsearch's
    ``tokens/generated`` and from TRL's mean model tokens per completion x rollouts."""
    records = _script("vs_trl_records")
    machine = "x86_64, 2 cores, AMD EPYC, torch 2.13.0+cpu {}, python 3.11.9"
    runs = {"trl-seed0": ("AVX2", {"trl/completions/mean_length": 50.0}, 800.0),
            "ours-best-seed0": ("AVX512", {"tokens/generated": 3200.0}, 100.0),
            "ours-hf-seed0": ("AVX2", {"tokens/generated": 3000.0}, 600.0),
            "ours-hf-lat-seed0": ("AVX2", {"tokens/generated": 3000.0}, 700.0)}
    for name, (cpu, tokens, t) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "provenance.json").write_text(
            json.dumps({"machine": machine.format(cpu)}))
        rows = [{"step": 0, "eval/mean_at_n": 0.8},
                {"step": 1, "time/step": 40.0, "time/generate": 16.0, **tokens},
                {"step": 2, "time/step": 40.0, "time/generate": 10.0, **tokens,
                 "time/train_cumulative": t, "eval/mean_at_n": 0.9}]
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "odd-seed0").mkdir()  # no records: no line
    lines = records.summary(tmp_path, 0.88, 64)
    by_run = {x["run"]: x for x in lines if x["bench"] == "vs_trl"}
    assert set(by_run) == set(runs)
    assert by_run["trl-seed0"]["cpu"] == "AVX2" and by_run["ours-best-seed0"]["cpu"] == "AVX512"
    assert by_run["trl-seed0"]["tokens_per_step_s"] == 50.0 * 64 / 40.0
    assert by_run["ours-hf-seed0"]["tokens_per_generate_s"] == (3000 / 16 + 3000 / 10) / 2
    assert (by_run["ours-hf-lat-seed0"]["arm"], by_run["ours-hf-lat-seed0"]["latency"]) == \
        ("ours-hf", True)
    ratios = [x for x in lines if x["bench"] == "vs_trl_ratio"]
    assert [(x["arm"], x["cpu"], x["latency"], x["ratio_to_trl"]) for x in ratios] == \
        [("ours-hf", "AVX2", False, 600.0 / 800.0)]
    # a TRL run that ended short of the target: its time is more than its training seconds
    (tmp_path / "trl-seed1").mkdir()
    (tmp_path / "trl-seed1" / "provenance.json").write_text(
        json.dumps({"machine": machine.format("AVX2")}))
    (tmp_path / "trl-seed1" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 0, "eval/mean_at_n": 0.8},
        {"step": 1, "time/step": 1000.0, "time/train_cumulative": 1000.0,
         "eval/mean_at_n": 0.85})))
    bounded = [x for x in records.summary(tmp_path, 0.88, 64) if x["bench"] == "vs_trl_ratio"]
    assert [(x["arm"], x["ratio_to_trl_at_most"], x["trl_short_of_target"]) for x in bounded] \
        == [("ours-hf", 600.0 / ((800.0 + 1000.0) / 2), 1)]
    stamped = {"sessions": [{"machine": machine.format("AVX2")}]}  # stamp_run's layout
    (tmp_path / "trl-seed0" / "provenance.json").write_text(json.dumps(stamped))
    assert records.cpu_kind(tmp_path / "trl-seed0") == "AVX2"
    stamped["sessions"].append({"machine": machine.format("AVX512")})  # resumed elsewhere
    (tmp_path / "trl-seed0" / "provenance.json").write_text(json.dumps(stamped))
    assert records.cpu_kind(tmp_path / "trl-seed0") == "mixed"
    (tmp_path / "trl-seed0" / "provenance.json").unlink()
    assert records.cpu_kind(tmp_path / "trl-seed0") == "unknown"
    table = records.markdown(lines).splitlines()
    assert table[0].startswith("| run | cpu | step-0 EM |") and len(table) == 2 + len(runs)
    assert "| trl-seed0 | AVX2 | 0.800 | 0.900 | 800 | 2 | 40.0 | 13.0 |" in table[-1]


@pytest.mark.parametrize("arm", ["ours-hf", "ours-best"])
@pytest.mark.parametrize("latency", [False, True])
def test_the_agentsearch_arms_resolve_to_the_shared_settings(arm, latency):
    """Each agentsearch arm's overrides resolve on the preset (validated) to ``SETTINGS``: the
    same group, turns, lr, clip, LoRA and target stop as TRL's, scored on the fp32 engine."""
    from agentsearch.core.config import apply_overrides
    from agentsearch.trainer.train_config import TrainConfig

    bench = _script("bench_vs_trl")
    s = bench.SETTINGS
    cfg = apply_overrides(TrainConfig, "smollm2-search", bench.arm_overrides(arm, 0, latency))
    assert (cfg.prompts_per_step, cfg.group_size, cfg.max_turns, cfg.lr, cfg.clip_low,
            cfg.clip_high, cfg.lora.r, cfg.lora.alpha) == (
        s["prompts"], s["group"], s["max_turns"], s["lr"], s["clip"], s["clip"],
        s["lora"]["r"], s["lora"]["alpha"])
    assert (cfg.eval.stop_at, cfg.eval.backend, cfg.eval.vllm_dtype) == (
        bench.TARGET, "vllm", "float32")
    assert cfg.generation.backend == ("hf" if arm == "ours-hf" else "vllm")
    if arm == "ours-best":  # the engine dtype fastest on this CPU
        assert cfg.generation.vllm_dtype == fastest_cpu_engine_dtype() in ("bfloat16", "float32")
    assert (cfg.tool_latency.kind != "none") == latency


def test_trl_step_phases_by_hand():
    """TRL's rollout parts timed as they run (wrapped methods; the tools' seconds from the
    env), one step split into agentsearch's phase names."""
    import time

    class Trainer:  # what time_phases wraps: the generation calls the tools and the rewards
        def _generate(self, x):
            time.sleep(0.02)
            return x

        def _calculate_rewards(self, x):
            return x

        def _generate_and_score_completions(self, x):
            return self._calculate_rewards(self._generate(x))

    clock: dict = {}
    trainer = Trainer()
    peer.time_phases(trainer, clock)
    assert trainer._generate_and_score_completions(7) == 7
    assert clock["rollout"] >= clock["generate"] >= 0.02 and "reward" in clock
    clock = {"generate": 6.0, "env": 1.5, "reward": 0.5, "rollout": 7.0}
    assert peer.step_phases(clock, 10.0) == {
        "time/step": 10.0, "time/generate": 4.5, "time/env": 1.5, "time/reward": 0.5,
        "time/logprobs": 0.5, "time/update": 3.0}


def test_the_registrys_target_and_rollouts_are_the_benchs():
    """``results_vs_trl`` restates the target and the rollouts per step (it must not import
    the bench): they must be ``bench_vs_trl``'s."""
    sys.path.insert(0, str(ROOT / "scripts"))
    bench, figures = _script("bench_vs_trl"), _script("results_vs_trl")
    assert figures.TARGET == bench.TARGET
    assert figures.ROLLOUTS == bench.SETTINGS["prompts"] * bench.SETTINGS["group"]
