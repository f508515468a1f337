"""Changing: a server whose tools change at run time. ``add_tool`` registers a new tool and
sends notifications/tools/list_changed. FastMCP over stdio."""

from __future__ import annotations

from mcp.server.fastmcp import Context, FastMCP

mcp = FastMCP("changing", instructions="A server whose tools change while it runs.", log_level="WARNING")


@mcp.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


@mcp.tool()
async def add_tool(name: str, description: str, ctx: Context) -> str:
    """Add a tool with this name and description, and tell the client that the tools changed."""
    def added(text: str = "") -> str:
        return f"{name} ran"
    mcp.add_tool(added, name=name, description=description)
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@mcp.tool()
async def burst(n: int, ctx: Context) -> str:
    """Say n times, at once, that the tools changed."""
    for _ in range(n):
        await ctx.session.send_tool_list_changed()
    return f"sent {n}"


if __name__ == "__main__":
    mcp.run()
