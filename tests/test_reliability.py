"""Infrastructure failures are not the policy's: a dead retrieval server pauses the episodes
that need it (never an error observation), a warning comes on the first error, and past the
outage budget the run checkpoints and stops, to resume once the server is back."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import pytest

from agentsearch.core.reliability import InfraError, OutageError, OutageTracker
from agentsearch.envs import SearchEnv
from agentsearch.retrievers import load_retriever, serve_in_thread, world_index


@pytest.fixture(scope="module")
def bm25s():
    return load_retriever(world_index(seed=0, kind="bm25s"))


def _closed_port(bm25s) -> int:
    with serve_in_thread(bm25s) as url:
        pass  # the port is free again now
    return int(url.rsplit(":", 1)[1])


def test_tracker_backs_off_warns_once_then_every_n_seconds_and_stops_past_budget(caplog):
    t = OutageTracker(budget_s=0.3, warn_every_s=0.15, backoff_s=0.1, backoff_max_s=0.4)
    err = InfraError("connection refused")
    with caplog.at_level(logging.WARNING, logger="agentsearch.reliability"):
        delays = [t.failed("search", err, a) for a in range(4)]
        assert [len(caplog.records)] == [1] and "infrastructure error: search failed" in caplog.text
        for d, base in zip(delays, [0.1, 0.2, 0.4, 0.4]):  # doubling, capped, +0-25% jitter
            assert base <= d <= 1.25 * base
        time.sleep(0.2)
        t.failed("search", err, 4)
        assert len(caplog.records) == 2 and "still failing" in caplog.records[1].message
        time.sleep(0.15)
        with pytest.raises(OutageError,
                           match="failed for 0 s, past reliability.outage_budget_s=0.3"):
            t.failed("search", err, 5)
        t.recovered()
        assert "recovered after" in caplog.records[-1].message
    assert t.errors == 6 and t.since is None and 0.35 <= t.outage_seconds() < 2
    t.recovered()  # no outage: nothing happens
    assert t.outage_seconds() < 2


def test_a_dead_server_pauses_the_episode_until_it_is_back(bm25s, quick_outages, caplog):
    port = _closed_port(bm25s)
    env = SearchEnv(split="dev", index=f"http://127.0.0.1:{port}?retries=0&timeout=5")
    env.reset(seed=0, options={"task": env.tasks[0]})
    errors0 = quick_outages.errors

    async def step_while_the_server_comes_back():
        step = asyncio.ensure_future(env.astep("<search>Stethith</search>"))
        await asyncio.sleep(0.8)
        assert not step.done()  # paused, not answered with an error
        with serve_in_thread(bm25s, port=port):
            out = await asyncio.wait_for(step, timeout=20)
            await env.aclose()
            return out

    with caplog.at_level(logging.WARNING, logger="agentsearch.reliability"):
        obs, reward, terminated, truncated, info = asyncio.run(step_while_the_server_comes_back())
    assert "Doc 1(Title:" in obs and not info["tool_error"] and info["error"] is None
    assert info["infra_errors"] >= 2 and quick_outages.errors - errors0 == info["infra_errors"]
    assert "infrastructure error" in caplog.text and "recovered after" in caplog.text


def test_past_the_budget_the_step_raises_instead_of_answering(bm25s, quick_outages):
    port = _closed_port(bm25s)
    quick_outages.configure(budget_s=0.3, backoff_s=0.05, backoff_max_s=0.1)
    env = SearchEnv(split="dev", index=f"http://127.0.0.1:{port}?retries=0&timeout=5")
    env.reset(seed=0, options={"task": env.tasks[0]})
    with pytest.raises(OutageError, match="past reliability.outage_budget_s=0.3"):
        env.step("<search>Stethith</search>")


def test_5xx_and_stalls_are_retried_and_never_reach_the_episode(bm25s, quick_outages, caplog):
    """Through the chaos proxy (30% of requests answered 5xx, 20% held 0.3 s), one request per
    search: every observation is exactly what the index answers directly; each injected error
    was counted as an infra error (retried by the client, or waited out by the env), the first
    one warned about."""
    from agentsearch.retrievers.chaos import create_chaos_app

    direct = SearchEnv(split="dev", retriever=bm25s)
    tasks = direct.tasks[:12]
    want = []
    for t in tasks:
        direct.reset(options={"task": t})
        want.append(direct.step(f"<search>{t['question']}</search>")[0])
    transient0, errors0 = quick_outages.transient_errors, quick_outages.errors
    with serve_in_thread(bm25s) as upstream, \
            serve_in_thread(create_chaos_app(upstream, error_rate=0.3, stall_rate=0.2, stall_s=0.3,
                                             seed=1)) as url:
        envs = [SearchEnv(split="dev", index=f"{url}?micro_batch=false") for _ in tasks]

        async def play():
            for env, t in zip(envs, tasks):
                env.reset(options={"task": t})
            out = await asyncio.gather(*(e.astep(f"<search>{t['question']}</search>")
                                         for e, t in zip(envs, tasks)))
            await envs[0].aclose()
            return out

        with caplog.at_level(logging.WARNING, logger="agentsearch.reliability"):
            got = asyncio.run(play())
        import httpx

        chaos = httpx.get(url + "/chaos").json()
    assert [obs for obs, *_ in got] == want
    assert not any(info["tool_error"] for *_, info in got)
    assert chaos["errors"] >= 2 and chaos["stalls"] >= 1
    seen = (quick_outages.transient_errors - transient0) + (quick_outages.errors - errors0)
    assert seen == chaos["errors"]
    # the first; then one per warn_every_s
    assert caplog.text.count("infrastructure error, retried") == 1


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_run_whose_server_dies_checkpoints_stops_and_resumes(bm25s, tmp_path, quick_outages):
    """`tiny-base` (a policy that searches) against a server on 127.0.0.1 that dies after
    step 1 (a 0.2 s latency per search keeps later steps from
    finishing first): the run stops within its outage budget with a checkpoint of the last
    whole step and exit code 3; started again, `--resume` finishes with every step logged once."""
    from test_trainer import SMALL

    from agentsearch.cli import main

    port = _closed_port(bm25s)
    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--out", str(run), *SMALL, "model=tiny-base", "steps=6",
            "checkpoint_every=10", "tool_latency.kind=fixed", "tool_latency.mean_s=0.2",
            f"env_kwargs.index=http://127.0.0.1:{port}?retries=0&timeout=5",
            "reliability.outage_budget_s=2"]
    stop = threading.Event()

    def server():  # up until step 1 is logged
        with serve_in_thread(bm25s, port=port):
            while not stop.is_set() and not (
                    (run / "metrics.jsonl").exists()
                    and (run / "metrics.jsonl").read_text().count("\n") >= 2):
                time.sleep(0.05)

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    time.sleep(0.5)
    try:
        assert main(args) == 3
    finally:
        stop.set()
        thread.join(timeout=30)
    logged = [r["step"] for r in _records(run)]
    assert logged == list(range(len(logged))) and 1 <= logged[-1] < 6
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[-1] == f"step-{logged[-1]:06d}"
    with serve_in_thread(bm25s, port=port):
        assert main(["train", "--resume", str(run)]) == 0
    assert [r["step"] for r in _records(run)] == [0, 1, 2, 3, 4, 5, 6]
