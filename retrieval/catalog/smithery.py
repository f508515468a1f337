"""Read a folder of Smithery registry records (one JSON file per server) as a :class:`Catalog`.

Each file holds ``{qualifiedName, displayName, description, tools: [{name, description,
inputSchema}], ...}``. A server is named by its ``displayName`` (else its ``qualifiedName``);
a name already taken (by the shipped MCP-Zero catalog, or by an earlier file) gets the
qualified name appended: ``"Linear (@acme/linear)"``. Servers without tools are skipped; a
tool without a description gets ``""``; a tool name repeated inside one server keeps its
first definition and the rest are counted in :attr:`SmitheryLoad.skipped_duplicate_tools`.
Anything else malformed raises :class:`CatalogError` naming the file, server and field.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from .formats import load_default_catalog, tools_from_mcp_list
from .model import Catalog, CatalogError, Tool

__all__ = ["SmitheryLoad", "read_smithery", "load_smithery"]

log = logging.getLogger(__name__)


class SmitheryLoad(NamedTuple):
    """A Smithery catalog and what was changed or dropped to make it one."""

    catalog: Catalog
    files: int                        # server files read
    skipped_without_tools: int        # servers with no tools (not in the catalog)
    skipped_duplicate_tools: int      # repeated tool names inside one server (first kept)
    renamed: dict[str, str]           # qualifiedName -> server name, where the display name was taken


def _server_name(record: dict[str, Any], taken: set[str], where: str) -> tuple[str, bool]:
    qualified = record.get("qualifiedName")
    if not isinstance(qualified, str) or not qualified.strip():
        raise CatalogError(f"{where}: missing required field 'qualifiedName'")
    display = record.get("displayName")
    if display is not None and not isinstance(display, str):
        raise CatalogError(f"{where}: field 'displayName' must be a string, got {type(display).__name__}")
    name = (display or "").strip() or qualified
    if name not in taken:
        return name, False
    candidate = f"{name} ({qualified})" if name != qualified else qualified
    n = 2
    while candidate in taken:  # only if two files share a qualified name
        candidate = f"{name} ({qualified}) #{n}"
        n += 1
    return candidate, True


def read_smithery(directory: str | Path, *, reserved: Iterable[str] | None = None) -> SmitheryLoad:
    """Read every ``*.json`` in ``directory`` (sorted by file name, so names are stable).

    Args:
        directory: the folder of per-server registry files.
        reserved: server names already in use; ``None`` means the shipped MCP-Zero catalog's,
            so the result can be merged with :func:`~retrieval.catalog.formats.load_default_catalog`.

    Raises:
        CatalogError: the folder is missing or empty, or a file is not valid JSON or malformed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CatalogError(f"{directory}: Smithery folder not found")
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CatalogError(f"{directory}: no *.json server files")
    taken = set(load_default_catalog(with_examples=False).servers if reserved is None else reserved)
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    without_tools = duplicates = 0
    renamed: dict[str, str] = {}
    for path in files:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        if not isinstance(record, dict):
            raise CatalogError(f"{path}: expected one server object")
        raw_tools = record.get("tools")
        if raw_tools is None or raw_tools == []:
            without_tools += 1
            continue
        if not isinstance(raw_tools, list):
            raise CatalogError(f"{path}: field 'tools' must be a list")
        name, was_renamed = _server_name(record, taken, str(path))
        if was_renamed:
            renamed[record["qualifiedName"]] = name
        taken.add(name)
        sdesc = record.get("description")
        if sdesc is not None and not isinstance(sdesc, str):
            raise CatalogError(f"{path}, server '{name}': field 'description' must be a string, "
                               f"got {type(sdesc).__name__}")
        kept, seen = [], set()
        for raw in raw_tools:
            tname = raw.get("name") if isinstance(raw, dict) else None
            if isinstance(tname, str) and tname in seen:
                duplicates += 1
                continue
            seen.add(tname)
            if isinstance(raw, dict) and "inputSchema" not in raw and isinstance(raw.get("input_schema"), dict):
                raw = {**raw, "inputSchema": raw["input_schema"]}
            kept.append(raw)
        descriptions[name] = sdesc or ""
        tools.extend(tools_from_mcp_list(name, sdesc or "", {"tools": kept}, str(path)))
    if duplicates:
        log.warning("%s: skipped %d repeated tool names (kept each server's first)", directory, duplicates)
    return SmitheryLoad(Catalog(tools, descriptions), len(files), without_tools, duplicates, renamed)


def load_smithery(directory: str | Path, *, reserved: Iterable[str] | None = None) -> Catalog:
    """The Smithery folder as a catalog; see :func:`read_smithery`."""
    return read_smithery(directory, reserved=reserved).catalog
