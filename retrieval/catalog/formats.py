"""Catalog files and example requests: loaders for the supported formats.

Loading is all-or-nothing: any problem raises :class:`~retrieval.catalog.model.CatalogError`
naming the file, the server and the field, and nothing is half-loaded (:func:`read_catalog`
instead leaves out the servers with a problem and says which and why).

Supported inputs (auto-detected by :func:`load_catalog`):

* MCP-Zero: a JSON list of ``{name, description, tools: [{name, description, parameter}]}``.
* MCP ``tools/list`` results wrapped with their server:
  ``{"server": {"name", "description"}, "tools": [...]}`` (one object, or a list of them).
* Plain JSONL: ``{"server", "name", "description", "inputSchema"?}`` per line.

Every loader applies the content rules of :mod:`.rules`.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from pathlib import Path
from typing import Any, NamedTuple

from retrieval.jsonl import read_jsonl

from .model import Catalog, CatalogError, Tool, ToolId
from .rules import check_name, check_schema, check_text

log = logging.getLogger(__name__)

__all__ = [
    "SkippedServer",
    "read_catalog",
    "load_catalog",
    "load_examples",
    "default_catalog_path",
    "default_examples_path",
    "load_default_catalog",
    "tools_from_mcp_list",
]

DATA_DIR = Path(__file__).parent.parent / "data" / "mcp_zero"


class SkippedServer(NamedTuple):
    """A server a lenient file load left out, and why (the :class:`CatalogError` message)."""

    server: str
    reason: str


class _Problems:
    """Per-server problems of one file load: raised at once (strict), or collected (lenient)."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.skipped: dict[str, str] = {}      # server -> first reason

    def skip(self, server: str, exc: CatalogError) -> None:
        if self.strict:
            raise exc
        self.skipped.setdefault(server, str(exc))

    def report(self) -> list[SkippedServer]:
        return [SkippedServer(s, r) for s, r in self.skipped.items()]


def _file_name(value: Any) -> Any:
    """A name read from a file, with surrounding spaces removed: harmless, and common in catalogs
    written by others ("Morpheus Predictions "). The service's ``PUT`` keeps refusing them."""
    return value.strip(" ") if isinstance(value, str) and value.strip(" ") else value


# ---------------------------------------------------------------- loading helpers


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise CatalogError(f"{path}: JSON nested too deeply to read") from None


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    # One record per "\n" (retrieval.jsonl): U+2028 and friends inside a string stay there.
    try:
        return read_jsonl(path)
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not UTF-8 text ({exc})") from None
    except ValueError as exc:
        raise CatalogError(str(exc)) from None


def _text(value: Any, where: str, field_name: str, required: bool) -> str:
    """A string field; MCP makes descriptions optional, so None/missing may mean empty."""
    if value is None:
        if required:
            raise CatalogError(f"{where}: missing required field '{field_name}'")
        return ""
    if not isinstance(value, str):
        raise CatalogError(f"{where}: field '{field_name}' must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise CatalogError(f"{where}: field '{field_name}' is empty")
    return check_text(value, f"{where}: field '{field_name}'")


def _schema_from_parameters(params: Any) -> dict[str, Any] | None:
    """MCP-Zero gives parameters as {'name': '(type) description'}; make a JSON Schema of them."""
    if not isinstance(params, dict) or not params:
        return {"type": "object", "properties": {}}
    props = {}
    for pname, ptext in params.items():
        ptext = ptext if isinstance(ptext, str) else ""
        ptype, desc = "string", ptext
        if ptext.startswith("(") and ")" in ptext:
            ptype, desc = ptext[1:ptext.index(")")].strip() or "string", ptext[ptext.index(")") + 1:].strip()
        json_type = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
                     "list": "array", "dict": "object"}.get(ptype, ptype)
        if json_type not in {"string", "integer", "number", "boolean", "array", "object", "null"}:
            json_type = "string"
        props[pname] = {"type": json_type, "description": desc}
    return {"type": "object", "properties": props}


