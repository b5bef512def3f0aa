"""``probe_service``: is a retrieval service usable? Ours answers ``GET /health``; Search-R1's
``retrieval_server.py`` has no ``/health`` (404), so the probe asks one tiny search instead."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentsearch.retrievers import (
    RemoteRetriever,
    RetrieverError,
    load_retriever,
    probe_service,
    serve_in_thread,
    world_index,
)

DOCS = [{"id": "0", "contents": '"Aaron"\nAaron is a prophet.'},
        {"id": "1", "contents": '"Abel"\nAbel is a shepherd.'}]


def _search_r1_handler(answer=None):
    """A stand-in for Search-R1's retrieval_server.py: POST /retrieve only, its answer shape
    (the corpus row under "document", a score), FastAPI's 404 for every other path."""

    class Handler(BaseHTTPRequestHandler):
        requests: list = []

        def _send(self, status: int, payload) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server's name
            self._send(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            if self.path != "/retrieve":
                return self._send(404, {"detail": "Not Found"})
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            Handler.requests.append(req)
            if answer is not None:
                return self._send(200, answer)
            k = req.get("topk") or 3
            result = [[{"document": d, "score": 1.0 / (i + 1)} for i, d in enumerate(DOCS[:k])]
                      for _ in req["queries"]]
            if not req.get("return_scores"):
                result = [[item["document"] for item in items] for items in result]
            self._send(200, {"result": result})

        def log_message(self, *args):
            pass

    return Handler


@contextlib.contextmanager
def _stub(answer=None):
    handler = _search_r1_handler(answer)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests
    finally:
        server.shutdown()
        server.server_close()


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
