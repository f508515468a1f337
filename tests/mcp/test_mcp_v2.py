"""toolrank (on the mcp 1.x SDK) with servers built on **mcp 2.x**, each a real subprocess running
in the mcp 2.x test environment (the ``mcp2_python`` fixture, tests/mcp/mcp2/requirements.lock):
`toolrank index --mcp-config`, `find_tools`, `call_tool` with the result the server puts on the
wire, list_changed, streamable HTTP, and a 2.x server that writes to stdout; and an agent on the
mcp 2.x client driving `toolrank mcp`."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from typing import Any

import anyio
import pytest

from mcp import types

from serve.commands import main as toolrank
from retrieval.index.embedded import ToolIndex

from mcp2_env import pinned_version
from mcp_helpers import (FAKES, HERE, PY, ROOT, SERVERS, check_chatty_server, child_env, free_port, payload, server,
                         start, stdio_gateway, stop, text, toolrank_args, write_config)
from test_mcp_gateway import run, wait_for

# A 2.x server under the load of a busy test machine can take a while to import and answer.
SLOW = ("--timeout", "120", "--call-timeout", "120")


def direct_calls(python: str, script: str, calls: list[tuple[str, dict[str, Any]]],
                 timeout_s: float = 120) -> list[dict[str, Any]]:
    """Each call's ``result`` exactly as the server wrote it: a plain JSON-RPC session over stdio
    (initialize at the protocol version toolrank's SDK asks for, then one tools/call at a time),
    no SDK in between. Lines that are not JSON-RPC answers are skipped."""
    proc = subprocess.Popen([python, str(SERVERS / f"{script}.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == request_id:
                assert "result" in message, message
                return message["result"]
        raise RuntimeError(f"{script} closed stdout before answering request {request_id}")

    try:
        send({"id": 0, "method": "initialize", "params": {
            "protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "direct", "version": "1"}}})
        answer(0)
        send({"method": "notifications/initialized"})
        results = []
        for i, (tool, arguments) in enumerate(calls, 1):
            send({"id": i, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
            results.append(answer(i))
        return results
    finally:
        timer.cancel()
        proc.stdin.close()
        stop(proc)


def as_sent(result: types.CallToolResult) -> dict[str, Any]:
    """The result as it came over the wire (the fields the sender set)."""
    return result.model_dump(mode="json", by_alias=True, exclude_unset=True)


def test_the_environment_runs_mcp2(mcp2_python):
    got = subprocess.run([mcp2_python, "-c", "import importlib.metadata as m, mcp; print(m.version('mcp'))"],
                         capture_output=True, text=True, check=True)
    assert got.stdout.strip() == pinned_version() and pinned_version().startswith("2.")


def test_toolrank_index_harvests_mcp2_servers(tmp_path, capsys, mcp2_python):
    """`toolrank index --mcp-config` with 2.x servers next to a 1.x one: every tool with its schema,
    the server's instructions as its description; the 2.x banner on stdout is skipped."""
    cfg = write_config(tmp_path / "mcp.json", {
        "almanac": server("almanac_v2", python=mcp2_python),
        "chatty": server("chatty_v2", python=mcp2_python),
        "weather": server("weather")})
    out = tmp_path / "index"
    assert toolrank(["index", "--mcp-config", str(cfg), "--index", str(out), "--timeout", "120"]) == 0
    printed = capsys.readouterr().out
    for name, n in (("almanac", 5), ("chatty", 5), ("weather", 2)):
        assert re.search(rf"^{name}\s+added\s+{n}\b", printed, re.M), printed
    catalog = ToolIndex.load(out).catalog                           # the shipped encoder, as `toolrank index` used
    tide = catalog[("almanac", "get_tide_times")]
    assert tide.description == "High and low tide times at a port for the next days."
    assert tide.input_schema["required"] == ["port"]
    assert tide.input_schema["properties"]["days"] == {"default": 1, "title": "Days", "type": "integer"}
    assert catalog.server_descriptions["almanac"] == "Tide tables and sunrise and sunset times for ports and cities."
    assert sorted(catalog.servers) == ["almanac", "chatty", "weather"]


@run
async def test_find_then_call_an_mcp2_server_returns_what_a_direct_call_does(tmp_path, mcp2_python):
    calls = [("get_tide_times", {"port": "Brest", "days": 2}),        # text (and 2.x's structured wrapper)
             ("get_sun_times", {"city": "Lisbon"}),                     # a pydantic model: structured content
             ("get_tide_times", {"port": "Atlantis"}),                  # the tool's own error
             ("sdk_version", {})]
    direct = await anyio.to_thread.run_sync(lambda: direct_calls(mcp2_python, "almanac_v2", calls))
    assert direct[0]["content"][0]["text"].startswith("Brest: high tide")
    assert direct[1]["structuredContent"] == {"city": "Lisbon", "sunrise": "06:58", "sunset": "19:21"}
    assert direct[2]["isError"] is True and "unknown port 'Atlantis'" in direct[2]["content"][0]["text"]

    cfg = write_config(tmp_path / "mcp.json", {"almanac": server("almanac_v2", python=mcp2_python),
                                               "weather": server("weather")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), *SLOW, timeout_s=150) as gw:
        found = payload(await gw.call_tool("find_tools", {"request": "get the tide times for Brest"}))
        assert found["decision"] == "proceed" and "unavailable" not in found
        best = found["tools"][0]
        assert (best["server"], best["name"]) == ("almanac", "get_tide_times")
        assert best["inputSchema"]["properties"]["port"]["type"] == "string"
        found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Brest"}))
        assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("weather", "get_forecast")

        for (tool, arguments), expected in zip(calls, direct):
            result = await gw.call_tool("call_tool", {"server": "almanac", "tool": tool, "arguments": arguments})
            assert as_sent(result) == expected, tool
        assert text(result) == pinned_version()                          # a real mcp 2.x server
        for expected in ("count 1", "count 2"):                          # one process, kept alive
            r = await gw.call_tool("call_tool", {"server": "almanac", "tool": "count", "arguments": {}})
            assert text(r) == expected
    log = (tmp_path / "gateway.log").read_text()
    assert "Traceback" not in log and "transport error" not in log and "connection broke" not in log


@run
async def test_an_mcp2_server_that_adds_a_tool_is_harvested_again(tmp_path, mcp2_python):
    cfg = write_config(tmp_path / "mcp.json", {"almanac": server("almanac_v2", python=mcp2_python)})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), *SLOW, "-v", timeout_s=150) as gw:
        r = await gw.call_tool("call_tool", {"server": "almanac", "tool": "add_tool", "arguments": {
            "name": "moon_phase", "description": "The phase of the moon on a date."}})
        assert text(r) == "added moon_phase"

        async def listed():
            found = payload(await gw.call_tool("find_tools", {"request": "what moon phase is it on Friday"}))
            return found["tools"] and (found["tools"][0]["server"], found["tools"][0]["name"]) == ("almanac",
                                                                                               "moon_phase")
        assert await wait_for(listed, 60, every_s=0.5)
        r = await gw.call_tool("call_tool", {"server": "almanac", "tool": "moon_phase", "arguments": {}})
        assert not r.isError and text(r) == "moon_phase ran"


