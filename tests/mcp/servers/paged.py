"""Files: seven file-system tools listed three per page (tools/list with nextCursor).
A low-level SDK server over stdio; calls echo the tool name and arguments."""

from __future__ import annotations

import anyio

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

PAGE = 3
TOOLS = [
    ("read_file", "Read the text content of a file at a path"),
    ("write_file", "Write text to a file, replacing its content"),
    ("list_directory", "List the files and folders in a directory"),
    ("move_file", "Move or rename a file"),
    ("delete_file", "Delete a file"),
    ("file_info", "Size, owner and modification time of a file"),
    ("search_files", "Find files whose names match a glob pattern under a folder"),
]
SCHEMA = {"type": "object", "properties": {"path": {"type": "string", "description": "file or folder path"}},
          "required": ["path"]}

server = Server("files", instructions="Local file-system access: read, write, list and search files.")


@server.list_tools()
async def list_tools(request: types.ListToolsRequest) -> types.ListToolsResult:
    cursor = request.params.cursor if request.params else None
    start = int(cursor or 0)
    page = [types.Tool(name=n, description=d, inputSchema=SCHEMA) for n, d in TOOLS[start:start + PAGE]]
    more = start + PAGE < len(TOOLS)
    return types.ListToolsResult(tools=page, nextCursor=str(start + PAGE) if more else None)


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=f"{name} {arguments.get('path')}")]


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
