"""Harvesting an MCP client configuration: connect to every server, list its tools, index them.

The configuration is the one MCP clients (Claude Desktop, Cursor, ...) write::

    {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "linear": {"url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer ..."}}}}

Each server is started (``command``: stdio) or reached (``url``: streamable HTTP) through the
official SDK's client; ``tools/list`` is followed through every page, and each tool becomes the
same :class:`~retrieval.catalog.Tool` record every other loader makes, through the same
validation (:func:`~retrieval.catalog.tools_from_mcp_list`). The server's name in the index is its
key in ``mcpServers``.

A server that fails to start, times out, or lists malformed tools is reported by name with the
reason; the others are indexed. :func:`index_mcp_config` updates an existing index in place
(only changed tools are embedded again) and saves it atomically, so nothing half-written is left.

Secrets: ``env`` and ``headers`` often hold tokens. They are passed to the server and never
logged, printed or saved (the index keeps only names, descriptions and schemas).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Literal, Sequence

from .catalog import Catalog, CatalogError, Tool, tools_from_mcp_list

if TYPE_CHECKING:
    from mcp import ClientSession, types

    from .encoder import Encoder
    from .index import ToolIndex

__all__ = [
    "McpConfigError",
    "HarvestError",
    "ServerSpec",
    "McpConfig",
    "ServerHarvest",
    "ServerReport",
    "IndexReport",
    "DEFAULT_TIMEOUT_S",
    "load_mcp_config",
    "default_mcp_index_path",
    "open_session",
    "list_all_tools",
    "tools_from_listing",
    "server_description",
    "harvest_server",
    "harvest",
    "apply_harvest",
    "index_mcp_config",
    "describe_error",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0     # per server: start, initialize and every page of tools/list
MAX_PAGES = 1000             # a tools/list that pages on past this is broken
MAX_CONCURRENT = 8           # servers started at once
_DESCRIPTION_CHARS = 300

_STDIO_KEYS = {"command", "args", "env", "cwd"}
_HTTP_KEYS = {"url", "headers"}
_COMMON_KEYS = {"type", "timeout", "description", "disabled"}
# Client-side permission lists some clients write into the same entry; not toolrank's business.
_CLIENT_KEYS = {"autoApprove", "alwaysAllow"}
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http",
          "streamable_http": "http"}


class McpConfigError(CatalogError):
    """An MCP client configuration that cannot be used as it is."""


class HarvestError(ValueError):
    """One server's tools could not be harvested (the reason is the message)."""


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """One entry of ``mcpServers``: how to reach the server.

    ``command`` (stdio) or ``url`` (streamable HTTP), never both. ``env`` and ``headers`` are
    kept out of ``repr`` since they usually hold secrets.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, repr=False, compare=False)
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, str] | None = field(default=None, repr=False, compare=False)
    timeout_s: float | None = None
    description: str = ""

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """Where the server is, for messages (no arguments, no secrets)."""
        return self.command if self.command is not None else str(self.url)


@dataclass(frozen=True)
class McpConfig:
    """A parsed configuration: the servers to index, and the entries left out (with why)."""

    path: Path
    servers: dict[str, ServerSpec]
    skipped: dict[str, str] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.servers


# ------------------------------------------------------------------ the configuration file


def _is_toolrank_itself(command: str, args: Sequence[str]) -> bool:
    """``toolrank mcp ...`` (or ``python -m retrieval.cli mcp``) in the configuration it reads
    would start itself again and again."""
    base = Path(command).name.lower()
    if base in ("toolrank", "toolrank.exe") and "mcp" in args[:2]:
        return True
    return "retrieval.cli" in args and "mcp" in args


def _check_str_map(value: Any, at: str, key: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpConfigError(f"{at}: '{key}' must be an object of strings ({key} names to values)")
    return dict(value)


def _parse_server(path: Path, name: str, entry: Any) -> ServerSpec | str:
    """A :class:`ServerSpec`, or the reason the entry is left out (disabled, toolrank itself)."""
    at = f"{path}, server '{name}'"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{at}: each server must be an object with 'command' (stdio) or 'url' (HTTP)")
    known = _STDIO_KEYS | _HTTP_KEYS | _COMMON_KEYS | _CLIENT_KEYS
    unknown = sorted(k for k in entry if k not in known)
    if unknown:
        raise McpConfigError(f"{at}: unknown key(s) {', '.join(map(repr, unknown))}; a server takes "
                             "'command', 'args', 'env', 'cwd' (stdio) or 'url', 'headers' (HTTP), "
                             "and optionally 'type', 'timeout', 'description', 'disabled'")
    kind = entry.get("type")
    if kind is not None:
        if kind == "sse":
            raise McpConfigError(f"{at}: the deprecated SSE transport is not supported; give the server's "
                                 "streamable HTTP endpoint as 'url' (often ending in /mcp)")
        if kind not in _TYPES:
            raise McpConfigError(f"{at}: 'type' {kind!r} is not one of stdio, http, streamable-http")
        kind = _TYPES[kind]
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(f"{at}: give either 'command' (a stdio server) or 'url' (a streamable HTTP "
                             f"server){', not both' if has_command else ''}")
    if kind is not None and kind != ("stdio" if has_command else "http"):
        raise McpConfigError(f"{at}: 'type' is {kind!r} but the entry has "
                             f"{'a command' if has_command else 'a url'}")
    stray = sorted(k for k in entry if k in (_HTTP_KEYS if has_command else _STDIO_KEYS))
    if stray:
        raise McpConfigError(f"{at}: {', '.join(map(repr, stray))} does not apply to a "
                             f"{'stdio' if has_command else 'HTTP'} server")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{at}: 'disabled' must be true or false")
    timeout = entry.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise McpConfigError(f"{at}: 'timeout' must be a positive number of seconds")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise McpConfigError(f"{at}: 'description' must be a string")

    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{at}: 'command' must be a non-empty string (the program to start)")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(f"{at}: 'args' must be a list of strings")
        env = _check_str_map(entry["env"], at, "env") if "env" in entry else None
        cwd = entry.get("cwd")
        if cwd is not None:
            if not isinstance(cwd, str) or not cwd:
                raise McpConfigError(f"{at}: 'cwd' must be a folder path")
            cwd = (path.parent / cwd).resolve()   # relative to the configuration file
        if _is_toolrank_itself(command, args):
            return "toolrank itself (it would start itself again)"
        if disabled:
            return "disabled in the configuration"
        return ServerSpec(name=name, command=command, args=tuple(args), env=env, cwd=cwd,
                          timeout_s=float(timeout) if timeout else None, description=description)
    url = entry["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise McpConfigError(f"{at}: 'url' must be an http:// or https:// address")
    headers = _check_str_map(entry["headers"], at, "headers") if "headers" in entry else None
    if disabled:
        return "disabled in the configuration"
    return ServerSpec(name=name, url=url, headers=headers, timeout_s=float(timeout) if timeout else None,
                      description=description)


def load_mcp_config(path: str | Path) -> McpConfig:
    """Read an MCP client configuration (``{"mcpServers": {name: {...}}}``).

    Other top-level keys are ignored (client configuration files hold other settings too).
    A ``cwd`` is taken relative to the configuration file. Disabled entries and an entry that
    runs ``toolrank mcp`` itself are left out and listed in ``skipped``.

    Raises:
        McpConfigError: the file is missing or not JSON, ``mcpServers`` is missing or empty,
            or an entry is malformed (unknown keys, neither or both of command/url, ...).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError(f"{path}: MCP configuration file not found") from None
    except IsADirectoryError:
        raise McpConfigError(f"{path}: is a folder; pass the configuration file (e.g. mcp.json)") from None
    except UnicodeDecodeError as exc:
        raise McpConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict) or "mcpServers" not in data:
        found = f" (top-level keys: {', '.join(sorted(data))})" if isinstance(data, dict) and data else ""
        raise McpConfigError(f"{path}: no 'mcpServers' object{found}; expected "
                             '{"mcpServers": {"name": {"command": ..., "args": [...]} or {"url": ...}}}')
    entries = data["mcpServers"]
    if not isinstance(entries, dict):
        raise McpConfigError(f"{path}: 'mcpServers' must be an object mapping server names to their settings")
    if not entries:
        raise McpConfigError(f"{path}: 'mcpServers' lists no servers; add at least one")
    servers: dict[str, ServerSpec] = {}
    skipped: dict[str, str] = {}
    for name, entry in entries.items():
        if not name.strip():
            raise McpConfigError(f"{path}: a server has an empty name; give each server a name")
        parsed = _parse_server(path, name, entry)
        if isinstance(parsed, str):
            skipped[name] = parsed
        else:
            servers[name] = parsed
    if not servers:
        why = "; ".join(f"{n}: {r}" for n, r in skipped.items())
        raise McpConfigError(f"{path}: no servers left to index ({why})")
    return McpConfig(path, servers, skipped)


