"""Example requests learned from use: one tenant's, kept apart from the shared index.

When a tool that a search offered for a request is then called successfully, that request
is evidence of how this tenant asks for that tool: it becomes a *learned example* of the
tool, for that tenant only. The shared index never changes; a search of a tenant that has
learned examples runs :func:`retrieve_with_learned`, which scores the dense side against
tenant-specific tool vectors (the tool's passages plus its learned requests, the way shipped
example requests join a tool's vector) and, on the lexical side, a BM25 of its own: the catalog's
documents with each taught tool's learned requests in its document, as indexed example requests are,
weighed with the statistics of the documents so extended (``FusionConfig.learned_lexical``,
"document"; 0.9.0's separate list over the learned requests alone is "list"). It is computed at
search time from the index's term frequencies and the tenant's lexical index (:data:`LEXICON`), so
the store holds nothing of the catalog. Every other tenant runs the index's own ``retrieve``, so
nothing learned by one tenant can reach another's scores or results.

A tool's tenant vector is computed when the tenant teaches it (:meth:`LearnedExamples.with_vector`,
at feedback time) and stored with the learned examples, so a search never embeds passages: its
cost does not grow with how much a tenant has learned. Every text is embedded alone (a batch of
one), so a vector is the same bytes whoever embedded what before it; a stored vector made for
another encoder, index or tool version is recomputed the same way.

A :class:`LearnedExamples` is immutable; :meth:`LearnedExamples.add` and
:meth:`LearnedExamples.remove` return a new one. Per tool it keeps the ``limit`` most recent
requests (20 by default); a request that is nearly the same as one already kept (same words,
Jaccard similarity at least :data:`NEAR_DUPLICATE`) replaces it and counts one more use.
:meth:`LearnedExamples.save` writes a folder atomically, so it plugs into
:class:`serve.index_store.IndexStore` (versioned, atomic pointer, one writer).

A version is laid out for the first search after a restart: a tool table (:data:`FILE`), the
requests one line per tool (:data:`REQUESTS`), the vectors (:data:`VECTORS`) and the lexical
index (:data:`LEXICON`). Loading decodes the table, the vectors and the lexical index only; each
tool's requests stay bytes until something asks for them (a change, a listing, a recomputed
vector), and a search checks a stored vector's key against the index without reading them (see
:func:`vector_key`). A version written by 0.8.0 (one JSON document) is read as it is and written
in this form by the next change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import CatalogError, ToolId
from retrieval.catalog.rules import check_text
from retrieval.fsutil import written_aside
from retrieval.jsonl import dumps_line, round_trips
from .fusion import fused_lists
from .hits import Hit
from .text import tool_passages

log = logging.getLogger(__name__)

__all__ = ["LearnedExample", "LearnedExamples", "retrieve_with_learned", "near_duplicate", "learned_vector",
           "vector_key", "context_key", "requests_key", "tenant_vector", "fold_request", "DEFAULT_LIMIT", "DEFAULT_MAX_TOTAL", "NEAR_DUPLICATE", "MAX_REQUEST_CHARS", "FORMAT"]

DEFAULT_LIMIT = 20            # learned requests kept per tool (the most recent)
DEFAULT_MAX_TOTAL = 60_000    # learned requests kept per tenant (the oldest go first): 20 on each of ~3,000 tools
RECOMPUTE_PER_SEARCH = 32     # tenant vectors a search may compute (the rest wait for later searches)
NEAR_DUPLICATE = 0.8          # word-set Jaccard at or above which two requests are merged
MAX_REQUEST_CHARS = 2000      # longer requests are cut (an example is a request, not a document)
FORMAT = 2                     # 1: 0.8.0's one JSON document (still read); 2: a tool table, requests apart
FILE = "learned.json"          # the tool table: [server, tool, requests kept, key of its stored vector or null]
REQUESTS = "requests.jsonl"    # one line per tool of the table, in its order: [[request, learned_at, uses], ...]
VECTORS = "vectors.npy"        # one row per stored tenant vector, in the table's order
VECTOR_KEYS = "vectors.json"   # format 1 only: the tools and keys of VECTORS' rows
LEXICON = "lexicon"            # the tenant's BM25 over its learned requests, built when the version is written
_WORDS = re.compile(r"\w+", re.UNICODE)


def fold_request(request: str) -> str:
    """A request as it is kept as a learned example: whitespace folded, cut to :data:`MAX_REQUEST_CHARS`
    (what forgetting compares stored texts with)."""
    return " ".join(request.split())[:MAX_REQUEST_CHARS]


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(text.lower()))


def near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE) -> bool:
    """Whether two requests say the same in (nearly) the same words."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return a.strip().lower() == b.strip().lower()
    return len(wa & wb) / len(wa | wb) >= threshold


@dataclass(frozen=True)
class LearnedExample:
    request: str
    learned_at: float        # unix seconds of the latest use
    uses: int = 1            # successful calls merged into this example

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "learned_at": self.learned_at, "uses": self.uses}


def _parse_row(line: bytes, tid: ToolId) -> tuple[LearnedExample, ...]:
    """One tool's line of :data:`REQUESTS` (``[[request, learned_at, uses], ...]``) as examples.

    Raises:
        ValueError: the line is not such a list.
    """
    try:
        rows = json.loads(line)
        if not isinstance(rows, list) or not rows:
            raise ValueError("expected a non-empty list")
        out = []
        for row in rows:
            if not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], str):
                raise ValueError("expected [request, learned_at, uses] rows")
            out.append(LearnedExample(row[0], float(row[1]), int(row[2])))
        return tuple(out)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"learned examples of {tid.server}/{tid.tool}: malformed ({exc})") from None