@run
async def test_an_mcp2_server_over_streamable_http(tmp_path, mcp2_python):
    port = free_port()
    proc = await anyio.to_thread.run_sync(lambda: start([str(SERVERS / "almanac_v2.py"), "--http", str(port)],
                                                        tmp_path, port, python=mcp2_python, timeout_s=120))
    try:
        cfg = write_config(tmp_path / "mcp.json", {"almanac": {"url": f"http://127.0.0.1:{port}/mcp"}})
        async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), *SLOW, timeout_s=150) as gw:
            found = payload(await gw.call_tool("find_tools", {"request": "get sun times for Porto"}))
            assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("almanac", "get_sun_times")
            r = await gw.call_tool("call_tool", {"server": "almanac", "tool": "get_sun_times",
                                                 "arguments": {"city": "Porto"}})
            assert not r.isError
            assert r.structuredContent == {"city": "Porto", "sunrise": "06:58", "sunset": "19:21"}
            r = await gw.call_tool("call_tool", {"server": "almanac", "tool": "sdk_version", "arguments": {}})
            assert text(r) == pinned_version()
    finally:
        stop(proc)


@run
async def test_an_mcp2_server_that_writes_to_stdout_works_and_keeps_its_state(tmp_path, mcp2_python):
    """A 2.x server's banner and lines written to its real stdout (around the SDK's own writes) are
    logged and skipped; text glued in front of an answer is skipped; a cut-off answer fails its call
    at once. A plain print in a 2.x tool goes to stderr (the SDK diverts fd 1 while it serves)."""
    cfg = write_config(tmp_path / "mcp.json", {"chatty": server("chatty_v2", python=mcp2_python),
                                               "weather": server("weather")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), *SLOW, timeout_s=150) as gw:
        await check_chatty_server(gw, garbled_within_s=60)                  # the call timeout is 120 s
        r = await gw.call_tool("call_tool", {"server": "chatty", "tool": "antonyms", "arguments": {"word": "hot"}})
        assert not r.isError and text(r) == "antonyms of hot: different"
        r = await gw.call_tool("call_tool", {"server": "chatty", "tool": "count", "arguments": {}})
        assert text(r) == "count 4"
    log = (tmp_path / "gateway.log").read_text()
    stray = "server 'chatty' wrote a line that is not MCP to stdout (ignored): "
    assert stray + "chatty MCP server v2.0 starting" in log
    assert stray + "debug: antonyms of hot from the native library" in log
    assert "debug: looking up happy" in log and stray + "debug: looking up happy" not in log   # its stderr
    assert "Traceback" not in log and "Failed to parse JSONRPC" not in log


