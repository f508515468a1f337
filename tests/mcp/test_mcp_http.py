"""`toolrank mcp --http HOST:PORT`: the same gateway over streamable HTTP, driven by the SDK's
streamable HTTP client; a streamable HTTP backend is forwarded to as well."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client as _client

from mcp_helpers import FAKES, SERVERS, free_port, payload, server, start, stop, text, toolrank_args, write_config
from testkit import wait_until

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def gateway_session(port: int) -> AsyncIterator[ClientSession]:
    """An initialized session with the gateway at ``port``, through the SDK's streamable HTTP client
    sending the gateway's bearer token."""
    http = httpx.AsyncClient(headers=AUTH, timeout=httpx.Timeout(30, read=300))
    async with _client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write, _):
        async with ClientSession(read, write) as gw:
            await gw.initialize()
            yield gw


def test_gateway_over_streamable_http(tmp_path):
    backend_port, port = free_port(), free_port()
    backend = start([str(SERVERS / "weather.py"), "--http", str(backend_port)], tmp_path, backend_port)
    cfg = write_config(tmp_path / "mcp.json", {
        "weather": {"url": f"http://127.0.0.1:{backend_port}/mcp"}, "notes": server("notes"),
        "slow": server("slow", "--mark", str(tmp_path / "slow.mark"))})
    gateway = start(toolrank_args("mcp", "--mcp-config", str(cfg), "--http", f"127.0.0.1:{port}",
                                  "--token", TOKEN, "--components", FAKES), tmp_path, port)

    async def session_checks() -> None:
        async with gateway_session(port) as gw:
            assert {t.name for t in (await gw.list_tools()).tools} == {"find_tools", "call_tool", "describe_tool"}
            found = payload(await gw.call_tool("find_tools", {"request": "get the weather alerts for Texas",
                                                              "need": "get alerts"}))
            assert (found["decision"], found["tools"][0]["server"], found["tools"][0]["name"]) == \
                ("proceed", "weather", "get_alerts")
            alerts = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_alerts",
                                                      "arguments": {"region": "Texas"}})
            assert alerts.structuredContent == {"region": "Texas", "alerts": ["heat wave warning for Texas"]}
            note = await gw.call_tool("call_tool", {"server": "notes", "tool": "create_note",
                                                    "arguments": {"title": "a", "body": "b"}})
            assert text(note) == "note 1 created"
            refused = await gw.call_tool("call_tool", {"server": "shell", "tool": "run", "arguments": {}})
            assert refused.isError and "refused" in text(refused)

    try:
        anyio.run(session_checks)
        # A second client shares the same gateway (and the notes server's state).
        async def second() -> None:
            async with gateway_session(port) as gw:
                found = await gw.call_tool("call_tool", {"server": "notes", "tool": "search_notes",
                                                         "arguments": {"query": "a"}})
                assert found.structuredContent == {"result": ["a"]}
        anyio.run(second)

        # The HTTP backend goes away mid-session: a clear error at once, and back when it is.
        stop(backend)

        async def backend_gone() -> None:
            async with gateway_session(port) as gw:
                with anyio.fail_after(60):      # a bound, not a measurement: the answer says it was not reached
                    gone = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                            "arguments": {"city": "Oslo"}})
                assert gone.isError and "weather" in text(gone) and "cannot reach" in text(gone)
                found = payload(await gw.call_tool("find_tools", {"request": "create note about milk"}))
                assert found["tools"][0]["name"] == "create_note"                 # still answering
        anyio.run(backend_gone)
        backend = start([str(SERVERS / "weather.py"), "--http", str(backend_port)], tmp_path, backend_port)

        async def backend_back() -> None:
            async with gateway_session(port) as gw:
                back = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                        "arguments": {"city": "Oslo"}})
                assert not back.isError and text(back).startswith("Oslo: sunny")
        anyio.run(backend_back)
        # DNS-rebinding protection: a request naming another host is turned away.
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={"Host": "evil.example:80", **AUTH}, json={})
        assert r.status_code in (400, 403, 421)
        # Without the bearer token (or with another), nothing is answered.
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
            r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={"Accept": "application/json, text/event-stream",
                                                                   **headers}, json=init)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), headers
        # A client that goes away mid-call is not an ERROR with a traceback.
        with httpx.Client(headers={"Accept": "application/json, text/event-stream", **AUTH}) as c:
            r = c.post(f"http://127.0.0.1:{port}/mcp", json=init)
            sid = r.headers.get("mcp-session-id")
            extra = {"mcp-session-id": sid} if sid else {}
            c.post(f"http://127.0.0.1:{port}/mcp", headers=extra,
                   json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            try:
                c.post(f"http://127.0.0.1:{port}/mcp", headers=extra, timeout=0.5, json={
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                        "name": "call_tool", "arguments": {"server": "slow", "tool": "wait",
                                                           "arguments": {"seconds": 3}}}})
            except httpx.TimeoutException:
                pass
        wait_until(lambda: "answered" in (tmp_path / "slow.mark").read_text(errors="replace")
                   if (tmp_path / "slow.mark").exists() else False,
                   "the abandoned call finishing, with nobody to answer")
        time.sleep(0.5)                                          # the gateway writes its answer to nobody
        log = (tmp_path / f"proc-{port}.log").read_text()
        assert "Traceback" not in log and "ERROR" not in log, log
        assert "clients must send the header 'Authorization: Bearer TOKEN'" in log
        assert TOKEN not in log                                  # a token the user gave is not echoed
    finally:
        stop(gateway)
        stop(backend)


