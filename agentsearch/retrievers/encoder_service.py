"""The query encoder as its own service, shared by several retrieval servers.

::

    agentsearch serve-encoder --port 8100 [--encoder NAME] [--device cuda]
    agentsearch serve --index indexes/dense-shard0 --encoder-url http://127.0.0.1:8100 --port 8001
    agentsearch serve --index indexes/dense-shard1 --encoder-url http://127.0.0.1:8100 --port 8002

Query encoding is most of a dense search's time, and an encoder per retrieval process holds
one model copy each (a GPU's memory, or a CPU's cores, several times over). With
``--encoder-url`` a dense index loads no model: it sends its queries to the service, which
coalesces concurrent requests from every retriever into shared forwards (the server's
micro-batching, ``MicroBatcher`` with ``idle_fire``).

Protocol: ``POST /encode {"texts": [...], "kind": "query"|"passage"}`` answers
``{"dim": d, "count": n, "vectors": "<base64 of n x d little-endian float32>"}`` (binary in
base64: a JSON list of floats costs more to write and parse than the forward takes);
``GET /health`` answers the encoder's config (name, dim, pooling, prefixes, max_length),
which a retriever compares with its index's manifest before its first query.
"""

# No `from __future__ import annotations`: FastAPI must see the real `Request` class.
import asyncio
import base64
import json
import sys

import numpy as np

from agentsearch.retrievers.base import RetrieverError
from agentsearch.retrievers.batching import MicroBatcher

__all__ = ["create_encoder_app", "RemoteEncoder", "main", "CONFIG_KEYS"]

CONFIG_KEYS = ("encoder", "dim", "pooling", "query_prefix", "passage_prefix", "max_length")
MAX_TEXTS = 4096
MAX_BODY_BYTES = 64 << 20  # 4,096 texts of 16 KiB: longer texts are truncated to max_length anyway


