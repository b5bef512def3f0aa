"""scripts/experiments/replay_suite.py: its run list (the budget rule), resumability, one real
tiny end-to-end run; and what it relies on: the runner helpers, the exposure-by-initial-
headroom replay metric, and retriever URL options (one request per search)."""

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentsearch.recipes.runner import run_finished, run_parallel, train_run
from agentsearch.replay import HeadroomDriftBuffer, ReplayGroup
from agentsearch.replay.stats import exposure_by_decile

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "experiments" / "replay_suite.py"


def load_suite():
    spec = importlib.util.spec_from_file_location("replay_suite", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["replay_suite"] = mod  # its dataclass looks its module up while being defined
    spec.loader.exec_module(mod)
    return mod


def suite_args(tmp_path, **kw):
    a = dict(out=str(tmp_path), seeds=[0, 1], methods="all", steps=None, parallel=2,
             threads_per_run=1, preset="tiny", latency=None, search_r1=False, port=0,
             metric="eval/mean_at_n", dry_run=True, overrides=[])
    a.update(kw)
    return argparse.Namespace(**a)


def test_run_list_follows_the_budget_rule(tmp_path):
    suite = load_suite()
    specs, budget = suite.resolve(suite_args(tmp_path))
    names = [s.name for s in specs]
    methods = ["on_policy", "on_policy_larger", "naive", "recency", "headroom_only", "drift_only",
               "hdr", "gspo_on_policy", "gspo_hdr", "cispo_on_policy", "cispo_hdr",
               "dapo_on_policy", "dapo_hdr"]
    assert names == [f"{m}-s{s}" for s in (0, 1) for m in methods]  # seed-major
    assert budget["fresh_groups_per_step"] == 8 and budget["replay_k_rep"] == 4
    assert budget["on_policy_larger_fresh_groups"] == 12 and budget["steps"] == 40
    by = {s.name: s.overrides for s in specs}
    for s in specs:  # every run: its seed, the latency profile, the same steps (the preset's)
        assert f"seed={s.seed}" in s.overrides and "tool_latency.kind=lognormal" in s.overrides
        assert ("tool_latency.mean_s=0.2" in s.overrides
                and not any(o.startswith("steps=") for o in s.overrides))
        assert s.run == tmp_path / s.name and s.preset == "tiny"
    assert "prompts_per_step=12" in by["on_policy_larger-s0"]
    assert not any(o.startswith("prompts_per_step") for o in by["hdr-s0"] + by["on_policy-s0"])
    assert {"replay.kind=none", "loss=gspo", "clip_low=3e-4",
            "clip_high=4e-4"} <= set(by["gspo_on_policy-s1"])
    assert {"replay.kind=hdr", "loss=cispo"} <= set(by["cispo_hdr-s0"])
    # DAPO: dynamic sampling, clip-higher, overlong shaping over 20% of 4 turns x 32 tokens
    assert {"dynamic_sampling=true", "overlong_buffer=26",
            "clip_high=0.28"} <= set(by["dapo_hdr-s0"])
    # the latency profile wraps the env's own search tool: no tool settings repeated
    assert not any("tool_kwargs" in o for o in by["hdr-s0"])


def test_methods_groups_steps_latency_and_overrides(tmp_path):
    suite = load_suite()
    specs, budget = suite.resolve(suite_args(tmp_path, methods="hdr,on_policy", seeds=[3], steps=2,
                                             latency="none", overrides=["eval.limit=20"]))
    assert [s.name for s in specs] == ["hdr-s3", "on_policy-s3"]
    assert budget["latency"] == "none" and budget["steps"] == 2
    assert "steps=2" in specs[0].overrides and "eval.limit=20" in specs[0].overrides
    assert not any("tool_latency" in o or "tool_kwargs" in o for o in specs[0].overrides)
    assert len(suite.resolve(suite_args(tmp_path, methods="losses"))[0]) == 12
    with pytest.raises(SystemExit, match="unknown method 'hdrr'"):
        suite.resolve(suite_args(tmp_path, methods="hdr,hdrr"))
    with pytest.raises(SystemExit, match="lr"):  # a bad override fails before anything runs
        suite.resolve(suite_args(tmp_path, overrides=["lr=fast"]))
    specs, budget = suite.resolve(suite_args(tmp_path, search_r1=True, seeds=[0]))
    assert [(s.name, s.preset) for s in specs] == [
        ("search_r1_equivalent-s0", "search-r1-equivalent"), ("full_stack-s0", "full-stack"),
        ("full_stack_async-s0", "full-stack")]
    assert (specs[0].run == tmp_path / "search_r1" / "search_r1_equivalent-s0"
            and budget["latency"] == "none")
    assert specs[2].overrides[-2:] == ["async.enabled=true", "async.max_staleness=1"]
    specs, _ = suite.resolve(suite_args(tmp_path, methods="async", seeds=[0]))
    assert [s.name for s in specs] == ["hdr-s0", "hdr_streaming-s0", "hdr_overlap-s0",
                                       "hdr_oversample-s0", "hdr_topup-s0"]
    assert ("async.max_staleness=1" in specs[2].overrides
            and "async.enabled=true" not in specs[0].overrides)
    assert ("async.oversample=2" in specs[3].overrides
            and "async.replay_topup=true" in specs[4].overrides)
    specs, _ = suite.resolve(suite_args(tmp_path, methods="hard", seeds=[0], preset="tiny-chains"))
    assert [s.name for s in specs] == [f"{m}-s0" for m in (
        "on_policy", "on_policy_larger", "naive", "headroom_only", "drift_only", "hdr",
        "dynamic_sampling", "greso", "success_replay")]
    by = {s.method: s.overrides for s in specs}
    assert {"replay.kind=none", "dynamic_sampling=true",
            "regenerate_rounds=4"} <= set(by["dynamic_sampling"])
    assert ({"replay.kind=none", "prompt_skip=2"} <= set(by["greso"])
            and "replay.kind=success_only" in by["success_replay"])
    specs, _ = suite.resolve(suite_args(tmp_path, methods="sweep", seeds=[0], preset="tiny-chains"))
    by = {s.method: s.overrides for s in specs}
    # one change at a time around hdr
    assert list(by) == ["hdr", "hdr_tau1e-3", "hdr_tau1e-1", "hdr_k2", "hdr_k8"]
    assert (by["hdr_tau1e-3"][-2:] == ["replay.kind=hdr", "replay.tau=1e-3"]
            and by["hdr_k8"][-1] == "replay.k_rep=8")


def test_dry_run_lists_runs_and_skips_finished_ones(tmp_path):
    done = tmp_path / "hdr-s0"
    (done / "final").mkdir(parents=True)
    (done / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "on_policy-s0").mkdir()
    (tmp_path / "on_policy-s0" / "config.yaml").write_text("seed: 0\n")
    res = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--seeds", "0", "1",
                          "--methods", "replay", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "agentsearch train" in ln]
    assert len(lines) == 14
    state = {ln.split()[0]: ln for ln in lines}
    assert ("finished (skip)" in state["hdr-s0"] and "resume" in state["on_policy-s0"]
            and " new " in state["hdr-s1"])
    assert (f"--preset tiny --out {tmp_path}/on_policy_larger-s1 seed=1"
            in state["on_policy_larger-s1"])
    assert json.loads(res.stdout.splitlines()[0].removeprefix("budget: "))[
        "fresh_groups_per_step"] == 8
    assert not (tmp_path / "suite.json").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_tiny_suite_end_to_end(tmp_path):
    """The real thing, tiny: 2 steps of hdr and on-policy, 20 dev questions, one seed."""
    # a test, not a record
    cmd = [sys.executable, str(SCRIPT), "--steps", "2", "--seeds", "0", "--methods",
           "hdr,on_policy", "--out", str(tmp_path), "--allow-dirty", "eval.limit=20",
           "eval.every=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["suite"] == "replay" and summary["failed"] == []
    assert set(summary["methods"]) == {"hdr", "on_policy"}
    # the summary's numbers, recomputed from the runs' own metrics.jsonl
    evals = {m: [r for r in map(json.loads,
                                (tmp_path / f"{m}-s0" / "metrics.jsonl").read_text().splitlines())
                 if "eval/mean_at_n" in r] for m in ("hdr", "on_policy")}
    target = evals["on_policy"][-1]["eval/mean_at_n"]  # no on_policy_larger: the on-policy final
    assert summary["target"]["method"] == "on_policy" and summary["budget"]["steps"] == 2
    assert summary["target"]["score"] == pytest.approx(target)
    assert summary["target"]["baseline_train_s"] == pytest.approx(
        evals["on_policy"][-1]["time/train_cumulative"])
    for name, m in summary["methods"].items():
        last = evals[name][-1]
        assert ([r["step"] for r in evals[name]] == [0, 1, 2]
                and {r["eval/questions"] for r in evals[name]} == {20})
        assert m["seeds"] == 1 and m["final_dev_em_std"] == 0.0
        assert m["final_dev_em_mean"] == pytest.approx(last["eval/mean_at_n"], abs=1e-4)
        assert m["train_s_mean"] == pytest.approx(last["time/train_cumulative"], abs=1e-4)
        first = next((r["time/train_cumulative"] for r in evals[name]
                      if r["eval/mean_at_n"] >= target - 1e-12), None)
        assert m["reached_target"] == ("1/1" if first is not None else "0/1")
        ratio = None if first is None else first / summary["target"]["baseline_train_s"]
        assert m["time_to_target_ratio"] == (None if ratio is None
                                             else pytest.approx(ratio, abs=1e-4))
    assert summary["methods"]["on_policy"]["reached_target"] == "1/1"  # its own final reaches it
    for f in ("pareto.png", "pareto.md", "pareto_time_to_target.csv", "pareto_replay.png",
              "pareto_time.csv"):
        assert (tmp_path / "analysis" / f).exists(), f
    assert run_finished(tmp_path / "hdr-s0") and (tmp_path / "hdr-s0" / "train.log").exists()
    stamps = json.loads((tmp_path / "hdr-s0" / "provenance.json").read_text())["sessions"]
    assert (len(stamps) == 1 and stamps[0]["git"] == summary["git"]
            and "cores" in stamps[0]["machine"])
    recs = [json.loads(line)
            for line in (tmp_path / "hdr-s0" / "metrics.jsonl").read_text().splitlines()]
    assert recs[0]["eval/mean_at_n"] > 0  # the base answers some questions: the env kept topk 2
    # nothing stored before step 1
    assert recs[1]["replay/candidates"] == 0 and recs[1]["replay/accepted"] == 0
    # step 2 scans what step 1 stored
    assert recs[2]["replay/candidates"] == recs[1]["replay/ingress"]
    assert recs[2]["replay/buffer_size"] == recs[1]["replay/ingress"] + recs[2]["replay/ingress"]
    # resumable: a second call trains nothing and reports the same numbers
    res2 = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert res2.returncode == 0 and res2.stderr.count("finished before; skipped") == 2
    assert json.loads(res2.stdout.strip().splitlines()[-1])["methods"] == summary["methods"]


# ------------------------------------------------------------ records: a clean tree or nothing
def _checkout(tmp_path: Path) -> Path:
    """The package and the suite scripts, committed in a fresh git repository (no model assets:
    nothing here trains)."""
    root = tmp_path / "repo"
    skip = shutil.ignore_patterns("assets", "__pycache__")
    shutil.copytree(ROOT / "agentsearch", root / "agentsearch", ignore=skip)
    shutil.copytree(ROOT / "scripts" / "experiments", root / "scripts" / "experiments", ignore=skip)
    shutil.copy(ROOT / "scripts" / "bench_rollout.py", root / "scripts" / "bench_rollout.py")
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


@pytest.mark.slow
def test_suites_refuse_a_dirty_tree_and_stamp_what_they_write(tmp_path):
    root = _checkout(tmp_path)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                         text=True).stdout.strip()
    # the copy's package, not ours
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    held = tmp_path / "runs" / "lat-0"
    held.mkdir(parents=True)
    (held / "HOLD").touch()  # compare writes its suite.json and starts no run
    compare = [sys.executable, str(root / "scripts/experiments/hard_world.py"), "compare", "--out",
               str(tmp_path / "runs"), "--steps", "2", "--lr", "1e-3", "--latency", "none",
               "--methods", "hdr", "--key", "", "--to", str(tmp_path / "archive")]
    suite = [sys.executable, str(root / "scripts/experiments/replay_suite.py"), "--out",
             str(tmp_path / "rs"), "--methods", "hdr", "--seeds", "0", "--steps", "1"]

    def run(cmd):
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    res = run(compare)
    assert res.returncode == 0, res.stderr[-2000:]
    stamp = json.loads((held / "suite.json").read_text())["invocations"][-1]["provenance"]
    assert stamp["git"] == rev and stamp["clean"] and stamp["citable"]
    edited = root / "agentsearch" / "analysis" / "pareto.py"
    edited.write_text(edited.read_text() + "# an uncommitted edit\n")
    bench = [sys.executable, str(root / "scripts/bench_rollout.py"), "--backends", "hf",
             "--prompts", "1"]
    for cmd in (compare, suite, bench):
        res = run(cmd)
        assert res.returncode == 1 and "refusing to write records" in res.stderr, res.stderr[-2000:]
        assert "agentsearch/analysis/pareto.py" in res.stderr
    assert not (tmp_path / "rs").exists()  # refused before anything was written
    assert len(json.loads((held / "suite.json").read_text())["invocations"]) == 1
    # development: it runs, and says its records are not citable
    res = run([*compare, "--allow-dirty"])
    assert res.returncode == 0, res.stderr[-2000:]
    stamps = json.loads((held / "suite.json").read_text())["invocations"]
    # the first entry is kept
    assert len(stamps) == 2 and stamps[-1]["provenance"]["citable"] is False


