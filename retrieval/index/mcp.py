"""An MCP client configuration's index: a harvest (:mod:`retrieval.catalog.mcp_harvest`) put into a
:class:`~retrieval.index.embedded.ToolIndex`, built or updated in place.

Only tools whose content changed are embedded again; a server that fails keeps its previous
tools; servers no longer configured are removed; the index is saved atomically, and only when
something changed (``toolrank index --mcp-config FILE``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence

from retrieval.catalog.mcp_harvest import (DEFAULT_TIMEOUT_S, HarvestError, McpConfig, ServerHarvest, harvest,
                                           load_mcp_config)
from retrieval.catalog.model import Catalog, Tool

if TYPE_CHECKING:
    from .embedded import ToolIndex
    from .encoder import Encoder

__all__ = ["ServerReport", "IndexReport", "default_mcp_index_path", "apply_harvest", "index_mcp_config"]

log = logging.getLogger(__name__)


def default_mcp_index_path(config_path: str | Path) -> Path:
    """Where ``toolrank index --mcp-config FILE`` keeps the index when ``--index`` is not given
    (and where ``toolrank mcp --mcp-config FILE`` looks for it): one folder per configuration
    file, under the toolrank cache."""
    from .default import cache_dir

    key = hashlib.sha256(str(Path(config_path).resolve()).encode("utf-8")).hexdigest()[:12]
    return cache_dir() / f"mcp-{key}"


@dataclass(frozen=True)
class ServerReport:
    """What happened to one server in an index update.

    ``status``: ``added`` (new in the index), ``updated`` (its tools changed), ``unchanged``,
    ``failed`` (not harvested; ``tools`` > 0 when its previous tools were kept), ``removed``
    (no longer in the configuration), ``skipped`` (disabled, or toolrank itself).
    """

    name: str
    status: Literal["added", "updated", "unchanged", "failed", "removed", "skipped"]
    tools: int = 0
    re_embedded: int = 0
    seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class IndexReport:
    path: Path | None
    servers: list[ServerReport]
    tools: int
    changed: bool

    @property
    def failed(self) -> list[ServerReport]:
        return [s for s in self.servers if s.status == "failed"]

    def format(self) -> str:
        """A table, one server a line, then a summary line."""
        rows = [("server", "status", "tools", "embedded", "seconds", "")]
        for s in self.servers:
            rows.append((s.name, s.status, str(s.tools), str(s.re_embedded),
                         f"{s.seconds:.2f}" if s.seconds else "", s.reason))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2]),
                            r[3].rjust(widths[3]), r[4].rjust(widths[4])] + ([r[5]] if r[5] else [])).rstrip()
                 for r in rows]
        indexed = sum(1 for s in self.servers if s.status in ("added", "updated", "unchanged"))
        where = f" in {self.path}" if self.path else ""
        what = "updated" if self.changed else "unchanged"
        lines.append(f"{self.tools} tools from {indexed} servers{where} ({what}); "
                     f"{len(self.failed)} server(s) failed")
        return "\n".join(lines)


def _same_tools(index: "ToolIndex", name: str, tools: list[Tool]) -> bool:
    old = index.catalog.server_tools(name)
    return [t.content_hash() for t in old] == [t.content_hash() for t in tools]


def apply_harvest(index: "ToolIndex | None", harvests: Sequence[ServerHarvest], *,
                  keep: Sequence[str] | None = None, encoder: "Encoder | None" = None,
                  ) -> tuple["ToolIndex | None", list[ServerReport]]:
    """Bring an index up to date with a harvest, embedding only tools that changed.

    Harvested servers replace their tools (or join); a failed server keeps its previous tools,
    if any; with ``keep`` (the configuration's servers), indexed servers not in it are removed.
    A new index (``index`` None) is built without example requests. The index is changed in
    place; returns it (None when there was none and nothing was harvested) and one report
    per server.
    """
    from .embedded import ToolIndex

    reports: list[ServerReport] = []
    ok = [h for h in harvests if h.ok]
    if index is None:
        tools = [t for h in ok for t in h.tools]
        if tools:
            index = ToolIndex.build(Catalog(tools), encoder=encoder, with_examples=False)
        for h in harvests:
            if h.ok:
                reports.append(ServerReport(h.name, "added", len(h.tools), len(h.tools), h.seconds))
            else:
                reports.append(ServerReport(h.name, "failed", 0, 0, h.seconds, h.error or ""))
        return index, _with_problems(reports, harvests)
    for h in harvests:
        before = len(index.catalog.server_tools(h.name))
        if not h.ok:
            kept = f" (kept its {before} tools from the previous index)" if before else ""
            reports.append(ServerReport(h.name, "failed", before, 0, h.seconds, (h.error or "") + kept))
        elif before and _same_tools(index, h.name, h.tools):
            reports.append(ServerReport(h.name, "unchanged", before, 0, h.seconds))
        elif not h.tools and not before:
            reports.append(ServerReport(h.name, "unchanged", 0, 0, h.seconds, "lists no tools"))
        elif not h.tools:
            index.remove_server(h.name)
            reports.append(ServerReport(h.name, "updated", 0, 0, h.seconds, "lists no tools now"))
        else:
            n = index.upsert_server(h.name, h.description, h.tools)
            reports.append(ServerReport(h.name, "updated" if before else "added", len(h.tools), n, h.seconds))
    if keep is not None:
        wanted = set(keep)
        for name in index.catalog.servers:
            if name not in wanted:
                removed = index.remove_server(name)
                reports.append(ServerReport(name, "removed", removed, 0, 0.0, "not in the configuration"))
    return index, _with_problems(reports, harvests)


def _with_problems(reports: list[ServerReport], harvests: Sequence[ServerHarvest]) -> list[ServerReport]:
    """The reports, each saying which of its server's tools were left out as malformed."""
    problems = {h.name: h.problems for h in harvests if h.problems}
    out = []
    for r in reports:
        if r.name in problems and r.status != "failed":
            p = problems[r.name]
            note = f"{len(p)} malformed tool(s) left out: " + "; ".join(p[:3]) + (" ..." if len(p) > 3 else "")
            r = replace(r, reason=f"{r.reason}; {note}" if r.reason else note)
        out.append(r)
    return out


def index_mcp_config(config: str | Path | McpConfig, index_dir: str | Path | None = None, *,
                     timeout_s: float = DEFAULT_TIMEOUT_S, encoder: "Encoder | None" = None) -> IndexReport:
    """Harvest every server of an MCP configuration and build or update its index.

    The index at ``index_dir`` (default: :func:`default_mcp_index_path`) is loaded if there
    is one; servers whose tools changed are updated (only changed tools are embedded again),
    servers no longer configured are removed, and a server that fails keeps its previous
    tools. The result is saved atomically, and only when something changed.

    Raises:
        McpConfigError: the configuration cannot be used.
        HarvestError: no server could be harvested and there is no previous index.
        IndexSaveError: ``index_dir`` is something other than an index.
    """
    import anyio

    from .embedded import IndexLoadError, ToolIndex

    if not isinstance(config, McpConfig):
        config = load_mcp_config(config)
    path = Path(index_dir) if index_dir is not None else default_mcp_index_path(config.path)
    index = None
    if (path / "manifest.json").exists():
        try:
            index = ToolIndex.load(path, encoder=encoder) if encoder is not None else ToolIndex.load(path)
        except IndexLoadError as exc:
            log.warning("rebuilding the index at %s: %s", path, exc)
    harvests = anyio.run(lambda: harvest(config, timeout_s=timeout_s))
    index, reports = apply_harvest(index, harvests, keep=list(config.servers), encoder=encoder)
    reports += [ServerReport(name, "skipped", reason=why) for name, why in config.skipped.items()]
    if index is None:
        why = "; ".join(f"{h.name}: {h.error}" for h in harvests if not h.ok)
        raise HarvestError(f"no server could be indexed ({why})" if why else "the servers list no tools")
    changed = any(r.status in ("added", "updated", "removed") for r in reports) or not (path / "manifest.json").exists()
    if changed:
        index.save(path)
    return IndexReport(path, reports, len(index.catalog), changed)
