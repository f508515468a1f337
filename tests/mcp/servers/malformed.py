"""Malformed: lists tools that are not valid. ``--mode empty-name`` (a tool named ""),
``duplicate`` (the same name twice), ``bad-schema`` (an inputSchema that is a string), ``mixed``
(two valid tools among one of each kind of bad one, and a schema nested too deep).
A low-level SDK server over stdio."""

from __future__ import annotations

import sys

import anyio

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

MODE = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "empty-name"
server = Server("malformed")
OBJ = {"type": "object", "properties": {}}


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    if MODE == "duplicate":
        return [types.Tool(name="same", description="first", inputSchema=OBJ),
                types.Tool(name="same", description="second", inputSchema=OBJ)]
    if MODE == "mixed":
        deep: dict = {"type": "string"}
        for _ in range(80):
            deep = {"type": "object", "properties": {"x": deep}}
        return [types.Tool(name="good_one", description="the first valid tool", inputSchema=OBJ),
                types.Tool(name="same", description="first", inputSchema=OBJ),
                types.Tool(name="same", description="second", inputSchema=OBJ),
                types.Tool.model_construct(name="broken", description="schema is a string", inputSchema="oops"),
                types.Tool(name="deep", description="schema nested too deep", inputSchema=deep),
                types.Tool(name="good_two", description="the second valid tool", inputSchema=OBJ)]
    if MODE == "bad-schema":
        return [types.Tool.model_construct(name="broken", description="schema is a string", inputSchema="oops")]
    return [types.Tool(name="fine", description="a fine tool", inputSchema=OBJ),
            types.Tool(name="", description="a tool without a name", inputSchema=OBJ)]


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
