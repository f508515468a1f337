"""Exact tool names: a request that names a tool ("run `get_shards`", "git_diff_unstaged")
always gets that tool in its result, when the tenant may use it.

A name counts from unquoted text only when it looks like an identifier, so ordinary words
that happen to be tool names ("search", "List") never fire:

* it contains ``_`` (``slack_list_channels``), or
* it contains ``-`` (``get-task``), unless it reads as an English compound ("health-check"), or
* it is camelCase starting with a lowercase word of two or more letters (``listDatasets``),
  or PascalCase that starts with a verb or has three or more humps (``GetRecord``,
  ``AppBuilderClient``; brand-like ``GitHub`` or ``OneDrive`` do not count).

Unquoted matching ignores case (``GIT_DIFF_UNSTAGED``). Any other name ("List DAGs",
"search") counts only when quoted exactly (case-sensitive) in backticks or quotes; a
single plain word needs backticks (```search```), since quoting a word in prose is common.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId

__all__ = ["ExactNameMatcher", "is_identifier_like"]

logger = logging.getLogger(__name__)

# Hyphenated tool names that read as ordinary English compounds in prose.
_HYPHEN_STOPLIST = frozenset("""
health-check deep-research semantic-search text-search full-text report-summary bulk-operations
key-value real-time follow-up read-only built-in sign-in log-in add-on set-up check-in opt-in
e-mail up-to-date step-by-step end-to-end one-to-one to-do how-to well-known open-source
""".split())

# First humps that make a two-hump PascalCase name read as an action ("GetRecord").
_VERBS = frozenset("""
get list create update delete find search open close add remove set run execute query read write
send fetch bulk estimate start stop generate upload download check count insert move copy rename
describe invoke call post put patch save load export import parse validate analyze convert
translate summarize extract scrape crawl browse navigate click take capture subscribe publish
deploy build install retrieve lookup resolve schedule cancel enable disable toggle show view edit
modify merge push pull clone commit sync index upsert drop truncate explain help make
""".split())

_CAMEL_HUMP_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")
# Candidate identifiers in running text: words joined by _ - . / and a leading @ or {...}.
_TOKEN_RE = re.compile(r"[@{]?[\w{}]+(?:[\-./@][\w{}]+)*")
_PIECE_SEP_RE = re.compile(r"([./])")
_QUOTED_RE = re.compile(
    r"`([^`\n]{1,200})`"
    r"|(?<!\w)\"([^\"\n]{1,200})\"(?!\w)"
    r"|(?<!\w)'([^'\n]{1,200})'(?!\w)"
    r"|“([^”\n]{1,200})”"
    r"|‘([^’\n]{1,200})’(?!\w)"
)


def is_identifier_like(name: str) -> bool:
    """Whether ``name`` reads as a code identifier rather than prose (see module docs)."""
    if not name or any(c.isspace() for c in name):
        return False
    if "_" in name.strip("_{}"):
        return True
    if "-" in name:
        return name.lower() not in _HYPHEN_STOPLIST and bool(re.search(r"\w-\w", name))
    for part in re.split(r"[./@]", name):
        if not part:
            continue
        if re.match(r"[a-z]{2,}[A-Z0-9]", part) and re.search(r"[A-Z]", part):
            return True                                    # listDatasets, queryApl
        if re.fullmatch(r"[A-Z][A-Za-z0-9]*", part) and re.search(r"[a-z][A-Z]", part):
            humps = _CAMEL_HUMP_RE.findall(part)
            if len(humps) >= 3 or humps[0].lower() in _VERBS:
                return True                                # GetRecord, AppBuilderClient
    return False


class ExactNameMatcher:
    """Finds the catalog tools a request names exactly.

    Args:
        catalog_tool_ids: every tool id in the catalog (e.g. ``[t.id for t in catalog]``).

    Example:
        >>> m = ExactNameMatcher([ToolId("Git", "git_diff_unstaged"), ToolId("Airflow", "List DAGs")])
        >>> m.find("show me git_diff_unstaged output")
        [ToolId(server='Git', tool='git_diff_unstaged')]
        >>> m.find('run "List DAGs" now'), m.find("list dags")
        ([ToolId(server='Airflow', tool='List DAGs')], [])
    """

    def __init__(self, catalog_tool_ids: Iterable[tuple[str, str]]) -> None:
        self._by_name: dict[str, list[ToolId]] = {}
        self._by_lower_ident: dict[str, list[ToolId]] = {}
        for raw in catalog_tool_ids:
            if not (isinstance(raw, tuple) and len(raw) == 2 and all(isinstance(p, str) for p in raw)):
                raise ValueError(f"tool id {raw!r} is not a (server, tool) pair: pass [t.id for t in catalog]")
            tid = ToolId(*raw)
            ids = self._by_name.setdefault(tid.tool, [])
            if tid not in ids:
                ids.append(tid)
            if is_identifier_like(tid.tool):
                lower = self._by_lower_ident.setdefault(tid.tool.lower(), [])
                if tid not in lower:
                    lower.append(tid)
        self._max_pieces = max((len(_PIECE_SEP_RE.split(n)) for n in self._by_lower_ident), default=1)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    def find(self, request: str, eligible: Eligibility | None = None) -> list[ToolId]:
        """Tools named exactly in ``request``, in order of mention, every server's copy
        of a shared name included (the pipeline ranks them); ineligible tools are dropped.
        """
        if not isinstance(request, str):
            raise ValueError(f"request must be a string, got {type(request).__name__}")
        hits: list[tuple[int, ToolId]] = []
        for m in _QUOTED_RE.finditer(request):
            backticked = m.group(1) is not None
            text = next(g for g in m.groups() if g is not None).strip()
            ids = self._by_name.get(text)
            if not ids:
                continue
            if not backticked and not is_identifier_like(text) and re.fullmatch(r"\w+", text):
                continue                    # a quoted single word in prose: only `word` counts
            hits.extend((m.start(), tid) for tid in ids)
        for m in _TOKEN_RE.finditer(request):
            hits.extend((m.start() + off, tid) for off, tid in self._token_hits(m.group()))
        out: list[ToolId] = []
        seen: set[ToolId] = set()
        for _, tid in sorted(hits, key=lambda h: h[0]):
            if tid in seen or (eligible is not None and not eligible.allows(tid)):
                continue
            seen.add(tid)
            out.append(tid)
        return out

    def _token_hits(self, token: str) -> list[tuple[int, ToolId]]:
        """Identifier-like names inside one token; "youtube.videos.getVideo" is split on
        ``.`` and ``/`` and the longest names in it win."""
        ids = self._lookup(token)
        if ids:
            return [(0, t) for t in ids]
        parts = _PIECE_SEP_RE.split(token)          # [piece, sep, piece, sep, piece]
        pieces = parts[0::2]
        if len(pieces) == 1:
            return []
        offsets = []
        pos = 0
        for idx, part in enumerate(parts):
            if idx % 2 == 0:
                offsets.append(pos)
            pos += len(part)
        out: list[tuple[int, ToolId]] = []
        a = 0
        while a < len(pieces):
            for b in range(min(len(pieces), a + self._max_pieces), a, -1):
                if b - a == len(pieces):
                    continue                          # the whole token was tried above
                text = "".join(parts[2 * a: 2 * b - 1])
                ids = self._lookup(text)
                if ids:
                    out.extend((offsets[a], t) for t in ids)
                    a = b
                    break
            else:
                a += 1
        return out

    def _lookup(self, text: str) -> list[ToolId]:
        if not is_identifier_like(text):
            return []
        return self._by_lower_ident.get(text.lower(), [])
