"""The retrieval server on 127.0.0.1 with the real client (and Search-R1's request shape)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import (
    Hit,
    RemoteRetriever,
    RetrieverError,
    load_retriever,
    serve_in_thread,
    world_index,
)


@pytest.fixture(scope="module")
def local():
    return load_retriever(world_index(seed=0, kind="bm25s"))


@pytest.fixture(scope="module")
def url(local):
    with serve_in_thread(local) as u:
        yield u


@pytest.fixture(scope="module")
def questions(world_path):
    return [q["question"] for q in read_jsonl(world_path / "dev.jsonl")]


def search_r1_passages(retrieval_result: list[dict]) -> str:
    """How Search-R1's generation.py turns one query's result into its observation text:
    title = first line of ``document.contents``, text = the remaining lines."""
    out = ""
    for i, item in enumerate(retrieval_result):
        lines = item["document"]["contents"].split("\n")
        out += f"Doc {i + 1}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n"
    return out


def test_search_r1_request_and_parsing(url, local, questions):
    requests = pytest.importorskip("requests")  # Search-R1's own HTTP client

    payload = {"queries": questions[:5], "topk": 3, "return_scores": True}
    answer = requests.post(url + "/retrieve", json=payload, timeout=10).json()
    assert set(answer) == {"result"} and len(answer["result"]) == 5
    expected = local.search(questions[:5], 3)
    for items, hits in zip(answer["result"], expected):
        assert [set(it) for it in items] == [{"document", "score"}] * len(hits)
        assert [it["document"] for it in items] == [
            {"id": h.doc_id, "contents": h.contents} for h in hits]
        assert [it["score"] for it in items] == pytest.approx([h.score for h in hits])
        text = search_r1_passages(items)
        assert (text.count("\n") == len(hits)
                and text.startswith(f'Doc 1(Title: "{hits[0].title}") '))


def test_without_scores_returns_bare_documents(url, questions):
    answer = httpx.post(url + "/retrieve", json={"queries": questions[:2], "topk": 2}).json()
    assert all(set(doc) == {"id", "contents"} for docs in answer["result"] for doc in docs)


def test_health(url):
    h = httpx.get(url + "/health").json()
    assert h["status"] == "ok" and h["kind"] == "bm25s" and h["num_docs"] > 2000
    assert h["limits"]["max_topk"] == 100


@pytest.mark.parametrize("body,status,words", [
    (b"not json at all", 400, "not valid JSON"),
    (b"[1, 2]", 422, "JSON object"),
    (b'{"queries": "one string"}', 422, "list of strings"),
    (b'{"queries": [1, 2]}', 422, "list of strings"),
    (b'{"queries": ["x"], "topk": 1000000}', 422, "cap of 100"),
    (b'{"queries": ["x"], "topk": 0}', 422, "positive integer"),
    (b'{"queries": ["x"], "topk": "3"}', 422, "positive integer"),
    (b'{"queries": ["x"], "return_scores": "yes"}', 422, "true or false"),
    (json.dumps({"queries": ["q " * 51_200]}).encode(), 413, "characters"),    # 100 KB query
    (json.dumps({"queries": ["q"] * 16_385}).encode(), 413, "--max-queries"),
])
def test_bad_requests_get_4xx_and_server_keeps_serving(url, body, status, words):
    r = httpx.post(url + "/retrieve", content=body, timeout=10)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]
    ok = httpx.post(url + "/retrieve", json={"queries": ["born"], "topk": 1})
    assert ok.status_code == 200 and len(ok.json()["result"][0]) == 1


def test_empty_queries_are_answered_not_rejected(url):
    r = httpx.post(url + "/retrieve", json={"queries": ["", "   ", "born"], "topk": 2,
                                            "return_scores": True})
    assert r.status_code == 200
    assert [len(x) for x in r.json()["result"]] == [0, 0, 2]
    assert httpx.post(url + "/retrieve", json={"queries": []}).json() == {"result": []}


def test_client_sync_and_async_match_local(url, local, questions):
    c = RemoteRetriever(url)
    assert c.search(questions[:20], 3) == local.search(questions[:20], 3)
    assert asyncio.run(c.asearch(questions[:3], 2)) == local.search(questions[:3], 2)
    c.close()


def test_client_micro_batches_concurrent_episodes(url, local, questions):
    async def main():
        async with RemoteRetriever(url, window_ms=20) as c:
            res = await asyncio.gather(*(c.asearch([q], 3) for q in questions[:64]))
            return res, c.stats["requests"]

    res, requests = asyncio.run(main())
    assert [r[0] for r in res] == local.search(questions[:64], 3)
    assert requests <= 4  # 64 tool calls, a handful of HTTP requests


def test_client_bad_input(url):
    c = RemoteRetriever(url, retries=0)
    with pytest.raises(ValueError, match="k must be"):
        c.search(["x"], k=10**6)
    assert c.search(["", "Stethith " * 12_000], 3)[0] == []  # 100 KB query: truncated, answered
    c.max_query_chars = 10**6  # a client that does not truncate: the server says why
    with pytest.raises(RetrieverError, match="refused.*characters"):
        c.search(["q " * 51_200], 3)
    c.close()


def test_client_cache(url, questions):
    c = RemoteRetriever(url, cache_size=2)
    first = c.search(questions[:2], 3)
    n = c.stats["requests"]
    assert c.search(questions[:2], 3) == first and c.stats["requests"] == n
    assert c.stats["cache_hits"] == 2
    c.search(questions[2:4], 3)  # evicts the first two
    c.search(questions[:1], 3)
    assert c.stats["requests"] == n + 2
    c.close()


def test_unreachable_server_raises_after_retries():
    with serve_in_thread(_EchoRetriever()) as u:
        pass  # the port is now closed
    c = RemoteRetriever(u, retries=2, backoff=0.01, connect_timeout=1)
    t = time.monotonic()
    with pytest.raises(RetrieverError, match="failed 3 times.*agentsearch serve"):
        asyncio.run(c.asearch(["x"], 1))
    with pytest.raises(RetrieverError, match="failed 3 times"):
        c.search(["x"], 1)
    assert time.monotonic() - t < 10 and c.stats["retries"] == 4


class _EchoRetriever:
    def search(self, queries, k=3):
        return [[Hit(q, f'"{q}"\n', 1.0)] for q in queries]

    async def asearch(self, queries, k=3):
        return self.search(queries, k)


_SLOW_SERVER = textwrap.dedent("""
    import asyncio, sys, uvicorn
    from agentsearch.retrievers import Hit, create_app

    class Slow:
        async def asearch(self, queries, k=3):
            await asyncio.sleep(30)
            return [[Hit("d", '"d"\\n', 1.0)] for _ in queries]

    uvicorn.run(create_app(Slow()), host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
""")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_server_killed_while_client_waits(tmp_path):
    port = _free_port()
    script = tmp_path / "slow_server.py"
    script.write_text(_SLOW_SERVER)
    proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "slow server did not start"
            time.sleep(0.2)

        async def main():
            c = RemoteRetriever(url, retries=2, backoff=0.05, timeout=20)
            task = asyncio.ensure_future(c.asearch(["who?"], 1))
            await asyncio.sleep(1.0)  # the request is now waiting on the server
            proc.send_signal(signal.SIGKILL)
            t = time.monotonic()
            with pytest.raises(RetrieverError, match="failed 3 times"):
                await asyncio.wait_for(task, timeout=15)
            await c.aclose()
            return time.monotonic() - t

        assert asyncio.run(main()) < 5  # a clear error soon after the kill, no hang
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_one_event_loop_per_run_opens_one_http_client_and_closes_it(url, httpx_clients):
    """Several rollouts on one ``EventLoop`` against the real server: the remote retriever
    opens ONE httpx.AsyncClient for the run, and closing the loop with the envs closes it."""
    from agentsearch.envs import SearchEnv
    from agentsearch.models import load_tokenizer
    from agentsearch.rollout import EventLoop, SamplingParams, ScriptedBackend, rollout
    from agentsearch.warmstart.search_oracle import world_oracle

    made = httpx_clients
    tasks, policy = world_oracle(split="dev")
    retriever = RemoteRetriever(url)
    envs = [SearchEnv(split="dev", retriever=retriever) for _ in range(4)]
    backend = ScriptedBackend(load_tokenizer("tiny"), policy)
    events = EventLoop()
    for step in range(3):
        eps, stats = rollout(envs, tasks[2 * step:2 * step + 2], backend,
                             SamplingParams(max_new_tokens=256), n_per_task=2, seed=step,
                             loop=events)
        assert stats.tool_calls >= 4 and stats.tool_errors == 0
        assert all(e.answer_correct for e in eps)
    assert len(made) == 1 and not made[0].is_closed
    events.close(envs)
    assert len(made) == 1 and made[0].is_closed and retriever._aclient is None
    with pytest.raises(RuntimeError, match="closed"):
        rollout(envs, tasks[:1], backend, SamplingParams(), loop=events)


# -- Search-R1-sized requests (issue 26) ------------------------------------------------------
def _serve_args(*flags: str):
    """``agentsearch serve`` arguments as the command line parses them (its defaults)."""
    from agentsearch.cli import build_parser

    return build_parser().parse_args(["serve", "--index", str(world_index(seed=0, kind="bm25s")),
                                      *flags])


def test_search_r1_turn_in_one_request_with_default_settings(local, world_path):
    """Search-R1's generation.py posts a whole turn (512 prompts x 5 = 2,560 queries) in ONE
    request; the old default cap (256) answered 413 and its trainer died on KeyError: 'result'."""
    from agentsearch.retrievers.server import app_from_args

    requests = pytest.importorskip("requests")  # Search-R1's own HTTP client
    queries = [q["question"] for q in read_jsonl(world_path / "train.jsonl")][:2560]
    assert len(set(queries)) == 2560
    app, _ = app_from_args(_serve_args())
    with serve_in_thread(app) as u:
        t = time.perf_counter()
        r = requests.post(u + "/retrieve",
                          json={"queries": queries, "topk": 3, "return_scores": True})
        seconds = time.perf_counter() - t
    assert r.status_code == 200, r.text[:300]
    result = r.json()["result"]
    expected = local.search(queries, 3)
    assert len(result) == 2560
    assert [[it["document"] for it in items] for items in result] == [
        [{"id": h.doc_id, "contents": h.contents} for h in hits] for hits in expected]
    assert [[it["score"] for it in items] for items in result] == [
        [h.score for h in hits] for hits in expected]
    print(f"2,560-query request: {seconds:.2f} s, {len(r.content) / 1e6:.1f} MB answer")


class _CountingRetriever:
    def __init__(self):
        self.calls = []

    async def asearch(self, queries, k=3):
        self.calls.append(len(queries))
        return [[Hit(q, f'"{q}"\n', 1.0)] for q in queries]


def test_a_large_request_is_searched_in_chunks():
    from agentsearch.retrievers.server import Limits, create_app

    inner = _CountingRetriever()
    queries = [f"q{i}" for i in range(2560)]
    with serve_in_thread(create_app(inner, Limits())) as u:
        r = httpx.post(u + "/retrieve", json={"queries": queries, "topk": 3, "return_scores": True},
                       timeout=30)
        limits = httpx.get(u + "/health").json()["limits"]
    assert r.status_code == 200 and [x[0]["document"]["id"] for x in r.json()["result"]] == queries
    assert inner.calls == [256] * 10  # the search's memory is that of 256 queries at a time
    assert limits["max_queries"] >= 2560 and limits["max_body_bytes"] == 64 << 20


def test_max_body_mb_flag_and_oversized_bodies_get_413():
    from agentsearch.retrievers.server import app_from_args

    app, _ = app_from_args(_serve_args("--max-body-mb", "1", "--search-batch", "64"))
    with serve_in_thread(app) as u:
        big = b'{"queries": ["' + b"x" * (2 << 20) + b'"]}'  # 2 MB
        r = httpx.post(u + "/retrieve", content=big, timeout=10)
        assert r.status_code == 413 and "--max-body-mb" in r.json()["detail"]
        ok = httpx.post(u + "/retrieve", json={"queries": ["born"] * 1000, "topk": 1}, timeout=30)
        assert ok.status_code == 200 and len(ok.json()["result"]) == 1000
        assert httpx.get(u + "/health").json()["limits"]["max_body_bytes"] == 1 << 20
