"""The tool catalog: records, loaders for the supported formats, and validation.

A tool's identity is ``ToolId(server, tool)``; every stage carries it unchanged.
Loading is all-or-nothing: any problem raises :class:`CatalogError` naming the
file, the server and the field, and nothing is half-loaded.

Supported inputs (auto-detected by :func:`load_catalog`):

* MCP-Zero: a JSON list of ``{name, description, tools: [{name, description, parameter}]}``.
* MCP ``tools/list`` results wrapped with their server:
  ``{"server": {"name", "description"}, "tools": [...]}`` (one object, or a list of them).
* Plain JSONL: ``{"server", "name", "description", "inputSchema"?}`` per line.

Every loader (and the service's ``PUT /v1/servers``) applies the same content rules, so
whatever is accepted can be stored and read back unchanged:

* server and tool names: NFC-normalised; 1 to 200 characters; printable only (no control,
  format, bidi-override, zero-width, private-use or unassigned characters, no U+FFFD, no
  space but U+0020 and none at either end); letters of one of the look-alike scripts only
  (Latin, Greek, Cyrillic, Armenian, Cherokee, Coptic are never mixed in one name); no
  compatibility forms of letters or digits (full-width, mathematical, ligatures);
* every text: no lone surrogates;
* ``inputSchema``: a JSON object nested at most :data:`MAX_SCHEMA_DEPTH` levels, at most
  :data:`MAX_SCHEMA_BYTES` bytes as compact JSON, finite numbers, integers within 64 bits.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from retrieval.jsonl import read_jsonl

log = logging.getLogger(__name__)

__all__ = [
    "CatalogError",
    "SkippedServer",
    "read_catalog",
    "ToolId",
    "Tool",
    "Catalog",
    "load_catalog",
    "load_examples",
    "default_catalog_path",
    "default_examples_path",
    "load_default_catalog",
    "tools_from_mcp_list",
    "MAX_NAME_CHARS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_BYTES",
    "check_name",
    "check_text",
    "check_json",
    "check_schema",
    "confusable_with",
]

DATA_DIR = Path(__file__).parent.parent / "data" / "mcp_zero"


class CatalogError(ValueError):
    """A catalog or examples file that cannot be loaded as it is."""


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


# ---------------------------------------------------------------- content rules

MAX_NAME_CHARS = 200
MAX_SCHEMA_DEPTH = 64              # nesting levels of an inputSchema (the object itself is level 1); real Smithery schemas reach 33
MAX_SCHEMA_BYTES = 256 * 1024      # an inputSchema as compact UTF-8 JSON; the largest real Smithery one is 137 KB
_MAX_JSON_INT = 2 ** 63            # integers must fit 64 bits (what other JSON readers keep exact)

# Characters that are never part of a name: controls, format characters (bidi overrides and
# isolates, zero-width joiners, the BOM, soft hyphens), surrogates, private use, unassigned,
# line and paragraph separators. Spaces other than U+0020 are refused separately.
_NEVER_IN_NAMES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
# Scripts whose letters pass for each other; a name may use letters of one of them only.
_LOOKALIKE_SCRIPTS = {"LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "CHEROKEE", "COPTIC"}
# Whole-script look-alikes of Latin letters, for telling apart names that read the same.
_LOOKALIKES = str.maketrans(dict(zip(
    "аеорсухіјѕԁӏһԛԝѵъьАВЕКМНОРСТХУІЈЅԜΑΒΕΖΗΙΚΜΝΟΡΤΥΧοινκρτυχαօսզց",
    "aeopcyxijsdlhqwvbbABEKMHOPCTXYIJSWABEZHIKMNOPTYXoivkptuxaouqg")))
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_name(value: Any, what: str) -> str:
    """A server or tool name, NFC-normalised; raises :class:`CatalogError` naming the problem.

    Args:
        value: the name as given.
        what: how to name it in the message, e.g. ``"server name"`` or ``"tools[2].name"``.
    """
    if not isinstance(value, str):
        raise CatalogError(f"{what} must be a string, got {type(value).__name__}")
    check_text(value, what)
    name = unicodedata.normalize("NFC", value)
    if not name or len(name) > MAX_NAME_CHARS:
        raise CatalogError(f"{what} must be 1 to {MAX_NAME_CHARS} characters, got {len(name)}")
    if not name.strip():
        raise CatalogError(f"{what} is empty (only spaces); write a name")
    if name != name.strip(" "):
        raise CatalogError(f"{what} {name!r} starts or ends with a space; remove it")
    scripts: set[str] = set()
    for i, ch in enumerate(name):
        cat = unicodedata.category(ch)
        if cat in _NEVER_IN_NAMES or (cat == "Zs" and ch != " ") or ch == "\ufffd":
            raise CatalogError(
                f"{what} {name!r} holds the unprintable or invisible character U+{ord(ch):04X} at position {i} "
                "(controls, bidi overrides, zero-width and replacement characters are not allowed in names); "
                "write the name in plain printable characters")
        if cat[0] in "LN" and unicodedata.normalize("NFKC", ch) != ch:
            raise CatalogError(
                f"{what} {name!r} writes {ch!r} (U+{ord(ch):04X}) in a compatibility form (full-width, "
                f"mathematical or ligature); write it as {unicodedata.normalize('NFKC', ch)!r}")
        if cat[0] == "L":
            script = unicodedata.name(ch, "").split(" ")[0]
            if script in _LOOKALIKE_SCRIPTS:
                scripts.add(script)
    if len(scripts) > 1:
        raise CatalogError(
            f"{what} {name!r} mixes letters of the {' and '.join(sorted(s.title() for s in scripts))} scripts, "
            "which look alike; write it in one script")
    return name


def check_text(value: str, what: str) -> str:
    """``value`` unchanged, or :class:`CatalogError` when it holds a lone surrogate (not storable as UTF-8)."""
    m = _SURROGATE.search(value)
    if m:
        raise CatalogError(f"{what} holds a lone surrogate (U+{ord(m.group()):04X}) at position {m.start()}, "
                           "which is not Unicode text; send valid UTF-8 / JSON \\u escapes in pairs")
    return value


def check_json(value: Any, what: str, *, max_depth: int) -> int:
    """Check a parsed JSON value without recursion; returns its nesting depth.

    Refuses nesting deeper than ``max_depth`` (containers count; scalars add nothing),
    non-string keys, NaN and infinities, integers beyond 64 bits, lone surrogates in keys
    and strings, and anything that is not a JSON type.

    Raises:
        CatalogError: naming the path of the first problem.
    """
    deepest = 0
    stack: list[tuple[Any, int, str]] = [(value, 1, what)]
    while stack:
        node, depth, at = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > max_depth:
                raise CatalogError(f"{at}: nested more than {max_depth} levels deep; flatten it "
                                   f"(at most {max_depth} levels of objects and arrays)")
            deepest = max(deepest, depth)
            if isinstance(node, dict):
                for k, v in node.items():
                    if not isinstance(k, str):
                        raise CatalogError(f"{at}: object keys must be strings, got {type(k).__name__}")
                    check_text(k, f"{at}: a key")
                    stack.append((v, depth + 1, f"{at}.{k[:40]}"))
            else:
                stack.extend((v, depth + 1, f"{at}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str):
            check_text(node, at)
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int):
            if not -_MAX_JSON_INT <= node < _MAX_JSON_INT:
                raise CatalogError(f"{at}: integer {str(node)[:20]}... does not fit 64 bits; use a smaller number")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise CatalogError(f"{at}: {node} is not a JSON number; use a finite number")
        else:
            raise CatalogError(f"{at}: {type(node).__name__} is not a JSON value")
    return deepest


def check_schema(schema: Any, what: str) -> dict[str, Any] | None:
    """An ``inputSchema`` (None or a JSON object) within :data:`MAX_SCHEMA_DEPTH` and :data:`MAX_SCHEMA_BYTES`."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise CatalogError(f"{what}: field 'inputSchema' must be an object")
    check_json(schema, f"{what}: inputSchema", max_depth=MAX_SCHEMA_DEPTH)
    size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise CatalogError(f"{what}: inputSchema is {size} bytes as compact JSON; the limit is "
                           f"{MAX_SCHEMA_BYTES}: shorten its descriptions or drop unused parts")
    return schema


