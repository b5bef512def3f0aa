"""The ``/retrieve`` protocol from a client's side (ours and Search-R1's servers speak it):
the options a server URL may carry, the ``Retry-After`` header, the answer's hits, and
``probe_service``, which checks before a run that a service answers searches.
``client.RemoteRetriever`` speaks it."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from agentsearch.retrievers.base import Hit, RetrieverError

__all__ = ["URL_OPTIONS", "split_url_options", "retry_after_seconds", "parse_result",
           "probe_service"]

URL_OPTIONS = {"micro_batch": bool, "window_ms": float, "max_batch": int, "max_inflight": int,
               "cache_size": int, "retries": int, "timeout": float, "max_retry_after": float}
"""``RemoteRetriever`` arguments a URL's query string may set, with their types."""


def split_url_options(url: str) -> tuple[str, dict]:
    """``("http://h:p/retrieve", {"micro_batch": False})`` from
    ``"http://h:p/retrieve?micro_batch=false"``; a key outside ``URL_OPTIONS`` or a value of
    the wrong type is a ``ValueError`` that names the allowed keys."""
    parts = urlsplit(url)
    opts: dict = {}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key not in URL_OPTIONS:
            raise ValueError(f"retriever URL option {key!r} is unknown; allowed: "
                             f"{sorted(URL_OPTIONS)}")
        tp = URL_OPTIONS[key]
        if tp is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"retriever URL option {key}={raw!r}: expected true or false")
            opts[key] = raw.lower() in ("true", "1", "yes")
        else:
            try:
                opts[key] = tp(raw)
            except ValueError:
                raise ValueError(f"retriever URL option {key}={raw!r}: "
                                 f"expected {tp.__name__}") from None
    return urlunsplit(parts._replace(query="", fragment="")), opts


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def parse_result(payload, n_queries: int) -> list[list[Hit]]:
    """Hits from a ``{"result": [...]}`` answer, with or without scores."""
    try:
        result = payload["result"]
        if len(result) != n_queries:
            raise ValueError(f"{len(result)} result lists for {n_queries} queries")
        out = []
        for items in result:
            hits = []
            for item in items:
                doc = item["document"] if "document" in item else item
                hits.append(Hit(str(doc.get("id", "")), doc["contents"],
                                float(item.get("score", 0.0))))
            out.append(hits)
        return out
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RetrieverError(f"unexpected answer from the retrieval server ({e}); is it a "
                             "Search-R1 /retrieve endpoint?") from None


def _base_url(url: str) -> str:
    url = split_url_options(url)[0].rstrip("/")
    return url[: -len("/retrieve")] if url.endswith("/retrieve") else url


def probe_service(url: str, timeout: float = 10.0) -> dict:
    """Check that the retrieval service at ``url`` (base or ``.../retrieve``, URL options
    allowed) can answer searches; raise ``RetrieverError`` saying why not.

    ``GET /health`` first: an answer ``{"status": "ok", ...}`` (``agentsearch serve``) is
    enough. Otherwise (Search-R1's server: 404) one POST of Search-R1's own request,
    ``{"queries": ["probe"], "topk": 1, "return_scores": true}``, whose answer must hold a
    ``"result"`` list of one hit list (else Search-R1's trainer dies on ``KeyError: 'result'``).
    Returns ``{"url", "protocol": "agentsearch" | "search-r1", "health": dict | None,
    "seconds"}``. ``timeout``: seconds per request (connecting: at most 3).
    """
    import httpx

    base, t0 = _base_url(url), time.perf_counter()

    def ask(method: str, path: str, **kw):
        try:
            return client.request(method, base + path, **kw)
        except httpx.TransportError as e:
            raise RetrieverError(f"retrieval service {base} is unreachable ({type(e).__name__}: "
                                 f"{e}); start it (agentsearch serve --index DIR, or Search-R1's "
                                 "retrieval_server.py) or fix the URL") from None

    with httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 3.0))) as client:
        resp = ask("GET", "/health")
        try:
            health = resp.json() if resp.status_code == 200 else None
        except ValueError:
            health = None
        if isinstance(health, dict) and health.get("status") == "ok":
            return {"url": base, "protocol": "agentsearch", "health": health,
                    "seconds": round(time.perf_counter() - t0, 3)}
        resp = ask("POST", "/retrieve",
                   json={"queries": ["probe"], "topk": 1, "return_scores": True})
    where = f"retrieval service {base}: POST /retrieve"
    if resp.status_code != 200:
        raise RetrieverError(f"{where} answered HTTP {resp.status_code}: {resp.text[:300]!r}; "
                             "is it a Search-R1 /retrieve endpoint?")
    try:
        payload = resp.json()
    except ValueError:
        raise RetrieverError(f"{where} answered non-JSON: {resp.text[:200]!r}") from None
    if not isinstance(payload, dict) or "result" not in payload:
        keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise RetrieverError(f"{where} answered without \"result\" ({keys}); Search-R1's "
                             "trainer would fail on KeyError: 'result'")
    parse_result(payload, 1)  # one list of {"document": {"contents"}, "score"} items
    return {"url": base, "protocol": "search-r1", "health": None,
            "seconds": round(time.perf_counter() - t0, 3)}
