"""A selected tool's full definition, ready to hand to a model.

Three shapes:

* ``"mcp"``: ``{"name", "description", "inputSchema"}`` as in an MCP ``tools/list`` result
  (the tool's own name; the client calls it on its server).
* ``"openai"``: ``{"type": "function", "function": {"name", "description", "parameters"}}``.
* ``"anthropic"``: ``{"name", "description", "input_schema"}``.

OpenAI and Anthropic accept names matching ``^[a-zA-Z0-9_-]{1,64}$`` and one flat namespace,
so those names are built from the server and the tool: "Airflow" / "List DAGs" becomes
``Airflow__List_DAGs``. The result is deterministic; a name over 64 characters is cut and
ends in a short hash of the original id, and :func:`build_definitions` makes names unique
within one result (colliding names get the hash too). The original ``(server, tool)`` id
travels beside each definition, never inside the model-facing dict.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Literal, get_args

from retrieval.catalog.model import Tool, ToolId

__all__ = [
    "Format",
    "FORMATS",
    "DefinitionSet",
    "to_mcp",
    "to_openai",
    "to_anthropic",
    "definition",
    "build_definitions",
    "function_name",
    "NAME_RE",
]

Format = Literal["mcp", "openai", "anthropic"]
FORMATS: tuple[str, ...] = get_args(Format)

MAX_NAME_LEN = 64
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")   # what OpenAI and Anthropic accept
_INVALID_RUN_RE = re.compile(r"[^A-Za-z0-9_-]+")
_HASH_LEN = 8


def _empty_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def _schema(tool: Tool) -> dict[str, Any]:
    """A copy of the tool's input schema (callers may mutate it), never missing."""
    schema = tool.input_schema
    if not isinstance(schema, dict) or not schema:
        return _empty_schema()
    schema = copy.deepcopy(schema)
    schema.setdefault("type", "object")
    if schema["type"] == "object":
        schema.setdefault("properties", {})
    return schema


def _clean(part: str) -> str:
    s = _INVALID_RUN_RE.sub("_", part.strip())
    s = re.sub(r"_*-_*", "-", s)           # "AWS - x" -> "AWS-x", not "AWS_-_x"
    return s.strip("_-")


def _id_hash(tool_id: ToolId) -> str:
    return hashlib.sha1(f"{tool_id[0]}\x00{tool_id[1]}".encode("utf-8")).hexdigest()[:_HASH_LEN]


def function_name(tool_id: tuple[str, str], *, force_hash: bool = False) -> str:
    """The OpenAI/Anthropic-safe name for ``(server, tool)``: ``{server}__{tool}``.

    Characters outside ``[A-Za-z0-9_-]`` become ``_``; a name longer than 64 characters
    (or any name when ``force_hash``) is cut to fit and ends in ``_`` plus 8 hex digits of a
    hash of the original id, so different ids never share a cut name in practice. A server
    or tool name with no usable character at all also gets the hash.
    """
    server, tool = tool_id
    parts = (_clean(server), _clean(tool))
    base = "__".join(p for p in parts if p) or "tool"
    if not all(parts):
        force_hash = True                   # nothing of a part survived: keep ids apart
    if not force_hash and len(base) <= MAX_NAME_LEN:
        return base
    suffix = "_" + _id_hash(ToolId(server, tool))
    return base[: MAX_NAME_LEN - len(suffix)].rstrip("_-") + suffix


def to_mcp(tool: Tool) -> dict[str, Any]:
    """``{"name", "description", "inputSchema"}`` with the tool's own name."""
    return {"name": tool.name, "description": tool.description, "inputSchema": _schema(tool)}


def to_openai(tool: Tool, *, name: str | None = None) -> dict[str, Any]:
    """An OpenAI function tool; ``name`` defaults to :func:`function_name`."""
    return {
        "type": "function",
        "function": {
            "name": name or function_name(tool.id),
            "description": tool.description,
            "parameters": _schema(tool),
        },
    }


def to_anthropic(tool: Tool, *, name: str | None = None) -> dict[str, Any]:
    """An Anthropic tool; ``name`` defaults to :func:`function_name`."""
    return {"name": name or function_name(tool.id), "description": tool.description,
            "input_schema": _schema(tool)}


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown definition format {fmt!r}: use one of {', '.join(FORMATS)}")


def definition(tool: Tool, fmt: Format = "mcp") -> dict[str, Any]:
    """One tool's definition in ``fmt``.

    For a result of several tools use :func:`build_definitions`, which also keeps names
    unique and maps them back to tool ids.

    Raises:
        ValueError: ``fmt`` is not "mcp", "openai" or "anthropic".
    """
    _check_format(fmt)
    if fmt == "mcp":
        return to_mcp(tool)
    if fmt == "openai":
        return to_openai(tool)
    return to_anthropic(tool)


@dataclass(frozen=True)
class DefinitionSet:
    """Definitions for one result, each with the id it came from.

    Attributes:
        fmt: the format of every definition.
        tool_ids: the original ``(server, tool)`` ids, aligned with ``definitions``.
        definitions: the model-facing dicts, in the order the tools were given.
        names: the model-facing name of each definition, aligned with ``tool_ids``.
    """

    fmt: str
    tool_ids: tuple[ToolId, ...]
    definitions: tuple[dict[str, Any], ...]
    names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.definitions)

    def by_name(self) -> dict[str, ToolId]:
        """Model-facing name -> tool id, to route a model's tool call back (openai and
        anthropic names are unique; for mcp, names repeated across servers map to the first)."""
        out: dict[str, ToolId] = {}
        for name, tid in zip(self.names, self.tool_ids):
            out.setdefault(name, tid)
        return out

    def tool_id(self, name: str) -> ToolId:
        """The tool id behind a model-facing name.

        Raises:
            KeyError: no definition in this set has that name.
        """
        mapping = self.by_name()
        if name not in mapping:
            raise KeyError(f"no tool named {name!r} in this result; names: {sorted(mapping)}")
        return mapping[name]

    def __iter__(self):
        return iter(zip(self.tool_ids, self.definitions))


def build_definitions(tools: Iterable[Tool], fmt: Format = "mcp") -> DefinitionSet:
    """Definitions for a result's tools, with names unique within the result.

    For "openai"/"anthropic", names are :func:`function_name`; when two tools of the result
    would share one, each of them gets the hashed form, whatever the order of ``tools``.
    "mcp" keeps each tool's own name (MCP calls go to the tool's own server).

    Raises:
        ValueError: unknown ``fmt``, or the same tool given twice.
    """
    _check_format(fmt)
    tools = list(tools)
    ids = [t.id for t in tools]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"tool {dup} appears twice in the result: pass each tool once")
    if fmt == "mcp":
        defs = tuple(to_mcp(t) for t in tools)
        return DefinitionSet(fmt, tuple(ids), defs, tuple(t.name for t in tools))
    names = [function_name(tid) for tid in ids]
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    names = [function_name(tid, force_hash=True) if counts[n] > 1 else n for n, tid in zip(names, ids)]
    if len(set(names)) != len(names):              # a hashed name equal to a plain one: vanishingly rare
        names = [function_name(tid, force_hash=True) for tid in ids]
    build = to_openai if fmt == "openai" else to_anthropic
    defs = tuple(build(t, name=n) for t, n in zip(tools, names))
    return DefinitionSet(fmt, tuple(ids), defs, tuple(names))
