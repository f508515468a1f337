"""Slow: answers tools/list only after ``--delay`` seconds (to test harvest timeouts), and has a
tool that waits (to test call timeouts). A low-level SDK server over stdio.

``--mark FILE``: appends a line to FILE as each answer is sent ("listed", "answered"), so a test
can tell whether its client went on before the server answered."""

from __future__ import annotations

import argparse

import anyio

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

server = Server("slow")
DELAY = 0.0
MARK: str | None = None


def mark(what: str) -> None:
    if MARK:
        with open(MARK, "a") as f:
            f.write(what + "\n")


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    await anyio.sleep(DELAY)
    mark("listed")
    return [types.Tool(name="wait", description="Wait a number of seconds, then answer",
                       inputSchema={"type": "object", "properties": {"seconds": {"type": "number"}}})]


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    await anyio.sleep(float(arguments.get("seconds", 0)))
    mark("answered")
    return [types.TextContent(type="text", text="done")]


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--mark")
    a = p.parse_args()
    DELAY, MARK = a.delay, a.mark
    anyio.run(main)
