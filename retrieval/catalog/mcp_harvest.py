"""Harvesting an MCP client configuration: connect to every server, list its tools.

The configuration is the one MCP clients (Claude Desktop, Cursor, ...) write::

    {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "..."}},
        "linear": {"url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer ..."}}}}

Each server is started (``command``: stdio) or reached (``url``: streamable HTTP) through the
official SDK's client; ``tools/list`` is followed through every page, and each tool becomes the
same :class:`~retrieval.catalog.model.Tool` record every other loader makes, through the same
validation (:func:`~retrieval.catalog.formats.tools_from_mcp_list`). The server's name in the index is its
key in ``mcpServers``.

A server that fails to start, times out, or lists malformed tools is reported by name with the
reason; the others are harvested. :mod:`retrieval.index.mcp` puts a harvest into an index
(only changed tools are embedded again) and saves it atomically.

Secrets: ``env`` and ``headers`` often hold tokens. They are passed to the server and never
logged, printed or saved (the index keeps only names, descriptions and schemas).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Literal, Sequence
from urllib.parse import urlsplit, urlunsplit

from retrieval.settings import HarvestSettings
from retrieval.version import package_version
from scorer.locations import variable

from .formats import tools_from_mcp_list
from .model import CatalogError, Tool

if TYPE_CHECKING:
    from mcp import ClientSession, types

__all__ = [
    "McpConfigError",
    "HarvestError",
    "ServerSpec",
    "McpConfig",
    "ServerHarvest",
    "DEFAULT_TIMEOUT_S",
    "load_mcp_config",
    "open_session",
    "list_all_tools",
    "tools_from_listing",
    "server_description",
    "harvest_server",
    "harvest",
    "describe_error",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0     # per server: start, initialize and every page of tools/list
MAX_PAGES = 1000             # a tools/list that pages on past this is broken
MAX_CONCURRENT = 8           # servers started at once
_DESCRIPTION_CHARS = 300

_TYPES = {"stdio": "stdio", "local": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http",
          "streamable_http": "http", "remote": "http", "sse": "sse"}
# The keys toolrank uses, per server entry (after the client's own spellings are mapped to them).
_USED_KEYS = {"command", "args", "env", "envFile", "cwd", "url", "serverUrl", "httpUrl", "headers", "type",
              "transportType", "timeout", "description", "disabled", "enabled", "disabledTools"}
# Keys clients write for their own purposes (permissions, UI, Zed's extension settings): ignored quietly.
_CLIENT_KEYS = {"autoApprove", "alwaysAllow", "source", "settings", "dev", "gallery", "version", "trust",
                "networkTimeout", "name", "icon", "id", "oauth"}
# Where each client keeps its servers: Claude Desktop, Claude Code, Cursor, Windsurf and Cline
# write "mcpServers"; VS Code "servers" (.vscode/mcp.json) or "mcp": {"servers"} (settings.json);
# Zed "context_servers" (settings.json).
_SECTIONS = (("mcpServers",), ("servers",), ("mcp", "servers"), ("context_servers",))
ENV_PARENTS = variable(HarvestSettings, "mcp_parents")     # set for every stdio server: the configurations above it (HarvestSettings)
RECURSIVE_SERVER_NAME = "toolrank-refused-recursion"


class McpConfigError(CatalogError):
    """An MCP client configuration that cannot be used as it is."""


class HarvestError(ValueError):
    """One server's tools could not be harvested (the reason is the message)."""


class RecursionRefused(HarvestError):
    """The entry runs toolrank on the configuration that started it (found at ``initialize``)."""