def _lookalike_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).translate(_LOOKALIKES)


def confusable_with(name: str, existing: Iterable[str]) -> str | None:
    """An existing name other than ``name`` that reads the same (look-alike letters of another
    script), or None. Case counts: 'FireCrawl' and 'Firecrawl' are different servers."""
    key = _lookalike_key(name)
    return next((e for e in existing if e != name and _lookalike_key(e) == key), None)


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


def _load_jsonl(path: Path, problems: _Problems) -> Catalog:
    tools: list[Tool] = []
    descriptions: dict[str, str] = {}
    for lineno, row in _read_jsonl(path):
        at = f"{path}, line {lineno}"
        server = f"line {lineno}"
        try:
            if not isinstance(row, dict):
                raise CatalogError(f"{at}: each line must be a JSON object")
            server = _file_name(_text(row.get("server"), at, "server", required=True))
            name = _file_name(_text(row.get("name"), f"{at}, server '{server}'", "name", required=True))
            tat = f"{at}, server '{server}', tool '{name}'"
            desc = _text(row.get("description"), tat, "description", required=False)
            sdesc = _text(row.get("server_description"), tat, "server_description", required=False)
            schema = check_schema(row.get("inputSchema"), tat)
        except CatalogError as exc:
            problems.skip(server, exc)
            continue
        if sdesc:
            descriptions[server] = sdesc
        tools.append(Tool(server, name, desc, schema, sdesc or descriptions.get(server, "")))
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


def load_catalog(path: str | Path) -> Catalog:
    """Load a catalog file in any supported format (see module docstring), all or nothing.

    Surrounding spaces of server and tool names are removed (harmless); anything else wrong
    refuses the file. :func:`read_catalog` loads the servers that are fine instead.

    Raises:
        CatalogError: the file is missing, not valid JSON, or a record is malformed.
    """
    return _load(Path(path), _Problems(strict=True))


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


def _load(path: Path, problems: _Problems) -> Catalog:
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
        ex = row.get("examples")
        if not isinstance(ex, list) or not all(isinstance(e, str) for e in ex):
            raise CatalogError(f"{at}, server '{server}', tool '{tool}': 'examples' must be a list of strings")
        for i, e in enumerate(ex):
            check_text(e, f"{at}, examples[{i}]")
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
