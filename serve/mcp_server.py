"""``toolrank mcp``: toolrank as an MCP server, over stdio (default) or streamable HTTP.

A thin adapter, like the HTTP service: it translates MCP (the official SDK's low-level
``Server``) to the gateway and the pipeline and back. Two tools:

* ``find_tools(request, need?, attempt?)``: the decision, the chosen tools' definitions (name,
  description, inputSchema, server), each with its calibrated probability and a one-line
  reason; on ``no_fit``, the public servers that could do it (``connect``).
* ``call_tool(server, tool, arguments)`` (gateway mode, ``--mcp-config FILE``): forwards the call
  to the owning server's live session and returns its result unchanged. Anything the
  configuration does not list, or the caller may not see, is refused and nothing runs.

Add it to a client's configuration (Claude Desktop, Cursor, ...)::

    {"mcpServers": {"toolrank": {"command": "toolrank", "args": ["mcp", "--mcp-config", "/path/to/servers.json"]}}}
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mcp_gateway import DEFAULT_CALL_TIMEOUT_S, Components, Gateway, default_components, gateway_eligibility

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.lowlevel import Server

    from retrieval.results import ScoredTool, SearchResult

__all__ = ["FIND_TOOLS", "CALL_TOOL", "tool_definitions", "find_payload", "build_server", "serve_stdio",
           "serve_http", "build_parser", "main"]

log = logging.getLogger(__name__)

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"
MAX_REQUEST_CHARS = 4000    # the same bounds as the HTTP service
MAX_NEED_CHARS = 500
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# The descriptions are prompts: the calling model reads them to decide when and how to use the
# tools. Keep them within the budget tested in tests/mcp/test_mcp_server.py.
_FIND_INTRO = (
    "Find the tools for a task among all the tools of the user's MCP servers (they are not listed "
    "here). Call it whenever you need a tool you do not have: once per distinct action of a "
    "multi-step task.\n\n"
    "Pass `request`: the user's words, unchanged. Optionally `need`: one line, in your words, of the "
    "action the tool must perform.\n\n"
    "`decision` says what to do next:\n"
    "- proceed: `tools` holds candidates, best first, each with its inputSchema, a calibrated "
    "`probability` that it does the action, and a `reason`. ")
_FIND_RUN_GATEWAY = ("Run the one that fits with call_tool(server, tool, arguments), arguments following "
                     "its inputSchema.\n")
_FIND_RUN_DIRECT = "Call the one that fits on its `server`, arguments following its inputSchema.\n"
_FIND_OUTRO = (
    "- search_again: nothing clearly fits. Call find_tools once more with a sharper `need` and attempt=2.\n"
    "- no_fit: no connected tool can do it. Tell the user; `connect` names servers they could add.\n\n"
    "Use only tools this returns; never guess tool names or arguments.")
CALL_DESCRIPTION = (
    "Run a tool that find_tools returned, on the server that owns it, and get that tool's result "
    "unchanged. Give `server` and `tool` exactly as find_tools named them, and `arguments` following "
    "the tool's inputSchema. Only the user's configured servers are reachable: any other server or "
    "tool is refused and nothing runs.")

FIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "request": {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_CHARS,
                    "description": "The user's request, as they wrote it."},
        "need": {"type": "string", "maxLength": MAX_NEED_CHARS,
                 "description": "Optional: one line, in your words, of the action the tool must perform."},
        "attempt": {"type": "integer", "enum": [1, 2],
                    "description": "2 when searching again after a search_again answer."},
    },
    "required": ["request"],
}
CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server": {"type": "string", "description": "The tool's server, as find_tools gave it."},
        "tool": {"type": "string", "description": "The tool's name, as find_tools gave it."},
        "arguments": {"type": "object", "description": "The tool's arguments, following its inputSchema."},
    },
    "required": ["server", "tool"],
}


def find_description(gateway: bool) -> str:
    return _FIND_INTRO + (_FIND_RUN_GATEWAY if gateway else _FIND_RUN_DIRECT) + _FIND_OUTRO


def tool_definitions(gateway: bool) -> list[dict[str, Any]]:
    """The tools toolrank lists, as MCP ``tools/list`` entries (``call_tool`` only as a gateway)."""
    tools = [{"name": FIND_TOOLS, "description": find_description(gateway), "inputSchema": FIND_SCHEMA}]
    if gateway:
        tools.append({"name": CALL_TOOL, "description": CALL_DESCRIPTION, "inputSchema": CALL_SCHEMA})
    return tools


# ------------------------------------------------------------------ answers


def one_line_reason(t: "ScoredTool") -> str:
    """Why this tool is in the answer, in one line, from the pipeline's explanation."""
    e = t.explanation or {}
    if t.source == "always_available":
        return "always available: the request contains its keywords"
    if t.source == "server_mention":
        return f"the best tool of {t.tool_id.server}, which the request names"
    if t.source == "exact_name":
        return "the request names this tool"
    parts = []
    terms = e.get("matched_terms") or []
    if terms:
        parts.append("matches " + ", ".join(terms[:5]))
    ranks = [f"{label} #{e[key]}" for key, label in (("bm25_rank", "keywords"), ("dense_rank", "meaning"))
             if e.get(key)]
    if ranks:
        parts.append("retrieved " + ", ".join(ranks))
    notes = [p.strip() for p in str(e.get("reason", "")).split(";") if p.strip().startswith(("lowered", "raised"))]
    parts.extend(notes)
    return "; ".join(parts) or "ranked by calibrated probability"


