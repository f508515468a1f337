"""Notes: create, search and delete short notes kept in memory. A FastMCP server over stdio."""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("notes", instructions="A personal notebook: write, find and delete notes.", log_level="WARNING")
NOTES: dict[int, tuple[str, str]] = {}


@mcp.tool()
def create_note(title: str, body: str) -> str:
    """Create a note with a title and a body; returns its id."""
    note_id = len(NOTES) + 1
    NOTES[note_id] = (title, body)
    return f"note {note_id} created"


@mcp.tool()
def search_notes(query: str) -> list[str]:
    """Search notes whose title or body contains the query."""
    q = query.lower()
    return [t for t, b in NOTES.values() if q in t.lower() or q in b.lower()]


@mcp.tool()
def delete_note(note_id: int) -> str:
    """Delete a note by its id."""
    if NOTES.pop(note_id, None) is None:
        raise ValueError(f"no note {note_id}")
    return f"note {note_id} deleted"


if __name__ == "__main__":
    mcp.run()