@dataclass
class _Resolved:
    """What searches over one index read for one version of a tenant's learned examples."""

    index: Any                          # weakref to the index
    catalog: Any                        # the catalog it was resolved against (an update swaps it)
    learned: list[ToolId]               # learned tools in that catalog, in store order
    vectors: dict[ToolId, np.ndarray]   # their tenant vectors (fresh, or stale standing in)
    pending: list[ToolId]               # tools whose vector is missing or stale: recomputed a few per search
    recomputed: set[ToolId] = field(default_factory=set)   # vectors computed since (not the stored ones)
    table: tuple[list[ToolId], np.ndarray, dict[ToolId, int]] | None = None   # vectors stacked, once
    lex_mask: tuple[Any, np.ndarray] | None = None   # (lexicon tools, which are in the catalog)
    lex_docs: tuple[Any, Any, np.ndarray, np.ndarray] | None = None   # (index BM25, lexicon tools, row of each, lengths)


class LearnedExamples(Mapping[ToolId, tuple[LearnedExample, ...]]):
    """One tenant's learned example requests per tool (immutable).

    Read from a store, each tool's requests stay the bytes of their line until something asks for
    them (:meth:`__getitem__`, :meth:`requests`, a change): a search reads only the tool table, the
    stored vectors and the lexical index.
    """

    def __init__(self, tools: Mapping[ToolId, Iterable[LearnedExample]] | None = None, *,
                 limit: int = DEFAULT_LIMIT, max_total: int = DEFAULT_MAX_TOTAL,
                 vectors: Mapping[ToolId, tuple[str, np.ndarray]] | None = None):
        _check_bounds(limit, max_total)
        self.limit = limit
        self.max_total = max_total
        rows: dict[ToolId, tuple[LearnedExample, ...] | bytes] = {}
        for tid, ex in (tools or {}).items():
            kept = tuple(ex)[-limit:]
            if kept:
                rows[ToolId(*tid)] = kept
        given = {ToolId(*t): (str(k), v) for t, (k, v) in (vectors or {}).items()}
        for tid, (key, _) in list(given.items()):   # a vector is kept only with the requests it was made for
            if tid in rows and ":" in key and key.partition(":")[2] != requests_key(self.requests_of(rows[tid])):
                del given[tid]
        self._setup(rows, {t: len(ex) for t, ex in rows.items()}, given)

    def _setup(self, rows: dict[ToolId, Any], counts: dict[ToolId, int],
               vectors: Mapping[ToolId, tuple[str, np.ndarray]]) -> None:
        """``rows``: tool -> examples, or the bytes of its stored line (parsed when first needed)."""
        self._rows = rows
        self._counts = counts
        changed: set[ToolId] = set()
        for tid in [t for t, n in counts.items() if n > self.limit]:   # only a hand-edited store
            rows[tid] = self._examples(tid)[-self.limit:]
            counts[tid] = len(rows[tid])
            changed.add(tid)
        over = sum(counts.values()) - self.max_total
        if over > 0:   # the tenant's oldest learned requests go first
            oldest = sorted((e.learned_at, tid, i) for tid in list(rows)
                            for i, e in enumerate(self._examples(tid)))[:over]
            drop: dict[ToolId, set[int]] = {}
            for _, tid, i in oldest:
                drop.setdefault(tid, set()).add(i)
            for tid, idx in drop.items():
                kept = tuple(e for i, e in enumerate(self._examples(tid)) if i not in idx)
                changed.add(tid)
                if kept:
                    rows[tid], counts[tid] = kept, len(kept)
                else:
                    del rows[tid], counts[tid]
        # tenant vectors: tool -> (the key it was made for, the vector); only for tools still learned as they were
        self._vectors: dict[ToolId, tuple[str, np.ndarray]] = {
            t: v for t, v in vectors.items() if t in rows and t not in changed}
        self._lexicon: Any = None
        self._lexicon_lock = threading.Lock()
        self._resolve_lock = threading.RLock()
        self._resolved: _Resolved | None = None
        self._stored: tuple[np.ndarray, dict[ToolId, int]] | None = None   # as read: the vectors' matrix, each tool's row

    def _with(self, rows: dict[ToolId, Any], counts: dict[ToolId, int],
              vectors: Mapping[ToolId, tuple[str, np.ndarray]]) -> "LearnedExamples":
        out = type(self).__new__(type(self))
        out.limit, out.max_total = self.limit, self.max_total
        out._setup(rows, counts, vectors)
        return out

    def _examples(self, tid: ToolId) -> tuple[LearnedExample, ...]:
        """A tool's examples, parsed from its stored line the first time they are asked for."""
        row = self._rows[tid]
        if isinstance(row, bytes):
            row = _parse_row(row, tid)
            self._rows[tid] = row   # the same key: never resizes the dict under a reader
        return row

    @staticmethod
    def requests_of(examples: Iterable[LearnedExample]) -> tuple[str, ...]:
        return tuple(e.request for e in examples)

    # Mapping
    def __getitem__(self, tool_id: tuple[str, str]) -> tuple[LearnedExample, ...]:
        return self._examples(ToolId(*tool_id))

    def __contains__(self, tool_id: object) -> bool:   # without parsing the tool's requests
        try:
            return tool_id in self._rows
        except TypeError:
            return False

    def __iter__(self) -> Iterator[ToolId]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LearnedExamples) or self._rows.keys() != other._rows.keys():
            return False
        for tid, mine in self._rows.items():
            theirs = other._rows[tid]
            if mine is theirs or (isinstance(mine, bytes) and isinstance(theirs, bytes) and mine == theirs):
                continue
            if self._examples(tid) != other._examples(tid):
                return False
        return {t: k for t, (k, _) in self._vectors.items()} == {t: k for t, (k, _) in other._vectors.items()}

    __hash__ = None  # type: ignore[assignment]   (mutable-looking mapping: not hashable)

    @property
    def _tools(self) -> dict[ToolId, tuple[LearnedExample, ...]]:
        """Every tool's examples (parses them all)."""
        return {tid: self._examples(tid) for tid in list(self._rows)}

    def requests(self, tool_id: tuple[str, str]) -> tuple[str, ...]:
        tid = ToolId(*tool_id)
        return self.requests_of(self._examples(tid)) if tid in self._rows else ()

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def _copy(self, tools: Mapping[ToolId, Any]) -> "LearnedExamples":
        """A copy with ``tools`` (examples, or a row of this one as it is); a tool's stored vector goes
        with it only while its requests are unchanged."""
        rows: dict[ToolId, Any] = {}
        counts: dict[ToolId, int] = {}
        for tid, ex in tools.items():
            tid = ToolId(*tid)
            if isinstance(ex, bytes):
                rows[tid], counts[tid] = ex, self._counts[tid]
                continue
            ex = tuple(ex)[-self.limit:]
            if ex:
                rows[tid], counts[tid] = ex, len(ex)
        keep = {t: v for t, v in self._vectors.items() if t in rows and self._same_row(t, rows[t])}
        return self._with(rows, counts, keep)

    def _same_row(self, tid: ToolId, row: Any) -> bool:
        if row is self._rows.get(tid):
            return True
        return (_parse_row(row, tid) if isinstance(row, bytes) else tuple(row)) == self._examples(tid)

    # tenant vectors
    def vector(self, tool_id: tuple[str, str], key: str) -> np.ndarray | None:
        """The stored tenant vector of a tool when it was made for ``key`` (see :func:`vector_key`)."""
        found = self._vectors.get(ToolId(*tool_id))
        return found[1] if found is not None and found[0] == key else None

    def with_vector(self, tool_id: tuple[str, str], key: str, vector: np.ndarray) -> "LearnedExamples":
        """A copy that stores ``vector`` (made for ``key``) as the tool's tenant vector.

        Raises:
            ValueError: ``key`` (a :func:`vector_key`) was made for other requests than the tool's.
        """
        tid = ToolId(*tool_id)
        if tid in self._rows and ":" in key and key.partition(":")[2] != requests_key(self.requests(tid)):
            raise ValueError(f"the vector of {tid.server}/{tid.tool} was made for other learned requests than "
                             "its own; compute it from learned.requests(tool)")
        out = self._copy(self._rows)
        if tid in out._rows:
            out._vectors[tid] = (key, np.asarray(vector, dtype=np.float32))
        return out

    @property
    def vectors_stored(self) -> int:
        return len(self._vectors)

    def _fits(self, index: Any, tool: Any, tid: ToolId, key: str, context: str) -> bool:
        """Whether the stored vector of ``tid`` (made for ``key``) is the one for ``tool`` over ``index``.

        A key holds what the vector was made for: :func:`context_key` (encoder, index, tool version),
        then :func:`requests_key` of the requests it was stored with; those were checked when it was
        stored, so only the context is compared here and no request is read. A key of 0.8.0's form
        (one hash of both) is checked against the requests and rewritten in today's form, which the
        next version stores.
        """
        if ":" in key:
            return key.partition(":")[0] == context
        requests = self.requests(tid)
        if key != _legacy_vector_key(index, tool, requests):
            return False
        self._vectors[tid] = (f"{context}:{requests_key(requests)}", self._vectors[tid][1])
        return True

    def _resolve(self, index: Any) -> _Resolved:
        """The learned tools in ``index``'s catalog and their stored vectors, checked once per (version,
        index, catalog)."""
        import weakref

        catalog = index.catalog
        found = self._resolved
        if found is not None and found.index() is index and found.catalog is catalog:
            return found
        with self._resolve_lock:
            found = self._resolved
            if found is not None and found.index() is index and found.catalog is catalog:
                return found
            prefix, hash_of = _context_prefix(index), _content_hashes(index)
            learned: list[ToolId] = []
            vectors: dict[ToolId, np.ndarray] = {}
            pending: list[ToolId] = []
            for tid in sorted(self._rows):
                tool = catalog.get(tid)
                if tool is None:
                    continue
                learned.append(tid)
                stored = self._vectors.get(tid)
                if stored is not None:
                    vectors[tid] = stored[1]    # when stale, it stands in until recomputed
                    if self._fits(index, tool, tid, stored[0], _context(prefix, hash_of(tool))):
                        continue
                pending.append(tid)
            found = self._resolved = _Resolved(weakref.ref(index), catalog, learned, vectors, pending)
            return found

    def vectors_for(self, index: Any, budget: int | None = None) -> dict[ToolId, np.ndarray]:
        """The learned tools' tenant vectors over ``index``, resolved once per (version, index) pair: a
        search then only reads them.

        A stored vector made for this index and tool version is used as it is. One made for another
        version (the tool's text changed, another encoder) stands in until it is recomputed, and a tool
        without any is left to the index's own vector; at most ``budget`` of those are computed per call,
        so the first search after a catalog change costs a bounded few embeddings, not one per tool.
        """
        found = self._resolve(index)
        budget = RECOMPUTE_PER_SEARCH if budget is None else budget
        if found.pending and budget > 0:
            with self._resolve_lock:
                while found.pending and budget > 0:
                    tid = found.pending.pop()
                    found.vectors[tid] = learned_vector(index, found.catalog[tid], self.requests(tid))
                    found.recomputed.add(tid)
                    found.table = None
                    budget -= 1
        return found.vectors

    def _table(self, index: Any) -> tuple[list[ToolId], np.ndarray, dict[ToolId, int]]:
        """The resolved tenant vectors stacked (tools in store order, one row each, and each tool's row)."""
        found = self._resolve(index)
        table = found.table
        if table is None:
            with self._resolve_lock:
                tids = [t for t in found.learned if t in found.vectors]
                stored = self._stored
                rows = [stored[1].get(t) for t in tids] if stored is not None and not found.recomputed else [None]
                if tids and None not in rows:   # the stored matrix as read (or its rows): nothing to stack
                    matrix = stored[0] if rows == list(range(len(stored[0]))) else stored[0][rows]
                elif tids:
                    matrix = np.stack([found.vectors[t] for t in tids])
                else:
                    matrix = np.zeros((0, 0), dtype=np.float32)
                table = found.table = (tids, matrix, {t: i for i, t in enumerate(tids)})
        return table

    def _lexicon_mask(self, index: Any, tools: list[ToolId]) -> np.ndarray:
        """Which of the lexical index's tools are in ``index``'s catalog (once per resolution)."""
        found = self._resolve(index)
        got = found.lex_mask
        if got is None or got[0] is not tools:
            inside = set(found.learned)
            got = found.lex_mask = (tools, np.fromiter((t in inside for t in tools), dtype=bool, count=len(tools)))
        return got[1]

    def _document_statistics(self, index: Any) -> tuple[Any, np.ndarray, np.ndarray, Any] | None:
        """What :func:`_bm25_with_learned` needs over ``index``, once per resolution: the index's BM25,
        the catalog row of each lexicon document (-1 for a tool not in the catalog), every document's
        length with its learned requests, and the catalog all three were made for (its rows are theirs:
        a caller checks it is still the index's before using them). None when the index's BM25 keeps no
        term frequencies (or has none here: a Qdrant index's BM25 is in the collection), or the catalog
        changed meanwhile."""
        found = self._resolve(index)
        lex, lex_tools = self.lexicon()
        got = found.lex_docs
        if got is None or got[1] is not lex_tools:
            with index._lock:   # the catalog, its rows and its BM25 are swapped together
                bm25, rows, catalog = getattr(index, "_bm25", None), getattr(index, "_rows", None), index.catalog
            tf = getattr(bm25, "_tf", None)
            if tf is None or rows is None or catalog is not found.catalog:
                return None
            lex_rows = np.fromiter((rows.get(t, -1) for t in lex_tools), dtype=np.int64, count=len(lex_tools))
            doc_len = tf.doc_len.copy()
            if lex_tools and lex._tf is not None:
                inside = lex_rows >= 0
                doc_len[lex_rows[inside]] += lex._tf.doc_len[inside]
            got = found.lex_docs = (bm25, lex_tools, lex_rows, doc_len)
        return got[0], got[2], got[3], found.catalog

    # the tenant's lexical channel
    def lexicon(self) -> tuple[Any, list[ToolId]]:
        """BM25 over the learned requests, one document per tool (built once per version), and its tools."""
        with self._lexicon_lock:
            if self._lexicon is None:
                from .bm25 import BM25Index

                tools = sorted(self._rows)
                try:
                    built = BM25Index.build([" ".join(e.request for e in self._examples(t)) for t in tools])
                except ValueError:   # nothing to index (every learned word a stop word): no lexical list
                    built, tools = BM25Index.build([]), []
                self._lexicon = (built, tools)
            return self._lexicon

    # changes
    def add(self, tool_id: tuple[str, str], request: str, *, at: float | None = None) -> "LearnedExamples":
        """A copy with ``request`` learned for ``tool_id`` (near-duplicates merged, the oldest dropped past the limit).

        Raises:
            ValueError: an empty request, or one that cannot be stored as text.
        """
        if not isinstance(request, str) or not request.strip():
            raise ValueError("a learned example must be a non-empty request")
        request = check_text(fold_request(request), "request")
        at = time.time() if at is None else float(at)
        tid = ToolId(*tool_id)
        kept, uses = [], 1
        for e in (self._examples(tid) if tid in self._rows else ()):
            if near_duplicate(e.request, request):
                uses += e.uses
            else:
                kept.append(e)
        kept.append(LearnedExample(request, at, uses))
        return self._copy({**self._rows, tid: kept})

    def remove(self, tool_id: tuple[str, str] | None = None, request: str | None = None) -> tuple["LearnedExamples", int]:
        """A copy without the tool's learned examples (only ``request`` when given; every tool's
        when ``tool_id`` is None), and how many were removed."""
        tools = dict(self._rows)
        targets = list(tools) if tool_id is None else [ToolId(*tool_id)]
        removed = 0
        for tid in targets:
            if tid not in tools:
                continue
            if request is None:
                removed += self._counts[tid]
                del tools[tid]
                continue
            before = self._examples(tid)
            after = tuple(e for e in before if e.request != request)
            if len(after) == len(before):
                continue
            removed += len(before) - len(after)
            if after:
                tools[tid] = after
            else:
                del tools[tid]
        return self._copy(tools), removed

    # persistence
    def to_dict(self) -> dict[str, Any]:
        """Every learned example as one JSON document (the form a 0.8.0 store kept them in)."""
        return {"format": 1, "limit": self.limit, "max_total": self.max_total, "tools": [
            {"server": t.server, "tool": t.tool, "examples": [e.to_dict() for e in self._examples(t)]}
            for t in sorted(self._rows)]}

    @classmethod
    def from_dict(cls, data: Any) -> "LearnedExamples":
        """The examples of a :meth:`to_dict` document. Raises ValueError naming what is malformed."""
        if not isinstance(data, dict) or data.get("format") != 1:
            raise ValueError("learned examples: expected an object with format 1")
        try:
            tools: dict[ToolId, list[LearnedExample]] = {}
            for row in data["tools"]:
                tid = ToolId(str(row["server"]), str(row["tool"]))
                if tid in tools:
                    raise ValueError(f"learned examples: {tid} appears twice")
                tools[tid] = [LearnedExample(str(e["request"]), float(e["learned_at"]), int(e.get("uses", 1)))
                              for e in row["examples"]]
            return cls(tools, limit=int(data.get("limit", DEFAULT_LIMIT)),
                       max_total=int(data.get("max_total", DEFAULT_MAX_TOTAL)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"learned examples: malformed ({type(exc).__name__}: {exc})") from None

    def save(self, directory: str | Path) -> Path:
        """Write the examples as a store version (format :data:`FORMAT`) into ``directory`` atomically (a
        temporary folder renamed into place): :data:`FILE` the tool table (each tool's number of requests
        and the key of its stored vector), :data:`REQUESTS` the requests, one line per tool,
        :data:`VECTORS` the vectors, :data:`LEXICON` the lexical index. A tool read from a store and not
        changed since is written back as the bytes it was read as."""
        directory = Path(directory)
        tools = sorted(self._rows)
        lines = []
        for tid in tools:
            row = self._rows[tid]
            if not isinstance(row, bytes):
                data = [[e.request, e.learned_at, e.uses] for e in row]
                if not round_trips(data):
                    raise CatalogError("learned examples cannot be stored as JSON and read back unchanged")
                row = dumps_line(data).encode("utf-8")
            lines.append(row)
        blob = b"".join(line + b"\n" for line in lines)
        keyed = [t for t in tools if t in self._vectors]
        head = {"format": FORMAT, "limit": self.limit, "max_total": self.max_total,
                "requests_crc32": zlib.crc32(blob),
                "tools": [[t.server, t.tool, self._counts[t], self._vectors[t][0] if t in self._vectors else None]
                          for t in tools]}
        if not round_trips(head):
            raise CatalogError("learned examples cannot be stored as JSON and read back unchanged")
        with written_aside(directory) as tmp:   # mkdtemp: a 0700 folder; the files 0600 (what users typed)
            _write_private(tmp / REQUESTS, blob)
            if keyed:
                with _open_private(tmp / VECTORS) as fh:
                    np.save(fh, np.stack([self._vectors[t][1] for t in keyed]).astype(np.float32))
                    fh.flush()
                    os.fsync(fh.fileno())
            _write_private(tmp / FILE, (json.dumps(head, ensure_ascii=False) + "\n").encode("utf-8"))
            lexicon, lex_tools = self.lexicon()
            if lex_tools:   # built here, once per version, so a search after a restart only reads it
                lexicon.save(tmp / LEXICON)
                for path in [tmp / LEXICON, *(tmp / LEXICON).rglob("*")]:   # what users typed: private
                    os.chmod(path, 0o700 if path.is_dir() else 0o600)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "LearnedExamples":
        """Read a version written by :meth:`save` (or by 0.8.0: format 1, one JSON document).

        Only the tool table, the vectors and the lexical index are decoded; each tool's requests are
        kept as the bytes of their line until asked for (a search needs none of them).

        Raises:
            ValueError: a missing, damaged or unknown store (the message names the file).
        """
        directory = Path(directory)
        path = directory / FILE
        try:
            head = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise ValueError(f"{path}: no learned examples file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg})") from None
        except (ValueError, OSError) as exc:   # not UTF-8, unreadable
            raise ValueError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None
        fmt = head.get("format") if isinstance(head, dict) else None
        if fmt == 1:
            found = cls.from_dict(head)
            found._vectors = _read_v1_vectors(directory, found)
        elif fmt == FORMAT:
            found = cls._read(directory, head)
        else:
            raise ValueError(f"{path}: learned examples of format {fmt!r}; this release reads formats 1 and {FORMAT}")
        lexicon = directory / LEXICON
        if lexicon.is_dir() and found._rows:
            try:   # a cache too: an unreadable or mismatched one is built again on first use
                from .bm25 import BM25Index

                read = BM25Index.load(lexicon, len(found._rows))
                # without its term frequencies it cannot extend the catalog's documents: built again
                found._lexicon = (read, sorted(found._rows)) if read.tenant_invariant else None
            except Exception:  # noqa: BLE001 - bm25s raises several kinds on a damaged folder
                found._lexicon = None
        return found

    @classmethod
    def _read(cls, directory: Path, head: dict[str, Any]) -> "LearnedExamples":
        """A format-2 version: the tool table of ``head``, each tool's line of :data:`REQUESTS` unparsed."""
        path = directory / REQUESTS
        try:
            limit, max_total, table = int(head["limit"]), int(head["max_total"]), head["tools"]
            crc = int(head["requests_crc32"])
            if not isinstance(table, list):
                raise TypeError("tools is not a list")
            _check_bounds(limit, max_total)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{directory / FILE}: malformed ({type(exc).__name__}: {exc})") from None
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if zlib.crc32(blob) != crc:
            raise ValueError(f"{path}: damaged (its checksum does not match {FILE})")
        lines = blob.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        if len(lines) != len(table):
            raise ValueError(f"{path}: {len(lines)} lines for {len(table)} tools in {FILE}")
        rows: dict[ToolId, Any] = {}
        counts: dict[ToolId, int] = {}
        keys: list[tuple[ToolId, str]] = []
        for entry, line in zip(table, lines):
            if not (isinstance(entry, list) and len(entry) == 4 and type(entry[0]) is str
                    and type(entry[1]) is str and type(entry[2]) is int and entry[2] > 0
                    and (entry[3] is None or type(entry[3]) is str)):
                raise ValueError(f"{directory / FILE}: malformed tool row {str(entry)[:200]}")
            tid = ToolId(entry[0], entry[1])
            if tid in rows:
                raise ValueError(f"{directory / FILE}: {tid.server}/{tid.tool} appears twice")
            rows[tid], counts[tid] = line, entry[2]
            if entry[3] is not None:
                keys.append((tid, entry[3]))
        vectors: dict[ToolId, tuple[str, np.ndarray]] = {}
        if keys:
            try:   # stored vectors are a cache: unreadable ones are recomputed, never fatal
                matrix = np.load(directory / VECTORS, allow_pickle=False)
                if matrix.ndim != 2 or len(matrix) != len(keys):
                    raise ValueError(f"{len(matrix)} rows for {len(keys)} keys")
                vectors = {tid: (key, matrix[i]) for i, (tid, key) in enumerate(keys)}
            except (ValueError, OSError) as exc:
                log.warning("%s: stored tenant vectors cannot be used (%s); they are recomputed",
                            directory / VECTORS, exc)
                matrix = None
        out = cls.__new__(cls)
        out.limit, out.max_total = limit, max_total
        out._setup(rows, counts, vectors)
        if vectors:
            out._stored = (matrix, {tid: i for i, (tid, _) in enumerate(keys)})
        return out


def _check_bounds(limit: int, max_total: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1 learned example per tool, got {limit}")
    if max_total < 1:
        raise ValueError(f"max_total must be at least 1 learned example, got {max_total}")


def _open_private(path: Path) -> Any:
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _write_private(path: Path, data: bytes) -> None:
    with _open_private(path) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _read_v1_vectors(directory: Path, found: LearnedExamples) -> dict[ToolId, tuple[str, np.ndarray]]:
    """The tenant vectors of a format-1 version (keys of 0.8.0's form, checked when first resolved)."""
    keys_path, vec_path = directory / VECTOR_KEYS, directory / VECTORS
    if not (keys_path.exists() and vec_path.exists()):
        return {}
    try:   # stored vectors are a cache: unreadable ones are recomputed, never fatal
        keys = json.loads(keys_path.read_text(encoding="utf-8"))
        matrix = np.load(vec_path, allow_pickle=False)
        if len(keys) != len(matrix):
            return {}
        return {ToolId(k["server"], k["tool"]): (str(k["key"]), matrix[i])
                for i, k in enumerate(keys) if ToolId(k["server"], k["tool"]) in found._rows}
    except (ValueError, KeyError, TypeError, OSError):
        return {}


# ------------------------------------------------------------------ retrieval with learned examples


class _TextVectors:
    """Embeddings of passages and learned requests, per encoder, bounded (LRU). Each text is embedded
    alone (a batch of one), so its vector does not depend on what else was embedded with it: an
    (int8) encoder's output depends on its batch, and a shared cache must not carry that across tenants."""

    def __init__(self, size: int = 50_000):
        self.size = size
        self._cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, encoder: Any, texts: list[str]) -> np.ndarray:
        name = str(getattr(encoder, "name", id(encoder)))
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if (name, t) not in self._cache))
        if missing:
            vecs = [encoder.encode([t])[0] for t in missing]
            with self._lock:
                for t, v in zip(missing, vecs):
                    self._cache[(name, t)] = np.asarray(v, dtype=np.float32)
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        with self._lock:
            out = []
            for t in texts:
                v = self._cache.get((name, t))
                if v is None:  # evicted by a concurrent call: embed it again
                    v = np.asarray(encoder.encode([t])[0], dtype=np.float32)
                else:
                    self._cache.move_to_end((name, t))
                out.append(v)
        return np.stack(out) if out else np.zeros((0, 0), dtype=np.float32)


