"""The HTTP client for a ``/retrieve`` server (ours or Search-R1's): a ``Retriever``.

>>> r = RemoteRetriever("http://127.0.0.1:8000")
>>> r.search(["who founded Biagam Company?"], k=3)          # sync, one request per call
>>> await asyncio.gather(*(r.asearch([q], 3) for q in qs))   # async, micro-batched

Concurrent ``asearch`` calls (one per episode) are coalesced for ``window_ms`` into one
request of up to ``max_batch`` queries (``MicroBatcher``), which is what makes remote search
fast: the server scores a batch for little more than the cost of one query.

Failures: each request has a ``timeout``. Connection errors, timeouts, every 5xx, 408 and 429
answer, and malformed answers (not JSON, or no Search-R1 answer to the queries asked) are
retried ``retries`` times with exponential backoff and jitter; a ``Retry-After`` (a server
shedding load: ``agentsearch serve``'s admission control) is waited out, at least that long
(capped at ``max_retry_after``, plus up to 50% jitter so shed callers do not return together;
``stats["retry_after_waits"]``, ``stats["retry_after_s"]``). After the last attempt the
callers get a ``RetrieverUnavailable`` (a ``RetrieverError`` and an infrastructure error,
``core.reliability``: envs wait it out, the policy never sees it) naming the server and the
last cause. A 413 for several queries splits them in halves (``stats["splits"]``); a 413 for
one query and other 4xx answers (a request the server will never accept) raise
``RetrieverError`` at once with the server's message. Arguments the server would refuse are
caught here first: ``k`` above
``max_topk`` is a ``ValueError`` for that caller only, and queries are cut to
``max_query_chars`` characters so one runaway episode cannot fail a shared batch.
``cache_size > 0`` keeps an LRU cache of ``(query, k)`` results. If the server runs with
other limits than the defaults, pass them here too (``GET /health`` lists them).

Where only a URL can be given (``env_kwargs.index``), client settings ride in its query
string: ``http://127.0.0.1:8000?micro_batch=false`` sends one request per search, as
Search-R1's trainer does (``RemoteRetriever.from_url``; ``URL_OPTIONS`` lists the keys).

Before a run, ``probe_service(url)`` (or ``RemoteRetriever.probe()``) checks that a service
is usable: ``GET /health`` where it answers (``agentsearch serve``), otherwise one tiny
Search-R1 request (Search-R1's own ``retrieval_server.py`` has no ``/health``).
``probe_service``, ``URL_OPTIONS`` and the reading of answers live in ``retrieve_protocol``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from typing import NamedTuple

from agentsearch.core.reliability import outages
from agentsearch.retrievers.base import Hit, RetrieverError, RetrieverUnavailable
from agentsearch.retrievers.batching import MicroBatcher
from agentsearch.retrievers.retrieve_protocol import (
    parse_result,
    probe_service,
    retry_after_seconds,
    split_url_options,
)

__all__ = ["RemoteRetriever"]


class _Retry(NamedTuple):
    """Why an attempt failed in a way worth retrying, and the server's ``Retry-After``."""

    reason: str
    after: float | None = None