def find_payload(result: "SearchResult | None", *, gateway: Gateway) -> dict[str, Any]:
    """The structured answer of ``find_tools`` (also sent as its JSON text)."""
    unavailable = gateway.unavailable()
    if result is None:
        why = "; ".join(f"{s}: {r}" for s, r in unavailable.items())
        return {"decision": "no_fit", "tools": [], "connect": [],
                "message": "No tools are indexed yet" + (f": every server failed ({why})." if why else ".")}
    tools = []
    for t in result.tools:
        d = t.definition or {}
        tools.append({"server": t.tool_id.server, "name": t.tool_id.tool, "description": d.get("description", ""),
                      "inputSchema": d.get("inputSchema", {"type": "object", "properties": {}}),
                      "probability": round(float(t.probability), 3), "reason": one_line_reason(t)})
    message = result.message
    if result.decision == "search_again":
        message = (f"Best match {result.best_probability:.2f}: no tool clearly fits. Call find_tools again "
                   "with attempt=2 and a sharper `need` (the action the tool must perform).")
    out: dict[str, Any] = {"decision": result.decision, "message": message, "tools": tools}
    if result.decision == "no_fit":
        out["connect"] = list(result.suggestions)
    if unavailable:
        out["unavailable"] = [{"server": s, "reason": r} for s, r in unavailable.items()]
    return out


def _json_result(payload: dict[str, Any], *, error: bool = False) -> "types.CallToolResult":
    from mcp import types

    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structuredContent=payload, isError=error)


def _invalid(text: str) -> "types.CallToolResult":
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)


def _check_find(args: dict[str, Any]) -> tuple[str, str | None, int] | str:
    request, need, attempt = args.get("request"), args.get("need"), args.get("attempt", 1)
    if not isinstance(request, str) or not request.strip():
        return "invalid arguments: `request` must be the user's request, a non-empty string"
    if len(request) > MAX_REQUEST_CHARS:
        return f"invalid arguments: `request` has {len(request)} characters; at most {MAX_REQUEST_CHARS}"
    if need is not None and (not isinstance(need, str) or len(need) > MAX_NEED_CHARS):
        return f"invalid arguments: `need` must be one line of text, at most {MAX_NEED_CHARS} characters"
    if attempt not in (1, 2) or isinstance(attempt, bool):
        return "invalid arguments: `attempt` is 1, or 2 when searching again after search_again"
    unknown = sorted(set(args) - {"request", "need", "attempt"})
    if unknown:
        return f"invalid arguments: unknown {', '.join(unknown)}; find_tools takes request, need and attempt"
    return request, (need or None), int(attempt)