_VECTORS = _TextVectors()
_TOOL_VECTORS: OrderedDict[tuple, np.ndarray] = OrderedDict()
_TOOL_VECTORS_SIZE = 20_000
_TOOL_LOCK = threading.Lock()


def _content_hashes(index: Any) -> Any:
    """``hash_of(tool) -> tool.content_hash()``, read from the index where it keeps it: a :class:`ToolIndex`
    holds each tool's content hash with its vector, current after every update (computed when it was
    loaded), so checking stored vectors after a restart hashes no tool again."""
    kept = getattr(index, "_vectors", None)

    def hash_of(tool: Any) -> str:
        entry = kept.get((tool.server, tool.name)) if isinstance(kept, dict) else None
        if isinstance(entry, tuple) and entry and isinstance(entry[0], str):
            return entry[0]
        return tool.content_hash()
    return hash_of


def _content_hash(index: Any, tool: Any) -> str:
    return _content_hashes(index)(tool)


def _context_prefix(index: Any) -> str:
    name = getattr(index.encoder, "name", None) or f"id:{id(index.encoder)}"   # an unnamed encoder is only itself
    return f"{name}\x1f{bool(index.with_examples)}\x1f"


def _context(prefix: str, content_hash: str) -> str:
    return hashlib.sha256((prefix + content_hash).encode("utf-8")).hexdigest()[:16]


