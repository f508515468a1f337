"""Crashy: a server whose ``crash`` tool kills its own process in the middle of the call;
with ``--fail-at-start`` it exits before serving, with a message on stderr. FastMCP over stdio."""

from __future__ import annotations

import os
import sys

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("crashy", instructions="Echo text back; can also crash on purpose.", log_level="WARNING")


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back unchanged, with the server's process id."""
    return f"{text} (pid {os.getpid()})"


@mcp.tool()
def crash() -> str:
    """Crash the server process in the middle of the call."""
    os._exit(1)


if __name__ == "__main__":
    if "--fail-at-start" in sys.argv:
        print("crashy: cannot open the database /nonexistent/db.sqlite", file=sys.stderr, flush=True)
        if os.environ.get("CRASHY_DB_PASSWORD"):   # as real servers do: printing their configuration back
            print(f"crashy: tried password {os.environ['CRASHY_DB_PASSWORD']}", file=sys.stderr, flush=True)
        sys.exit(3)
    mcp.run()