def test_every_record_writing_script_checks_the_tree():
    """Every suite runner and benchmark with a command line starts with ``require_clean`` and
    offers ``--allow-dirty`` (bench_servers.py is a module of bench_retrieval.py)."""
    scripts = [*sorted((ROOT / "scripts").glob("bench_*.py")),
               ROOT / "scripts/experiments/replay_suite.py",
               ROOT / "scripts/experiments/hard_world.py"]
    for path in scripts:
        text = path.read_text()
        if "def main(" not in text:
            continue
        assert "require_clean(" in text and "--allow-dirty" in text, path.name


def test_provenance_outside_a_checkout_is_not_citable(tmp_path):
    from agentsearch.core.provenance import DirtyTree, require_clean, run_provenance, stamp_run

    with pytest.raises(DirtyTree, match="not a git checkout"):
        require_clean("x", root=tmp_path)
    assert require_clean("x", allow_dirty=True, root=tmp_path)["citable"] is False
    assert run_provenance(tmp_path)["citable"] is None  # no stamp: revision not recorded
    stamp_run(tmp_path / "run", root=tmp_path)
    stamp_run(tmp_path / "run", root=tmp_path)  # a resume adds a session
    assert run_provenance(tmp_path / "run") == {
        "git": ["unknown"], "citable": False,
        "machines": [run_provenance(tmp_path / "run")["machines"][0]]}


