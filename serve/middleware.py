"""ASGI middleware: request context (id, metrics, access log, last-resort 500) and body limits.

Both are plain ASGI so they work the same under uvicorn and under ``httpx.ASGITransport``.
Neither ever reads a request body into a log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from typing import Any, Awaitable, Callable

import numpy as np

from .errors import INTERNAL_ERROR_MESSAGE, error_body
from .metrics import Metrics

__all__ = ["RequestContext", "BodySizeLimit", "json_depth"]

log = logging.getLogger(__name__)
access_log = logging.getLogger("serve.access")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


class RequestContext:
    """Request id, Prometheus counts and latency, one JSON access-log line, and a generic 500.

    The request id comes from a well-formed ``X-Request-ID`` header or is generated; it is
    returned in the ``X-Request-ID`` response header and inside error bodies. An exception that
    escapes the app is logged with its traceback and answered with a 500 that reveals nothing.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                response_started = True
                message = {**message, "headers": [*message.get("headers", []),
                                                   (b"x-request-id", request_id.encode())]}
            await send(message)

        gone = False

        async def receive_wrapper() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
            if not response_started and gone:  # the client hung up before any answer: not a server error
                status = 499
        except Exception:
            route = getattr(scope.get("route"), "path", "unmatched")
            log.exception("unhandled error on %s %s (request_id %s)", scope.get("method"), route, request_id)
            status = 500
            if not response_started:
                body = error_body("internal_error", INTERNAL_ERROR_MESSAGE, None, request_id=request_id)
                await _send_json(send, 500, body, [(b"x-request-id", request_id.encode())])
        finally:
            elapsed = time.perf_counter() - started
            endpoint = getattr(scope.get("route"), "path", "unmatched")
            method = scope.get("method", "")
            self.metrics.requests.labels(endpoint, method, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(elapsed)
            tenant = scope.get("state", {}).get("tenant")
            access_log.info("%s %s %d", method, endpoint, status, extra={
                "method": method, "endpoint": endpoint, "status": status,
                "duration_ms": round(elapsed * 1000, 2), "request_id": request_id, "tenant": tenant,
            })


# A JSON string: a quote, then anything but quotes and backslashes, or escaped characters.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(body: bytes) -> int:
    """How deeply the brackets of a JSON text nest, strings skipped; linear, no recursion.

    For invalid JSON the figure is meaningless but harmless (the parser refuses it anyway).
    """
    if b"[" not in body and b"{" not in body:
        return 0
    bare = _JSON_STRING.sub(b"", body)
    steps = _OPEN[np.frombuffer(bare, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def duplicate_key(body: bytes) -> str | None:
    """The first key that appears twice in one object of a JSON body (None when there is none, or
    when the body is not JSON: the parser after this reports that). Without this check the last
    value would silently win, and a proxy or log reading the first would see another request."""
    if b'"' not in body or (b"{" not in body):
        return None
    try:
        json.loads(body, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        return str(exc.args[0])[:200]
    except (ValueError, RecursionError):  # not JSON, or too deep (the depth check answers)
        return None
    return None


class BodySizeLimit:
    """Refuse bodies above ``max_bytes`` with a 413, before any parsing, JSON nested deeper
    than ``max_depth`` or with a key repeated in one object with a 422 (so no parser recurses as
    deep as a hostile body asks), and a body not received within ``timeout_s`` with a 408.

    A declared ``Content-Length`` above the limit is refused at once; otherwise the body is read
    (up to the limit) and replayed to the app, so chunked uploads are bounded too.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int | None = None, depth_hint: str = "",
                 timeout_s: float | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.depth_hint = depth_hint
        self.timeout_s = timeout_s

    def _too_large(self, size: str) -> dict[str, Any]:
        return error_body(
            "body_too_large",
            f"request body is {size} bytes; the limit is {self.max_bytes} bytes: send fewer candidates or tools, "
            "or shorter texts",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_json(send, 413, self._too_large(declared))
            return
        chunks: list[bytes] = []
        size = 0
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), None if deadline is None else
                                                 max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                text = (f"the request body did not arrive within {self.timeout_s:g} s "
                        f"({size} bytes received); send it at once")
                await _send_json(send, 408, error_body("request_timeout", text), [(b"connection", b"close")])
                return
            if message["type"] != "http.request":  # client went away: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_json(send, 413, self._too_large(f"more than {self.max_bytes}"))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if self.max_depth is not None:
            depth = json_depth(body)
            if depth > self.max_depth:
                message = f"body: JSON nested {depth} levels deep; the limit is {self.max_depth}{self.depth_hint}"
                await _send_json(send, 422, error_body("invalid_request", message, None,
                                                       fields=[{"path": "body", "message": message}]))
                return
        duplicate = duplicate_key(body)
        if duplicate is not None:
            message = f"body: key {duplicate!r} appears twice in one JSON object; send each key once"
            await _send_json(send, 422, error_body("invalid_request", message, None,
                                                   fields=[{"path": "body", "message": message}]))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
