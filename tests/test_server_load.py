"""Admission control of ``agentsearch serve`` (issue 22): past its bound a request is shed
at once with 503 + Retry-After, the admitted ones are answered correctly, and the client
waits the Retry-After out. Real uvicorn on 127.0.0.1, the real bm25s world retriever made
slow by a wrapper (each search sleeps first), so a small bound is easy to fill."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from agentsearch.data import read_jsonl
from agentsearch.retrievers import (
    RemoteRetriever,
    RetrieverUnavailable,
    load_retriever,
    serve_in_thread,
    world_index,
)
from agentsearch.retrievers.admission import Admission, Overloaded
from agentsearch.retrievers.server import Limits, create_app


class SlowRetriever:
    """The real retriever, each search ``delay`` seconds slower (as a loaded server is)."""

    def __init__(self, inner, delay: float = 0.2):
        self.inner, self.delay, self.kind = inner, delay, f"slow-{inner.kind}"

    def search(self, queries, k=3):
        time.sleep(self.delay)
        return self.inner.search(queries, k)

    async def asearch(self, queries, k=3):
        return await asyncio.to_thread(self.search, queries, k)


@pytest.fixture(scope="module")
def local():
    return load_retriever(world_index(seed=0, kind="bm25s"))


@pytest.fixture(scope="module")
def questions(world_path):
    return [q["question"] for q in read_jsonl(world_path / "train.jsonl")][:64]


async def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies) + 8)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        return await asyncio.gather(*(c.post(url + "/retrieve", json=b) for b in bodies))


def test_past_the_bound_requests_get_503_with_retry_after_and_the_rest_are_answered(local,
                                                                                    questions):
    app = create_app(SlowRetriever(local), Limits(max_inflight=4))
    qs = questions[:32]
    with serve_in_thread(app) as url:
        answers = asyncio.run(_post_all(url,
                                        [{"queries": [q], "topk": 3, "return_scores": True}
                                         for q in qs]))
        health = httpx.get(url + "/health").json()
        after = httpx.post(url + "/retrieve",
                           json={"queries": qs[:2], "topk": 3, "return_scores": True})
        chunked = httpx.post(url + "/retrieve",
                             content=iter([b'{"queries": [', json.dumps(qs[0]).encode(), b"]}"]))
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 503} and codes.count(200) >= 4 and codes.count(503) >= 1, codes
    for q, r in zip(qs, answers):
        if r.status_code == 200:
            [items] = r.json()["result"]
            assert ([it["document"]["id"] for it in items]
                    == [h.doc_id for h in local.search([q], 3)[0]])
        else:
            assert int(r.headers["retry-after"]) >= 1
            assert "overloaded" in r.json()["detail"] and "--max-inflight" in r.json()["detail"]
    adm = health["admission"]
    assert adm["shed"]["requests"] == codes.count(503) == adm["shed_total"]
    assert adm["peak_inflight"] <= 4 and adm["inflight"] == 0 and adm["max_inflight"] == 4
    assert health["limits"]["max_inflight"] == 4
    # it answers normally afterwards
    assert after.status_code == 200 and len(after.json()["result"]) == 2
    assert chunked.status_code == 200 and len(chunked.json()["result"]) == 1  # no Content-Length


def test_a_storm_of_large_requests_is_bounded_in_queries(local, questions):
    limits = Limits(max_queries=64, max_inflight=100, max_inflight_queries=128)
    with serve_in_thread(create_app(SlowRetriever(local, 0.1), limits)) as url:
        answers = asyncio.run(_post_all(url, [{"queries": questions[:64], "topk": 1}] * 40))
        adm = httpx.get(url + "/health").json()["admission"]
    codes = [r.status_code for r in answers]
    assert codes.count(200) >= 2 and codes.count(503) >= 1 and set(codes) == {200, 503}
    assert any("--max-inflight-queries" in r.json()["detail"] for r in answers
               if r.status_code == 503)
    assert adm["peak_inflight_queries"] <= 128 and adm["inflight_queries"] == 0
    assert adm["shed"]["queries"] == codes.count(503)


def _occupy(url: str, query: str) -> threading.Thread:
    """A request that holds the server's one slot for the slow search's duration."""
    t = threading.Thread(target=httpx.post, args=(url + "/retrieve",),
                         kwargs={"json": {"queries": [query]}, "timeout": 30}, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while httpx.get(url + "/health").json()["admission"]["inflight"] == 0:
        assert time.monotonic() < deadline, "the occupying request never arrived"
        time.sleep(0.01)
    return t


def test_admission_comes_before_the_body_is_read(local, questions):
    """At the bound, a request that declared a 1 MB body but has sent none of it is
    answered 503 at once: the server never waited for (or buffered) the body."""
    with serve_in_thread(create_app(SlowRetriever(local, 1.0), Limits(max_inflight=1))) as url:
        busy = _occupy(url, questions[0])
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000000\r\n\r\n")
            head = s.recv(65536).decode()
        busy.join(10)
    assert head.startswith("HTTP/1.1 503") and "retry-after: 1" in head.lower()


def test_client_waits_out_retry_after_and_succeeds(local, questions):
    with serve_in_thread(create_app(SlowRetriever(local, 0.5), Limits(max_inflight=1))) as url:
        busy = _occupy(url, questions[0])
        c = RemoteRetriever(url, retries=3, backoff=0.01)
        t = time.monotonic()
        hits = c.search([questions[1]], 3)  # shed once (Retry-After: 1), then answered
        waited = time.monotonic() - t
        busy.join(10)
        c.close()
    assert hits == local.search([questions[1]], 3)
    assert c.stats["retry_after_waits"] >= 1 and c.stats["retry_after_s"] >= 1.0 and waited >= 1.0
    assert c.stats["retries"] == c.stats["retry_after_waits"]


def test_client_gives_up_as_an_infra_error_after_its_retries(local, questions):
    """Shedding never reaches the policy: after its retries the client raises
    ``RetrieverUnavailable`` (an InfraError the env waits out), not a search error."""
    with serve_in_thread(create_app(SlowRetriever(local, 1.0), Limits(max_inflight=1))) as url:
        busy = _occupy(url, questions[0])

        async def go():
            async with RemoteRetriever(url, retries=1, backoff=0.01, max_retry_after=0.05) as c:
                with pytest.raises(RetrieverUnavailable,
                                   match="failed 2 times.*HTTP 503.*overloaded"):
                    await c.asearch([questions[1]], 3)
                return c.stats

        stats = asyncio.run(go())
        busy.join(10)
    # capped by max_retry_after
    assert stats["retry_after_waits"] == 1 and stats["retry_after_s"] < 0.2


def test_retry_after_is_the_backlog_at_the_measured_service_rate():
    now = [0.0]
    a = Admission(max_requests=1000, max_queries=10_000, max_body_bytes=1 << 20,
                  clock=lambda: now[0])
    assert a.retry_after() == 1  # nothing measured yet
    for _ in range(4):  # 4 busy seconds serving 100 queries/s
        t = a.enter(100)
        a.admit(t, 100)
        now[0] += 1.0
        a.leave(t)
    assert a.service_rate() == pytest.approx(100.0)
    held = [a.enter(10) for _ in range(5)]
    for t in held:
        a.admit(t, 50)  # 250 queries in flight
    assert a.retry_after() == 3
    with pytest.raises(Overloaded) as e:
        a.admit(a.enter(10), 9_800)
    assert e.value.retry_after == 3 and "--max-inflight-queries" in e.value.detail
    assert a.snapshot()["shed"] == {"requests": 0, "queries": 1, "body_bytes": 0}


def test_limits_refuse_a_bound_that_no_largest_request_fits():
    with pytest.raises(ValueError, match="--max-inflight-queries"):
        Limits(max_queries=100, max_inflight_queries=50)
    assert (Limits().max_inflight_queries == 16384 + 512
            and Limits().max_inflight_body_bytes == 256 << 20)
    assert json.dumps(Limits().as_dict())


def test_default_bounds_take_256_clients_beside_a_search_r1_turn_and_shed_a_storm():
    lim = Limits()
    a = Admission(lim.max_inflight, lim.max_inflight_queries, lim.max_inflight_body_bytes)
    singles = [a.enter(80) for _ in range(256)]
    for t in singles:
        a.admit(t, 1)
    big = a.enter(1 << 20)
    a.admit(big, 16_384)  # Search-R1's largest request, while 256 single queries are in flight
    shed = 0
    for _ in range(4_000):
        try:
            a.admit(a.enter(80), 1)
        except Overloaded as e:
            shed += 1
            assert "--max-inflight" in e.detail
    assert a.requests == lim.max_inflight == 512 and shed == 4_000 - (512 - 257)
    assert a.peak_queries <= lim.max_inflight_queries


def test_a_chunked_body_is_charged_as_it_arrives():
    a = Admission(max_requests=10, max_queries=100, max_body_bytes=1000)
    held = a.enter(600)
    chunked = a.enter(64)
    a.grow_body(chunked, 300)
    assert a.body_bytes == 900
    with pytest.raises(Overloaded, match="--max-inflight-body-mb"):
        a.grow_body(chunked, 500)
    a.leave(chunked)
    a.leave(held)
    assert a.body_bytes == 0 and a.requests == 0 and a.queries == 0


def test_serve_flags_set_the_bounds():
    from agentsearch.cli import build_parser
    from agentsearch.retrievers.server import app_from_args

    args = build_parser().parse_args(["serve", "--index", str(world_index(seed=0, kind="bm25s")),
                                      "--max-inflight", "8", "--max-inflight-body-mb", "300"])
    app, _ = app_from_args(args)
    adm = app.state.admission
    assert (adm.max_requests, adm.max_queries, adm.max_body_bytes) == (8, 16_384 + 8, 300 << 20)
