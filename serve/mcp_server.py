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
import hmac
import importlib
import json
import logging
import os
import secrets
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mcp_gateway import DEFAULT_CALL_TIMEOUT_S, Components, Gateway, default_components, gateway_eligibility
from .settings import GatewaySettings, variable

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.lowlevel import Server

    from retrieval.pipeline.results import ScoredTool, SearchResult

__all__ = ["FIND_TOOLS", "CALL_TOOL", "DESCRIBE_TOOL", "tool_definitions", "bound_tools", "find_payload", "build_server", "serve_stdio",
           "serve_http", "build_parser", "main"]

log = logging.getLogger(__name__)

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"
DESCRIBE_TOOL = "describe_tool"
MAX_REQUEST_CHARS = 4000    # the same bounds as the HTTP service
MAX_NEED_CHARS = 500
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# What one find_tools answer carries (characters of JSON): the answer goes into the model's context,
# twice (text and structured content), so one server's 100 KB description must not come with it.
MAX_DESCRIPTION_CHARS = 2000        # per tool
MAX_SCHEMA_CHARS = 4000             # per tool, the inputSchema as JSON
MAX_ANSWER_CHARS = 16000            # per answer, all tools together
_NESTED_DESCRIPTION_CHARS = 160
TOKEN_ENV = variable(GatewaySettings, "mcp_token")   # TOOLRANK_MCP_TOKEN

# The descriptions are prompts: the calling model reads them to decide when and how to use the
# tools. Keep them within the budget tested in tests/mcp/test_mcp_server.py.
_FIND_INTRO = (
    "Find the tools for a task among all the user's MCP servers' tools (not listed here). Call it "
    "whenever you need a tool you lack, once per distinct action.\n\n"
    "Pass `request`: the user's words, unchanged; and `need`: one line you write before seeing any "
    "tool, the action and its object (\"create a calendar event\"); a platform only if the user named it.\n\n"
    "`decision`:\n"
    "- proceed: `tools`, best first, each with inputSchema, a calibrated `probability` and a `reason`. ")
_FIND_RUN_GATEWAY = "Run the one that fits with call_tool(server, tool, arguments).\n"
_FIND_RUN_DIRECT = "Call the one that fits on its `server`.\n"
_FIND_OUTRO = (
    "- search_again: nothing clearly fits yet. Call again with attempt=2 and a sharper `need` "
    "(exact operation, object, what comes back).\n"
    "- choose: `tools` may fit, none clearly does: read them and use the one that does what was asked, "
    "or ask the user.\n"
    "- no_fit: no connected tool can do it; tell the user (`connect` names servers to add).\n\n"
    "Use only tools this returns; never guess names or arguments.")
DESCRIBE_DESCRIPTION = (
    "Get the whole definition (description and inputSchema) of one tool that find_tools returned "
    "shortened; its `truncated` field says what was cut. Give `server` and `tool` as find_tools named them.")
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
        "need": {"type": "string", "minLength": 1, "maxLength": MAX_NEED_CHARS,
                 "description": "Your one line: the action the tool must perform and its object. Sharper on attempt 2."},
        "attempt": {"type": "integer", "enum": [1, 2],
                    "description": "2 when searching again after a search_again answer."},
    },
    "required": ["request", "need"],
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
DESCRIBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"server": {"type": "string"}, "tool": {"type": "string"}},
    "required": ["server", "tool"],
}


def find_description(gateway: bool) -> str:
    return _FIND_INTRO + (_FIND_RUN_GATEWAY if gateway else _FIND_RUN_DIRECT) + _FIND_OUTRO


