"""The tool catalog: records, loaders for the supported formats, and validation.

A tool's identity is ``ToolId(server, tool)``; every stage carries it unchanged.
Loading is all-or-nothing: any problem raises :class:`CatalogError` naming the
file, the server and the field, and nothing is half-loaded.

Supported inputs (auto-detected by :func:`load_catalog`):

* MCP-Zero: a JSON list of ``{name, description, tools: [{name, description, parameter}]}``.
* MCP ``tools/list`` results wrapped with their server:
  ``{"server": {"name", "description"}, "tools": [...]}`` (one object, or a list of them).
* Plain JSONL: ``{"server", "name", "description", "inputSchema"?}`` per line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

__all__ = [
    "CatalogError",
    "ToolId",
    "Tool",
    "Catalog",
    "load_catalog",
    "load_examples",
    "default_catalog_path",
    "default_examples_path",
    "load_default_catalog",
    "tools_from_mcp_list",
]

DATA_DIR = Path(__file__).parent / "data" / "mcp_zero"


class CatalogError(ValueError):
    """A catalog or examples file that cannot be loaded as it is."""


class ToolId(NamedTuple):
    server: str
    tool: str

    def __str__(self) -> str:
        return f"{self.server} / {self.tool}"


@dataclass(frozen=True)
class Tool:
    """One tool as the model will see it, plus what retrieval indexes."""

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    server_description: str = ""
    examples: tuple[str, ...] = ()

    @property
    def id(self) -> ToolId:
        return ToolId(self.server, self.name)

    def content_hash(self) -> str:
        """Hash of everything indexed for this tool: a change means re-embedding."""
        payload = json.dumps(
            [self.server, self.name, self.description, self.server_description,
             list(self.examples), self.input_schema],
            sort_keys=True, ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

    def with_examples(self, examples: Iterable[str]) -> "Tool":
        return Tool(self.server, self.name, self.description, self.input_schema,
                    self.server_description, tuple(examples))

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "server_description": self.server_description,
            "examples": list(self.examples),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tool":
        return cls(d["server"], d["name"], d.get("description") or "", d.get("inputSchema"),
                   d.get("server_description") or "", tuple(d.get("examples") or ()))


class Catalog:
    """An ordered, duplicate-free collection of tools, with server descriptions."""

    def __init__(self, tools: Iterable[Tool] = (), server_descriptions: dict[str, str] | None = None):
        self.tools: list[Tool] = []
        self._by_id: dict[ToolId, Tool] = {}
        self.server_descriptions: dict[str, str] = dict(server_descriptions or {})
        for tool in tools:
            if tool.id in self._by_id:
                raise CatalogError(f"duplicate tool {tool.id}: each (server, tool) pair must be unique")
            self._by_id[tool.id] = tool
            self.tools.append(tool)
            self.server_descriptions.setdefault(tool.server, tool.server_description)

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._by_id

    def get(self, tool_id: ToolId) -> Tool | None:
        return self._by_id.get(ToolId(*tool_id))

    def __getitem__(self, tool_id: ToolId) -> Tool:
        return self._by_id[ToolId(*tool_id)]

    @property
    def servers(self) -> list[str]:
        return list(dict.fromkeys(t.server for t in self.tools))

    def server_tools(self, server: str) -> list[Tool]:
        return [t for t in self.tools if t.server == server]

    def with_examples(self, examples: dict[ToolId, list[str]], strict: bool = True) -> "Catalog":
        """A copy whose tools carry their example requests.

        Raises CatalogError (when ``strict``) if an example names a tool not in the catalog.
        """
        if strict:
            unknown = [tid for tid in examples if tid not in self._by_id]
            if unknown:
                raise CatalogError(
                    f"{len(unknown)} example entries name tools not in the catalog, e.g. {unknown[0]}"
                )
        return Catalog(
            (t.with_examples(examples.get(t.id, t.examples)) for t in self.tools),
            self.server_descriptions,
        )

    def without_examples(self) -> "Catalog":
        return Catalog((t.with_examples(()) for t in self.tools), self.server_descriptions)


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


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not UTF-8 text ({exc})") from None
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{path}, line {lineno}: invalid JSON: {exc.msg}") from None
    return rows


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
    return value


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
        name = _text(raw.get("name"), at, "name", required=True)
        at = f"{where}, server '{server}', tool '{name}'"
        desc = _text(raw.get("description"), at, "description", required=False)
        schema = raw.get("inputSchema")
        if schema is not None and not isinstance(schema, dict):
            raise CatalogError(f"{at}: field 'inputSchema' must be an object")
        tools.append(Tool(server, name, desc, schema, server_description))
    return tools


def _load_mcp_zero(path: Path, data: list) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for i, srv in enumerate(data):
        at = f"{path}, servers[{i}]"
        if not isinstance(srv, dict):
            raise CatalogError(f"{at}: each server must be an object")
        sname = _text(srv.get("name"), at, "name", required=True)
        at = f"{path}, server '{sname}'"
        sdesc = _text(srv.get("description"), at, "description", required=False)
        if sname in descriptions:
            raise CatalogError(f"{at}: duplicate server name")
        descriptions[sname] = sdesc
        raw_tools = srv.get("tools")
        if not isinstance(raw_tools, list):
            raise CatalogError(f"{at}: field 'tools' must be a list")
        for j, raw in enumerate(raw_tools):
            tat = f"{at}, tools[{j}]"
            if not isinstance(raw, dict):
                raise CatalogError(f"{tat}: each tool must be an object")
            name = _text(raw.get("name"), tat, "name", required=True)
            tat = f"{at}, tool '{name}'"
            desc = _text(raw.get("description"), tat, "description", required=False)
            schema = raw.get("inputSchema") if isinstance(raw.get("inputSchema"), dict) else \
                _schema_from_parameters(raw.get("parameter"))
            tools.append(Tool(sname, name, desc, schema, sdesc))
    return _checked_catalog(path, tools, descriptions)


def _load_wrapped(path: Path, items: list) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for i, item in enumerate(items):
        at = f"{path}, entry {i}"
        srv = item.get("server") if isinstance(item, dict) else None
        if not isinstance(srv, dict):
            raise CatalogError(f"{at}: expected {{'server': {{'name', 'description'}}, 'tools': [...]}}")
        sname = _text(srv.get("name"), f"{at}, server", "name", required=True)
        sdesc = _text(srv.get("description"), f"{at}, server '{sname}'", "description", required=False)
        descriptions[sname] = sdesc
        tools.extend(tools_from_mcp_list(sname, sdesc, item, str(path)))
    return _checked_catalog(path, tools, descriptions)


def _load_jsonl(path: Path) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for lineno, row in _read_jsonl(path):
        at = f"{path}, line {lineno}"
        if not isinstance(row, dict):
            raise CatalogError(f"{at}: each line must be a JSON object")
        server = _text(row.get("server"), at, "server", required=True)
        name = _text(row.get("name"), f"{at}, server '{server}'", "name", required=True)
        tat = f"{at}, server '{server}', tool '{name}'"
        desc = _text(row.get("description"), tat, "description", required=False)
        sdesc = _text(row.get("server_description"), tat, "server_description", required=False)
        schema = row.get("inputSchema")
        if schema is not None and not isinstance(schema, dict):
            raise CatalogError(f"{tat}: field 'inputSchema' must be an object")
        if sdesc:
            descriptions[server] = sdesc
        tools.append(Tool(server, name, desc, schema, sdesc or descriptions.get(server, "")))
    return _checked_catalog(path, tools, descriptions)


def _checked_catalog(path: Path, tools: list[Tool], descriptions: dict[str, str]) -> Catalog:
    seen: set[ToolId] = set()
    for t in tools:
        if t.id in seen:
            raise CatalogError(f"{path}, server '{t.server}', tool '{t.name}': duplicate (server, tool) pair")
        seen.add(t.id)
    return Catalog(tools, descriptions)


def load_catalog(path: str | Path) -> Catalog:
    """Load a catalog file in any supported format (see module docstring).

    Raises:
        CatalogError: the file is missing, not valid JSON, or a record is malformed.
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        return _load_jsonl(path)
    data = _read_json(path)
    if isinstance(data, dict) and "server" in data:
        return _load_wrapped(path, [data])
    if isinstance(data, list) and data and isinstance(data[0], dict) and "server" in data[0] \
            and isinstance(data[0]["server"], dict):
        return _load_wrapped(path, data)
    if isinstance(data, list):
        return _load_mcp_zero(path, data)
    if isinstance(data, dict) and "tools" in data:
        raise CatalogError(
            f"{path}: a bare tools/list result has no server name; wrap it as "
            '{"server": {"name": ..., "description": ...}, "tools": [...]}'
        )
    raise CatalogError(f"{path}: unrecognised catalog format (expected MCP-Zero list, wrapped tools/list, or JSONL)")


def load_examples(path: str | Path) -> dict[ToolId, list[str]]:
    """Example requests per tool: ``{"server", "tool", "examples": [...]}`` per line."""
    path = Path(path)
    out: dict[ToolId, list[str]] = {}
    for lineno, row in _read_jsonl(path):
        at = f"{path}, line {lineno}"
        if not isinstance(row, dict):
            raise CatalogError(f"{at}: each line must be a JSON object")
        server = _text(row.get("server"), at, "server", required=True)
        tool = _text(row.get("tool"), at, "tool", required=True)
        ex = row.get("examples")
        if not isinstance(ex, list) or not all(isinstance(e, str) for e in ex):
            raise CatalogError(f"{at}, server '{server}', tool '{tool}': 'examples' must be a list of strings")
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
