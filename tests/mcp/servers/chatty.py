"""Chatty: an mcp 1.x FastMCP server that writes to stdout as servers in the wild do: a start-up
banner, a debug line from a tool, text glued in front of an answer, and (``garbled``) an answer
that is cut off. Its ``count`` tool keeps state in memory, to show the server is never restarted."""

from __future__ import annotations

import sys
import time

from mcp.server.fastmcp import Context, FastMCP

mcp = FastMCP("chatty", instructions="A thesaurus that prints debug output.", log_level="WARNING")
COUNT = {"n": 0}


@mcp.tool()
def synonyms(word: str) -> str:
    """Synonyms of an English word."""
    print(f"debug: looking up {word}", flush=True)
    return f"synonyms of {word}: alike, same"


@mcp.tool()
def count() -> str:
    """Count calls (state kept in memory)."""
    COUNT["n"] += 1
    return f"count {COUNT['n']}"


@mcp.tool()
def glued() -> str:
    """Prints text without a newline, so that the answer follows it on the same line."""
    sys.stdout.write("progress: 100% ")
    sys.stdout.flush()
    return "glued answer"


@mcp.tool()
def garbled(ctx: Context) -> str:
    """Writes a cut-off answer to its own request, then takes long to send the real one."""
    sys.stdout.write('{"jsonrpc":"2.0","id":' + str(ctx.request_id) + ',"result":{"content":[{"type":"te\n')
    sys.stdout.flush()
    time.sleep(30)
    return "late"


if __name__ == "__main__":
    print("chatty MCP server v1.0 starting (banner on stdout)", flush=True)
    mcp.run()