def test_http_token_by_default_and_port_in_use(tmp_path, capsys, monkeypatch):
    """--http makes a bearer token (kept in the cache, 0600) and prints how to use it; a port in use
    is said at once, before any server starts."""
    import socket

    from serve.commands import main as toolrank
    from serve.mcp_server import _token, build_parser, token_path

    monkeypatch.setenv("TOOLRANK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TOOLRANK_MCP_TOKEN", raising=False)
    a = build_parser().parse_args(["--http", "127.0.0.1:1"])
    first, given = _token(a)
    assert len(first) >= 32 and _token(a) == (first, False) and not given   # made once, then reused
    assert token_path().stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("TOOLRANK_MCP_TOKEN", "short")
    with pytest.raises(ValueError, match="at least 16 characters"):
        _token(a)
    monkeypatch.delenv("TOOLRANK_MCP_TOKEN")

    cfg = write_config(tmp_path / "mcp.json", {"crashy": server("crashy")})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert toolrank(["mcp", "--mcp-config", str(cfg), "--http", f"127.0.0.1:{port}", "--components", FAKES]) == 2
    err = capsys.readouterr().err
    assert f"--http 127.0.0.1:{port}: cannot listen there: the port is in use" in err and "Traceback" not in err
    assert toolrank(["mcp", "--mcp-config", str(cfg), "--token", "x" * 20, "--components", FAKES]) == 2
    assert "--token and --no-token go with --http" in capsys.readouterr().err


def test_http_prints_how_to_use_the_token(tmp_path):
    port = free_port()
    cfg = write_config(tmp_path / "mcp.json", {"notes": server("notes")})
    proc = start(toolrank_args("mcp", "--mcp-config", str(cfg), "--http", f"127.0.0.1:{port}",
                               "--components", FAKES), tmp_path, port)
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", json={})
        assert r.status_code == 401
    finally:
        stop(proc)
    log = (tmp_path / f"proc-{port}.log").read_text()
    token = (tmp_path / "cache" / "mcp-http-token").read_text().strip()
    assert f"serving MCP (streamable HTTP) at http://127.0.0.1:{port}/mcp" in log
    assert "clients must send the header 'Authorization: Bearer TOKEN'" in log
    assert f'"headers": {{"Authorization": "Bearer {token}"}}' in log
