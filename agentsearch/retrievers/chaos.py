"""A fault-injecting proxy for a ``/retrieve`` server: see what training does when search fails.

::

    from agentsearch.retrievers.chaos import create_chaos_app
    app = create_chaos_app("http://127.0.0.1:8000", error_rate=0.10, stall_rate=0.05, stall_s=2.0)
    with serve_in_thread(app) as url:   # point env_kwargs.index at url
        ...

Every ``POST /retrieve`` is forwarded to ``upstream`` unchanged, except that, drawn with a
seeded RNG per request: with probability ``error_rate`` it is answered at once with a 5xx
(500, 502, 503 or 504, no ``Retry-After``: a crashing or restarting backend, not a polite
overload); with probability ``stall_rate`` it is forwarded only after ``stall_s`` seconds (a
GC pause, a cold cache, a saturated node). ``GET /health`` is forwarded as is; ``GET /chaos``
reports the counters (``requests``, ``errors``, ``stalls``, ``forwarded``) and
``first_fault_monotonic`` (``time.monotonic()`` of the first fault, for a caller in the
same process). Used by
``scripts/bench_faults.py`` and the reliability tests; a user can put it in front of any
Search-R1-protocol server to try their own setup.
"""

# No `from __future__ import annotations`: FastAPI must see the real `Request` class in the
# endpoint signatures, which are defined inside create_chaos_app.
import asyncio
import random
import time

__all__ = ["create_chaos_app", "ERROR_STATUSES"]

ERROR_STATUSES = (500, 502, 503, 504)


def create_chaos_app(upstream: str, *, error_rate: float = 0.0, stall_rate: float = 0.0,
                     stall_s: float = 2.0, seed: int = 0, timeout_s: float = 60.0):
    """The proxy's FastAPI app (module notes)."""
    import httpx
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    if not (0 <= error_rate <= 1 and 0 <= stall_rate <= 1 and error_rate + stall_rate <= 1
            and stall_s >= 0):
        raise ValueError("chaos: 0 <= error_rate, stall_rate; error_rate + stall_rate <= 1; "
                         "stall_s >= 0")
    upstream = upstream.rstrip("/")
    if upstream.endswith("/retrieve"):
        upstream = upstream[: -len("/retrieve")]
    rng = random.Random(seed)
    counts = {"requests": 0, "errors": 0, "stalls": 0, "forwarded": 0,
              "first_fault_monotonic": None}
    holder: dict = {}
    app = FastAPI(title="agentsearch chaos proxy", docs_url=None, redoc_url=None, openapi_url=None)

    def client():  # made in the server's own event loop, on first use
        if "client" not in holder:
            holder["client"] = httpx.AsyncClient(timeout=timeout_s,
                                                 limits=httpx.Limits(max_connections=64))
        return holder["client"]

    async def forward(method: str, path: str, body=None):
        try:
            resp = await client().request(
                method, upstream + path, content=body,
                headers={"content-type": "application/json"} if body else None)
        except httpx.TransportError as e:  # the upstream is down: what a real proxy answers
            return JSONResponse({"detail": f"upstream unreachable: {type(e).__name__}"},
                                status_code=502)
        counts["forwarded"] += 1
        return Response(resp.content, status_code=resp.status_code,
                        media_type=resp.headers.get("content-type", "application/json"))

    @app.get("/health")
    async def health():
        return await forward("GET", "/health")

    @app.get("/chaos")
    async def chaos():
        return {**counts, "error_rate": error_rate, "stall_rate": stall_rate, "stall_s": stall_s}

    @app.post("/retrieve")
    async def retrieve(request: Request):
        body = await request.body()
        counts["requests"] += 1
        draw = rng.random()
        if draw < error_rate + stall_rate and counts["first_fault_monotonic"] is None:
            counts["first_fault_monotonic"] = time.monotonic()
        if draw < error_rate:
            counts["errors"] += 1
            status = rng.choice(ERROR_STATUSES)
            return JSONResponse({"detail": f"chaos: injected HTTP {status}"}, status_code=status)
        if draw < error_rate + stall_rate:
            counts["stalls"] += 1
            await asyncio.sleep(stall_s)
        return await forward("POST", "/retrieve", body)

    return app
