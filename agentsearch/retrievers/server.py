"""The retrieval server: Search-R1's ``/retrieve`` protocol over any retriever.

::

    agentsearch serve --index indexes/bm25s [--host 127.0.0.1] [--port 8000]
    agentsearch serve --index indexes/bm25s indexes/dense-flat     # hybrid (RRF)

``POST /retrieve`` with ``{"queries": [...], "topk": 3, "return_scores": true}`` answers
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``, one list per query,
exactly what Search-R1's ``generation.py`` sends and parses. Without ``return_scores`` (its
default is false) each list holds the bare documents, as Search-R1's server returns them.
``topk`` missing or null means 3. ``GET /health`` reports the index and the limits.

Limits (constructor arguments / flags): queries per request, characters per query, topk,
body bytes. The defaults take Search-R1's own requests: its ``generation.py`` posts every
active episode's query of a turn in ONE request (``train_batch_size x n_agent``, 512 x 5 =
2,560 queries in its scripts, 5,120 with a batch of 1,024), so a request may hold 16,384
queries and 64 MiB. The server searches a large request in chunks of ``search_batch``
queries (256) and renders each chunk to JSON as it goes, so the search's working memory
(encoder activations, FAISS distance blocks, Lucene threads) stays that of one chunk.
A request over a limit, or one that is not JSON of that shape, gets a 4xx answer
``{"detail": "<what is wrong and how to fix it>"}``; it never takes the server down.
Empty queries are not errors: they get an empty list, so one bad episode cannot fail a
batch shared with others. The server binds 127.0.0.1 unless told otherwise; it has no
authentication, so expose it only on trusted networks.

Admission control (``admission.py``): at most ``max_inflight`` requests (512),
``max_inflight_queries`` queries (16,384 + 512) and ``max_inflight_body_bytes`` of bodies
(4 x 64 MiB) are admitted and not yet answered; a request past a bound is answered at once,
before its body is read, with 503, ``Retry-After`` (the backlog at the measured service rate)
and ``{"detail"}`` naming the flag that raises the bound. ``GET /health`` reports the bounds,
what is in flight and the shed counts under ``"admission"``.

For tests and notebooks, ``serve_in_thread(retriever)`` runs it on a free loopback port.
"""

# No `from __future__ import annotations` here: FastAPI must see the real `Request` class
# in the endpoint signatures, which are defined inside create_app.
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator

from agentsearch.retrievers.admission import Admission, Overloaded
from agentsearch.retrievers.base import Hit, Retriever

__all__ = ["create_app", "serve_in_thread", "main", "Limits"]

DEFAULT_TOPK = 3
DEFAULT_BATCH_WINDOW_MS = 2.0
"""``--batch-window-ms`` unless told otherwise (bench_retrieval.py (e): see docs/retrieval.md)."""
UNDECLARED_BODY_BYTES = 64 << 10  # reserved for a chunked body until more of it arrives


class Limits:
    """Request limits and admission bounds; every violation is a 4xx (a limit) or a 503 (a
    bound) with a message naming the flag to change.

    ``search_batch`` is not a limit: it is how many queries one internal search call takes.
    ``max_inflight_queries`` defaults to ``max_queries + max_inflight`` (one largest request
    beside a full house of single-query requests), ``max_inflight_body_bytes`` to four bodies
    of ``max_body_bytes``; each must hold one largest request, else that request could never
    be admitted.
    """

    def __init__(self, max_queries: int = 16384, max_topk: int = 100, max_query_chars: int = 4096,
                 max_body_bytes: int = 64 << 20, search_batch: int = 256, max_inflight: int = 512,
                 max_inflight_queries: int | None = None,
                 max_inflight_body_bytes: int | None = None):
        if min(max_queries, max_topk, max_query_chars, max_body_bytes, search_batch,
               max_inflight) < 1:
            raise ValueError("every request limit, search_batch and max_inflight must be >= 1")
        self.max_queries, self.max_topk = max_queries, max_topk
        self.max_query_chars, self.max_body_bytes = max_query_chars, max_body_bytes
        self.search_batch, self.max_inflight = search_batch, max_inflight
        self.max_inflight_queries = max_inflight_queries or max_queries + max_inflight
        self.max_inflight_body_bytes = max_inflight_body_bytes or 4 * max_body_bytes
        if self.max_inflight_queries < max_queries:
            raise ValueError(f"--max-inflight-queries ({self.max_inflight_queries}) must be at "
                             f"least --max-queries ({max_queries}), else a request that large is "
                             "never admitted")
        if self.max_inflight_body_bytes < max_body_bytes:
            raise ValueError(f"--max-inflight-body-mb ({self.max_inflight_body_bytes / 2**20:g}) "
                             f"must be at least --max-body-mb ({max_body_bytes / 2**20:g})")

    def as_dict(self) -> dict:
        return dict(vars(self))