def tool_definitions(gateway: bool) -> list[dict[str, Any]]:
    """The tools toolrank lists, as MCP ``tools/list`` entries (``call_tool`` only as a gateway)."""
    tools = [{"name": FIND_TOOLS, "description": find_description(gateway), "inputSchema": FIND_SCHEMA}]
    if gateway:
        tools.append({"name": CALL_TOOL, "description": CALL_DESCRIPTION, "inputSchema": CALL_SCHEMA})
    tools.append({"name": DESCRIBE_TOOL, "description": DESCRIBE_DESCRIPTION, "inputSchema": DESCRIBE_SCHEMA})
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


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[limit // 2:limit] else text[:limit]
    return cut.rstrip() + " ..."


def _short_nested(node: Any) -> Any:
    """A schema with every nested ``description`` cut short, and ``examples`` left out."""
    if isinstance(node, dict):
        return {k: (_cut(v, _NESTED_DESCRIPTION_CHARS) if k == "description" and isinstance(v, str) else _short_nested(v))
                for k, v in node.items() if k != "examples"}
    if isinstance(node, list):
        return [_short_nested(v) for v in node]
    return node


def _top_level(schema: dict[str, Any]) -> dict[str, Any]:
    """Only the top-level properties, each with its type, and what is required."""
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    out: dict[str, Any] = {"type": "object", "properties": {
        k: ({"type": v["type"]} if isinstance(v, dict) and isinstance(v.get("type"), (str, list)) else {})
        for k, v in props.items()}}
    if isinstance(schema.get("required"), list):
        out["required"] = schema["required"]
    return out


def bound_schema(schema: dict[str, Any], limit: int = MAX_SCHEMA_CHARS) -> tuple[dict[str, Any], str | None]:
    """``schema`` within ``limit`` characters of JSON, and what was cut (None: nothing)."""
    n = _size(schema)
    if n <= limit:
        return schema, None
    short = _short_nested(schema)
    if _size(short) <= limit:
        return short, f"nested descriptions cut short (the whole schema has {n} characters)"
    top = _top_level(schema)
    if _size(top) <= limit:
        return top, f"only the top-level properties and their types (the whole schema has {n} characters)"
    required = {k: v for k, v in top["properties"].items() if k in (top.get("required") or [])}
    if required and _size({**top, "properties": required}) <= limit:
        return ({**top, "properties": required},
                f"only the required properties and their types (the whole schema has {n} characters)")
    return {"type": "object"}, f"left out (the whole schema has {n} characters)"


def bound_tools(tools: list[dict[str, Any]], *, description_chars: int = MAX_DESCRIPTION_CHARS,
                schema_chars: int = MAX_SCHEMA_CHARS, answer_chars: int = MAX_ANSWER_CHARS) -> bool:
    """Bound what each tool entry carries, and all of them together, in place. A cut is said in
    the entry's ``truncated`` (what, and how long the whole is). Tools past the answer's bound keep
    their name, server, probability and reason, with a short description. True when anything was cut."""
    cut_any = False
    total = 0
    for t in tools:
        truncated: dict[str, str] = {}
        desc = t.get("description") or ""
        if len(desc) > description_chars:
            t["description"] = _cut(desc, description_chars)
            truncated["description"] = f"cut at {len(t['description'])} of {len(desc)} characters"
        t["inputSchema"], why = bound_schema(t.get("inputSchema") or {"type": "object", "properties": {}}, schema_chars)
        if why:
            truncated["inputSchema"] = why
        if truncated:
            t["truncated"] = truncated
        size = _size(t)
        if total and total + size > answer_chars:
            whole_desc = len(desc)
            t["description"] = _cut(desc, _NESTED_DESCRIPTION_CHARS)
            t["inputSchema"] = {"type": "object"}
            t["truncated"] = {"inputSchema": "left out: the answer's size bound was reached"}
            if len(t["description"]) < whole_desc:
                t["truncated"]["description"] = f"cut at {len(t['description'])} of {whole_desc} characters"
            size = _size(t)
        cut_any = cut_any or "truncated" in t
        total += size
    return cut_any


def find_payload(result: "SearchResult | None", *, gateway: Gateway) -> dict[str, Any]:
    """The structured answer of ``find_tools`` (also sent as its JSON text), bounded in size."""
    unavailable = gateway.unavailable()
    starting = gateway.starting()
    if result is None:
        why = "; ".join(f"{s}: {r}" for s, r in unavailable.items())
        out: dict[str, Any] = {"decision": "no_fit", "tools": [], "connect": [],
                               "message": "No tools are indexed yet" + (f": every server failed ({why})." if why else ".")}
        if starting:
            out["starting"] = starting
        return out
    tools = []
    for t in result.tools:
        d = t.definition or {}
        tools.append({"server": t.tool_id.server, "name": t.tool_id.tool, "description": d.get("description", ""),
                      "inputSchema": d.get("inputSchema", {"type": "object", "properties": {}}),
                      "probability": round(float(t.probability), 3), "reason": one_line_reason(t)})
    message = result.message
    if result.decision == "search_again":
        message = (f"Best match {result.best_probability:.2f}: no tool clearly fits yet; these are the best so far. "
                   "Call find_tools again with attempt=2 and a sharper `need` (the exact operation, its object "
                   "and what should come back).")
    out = {"decision": result.decision, "message": message, "tools": tools}
    if bound_tools(tools):
        out["note"] = (f"Some definitions were shortened to keep this answer small (see each tool's `truncated`); "
                       f"{DESCRIBE_TOOL}(server, tool) gives a tool's whole definition.")
    if result.decision == "no_fit":
        out["connect"] = list(result.suggestions)
    if unavailable:
        out["unavailable"] = [{"server": s, "reason": r} for s, r in unavailable.items()]
    if starting:
        out["starting"] = starting
        out["message"] = (f"{message} " if message else "") + (
            f"Still starting: {', '.join(starting)}; their tools come from the saved index, if there is one, "
            "and join when they answer.")
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

    from retrieval.version import package_version

    server: Server = Server("toolrank", version=package_version(), instructions=(
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
        if name == DESCRIBE_TOOL:
            server_name, tool = args.get("server"), args.get("tool")
            if not isinstance(server_name, str) or not isinstance(tool, str):
                return types.ServerResult(_invalid("invalid arguments: `server` and `tool` are strings, "
                                                   "as find_tools gave them"))
            found = await gateway.definition(server_name, tool)
            if isinstance(found, str):
                return types.ServerResult(_invalid(found))
            return types.ServerResult(_json_result(found))
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


def http_url(host: str, port: int) -> str:
    """The address of the MCP endpoint (an IPv6 host in brackets)."""
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT, before anything else starts.

    Raises:
        OSError: the port is in use (or cannot be bound), said in one line.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        what = "is in use (another toolrank mcp?); choose another port" if exc.errno in (48, 98, 10048) else \
            (exc.strerror or str(exc))
        raise OSError(f"--http {host}:{port}: cannot listen there: the port {what}") from None
    return sock


def _token(a: argparse.Namespace) -> tuple[str, bool]:
    """The bearer token and whether the user gave it: --token, else $TOOLRANK_MCP_TOKEN, else the one kept
    in the cache (made once)."""
    configured = GatewaySettings().mcp_token
    token = a.token or (configured.get_secret_value() if configured is not None else None)
    if token is not None:
        if len(token) < 16 or any(c.isspace() for c in token):
            raise ValueError("the bearer token must have at least 16 characters and no spaces")
        return token, True
    path = token_path()
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if len(token) < 16:
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
    return token, False


def token_path() -> Path:
    from retrieval.index.default import cache_dir

    return cache_dir() / "mcp-http-token"


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer TOKEN`` (401 otherwise)."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self.expected = token.encode()

    def _token(self, header: bytes) -> bytes:
        """The credentials of an ``Authorization`` header; the scheme is case-insensitive (RFC 7235)."""
        scheme, _, credentials = header.strip().partition(b" ")
        return credentials.strip() if scheme.lower() == b"bearer" else b""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = self._token(dict(scope.get("headers") or []).get(b"authorization", b""))
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": "unauthorized: send the header 'Authorization: Bearer <token>' "
                                            "(toolrank mcp printed where the token is when it started)"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="toolrank"'),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _Disconnects(logging.Filter):
    """A client that goes away mid-request is normal over HTTP: one INFO line, not an ERROR with a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        import anyio

        gone = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError)
        if record.levelno >= logging.ERROR and (isinstance(exc, gone) or "ClosedResourceError" in record.getMessage()):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "an HTTP client went away before its answer was sent", None
            record.exc_info, record.exc_text = None, None
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


class _DiscoverProbe(logging.Filter):
    """An mcp 2.x client opens with ``server/discover`` (protocol 2026-07-28). This SDK (1.x) does not
    know it and answers with an error, on which the client goes on with the ``initialize`` handshake,
    as the protocol intends; but the SDK also logs the whole failed validation, some 70 lines, as a
    WARNING on every connection. One DEBUG line instead (a root-logger filter: the SDK logs there)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if message.startswith("Failed to validate request") and "'server/discover'" in message:
            log.debug("a client asked for server/discover (protocol 2026-07-28, not known to this SDK): "
                      "answered with an error, the client falls back to initialize")
            return False
        return True


def install_discover_probe_filter() -> None:
    root = logging.getLogger()
    if not any(isinstance(f, _DiscoverProbe) for f in root.filters):
        root.addFilter(_DiscoverProbe())


def http_app(gateway: Gateway, server: "Server", host: str = "127.0.0.1", token: str | None = None) -> Any:
    """A Starlette app serving MCP at ``/mcp`` (streamable HTTP) for ``gateway`` (with a bearer token
    when ``token`` is given)."""
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
    for name in ("mcp.server.streamable_http", "mcp.server.streamable_http_manager", "mcp.server.lowlevel.server",
                 "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Disconnects) for f in logger.filters):
            logger.addFilter(_Disconnects())

    class _Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def lifespan(_app: Any):
        async with gateway.running(), manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=_Endpoint())], lifespan=lifespan)
    return BearerAuth(app, token) if token else app


async def serve_http(gateway: Gateway, server: "Server", host: str, port: int, token: str | None = None,
                     sock: socket.socket | None = None, token_given: bool = False) -> None:
    import uvicorn

    config = uvicorn.Config(http_app(gateway, server, host, token), host=host, port=port, log_level="warning",
                            lifespan="on")
    url = http_url(host, port)
    sys.stderr.write(f"toolrank mcp: serving MCP (streamable HTTP) at {url}\n")
    if token is None:
        sys.stderr.write("toolrank mcp: WARNING: no bearer token (--no-token): any process on this machine "
                         "can run your tools through it\n")
    else:
        shown = "<your token>" if token_given else token
        where = "" if token_given else f" (kept in {token_path()}; --token or ${TOKEN_ENV} to choose one)"
        sys.stderr.write(f"toolrank mcp: clients must send the header 'Authorization: Bearer TOKEN'{where}. "
                         "A client entry:\n" + json.dumps({"mcpServers": {"toolrank": {
                             "type": "http", "url": url, "headers": {"Authorization": f"Bearer {shown}"}}}}) + "\n")
    await uvicorn.Server(config).serve(sockets=[sock] if sock is not None else None)


# ------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    from retrieval.catalog.mcp_harvest import DEFAULT_TIMEOUT_S

    p = argparse.ArgumentParser(
        prog="toolrank mcp",
        description="Run toolrank as an MCP server: find_tools, and with --mcp-config also call_tool, "
                    "which forwards calls to the configured servers (a gateway). Speaks stdio unless --http.")
    p.add_argument("--mcp-config", type=Path, metavar="FILE",
                   help="the MCP client configuration ({\"mcpServers\": ...}) whose servers to index and forward to")
    p.add_argument("--index", type=Path, metavar="DIR",
                   help="index folder (with --mcp-config, default: where `toolrank index --mcp-config FILE` "
                        "wrote it; without: the shipped catalog)")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp (loopback only; "
                   "clients must send a bearer token, see --token)")
    p.add_argument("--token", metavar="TOKEN",
                   help=f"with --http: the bearer token clients must send (default: ${TOKEN_ENV}, else one kept in "
                        "the toolrank cache, made on first use)")
    p.add_argument("--no-token", action="store_true",
                   help="with --http: no bearer token (any local process could then run your tools)")
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
    p.add_argument("--calibrate", action="store_true",
                   help="with --mcp-config: calibrate the servers' tools from probes the LLM endpoint (TOOLRANK_LLM_*) "
                        "writes, once they are harvested and again after they change; saved with the index "
                        "(docs/day-one.md section 4)")
    p.add_argument("--calibrate-probes", type=int, default=100, metavar="N",
                   help="with --calibrate: how many tools to probe (default 100, at least 10)")
    p.add_argument("--components", metavar="MODULE:FUNCTION", help=argparse.SUPPRESS)  # tests: fake models
    p.add_argument("-v", "--verbose", action="store_true", help="log what happens (to stderr)")
    return p


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
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
    from retrieval.catalog.mcp_harvest import load_mcp_config
    from retrieval.index.embedded import IndexLoadError
    from retrieval.index.mcp import default_mcp_index_path

    if a.timeout <= 0 or a.call_timeout <= 0:
        raise ValueError("--timeout and --call-timeout must be positive numbers of seconds")
    if a.model and a.no_model:
        raise ValueError("give --model or --no-model, not both")
    if a.calibrate:
        from retrieval.index.examples import llm_client

        if not a.mcp_config:
            raise ValueError("--calibrate goes with --mcp-config (an index of its own: toolrank index --calibrate)")
        if a.calibrate_probes < 10:
            raise ValueError(f"--calibrate-probes {a.calibrate_probes}: probe at least 10 tools")
        try:
            llm_client().close()
        except ValueError as exc:
            raise ValueError(f"--calibrate: {exc}") from None
    from .settings import GatewaySettings

    tenant = _tenant(a)
    gateway_settings = GatewaySettings()
    if gateway_settings.audit_share > 0 and (tenant is None or tenant.audit):
        if a.no_save or not gateway_settings.learn_from_use or (tenant is not None and not tenant.learn_from_use):
            log.warning("TOOLRANK_AUDIT_SHARE is set but this gateway keeps no usage folder (--no-save, or learning "
                        "from use off): no search is audited")
        else:   # audits need the endpoint that judges: said now, not at the first search
            from .audits import check_endpoint

            check_endpoint(gateway_settings.audit_share)
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
    names = list(config.servers) if config is not None else known
    if not any(eligible.allows_server(s) for s in names):
        given = " and ".join(x for x, on in ((f"--server {', '.join(a.server or [])}", a.server),
                                             (f"tenant {a.tenant!r}'s servers", tenant is not None)) if on)
        raise ValueError(f"no server is left to use: {given} ha{'ve' if ' and ' in given else 's'} none in common "
                         f"with {'the configuration' if config is not None else 'the index'} "
                         f"({', '.join(names[:20])}{' ...' if len(names) > 20 else ''})")
    if a.no_save and config is not None:
        log.warning("--no-save: nothing is written, so learning from use is off too")
    if tenant is not None and not tenant.learn_from_use and config is not None:
        log.warning("tenant %r has learn_from_use = false: this gateway learns nothing from its calls", tenant.name)
    return Gateway(components=components, config=config, index=index, eligible=eligible,
                   policy_overrides=dict(tenant.policy) if tenant is not None else None,
                   timeout_s=a.timeout, call_timeout_s=a.call_timeout,
                   index_dir=None if a.no_save else index_dir,
                   learn=tenant.learn_from_use if tenant is not None else True,
                   tenant=tenant.name if tenant is not None else None,
                   audit=tenant.audit if tenant is not None else True,
                   calibrate_probes=a.calibrate_probes if a.calibrate else None)


def main(argv: list[str] | None = None) -> int:
    """Run ``toolrank mcp``; returns the exit status (2 for bad options or configuration).

    stdout carries the protocol over stdio, so everything else goes to stderr.
    """
    from retrieval.catalog.mcp_harvest import install_log_redaction

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mcp"]:
        argv = argv[1:]
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("mcp", "uvicorn"):
        if not a.verbose:
            logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)    # one line per request, each with its full URL
    install_log_redaction()
    install_discover_probe_filter()
    if a.mcp_config and _started_by_itself(a.mcp_config):
        return _refuse_recursion(a.mcp_config)
    sock = None
    try:
        http = _host_port(a.http) if a.http else None
        if http is None and (a.token or a.no_token):
            raise ValueError("--token and --no-token go with --http")
        if a.token and a.no_token:
            raise ValueError("give --token or --no-token, not both")
        token, given = (None, False) if http is None or a.no_token else _token(a)
        if http is not None:
            sock = bind(*http)            # a port in use is said now, before any server starts
        gateway = make_gateway(a)
    except (ValueError, OSError) as exc:   # CatalogError, McpConfigError, TenantConfigError, IndexLoadError
        if sock is not None:
            sock.close()
        sys.stderr.write(f"toolrank mcp: {exc}\n")
        return 2
    import anyio

    server = build_server(gateway)
    try:
        if http is None:
            anyio.run(serve_stdio, gateway, server)
        else:
            anyio.run(serve_http, gateway, server, *http, token, sock, given)
    except KeyboardInterrupt:
        return 130
    return 0


