"""The hybrid tool index: BM25 + dense passages in FAISS, fused by weighted RRF.

Build it from a :class:`Catalog`, query it with :meth:`ToolIndex.retrieve`, update one
server at a time (only changed tools are re-embedded), and persist it atomically.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Literal

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.fsutil import written_aside
from retrieval.jsonl import dumps_line, read_jsonl
from retrieval.version import package_version
from .bm25 import BM25Index
from .dense import DenseIndex
from .encoder import Encoder, OnnxEncoder
from .fusion import FusionConfig, fused_lists
from .hits import Hit
from .text import tool_document, tool_passages

__all__ = ["ToolIndex", "IndexLoadError", "IndexSaveError", "FORMAT_VERSION", "Stage"]

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
Stage = Literal["bm25", "dense", "hybrid"]


class IndexLoadError(ValueError):
    """An index folder that is missing, incomplete, or from an incompatible version."""


class IndexSaveError(ValueError):
    """A save target that must not be replaced (an existing file or a folder that is not an index)."""


def server_tools(name: str, description: str, tools: Iterable[Tool]) -> list[Tool]:
    """``tools`` as server ``name``'s, with its description; a tool name listed twice is refused."""
    new_tools = [Tool(name, t.name, t.description, t.input_schema, description, t.examples) for t in tools]
    seen: set[str] = set()
    for t in new_tools:
        if t.name in seen:
            raise CatalogError(f"server '{name}': duplicate tool name '{t.name}'")
        seen.add(t.name)
    return new_tools


