"""MCP latency: harvest time per server, and find_tools / call_tool through MCP against the Python call.

    python benchmarks/mcp_latency.py [--config tests/mcp/example_mcp.json] [--rounds 5] [--json out.json]

1. Harvest: each server of the configuration started and listed (``tools/list``, every page) by
   the SDK's client, ``--rounds`` times; the median from start to the last page per server.
2. find_tools: the same requests answered by the shipped pipeline called from Python
   (``Pipeline.search``, as the gateway calls it) and by ``toolrank mcp`` over stdio and over
   streamable HTTP (real subprocesses; the SDK's client on this side), timed interleaved request by
   request. The difference is the cost of the protocol: JSON-RPC framing, the transport, the JSON.
3. call_tool: one forwarded call (weather / get_forecast) through the gateway against the same call
   made directly to the server.

Prints a Markdown table (milliseconds; p50 and p95 over ``--rounds`` x the requests).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):   # run as a file: the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, free_port, percentile, stamp_line, write_result  # noqa: E402

REQUESTS = [
    "will it rain in Lisbon over the next few days?",
    "any storm warnings for the Gulf coast right now?",
    "jot down a note: call the plumber on Monday",
    "find my notes about the quarterly budget",
    "delete note 4",
    "show me what's inside /etc/hosts",
    "rename report.txt to report-final.txt",
    "which files under src match *.test.ts?",
    "how big is the file data.csv and when was it changed?",
    "book a table for two at an Italian restaurant",     # no fit among these servers
]


def row(label: str, ms: list[float]) -> str:
    return f"| {label} | {percentile(ms, 50):.1f} | {percentile(ms, 95):.1f} | {len(ms)} |"


def measure_harvest(config, rounds: int) -> dict[str, list[float]]:
    from retrieval.catalog.mcp_harvest import harvest_server

    out: dict[str, list[float]] = {name: [] for name in config.servers}

    async def go() -> None:
        for _ in range(rounds):
            for spec in config.servers.values():          # one at a time: no contention between servers
                h = await harvest_server(spec, timeout_s=60)
                if not h.ok:
                    raise SystemExit(f"server {spec.name!r} failed: {h.error}")
                out[spec.name].append(h.seconds * 1e3)
    anyio.run(go)
    return out


def gateway_args(config_path: Path, index_dir: Path) -> list[str]:
    return ["-m", "serve.commands", "mcp", "--mcp-config", str(config_path), "--index", str(index_dir),
            "--no-suggestions", "--no-save"]


def measure_find_and_call(config_path: Path, index_dir: Path, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    """find_tools and call_tool, interleaved request by request over the three routes (Python,
    stdio, HTTP), so that load from elsewhere on the machine falls on all three alike."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.flow import load_pipeline

    pipe = load_pipeline(ToolIndex.load(index_dir), public_suggestions=False)
    pipe.search(REQUESTS[0], explain=True)                # warm: matchers, token counts
    port = free_port()
    proc = subprocess.Popen([sys.executable, *gateway_args(config_path, index_dir), "--http", f"127.0.0.1:{port}"],
                            cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, Any] = {k: [] for k in ("python", "stdio", "http", "stdio_call", "http_call")}
    call = {"server": "weather", "tool": "get_forecast", "arguments": {"city": "Oslo"}}

    async def timed(key: str, session, tool: str, args: dict) -> None:
        t0 = time.perf_counter()
        res = await session.call_tool(tool, args)
        out[key].append((time.perf_counter() - t0) * 1e3)
        assert not res.isError, res

    async def go() -> None:
        params = StdioServerParameters(command=sys.executable, args=gateway_args(config_path, index_dir), env=env,
                                       cwd=str(ROOT))
        t0 = time.perf_counter()
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=120)) as stdio:
                await stdio.initialize()
                await stdio.call_tool("find_tools", {"request": "warm up"})
                out["ready_s"] = time.perf_counter() - t0
                end = time.monotonic() + 60
                while True:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                        break
                    except OSError:
                        if time.monotonic() > end or proc.poll() is not None:
                            raise SystemExit("toolrank mcp --http did not start")
                        await anyio.sleep(0.05)
                async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (hread, hwrite, _):
                    async with ClientSession(hread, hwrite) as http:
                        await http.initialize()
                        for session in (stdio, http):                     # warm both
                            await session.call_tool("find_tools", {"request": REQUESTS[0]})
                            await session.call_tool("call_tool", call)
                        for _ in range(rounds):
                            for r in REQUESTS:
                                t1 = time.perf_counter()
                                pipe.search(r, explain=True, fmt="mcp")
                                out["python"].append((time.perf_counter() - t1) * 1e3)
                                await timed("stdio", stdio, "find_tools", {"request": r})
                                await timed("http", http, "find_tools", {"request": r})
                            await timed("stdio_call", stdio, "call_tool", call)
                            await timed("http_call", http, "call_tool", call)
    try:
        anyio.run(go)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return out