def context_key(index: Any, tool: Any) -> str:
    """What a tenant vector depends on besides the learned requests: the encoder, whether the index has
    examples, the tool's content (a short hash)."""
    return _context(_context_prefix(index), _content_hash(index, tool))


def requests_key(requests: Iterable[str]) -> str:
    """The learned requests a tenant vector was made from (a short hash)."""
    return hashlib.sha256("\x1f".join(r for r in requests if r.strip()).encode("utf-8")).hexdigest()[:16]


def vector_key(index: Any, tool: Any, requests: Iterable[str]) -> str:
    """What a tenant vector depends on: ``context_key:requests_key`` (a stored vector is used only under the
    same key). Stored with the vector, its second half is checked against the requests it is stored with
    (:meth:`LearnedExamples.with_vector`), so reading a store back compares only the first."""
    return f"{context_key(index, tool)}:{requests_key(requests)}"


def _legacy_vector_key(index: Any, tool: Any, requests: Iterable[str]) -> str:
    """The key 0.8.0 stored: one hash of the context and the requests."""
    name = getattr(index.encoder, "name", None) or f"id:{id(index.encoder)}"
    parts = [str(name), str(bool(index.with_examples)), _content_hash(index, tool),
             *[r for r in requests if r.strip()]]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def learned_vector(index: Any, tool: Any, requests: Iterable[str]) -> np.ndarray:
    """The tool's vector for a tenant: the normalised centroid of its indexed passages and its
    learned requests (each request one passage, as shipped example requests are)."""
    requests = tuple(r for r in requests if r.strip())
    key = vector_key(index, tool, requests)
    with _TOOL_LOCK:
        found = _TOOL_VECTORS.get(key)
        if found is not None:
            _TOOL_VECTORS.move_to_end(key)
            return found
    texts = tool_passages(tool, with_examples=index.with_examples) + list(requests)
    centroid = _VECTORS.encode(index.encoder, texts).mean(0)
    vec = centroid / max(float(np.linalg.norm(centroid)), 1e-12)
    with _TOOL_LOCK:
        _TOOL_VECTORS[key] = vec
        while len(_TOOL_VECTORS) > _TOOL_VECTORS_SIZE:
            _TOOL_VECTORS.popitem(last=False)
    return vec