def default_mcp_index_path(config_path: str | Path) -> Path:
    """Where ``toolrank index --mcp-config FILE`` keeps the index when ``--index`` is not given
    (and where ``toolrank mcp --mcp-config FILE`` looks for it): one folder per configuration
    file, under the toolrank cache."""
    from .default_index import cache_dir

    key = hashlib.sha256(str(Path(config_path).resolve()).encode("utf-8")).hexdigest()[:12]
    return cache_dir() / f"mcp-{key}"


# ------------------------------------------------------------------ one server, through the SDK


def _package_version() -> str:
    try:
        from importlib.metadata import version
        return version("toolrank")
    except Exception:  # a checkout, not installed
        return "0.1.0+local"


@asynccontextmanager
async def _http_streams(spec: ServerSpec, timeout_s: float) -> AsyncIterator[tuple[Any, Any]]:
    import httpx

    timeout = httpx.Timeout(timeout_s, read=max(timeout_s, 300.0))
    try:
        from mcp.client.streamable_http import streamable_http_client
    except ImportError:  # mcp < 1.24: only the older name
        from mcp.client.streamable_http import streamablehttp_client
        async with streamablehttp_client(spec.url, headers=spec.headers, timeout=timeout_s) as (read, write, _):
            yield read, write
        return
    async with httpx.AsyncClient(headers=spec.headers or {}, timeout=timeout) as client:
        async with streamable_http_client(spec.url, http_client=client) as (read, write, _):
            yield read, write


