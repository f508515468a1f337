"""The catalog's records: ``ToolId``, ``Tool``, ``Catalog``, and ``CatalogError``.

A tool's identity is ``ToolId(server, tool)``; every stage carries it unchanged. A
:class:`Catalog` is ordered and duplicate-free. Files become catalogs in :mod:`.formats`,
under the content rules of :mod:`.rules`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, NamedTuple

__all__ = ["CatalogError", "ToolId", "Tool", "Catalog"]


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