# ------------------------------------------------------------------ credentials in URLs

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>`]+")
REDACTED = "***"


# A path segment that reads like a key: a known key prefix, or a long run of letters and digits
# mixed (a token, not a word such as "streamable-http" or a version such as "v1").
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|ak|key|token|tok|api[-_]?key|ghp|gho|ghs|xox[abpr]|glpat|pat)[-_]", re.I)


def _secret_segment(segment: str) -> bool:
    core = segment.split(";", 1)[0]
    if _KEY_PREFIX.match(core) and len(core) >= 12:
        return True
    return len(core) >= 24 and bool(re.fullmatch(r"[A-Za-z0-9_\-.=+]+", core)) \
        and bool(re.search(r"[0-9]", core)) and bool(re.search(r"[A-Za-z]", core))


def _redact_path(path: str) -> str:
    """Key-like path segments (``/v1/sk-…/mcp``) and every path parameter value (``;token=…``) as ``***``."""
    out = []
    for seg in path.split("/"):
        head, semi, params = seg.partition(";")
        head = REDACTED if _secret_segment(head) else head
        if semi:
            kept = []
            for item in params.split(";"):
                key, eq, value = item.partition("=")
                kept.append(f"{key}={REDACTED}" if eq and value else item)
            head += ";" + ";".join(kept)
        out.append(head)
    return "/".join(out)


def redact_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***``: the user-info (``user:pass@``), key-like path
    segments and path parameter values, every query value (the keys are kept) and the fragment.
    Anything that is not a URL comes back unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = []
        for item in query.split("&"):
            key, eq, value = item.partition("=")
            pairs.append(f"{key}={REDACTED}" if eq and value else (key if not eq else f"{key}="))
        query = "&".join(pairs)
    fragment = REDACTED if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, _redact_path(parts.path), query, fragment))


def redact(text: str) -> str:
    """Every URL in ``text`` with its credentials redacted (see :func:`redact_url`)."""
    def one(m: re.Match) -> str:
        url = m.group(0)
        core = url.rstrip(".,;:)]}!?")
        return redact_url(core) + url[len(core):]
    return _URL.sub(one, text) if "://" in text else text


class RedactingFilter(logging.Filter):
    """A log filter that redacts URL credentials in the message and the traceback of each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave the record to logging
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


class _QuietStrayLines(logging.Filter):
    """The SDK's stdio client logs every line a server writes to stdout that is not MCP as an ERROR
    with a traceback; toolrank logs it once, as a warning naming the server (see serve.mcp_gateway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


def install_log_redaction() -> None:
    """Redact URL credentials in everything logged through the root logger's handlers, and quiet the
    SDK's traceback for a stray stdout line (the caller says it instead)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    stdio = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(f, _QuietStrayLines) for f in stdio.filters):
        stdio.addFilter(_QuietStrayLines())


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """One server entry: how to reach the server.

    ``command`` (stdio) or ``url`` (streamable HTTP), never both. ``env``, ``headers`` and the
    raw ``url`` are kept out of ``repr`` since they may hold secrets; show :attr:`target`.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, repr=False, compare=False)
    cwd: Path | None = None
    url: str | None = field(default=None, repr=False)
    headers: dict[str, str] | None = field(default=None, repr=False, compare=False)
    timeout_s: float | None = None
    description: str = ""
    origin: Path | None = field(default=None, repr=False, compare=False)   # the configuration file
    disabled_tools: tuple[str, ...] = ()   # Windsurf's "disabledTools": never indexed, never callable

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """Where the server is, for messages (no arguments; credentials in the URL redacted)."""
        return self.command if self.command is not None else redact_url(str(self.url))


@dataclass(frozen=True)
class McpConfig:
    """A parsed configuration: the servers to index, the entries left out (with why), and what
    was ignored (``warnings``: keys toolrank does not use, values it converted)."""

    path: Path
    servers: dict[str, ServerSpec]
    skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    section: str = "mcpServers"

    def __contains__(self, name: object) -> bool:
        return name in self.servers


# ------------------------------------------------------------------ the configuration file

_TOOLRANK_NAMES = ("toolrank", "toolrank.exe")


def _command_words(command: str, args: Sequence[str]) -> list[str]:
    """The command line as words, with a shell's ``-c "..."`` script split into words too."""
    words = [command, *args]
    out: list[str] = []
    for i, word in enumerate(words):
        out.append(word)
        prev = words[i - 1] if i else ""
        if i and prev.lower() in ("-c", "/c", "-command", "-lc"):
            try:
                out.extend(shlex.split(word))
            except ValueError:
                out.extend(word.split())
    return out


def _is_toolrank_itself(command: str, args: Sequence[str]) -> str | None:
    """How the entry runs ``toolrank mcp`` (directly, or through a wrapper such as ``uvx``, ``pipx
    run``, ``npx``, ``bash -c`` or another venv's ``python -m serve.commands``, or ``retrieval.cli`` where
    an older toolrank's command lived), or None.

    Such an entry in the configuration that toolrank reads would start toolrank again, which
    would start every server again, level after level.
    """
    words = _command_words(command, args)
    for i, word in enumerate(words):
        w = word.strip().lower()
        name = re.split(r"[=@<>~\[]", Path(w).name)[0] if w else w     # toolrank==0.2, toolrank@latest
        if name in _TOOLRANK_NAMES or w in ("serve.commands", "retrieval.cli"):
            if "mcp" in words[i + 1:]:
                via = Path(command).name
                return "toolrank itself" + (f" (through {via!r})" if Path(via).stem.lower() != "toolrank" else "")
    return None


_VAR = re.compile(r"\$\{([^}]*)\}")


def _expand(value: str, at: str, base: Path, warnings: list[str]) -> str:
    """Variables as clients expand them: ``${VAR}``, ``${VAR:-default}`` (Claude Code),
    ``${env:VAR}``, ``${workspaceFolder}``, ``${userHome}`` (VS Code, Cursor).

    Raises:
        _Skip: ``${input:...}`` (a value VS Code asks the user for): toolrank cannot ask.
    """
    def one(m: re.Match) -> str:
        expr = m.group(1)
        if expr.startswith("input:"):
            raise _Skip(f"needs the value of ${{{expr}}}, which VS Code prompts for; write the value "
                        "into the entry (or into its env) for toolrank")
        if expr in ("workspaceFolder", "workspaceRoot"):
            return str(base.parent if base.name == ".vscode" else base)
        if expr == "userHome":
            return str(Path.home())
        name, _, default = expr.removeprefix("env:").partition(":-")
        if name in os.environ:
            return os.environ[name]
        if _ or default:
            return default
        warnings.append(f"{at}: ${{{expr}}} is not set in the environment; left empty")
        return ""
    return _VAR.sub(one, value) if "${" in value else value


class _Skip(Exception):
    """An entry toolrank leaves out, with the reason (the message)."""


def _str_map(value: Any, at: str, key: str, warnings: list[str]) -> dict[str, str]:
    """An object of strings; numbers and booleans are written as strings (with a warning), as clients do."""
    if not isinstance(value, dict):
        raise McpConfigError(f"{at}: '{key}' must be an object of strings ({key} names to values)")
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, str):
            out[k] = v
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
            warnings.append(f"{at}: {key} {k!r} is a boolean; passed as the string {out[k]!r}")
        elif isinstance(v, (int, float)):
            out[k] = str(v)
            warnings.append(f"{at}: {key} {k!r} is a number; passed as the string {out[k]!r}")
        elif v is None:
            warnings.append(f"{at}: {key} {k!r} is null; left out")
        else:
            raise McpConfigError(f"{at}: {key} {k!r} must be a string, not {type(v).__name__}")
    return out


def _env_file(path: Path, at: str, warnings: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file (Cursor's and VS Code's ``envFile``); comments and ``export`` allowed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        warnings.append(f"{at}: envFile {str(path)!r} cannot be read ({exc.strerror or exc}); ignored")
        return {}
    out: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _normalize(entry: dict[str, Any], at: str, warnings: list[str]) -> dict[str, Any]:
    """One entry in the common shape: Zed's ``{"command": {"path", "args", "env"}}`` flattened,
    Windsurf's ``serverUrl`` and Gemini's ``httpUrl`` as ``url``, Cline's ``transportType`` as ``type``,
    Zed's ``enabled`` as ``disabled``; keys toolrank does not use are dropped with a warning."""
    entry = dict(entry)
    if isinstance(entry.get("command"), dict):             # Zed (before 0.194)
        cmd = entry.pop("command")
        entry["command"] = cmd.get("path")
        for k in ("args", "env"):
            if k in cmd and k not in entry:
                entry[k] = cmd[k]
    for alias in ("serverUrl", "httpUrl"):
        if alias in entry:
            if "url" in entry:
                raise McpConfigError(f"{at}: give the address once, as 'url' or '{alias}', not both")
            entry["url"] = entry.pop(alias)
    if "transportType" in entry:
        kind = entry.pop("transportType")
        entry.setdefault("type", kind)
    if "enabled" in entry:
        enabled = entry.pop("enabled")
        if not isinstance(enabled, bool):
            raise McpConfigError(f"{at}: 'enabled' must be true or false")
        entry.setdefault("disabled", not enabled)
    unknown = sorted(k for k in entry if k not in _USED_KEYS and k not in _CLIENT_KEYS)
    if unknown:
        warnings.append(f"{at}: ignored key(s) {', '.join(map(repr, unknown))} (toolrank uses command, args, "
                        "env, envFile, cwd, url, headers, type, timeout, description, disabled)")
    return {k: v for k, v in entry.items() if k in _USED_KEYS}


def _parse_server(path: Path, name: str, entry: Any, warnings: list[str]) -> ServerSpec | str:
    """A :class:`ServerSpec`, or the reason the entry is left out (disabled, toolrank itself, SSE, ...)."""
    at = f"{path}, server '{name}'"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{at}: each server must be an object with 'command' (stdio) or 'url' (HTTP)")
    raw_keys = list(entry)
    if entry.get("source") == "extension" and "command" not in entry and "url" not in entry:
        # Zed: a server an editor extension provides and starts itself; there is nothing here to run
        return "provided by a Zed extension (no command or url here); toolrank cannot start it"
    entry = _normalize(entry, at, warnings)
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{at}: 'disabled' must be true or false")
    kind = entry.get("type")
    if kind is not None:
        if kind not in _TYPES:
            raise McpConfigError(f"{at}: 'type' {kind!r} is not one of stdio, http, streamable-http")
        kind = _TYPES[kind]
    has_command, has_url = "command" in entry, "url" in entry
    if kind == "sse":
        return ("uses the deprecated SSE transport, which toolrank does not support; give the server's "
                "streamable HTTP endpoint as 'url' (often ending in /mcp)")
    if has_command == has_url:
        keys = f" (it has {', '.join(map(repr, raw_keys))})" if not has_command and raw_keys else ""
        raise McpConfigError(f"{at}: give either 'command' (a stdio server) or 'url' (a streamable HTTP "
                             f"server){', not both' if has_command else ''}{keys}")
    if kind is not None and kind != ("stdio" if has_command else "http"):
        raise McpConfigError(f"{at}: 'type' is {kind!r} but the entry has "
                             f"{'a command' if has_command else 'a url'}")
    stray = sorted(k for k in entry if k in ({"url", "headers"} if has_command else {"command", "args", "env",
                                                                                     "envFile", "cwd"}))
    if stray:
        raise McpConfigError(f"{at}: {', '.join(map(repr, stray))} does not apply to a "
                             f"{'stdio' if has_command else 'HTTP'} server")
    timeout = entry.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise McpConfigError(f"{at}: 'timeout' must be a positive number of seconds")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise McpConfigError(f"{at}: 'description' must be a string")
    off = entry.get("disabledTools", [])
    if not isinstance(off, list) or not all(isinstance(t, str) for t in off):
        raise McpConfigError(f"{at}: 'disabledTools' must be a list of tool names")
    if disabled:
        return "disabled in the configuration"
    base = path.parent
    try:
        if has_command:
            command = entry["command"]
            if not isinstance(command, str) or not command.strip():
                raise McpConfigError(f"{at}: 'command' must be a non-empty string (the program to start)")
            args = entry.get("args", [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise McpConfigError(f"{at}: 'args' must be a list of strings")
            command = _expand(command, at, base, warnings)
            args = [_expand(a, at, base, warnings) for a in args]
            itself = _is_toolrank_itself(command, args)
            if itself:
                return f"{itself}: it would start itself again"
            env: dict[str, str] | None = None
            if "envFile" in entry:
                env_file = entry["envFile"]
                if not isinstance(env_file, str) or not env_file:
                    raise McpConfigError(f"{at}: 'envFile' must be a file path")
                env = _env_file(base / _expand(env_file, at, base, warnings), at, warnings)
            if "env" in entry:
                given = _str_map(entry["env"], at, "env", warnings)
                env = {**(env or {}), **{k: _expand(v, at, base, warnings) for k, v in given.items()}}
            cwd = entry.get("cwd")
            if cwd is not None:
                if not isinstance(cwd, str) or not cwd:
                    raise McpConfigError(f"{at}: 'cwd' must be a folder path")
                cwd = (base / _expand(cwd, at, base, warnings)).resolve()   # relative to the configuration file
            return ServerSpec(name=name, command=command, args=tuple(args), env=env, cwd=cwd,
                              timeout_s=float(timeout) if timeout else None, description=description, origin=path,
                              disabled_tools=tuple(off))
        url = entry["url"]
        if not isinstance(url, str):
            raise McpConfigError(f"{at}: 'url' must be an http:// or https:// address")
        url = _expand(url, at, base, warnings)
        if not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{at}: 'url' must be an http:// or https:// address, not {redact_url(url)!r}")
        headers = None
        if "headers" in entry:
            headers = {k: _expand(v, at, base, warnings)
                       for k, v in _str_map(entry["headers"], at, "headers", warnings).items()}
        return ServerSpec(name=name, url=url, headers=headers, timeout_s=float(timeout) if timeout else None,
                          description=description, origin=path, disabled_tools=tuple(off))
    except _Skip as skip:
        return str(skip)


def _strip_jsonc(text: str) -> str:
    """JSON with comments and trailing commas (VS Code's and Zed's settings files) as plain JSON.

    One pass that knows where strings are: a comment or a trailing comma is only one outside a string
    (``["a, ]"]`` stays as it is)."""
    out: list[str] = []
    i, n, in_str = 0, len(text), False

    def next_significant(k: int) -> str:
        """The first character from ``k`` on that is not white space or inside a comment."""
        while k < n:
            if text[k].isspace():
                k += 1
            elif text.startswith("//", k):
                j = text.find("\n", k)
                k = n if j < 0 else j
            elif text.startswith("/*", k):
                j = text.find("*/", k + 2)
                k = n if j < 0 else j + 2
            else:
                return text[k]
        return ""

    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
            continue
        elif c == "," and next_significant(i + 1) in ("}", "]"):
            pass                                   # a trailing comma
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _servers_section(path: Path, data: Any) -> tuple[str, Any]:
    """The object holding the servers, and its key, in whichever client's format the file is."""
    if isinstance(data, dict):
        for keys in _SECTIONS:
            node: Any = data
            for k in keys:
                node = node.get(k) if isinstance(node, dict) else None
            if node is not None and not (keys == ("servers",) and isinstance(node, dict) and node and
                                         not all(isinstance(v, dict) for v in node.values())):
                return ".".join(keys), node
        projects = data.get("projects")        # Claude Code's ~/.claude.json keeps servers per project
        if isinstance(projects, dict) and any(isinstance(p, dict) and p.get("mcpServers") for p in projects.values()):
            raise McpConfigError(f"{path}: the servers are per project ('projects' -> folder -> 'mcpServers'); "
                                 "run `claude mcp list` in the project, or copy its 'mcpServers' to a file of their own")
    found = f" (top-level keys: {', '.join(sorted(data))})" if isinstance(data, dict) and data else ""
    raise McpConfigError(f"{path}: no 'mcpServers' object{found}; expected "
                         '{"mcpServers": {"name": {"command": ..., "args": [...]} or {"url": ...}}} '
                         "(or VS Code's 'servers', Zed's 'context_servers')")


def load_mcp_config(path: str | Path) -> McpConfig:
    """Read an MCP client configuration, in the format of any major client.

    The servers are under ``mcpServers`` (Claude Desktop, Claude Code, Cursor, Windsurf, Cline),
    ``servers`` (VS Code's ``.vscode/mcp.json``), ``mcp.servers`` (VS Code's settings) or
    ``context_servers`` (Zed); comments and trailing commas are allowed. Each client's spelling of
    an entry is read (Windsurf's ``serverUrl``, Cline's ``transportType``, Zed's ``command.path``,
    Cursor's ``envFile``, ``${VAR}`` variables); keys toolrank does not use are ignored and listed
    in ``warnings``. A ``cwd`` is taken relative to the configuration file. Disabled entries, SSE
    servers and an entry that runs ``toolrank mcp`` itself (also through a wrapper) are left out
    and listed in ``skipped``.

    Raises:
        McpConfigError: the file is missing or not JSON, has no servers, or an entry is malformed
            (neither or both of command/url, a value of the wrong type, ...).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise McpConfigError(f"{path}: MCP configuration file not found") from None
    except IsADirectoryError:
        raise McpConfigError(f"{path}: is a folder; pass the configuration file (e.g. mcp.json)") from None
    except UnicodeDecodeError as exc:
        raise McpConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            data = json.loads(_strip_jsonc(text))
        except json.JSONDecodeError:
            raise McpConfigError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    section, entries = _servers_section(path, data)
    if not isinstance(entries, dict):
        raise McpConfigError(f"{path}: '{section}' must be an object mapping server names to their settings")
    if not entries:
        raise McpConfigError(f"{path}: '{section}' lists no servers; add at least one")
    servers: dict[str, ServerSpec] = {}
    skipped: dict[str, str] = {}
    warnings: list[str] = []
    for name, entry in entries.items():
        if not name.strip():
            raise McpConfigError(f"{path}: a server has an empty name; give each server a name")
        parsed = _parse_server(path, name, entry, warnings)
        if isinstance(parsed, str):
            skipped[name] = parsed
        else:
            servers[name] = parsed
    if not servers:
        why = "; ".join(f"{n}: {r}" for n, r in skipped.items())
        raise McpConfigError(f"{path}: no servers left to index ({why})")
    for w in warnings:
        log.warning("%s", w)
    return McpConfig(path, servers, skipped, warnings, section)


# ------------------------------------------------------------------ one server, through the SDK


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


STRAY_ANSWER = -32700    # the error a request gets when its answer was on a line that is not valid MCP
_STRAY_LOGGED = 5        # stray lines logged one by one per session; then every 100th


class StrayLines:
    """What a session does with a line on a server's stdout that is not an MCP message.

    Like the SDK's own client: log it and carry on (servers print banners and debug lines, Node
    servers ``console.log``). An answer to a pending request that cannot be read is not left to
    time out: text glued in front of a valid answer is stripped and the answer delivered; any
    other unreadable answer fails its request at once with a clear error.
    """

    def __init__(self, spec: "ServerSpec"):
        self.spec = spec
        self.session: "ClientSession | None" = None
        self.count = 0

    @staticmethod
    def _raw(exc: Exception) -> Any:
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            for err in exc.errors():
                if isinstance(err.get("input"), (str, dict)):
                    return err["input"]
        return None

    async def handle(self, exc: Exception) -> bool:
        """True when ``exc`` was a stray line (dealt with here); False for any other transport error."""
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            return False
        raw = self._raw(exc)
        self.count += 1
        text = raw if isinstance(raw, str) else json.dumps(raw)[:500] if raw is not None else str(exc)
        if self.count <= _STRAY_LOGGED or self.count % 100 == 0:
            log.warning("server %r wrote a line that is not MCP to stdout (ignored)%s: %s", self.spec.name,
                        f" [{self.count} so far]" if self.count > _STRAY_LOGGED else "", redact(text[:200]))
        message = raw if isinstance(raw, dict) else None
        if isinstance(raw, str) and "{" in raw:
            try:
                message = json.loads(raw[raw.index("{"):])
            except ValueError:
                message = None
        if isinstance(message, dict) and "id" in message and ("result" in message or "error" in message):
            await self._answer(message, exc)
        elif isinstance(raw, str) and '"jsonrpc"' in raw:      # a cut-off answer: fail its request now
            found = re.search(r'"id"\s*:\s*(-?\d+)', raw)
            if found:
                await self._answer({"id": int(found.group(1)), "error": None}, exc)
        return True

    async def _answer(self, message: dict[str, Any], exc: Exception) -> None:
        from mcp import types

        streams = getattr(self.session, "_response_streams", None)   # the SDK's pending requests
        if not isinstance(streams, dict) or message["id"] not in streams:
            return
        try:
            answer: Any = types.JSONRPCMessage.model_validate(message).root
            if not isinstance(answer, (types.JSONRPCResponse, types.JSONRPCError)):
                raise ValueError("not an answer")
            log.warning("server %r: read its answer to request %s after the text in front of it", self.spec.name,
                        message["id"])
        except ValueError:
            detail = str(exc).splitlines()[0][:200]
            answer = types.JSONRPCError(jsonrpc="2.0", id=message["id"], error=types.ErrorData(
                code=STRAY_ANSWER, message=f"the server's answer is not valid MCP ({detail})"))
        try:
            await streams[message["id"]].send(answer)
        except Exception:  # noqa: BLE001 - the request ended meanwhile
            pass


@asynccontextmanager
async def open_session(spec: ServerSpec, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                       message_handler: Callable[[Any], Any] | None = None,
                       errlog: Any = None) -> AsyncIterator[tuple["ClientSession", "types.InitializeResult"]]:
    """An initialized SDK :class:`~mcp.ClientSession` to one server (stdio or streamable HTTP).

    Every request on the session answers within ``timeout_s`` or raises ``McpError``; a
    stdio server's stderr goes to ``errlog`` (a real file; default: this process's stderr).
    A stdio server's stray stdout lines are logged and skipped (:class:`StrayLines`); every other
    message, and transport errors, go to ``message_handler``.
    Leaving the block closes the session and stops a stdio server.
    """
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    async with AsyncExitStack() as stack:
        if spec.command is not None:
            # Each stdio server learns which configurations started it: a `toolrank mcp` among them
            # (however it was wrapped) refuses to start that configuration's servers again.
            parents = HarvestSettings().parents()
            if spec.origin is not None:
                parents.append(str(spec.origin.resolve()))
            env = {**(spec.env or {}), ENV_PARENTS: os.pathsep.join(parents)}
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=env, cwd=spec.cwd)
            # never this process's raw stderr: a server that prints its configuration back would show its
            # env values in our log; each line passes through MaskedStderr instead
            if errlog is None:   # one for this session: closed with it, so its pipe and thread end too
                masked = MaskedStderr(spec)
                stack.callback(masked.close)
                errlog = masked.file
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        else:
            read, write = await stack.enter_async_context(_http_streams(spec, timeout_s))
        stray = StrayLines(spec)

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception) and await stray.handle(message):
                return
            if message_handler is not None:
                await message_handler(message)

        session = await stack.enter_async_context(ClientSession(
            read, write, read_timeout_seconds=timedelta(seconds=timeout_s), message_handler=on_message,
            client_info=types.Implementation(name="toolrank", version=package_version())))
        stray.session = session
        init = await session.initialize()
        if init.serverInfo.name == RECURSIVE_SERVER_NAME:
            raise RecursionRefused("this entry runs toolrank mcp on the configuration that started it (through "
                               f"{Path(spec.command or '').name!r}), which would start every server again; "
                               "left out: remove the entry from the file")
        yield session, init


async def list_all_tools(session: "ClientSession", *, max_pages: int = MAX_PAGES) -> list[Any]:
    """Every tool a server lists, following ``nextCursor`` page by page, as the server sent them
    (plain JSON; each is validated by :func:`tools_from_listing`, so that one bad tool does not
    cost the server its other tools).

    Raises:
        HarvestError: the server repeats a cursor, or pages on past ``max_pages``.
        McpError, pydantic.ValidationError: the server answered with an error, or a result
            without a ``tools`` list.
    """
    from mcp import types

    class ToolsPage(types.Result):
        tools: list[Any]
        nextCursor: str | None = None

    tools: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        request = types.ClientRequest(types.ListToolsRequest(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None))
        page = await session.send_request(request, ToolsPage)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools
        if cursor in seen:
            raise HarvestError(f"tools/list returned the cursor {cursor[:40]!r} twice: its pages loop")
        seen.add(cursor)
    raise HarvestError(f"tools/list went on for more than {max_pages} pages")


def tools_from_listing(server: str, description: str, listed: list[Any], where: str,
                       disabled: Sequence[str] = ()) -> tuple[list[Tool], list[str]]:
    """Tool records from one server's ``tools/list`` pages, each validated like every other
    catalog input, and one line per tool left out (no name, a non-string description, a schema
    that is not an object or too deep, a name listed twice: every tool of that name is left out,
    since which one would run is unclear). Tools the configuration switches off (``disabled``,
    Windsurf's ``disabledTools``) are left out without a word: never indexed, so never callable.

    Raises:
        CatalogError: the server lists tools, but none of them is valid.
    """
    off = set(disabled)
    listed = [t for t in listed if not (isinstance(t, dict) and t.get("name") in off)]
    tools: list[Tool] = []
    problems: list[str] = []
    counts: dict[str, int] = {}
    for item in listed:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            counts[item["name"]] = counts.get(item["name"], 0) + 1
    for i, item in enumerate(listed):
        name = item.get("name") if isinstance(item, dict) else None
        label = f"tool {name!r}" if isinstance(name, str) and name else f"tool #{i + 1}"
        if isinstance(name, str) and counts.get(name, 0) > 1:
            if name not in {p.split("'")[1] for p in problems if p.startswith("tool '")}:
                problems.append(f"{label}: listed {counts[name]} times; tool names must be unique")
            continue
        try:
            tools.extend(tools_from_mcp_list(server, description, {"tools": [item]}, where))
        except CatalogError as exc:
            detail = str(exc).split(": ", 1)[-1] if str(exc).startswith(where) else str(exc)
            problems.append(f"{label}: {detail}")
    if listed and not tools:
        raise CatalogError(f"{where}, server '{server}': none of its {len(listed)} tools is valid ({'; '.join(problems[:3])})")
    return tools, problems


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
    """One line saying why a server could not be used, with a hint where there is one (credentials
    in URLs redacted)."""
    return redact(hide_values(_describe_error(exc, spec, timeout_s, stderr_tail), spec))


class MaskedStderr:
    """A stdio server's stderr passed on line by line with its ``env`` and ``headers`` values and URL
    credentials masked: a real file (a pipe's write end) to hand to the process, and a thread that
    reads the other end and writes each line, masked, to ``sink`` (default: this process's stderr).
    One per configured server, reused across its restarts."""

    def __init__(self, spec: ServerSpec, sink: Any = None):
        import threading

        self.spec = spec
        self.sink = sink
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w", buffering=1, encoding="utf-8", errors="replace")
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self.thread = threading.Thread(target=self._pump, name=f"stderr-{spec.name}", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        try:
            for line in self._reader:
                out = self.sink or sys.stderr
                try:
                    out.write(redact(hide_values(line, self.spec)))
                    out.flush()
                except (OSError, ValueError):
                    return
        finally:
            self._reader.close()

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        """Close this end of the pipe: once the server's copy is closed too, the thread reads to the end and
        stops, and both file descriptors are released."""
        try:
            self.file.close()
        except OSError:
            pass


def hide_values(text: str, spec: ServerSpec) -> str:
    """``text`` with every value of the entry's ``env`` and ``headers`` (6 characters or more) as ``***``:
    a failing server's stderr often prints its configuration back."""
    secrets = [v for v in list((spec.env or {}).values()) + list((spec.headers or {}).values())
               if isinstance(v, str) and len(v) >= 6]
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def _describe_error(exc: BaseException, spec: ServerSpec, timeout_s: float, stderr_tail: str = "") -> str:
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
    if isinstance(leaf, RecursionRefused):
        return str(leaf)
    if isinstance(leaf, (CatalogError, HarvestError)):
        return f"malformed tools: {leaf}"
    if isinstance(leaf, ValidationError):
        err = leaf.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"malformed tools/list result: {where}: {err['msg']} ({leaf.error_count()} problem(s))"
    if isinstance(leaf, McpError):
        msg = leaf.error.message
        if leaf.error.code == STRAY_ANSWER and msg.startswith("the server's answer"):
            return f"{msg}{tail}"
        if leaf.error.code == CONNECTION_CLOSED:
            return f"the server exited or closed the connection before answering{tail}"
        if leaf.error.code == 408 or "Timed out" in msg:     # the SDK's read timeout
            return (f"timed out after {timeout_s:g} s without a complete answer (raise --timeout, or set "
                    f"\"timeout\" on this server){tail}")
        return f"the server answered with error {leaf.error.code}: {msg}{tail}"
    try:
        import httpx
        if isinstance(leaf, httpx.HTTPStatusError):
            return f"{spec.target} answered HTTP {leaf.response.status_code}"
        if isinstance(leaf, httpx.HTTPError):
            return f"cannot reach {spec.target}: {type(leaf).__name__}: {leaf or 'no detail'}"
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
    problems: tuple[str, ...] = ()          # tools left out of a server that was harvested

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
            tools, problems = tools_from_listing(spec.name, description, listed, where or spec.name,
                                                 spec.disabled_tools)
        except Exception as exc:  # noqa: BLE001 - a server's fault is reported, never raised
            reason = describe_error(exc, spec, timeout, _stderr_tail(errlog))
            log.debug("server %r failed", spec.name, exc_info=True)
            return ServerHarvest(spec.name, None, spec.description, time.perf_counter() - t0, reason)
    return ServerHarvest(spec.name, tools, description, seconds, problems=tuple(problems))


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
