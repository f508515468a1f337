"""Always-available tools: a small configured set (workspace search, web search, ...)
that joins the result whenever a request uses one of the tool's trigger phrases.

Eligibility still applies: a tool the tenant may not use never matches.

Config (JSON), one entry per tool::

    [
      {"server": "Brave Search", "tool": "brave_web_search", "keywords": ["web search", "google it"]},
      {"server": "Glean", "tool": "search", "keywords": ["workspace docs", "company wiki"]}
    ]
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Container, Sequence

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId

__all__ = ["AlwaysAvailable", "AlwaysAvailableRule", "AlwaysAvailableConfigError"]

logger = logging.getLogger(__name__)


class AlwaysAvailableConfigError(ValueError):
    """An always-available configuration that cannot be used as it is."""


@dataclass(frozen=True)
class AlwaysAvailableRule:
    """One always-available tool and the phrases that call it in.

    Args:
        tool_id: the tool, as ``ToolId(server, tool)`` (a plain 2-tuple is converted).
        keywords: words or phrases, matched case-insensitively on word boundaries;
            spaces inside a phrase match any run of whitespace.

    Raises:
        AlwaysAvailableConfigError: an empty server/tool name or no usable keyword.
    """

    tool_id: ToolId
    keywords: tuple[str, ...]

    def __post_init__(self) -> None:
        tid = self.tool_id
        if not (isinstance(tid, tuple) and len(tid) == 2 and all(isinstance(p, str) and p.strip() for p in tid)):
            raise AlwaysAvailableConfigError(
                f"tool_id {tid!r} must be a (server, tool) pair of non-empty strings, e.g. ToolId('Glean', 'search')")
        object.__setattr__(self, "tool_id", ToolId(*tid))
        kws = self.keywords
        if isinstance(kws, str) or not isinstance(kws, (tuple, list)):
            raise AlwaysAvailableConfigError(
                f"keywords for {self.tool_id} must be a list of phrases, got {kws!r}: wrap a single phrase in a list")
        cleaned = tuple(" ".join(k.split()) for k in kws if isinstance(k, str))
        if len(cleaned) != len(kws) or not cleaned or not all(cleaned):
            raise AlwaysAvailableConfigError(
                f"keywords for {self.tool_id} must be non-empty strings (got {list(kws)!r}); "
                "give at least one word or phrase")
        object.__setattr__(self, "keywords", cleaned)


def _phrase_pattern(phrase: str) -> str:
    parts = [re.escape(p) for p in phrase.split(" ")]
    return r"(?<!\w)" + r"\s+".join(parts) + r"(?!\w)"


class AlwaysAvailable:
    """Matches requests against the configured always-available tools.

    Args:
        rules: one rule per tool; a tool may appear only once.

    Raises:
        AlwaysAvailableConfigError: the same tool is configured twice.
    """

    def __init__(self, rules: Sequence[AlwaysAvailableRule] = ()) -> None:
        rules = tuple(rules)
        seen: set[ToolId] = set()
        for rule in rules:
            if not isinstance(rule, AlwaysAvailableRule):
                raise AlwaysAvailableConfigError(
                    f"expected AlwaysAvailableRule, got {type(rule).__name__}: "
                    "build rules with AlwaysAvailableRule(tool_id, keywords) or use AlwaysAvailable.from_json")
            if rule.tool_id in seen:
                raise AlwaysAvailableConfigError(
                    f"tool {rule.tool_id} is configured twice: merge its keywords into one entry")
            seen.add(rule.tool_id)
        self.rules: tuple[AlwaysAvailableRule, ...] = rules
        self._patterns = [
            re.compile("|".join(_phrase_pattern(k) for k in rule.keywords), re.IGNORECASE)
            for rule in rules
        ]

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def tool_ids(self) -> list[ToolId]:
        return [r.tool_id for r in self.rules]

    def match(self, request: str, eligible: Eligibility | None = None) -> list[ToolId]:
        """The configured tools whose keywords occur in ``request``, in config order.

        Args:
            request: the agent's request text.
            eligible: the tenant's eligibility; an ineligible tool never matches.
        """
        if not isinstance(request, str):
            raise ValueError(f"request must be a string, got {type(request).__name__}")
        out = []
        for rule, pattern in zip(self.rules, self._patterns):
            if eligible is not None and not eligible.allows(rule.tool_id):
                continue
            if pattern.search(request):
                out.append(rule.tool_id)
        return out

    def unknown_tools(self, known: Container[ToolId]) -> list[ToolId]:
        """Configured tools missing from ``known`` (e.g. a :class:`Catalog`): check at startup."""
        return [tid for tid in self.tool_ids if tid not in known]

    @classmethod
    def from_json(cls, source: str | Path | list[dict[str, Any]]) -> "AlwaysAvailable":
        """Load rules from a JSON file path or an already-parsed list of entries.

        Each entry is ``{"server": str, "tool": str, "keywords": [str, ...]}``.

        Raises:
            AlwaysAvailableConfigError: unreadable file, invalid JSON, or a bad entry
                (the message names the entry and the field).
        """
        where = "always-available config"
        if isinstance(source, (str, Path)):
            path = Path(source)
            where = str(path)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise AlwaysAvailableConfigError(f"{path}: file not found") from None
            except json.JSONDecodeError as exc:
                raise AlwaysAvailableConfigError(
                    f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        else:
            data = source
        if not isinstance(data, list):
            raise AlwaysAvailableConfigError(
                f"{where}: expected a JSON list of {{\"server\", \"tool\", \"keywords\"}} entries, "
                f"got {type(data).__name__}")
        rules = []
        for i, entry in enumerate(data):
            at = f"{where}, entry {i}"
            if not isinstance(entry, dict):
                raise AlwaysAvailableConfigError(f"{at}: each entry must be an object with server, tool, keywords")
            unknown = set(entry) - {"server", "tool", "keywords"}
            if unknown:
                raise AlwaysAvailableConfigError(
                    f"{at}: unknown field(s) {sorted(unknown)}; allowed: server, tool, keywords")
            for fld in ("server", "tool"):
                value = entry.get(fld)
                if not isinstance(value, str) or not value.strip():
                    raise AlwaysAvailableConfigError(f"{at}: field '{fld}' must be a non-empty string, got {value!r}")
            keywords = entry.get("keywords")
            if not isinstance(keywords, list):
                raise AlwaysAvailableConfigError(
                    f"{at} ({entry['server']} / {entry['tool']}): field 'keywords' must be a list of strings, "
                    f"got {keywords!r}")
            try:
                rules.append(AlwaysAvailableRule(ToolId(entry["server"], entry["tool"]), tuple(keywords)))
            except AlwaysAvailableConfigError as exc:
                raise AlwaysAvailableConfigError(f"{at}: {exc}") from None
        try:
            return cls(rules)
        except AlwaysAvailableConfigError as exc:
            raise AlwaysAvailableConfigError(f"{where}: {exc}") from None