@asynccontextmanager
async def open_session(spec: ServerSpec, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                       message_handler: Callable[[Any], Any] | None = None,
                       errlog: Any = None) -> AsyncIterator[tuple["ClientSession", "types.InitializeResult"]]:
    """An initialized SDK :class:`~mcp.ClientSession` to one server (stdio or streamable HTTP).

    Every request on the session answers within ``timeout_s`` or raises ``McpError``; a
    stdio server's stderr goes to ``errlog`` (a real file; default: this process's stderr).
    Leaving the block closes the session and stops a stdio server.
    """
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    async with AsyncExitStack() as stack:
        if spec.command is not None:
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env, cwd=spec.cwd)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog or sys.stderr))
        else:
            read, write = await stack.enter_async_context(_http_streams(spec, timeout_s))
        session = await stack.enter_async_context(ClientSession(
            read, write, read_timeout_seconds=timedelta(seconds=timeout_s), message_handler=message_handler,
            client_info=types.Implementation(name="toolrank", version=_package_version())))
        init = await session.initialize()
        yield session, init


_LIST_TAKES_PARAMS: bool | None = None


async def list_all_tools(session: "ClientSession", *, max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every tool a server lists, following ``nextCursor`` page by page, as plain JSON dicts.

    Raises:
        HarvestError: the server repeats a cursor, or pages on past ``max_pages``.
        McpError, pydantic.ValidationError: the server answered with an error or a result
            that is not a valid ``tools/list`` result.
    """
    from mcp import types

    global _LIST_TAKES_PARAMS
    if _LIST_TAKES_PARAMS is None:
        _LIST_TAKES_PARAMS = "params" in inspect.signature(type(session).list_tools).parameters
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        if _LIST_TAKES_PARAMS:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        else:  # mcp < 1.22
            page = await session.list_tools(cursor)
        tools.extend(t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools
        if cursor in seen:
            raise HarvestError(f"tools/list returned the cursor {cursor[:40]!r} twice: its pages loop")
        seen.add(cursor)
    raise HarvestError(f"tools/list went on for more than {max_pages} pages")


def tools_from_listing(server: str, description: str, listed: list[dict[str, Any]], where: str) -> list[Tool]:
    """Tool records from one server's ``tools/list`` pages, validated like every other catalog
    input; a tool name listed twice is malformed too.

    Raises:
        CatalogError: a tool without a name, a non-string description, a non-object schema,
            or a repeated name.
    """
    tools = tools_from_mcp_list(server, description, {"tools": listed}, where)
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise CatalogError(f"{where}, server '{server}', tool '{t.name}': listed twice; tool names must be unique")
        seen.add(t.name)
    return tools


def server_description(spec: ServerSpec, init: "types.InitializeResult") -> str:
    """The text indexed for a server: the configuration's ``description``, else the first
    paragraph of the server's ``instructions``, else its title."""
    if spec.description:
        return spec.description
    text = (init.instructions or "").strip().split("\n\n")[0].strip()
    if text:
        return text if len(text) <= _DESCRIPTION_CHARS else text[:_DESCRIPTION_CHARS].rsplit(" ", 1)[0] + " ..."
    return getattr(init.serverInfo, "title", None) or ""


try:
    _GROUP: type = BaseExceptionGroup  # type: ignore[name-defined]  # Python 3.11+
except NameError:  # Python 3.10: anyio depends on the backport
    from exceptiongroup import BaseExceptionGroup as _GROUP


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, _GROUP):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def describe_error(exc: BaseException, spec: ServerSpec, timeout_s: float, stderr_tail: str = "") -> str:
    """One line saying why a server could not be used, with a hint where there is one."""
    from mcp.shared.exceptions import McpError
    from mcp.types import CONNECTION_CLOSED
    from pydantic import ValidationError

    leaves = _leaves(exc)
    # The transport's own errors come wrapped in task-group errors: report the most telling one.
    leaf = next((e for e in leaves if isinstance(e, (CatalogError, HarvestError, ValidationError))),
                next((e for e in leaves if not isinstance(e, McpError)), leaves[0]))
    tail = f"; its stderr ends: {stderr_tail}" if stderr_tail else ""
    if isinstance(leaf, TimeoutError):
        return (f"timed out after {timeout_s:g} s without a complete answer (raise --timeout, or set "
                f"\"timeout\" on this server){tail}")
    if isinstance(leaf, FileNotFoundError) and spec.command is not None:
        return f"cannot start {spec.command!r}: command not found (is it installed and on PATH?)"
    if isinstance(leaf, PermissionError) and spec.command is not None:
        return f"cannot start {spec.command!r}: permission denied"
    if isinstance(leaf, (CatalogError, HarvestError)):
        return f"malformed tools: {leaf}"
    if isinstance(leaf, ValidationError):
        err = leaf.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"malformed tools/list result: {where}: {err['msg']} ({leaf.error_count()} problem(s))"
    if isinstance(leaf, McpError):
        msg = leaf.error.message
        if leaf.error.code == CONNECTION_CLOSED:
            return f"the server exited or closed the connection before answering{tail}"
        if leaf.error.code == 408 or "Timed out" in msg:     # the SDK's read timeout
            return (f"timed out after {timeout_s:g} s without a complete answer (raise --timeout, or set "
                    f"\"timeout\" on this server){tail}")
        return f"the server answered with error {leaf.error.code}: {msg}{tail}"
    try:
        import httpx
        if isinstance(leaf, httpx.HTTPStatusError):
            return f"{spec.url} answered HTTP {leaf.response.status_code}"
        if isinstance(leaf, httpx.HTTPError):
            return f"cannot reach {spec.url}: {type(leaf).__name__}: {leaf or 'no detail'}"
    except ImportError:  # pragma: no cover - httpx is a dependency
        pass
    if isinstance(leaf, OSError) and spec.command is not None:
        return f"cannot start {spec.command!r}: {leaf.strerror or leaf}"
    return f"{type(leaf).__name__}: {leaf}{tail}"


