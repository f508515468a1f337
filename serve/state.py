"""What one app instance shares between its routes: the settings, tenants, metrics, the engine
once it is ready, the scorer's status, admission control and rate limits, and the usage book.

The app keeps one :class:`ServiceState` in ``app.state.toolrank``; routes reach it through the
:func:`serve.deps.state_of` dependency, never through module globals.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Callable

import anyio
from fastapi import Request

from .admission import Admission, QueueFull, RateLimiter, WaitTimedOut
from .engine import Engine
from .errors import ServiceError
from .metrics import Metrics
from .settings import Settings
from .tenants import Tenants
from .usage import UsageBook
from .work import WorkCancelled, WorkToken, run_with

__all__ = ["ServiceState"]


class ServiceState:
    """Per-app state: status, engine, scorer status, the admission queue and rate limits, usage."""

    def __init__(self, settings: Settings, tenants: Tenants | None, metrics: Metrics, usage: UsageBook):
        self.settings = settings
        self.tenants = tenants
        self.metrics = metrics
        self.status = "loading"
        self.detail = "loading the index and the model"
        self.engine: Engine | None = None
        self.scorer: dict[str, Any] = {}
        self.notes: dict[str, str] = {}   # what /readyz adds to its detail (fallbacks, background work)
        self.admission = Admission(settings.max_concurrency, settings.max_queue, settings.max_queue_wait_s)
        self.rates = RateLimiter()
        self.usage = usage   # learning from use (docs/day-one.md)
        self.calibration_jobs: Any = None   # the catalog's calibration (serve.calibration), made on first use
        self.auditor: Any = None            # audits of a share of searches (serve.audits), when asked for

    async def run(self, request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run blocking pipeline work in a thread, under the worker's admission control.

        At most ``max_concurrency`` calls run at once and ``max_queue`` wait; the request's
        deadline (``request_timeout_s``) covers the wait and the work. When the client hangs
        up, or the deadline passes, the work stops at its next checkpoint (the real scorer
        checks before every batch) and a request still waiting leaves the queue.

        Raises:
            ServiceError: 503 (queue full, deadline passed) with Retry-After, or 499 (client gone).
        """
        token = WorkToken(time.monotonic() + self.settings.request_timeout_s)
        gone = asyncio.Event()

        async def watch() -> None:  # the body has been read: the next message can only be a disconnect
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    token.cancel("disconnected")
                    gone.set()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await self._admit(token, gone)
            started = time.monotonic()
            try:
                return await anyio.to_thread.run_sync(functools.partial(run_with, token, fn, *args, **kwargs))
            except WorkCancelled as exc:
                raise self._stopped(exc.reason) from None
            finally:
                self.admission.release(time.monotonic() - started)
        finally:
            watcher.cancel()

    async def _admit(self, token: WorkToken, gone: asyncio.Event) -> None:
        acquire = asyncio.ensure_future(self.admission.acquire(token.remaining()))
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({acquire, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            if not acquire.done():
                acquire.cancel()
                try:
                    await acquire
                except asyncio.CancelledError:
                    pass
                else:  # got the slot just as the client left: give it back
                    self.admission.release()
        if acquire.cancelled():
            raise self._stopped("disconnected")
        try:
            acquire.result()
        except QueueFull as exc:
            self.metrics.rejections.labels("queue_full").inc()
            # No counts: they add up every tenant's requests, which no tenant should be able to watch.
            raise ServiceError(503, "overloaded", f"the service is at capacity; retry after {exc.retry_after} s",
                               headers={"Retry-After": str(exc.retry_after)}) from None
        except WaitTimedOut:
            raise self._stopped("deadline") from None
        if token.reason is not None:  # the client left while the slot was being handed over
            self.admission.release()
            raise self._stopped(token.reason)

    def _stopped(self, reason: str) -> ServiceError:
        if reason == "disconnected":
            self.metrics.rejections.labels("client_gone").inc()
            return ServiceError(499, "client_closed_request", "the client closed the connection; the work was stopped")
        self.metrics.rejections.labels("deadline").inc()
        retry = self.admission.retry_after()
        return ServiceError(503, "deadline_exceeded",
                            f"no answer within the {self.settings.request_timeout_s:g} s deadline (the service is "
                            f"busy); retry after {retry} s, or send fewer candidates",
                            headers={"Retry-After": str(retry)})