def build_server(gateway: Gateway) -> "Server":
    """The low-level SDK server that answers ``tools/list`` and ``tools/call`` for ``gateway``."""
    from mcp import types
    from mcp.server.lowlevel import Server

    server: Server = Server("toolrank", instructions=(
        "toolrank finds the few tools that fit a task among all the user's MCP servers"
        + (" and runs them." if gateway.forwarding else ".")
        + " Call find_tools first."))
    listed = [types.Tool(**d) for d in tool_definitions(gateway.forwarding)]

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return listed

    async def call(req: types.CallToolRequest) -> types.ServerResult:
        # Registered directly (not through @server.call_tool) so a forwarded result and a
        # server's JSON-RPC error both go back exactly as they came.
        name, args = req.params.name, req.params.arguments or {}
        if name == FIND_TOOLS:
            checked = _check_find(args)
            if isinstance(checked, str):
                return types.ServerResult(_invalid(checked))
            request, need, attempt = checked
            result = await gateway.find(request, need, attempt=attempt)
            return types.ServerResult(_json_result(find_payload(result, gateway=gateway)))
        if name == CALL_TOOL and gateway.forwarding:
            server_name, tool, arguments = args.get("server"), args.get("tool"), args.get("arguments")
            if not isinstance(server_name, str) or not isinstance(tool, str):
                return types.ServerResult(_invalid("invalid arguments: `server` and `tool` are strings, "
                                                   "as find_tools gave them"))
            if arguments is not None and not isinstance(arguments, dict):
                return types.ServerResult(_invalid("invalid arguments: `arguments` must be an object"))
            return types.ServerResult(await gateway.call(server_name, tool, arguments))
        from mcp.shared.exceptions import McpError
        raise McpError(types.ErrorData(code=types.INVALID_PARAMS,
                                       message=f"unknown tool {name!r}: toolrank has "
                                               f"{', '.join(t.name for t in listed)}"))

    server.request_handlers[types.CallToolRequest] = call
    return server


# ------------------------------------------------------------------ transports


