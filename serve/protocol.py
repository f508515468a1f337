"""The HTTP/1.1 connection protocol for ``toolrank serve``: uvicorn's h11 protocol with bounds
against slow and numerous clients.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) and the size of a header
block (h11's ``max_incomplete_event_size``), but nothing bounds the *time* a client may take to
send its headers or its body, nor the number of open connections: a client that sends one byte
every few seconds keeps a socket (a file descriptor) forever, and ~1,000 of them exhaust a worker.
:class:`BoundedH11Protocol` adds, per connection:

* a **header deadline**: the request line and headers must arrive within ``header_timeout_s`` of
  the connection opening (or of the previous response on a kept-alive connection); past it the
  server answers ``408`` and closes;
* a **body deadline**: the body must arrive within ``body_timeout_s`` (plus a second's grace: the
  app's own middleware answers 408 first when it is reading the body); past it, the connection closes;
* a **connection cap**: at most ``max_connections`` open connections per worker. At the cap a new
  connection evicts the connection that has waited longest for its client (still sending headers
  or a body, or idle between requests); connections whose request is being answered are never
  evicted. So slow clients cannot lock out fast ones, and the worker never runs out of descriptors;
* ``TCP_NODELAY`` on every accepted TCP socket (asyncio sets it only when the listening socket was
  created with ``proto=IPPROTO_TCP``, which uvicorn's ``--workers`` socket is not: each small
  response then waited ~40 ms for a delayed ACK).

:func:`install_quiet_accept_errors` rate-limits the event loop's error log, which otherwise writes
``socket.accept() out of system resource`` thousands of times a second when descriptors run out.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionBounds", "BoundedH11Protocol", "install_quiet_accept_errors", "RateLimitedLog", "set_nodelay"]

log = logging.getLogger(__name__)

_TIMEOUT_BODY = b'{"error": {"code": "request_timeout", "message": "the request headers did not arrive in time"}}'
_REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))
_BUSY_BODY = b'{"error": {"code": "overloaded", "message": "too many open connections; retry in a second"}}'
_UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


@dataclass(frozen=True)
class ConnectionBounds:
    """Per-worker connection bounds (see the module docstring)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000

    def __post_init__(self) -> None:
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0 and self.max_connections >= 1):
            raise ValueError(f"connection bounds must be positive, got {self}")


def set_nodelay(sock: Any) -> None:
    """Turn Nagle's algorithm off on a TCP socket (a no-op for other sockets)."""
    if sock is None or getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # the peer already left
        pass


class BoundedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` with header/body deadlines, a connection cap and TCP_NODELAY.

    uvicorn builds it as ``protocol(config=..., server_state=..., app_state=...)``; pass it as
    ``http=functools.partial(BoundedH11Protocol, bounds=ConnectionBounds(...))``.
    """

    def __init__(self, *args: Any, bounds: ConnectionBounds | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bounds = bounds or ConnectionBounds()
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None   # "headers" or "body": what the client still owes
        self._waiting_since = 0.0

    # ------------------------------------------------------------------ connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport.get_extra_info("socket"))
        full = len(self.connections) >= self.bounds.max_connections and not self._evict_one()
        super().connection_made(transport)
        if full:  # every connection is being answered: refuse this one rather than exceed the cap
            _EVICTIONS.warn("connection cap of %d reached with every connection busy: refused a new one",
                            self.bounds.max_connections)
            transport.write(_UNAVAILABLE)
            transport.close()
            return
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    # ------------------------------------------------------------------ deadlines

    def _owed(self) -> str | None:
        """What the client still has to send: 'headers', 'body', or None (request complete)."""
        if self.transport is None or self.transport.is_closing():
            return None
        state = self.conn.their_state
        if state is h11.IDLE:
            return "headers"
        if state is h11.SEND_BODY:
            return "body"
        return None

    def _track(self) -> None:
        owed = self._owed()
        if owed == self._waiting_for:
            return
        self._cancel_deadline()
        self._waiting_for = owed
        self._waiting_since = time.monotonic()
        if owed == "headers":
            self._deadline = self.loop.call_later(self.bounds.header_timeout_s, self._expired, "headers")
        elif owed == "body":
            self._deadline = self.loop.call_later(self.bounds.body_timeout_s + 1.0, self._expired, "body")

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str) -> None:
        self._deadline = None
        if self.transport is None or self.transport.is_closing() or self._owed() != what:
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        if what == "headers" and not answering:
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()

    # ------------------------------------------------------------------ the cap

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for its client (never one being answered)."""
        oldest: BoundedH11Protocol | None = None
        for other in self.connections:
            if not isinstance(other, BoundedH11Protocol) or other._owed() is None:
                continue
            if other.cycle is not None and not other.cycle.response_complete and other._owed() == "headers":
                continue  # a pipelined request arriving while one is answered
            if oldest is None or other._waiting_since < oldest._waiting_since:
                oldest = other
        if oldest is not None:
            _EVICTIONS.warn("connection cap of %d reached: closed the connection that waited longest for its "
                            "client (%s)", self.bounds.max_connections, oldest._waiting_for)
            oldest.transport.close()
            oldest.connections.discard(oldest)  # connection_lost follows on the next loop turn
        return oldest is not None


class RateLimitedLog:
    """Log a repeated warning at most once per ``every_s`` seconds, with how many were suppressed."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0, clock: Any = time.monotonic):
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def admit(self, key: str) -> int | None:
        """None when ``key`` was let through less than ``every_s`` ago (counted as suppressed); else
        the number suppressed since it was last let through."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)

    def note(self, skipped: int) -> str:
        return f" ({skipped} more like it since were not logged)" if skipped else ""

    def warn(self, msg: str, *args: Any, key: str | None = None) -> bool:
        """Log ``msg % args`` unless the same ``key`` (default: ``msg``) was logged less than ``every_s``
        ago; returns whether it logged."""
        skipped = self.admit(msg if key is None else key)
        if skipped is None:
            return False
        self.logger.warning(msg + self.note(skipped).replace("%", "%%"), *args)
        return True


_EVICTIONS = RateLimitedLog(log)


def install_quiet_accept_errors(loop: asyncio.AbstractEventLoop, every_s: float = 10.0) -> RateLimitedLog:
    """Rate-limit the event loop's error reports (e.g. ``socket.accept() out of system resource``,
    reported on every accept attempt while descriptors run out) to one per kind per ``every_s``;
    the ones let through go to asyncio's default handler, traceback included."""
    limited = RateLimitedLog(logging.getLogger("asyncio"), every_s)

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "event loop error"))
        skipped = limited.admit(message)
        if skipped is None:
            return
        loop.default_exception_handler({**context, "message": message + limited.note(skipped)})

    loop.set_exception_handler(handler)
    return limited