def tenant_vector(index: Any, tool_id: tuple[str, str], requests: Iterable[str]) -> tuple[str, np.ndarray] | None:
    """``(key, vector)`` of a tool's tenant vector over ``index`` (None when the index lacks the tool):
    what feedback stores with the learned examples, so searches never embed."""
    tid = ToolId(*tool_id)
    if tid not in index.catalog:
        return None
    tool = index.catalog[tid]
    requests = tuple(requests)
    return vector_key(index, tool, requests), learned_vector(index, tool, requests)


def _bm25_with_learned(bm25: Any, lex: Any, lex_rows: np.ndarray, doc_len: np.ndarray, query: str,
                       mask: np.ndarray | None) -> np.ndarray:
    """BM25 scores of the catalog's documents as if each taught tool's document also held its learned
    requests (the way example requests in the index are part of a tool's document), weighed with the
    statistics of the documents so extended (their number, average length, document frequencies; the
    allowed ones only under ``mask``): the index's term frequencies plus the tenant lexicon's, added at
    search time, so nothing of the catalog is copied into the tenant's store. bm25s' formulas (lucene idf
    and tf component, float32 sums in query order)."""
    from .bm25 import tokenize

    tf = bm25._tf
    ltf = lex._tf if lex is not None and lex.n_docs else None
    vocab = bm25.retriever.vocab_dict
    lvocab = lex.retriever.vocab_dict if ltf is not None else {}
    counts = np.zeros(len(doc_len), dtype=np.float32)

    def postings():
        for token in tokenize([query])[0]:
            i, j = vocab.get(token), lvocab.get(token)
            if i is None and j is None:
                continue
            counts[:] = 0.0
            if i is not None:
                lo, hi = tf.indptr[i], tf.indptr[i + 1]
                counts[tf.docs[lo:hi]] += tf.tf[lo:hi]          # a term's documents are distinct
            if j is not None:
                lo, hi = ltf.indptr[j], ltf.indptr[j + 1]
                rows = lex_rows[ltf.docs[lo:hi]]
                inside = rows >= 0
                counts[rows[inside]] += ltf.tf[lo:hi][inside]   # one lexicon document per tool: distinct rows
            held = counts > 0
            if mask is not None:
                held &= mask
            docs = np.flatnonzero(held)
            yield docs, counts[docs]

    return bm25.score_postings(postings(), doc_len, mask)