def measure_direct_call(config, rounds: int) -> list[float]:
    from mcp import types
    from retrieval.catalog.mcp_harvest import open_session

    async def go():
        async with open_session(config.servers["weather"], timeout_s=60, errlog=open(os.devnull, "w")) as (s, _):
            req = types.ClientRequest(types.CallToolRequest(params=types.CallToolRequestParams(
                name="get_forecast", arguments={"city": "Oslo"})))
            await s.send_request(req, types.CallToolResult)
            ms = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await s.send_request(req, types.CallToolResult)
                ms.append((time.perf_counter() - t0) * 1e3)
            return ms
    return anyio.run(go)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "tests" / "mcp" / "example_mcp.json")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path, help="also write the raw timings here")
    a = p.parse_args(argv)

    from retrieval.catalog.mcp_harvest import load_mcp_config
    from retrieval.index.mcp import index_mcp_config

    # The example's "python" must be this interpreter (it has the SDK).
    raw = json.loads(a.config.read_text())
    for entry in raw["mcpServers"].values():
        if entry.get("command") == "python":
            entry["command"] = sys.executable
        if "cwd" in entry:
            entry["cwd"] = str((a.config.parent / entry["cwd"]).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="toolrank-mcp-bench-"))
    config_path = tmp / "mcp.json"
    config_path.write_text(json.dumps(raw))
    config = load_mcp_config(config_path)
    index_dir = tmp / "index"
    t0 = time.perf_counter()
    report = index_mcp_config(config, index_dir)
    index_s = time.perf_counter() - t0
    env = {"TOOLRANK_CACHE": str(tmp / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}

    harvest = measure_harvest(config, a.rounds)
    m = measure_find_and_call(config_path, index_dir, a.rounds, env)
    direct = measure_direct_call(config, a.rounds * 4)

    tools = {s.name: s.tools for s in report.servers}
    print(f"`toolrank index --mcp-config` (first build, {report.tools} tools, shipped encoder): {index_s:.1f} s; "
          f"`toolrank mcp` start to first answer (stdio, index present): {m['ready_s']:.1f} s\n")
    print("| harvest, per server (start → last tools/list page) | p50 ms | p95 ms | n |")
    print("|---|---:|---:|---:|")
    for name, ms in harvest.items():
        print(row(f"{name} ({tools.get(name, '?')} tools)", ms))
    print()
    print(f"| find_tools ({len(REQUESTS)} requests × {a.rounds}, interleaved) | p50 ms | p95 ms | n |")
    print("|---|---:|---:|---:|")
    print(row("Python: `Pipeline.search(..., explain=True)`", m["python"]))
    print(row("MCP over stdio (`toolrank mcp`)", m["stdio"]))
    print(row("MCP over streamable HTTP (`toolrank mcp --http`)", m["http"]))
    print()
    print("| call_tool weather/get_forecast | p50 ms | p95 ms | n |")
    print("|---|---:|---:|---:|")
    print(row("direct to the server (SDK client, stdio)", direct))
    print(row("through the gateway over stdio", m["stdio_call"]))
    print(row("through the gateway over streamable HTTP", m["http_call"]))
    print("\n" + stamp_line())
    if a.json:
        write_result(a.json, {"harvest_ms": harvest, "direct_call_ms": direct, "index_s": index_s, **m})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
