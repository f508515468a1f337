"""Cancelling pipeline work that nobody waits for any more.

Pipeline calls run in worker threads, which cannot be killed. Instead each call carries a
:class:`WorkToken` (a deadline, and a flag the event loop sets when the client hangs up) and
the heavy part checks it between steps: :func:`checkpoint` raises :class:`WorkCancelled`
once the token is spent. The real scorer checks before every ONNX batch (see
:func:`checkpointed`), so abandoned or overdue work stops within one batch instead of
running to the end and delaying every request queued behind it. The token is a context
variable: batches the scorer runs side by side in its own thread pool get the caller's
context (a plain thread pool would run them with none, and they would never stop).
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any, Callable

__all__ = ["WorkToken", "WorkCancelled", "checkpoint", "run_with", "checkpointed"]


class WorkCancelled(Exception):
    """The work's client went away, or its deadline passed: stop, nobody will read the result."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class WorkToken:
    """A deadline (``time.monotonic()`` seconds) and a cancel flag, shared by the loop and a thread."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self._reason: str | None = None
        self._lock = threading.Lock()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason

    @property
    def reason(self) -> str | None:
        """Why the work should stop ("disconnected", "deadline"), or None while it may go on."""
        if self._reason is None and time.monotonic() >= self.deadline:
            self.cancel("deadline")
        return self._reason

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        reason = self.reason
        if reason is not None:
            raise WorkCancelled(reason)


_current: contextvars.ContextVar[WorkToken | None] = contextvars.ContextVar("toolrank_work_token", default=None)


def checkpoint() -> None:
    """Raise :class:`WorkCancelled` if the work running in this thread should stop; else nothing."""
    token = _current.get()
    if token is not None:
        token.check()


def run_with(token: WorkToken, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` (in the calling thread) with ``token`` visible to :func:`checkpoint`."""
    reset = _current.set(token)
    try:
        token.check()
        return fn(*args, **kwargs)
    finally:
        _current.reset(reset)


class _CheckpointSession:
    """An ONNX session that checks the work token before every ``run`` (one call per batch)."""

    def __init__(self, session: Any):
        self._session = session

    def run(self, *args: Any, **kwargs: Any) -> Any:
        checkpoint()
        return self._session.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class _ContextPool:
    """A thread pool whose tasks run in a copy of the submitting thread's context, so the work
    token (a context variable) reaches the batches a scorer runs side by side."""

    def __init__(self, pool: Any):
        self._pool = pool

    def map(self, fn: Callable[..., Any], *iterables: Any, **kwargs: Any) -> Any:
        calls = [(contextvars.copy_context(), args) for args in zip(*iterables)]   # one context a task
        return self._pool.map(lambda call: call[0].run(fn, *call[1]), calls, **kwargs)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def checkpointed(scorer: Any) -> Any:
    """``scorer`` with a :func:`checkpoint` before each ONNX batch, also in its thread pool when it
    runs batches side by side; results are unchanged (same batches, same order). A scorer without
    an ONNX session is returned as it is."""
    session = getattr(scorer, "_session", None)
    if session is None or not callable(getattr(session, "run", None)):
        return scorer
    if not isinstance(session, _CheckpointSession):
        scorer._session = _CheckpointSession(session)
    pool = getattr(scorer, "_pool", None)
    if pool is not None and not isinstance(pool, _ContextPool):
        scorer._pool = _ContextPool(pool)
    return scorer