def retrieve_with_learned(index: Any, learned: LearnedExamples | None, request: str, need: str | None = None,
                          eligible: Eligibility | None = None, k: int = 100) -> list[Hit]:
    """``index.retrieve`` for a tenant with learned examples (the same hits when it has none that apply).

    The dense list uses, for each eligible tool with learned examples, its tenant vector (stored with
    the examples, else :func:`learned_vector`) instead of the shared one. The BM25 list, with
    ``fusion.learned_lexical`` "document" (the default), is the tenant's own: each taught tool's
    document holds its learned requests, scored with the so-extended documents' statistics
    (:func:`_bm25_with_learned`), so a tool ranks as if its learned requests were indexed example
    requests; with "list" (0.9.0) it is the index's and BM25 over the learned requests alone is one
    more list (``fusion.w_learned_bm25``; "both": the two). The lists are fused as the index fuses them.
    """
    if learned is None or not len(learned):
        return index.retrieve(request, need, eligible, k=k)
    resolved = learned._resolve(index)
    relevant = resolved.learned
    if eligible is not None:
        relevant = [tid for tid in relevant if eligible.allows(tid)]
    if not relevant:
        return index.retrieve(request, need, eligible, k=k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    everyone = len(relevant) == len(resolved.learned)
    allowed = None if everyone else set(relevant)
    depth = max(k, index.fusion.depth)
    query, need_q = index.request_text(request, need), index.need_text(need)
    qv, nv = index.embed_queries(request, need)

    learned.vectors_for(index)   # a bounded few missing or stale ones recomputed
    tids, matrix, rows = learned._table(index)
    usable = (np.ones(len(tids), dtype=bool) if allowed is None else
              np.fromiter((t in allowed for t in tids), dtype=bool, count=len(tids)))

    def dense_order(vector: np.ndarray, text: str) -> list[tuple[ToolId, float]]:
        """One dense list with the tenant's vectors for its tools with learned examples: the index's hits
        (their tenant score where they have one), then the other tenant tools, by score (ties keep that
        order). A tenant score is one row's dot product (einsum: the same bits whichever rows are
        scored with it, unlike a BLAS matrix-vector product)."""
        got = index.retrieve(text, None, eligible, k=depth, stage="dense", query_vector=vector)
        if not tids:
            return sorted(((h.tool_id, float(h.dense_score)) for h in got), key=lambda kv: -kv[1])[:depth]
        scores = np.einsum("ij,j->i", matrix, np.asarray(vector, dtype=matrix.dtype))
        taken = ~usable
        items = []
        for h in got:
            i = rows.get(h.tool_id)
            if i is None or taken[i]:
                items.append((h.tool_id, float(h.dense_score)))
            else:
                items.append((h.tool_id, float(scores[i])))
                taken[i] = True
        rest = np.flatnonzero(~taken)
        best = rest[np.argsort(-scores[rest], kind="stable")[:depth]]   # only these can reach the list
        items.extend((tids[i], float(scores[i])) for i in best)
        return sorted(items, key=lambda kv: -kv[1])[:depth]   # stable: ties keep the order above

    mode = index.fusion.learned_lexical
    stats = learned._document_statistics(index) if mode in ("document", "both") else None
    if stats is not None:
        # the catalog the statistics were made for, not a fresh resolution's: an update between the two
        # would pair the old catalog's rows with the new catalog's tools and mask
        catalog = stats[3]
        with index._lock:   # the mask over the very catalog the statistics were made for (an update swaps it)
            doc_mask = index._mask(eligible) if index.catalog is catalog else None
            if index.catalog is not catalog:
                stats = None
    learned_lexical: list[ToolId] = []
    # without the document statistics (a backend with no local BM25, or a catalog update meanwhile) the
    # learned requests still count lexically: as 0.9.0's list of their own
    if (mode in ("list", "both") or stats is None) and index.fusion.w_learned_bm25 > 0:
        lex, lex_tools = learned.lexicon()
        if lex_tools:
            mask = (learned._lexicon_mask(index, lex_tools) if allowed is None else
                    np.fromiter((t in allowed for t in lex_tools), dtype=bool, count=len(lex_tools)))
            found_rows, _ = lex.search(query, len(lex_tools), mask)
            learned_lexical = [lex_tools[int(r)] for r in found_rows]

    if stats is not None:
        # the tenant's own BM25: the catalog's documents, each taught tool's with its learned requests
        # (as indexed example requests are), instead of the index's list
        from .bm25 import _top_positive_by_row

        bm25, lex_rows, doc_len, _ = stats
        lex = learned.lexicon()[0]
        tools = catalog.tools

        def bm25_order(text: str) -> list[tuple[ToolId, float]]:
            scores = _bm25_with_learned(bm25, lex, lex_rows, doc_len, text, doc_mask)
            top, top_scores = _top_positive_by_row(scores, depth)   # ties by row, as a masked BM25 search
            return [(tools[int(r)].id, float(s)) for r, s in zip(top, top_scores)]
    else:
        def bm25_order(text: str) -> list[tuple[ToolId, float]]:
            return [(h.tool_id, float(h.bm25_score)) for h in
                    index.retrieve(text, None, eligible, k=depth, stage="bm25")]

    b_order = bm25_order(query)
    d_order = dense_order(qv, query)
    need_lexical = bm25_order(need_q) if need_q else []
    need_dense = dense_order(nv, need_q) if need_q else []
    b_info = {tid: (i + 1, s) for i, (tid, s) in enumerate(b_order)}
    d_info = {tid: (i + 1, s) for i, (tid, s) in enumerate(d_order)}
    nb_info = {tid: i + 1 for i, (tid, _) in enumerate(need_lexical)}
    nd_info = {tid: (i + 1, s) for i, (tid, s) in enumerate(need_dense)}
    fused = fused_lists([tid for tid, _ in b_order], [tid for tid, _ in d_order],
                        [tid for tid, _ in need_lexical], [tid for tid, _ in need_dense], index.fusion,
                        learned_lexical)
    hits = []
    for rank, (tid, score) in enumerate(fused[:k], 1):
        br, bs = b_info.get(tid, (None, None))
        dr, ds = d_info.get(tid, (None, None))
        ndr, nds = nd_info.get(tid, (None, None))
        hits.append(Hit(tid, rank, score, br, bs, dr, ds, nb_info.get(tid), ndr, nds))
    return hits
