"""Overload control for one worker: a bounded queue in front of the pipeline, per-tenant rates.

:class:`Admission` lets ``slots`` pipeline calls run at once and at most ``queue`` more wait;
a request that finds the queue full, or whose expected wait (from the recent duration of
calls) is over ``max_wait_s``, is refused at once (503 with ``Retry-After``) rather than
waiting behind work the worker cannot finish in time: latency stays bounded whatever the
offered load. A request that waits past its deadline, or whose client hangs up while it
waits, leaves the queue without running.

:class:`RateLimiter` is a token bucket per tenant (429 with ``Retry-After`` when empty).
Both are per worker process: with W workers a tenant gets up to W times its rate.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time

__all__ = ["Admission", "QueueFull", "WaitTimedOut", "RateLimiter"]


class QueueFull(Exception):
    """Every slot is busy and the queue is full."""

    def __init__(self, retry_after: int):
        super().__init__(f"queue full; retry after {retry_after} s")
        self.retry_after = retry_after


class WaitTimedOut(Exception):
    """The request's deadline passed while it waited for a slot."""


class Admission:
    """At most ``slots`` holders at once, at most ``queue`` waiting (FIFO).

    Args:
        slots: pipeline calls run at once.
        queue: requests that may wait for a slot; 0 refuses whatever finds every slot busy.
        max_wait_s: refuse a request whose expected wait is longer (None: only ``queue`` bounds it).
    """

    def __init__(self, slots: int, queue: int, max_wait_s: float | None = None):
        if slots < 1 or queue < 0 or (max_wait_s is not None and max_wait_s <= 0):
            raise ValueError(f"slots must be >= 1, queue >= 0 and max_wait_s > 0, got {slots}, {queue}, {max_wait_s}")
        self.slots = slots
        self.queue = queue
        self.max_wait_s = max_wait_s
        self._sem: asyncio.Semaphore | None = None
        self._running = 0
        self._waiting = 0
        self._service_s = 0.25  # moving average of one call's duration, for Retry-After

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    def expected_wait(self) -> float:
        """Seconds a request arriving now would likely wait for a slot."""
        if self._running < self.slots and not self._waiting:
            return 0.0
        return (self._waiting + 1) / self.slots * self._service_s

    def retry_after(self) -> int:
        """Seconds until the queue has likely drained enough to take one more request."""
        backlog = (self._waiting + self._running + 1) / self.slots
        return int(min(60, max(1, math.ceil(backlog * self._service_s))))

    async def acquire(self, timeout: float) -> None:
        """Wait for a slot for at most ``timeout`` seconds.

        Raises:
            QueueFull: every slot is busy and ``queue`` requests already wait.
            WaitTimedOut: no slot within ``timeout``.
            asyncio.CancelledError: the caller was cancelled while waiting (nothing held).
        """
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        if self._sem.locked() or self._waiting:
            if self._waiting >= self.queue or (self.max_wait_s is not None
                                               and self.expected_wait() > self.max_wait_s):
                raise QueueFull(self.retry_after())
        self._waiting += 1
        try:
            await asyncio.wait_for(self._sem.acquire(), timeout=max(timeout, 0.0))
        except asyncio.TimeoutError:
            raise WaitTimedOut() from None
        finally:
            self._waiting -= 1
        self._running += 1

    def release(self, seconds: float | None = None) -> None:
        """Give the slot back; ``seconds``: how long the call held it (feeds ``Retry-After``)."""
        assert self._sem is not None and self._running > 0, "release() without acquire()"
        self._running -= 1
        if seconds is not None:
            self._service_s = 0.8 * self._service_s + 0.2 * max(seconds, 0.0)
        self._sem.release()


class RateLimiter:
    """Token buckets: ``rate`` requests a second, bursts of up to ``burst``, per key."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill time)
        self._lock = threading.Lock()

    def take(self, key: str, rate: float, burst: int, now: float | None = None) -> float:
        """Take one token; returns 0.0 when allowed, else the seconds until one is available."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(key, (float(burst), now))
            tokens = min(float(burst), tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / rate