# ------------------------------------------------------------ runner helpers
def test_run_parallel_keeps_order_and_exceptions():
    def f(x):
        if x == 2:
            raise ValueError("boom")
        return x * 10

    out = run_parallel(f, [1, 2, 3], parallel=2)
    assert out[0] == 10 and out[2] == 30 and isinstance(out[1], ValueError)


def test_train_run_skips_finished_runs(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    assert train_run(tmp_path, "no-such-preset", ["bad"]) is False  # nothing is started


# ------------------------------------------------------------ replay: exposure by initial headroom
def test_exposure_by_decile_hand_worked():
    assert exposure_by_decile([(i / 10, i, 1) for i in range(10)]) == [float(i) for i in range(10)]
    assert exposure_by_decile([(float(i), i, 1) for i in range(20)]) == [2 * d + 0.5
                                                                         for d in range(10)]
    # 20 groups in 3 triples straddling the cuts (width 2): 5 at h=.1 replayed twice, 10 at
    # h=.5 never, 5 at h=.9 four times -> decile 2 = (1 * 2 + 1 * 0) / 2, decile 7 = (0 + 4) / 2
    got = exposure_by_decile([(0.9, 4, 5), (0.1, 2, 5), (0.5, 0, 10)])
    assert got == pytest.approx([2, 2, 1, 0, 0, 0, 0, 2, 4, 4])
    assert exposure_by_decile([(0.5, 1, 9)]) == []


def _group(pid, p, step):
    n, t = 2, 3
    return ReplayGroup(prompt_id=pid, token_ids=torch.zeros(n, t, dtype=torch.long),
                       action_mask=torch.ones(n, t, dtype=torch.bool),
                       gen_logprobs=torch.full((n, t), math.log(p)),
                       advantages=torch.tensor([1.0, 1.0]),
                       rewards=torch.tensor([1.0, 0.0]), answer_correct=None, born_step=step)


def test_buffer_logs_exposure_by_initial_headroom_through_eviction_and_resume():
    # headroom-only order, no gate: the highest cached headroom (lowest p) is replayed each step
    buf = HeadroomDriftBuffer(capacity=12, k_rep=1, tau=math.inf, gate=False, order="headroom")
    buf.add([_group(i, 0.05 + 0.09 * i, 0) for i in range(10)], 0)   # initial headroom 0.95 .. 0.14
    assert "replay/exposure_h0_decile_0" in buf.metrics()
    for step in (1, 2, 3):
        buf.select(lambda gs: [g.gen_logprobs for g in gs], step)
    m = buf.metrics()
    assert (m["replay/exposure_h0_decile_9"] == 3.0
            and sum(m[f"replay/exposure_h0_decile_{d}"] for d in range(9)) == 0)
    # evicts the 3 oldest (replayed one among them)
    buf.add([_group(100 + i, 0.5, 4) for i in range(5)], 4)
    state = buf.state_dict()
    assert [h for h, c, n in state["stats"]["evicted_by_h0"] if c == 3] == [0.95]
    fresh = HeadroomDriftBuffer(capacity=12, k_rep=1, tau=math.inf, gate=False, order="headroom")
    fresh.load_state_dict(state)
    assert {k: v for k, v in fresh.metrics().items() if "decile" in k} == \
        {k: v for k, v in buf.metrics().items() if "decile" in k}
    # the top decile (2 of 15 groups, straddling) holds the 3 replays of the h0=0.95 group
    assert buf.metrics()["replay/exposure_h0_decile_9"] == pytest.approx(3 / 1.5)


# ------------------------------------------------------------ retriever URL options
def test_url_options_make_one_request_per_search():
    from agentsearch.retrievers import load_retriever
    from agentsearch.retrievers.retrieve_protocol import split_url_options

    assert split_url_options("http://h:1/retrieve?micro_batch=false&window_ms=2") == (
        "http://h:1/retrieve", {"micro_batch": False, "window_ms": 2.0})
    r = load_retriever("http://127.0.0.1:9?micro_batch=0&cache_size=5")
    assert r.url == "http://127.0.0.1:9/retrieve" and r.micro_batch is False and r.cache_size == 5
    assert load_retriever("http://127.0.0.1:9").micro_batch is True
    with pytest.raises(ValueError, match="unknown; allowed"):
        split_url_options("http://h:1?microbatch=false")
    with pytest.raises(ValueError, match="expected true or false"):
        split_url_options("http://h:1?micro_batch=maybe")


def test_emit_records_prints_each_line_and_appends_to_the_record(tmp_path, capsys):
    from agentsearch.core.provenance import emit_records

    out = tmp_path / "sub" / "bench.jsonl"
    emit_records([{"a": 1}, {"b": 2.5}], out)
    emit_records([{"c": "x"}], out)
    emit_records([{"d": None}])
    assert capsys.readouterr().out.splitlines() == ['{"a": 1}', '{"b": 2.5}', '{"c": "x"}',
                                                    '{"d": null}']
    assert out.read_text().splitlines() == ['{"a": 1}', '{"b": 2.5}', '{"c": "x"}']
