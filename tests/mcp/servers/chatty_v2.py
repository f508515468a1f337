"""Chatty on **mcp 2.x** (``MCPServer``): a server that writes to stdout as servers in the wild do.

mcp 2.x's stdio transport points fd 1 at stderr while it serves, so a plain ``print`` in a tool
(``synonyms``) no longer reaches the wire. What still does, and is tested here: a start-up banner
printed before ``run()``, and writes to the wire's descriptor taken before the SDK claimed it, as a
native library or a child process started earlier would (``debug``, ``glued``, ``garbled``: a
line of its own, text glued in front of an answer, a cut-off answer). ``count`` keeps state in
memory, to show the server is never restarted."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("chatty", instructions="A thesaurus that prints debug output.", log_level="WARNING")
COUNT = {"n": 0}
WIRE = os.dup(1)      # the real stdout, before mcp 2.x diverts fd 1 to stderr


def wire(text: str) -> None:
    os.write(WIRE, text.encode())


@mcp.tool()
def synonyms(word: str) -> str:
    """Synonyms of an English word."""
    print(f"debug: looking up {word}", flush=True)        # mcp 2.x sends this to stderr
    return f"synonyms of {word}: alike, same"


@mcp.tool()
def antonyms(word: str) -> str:
    """Antonyms of an English word."""
    wire(f"debug: antonyms of {word} from the native library\n")
    return f"antonyms of {word}: different"


@mcp.tool()
def count() -> str:
    """Count calls (state kept in memory)."""
    COUNT["n"] += 1
    return f"count {COUNT['n']}"


@mcp.tool()
def glued() -> str:
    """Writes text without a newline, so that the answer follows it on the same line."""
    wire("progress: 100% ")
    return "glued answer"


@mcp.tool()
def garbled(ctx: Context) -> str:
    """Writes a cut-off answer to its own request, then takes long to send the real one."""
    wire('{"jsonrpc":"2.0","id":' + ctx.request_id + ',"result":{"content":[{"type":"te\n')
    time.sleep(30)
    return "late"


if __name__ == "__main__":
    print("chatty MCP server v2.0 starting (banner on stdout)", flush=True)
    mcp.run()