class BadRequest(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; returns ``(queries, topk, return_scores)``."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"request body is not valid JSON ({e}); send "
                              '{"queries": ["..."], "topk": 3, "return_scores": true}') from None
    if not isinstance(payload, dict):
        raise BadRequest(422, 'request body must be a JSON object: {"queries": ["..."], "topk": 3}')
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest(422, '"queries" must be a list of strings')
    if len(queries) > limits.max_queries:
        raise BadRequest(413, f"{len(queries)} queries in one request; this server takes at most "
                              f"{limits.max_queries} (split the batch, or restart it with "
                              "--max-queries)")
    for i, q in enumerate(queries):
        if len(q) > limits.max_query_chars:
            raise BadRequest(413, f"query {i} has {len(q):,} characters; the limit is "
                                  f"{limits.max_query_chars:,} (shorten it; the client truncates "
                                  "for you)")
    topk = payload.get("topk")
    if topk is None:
        topk = DEFAULT_TOPK
    elif isinstance(topk, float) and topk.is_integer():
        topk = int(topk)
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise BadRequest(422, f'"topk" must be a positive integer, got {payload.get("topk")!r}')
    if topk > limits.max_topk:
        raise BadRequest(422, f"topk {topk} is above this server's cap of {limits.max_topk} "
                              "(ask for fewer, or restart it with --max-topk)")
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(422, f'"return_scores" must be true or false, got {return_scores!r}')
    return queries, topk, return_scores


def render_lists(hits: list[list[Hit]], return_scores: bool) -> bytes:
    """``hits`` as the comma-separated JSON lists of a ``result`` array (no brackets)."""
    def doc(h: Hit) -> dict:
        return {"id": h.doc_id, "contents": h.contents}

    if return_scores:
        result = [[{"document": doc(h), "score": h.score} for h in hs] for hs in hits]
    else:
        result = [[doc(h) for h in hs] for hs in hits]
    return json.dumps(result, ensure_ascii=False).encode()[1:-1]


def create_app(retriever: Retriever, limits: Limits | None = None,
               batch_window_ms: float = DEFAULT_BATCH_WINDOW_MS):
    """The FastAPI app. ``batch_window_ms > 0`` (the default) coalesces concurrent requests
    into one batched search (``BatchingRetriever``): callers that send one query per request
    share encoder forwards and FAISS calls. A request that finds the server idle is searched
    at once; requests arriving while a search runs wait at most the window for company.
    0 turns coalescing off."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    limits = limits or Limits()
    if batch_window_ms > 0:
        from agentsearch.retrievers.batching import BatchingRetriever

        retriever = BatchingRetriever(retriever, window_ms=batch_window_ms,
                                      max_batch=limits.search_batch, idle_fire=True)
    app = FastAPI(title="agentsearch retrieval", docs_url=None, redoc_url=None, openapi_url=None)
    info = {"status": "ok", "kind": str(getattr(retriever, "kind", type(retriever).__name__)),
            "num_docs": getattr(retriever, "num_docs", None), "limits": limits.as_dict(),
            "batch_window_ms": batch_window_ms, "devices": getattr(retriever, "devices", None)}

    admission = Admission(limits.max_inflight, limits.max_inflight_queries,
                          limits.max_inflight_body_bytes)
    app.state.admission = admission

    def declared_length(request: Request) -> int:
        """The body's declared size (64 KiB to start with when it declares none), or 413."""
        declared = request.headers.get("content-length")
        if not (declared and declared.isdigit()):
            return min(UNDECLARED_BODY_BYTES, limits.max_body_bytes)
        if int(declared) > limits.max_body_bytes:
            raise BadRequest(413, f"request body of {int(declared):,} bytes is over the "
                                  f"{limits.max_body_bytes:,}-byte limit (split the batch, or "
                                  "restart the server with a larger --max-body-mb)")
        return int(declared)

    async def read_body(request: Request, ticket) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise BadRequest(413, f"request body is over the {limits.max_body_bytes:,}-byte "
                                      "limit (split the batch, or restart the server with a larger "
                                      "--max-body-mb)")
            admission.grow_body(ticket, size)  # a no-op within the declared length
            chunks.append(chunk)
        return b"".join(chunks)

    def shed(e: Overloaded):
        return JSONResponse({"detail": e.detail}, status_code=503,
                            headers={"Retry-After": str(e.retry_after)})

    @app.get("/health")
    async def health():
        return {**info, "admission": admission.snapshot()}

    @app.post("/retrieve")
    async def retrieve(request: Request):
        # Admission comes before the body is read: a shed request costs no body in memory.
        try:
            ticket = admission.enter(declared_length(request))
        except BadRequest as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)
        except Overloaded as e:
            return shed(e)
        try:
            try:
                queries, topk, return_scores = parse_request(await read_body(request, ticket),
                                                             limits)
                admission.admit(ticket, len(queries))
            except BadRequest as e:
                return JSONResponse({"detail": e.detail}, status_code=e.status)
            except Overloaded as e:
                return shed(e)
            parts = []  # one chunk's hits at a time, kept as rendered JSON
            try:
                for s in range(0, len(queries), limits.search_batch):
                    hits = await retriever.asearch(queries[s:s + limits.search_batch], topk)
                    parts.append(render_lists(hits, return_scores))
            except Exception as e:  # noqa: BLE001 - a server fault, reported; the server lives on
                return JSONResponse({"detail": f"search failed: {type(e).__name__}: {e}"},
                                    status_code=500)
            return Response(b'{"result": [' + b",".join(p for p in parts if p) + b"]}",
                            media_type="application/json")
        finally:
            admission.leave(ticket)

    return app


