"""A retrieval service's failures are infrastructure errors, never the policy's: the client
retries every 5xx, 408 and a malformed answer (then ``RetrieverUnavailable``, an
``InfraError``), splits a batch the server finds too large (413), and the search tool turns an
in-process retriever's ``MemoryError``/``OSError`` into an ``InfraError``. Against a real
HTTP server on 127.0.0.1 that answers what each test scripts."""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentsearch.core.reliability import InfraError
from agentsearch.envs import SearchEnv
from agentsearch.envs.tools import SearchTool
from agentsearch.retrievers import Hit, RemoteRetriever, RetrieverError
from agentsearch.retrievers.base import RetrieverUnavailable

TASK = {"id": "t", "question": "Who?", "golden_answers": ["x"]}


def found(queries: list[str]) -> tuple[int, str]:
    """A Search-R1 answer: one hit per query, titled with the query."""
    items = [[{"document": {"id": f"d-{q}", "contents": f'"{q}"\ntext'}, "score": 1.0}]
             for q in queries]
    return 200, json.dumps({"result": items})


@contextmanager
def server(answer):
    """``(url, requests)``: a server whose ``answer(i, queries) -> (status, body)`` answers
    request ``i``; ``requests`` lists each request's queries."""
    requests: list[list[str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            queries = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["queries"]
            requests.append(queries)
            status, body = answer(len(requests) - 1, queries)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def _titles(hits: list[list[Hit]]) -> list[str]:
    return [h[0].title for h in hits]


@pytest.mark.parametrize("status", [408, 501, 505, 507, 520])
def test_every_5xx_and_408_is_retried_then_unavailable(status):
    failing_twice = lambda i, qs: (status, '{"detail": "x"}') if i < 2 else found(qs)  # noqa: E731
    with server(failing_twice) as (url, requests):
        with RemoteRetriever(url, retries=3, backoff=0.01) as client:
            assert _titles(client.search(["a"], 1)) == ["a"]
        assert len(requests) == 3
        with RemoteRetriever(url, retries=3, backoff=0.01) as client:
            assert _titles(asyncio.run(client.asearch(["b"], 1))) == ["b"]
    with server(lambda i, qs: (status, '{"detail": "x"}')) as (url, requests):
        with RemoteRetriever(url, retries=1, backoff=0.01) as client:
            with pytest.raises(RetrieverUnavailable, match=f"failed 2 times; last: HTTP {status}"):
                client.search(["a"], 1)


@pytest.mark.parametrize("body", ["<html>oops</html>", '{"result": "nope"}', '{"answer": []}',
                                  "null", '{"result": [[{"document": {}}]]}',
                                  '{"result": [[], []]}'])
def test_a_malformed_answer_is_retried_then_unavailable(body):
    bad_once = lambda i, qs: (200, body) if i == 0 else found(qs)  # noqa: E731
    with server(bad_once) as (url, requests):
        with RemoteRetriever(url, retries=1, backoff=0.01) as client:
            assert _titles(client.search(["a"], 1)) == ["a"] and len(requests) == 2
    with server(lambda i, qs: (200, body)) as (url, requests):
        with RemoteRetriever(url, retries=1, backoff=0.01) as client:
            with pytest.raises(RetrieverUnavailable, match="failed 2 times"):
                asyncio.run(client.asearch(["a"], 1))


def test_a_batch_too_large_for_the_server_is_split():
    """The server takes at most 2 queries a request: 7 queries (one sync call, then 7
    concurrent episodes micro-batched into one request) are all answered, in order."""
    def at_most_two(i, qs):
        return (413, '{"detail": "too many"}') if len(qs) > 2 else found(qs)

    queries = [f"q{i}" for i in range(7)]
    with server(at_most_two) as (url, requests):
        with RemoteRetriever(url, retries=0) as client:
            assert _titles(client.search(queries, 1)) == queries
            assert requests[0] == queries  # refused, then halves of halves:
            assert [len(r) for r in requests] == [7, 3, 1, 2, 4, 2, 2]
            assert client.stats["splits"] == 3

        async def episodes():
            async with RemoteRetriever(url, retries=0, window_ms=50) as c:
                return await asyncio.gather(*(c.asearch([q], 1) for q in queries))

        requests.clear()
        assert [_titles(h) for h in asyncio.run(episodes())] == [[q] for q in queries]
        assert requests[0] == queries  # one batch, split
    refused = lambda i, qs: (413, '{"detail": "query 0 has 9 characters"}')  # noqa: E731
    with server(refused) as (url, requests):  # one query the server refuses: its own error
        with RemoteRetriever(url, retries=0) as client:
            with pytest.raises(RetrieverError, match="refused.*9 characters") as e:
                client.search(["too long!"], 1)
            assert not isinstance(e.value, InfraError)


def test_an_episode_whose_search_meets_a_507_waits_instead_of_seeing_an_error(quick_outages):
    once = lambda i, qs: (507, '{"detail": "disk full"}') if i == 0 else found(qs)  # noqa: E731
    with server(once) as (url, requests):
        env = SearchEnv(index=f"{url}?retries=0&micro_batch=false", tasks=[TASK])
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("<search>Stethith</search>")
        asyncio.run(env.aclose())
    assert 'Doc 1(Title: "Stethith")' in obs and not info["tool_error"]
    assert info["infra_errors"] == 1 and len(requests) == 2


class Failing:
    """An in-process retriever whose first ``times`` searches raise ``error``."""

    def __init__(self, error: BaseException, times: int):
        self.error, self.times = error, times

    async def asearch(self, queries, k=3):
        if self.times:
            self.times -= 1
            raise self.error
        return [[Hit(f"d-{q}", f'"{q}"\ntext', 1.0)] for q in queries]


@pytest.mark.parametrize("error", [MemoryError(), OSError(5, "Input/output error"),
                                   ConnectionResetError(104, "Connection reset by peer")])
def test_an_in_process_retriever_failure_is_infra_not_an_observation(error, quick_outages):
    with pytest.raises(InfraError, match=type(error).__name__):
        asyncio.run(SearchTool(Failing(error, times=1))(query="q"))
    env = SearchEnv(retriever=Failing(error, times=2), tasks=[TASK])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<search>Stethith</search>")
    assert 'Doc 1(Title: "Stethith")' in obs and not info["tool_error"]
    assert info["infra_errors"] == 2
    # the policy's own errors stay error observations
    assert asyncio.run(SearchTool(Failing(error, times=0))(query="   ")).startswith("Empty query")