def create_encoder_app(encoder, window_ms: float = 2.0, max_batch: int = 256,
                       batch_size: int | None = None):
    """A FastAPI app serving ``encoder`` (an ``Encoder``). Requests that arrive while a
    forward runs wait at most ``window_ms`` and share the next one. ``batch_size``: texts per
    forward (default 16 on CPU, where encoding is compute-bound, 256 on a GPU)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    def batch_fn(kind: str):
        async def fn(texts: list[str], _k: int):
            vecs = await asyncio.to_thread(encoder.encode, texts, kind=kind, batch_size=per_forward)
            return [[v] for v in vecs]  # MicroBatcher hands out lists; one vector each
        return fn

    per_forward = batch_size or (16 if encoder.device == "cpu" else 256)
    batchers = {kind: MicroBatcher(batch_fn(kind), window_ms, max_batch, max_inflight=1,
                                   idle_fire=True)
                for kind in ("query", "passage")}
    app = FastAPI(title="agentsearch encoder", docs_url=None, redoc_url=None, openapi_url=None)
    config = {"status": "ok", **encoder.config(), "device": encoder.device}

    @app.get("/health")
    async def health():
        return {**config, "stats": {k: dict(b.stats) for k, b in batchers.items()}}

    @app.post("/encode")
    async def encode(request: Request):
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"request body of {int(declared):,} bytes is over the "
                                           f"{MAX_BODY_BYTES:,}-byte limit (split the texts)"},
                                status_code=413)
        try:
            payload = json.loads(await request.body())
            texts, kind = payload["texts"], payload.get("kind", "query")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError('"texts" must be a list of strings')
            if kind not in batchers:
                raise ValueError(f'"kind" must be "query" or "passage", got {kind!r}')
            if len(texts) > MAX_TEXTS:
                raise ValueError(f"{len(texts)} texts in one request; the limit is {MAX_TEXTS} "
                                 "(split it)")
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"detail": f"bad /encode request: {e}; send "
                                           '{"texts": ["..."], "kind": "query"}'}, status_code=422)
        try:
            rows = await batchers[kind].submit(texts, 1) if texts else []
        except Exception as e:  # noqa: BLE001 - reported, and the service lives on
            return JSONResponse({"detail": f"encoding failed: {type(e).__name__}: {e}"},
                                status_code=500)
        vecs = (np.stack([r[0] for r in rows]).astype("<f4") if rows
                else np.zeros((0, encoder.dim), "<f4"))
        body = {"dim": encoder.dim, "count": len(rows),
                "vectors": base64.b64encode(vecs.tobytes()).decode()}
        return Response(json.dumps(body).encode(), media_type="application/json")

    return app


class RemoteEncoder:
    """An ``Encoder`` whose forwards run in an encoder service (``agentsearch serve-encoder``).

    Same ``encode(texts, kind=...)`` and ``config()`` as ``Encoder``; ``batch_size`` is
    ignored (the service batches). A service that cannot be reached or answers badly is a
    ``RetrieverError`` naming the URL: the retrieval server turns it into a 500, and the
    training client pauses and retries as it does for a dead retriever.
    """

    def __init__(self, url: str, timeout_s: float = 60.0):
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s)
        try:
            health = self._http.get(self.url + "/health")
            health.raise_for_status()
            info = health.json()
        except (httpx.HTTPError, ValueError) as e:
            raise RetrieverError(f"encoder service {self.url} is not answering GET /health ({e}); "
                                 "start it with: agentsearch serve-encoder --port PORT") from None
        missing = [k for k in CONFIG_KEYS if k not in info]
        if missing:
            raise RetrieverError(f"{self.url}/health lacks {missing}: not an agentsearch encoder "
                                 "service")
        self._config = {k: info[k] for k in CONFIG_KEYS}
        self.name, self.dim = info["encoder"], int(info["dim"])
        self.pooling, self.max_length = info["pooling"], info["max_length"]
        self.query_prefix, self.passage_prefix = info["query_prefix"], info["passage_prefix"]
        self.device = f"{info.get('device', '?')} via {self.url}"

    def config(self) -> dict:
        return dict(self._config)

    def encode(self, texts: list[str], *, kind: str = "query", batch_size: int = 0,
               progress=None) -> np.ndarray:
        """``[len(texts), dim]`` float32 from the service."""
        import httpx

        try:
            r = self._http.post(self.url + "/encode", json={"texts": list(texts), "kind": kind})
        except httpx.HTTPError as e:
            raise RetrieverError(f"encoder service {self.url}: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise RetrieverError(f"encoder service {self.url} answered {r.status_code}: "
                                 f"{r.text[:300]}")
        body = r.json()
        vecs = np.frombuffer(base64.b64decode(body["vectors"]), dtype="<f4")
        if vecs.size != len(texts) * self.dim:
            raise RetrieverError(f"encoder service {self.url} sent {vecs.size} floats for "
                                 f"{len(texts)} texts of dim {self.dim}")
        if progress is not None:
            progress.advance(len(texts))
        return vecs.reshape(len(texts), self.dim).astype(np.float32)

    def close(self) -> None:
        self._http.close()


def check_matches(remote: RemoteEncoder, manifest: dict, index_dir) -> None:
    """The service must encode as the index was built: same model, pooling, prefixes, length."""
    differ = {k: (manifest.get(k), v) for k, v in remote.config().items() if manifest.get(k) != v}
    if differ:
        said = ", ".join(f"{k}: index {a!r} vs service {b!r}" for k, (a, b) in differ.items())
        raise RetrieverError(f"encoder service {remote.url} does not encode like {index_dir} was "
                             f"built ({said}); start the service with the index's encoder, or "
                             "rebuild the index")


def main(a) -> int:
    """``agentsearch serve-encoder [--encoder NAME] [--host H] [--port P] [--device D] [--threads N]
    [--batch-window-ms W]``."""
    import uvicorn

    from agentsearch.retrievers.encoder import Encoder, resolve_device

    try:
        enc = Encoder(a.encoder, device=resolve_device(a.device), threads=a.threads,
                      pooling=a.pooling, query_prefix=a.query_prefix,
                      passage_prefix=a.passage_prefix, max_length=a.max_length)
    except (OSError, ImportError, ValueError, RetrieverError) as e:
        print(f"agentsearch serve-encoder: error: {e}", file=sys.stderr)
        return 2
    app = create_encoder_app(enc, window_ms=a.batch_window_ms)
    print(f"serving encoder {enc.name} ({enc.dim}-d, {enc.device}) on http://{a.host}:{a.port}  "
          "(POST /encode, GET /health)", flush=True)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False)
    return 0
