"""``probe_service``: is a retrieval service usable? Ours answers ``GET /health``; Search-R1's
``retrieval_server.py`` has no ``/health`` (404), so the probe asks one tiny search instead."""

from __future__ import annotations

import pytest
from search_r1_stub import search_r1_server

from agentsearch.retrievers import (
    RemoteRetriever,
    RetrieverError,
    load_retriever,
    probe_service,
    serve_in_thread,
    world_index,
)
from agentsearch.retrievers.base import Hit

DOCS = [{"id": "0", "contents": '"Aaron"\nAaron is a prophet.'},
        {"id": "1", "contents": '"Abel"\nAbel is a shepherd.'}]


class _Docs:
    """Two fixed hits for every query, scored 1 and 1/2."""

    def search(self, queries, k=3):
        return [[Hit(d["id"], d["contents"], 1.0 / (i + 1))
                 for i, d in enumerate(DOCS[:k])] for _ in queries]


def _stub(answer=None):
    return search_r1_server(_Docs(), answer=answer)


def test_probe_a_search_r1_server_without_health():
    with _stub() as (url, requests):
        for u in (url, url + "/retrieve", url + "/retrieve?micro_batch=false"):
            got = probe_service(u, timeout=5)
            assert got["protocol"] == "search-r1" and got["health"] is None and got["url"] == url
        assert requests[-1] == {"queries": ["probe"], "topk": 1, "return_scores": True}
        remote = RemoteRetriever(url + "/retrieve")
        assert remote.probe()["protocol"] == "search-r1"
        hits = remote.search(["who is Aaron?", "Abel?"], 2)  # and the client reads its answers
        assert [h.title for h in hits[0]] == ["Aaron", "Abel"] and hits[1][0].doc_id == "0"
        remote.close()


def test_probe_our_server_uses_health():
    with serve_in_thread(load_retriever(world_index(seed=0, kind="bm25s"))) as url:
        got = probe_service(url + "/retrieve", timeout=5)
    assert got["protocol"] == "agentsearch" and got["health"]["kind"] == "bm25s"


@pytest.mark.parametrize("answer,words", [
    ({"detail": "413: too many queries"}, "without \"result\".*KeyError"),
    ({"result": "not a list of lists"}, "unexpected answer"),
])
def test_probe_refuses_a_service_that_would_break_search_r1(answer, words):
    with _stub(answer) as (url, _):
        with pytest.raises(RetrieverError, match=words):
            probe_service(url, timeout=5)


def test_probe_a_dead_or_foreign_service():
    with _stub() as (url, _):
        pass  # closed: nothing listens there now
    with pytest.raises(RetrieverError, match="unreachable.*agentsearch serve"):
        probe_service(url, timeout=2)
    with serve_in_thread(_NotFoundApp()) as url:
        with pytest.raises(RetrieverError, match="HTTP 404"):
            probe_service(url, timeout=5)


def _NotFoundApp():  # noqa: N802 - an app with no routes: every path is a 404
    from fastapi import FastAPI

    return FastAPI()