class ToolIndex:
    """Hybrid retrieval over one catalog. Thread-safe for concurrent reads and one writer."""

    def __init__(self, catalog: Catalog, encoder: Encoder, *, with_examples: bool = True,
                 fusion: FusionConfig | None = None,
                 vectors: dict[ToolId, tuple[str, np.ndarray]] | None = None, version: int = 1,
                 show_progress: bool = False, bm25: BM25Index | None = None):
        self.encoder = encoder
        self.with_examples = with_examples
        # no weights given: the defaults for this catalog (day one's where few tools have example requests),
        # fixed when the index is built: tools updated later do not change them (re-index to re-choose)
        self.fusion = fusion or FusionConfig.for_catalog(catalog.tools, with_examples)
        self.version = version
        # the catalog's own calibration written at index time (retrieval.pipeline.probes; a plain dict here):
        # saved with the index, dropped when its tools change
        self.calibration: dict | None = None
        self._lock = threading.RLock()
        self._vectors: dict[ToolId, tuple[str, np.ndarray]] = dict(vectors or {})
        self._rebuild(catalog, show_progress=show_progress, bm25=bm25)

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, catalog: Catalog, *, encoder: Encoder | None = None, with_examples: bool = True,
              fusion: FusionConfig | None = None, show_progress: bool = False) -> "ToolIndex":
        """Index every tool of ``catalog`` (with its example requests unless ``with_examples=False``)."""
        return cls(catalog, encoder or OnnxEncoder(), with_examples=with_examples, fusion=fusion,
                   show_progress=show_progress)

    def _embed_missing(self, tools: list[Tool], show_progress: bool) -> int:
        """Embed tools whose content changed since they were last embedded; returns how many."""
        todo = [t for t in tools if self._vectors.get(t.id, ("", None))[0] != t.content_hash()]
        if not todo:
            return 0
        texts, counts = [], []
        for t in todo:
            passages = tool_passages(t, with_examples=self.with_examples)
            texts.extend(passages)
            counts.append(len(passages))
        vecs = self.encoder.encode(texts, show_progress=show_progress)
        starts = np.concatenate([[0], np.cumsum(counts)])  # each tool's passages are contiguous
        for i, t in enumerate(todo):
            # One vector per tool: the normalised centroid of its passages. On dev it beat
            # the best single passage by 9 points at rank 1 (README, "Dense search").
            centroid = vecs[starts[i]:starts[i + 1]].mean(0, keepdims=True)
            self._vectors[t.id] = (t.content_hash(), centroid / max(float(np.linalg.norm(centroid)), 1e-12))
        return len(todo)

    def _rebuild(self, catalog: Catalog, show_progress: bool = False, bm25: BM25Index | None = None) -> int:
        embedded = self._embed_missing(catalog.tools, show_progress)
        live = {t.id for t in catalog.tools}
        self._vectors = {k: v for k, v in self._vectors.items() if k in live}
        rows = {t.id: i for i, t in enumerate(catalog.tools)}
        docs = [tool_document(t, with_examples=self.with_examples) for t in catalog.tools]
        dim = getattr(self.encoder, "dim", 384)
        parts = [self._vectors[t.id][1] for t in catalog.tools]
        vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
        owner = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)]) if parts else np.zeros(0, int)
        # a BM25 saved without term frequencies cannot score a tenant's search with its own statistics
        bm25 = bm25 if bm25 is not None and bm25.n_docs == len(docs) and bm25.tenant_invariant \
            else BM25Index.build(docs)
        dense = DenseIndex(vectors, owner, len(catalog.tools))
        servers = catalog.servers
        server_code = {s: i for i, s in enumerate(servers)}
        server_of = np.array([server_code[t.server] for t in catalog.tools], dtype=np.int64)
        with self._lock:  # swap everything at once: readers see the old or the new index
            self.catalog, self._rows, self._bm25, self._dense = catalog, rows, bm25, dense
            self._servers, self._server_code, self._server_of = servers, server_code, server_of
        return embedded

    # ------------------------------------------------------------------ updates

    def upsert_server(self, name: str, description: str, tools: Iterable[Tool]) -> int:
        """Replace one server's tools (adding the server if new); returns how many were re-embedded."""
        new_tools = server_tools(name, description, tools)
        with self._lock:
            others = [t for t in self.catalog.tools if t.server != name]
            descs = {k: v for k, v in self.catalog.server_descriptions.items() if k != name}
            descs[name] = description
            before = len(self._vectors)
            tools_before = self.tool_hashes()
            n = self._rebuild(Catalog(others + new_tools, descs))
            self.version += 1
            self._drop_calibration_if_changed(tools_before)
            log.info("upserted server %r: %d tools, %d re-embedded (%d cached before)", name, len(new_tools), n, before)
            return n

    def remove_server(self, name: str) -> int:
        """Remove one server's tools; returns how many were removed (0 if the server is unknown)."""
        with self._lock:
            keep = [t for t in self.catalog.tools if t.server != name]
            removed = len(self.catalog.tools) - len(keep)
            if removed:
                tools_before = self.tool_hashes()
                descs = {k: v for k, v in self.catalog.server_descriptions.items() if k != name}
                self._rebuild(Catalog(keep, descs))
                self.version += 1
                self._drop_calibration_if_changed(tools_before)
            return removed

    def tool_hashes(self) -> dict[ToolId, str]:
        """Each tool's content hash: what a calibration was measured on."""
        return {t.id: t.content_hash() for t in self.catalog.tools}

    def _drop_calibration_if_changed(self, before: dict[ToolId, str]) -> None:
        """A calibration measured on other tools no longer says what this catalog's numbers mean."""
        if self.calibration is not None and self.tool_hashes() != before:
            self.calibration = None
            log.info("the catalog changed: its calibration written at index time is dropped "
                     "(write it again with `toolrank index ... --calibrate`)")

    # ------------------------------------------------------------------ search

    def _mask(self, eligible: Eligibility | None) -> np.ndarray | None:
        if eligible is None or eligible.unrestricted:
            return None
        mask = np.ones(len(self.catalog.tools), dtype=bool)
        if eligible.servers is not None:
            codes = [self._server_code[s] for s in eligible.servers if s in self._server_code]
            mask &= np.isin(self._server_of, np.asarray(codes, dtype=np.int64))
        if eligible.tools is not None:
            allowed = np.zeros_like(mask)
            idx = [self._rows[t] for t in eligible.tools if t in self._rows]
            allowed[idx] = True
            mask &= allowed
        return mask

    @staticmethod
    def query_text(request: str, need: str | None) -> str:
        """The request with the need joined on a line of its own (what 0.6.0 searched with)."""
        return f"{request}\n{need}" if need and need.strip() else request

    def request_text(self, request: str, need: str | None) -> str:
        """The text of the request's lists: the request, with the need joined when ``fusion.need_joint``."""
        return self.query_text(request, need) if self.fusion.need_joint else request

    def need_text(self, need: str | None) -> str | None:
        """The text of the need's own lists, or None (no need, or no need channel)."""
        return need.strip() if need and need.strip() and self.fusion.need_channel else None

    def embed_query(self, request: str, need: str | None = None) -> np.ndarray:
        """The vector of the request's dense list."""
        return self.encoder.encode([self.request_text(request, need)])[0]

    def embed_queries(self, request: str, need: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """The vectors of the request's and the need's dense lists, in one encoder call."""
        need_q = self.need_text(need)
        texts = [self.request_text(request, need)] + ([need_q] if need_q else [])
        v = self.encoder.encode(texts)
        return v[0], (v[1] if need_q else None)

    def retrieve(self, request: str, need: str | None = None, eligible: Eligibility | None = None,
                 k: int = 100, *, stage: Stage = "hybrid", query_vector: np.ndarray | None = None,
                 need_vector: np.ndarray | None = None) -> list[Hit]:
        """The top-k eligible tools for a request and, when given, the agent's need.

        The need is a query of its own: BM25 and dense over the need alone are fused with the
        request's two lists (:class:`FusionConfig`), so a need sharpens the request but never
        replaces it. A hit's BM25 and dense evidence is that of the request's lists.

        Args:
            request: the user's request, as written.
            need: the calling agent's one-line need (the action the tool must perform), if any.
            eligible: the tenant's allowed servers/tools; applied inside every search.
            k: how many hits; clamped to the number of eligible tools.
            stage: ``hybrid`` (default), or ``bm25`` / ``dense`` alone (for evaluation; each of
                these fuses the request's and the need's list of its kind).
            query_vector: a precomputed embedding of the request's query (skips the encoder).
            need_vector: a precomputed embedding of the need (with ``query_vector``).
        Raises:
            ValueError: an empty request or a k below 1.
        """
        if not isinstance(request, str) or not request.strip():
            raise ValueError("request must be a non-empty string")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        with self._lock:
            catalog, bm25, dense = self.catalog, self._bm25, self._dense
            mask = self._mask(eligible)
        if not catalog.tools:
            return []
        query, need_q = self.request_text(request, need), self.need_text(need)
        depth = max(k, self.fusion.depth)
        empty = (np.zeros(0, int), np.zeros(0))
        b_rows, b_scores = bm25.search(query, depth, mask) if stage != "dense" else empty
        nb_rows = bm25.search(need_q, depth, mask)[0] if stage != "dense" and need_q else empty[0]
        (d_rows, d_scores), (nd_rows, nd_scores) = empty, empty
        if stage != "bm25":
            if query_vector is None:
                query_vector, need_vector = self.embed_queries(request, need)
            elif need_q and need_vector is None:
                need_vector = self.encoder.encode([need_q])[0]
            d_rows, d_scores = dense.search(query_vector, depth, mask)
            if need_q:
                nd_rows, nd_scores = dense.search(need_vector, depth, mask)
        b_rank = {int(r): (i + 1, float(s)) for i, (r, s) in enumerate(zip(b_rows, b_scores))}
        d_rank = {int(r): (i + 1, float(s)) for i, (r, s) in enumerate(zip(d_rows, d_scores))}
        nb_rank = {int(r): i + 1 for i, r in enumerate(nb_rows)}
        nd_rank = {int(r): (i + 1, float(s)) for i, (r, s) in enumerate(zip(nd_rows, nd_scores))}
        if stage == "bm25" and not need_q:
            ranked = [(int(r), float(s)) for r, s in zip(b_rows, b_scores)]
        elif stage == "dense" and not need_q:
            ranked = [(int(r), float(s)) for r, s in zip(d_rows, d_scores)]
        else:
            ranked = fused_lists(b_rows.tolist(), d_rows.tolist(), nb_rows.tolist(), nd_rows.tolist(), self.fusion)
        hits = []
        for rank, (row, score) in enumerate(ranked[:k], 1):
            br, bs = b_rank.get(row, (None, None))
            dr, ds = d_rank.get(row, (None, None))
            ndr, nds = nd_rank.get(row, (None, None))
            hits.append(Hit(catalog.tools[row].id, rank, score, br, bs, dr, ds, nb_rank.get(row), ndr, nds))
        return hits

    def tool(self, tool_id: ToolId) -> Tool | None:
        return self.catalog.get(tool_id)

    def tool_vector(self, tool_id: ToolId) -> np.ndarray | None:
        """The tool's dense vector as this index searches it (unit length; a copy), or None."""
        found = self._vectors.get(tool_id)
        return None if found is None else np.array(found[1], dtype=np.float32).reshape(-1)

    def snapshot(self) -> tuple[int, Catalog]:
        """The version and the catalog of one moment, read together (an update swaps both under the lock)."""
        with self._lock:
            return self.version, self.catalog

    # ------------------------------------------------------------------ persistence

    def manifest(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "package_version": package_version(),
            "embedding_model": getattr(self.encoder, "name", type(self.encoder).__name__),
            "embedding_dim": int(getattr(self.encoder, "dim", 0)),
            "with_examples": self.with_examples,
            "fusion": asdict(self.fusion),
            "version": self.version,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "counts": {"servers": len(self.catalog.servers), "tools": len(self.catalog.tools),
                       "passages": int(len(self._dense.vectors))},
            "tools": {f"{t.server}\t{t.name}": t.content_hash() for t in self.catalog.tools},
            **({"catalog_calibration": self.calibration} if self.calibration is not None else {}),
        }

    def save(self, directory: str | Path) -> Path:
        """Write the index to ``directory`` atomically (temporary folder, then rename).

        An existing index (or empty folder) at ``directory`` is replaced.

        Raises:
            IndexSaveError: ``directory`` is a file, or a non-empty folder that is not an
                index (replacing it would delete its contents).
        """
        directory = Path(directory)
        if directory.is_file() or (directory.is_dir() and not (directory / "manifest.json").exists()
                                   and any(directory.iterdir())):
            raise IndexSaveError(f"{directory} exists and is not a toolrank index; saving would replace it: "
                                 "choose a new or empty folder")
        with self._lock:
            with written_aside(directory) as tmp:
                with open(tmp / "tools.jsonl", "w", encoding="utf-8") as fh:
                    for t in self.catalog.tools:
                        fh.write(dumps_line(t.to_dict()) + "\n")  # U+2028 and friends escaped
                (tmp / "servers.json").write_text(json.dumps(self.catalog.server_descriptions, ensure_ascii=False),
                                                  encoding="utf-8")
                self._bm25.save(tmp / "bm25")
                np.save(tmp / "vectors.npy", self._dense.vectors)
                np.save(tmp / "owner.npy", self._dense.owner)
                (tmp / "manifest.json").write_text(json.dumps(self.manifest(), indent=1, ensure_ascii=False),
                                                   encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, encoder: Encoder | None = None) -> "ToolIndex":
        """Load an index written by :meth:`save`.

        Raises:
            IndexLoadError: the folder is missing, incomplete, or of another format version.
        """
        directory = Path(directory)
        mpath = directory / "manifest.json"
        if not mpath.exists():
            raise IndexLoadError(f"{directory} is not a toolrank index (no manifest.json); build one with `toolrank index`")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise IndexLoadError(f"{mpath}: invalid JSON ({exc.msg})") from None
        if manifest.get("format_version") != FORMAT_VERSION:
            raise IndexLoadError(
                f"{directory}: index format {manifest.get('format_version')} is not {FORMAT_VERSION}; rebuild it with `toolrank index`"
            )
        missing = [f for f in ("tools.jsonl", "servers.json", "vectors.npy", "owner.npy") if not (directory / f).exists()]
        if missing:
            raise IndexLoadError(f"{directory}: incomplete index, missing {', '.join(missing)}; rebuild it")
        try:
            tools = [Tool.from_dict(row) for _, row in read_jsonl(directory / "tools.jsonl")]
            catalog = Catalog(tools, json.loads((directory / "servers.json").read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and CatalogError are ValueErrors
            raise IndexLoadError(f"{directory}: corrupt tool table ({type(exc).__name__}: {exc}); rebuild it") from None
        encoder = encoder or OnnxEncoder()
        if manifest.get("embedding_model") != getattr(encoder, "name", None):
            raise IndexLoadError(
                f"{directory} was embedded with {manifest.get('embedding_model')!r}, not {getattr(encoder, 'name', None)!r}; rebuild it"
            )
        vectors = np.load(directory / "vectors.npy")
        owner = np.load(directory / "owner.npy")
        order = np.argsort(owner, kind="stable")  # group each tool's rows (already sorted when saved)
        vectors, owner = vectors[order], owner[order]
        bounds = np.searchsorted(owner, np.arange(len(tools) + 1))
        cached = {}
        for i, t in enumerate(tools):
            cached[t.id] = (t.content_hash(), vectors[bounds[i]:bounds[i + 1]])
        with_examples = manifest.get("with_examples", True)
        fusion = FusionConfig.from_manifest(manifest.get("fusion", {}), manifest.get("package_version"),
                                            tools, with_examples)
        index = cls(catalog, encoder, with_examples=with_examples, fusion=fusion, vectors=cached,
                    version=int(manifest.get("version", 1)),
                    bm25=BM25Index.load(directory / "bm25", len(tools)) if (directory / "bm25").exists() else None)
        calibration = manifest.get("catalog_calibration")
        index.calibration = calibration if isinstance(calibration, dict) else None
        return index
