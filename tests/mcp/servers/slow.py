"""Slow: answers tools/list only after ``--delay`` seconds (to test harvest timeouts), and has a
tool that waits (to test call timeouts). A low-level SDK server over stdio."""

from __future__ import annotations

import argparse

import anyio

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

server = Server("slow")
DELAY = 0.0


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    await anyio.sleep(DELAY)
    return [types.Tool(name="wait", description="Wait a number of seconds, then answer",
                       inputSchema={"type": "object", "properties": {"seconds": {"type": "number"}}})]


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    await anyio.sleep(float(arguments.get("seconds", 0)))
    return [types.TextContent(type="text", text="done")]


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--delay", type=float, default=0.0)
    DELAY = p.parse_args().delay
    anyio.run(main)
