"""Example requests learned from use: one tenant's, kept apart from the shared index.

When a tool that a search offered for a request is then called successfully, that request
is evidence of how this tenant asks for that tool: it becomes a *learned example* of the
tool, for that tenant only. The shared index never changes; a search of a tenant that has
learned examples runs :func:`retrieve_with_learned`, which scores the dense side against
tenant-specific tool vectors (the tool's passages plus its learned requests, the way shipped
example requests join a tool's vector). Every other tenant runs the index's own
``retrieve``, so nothing learned by one tenant can reach another's scores or results.

A :class:`LearnedExamples` is immutable; :meth:`LearnedExamples.add` and
:meth:`LearnedExamples.remove` return a new one. Per tool it keeps the ``limit`` most recent
requests (20 by default); a request that is nearly the same as one already kept (same words,
Jaccard similarity at least :data:`NEAR_DUPLICATE`) replaces it and counts one more use.
:meth:`LearnedExamples.save` writes a folder atomically, so it plugs into
:class:`serve.index_store.IndexStore` (versioned, atomic pointer, one writer).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
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

__all__ = ["LearnedExample", "LearnedExamples", "retrieve_with_learned", "near_duplicate", "DEFAULT_LIMIT",
           "NEAR_DUPLICATE", "MAX_REQUEST_CHARS", "FORMAT"]

DEFAULT_LIMIT = 20            # learned requests kept per tool (the most recent)
NEAR_DUPLICATE = 0.8          # word-set Jaccard at or above which two requests are merged
MAX_REQUEST_CHARS = 2000      # longer requests are cut (an example is a request, not a document)
FORMAT = 1
FILE = "learned.json"
_WORDS = re.compile(r"\w+", re.UNICODE)


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


class LearnedExamples(Mapping[ToolId, tuple[LearnedExample, ...]]):
    """One tenant's learned example requests per tool (immutable)."""

    def __init__(self, tools: Mapping[ToolId, Iterable[LearnedExample]] | None = None, *,
                 limit: int = DEFAULT_LIMIT):
        if limit < 1:
            raise ValueError(f"limit must be at least 1 learned example per tool, got {limit}")
        self.limit = limit
        self._tools: dict[ToolId, tuple[LearnedExample, ...]] = {
            ToolId(*tid): tuple(ex)[-limit:] for tid, ex in (tools or {}).items() if tuple(ex)}

    # Mapping
    def __getitem__(self, tool_id: tuple[str, str]) -> tuple[LearnedExample, ...]:
        return self._tools[ToolId(*tool_id)]

    def __iter__(self) -> Iterator[ToolId]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LearnedExamples) and self._tools == other._tools

    def requests(self, tool_id: tuple[str, str]) -> tuple[str, ...]:
        return tuple(e.request for e in self._tools.get(ToolId(*tool_id), ()))

    @property
    def total(self) -> int:
        return sum(len(v) for v in self._tools.values())

    # changes
    def add(self, tool_id: tuple[str, str], request: str, *, at: float | None = None) -> "LearnedExamples":
        """A copy with ``request`` learned for ``tool_id`` (near-duplicates merged, the oldest dropped past the limit).

        Raises:
            ValueError: an empty request, or one that cannot be stored as text.
        """
        if not isinstance(request, str) or not request.strip():
            raise ValueError("a learned example must be a non-empty request")
        request = check_text(" ".join(request.split())[:MAX_REQUEST_CHARS], "request")
        at = time.time() if at is None else float(at)
        tid = ToolId(*tool_id)
        kept, uses = [], 1
        for e in self._tools.get(tid, ()):
            if near_duplicate(e.request, request):
                uses += e.uses
            else:
                kept.append(e)
        kept.append(LearnedExample(request, at, uses))
        return LearnedExamples({**self._tools, tid: kept}, limit=self.limit)

    def remove(self, tool_id: tuple[str, str] | None = None, request: str | None = None) -> tuple["LearnedExamples", int]:
        """A copy without the tool's learned examples (only ``request`` when given; every tool's
        when ``tool_id`` is None), and how many were removed."""
        tools = dict(self._tools)
        targets = list(tools) if tool_id is None else [ToolId(*tool_id)]
        removed = 0
        for tid in targets:
            before = tools.get(tid, ())
            after = tuple(e for e in before if request is not None and e.request != request)
            removed += len(before) - len(after)
            if after:
                tools[tid] = after
            else:
                tools.pop(tid, None)
        return LearnedExamples(tools, limit=self.limit), removed

    # persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "limit": self.limit, "tools": [
            {"server": t.server, "tool": t.tool, "examples": [e.to_dict() for e in ex]}
            for t, ex in sorted(self._tools.items())]}

    @classmethod
    def from_dict(cls, data: Any) -> "LearnedExamples":
        """Raises ValueError naming what is malformed."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"learned examples: expected an object with format {FORMAT}")
        try:
            tools: dict[ToolId, list[LearnedExample]] = {}
            for row in data["tools"]:
                tid = ToolId(str(row["server"]), str(row["tool"]))
                if tid in tools:
                    raise ValueError(f"learned examples: {tid} appears twice")
                tools[tid] = [LearnedExample(str(e["request"]), float(e["learned_at"]), int(e.get("uses", 1)))
                              for e in row["examples"]]
            return cls(tools, limit=int(data.get("limit", DEFAULT_LIMIT)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"learned examples: malformed ({type(exc).__name__}: {exc})") from None

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/learned.json`` atomically (a temporary folder renamed into place)."""
        directory = Path(directory)
        data = self.to_dict()
        if not round_trips(data):
            raise CatalogError("learned examples cannot be stored as JSON and read back unchanged")
        with written_aside(directory) as tmp:   # mkdtemp: a 0700 folder; the file 0600 (what users typed)
            fd = os.open(tmp / FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(dumps_line(data) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "LearnedExamples":
        path = Path(directory) / FILE
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ValueError(f"{path}: no learned examples file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg})") from None


# ------------------------------------------------------------------ retrieval with learned examples


class _TextVectors:
    """Embeddings of passages and learned requests, per encoder, bounded (LRU)."""

    def __init__(self, size: int = 50_000):
        self.size = size
        self._cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, encoder: Any, texts: list[str]) -> np.ndarray:
        name = str(getattr(encoder, "name", id(encoder)))
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if (name, t) not in self._cache))
        if missing:
            vecs = encoder.encode(missing)
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


