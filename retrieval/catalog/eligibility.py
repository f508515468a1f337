"""Which tools a tenant may use. A filter applied before ranking, never a ranking signal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .model import ToolId

__all__ = ["Eligibility"]


@dataclass(frozen=True)
class Eligibility:
    """Allowed servers and, optionally, allowed (server, tool) ids.

    ``servers=None`` allows every server; ``tools=None`` allows every tool of an allowed
    server. Both given: a tool must pass both.
    """

    servers: frozenset[str] | None = None
    tools: frozenset[ToolId] | None = None

    @classmethod
    def of(cls, servers: Iterable[str] | None = None, tools: Iterable[tuple[str, str]] | None = None) -> "Eligibility":
        """Build from any iterables of server names and ``(server, tool)`` pairs.

        Raises:
            ValueError: ``servers`` is a single string (wrap it in a list).
        """
        if isinstance(servers, str):
            raise ValueError(f"servers must be a list of names, got the string {servers!r}: wrap it as [{servers!r}]")
        return cls(
            frozenset(servers) if servers is not None else None,
            frozenset(ToolId(*t) for t in tools) if tools is not None else None,
        )

    @property
    def unrestricted(self) -> bool:
        return self.servers is None and self.tools is None

    def allows(self, tool_id: tuple[str, str]) -> bool:
        if self.servers is not None and tool_id[0] not in self.servers:
            return False
        if self.tools is not None and ToolId(*tool_id) not in self.tools:
            return False
        return True

    def allows_server(self, server: str) -> bool:
        if self.servers is not None and server not in self.servers:
            return False
        if self.tools is not None and not any(t.server == server for t in self.tools):
            return False
        return True

    def narrowed_to(self, servers: Iterable[str]) -> "Eligibility":
        """The same policy, further restricted to ``servers`` (for explicit server mentions)."""
        keep = frozenset(servers)
        return Eligibility(keep if self.servers is None else self.servers & keep, self.tools)
