"""Shared by the MCP protocol tests: the test servers, configurations, and ``toolrank mcp`` run as a
real subprocess driven by the SDK's own client (stdio or streamable HTTP)."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from testkit import free_port  # noqa: F401  (the MCP tests import it from here)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SERVERS = HERE / "servers"
PY = sys.executable
FAKES = "gateway_fakes:components"


def server(name: str, *args: str, python: str = PY, **extra: Any) -> dict[str, Any]:
    """A stdio entry of ``mcpServers`` that runs tests/mcp/servers/<name>.py (with ``python``: the
    mcp 2.x servers run on the ``mcp2_python`` fixture's)."""
    return {"command": python, "args": [str(SERVERS / f"{name}.py"), *args], **extra}


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}, indent=1))
    return path


def child_env(tmp: Path) -> dict[str, str]:
    """What a toolrank subprocess needs: the checkout and tests/ importable, a private cache."""
    paths = [str(ROOT), str(HERE), str(ROOT / "tests")]
    return {"PYTHONPATH": os.pathsep.join(paths), "TOOLRANK_CACHE": str(tmp / "cache"),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def toolrank_args(*args: str) -> list[str]:
    """``toolrank ...`` through the real command (``python -m serve.commands``)."""
    return ["-m", "serve.commands", *args]


@asynccontextmanager
async def stdio_gateway(tmp: Path, *args: str, fakes: bool = True,
                        timeout_s: float = 120) -> AsyncIterator[ClientSession]:
    """``toolrank mcp ARGS`` over stdio, initialized; its stderr goes to tmp/gateway.log."""
    extra = ["--components", FAKES] if fakes else []
    params = StdioServerParameters(command=PY, args=toolrank_args("mcp", *args, *extra), env=child_env(tmp),
                                   cwd=str(ROOT))
    with open(tmp / "gateway.log", "a") as log:
        async with stdio_client(params, errlog=log) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=timeout_s)) as session:
                session.init_result = await session.initialize()
                yield session


def wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port} after {timeout_s} s")


def start(args: list[str], tmp: Path, port: int, python: str = PY, timeout_s: float = 15) -> subprocess.Popen:
    """A subprocess that listens on ``port`` (waits until it does)."""
    env = {**os.environ, **child_env(tmp)}
    proc = subprocess.Popen([python, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / f"proc-{port}.log", "w"))
    try:
        wait_port(port, proc, timeout_s)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(test):
    """Run an async test body with anyio (no plugin needed)."""
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return anyio.run(lambda: test(*args, **kwargs))
    return wrapper


async def wait_for(check, timeout_s: float = 60.0, every_s: float = 0.1):
    """Await ``check()`` until it returns something true (then that), or ``timeout_s`` passed (then
    its last value): a bound for something that must happen, not a measurement."""
    end = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value or time.monotonic() > end:
            return value
        await anyio.sleep(every_s)


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """find_tools' structured answer, checked equal to its JSON text."""
    assert result.structuredContent is not None, result
    assert json.loads(result.content[0].text) == result.structuredContent
    return result.structuredContent


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def call(gw: ClientSession, server: str, tool: str, **arguments: Any) -> types.CallToolResult:
    """The gateway's ``call_tool`` for one tool of one server."""
    return await gw.call_tool("call_tool", {"server": server, "tool": tool, "arguments": arguments})


async def check_chatty_server(gw: ClientSession, *, garbled_within_s: float) -> None:
    """The stray-stdout server (servers/chatty*.py) through the gateway: found, answers every call in
    one process (its counter keeps counting), and a cut-off answer fails at once, saying why."""
    found = payload(await gw.call_tool("find_tools", {"request": "find synonyms for happy"}))
    assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("chatty", "synonyms")
    assert "unavailable" not in found
    for expected in ("count 1", "count 2"):
        r = await call(gw, "chatty", "count")
        assert not r.isError and text(r) == expected
    r = await call(gw, "chatty", "synonyms", word="happy")
    assert not r.isError and text(r) == "synonyms of happy: alike, same"
    r = await call(gw, "chatty", "glued")
    assert not r.isError and text(r) == "glued answer"
    assert text(await call(gw, "chatty", "count")) == "count 3"        # the same process all along
    with anyio.fail_after(garbled_within_s):                            # under the call timeout
        r = await call(gw, "chatty", "garbled")
    assert r.isError and "answered the call to 'garbled' with something that is not valid MCP" in text(r)
    assert text(r).count("not valid MCP") == 1                         # said once, not nested