def learned_vector(index: Any, tool: Any, requests: Iterable[str]) -> np.ndarray:
    """The tool's vector for a tenant: the normalised centroid of its indexed passages and its
    learned requests (each request one passage, as shipped example requests are)."""
    requests = tuple(r for r in requests if r.strip())
    key = (str(getattr(index.encoder, "name", id(index.encoder))), index.with_examples, tool.content_hash(), requests)
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


def retrieve_with_learned(index: Any, learned: LearnedExamples | None, request: str, need: str | None = None,
                          eligible: Eligibility | None = None, k: int = 100) -> list[Hit]:
    """``index.retrieve`` for a tenant with learned examples (the same hits when it has none that apply).

    BM25 is the index's own; the dense list uses, for each eligible tool with learned
    examples, its tenant vector (:func:`learned_vector`) instead of the shared one; the two
    lists are fused as the index fuses them.
    """
    relevant = {tid: learned.requests(tid) for tid in (learned or {})
                if tid in index.catalog and (eligible is None or eligible.allows(tid))}
    if not relevant:
        return index.retrieve(request, need, eligible, k=k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    depth = max(k, index.fusion.depth)
    query, need_q = index.request_text(request, need), index.need_text(need)
    qv, nv = index.embed_queries(request, need)

    def dense_order(vector: np.ndarray, text: str) -> list[tuple[ToolId, float]]:
        """One dense list with the tenant's vectors for its tools with learned examples."""
        got = index.retrieve(text, None, eligible, k=depth, stage="dense", query_vector=vector)
        scores = {h.tool_id: float(h.dense_score) for h in got}
        q = np.asarray(vector, dtype=np.float32)
        for tid, requests in relevant.items():
            scores[tid] = float(learned_vector(index, index.catalog[tid], requests) @ q)
        return sorted(scores.items(), key=lambda kv: -kv[1])[:depth]   # stable: ties keep the index's order

    lexical = index.retrieve(query, None, eligible, k=depth, stage="bm25")
    d_order = dense_order(qv, query)
    need_lexical = index.retrieve(need_q, None, eligible, k=depth, stage="bm25") if need_q else []
    need_dense = dense_order(nv, need_q) if need_q else []
    b_info = {h.tool_id: (h.bm25_rank, h.bm25_score) for h in lexical}
    d_info = {tid: (i + 1, s) for i, (tid, s) in enumerate(d_order)}
    fused = fused_lists([h.tool_id for h in lexical], [tid for tid, _ in d_order],
                        [h.tool_id for h in need_lexical], [tid for tid, _ in need_dense], index.fusion)
    hits = []
    for rank, (tid, score) in enumerate(fused[:k], 1):
        br, bs = b_info.get(tid, (None, None))
        dr, ds = d_info.get(tid, (None, None))
        hits.append(Hit(tid, rank, score, br, bs, dr, ds))
    return hits