async def serve_stdio(gateway: Gateway, server: "Server") -> None:
    from mcp.server.stdio import stdio_server

    async with gateway.running():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def http_app(gateway: Gateway, server: "Server", host: str = "127.0.0.1") -> Any:
    """A Starlette app serving MCP at ``/mcp`` (streamable HTTP) for ``gateway``."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    # Loopback only, with DNS-rebinding protection: a web page must not reach the user's tools.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    manager = StreamableHTTPSessionManager(app=server, security_settings=security, json_response=True)

    class _Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def lifespan(_app: Any):
        async with gateway.running(), manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=_Endpoint())], lifespan=lifespan)


async def serve_http(gateway: Gateway, server: "Server", host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(http_app(gateway, server, host), host=host, port=port, log_level="warning",
                            lifespan="on")
    sys.stderr.write(f"toolrank mcp: serving MCP (streamable HTTP) at http://{host}:{port}/mcp\n")
    await uvicorn.Server(config).serve()


# ------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    from retrieval.mcp_harvest import DEFAULT_TIMEOUT_S

    p = argparse.ArgumentParser(
        prog="toolrank mcp",
        description="Run toolrank as an MCP server: find_tools, and with --mcp-config also call_tool, "
                    "which forwards calls to the configured servers (a gateway). Speaks stdio unless --http.")
    p.add_argument("--mcp-config", type=Path, metavar="FILE",
                   help="the MCP client configuration ({\"mcpServers\": ...}) whose servers to index and forward to")
    p.add_argument("--index", type=Path, metavar="DIR",
                   help="index folder (with --mcp-config, default: where `toolrank index --mcp-config FILE` "
                        "wrote it; without: the shipped catalog)")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp (loopback only)")
    p.add_argument("--server", "--servers", dest="server", action="append", metavar="NAME",
                   help="only this server is visible and callable (repeat)")
    p.add_argument("--tenants", type=Path, metavar="FILE", help="a tenants file (as for toolrank serve)")
    p.add_argument("--tenant", metavar="NAME", help="the tenant of --tenants whose servers, tools and thresholds apply")
    p.add_argument("--model", type=Path, help="scorer model folder (default: the shipped one)")
    p.add_argument("--no-model", action="store_true", help="retrieval-only confidence")
    p.add_argument("--no-suggestions", action="store_true", help="no public servers suggested on no_fit")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds for a server to start and list its tools (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--call-timeout", type=float, default=DEFAULT_CALL_TIMEOUT_S,
                   help=f"seconds for a forwarded call to answer (default {DEFAULT_CALL_TIMEOUT_S:g})")
    p.add_argument("--no-save", action="store_true",
                   help="keep index updates (new or changed tools) in memory instead of saving them to the index folder")
    p.add_argument("--threads", type=int, default=2, help="ONNX threads for the encoder and the scorer")
    p.add_argument("--components", metavar="MODULE:FUNCTION", help=argparse.SUPPRESS)  # tests: fake models
    p.add_argument("-v", "--verbose", action="store_true", help="log what happens (to stderr)")
    return p


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http {value!r}: give HOST:PORT, e.g. 127.0.0.1:8765")
    if host not in LOOPBACK:
        raise ValueError(f"--http {value!r}: toolrank mcp runs the user's tools, so it serves on loopback only "
                         "(127.0.0.1, localhost or ::1)")
    return host, int(port)


def _components(a: argparse.Namespace) -> Components:
    if a.components:
        module, _, func = a.components.partition(":")
        return getattr(importlib.import_module(module), func or "components")()
    return default_components(model=a.model, no_model=a.no_model, suggestions=not a.no_suggestions,
                              threads=a.threads)


def _tenant(a: argparse.Namespace) -> Any:
    if not a.tenants and not a.tenant:
        return None
    if not (a.tenants and a.tenant):
        raise ValueError("give --tenants FILE and --tenant NAME together")
    from .tenants import load_tenants

    tenants = {t.name: t for t in load_tenants(a.tenants).all()}
    if a.tenant not in tenants:
        raise ValueError(f"no tenant {a.tenant!r} in {a.tenants}; it has {', '.join(sorted(tenants))}")
    return tenants[a.tenant]


def _check_servers(names: list[str], known: list[str], where: str) -> None:
    unknown = [s for s in names if s not in set(known)]
    if unknown:
        raise ValueError(f"--server {', '.join(map(repr, unknown))}: not in {where}, which has "
                         f"{', '.join(known[:20])}{' ...' if len(known) > 20 else ''}")


def make_gateway(a: argparse.Namespace) -> Gateway:
    """The gateway the options describe (configuration, index, eligibility, components).

    Raises:
        ValueError: a bad option, configuration, tenants file or index (one line, no traceback).
    """
    from retrieval.index import IndexLoadError
    from retrieval.mcp_harvest import default_mcp_index_path, load_mcp_config

    if a.timeout <= 0 or a.call_timeout <= 0:
        raise ValueError("--timeout and --call-timeout must be positive numbers of seconds")
    if a.model and a.no_model:
        raise ValueError("give --model or --no-model, not both")
    tenant = _tenant(a)
    config = load_mcp_config(a.mcp_config) if a.mcp_config else None
    if config is not None and a.server:
        _check_servers(a.server, list(config.servers), "the configuration")
    components = _components(a)
    index = None
    index_dir = None
    if config is not None:
        index_dir = a.index or default_mcp_index_path(config.path)
        if (index_dir / "manifest.json").exists():
            try:
                index = components.load_index(index_dir)
            except IndexLoadError as exc:
                log.warning("rebuilding the index at %s: %s", index_dir, exc)
        elif a.index is None:
            log.warning("no index for %s yet (run `toolrank index --mcp-config %s` once to start fast): "
                        "harvesting now", config.path, config.path)
    else:
        index = components.load_index(a.index) if a.index else components.default_index()
        known = index.catalog.servers
    if a.server and config is None:
        _check_servers(a.server, known, "the index")
    eligible = gateway_eligibility(list(config.servers) if config is not None else None, a.server, tenant)
    return Gateway(components=components, config=config, index=index, eligible=eligible,
                   policy_overrides=dict(tenant.policy) if tenant is not None else None,
                   timeout_s=a.timeout, call_timeout_s=a.call_timeout,
                   index_dir=None if a.no_save else index_dir)


def main(argv: list[str] | None = None) -> int:
    """Run ``toolrank mcp``; returns the exit status (2 for bad options or configuration).

    stdout carries the protocol over stdio, so everything else goes to stderr.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mcp"]:
        argv = argv[1:]
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if not a.verbose:
        for noisy in ("mcp", "httpx", "uvicorn"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        http = _host_port(a.http) if a.http else None
        gateway = make_gateway(a)
    except (ValueError, OSError) as exc:   # CatalogError, McpConfigError, TenantConfigError, IndexLoadError
        sys.stderr.write(f"toolrank mcp: {exc}\n")
        return 2
    import anyio

    server = build_server(gateway)
    try:
        if http is None:
            anyio.run(serve_stdio, gateway, server)
        else:
            anyio.run(serve_http, gateway, server, *http)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
