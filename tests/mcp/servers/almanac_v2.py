"""Almanac: tide and sun times (made-up data), written against the **mcp 2.x** server API
(``mcp.server.mcpserver.MCPServer``, FastMCP's successor). Runs only in the mcp 2.x test
environment (tests/mcp/mcp2/requirements.lock, the ``mcp2_python`` fixture), over stdio, or over
streamable HTTP with ``--http PORT``. ``count`` keeps state in memory; ``add_tool`` adds a tool and
sends notifications/tools/list_changed; ``sdk_version`` says which SDK the server runs on."""

from __future__ import annotations

import argparse
from importlib.metadata import version

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mcp = MCPServer("almanac", instructions="Tide tables and sunrise and sunset times for ports and cities.",
                version="2.0.0-test", log_level="WARNING")
COUNT = {"n": 0}


class SunTimes(BaseModel):
    city: str
    sunrise: str
    sunset: str


@mcp.tool()
def get_tide_times(port: str, days: int = 1) -> str:
    """High and low tide times at a port for the next days."""
    if port.lower() == "atlantis":
        raise ToolError(f"unknown port {port!r}")         # 2.x: an anticipated failure, its text for the model
    return f"{port}: high tide 06:12 and 18:40, low tide 00:05 and 12:27, for {days} day(s)"


@mcp.tool()
def get_sun_times(city: str) -> SunTimes:
    """Sunrise and sunset times for a city today."""
    return SunTimes(city=city, sunrise="06:58", sunset="19:21")


@mcp.tool()
def sdk_version() -> str:
    """The version of the MCP SDK this server runs on."""
    return version("mcp")


@mcp.tool()
def count() -> str:
    """Count calls (state kept in memory)."""
    COUNT["n"] += 1
    return f"count {COUNT['n']}"


@mcp.tool()
async def add_tool(name: str, description: str, ctx: Context) -> str:
    """Add a tool with this name and description, and tell the client that the tools changed."""
    def added(text: str = "") -> str:
        return f"{name} ran"
    mcp.add_tool(added, name=name, description=description)
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    a = p.parse_args()
    if a.http:
        mcp.run("streamable-http", port=a.http)
    else:
        mcp.run()