class RemoteRetriever:
    """``Retriever`` over HTTP. See the module docstring for batching, retries and limits."""

    def __init__(self, url: str = "http://127.0.0.1:8000", *, timeout: float = 30.0,
                 connect_timeout: float = 3.0, retries: int = 3, backoff: float = 0.25,
                 window_ms: float = 5.0, max_batch: int = 256, max_inflight: int = 4,
                 max_topk: int = 100, max_query_chars: int = 4096, cache_size: int = 0,
                 micro_batch: bool = True, max_retry_after: float = 30.0):
        url = url.rstrip("/")
        self.base_url = url[: -len("/retrieve")] if url.endswith("/retrieve") else url
        self.url = self.base_url + "/retrieve"
        self.retries, self.backoff, self.max_batch = retries, backoff, max_batch
        self.max_retry_after, self.max_inflight = max_retry_after, max_inflight
        self.max_topk, self.max_query_chars = max_topk, max_query_chars
        self.micro_batch = micro_batch
        self._timeout = (timeout, connect_timeout)
        self.batcher = MicroBatcher(self._apost, window_ms, max_batch, max_inflight)
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, int], list[Hit]] = OrderedDict()
        self._aclient = self._aclient_loop = self._client = None
        self._rng = random.Random()
        self.stats = {"requests": 0, "retries": 0, "cache_hits": 0, "retry_after_waits": 0,
                      "retry_after_s": 0.0, "splits": 0}

    @classmethod
    def from_url(cls, url: str, **kw) -> RemoteRetriever:
        """A client for ``url``, whose query string may set ``URL_OPTIONS`` (keyword
        arguments win over it)."""
        base, opts = split_url_options(url)
        return cls(base, **{**opts, **kw})

    # -- plumbing -----------------------------------------------------------------
    def _httpx_timeout(self):
        import httpx

        return httpx.Timeout(self._timeout[0], connect=self._timeout[1])

    def _async_client(self):
        import httpx

        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            # An httpx.AsyncClient belongs to the loop that made it; a new loop gets a new one.
            limits = httpx.Limits(max_connections=2 * self.max_inflight + 8)
            self._aclient = httpx.AsyncClient(timeout=self._httpx_timeout(), limits=limits)
            self._aclient_loop = loop
        return self._aclient

    def _check(self, queries: list[str], k: int) -> list[str]:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.max_topk:
            raise ValueError(f"k must be an integer in 1..{self.max_topk}, got {k!r}")
        return [q[: self.max_query_chars] for q in queries]

    def _give_up(self, attempts: int, last: str) -> RetrieverUnavailable:
        return RetrieverUnavailable(f"retrieval server {self.url} failed {attempts} times; last: "
                                    f"{last}. Is `agentsearch serve` running there?")

    def _delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1``: exponential backoff with
        jitter, and never less than the server's ``Retry-After`` (capped)."""
        base = self.backoff * (2 ** attempt)
        if retry_after is not None:
            base = max(base, min(retry_after, self.max_retry_after))
        delay = base * (1 + 0.5 * self._rng.random())
        if retry_after is not None:
            self.stats["retry_after_waits"] += 1
            self.stats["retry_after_s"] += delay
        return delay

    def _answer(self, resp, n: int) -> list[list[Hit]] | _Retry | None:
        """Hits, the reason to retry, or None: too large, split the ``n`` queries (413); raises
        for answers that retrying cannot fix (other 4xx, a 413 for one query)."""
        if resp.status_code >= 500 or resp.status_code in (408, 429):  # the server's trouble
            after = retry_after_seconds(resp.headers.get("retry-after"))
            return _Retry(f"HTTP {resp.status_code}: {resp.text[:300]}", after)
        if resp.status_code == 413 and n > 1:
            self.stats["splits"] += 1
            return None
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except (ValueError, AttributeError):  # not JSON, not an object
                detail = resp.text
            raise RetrieverError(f"retrieval server {self.url} refused the request "
                                 f"(HTTP {resp.status_code}): {str(detail)[:500]}")
        try:
            return parse_result(resp.json(), n)
        except ValueError:
            return _Retry(f"answer is not JSON: {resp.text[:200]!r}")
        except RetrieverError as e:  # JSON, but not an answer to these queries
            return _Retry(str(e))

    def _before(self, attempt: int, failed: _Retry) -> float:
        """The retry schedule shared by the async and sync paths: seconds to wait before
        attempt ``attempt`` (0 for the first; after it, ``failed``'s Retry-After is
        honoured), counting requests and retries."""
        self.stats["requests"] += 1
        if not attempt:
            return 0.0
        self.stats["retries"] += 1
        # counted, the first one warned
        outages.transient(f"retrieval server {self.url}", failed.reason)
        return self._delay(attempt - 1, failed.after)

    async def _apost(self, queries: list[str], k: int) -> list[list[Hit]]:
        import httpx

        client, last, h = self._async_client(), _Retry(""), len(queries) // 2
        body = {"queries": queries, "topk": k, "return_scores": True}
        for attempt in range(self.retries + 1):
            await asyncio.sleep(self._before(attempt, last))
            try:
                got = self._answer(await client.post(self.url, json=body), len(queries))
            except httpx.TransportError as e:
                got = _Retry(f"{type(e).__name__}: {e}")
            if got is None:  # too large for the server: each half on its own
                return await self._apost(queries[:h], k) + await self._apost(queries[h:], k)
            if not isinstance(got, _Retry):
                return got
            last = got
        raise self._give_up(self.retries + 1, last.reason)

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self._httpx_timeout())
        last, h = _Retry(""), len(queries) // 2
        body = {"queries": queries, "topk": k, "return_scores": True}
        for attempt in range(self.retries + 1):
            time.sleep(self._before(attempt, last))
            try:
                got = self._answer(self._client.post(self.url, json=body), len(queries))
            except httpx.TransportError as e:
                got = _Retry(f"{type(e).__name__}: {e}")
            if got is None:
                return self._post(queries[:h], k) + self._post(queries[h:], k)
            if not isinstance(got, _Retry):
                return got
            last = got
        raise self._give_up(self.retries + 1, last.reason)

    def _cached(self, queries: list[str], k: int) -> tuple[list[list[Hit] | None], list[str]]:
        found: list[list[Hit] | None] = [None] * len(queries)
        if self.cache_size > 0:
            for i, q in enumerate(queries):
                hit = self._cache.get((q, k))
                if hit is not None:
                    self._cache.move_to_end((q, k))
                    found[i] = hit
                    self.stats["cache_hits"] += 1
        return found, [q for q, f in zip(queries, found) if f is None]

    def _fill(self, queries: list[str], k: int, found, fetched: list[list[Hit]]) -> list[list[Hit]]:
        it = iter(fetched)
        out = []
        for q, f in zip(queries, found):
            if f is None:
                f = next(it)
                if self.cache_size > 0:
                    self._cache[(q, k)] = f
                    if len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
            out.append(f)
        return out

    # -- the Retriever protocol ---------------------------------------------------
    async def asearch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """Search, sharing one request with other concurrent callers (when ``micro_batch``)."""
        queries = self._check(queries, k)
        found, missing = self._cached(queries, k)
        if not missing:
            return self._fill(queries, k, found, [])
        if self.micro_batch:
            fetched = await self.batcher.submit(missing, k)
        else:
            fetched = []
            for s in range(0, len(missing), self.max_batch):
                fetched += await self._apost(missing[s:s + self.max_batch], k)
        return self._fill(queries, k, found, fetched)

    def search(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        """Blocking search: one request per ``max_batch`` queries."""
        queries = self._check(queries, k)
        found, missing = self._cached(queries, k)
        fetched = []
        for s in range(0, len(missing), self.max_batch):
            fetched += self._post(missing[s:s + self.max_batch], k)
        return self._fill(queries, k, found, fetched)

    def health(self) -> dict:
        """The server's ``GET /health`` answer (raises ``RetrieverError`` if unreachable)."""
        import httpx

        try:
            resp = httpx.get(self.base_url + "/health", timeout=self._httpx_timeout())
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as e:
            raise RetrieverError(f"retrieval server {self.base_url} is not healthy: {e}") from e

    def probe(self) -> dict:
        """``probe_service`` on this client's server, with its request timeout."""
        return probe_service(self.base_url, timeout=self._timeout[0])

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