def _stderr_tail(errlog: Any, chars: int = 300) -> str:
    try:
        errlog.flush()
        errlog.seek(0)
        lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    text = " | ".join(lines[-3:])
    return text if len(text) <= chars else "..." + text[-chars:]


@dataclass(frozen=True)
class ServerHarvest:
    """One server's harvest: its tools, or why there are none."""

    name: str
    tools: list[Tool] | None
    description: str = ""
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.tools is not None


async def harvest_server(spec: ServerSpec, *, timeout_s: float = DEFAULT_TIMEOUT_S, where: str = "") -> ServerHarvest:
    """Start or reach one server, list all its tools, close it. Never raises for the server's
    faults: a failure comes back as ``error`` (the whole harvest is bounded by the timeout)."""
    import anyio

    timeout = spec.timeout_s or timeout_s
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(timeout):
                async with open_session(spec, timeout_s=timeout, errlog=errlog) as (session, init):
                    listed = await list_all_tools(session)
                    description = server_description(spec, init)
                    seconds = time.perf_counter() - t0   # start to last page; stopping it is not counted
            tools = tools_from_listing(spec.name, description, listed, where or spec.name)
        except Exception as exc:  # noqa: BLE001 - a server's fault is reported, never raised
            reason = describe_error(exc, spec, timeout, _stderr_tail(errlog))
            log.debug("server %r failed", spec.name, exc_info=True)
            return ServerHarvest(spec.name, None, spec.description, time.perf_counter() - t0, reason)
    return ServerHarvest(spec.name, tools, description, seconds)


async def harvest(config: McpConfig, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                  names: Sequence[str] | None = None) -> list[ServerHarvest]:
    """Harvest the configuration's servers (``names``: only these), several at once; one
    result per server, in configuration order."""
    import anyio

    specs = [config.servers[n] for n in (names or config.servers)]
    results: dict[str, ServerHarvest] = {}
    limiter = anyio.CapacityLimiter(MAX_CONCURRENT)

    async def one(spec: ServerSpec) -> None:
        async with limiter:
            results[spec.name] = await harvest_server(spec, timeout_s=timeout_s, where=str(config.path))

    async with anyio.create_task_group() as tg:
        for spec in specs:
            tg.start_soon(one, spec)
    return [results[s.name] for s in specs]


# ------------------------------------------------------------------ into the index


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
    from .index import ToolIndex

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
        return index, reports
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
    return index, reports


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

    from .index import IndexLoadError, ToolIndex

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
