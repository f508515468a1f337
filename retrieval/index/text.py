"""How a tool becomes searchable text: name segments, keywords, documents."""

from __future__ import annotations

import re

from retrieval.catalog.model import Tool

__all__ = ["split_identifier", "server_segments", "tool_document", "tool_passages"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEP = re.compile(r"[\s_\-./:()]+")


def split_identifier(name: str) -> list[str]:
    """``getShardAllocation`` / ``get_shard-allocation`` -> ['get', 'shard', 'allocation']."""
    parts = []
    for chunk in _SEP.split(name):
        parts.extend(p for p in _CAMEL.split(chunk) if p)
    return [p.lower() for p in parts]


def server_segments(server: str) -> list[str]:
    return split_identifier(server)


def tool_document(tool: Tool, *, with_examples: bool = True) -> str:
    """The BM25 document: server name and segments, tool name split, descriptions, examples."""
    parts = [
        tool.server,
        " ".join(server_segments(tool.server)),
        tool.name,
        " ".join(split_identifier(tool.name)),
        tool.description,
        tool.server_description,
    ]
    if with_examples:
        parts.extend(tool.examples)
    return "\n".join(p for p in parts if p)


def tool_passages(tool: Tool, *, with_examples: bool = True) -> list[str]:
    """Texts embedded for dense search; a tool's vector is the centroid of their embeddings.

    The first passage is the tool card (names + description); each example request
    is its own passage, so a request can match the way people actually ask.
    """
    card = f"{tool.server}: {' '.join(split_identifier(tool.name))}. {tool.description}".strip()
    passages = [card]
    if with_examples:
        passages.extend(e for e in tool.examples if e.strip())
    return passages
