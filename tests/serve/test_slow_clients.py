"""Issue 24, point 1 (and TCP_NODELAY, client hang-ups): slow clients cannot hold the service.

A real uvicorn server runs in a thread on 127.0.0.1 with the protocol ``toolrank serve`` uses.
Timeouts below are generous upper bounds for noticing a closed socket, never speed assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import uvicorn

from serve.app import create_app
from serve.protocol import BoundedH11Protocol, ConnectionBounds, RateLimitedLog, install_quiet_accept_errors
from serve.settings import Settings
from serve_fakes import FakeIndex, FakePipeline, demo_catalog
from testkit import WAIT_S, wait_until

WAIT = 15.0  # how long to wait for something that must happen (a bound, not a measurement)


@contextlib.contextmanager
def serving(tmp_path: Path, bounds: ConnectionBounds, **settings) -> Iterator[tuple[uvicorn.Server, str, int]]:
    app = create_app(Settings(auth_disabled=True, index_dir=tmp_path / "store", **settings),
                     pipeline=FakePipeline(FakeIndex(demo_catalog())))
    # Like uvicorn --workers: a listening socket made without proto=IPPROTO_TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http=functools.partial(BoundedH11Protocol, bounds=bounds),  # type: ignore[arg-type]
                            log_config=None, lifespan="on", timeout_keep_alive=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return server.started and httpx.get(f"{base}/readyz", timeout=2).status_code == 200
            return False

        wait_until(ready, "test server started", WAIT_S)
        yield server, base, port
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


def open_partial(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    s.sendall(data)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket.timeout if it never does)."""
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_headers_that_never_finish_get_408_and_a_close(tmp_path):
    with serving(tmp_path, ConnectionBounds(header_timeout_s=0.3)) as (_, _, port):
        s = open_partial(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1")  # no blank line, ever
        with s:
            answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer


def test_a_slow_keep_alive_request_has_the_same_header_deadline(tmp_path):
    """After one answer, dripping the next request's headers a byte at a time does not keep the socket."""
    with serving(tmp_path, ConnectionBounds(header_timeout_s=0.5)) as (_, _, port):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            first = b""
            while b'{"status":"ok"}' not in first:
                first += s.recv(65536)
            assert first.startswith(b"HTTP/1.1 200")
            closed_at = time.monotonic() + WAIT
            answer = b""
            with contextlib.suppress(OSError):
                for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 1000:
                    s.sendall(bytes([byte]))  # every 0.1 s: well inside the 5 s keep-alive timeout
                    s.settimeout(0.1)
                    with contextlib.suppress(socket.timeout):
                        chunk = s.recv(65536)
                        answer += chunk
                        if not chunk:
                            break
                    assert time.monotonic() < closed_at, "a dripping client kept the connection"
    assert answer.startswith(b"HTTP/1.1 408")


def test_a_body_that_never_finishes_gets_408(tmp_path):
    with serving(tmp_path, ConnectionBounds(body_timeout_s=0.3), body_timeout_s=0.3) as (_, _, port):
        s = open_partial(port, b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 100\r\n\r\n{\"request\":")
        with s:
            answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.3 s" in answer


def test_a_body_the_app_never_reads_cannot_hold_the_connection(tmp_path):
    """GET with a Content-Length and a dripping body: answered, then closed at the body deadline."""
    with serving(tmp_path, ConnectionBounds(body_timeout_s=0.2)) as (_, _, port):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n12345")
            deadline = time.monotonic() + WAIT
            received, closed = b"", False
            while not closed:
                assert time.monotonic() < deadline, "the connection stayed open with its body unfinished"
                with contextlib.suppress(OSError):
                    s.sendall(b"x")
                s.settimeout(0.1)
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    continue
                received += chunk
                closed = not chunk
    assert received.startswith(b"HTTP/1.1 200")


def test_at_the_connection_cap_the_oldest_slow_client_is_evicted(tmp_path):
    bounds = ConnectionBounds(header_timeout_s=60, max_connections=4)
    with serving(tmp_path, bounds) as (server, base, port):
        slow = []
        for i in range(4):
            slow.append(open_partial(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"))
            wait_until(lambda: len(server.server_state.connections) >= i + 1, "slow connection not registered")
        r = httpx.get(f"{base}/healthz", timeout=WAIT)  # a fifth connection: the oldest slow one makes room
        assert r.status_code == 200
        slow[0].settimeout(WAIT)
        assert slow[0].recv(1) == b"", "the oldest slow connection was not closed"
        for s in slow[1:]:  # the younger ones are still open
            s.settimeout(0.05)
            with pytest.raises(socket.timeout):
                s.recv(1)
        assert len(server.server_state.connections) <= bounds.max_connections
        for s in slow:
            s.close()


def test_accepted_sockets_have_tcp_nodelay(tmp_path):
    """uvicorn --workers listens on a socket made without proto=IPPROTO_TCP, so asyncio never set
    TCP_NODELAY on accepted sockets (each small answer then waited ~40 ms for a delayed ACK)."""
    with serving(tmp_path, ConnectionBounds(header_timeout_s=60)) as (server, _, port):
        with open_partial(port, b"GET /healthz HTTP/1.1\r\n"):
            wait_until(lambda: server.server_state.connections, "connection not registered")
            socks = [c.transport.get_extra_info("socket") for c in list(server.server_state.connections)]
            assert socks and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in socks)


def test_a_client_hanging_up_mid_body_is_not_a_server_error(tmp_path):
    with serving(tmp_path, ConnectionBounds()) as (server, base, port):
        metrics = server.config.loaded_app.app  # uvicorn wraps the app; find ours
        while not hasattr(metrics, "state"):
            metrics = metrics.app
        registry = metrics.state.toolrank.metrics
        s = open_partial(port, b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 100\r\n\r\n{\"request\":")
        s.close()

        def counted() -> list[str]:
            return [line for line in registry.render().decode().splitlines()
                    if line.startswith("toolrank_http_requests_total{") and 'method="POST"' in line]

        wait_until(counted, "the abandoned request was never counted")
    assert all('status="499"' in line for line in counted()), counted()


def test_accept_errors_are_logged_once_per_interval(caplog):
    loop = asyncio.new_event_loop()
    try:
        install_quiet_accept_errors(loop, every_s=60)
        with caplog.at_level(logging.WARNING):
            for _ in range(1000):  # what asyncio reports on every accept attempt while descriptors run out
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(24, "Too many open files")})
            loop.call_exception_handler({"message": "another problem"})
    finally:
        loop.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len([m for m in lines if "socket.accept()" in m]) == 1
    assert any("another problem" in m for m in lines)
    assert any(r.exc_info for r in caplog.records)  # the default handler's traceback is kept


def test_a_rate_limited_log_says_how_many_it_skipped(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t"), every_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        assert limited.warn("disk %s full", "a") and not limited.warn("disk %s full", "a")
        limited.warn("disk %s full", "a")
        now[0] = 11.0
        assert limited.warn("disk %s full", "a")
    assert [r.getMessage() for r in caplog.records] == [
        "disk a full", "disk a full (2 more like it since were not logged)"]
