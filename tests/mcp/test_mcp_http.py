"""`toolrank mcp --http HOST:PORT`: the same gateway over streamable HTTP, driven by the SDK's
streamable HTTP client; a streamable HTTP backend is forwarded to as well."""

from __future__ import annotations

import anyio
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mcp_helpers import FAKES, SERVERS, free_port, payload, server, start, stop, text, toolrank_args, write_config


def test_gateway_over_streamable_http(tmp_path):
    backend_port, port = free_port(), free_port()
    backend = start([str(SERVERS / "weather.py"), "--http", str(backend_port)], tmp_path, backend_port)
    cfg = write_config(tmp_path / "mcp.json", {
        "weather": {"url": f"http://127.0.0.1:{backend_port}/mcp"}, "notes": server("notes")})
    gateway = start(toolrank_args("mcp", "--mcp-config", str(cfg), "--http", f"127.0.0.1:{port}",
                                  "--components", FAKES), tmp_path, port)

    async def session_checks() -> None:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, _):
            async with ClientSession(read, write) as gw:
                await gw.initialize()
                assert {t.name for t in (await gw.list_tools()).tools} == {"find_tools", "call_tool"}
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
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, _):
                async with ClientSession(read, write) as gw:
                    await gw.initialize()
                    found = await gw.call_tool("call_tool", {"server": "notes", "tool": "search_notes",
                                                             "arguments": {"query": "a"}})
                    assert found.structuredContent == {"result": ["a"]}
        anyio.run(second)

        # The HTTP backend goes away mid-session: a clear error at once, and back when it is.
        stop(backend)

        async def backend_gone() -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, _):
                async with ClientSession(read, write) as gw:
                    await gw.initialize()
                    with anyio.fail_after(5):                   # never the 120 s call timeout
                        gone = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                                "arguments": {"city": "Oslo"}})
                    assert gone.isError and "weather" in text(gone) and "cannot reach" in text(gone)
                    found = payload(await gw.call_tool("find_tools", {"request": "create note about milk"}))
                    assert found["tools"][0]["name"] == "create_note"                 # still answering
        anyio.run(backend_gone)
        backend = start([str(SERVERS / "weather.py"), "--http", str(backend_port)], tmp_path, backend_port)

        async def backend_back() -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, _):
                async with ClientSession(read, write) as gw:
                    await gw.initialize()
                    back = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                            "arguments": {"city": "Oslo"}})
                    assert not back.isError and text(back).startswith("Oslo: sunny")
        anyio.run(backend_back)
        # DNS-rebinding protection: a request naming another host is turned away.
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={"Host": "evil.example:80"}, json={})
        assert r.status_code in (400, 403, 421)
    finally:
        stop(gateway)
        stop(backend)