def _started_by_itself(config: Path) -> bool:
    """Whether a `toolrank mcp` (or `toolrank index`) on this same configuration started this one,
    however the entry wrapped it (uvx, pipx run, npx, bash -c, another venv)."""
    from retrieval.settings import HarvestSettings

    parents = HarvestSettings().parents()
    try:
        target = str(config.resolve())
    except OSError:
        return False
    return target in parents or _ancestor_runs(target)


def _ancestor_runs(config: str, *, pid: int | None = None, depth: int = 32) -> bool:
    """Whether a parent process (up the process tree, Linux ``/proc``) is a toolrank gateway or index on
    ``config``: the guard that still holds when a wrapper clears the environment (``env -i``, sudo, a
    container entry point), where ``TOOLRANK_MCP_PARENTS`` is lost."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    pid = os.getppid() if pid is None else pid
    for _ in range(depth):
        if pid <= 1:
            return False
        try:
            args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
            args = [a.decode("utf-8", "replace") for a in args if a]
            cwd = os.readlink(proc / str(pid) / "cwd")
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            return False
        if _runs_on(args, cwd, config):
            return True
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])   # after the command name: the state, then the parent
        except (IndexError, ValueError):
            return False
    return False


def _runs_on(args: list[str], cwd: str, config: str) -> bool:
    """``args`` run ``toolrank mcp`` or ``toolrank index`` with ``--mcp-config`` naming ``config``."""
    if not any("toolrank" in a or a in ("serve.commands", "retrieval.cli", "serve.mcp_server") for a in args):
        return False
    for i, a in enumerate(args):
        value = args[i + 1] if a == "--mcp-config" and i + 1 < len(args) else \
            a.split("=", 1)[1] if a.startswith("--mcp-config=") else None
        if value is not None:
            try:
                if str((Path(cwd) / os.path.expanduser(value)).resolve()) == config:
                    return True
            except OSError:
                continue
    return False


def _refuse_recursion(config: Path) -> int:
    """Answer ``initialize`` as a server the parent recognises, start nothing, and exit when it
    closes the connection: the parent then reports the entry as toolrank itself."""
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from retrieval.catalog.mcp_harvest import RECURSIVE_SERVER_NAME

    sys.stderr.write(f"toolrank mcp: started by toolrank on the same configuration ({config}); not starting "
                     "its servers again. Remove the toolrank entry from that file.\n")
    refusal: Server = Server(RECURSIVE_SERVER_NAME)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await refusal.run(read, write, refusal.create_initialization_options())
    try:
        anyio.run(run)
    except KeyboardInterrupt:
        return 130
    return 3


if __name__ == "__main__":
    raise SystemExit(main())