def test_an_agent_on_the_mcp2_client_finds_and_calls_through_toolrank(tmp_path, mcp2_python):
    """mcp 2.x's ``Client`` first asks for ``server/discover`` (protocol 2026-07-28); toolrank's SDK
    answers that it does not know it, the client falls back to the initialize handshake, and
    toolrank logs no warning for it."""
    cfg = write_config(tmp_path / "mcp.json", {"almanac": server("almanac_v2", python=mcp2_python),
                                               "weather": server("weather")})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "command": PY, "args": toolrank_args("mcp", "--mcp-config", str(cfg), "--components", FAKES, *SLOW),
        "env": child_env(tmp_path), "cwd": str(ROOT),
        "calls": [["find_tools", {"request": "get the tide times for Brest"}],
                  ["call_tool", {"server": "almanac", "tool": "get_sun_times", "arguments": {"city": "Lisbon"}}],
                  ["call_tool", {"server": "weather", "tool": "get_forecast", "arguments": {"city": "Oslo"}}]]}))
    with open(tmp_path / "gateway.log", "w") as log:             # toolrank's stderr, through the client
        done = subprocess.run([mcp2_python, str(HERE / "clients" / "client_v2.py"), str(spec)],
                              stdout=subprocess.PIPE, stderr=log, text=True, timeout=400)
    log = (tmp_path / "gateway.log").read_text()
    assert done.returncode == 0, log[-3000:]
    hello, found, sun, forecast = (json.loads(line) for line in done.stdout.splitlines())
    assert hello == {"protocol_version": types.LATEST_PROTOCOL_VERSION,
                     "tools": ["find_tools", "call_tool", "describe_tool"]}
    assert not found.get("isError") and found["structuredContent"]["decision"] == "proceed"
    best = found["structuredContent"]["tools"][0]
    assert (best["server"], best["name"]) == ("almanac", "get_tide_times")
    assert sun["structuredContent"] == {"city": "Lisbon", "sunrise": "06:58", "sunset": "19:21"}
    assert forecast["content"][0]["text"].startswith("Oslo: sunny")
    assert "Failed to validate request" not in log and "server/discover" not in log and "Traceback" not in log
