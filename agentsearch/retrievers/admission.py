"""Admission control for ``agentsearch serve``: a bound on the work admitted and not yet
answered, past which a request is shed at once with 503 and a ``Retry-After``.

Without it the server queues without bound: every request becomes a search task waiting
for the worker threads, so a storm of 4,000 requests is 4,000 queued searches, each holding
its body and its answer, answered minutes later to callers that have long since timed out
and retried (which is more load). With it, work past the bound is refused in microseconds,
and the callers are told when to come back.

The bound is counted in **queries**, the unit of work: a search costs about the same per
query whatever the request holds, so queries in flight divided by the measured service rate
is the backlog in seconds, which is what ``Retry-After`` reports. A bound in requests alone
would let 512 Search-R1-sized requests (16,384 queries each, 8M queries: hours of work) in.
But a request's queries are known only once its body is read, and a body must not be read
before admission (else a storm of 64 MiB bodies is read into memory first, to be refused),
so admission takes two steps:

1. ``enter(body_bytes)``, before the body is read: the request takes a slot among
   ``max_requests`` (this is what sheds a storm of many small requests), one query unit
   (every request is at least one query's work), and its declared ``Content-Length`` from
   ``max_body_bytes`` (what bounds the bodies being read and held). A chunked body, with
   no length declared, reserves 64 KiB and ``grow_body`` charges the rest as it arrives.
2. ``admit(ticket, n)``, once the body is parsed: the request's other ``n - 1`` query units
   (this is what sheds a storm of few huge requests).

``leave(ticket)`` (in a ``finally``) gives everything back and counts the request's queries
as served. The defaults (``server.Limits``) take 256 concurrent single-query clients and
Search-R1's trainer (one request of up to 16,384 queries) together: 512 requests,
16,384 + 512 queries, 4 bodies of the size limit. Each bound is at least one largest
request, so a request alone is always admitted.

``Retry-After``: queries in flight / service rate, in whole seconds, 1..60. The service rate
is queries served per second *while busy* (idle time is not counted, else a quiet hour
would make the server look slow), an average over windows of at least a second of busy time.

Everything runs on the server's event loop (one thread), so there are no locks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Admission", "Overloaded", "Ticket"]

RETRY_AFTER_MIN_S, RETRY_AFTER_MAX_S = 1, 60
_RATE_WINDOW_S = 1.0  # busy seconds per service-rate sample


class Overloaded(Exception):
    """A request shed by admission control: answer 503 with ``Retry-After: retry_after``."""

    def __init__(self, detail: str, retry_after: int, reason: str):
        super().__init__(detail)
        self.detail, self.retry_after, self.reason = detail, retry_after, reason


@dataclass
class Ticket:
    """What one admitted request holds until ``leave``."""

    body_bytes: int
    queries: int = 1


class Admission:
    """The bounds and counters of one server (module notes). ``clock`` is for tests."""

    def __init__(self, max_requests: int, max_queries: int, max_body_bytes: int,
                 clock: Callable[[], float] = time.monotonic):
        if min(max_requests, max_queries, max_body_bytes) < 1:
            raise ValueError("admission bounds must be >= 1")
        self.max_requests, self.max_queries = max_requests, max_queries
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self.requests = self.queries = self.body_bytes = 0  # in flight now
        self.peak_requests = self.peak_queries = 0
        self.admitted = 0
        self.shed = {"requests": 0, "queries": 0, "body_bytes": 0}
        self.served_queries = 0
        self._busy_s = 0.0  # busy seconds not yet folded into the rate
        self._busy_since: float | None = None
        self._window_queries = 0
        self._rate: float | None = None  # queries per busy second

    # -- the two steps --------------------------------------------------------------
    def enter(self, body_bytes: int) -> Ticket:
        """Admit a request whose body (``body_bytes`` declared) is not read yet, or raise
        ``Overloaded``."""
        if self.requests + 1 > self.max_requests:
            self._shed("requests", f"{self.requests} requests in flight, the bound",
                       "--max-inflight")
        if self.queries + 1 > self.max_queries:
            self._shed("queries", f"{self.queries:,} queries in flight, the bound",
                       "--max-inflight-queries")
        if self.requests and self.body_bytes + body_bytes > self.max_body_bytes:
            self._shed("body_bytes", f"{self.body_bytes:,} body bytes in flight and this request's "
                                     f"{body_bytes:,} would pass the bound of "
                                     f"{self.max_body_bytes:,}",
                       "--max-inflight-body-mb")
        if self.requests == 0:
            self._busy_since = self._clock()
        self.requests += 1
        self.queries += 1
        self.body_bytes += body_bytes
        self.peak_requests = max(self.peak_requests, self.requests)
        self.peak_queries = max(self.peak_queries, self.queries)
        self.admitted += 1
        return Ticket(body_bytes)

    def grow_body(self, ticket: Ticket, size: int) -> None:
        """``size`` bytes of the body have arrived: charge what passes its reservation, or
        raise ``Overloaded`` (a chunked body that turns out large while others are held)."""
        more = size - ticket.body_bytes
        if more <= 0:
            return
        if self.requests > 1 and self.body_bytes + more > self.max_body_bytes:
            self._shed("body_bytes", f"{self.body_bytes:,} body bytes in flight and this request's "
                                     f"body would pass the bound of {self.max_body_bytes:,}",
                       "--max-inflight-body-mb")
        self.body_bytes += more
        ticket.body_bytes = size

    def admit(self, ticket: Ticket, n_queries: int) -> None:
        """The request's body holds ``n_queries``: take the rest of its query units, or
        raise ``Overloaded`` (the caller still calls ``leave``)."""
        more = max(1, n_queries) - ticket.queries
        if more > 0 and self.queries + more > self.max_queries:
            self._shed("queries", f"{self.queries:,} queries in flight and this request's "
                                  f"{n_queries:,} would pass the bound of {self.max_queries:,}",
                       "--max-inflight-queries")
        if more > 0:
            self.queries += more
            ticket.queries += more
            self.peak_queries = max(self.peak_queries, self.queries)

    def leave(self, ticket: Ticket, served: bool = True) -> None:
        """The request is answered (or failed): give back what it held; ``served`` counts its
        queries toward the service rate."""
        self.requests -= 1
        self.queries -= ticket.queries
        self.body_bytes -= ticket.body_bytes
        if served:
            self.served_queries += ticket.queries
            self._window_queries += ticket.queries
        now = self._clock()
        if self._busy_since is not None:
            self._busy_s += now - self._busy_since
            self._busy_since = now if self.requests else None
        if self._busy_s >= _RATE_WINDOW_S:
            sample = self._window_queries / self._busy_s
            self._rate = sample if self._rate is None else 0.5 * self._rate + 0.5 * sample
            self._busy_s, self._window_queries = 0.0, 0

    # -- estimates and reporting ----------------------------------------------------
    def service_rate(self) -> float | None:
        """Queries served per busy second (None before the first measurement)."""
        if self._rate is not None:
            return self._rate
        busy = self._busy_s + (self._clock() - self._busy_since if self._busy_since is not None
                               else 0.0)
        return self._window_queries / busy if busy > 0.05 and self._window_queries else None

    def retry_after(self) -> int:
        """Whole seconds until the work in flight is done at the measured rate, 1..60."""
        rate = self.service_rate()
        if not rate:
            return RETRY_AFTER_MIN_S
        return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(self.queries / rate))))

    def _shed(self, reason: str, what: str, flag: str) -> None:
        self.shed[reason] += 1
        wait = self.retry_after()
        raise Overloaded(f"server overloaded: {what} ({flag}); retry after {wait} s, or restart "
                         f"`agentsearch serve` with a larger {flag}", wait, reason)

    def snapshot(self) -> dict:
        """The bounds, what is in flight now, peaks and counters (``GET /health``)."""
        rate = self.service_rate()
        return {"max_inflight": self.max_requests, "max_inflight_queries": self.max_queries,
                "max_inflight_body_bytes": self.max_body_bytes,
                "inflight": self.requests, "inflight_queries": self.queries,
                "inflight_body_bytes": self.body_bytes,
                "peak_inflight": self.peak_requests, "peak_inflight_queries": self.peak_queries,
                "admitted": self.admitted, "shed": dict(self.shed),
                "shed_total": sum(self.shed.values()), "served_queries": self.served_queries,
                "service_rate_qps": None if rate is None else round(rate, 1),
                "retry_after_s": self.retry_after()}