def tools_from_mcp_list(server: str, server_description: str, payload: Any, where: str) -> list[Tool]:
    """Tools from one MCP ``tools/list`` result (``{"tools": [...], "nextCursor"?}``)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("tools"), list):
        raise CatalogError(f"{where}: expected an object with a 'tools' list (an MCP tools/list result)")
    tools = []
    for i, raw in enumerate(payload["tools"]):
        at = f"{where}, server '{server}', tools[{i}]"
        if not isinstance(raw, dict):
            raise CatalogError(f"{at}: each tool must be an object")
        name = check_name(_text(raw.get("name"), at, "name", required=True), f"{at}: tool name")
        at = f"{where}, server '{server}', tool '{name}'"
        desc = _text(raw.get("description"), at, "description", required=False)
        schema = check_schema(raw.get("inputSchema"), at)
        tools.append(Tool(server, name, desc, schema, server_description))
    return tools


def _load_mcp_zero(path: Path, data: list, problems: _Problems) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for i, srv in enumerate(data):
        at = f"{path}, servers[{i}]"
        sname = f"servers[{i}]"
        try:
            if not isinstance(srv, dict):
                raise CatalogError(f"{at}: each server must be an object")
            sname = _file_name(_text(srv.get("name"), at, "name", required=True))
            at = f"{path}, server '{sname}'"
            sdesc = _text(srv.get("description"), at, "description", required=False)
            if sname in descriptions:
                raise CatalogError(f"{at}: duplicate server name")
            raw_tools = srv.get("tools")
            if not isinstance(raw_tools, list):
                raise CatalogError(f"{at}: field 'tools' must be a list")
            own = []
            for j, raw in enumerate(raw_tools):
                tat = f"{at}, tools[{j}]"
                if not isinstance(raw, dict):
                    raise CatalogError(f"{tat}: each tool must be an object")
                name = _file_name(_text(raw.get("name"), tat, "name", required=True))
                tat = f"{at}, tool '{name}'"
                desc = _text(raw.get("description"), tat, "description", required=False)
                schema = raw.get("inputSchema") if isinstance(raw.get("inputSchema"), dict) else \
                    _schema_from_parameters(raw.get("parameter"))
                own.append(Tool(sname, name, desc, check_schema(schema, tat), sdesc))
        except CatalogError as exc:
            problems.skip(sname, exc)
            continue
        descriptions[sname] = sdesc
        tools.extend(own)
    return _checked_catalog(path, tools, descriptions, problems)


def _load_wrapped(path: Path, items: list, problems: _Problems) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for i, item in enumerate(items):
        at = f"{path}, entry {i}"
        sname = f"entry {i}"
        try:
            srv = item.get("server") if isinstance(item, dict) else None
            if not isinstance(srv, dict):
                raise CatalogError(f"{at}: expected {{'server': {{'name', 'description'}}, 'tools': [...]}}")
            sname = _file_name(_text(srv.get("name"), f"{at}, server", "name", required=True))
            sdesc = _text(srv.get("description"), f"{at}, server '{sname}'", "description", required=False)
            if isinstance(item.get("tools"), list):   # tool names as in the file, surrounding spaces removed
                item = {**item, "tools": [{**raw, "name": _file_name(raw.get("name"))} if isinstance(raw, dict) else raw
                                          for raw in item["tools"]]}
            own = tools_from_mcp_list(sname, sdesc, item, str(path))
        except CatalogError as exc:
            problems.skip(sname, exc)
            continue
        descriptions[sname] = sdesc
        tools.extend(own)
    return _checked_catalog(path, tools, descriptions, problems)


JSONL_FIELDS = frozenset({"server", "name", "description", "server_description", "inputSchema", "examples"})


def _load_jsonl(path: Path, problems: _Problems) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    unread: dict[str, int] = {}   # a field this format does not read, and the first line that has it
    for lineno, row in _read_jsonl(path):
        at = f"{path}, line {lineno}"
        server = f"line {lineno}"
        try:
            if not isinstance(row, dict):
                raise CatalogError(f"{at}: each line must be a JSON object")
            for key in row:
                if key not in JSONL_FIELDS:
                    unread.setdefault(str(key), lineno)
            server = _file_name(_text(row.get("server"), at, "server", required=True))
            name = _file_name(_text(row.get("name"), f"{at}, server '{server}'", "name", required=True))
            tat = f"{at}, server '{server}', tool '{name}'"
            desc = _text(row.get("description"), tat, "description", required=False)
            sdesc = _text(row.get("server_description"), tat, "server_description", required=False)
            schema = check_schema(row.get("inputSchema"), tat)
            examples = row.get("examples")   # an index's own tools.jsonl carries them: read back, not lost
            examples = [] if examples is None else _example_list(examples, tat)
        except CatalogError as exc:
            problems.skip(server, exc)
            continue
        if sdesc:
            descriptions[server] = sdesc
        tools.append(Tool(server, name, desc, schema, sdesc or descriptions.get(server, ""),
                          tuple(e.strip() for e in examples if e.strip())))
    if unread:   # most often a misspelt field ('desc'): its text would silently be missing from the index
        log.warning("%s: fields not read: %s; a line reads %s", path,
                    ", ".join(f"{k!r} (line {n})" for k, n in sorted(unread.items(), key=lambda kv: kv[1])[:5]),
                    ", ".join(sorted(JSONL_FIELDS)))
    return _checked_catalog(path, tools, descriptions, problems)


def _checked_catalog(path: Path, tools: list[Tool], descriptions: dict[str, str], problems: _Problems) -> Catalog:
    """Names checked and NFC-normalised (see the module's content rules), pairs unique; a server
    with a problem is refused (strict) or left out whole, with the reason (lenient)."""
    seen: set[ToolId] = set()
    named: dict[str, str] = {}
    out = []
    for t in tools:
        if t.server in problems.skipped:
            continue
        try:
            server = named.get(t.server)
            if server is None:
                server = named[t.server] = check_name(t.server, f"{path}, server name {t.server!r}")
            name = check_name(t.name, f"{path}, server '{server}', tool name")
            if (server, name) != (t.server, t.name):
                t = Tool(server, name, t.description, t.input_schema, t.server_description, t.examples)
            if t.id in seen:
                raise CatalogError(f"{path}, server '{t.server}', tool '{t.name}': duplicate (server, tool) pair")
        except CatalogError as exc:
            problems.skip(t.server, exc)
            continue
        seen.add(t.id)
        out.append(t)
    bad = {named.get(s, s) for s in problems.skipped}
    out = [t for t in out if t.server not in bad]
    descriptions = {named.get(k, unicodedata.normalize("NFC", k)): v for k, v in descriptions.items()
                    if k not in problems.skipped}
    return Catalog(out, {k: v for k, v in descriptions.items() if k not in bad})


def load_catalog(path: str | Path, *, allow_empty: bool = False) -> Catalog:
    """Load a catalog file in any supported format (see module docstring), all or nothing.

    Surrounding spaces of server and tool names are removed (harmless); anything else wrong
    refuses the file. :func:`read_catalog` loads the servers that are fine instead.

    Raises:
        CatalogError: the file is missing, not valid JSON, a record is malformed, or (unless
            ``allow_empty``) it holds no tool at all.
    """
    return _load(Path(path), _Problems(strict=True), allow_empty=allow_empty)


def read_catalog(path: str | Path) -> tuple[Catalog, list[SkippedServer]]:
    """Load the servers of a catalog file that are fine, and say which were left out and why.

    For files written by others: one bad server (a malformed tool, a name with an invisible
    character, a duplicate) leaves that server out, with a warning naming it and the reason,
    instead of refusing thousands of good ones. Surrounding spaces of names are removed.

    Raises:
        CatalogError: the file itself cannot be read (missing, not UTF-8, not JSON, unknown format),
            or no server at all could be loaded.
    """
    path = Path(path)
    problems = _Problems(strict=False)
    catalog = _load(path, problems)
    skipped = problems.report()
    for s in skipped:
        log.warning("%s: server %r left out: %s", path, s.server, s.reason)
    if skipped and not len(catalog):
        raise CatalogError(f"{path}: no server could be loaded; the first problem: {skipped[0].reason}")
    return catalog, skipped


def _load(path: Path, problems: _Problems, allow_empty: bool = False) -> Catalog:
    catalog = _load_any(path, problems)
    if not len(catalog) and not problems.skipped and not allow_empty:
        raise CatalogError(f"{path}: no tools in this file")
    return catalog


def _load_any(path: Path, problems: _Problems) -> Catalog:
    if path.suffix == ".jsonl":
        return _load_jsonl(path, problems)
    data = _read_json(path)
    if isinstance(data, dict) and "server" in data:
        return _load_wrapped(path, [data], problems)
    if isinstance(data, list) and data and isinstance(data[0], dict) and "server" in data[0] \
            and isinstance(data[0]["server"], dict):
        return _load_wrapped(path, data, problems)
    if isinstance(data, list):
        return _load_mcp_zero(path, data, problems)
    if isinstance(data, dict) and "tools" in data:
        raise CatalogError(
            f"{path}: a bare tools/list result has no server name; wrap it as "
            '{"server": {"name": ..., "description": ...}, "tools": [...]}'
        )
    raise CatalogError(f"{path}: unrecognised catalog format (expected MCP-Zero list, wrapped tools/list, or JSONL)")


def _example_list(value: Any, at: str) -> list[str]:
    """A tool's example requests as a file gives them: a list of strings, each a valid text."""
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise CatalogError(f"{at}: 'examples' must be a list of strings")
    for i, e in enumerate(value):
        check_text(e, f"{at}, examples[{i}]")
    return value


def load_examples(path: str | Path) -> dict[ToolId, list[str]]:
    """Example requests per tool: ``{"server", "tool", "examples": [...]}`` per line."""
    path = Path(path)
    out: dict[ToolId, list[str]] = {}
    for lineno, row in _read_jsonl(path):
        at = f"{path}, line {lineno}"
        if not isinstance(row, dict):
            raise CatalogError(f"{at}: each line must be a JSON object")
        server = unicodedata.normalize("NFC", _text(row.get("server"), at, "server", required=True))
        tool = unicodedata.normalize("NFC", _text(row.get("tool"), at, "tool", required=True))
        ex = _example_list(row.get("examples"), f"{at}, server '{server}', tool '{tool}'")
        tid = ToolId(server, tool)
        if tid in out:
            raise CatalogError(f"{at}: duplicate examples for {tid}")
        out[tid] = ex
    return out


def default_catalog_path() -> Path:
    return DATA_DIR / "mcp_tools_cleaned.json"


def default_examples_path() -> Path:
    return DATA_DIR / "examples.jsonl"


def load_default_catalog(with_examples: bool = True) -> Catalog:
    """The shipped MCP-Zero catalog (308 servers, 2,797 tools), with example requests."""
    cat = load_catalog(default_catalog_path())
    return cat.with_examples(load_examples(default_examples_path())) if with_examples else cat
