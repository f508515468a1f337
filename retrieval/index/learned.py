"""Example requests learned from use: one tenant's, kept apart from the shared index.

When a tool that a search offered for a request is then called successfully, that request
is evidence of how this tenant asks for that tool: it becomes a *learned example* of the
tool, for that tenant only. The shared index never changes; a search of a tenant that has
learned examples runs :func:`retrieve_with_learned`, which scores the dense side against
tenant-specific tool vectors (the tool's passages plus its learned requests, the way shipped
example requests join a tool's vector) and adds a lexical list of its own: BM25 over the
tenant's learned requests, one document per tool. Every other tenant runs the index's own
``retrieve``, so nothing learned by one tenant can reach another's scores or results.

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

__all__ = ["LearnedExample", "LearnedExamples", "retrieve_with_learned", "near_duplicate", "learned_vector",
           "vector_key", "tenant_vector", "fold_request", "DEFAULT_LIMIT", "DEFAULT_MAX_TOTAL", "NEAR_DUPLICATE", "MAX_REQUEST_CHARS", "FORMAT"]

DEFAULT_LIMIT = 20            # learned requests kept per tool (the most recent)
DEFAULT_MAX_TOTAL = 60_000    # learned requests kept per tenant (the oldest go first): 20 on each of ~3,000 tools
RECOMPUTE_PER_SEARCH = 32     # tenant vectors a search may compute (the rest wait for later searches)
NEAR_DUPLICATE = 0.8          # word-set Jaccard at or above which two requests are merged
MAX_REQUEST_CHARS = 2000      # longer requests are cut (an example is a request, not a document)
FORMAT = 1
FILE = "learned.json"
VECTORS = "vectors.npy"        # one row per stored tenant vector, in the order of VECTOR_KEYS
VECTOR_KEYS = "vectors.json"
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


class LearnedExamples(Mapping[ToolId, tuple[LearnedExample, ...]]):
    """One tenant's learned example requests per tool (immutable)."""

    def __init__(self, tools: Mapping[ToolId, Iterable[LearnedExample]] | None = None, *,
                 limit: int = DEFAULT_LIMIT, max_total: int = DEFAULT_MAX_TOTAL,
                 vectors: Mapping[ToolId, tuple[str, np.ndarray]] | None = None):
        if limit < 1:
            raise ValueError(f"limit must be at least 1 learned example per tool, got {limit}")
        if max_total < 1:
            raise ValueError(f"max_total must be at least 1 learned example, got {max_total}")
        self.limit = limit
        self.max_total = max_total
        self._tools: dict[ToolId, tuple[LearnedExample, ...]] = {
            ToolId(*tid): tuple(ex)[-limit:] for tid, ex in (tools or {}).items() if tuple(ex)}
        over = sum(len(v) for v in self._tools.values()) - max_total
        if over > 0:   # the tenant's oldest learned requests go first
            oldest = sorted((e.learned_at, tid, i) for tid, ex in self._tools.items() for i, e in enumerate(ex))[:over]
            drop: dict[ToolId, set[int]] = {}
            for _, tid, i in oldest:
                drop.setdefault(tid, set()).add(i)
            for tid, idx in drop.items():
                kept = tuple(e for i, e in enumerate(self._tools[tid]) if i not in idx)
                if kept:
                    self._tools[tid] = kept
                else:
                    del self._tools[tid]
        # tenant vectors: tool -> (the key it was made for, the vector); only for tools still learned
        self._vectors: dict[ToolId, tuple[str, np.ndarray]] = {
            ToolId(*t): v for t, v in (vectors or {}).items() if ToolId(*t) in self._tools}
        self._lexicon: Any = None
        self._lexicon_lock = threading.Lock()
        self._resolved: tuple[Any, dict[ToolId, np.ndarray], list[ToolId]] | None = None   # (index, vectors, to do)

    # Mapping
    def __getitem__(self, tool_id: tuple[str, str]) -> tuple[LearnedExample, ...]:
        return self._tools[ToolId(*tool_id)]

    def __iter__(self) -> Iterator[ToolId]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, LearnedExamples) and self._tools == other._tools
                and {t: k for t, (k, _) in self._vectors.items()} == {t: k for t, (k, _) in other._vectors.items()})

    __hash__ = None  # type: ignore[assignment]   (mutable-looking mapping: not hashable)

    def requests(self, tool_id: tuple[str, str]) -> tuple[str, ...]:
        return tuple(e.request for e in self._tools.get(ToolId(*tool_id), ()))

    @property
    def total(self) -> int:
        return sum(len(v) for v in self._tools.values())

    def _copy(self, tools: Mapping[ToolId, Iterable[LearnedExample]]) -> "LearnedExamples":
        """A copy with ``tools``; a tool's stored vector goes with it only while its requests are unchanged."""
        keep = {t: v for t, v in self._vectors.items() if tuple(tools.get(t, ())) == self._tools.get(t)}
        return LearnedExamples(tools, limit=self.limit, max_total=self.max_total, vectors=keep)

    # tenant vectors
    def vector(self, tool_id: tuple[str, str], key: str) -> np.ndarray | None:
        """The stored tenant vector of a tool when it was made for ``key`` (see :func:`vector_key`)."""
        found = self._vectors.get(ToolId(*tool_id))
        return found[1] if found is not None and found[0] == key else None

    def with_vector(self, tool_id: tuple[str, str], key: str, vector: np.ndarray) -> "LearnedExamples":
        """A copy that stores ``vector`` (made for ``key``) as the tool's tenant vector."""
        tid = ToolId(*tool_id)
        out = self._copy(self._tools)
        if tid in out._tools:
            out._vectors[tid] = (key, np.asarray(vector, dtype=np.float32))
        return out

    @property
    def vectors_stored(self) -> int:
        return len(self._vectors)

    def vectors_for(self, index: Any, budget: int | None = None) -> dict[ToolId, np.ndarray]:
        """The learned tools' tenant vectors over ``index``, resolved once per (version, index) pair: a
        search then only reads them.

        A stored vector made for this index and tool version is used as it is. One made for another
        version (the tool's text changed, another encoder) stands in until it is recomputed, and a tool
        without any is left to the index's own vector; at most ``budget`` of those are computed per call,
        so the first search after a catalog change costs a bounded few embeddings, not one per tool.
        """
        import weakref

        found = self._resolved
        if found is None or found[0]() is not index:
            out: dict[ToolId, np.ndarray] = {}
            pending: list[ToolId] = []
            for tid, ex in self._tools.items():
                if tid not in index.catalog:
                    continue
                tool, requests = index.catalog[tid], tuple(e.request for e in ex)
                stored = self._vectors.get(tid)
                if stored is not None and stored[0] == vector_key(index, tool, requests):
                    out[tid] = stored[1]
                    continue
                if stored is not None:
                    out[tid] = stored[1]      # stale: stands in until recomputed
                pending.append(tid)
            found = self._resolved = (weakref.ref(index), out, pending)
        _, out, pending = found
        budget = RECOMPUTE_PER_SEARCH if budget is None else budget
        while pending and budget > 0:
            tid = pending.pop()
            out[tid] = learned_vector(index, index.catalog[tid], self.requests(tid))
            budget -= 1
        return out

    # the tenant's lexical channel
    def lexicon(self) -> tuple[Any, list[ToolId]]:
        """BM25 over the learned requests, one document per tool (built once per version), and its tools."""
        with self._lexicon_lock:
            if self._lexicon is None:
                from .bm25 import BM25Index

                tools = sorted(self._tools)
                try:
                    built = BM25Index.build([" ".join(e.request for e in self._tools[t]) for t in tools])
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
        for e in self._tools.get(tid, ()):
            if near_duplicate(e.request, request):
                uses += e.uses
            else:
                kept.append(e)
        kept.append(LearnedExample(request, at, uses))
        return self._copy({**self._tools, tid: kept})

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
        return self._copy(tools), removed

    # persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "limit": self.limit, "max_total": self.max_total, "tools": [
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
            return cls(tools, limit=int(data.get("limit", DEFAULT_LIMIT)),
                       max_total=int(data.get("max_total", DEFAULT_MAX_TOTAL)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"learned examples: malformed ({type(exc).__name__}: {exc})") from None

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/learned.json`` (and the stored tenant vectors) atomically (a temporary folder
        renamed into place)."""
        directory = Path(directory)
        data = self.to_dict()
        if not round_trips(data):
            raise CatalogError("learned examples cannot be stored as JSON and read back unchanged")
        with written_aside(directory) as tmp:   # mkdtemp: a 0700 folder; the files 0600 (what users typed)
            fd = os.open(tmp / FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(dumps_line(data) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            if self._vectors:
                tools = sorted(self._vectors)
                keys = [{"server": t.server, "tool": t.tool, "key": self._vectors[t][0]} for t in tools]
                fd = os.open(tmp / VECTOR_KEYS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with open(fd, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(keys) + "\n")
                fd = os.open(tmp / VECTORS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with open(fd, "wb") as fh:
                    np.save(fh, np.stack([self._vectors[t][1] for t in tools]).astype(np.float32))
                    fh.flush()
                    os.fsync(fh.fileno())
            lexicon, tools = self.lexicon()
            if tools:   # built here, once per version, so a search after a restart only reads it
                lexicon.save(tmp / LEXICON)
                for path in [tmp / LEXICON, *(tmp / LEXICON).rglob("*")]:   # what users typed: private
                    os.chmod(path, 0o700 if path.is_dir() else 0o600)
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "LearnedExamples":
        path = Path(directory) / FILE
        try:
            found = cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ValueError(f"{path}: no learned examples file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg})") from None
        keys_path, vec_path = Path(directory) / VECTOR_KEYS, Path(directory) / VECTORS
        if keys_path.exists() and vec_path.exists():
            try:   # stored vectors are a cache: unreadable ones are recomputed, never fatal
                keys = json.loads(keys_path.read_text(encoding="utf-8"))
                matrix = np.load(vec_path, allow_pickle=False)
                if len(keys) == len(matrix):
                    found._vectors = {ToolId(k["server"], k["tool"]): (str(k["key"]), matrix[i])
                                      for i, k in enumerate(keys) if ToolId(k["server"], k["tool"]) in found._tools}
            except (ValueError, KeyError, TypeError, OSError):
                pass
        lexicon = Path(directory) / LEXICON
        if lexicon.is_dir() and found._tools:
            try:   # a cache too: an unreadable or mismatched one is built again on first use
                from .bm25 import BM25Index

                found._lexicon = (BM25Index.load(lexicon, len(found._tools)), sorted(found._tools))
            except Exception:  # noqa: BLE001 - bm25s raises several kinds on a damaged folder
                found._lexicon = None
        return found


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


def vector_key(index: Any, tool: Any, requests: Iterable[str]) -> str:
    """What a tenant vector depends on: the encoder, whether the index has examples, the tool's content
    and the learned requests (a short hash; a stored vector is used only under the same key)."""
    import hashlib

    name = getattr(index.encoder, "name", None) or f"id:{id(index.encoder)}"   # an unnamed encoder is only itself
    parts = [str(name), str(bool(index.with_examples)), tool.content_hash(),
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


def retrieve_with_learned(index: Any, learned: LearnedExamples | None, request: str, need: str | None = None,
                          eligible: Eligibility | None = None, k: int = 100) -> list[Hit]:
    """``index.retrieve`` for a tenant with learned examples (the same hits when it has none that apply).

    BM25 is the index's own; the dense list uses, for each eligible tool with learned
    examples, its tenant vector (stored with the examples, else :func:`learned_vector`) instead of
    the shared one; BM25 over the tenant's learned requests (eligible tools only) is one more list
    (``fusion.w_learned_bm25``); the lists are fused as the index fuses them.
    """
    relevant = {tid for tid in (learned or {}) if tid in index.catalog and (eligible is None or eligible.allows(tid))}
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
        if tenant_vectors:
            tids = list(tenant_vectors)
            for tid, score in zip(tids, np.stack([tenant_vectors[t] for t in tids]) @ q):
                scores[tid] = float(score)
        return sorted(scores.items(), key=lambda kv: -kv[1])[:depth]   # stable: ties keep the index's order

    every = learned.vectors_for(index) if learned is not None else {}
    tenant_vectors = {tid: every[tid] for tid in relevant if tid in every}
    learned_lexical: list[ToolId] = []
    if index.fusion.w_learned_bm25 > 0 and learned is not None:
        lex, lex_tools = learned.lexicon()
        mask = np.array([t in relevant for t in lex_tools], dtype=bool)
        rows, _ = lex.search(query, len(lex_tools), mask)
        learned_lexical = [lex_tools[int(r)] for r in rows]

    lexical = index.retrieve(query, None, eligible, k=depth, stage="bm25")
    d_order = dense_order(qv, query)
    need_lexical = index.retrieve(need_q, None, eligible, k=depth, stage="bm25") if need_q else []
    need_dense = dense_order(nv, need_q) if need_q else []
    b_info = {h.tool_id: (h.bm25_rank, h.bm25_score) for h in lexical}
    d_info = {tid: (i + 1, s) for i, (tid, s) in enumerate(d_order)}
    fused = fused_lists([h.tool_id for h in lexical], [tid for tid, _ in d_order],
                        [h.tool_id for h in need_lexical], [tid for tid, _ in need_dense], index.fusion,
                        learned_lexical)
    hits = []
    for rank, (tid, score) in enumerate(fused[:k], 1):
        br, bs = b_info.get(tid, (None, None))
        dr, ds = d_info.get(tid, (None, None))
        hits.append(Hit(tid, rank, score, br, bs, dr, ds))
    return hits