@contextlib.contextmanager
def serve_in_thread(retriever_or_app, host: str = "127.0.0.1", port: int = 0,
                    **app_kw) -> Iterator[str]:
    """Run the server in a background thread; yields its base URL (``http://127.0.0.1:PORT``).

    ``port=0`` picks a free port. Stops the server (and waits for it) on exit.
    """
    import uvicorn

    app = (retriever_or_app if hasattr(retriever_or_app, "router")
           else create_app(retriever_or_app, **app_kw))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"agentsearch-server-{port}")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"retrieval server on {host}:{port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def app_from_args(a):
    """``(app, retriever)`` for parsed ``agentsearch serve`` arguments; raises
    ``RetrieverError`` (or ``ValueError``) for an index or device it cannot use."""
    from agentsearch.retrievers.encoder import resolve_device
    from agentsearch.retrievers.index import load_retriever

    device = resolve_device(getattr(a, "device", None) or "cpu")
    dense = {k: v for k, v in (("search", getattr(a, "search", None)),
                               ("refine", getattr(a, "refine", None)))
             if v is not None}
    if getattr(a, "no_mmap", False):
        dense["mmap"] = False
    if getattr(a, "encoder_url", None):
        dense["encoder_url"] = a.encoder_url
    retriever = load_retriever(list(a.index), threads=getattr(a, "threads", None),
                               device=device, **dense)
    limits = Limits(max_queries=a.max_queries, max_topk=a.max_topk,
                    max_query_chars=getattr(a, "max_query_chars", None) or 4096,
                    max_body_bytes=int((getattr(a, "max_body_mb", None) or 64) * (1 << 20)),
                    search_batch=getattr(a, "search_batch", None) or 256,
                    max_inflight=getattr(a, "max_inflight", None) or 512,
                    max_inflight_queries=getattr(a, "max_inflight_queries", None),
                    max_inflight_body_bytes=(
                        int(getattr(a, "max_inflight_body_mb", None) * (1 << 20))
                        if getattr(a, "max_inflight_body_mb", None) else None))
    window = getattr(a, "batch_window_ms", None)
    return (create_app(retriever, limits, DEFAULT_BATCH_WINDOW_MS if window is None else window),
            retriever)


def main(a) -> int:
    """``agentsearch serve --index DIR [DIR ...] [--host H] [--port P] [--device D] [--max-queries
    N] [--max-topk K] [--max-body-mb M] [--search-batch B] [--max-inflight N]
    [--max-inflight-queries Q] [--max-inflight-body-mb M]``."""
    import uvicorn

    from agentsearch.retrievers.base import RetrieverError

    try:
        app, retriever = app_from_args(a)
    except (RetrieverError, ValueError) as e:
        print(f"agentsearch serve: error: {e}", file=sys.stderr)
        return 2
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {a.host}: anyone who can reach this port can query the index "
              "(there is no authentication)", file=sys.stderr)
    kind = getattr(retriever, "kind", type(retriever).__name__)
    n = getattr(retriever, "num_docs", None)
    devices = getattr(retriever, "devices", None)
    where = f", encoder on {devices['encoder']}, FAISS on {devices['faiss']}" if devices else ""
    print(f"serving {kind} index ({'?' if n is None else f'{n:,}'} documents{where}) on "
          f"http://{a.host}:{a.port}  (POST /retrieve, GET /health)", flush=True)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False)
    return 0
