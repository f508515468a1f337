"""The Qdrant index backend: one collection holds every tool's dense vector, its BM25 terms
as a sparse vector and its record as payload; replicas hold no index, only the tool table.

    from retrieval.index.qdrant.index import QdrantToolIndex
    from retrieval.index.qdrant.schema import QdrantConfig
    index = QdrantToolIndex.build(catalog, config=QdrantConfig(url="http://localhost:6333"))
    index = QdrantToolIndex.open(QdrantConfig(url="http://localhost:6333"))   # any other replica
    index.retrieve("list shard allocation for an index", eligible=Eligibility.of(servers=[...]))

Same interface as :class:`~retrieval.index.embedded.ToolIndex` (it subclasses it), so the pipeline,
evaluation, the CLI and the service take either. What differs is where things live:

* **Search.** Both searches run in Qdrant, in one ``query_batch_points`` call: the dense
  centroid vector (the shipped encoder, as the embedded backend) and BM25 as a sparse vector
  (``tokenize`` of :mod:`retrieval.index.bm25`, the Lucene weights bm25s uses: document values
  ``tf / (tf + k1 (1 - b + b dl / avgdl))``, query values ``count x idf``). The two lists are
  fused here exactly as the embedded backend fuses them (:func:`fused_lists`).
* **Eligibility inside the engine.** One payload filter (owner, server, tool, catalog version)
  is applied inside both searches, on indexed payload fields, so a tenant gets its own best k.
* **Tenants.** A server is stored once with its ``owner``: ``""`` for the deployment's shared
  servers, a tenant's name for its private ones. :meth:`QdrantToolIndex.tenant_view` is the
  index as one tenant sees it: the shared servers and its own (its own shadowing a shared one
  of the same name). Two tenants may both own a server called "Internal"; neither ever sees
  the other's.
* **Statistics never cross tenants.** IDF is computed over exactly the tools the search may
  return (the view, narrowed by the eligibility): by us from the replica's tool table
  (``idf="client"``, the default) or by Qdrant with a per-query IDF corpus equal to the
  search filter (``idf="engine"``, Qdrant 1.19+). ``avgdl`` is frozen when the collection is
  built and never moves, so no later server, private or not, changes another's scores.
* **Versions.** Every tool point carries ``v_from`` / ``v_to``; a search at version V reads
  the points with ``v_from <= V < v_to``, so it sees one catalog version from start to
  finish. A write (one server) takes a lease lock kept in the collection, writes the
  server's new points at V+1, closes its old ones, and then moves the head to V+1.
  Other points are never touched: an upsert costs the size of the server, not the catalog.
  Replicas read the head when asked (:meth:`QdrantToolIndex.refresh`, or every request in the
  service) and fetch only what changed since their version.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from qdrant_client import models

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.index.bm25 import tokenize
from retrieval.index.embedded import IndexLoadError, IndexSaveError, Stage, ToolIndex, server_tools
from retrieval.index.encoder import Encoder, OnnxEncoder
from retrieval.index.fusion import FusionConfig, fused_lists
from retrieval.index.hits import Hit
from retrieval.index.text import tool_document, tool_passages
from retrieval.version import package_version

from .collection import QdrantCollection
from .schema import DENSE, FORMAT_VERSION, HEAD_ID, PUBLIC, SPARSE, IdfMode, QdrantConfig, is_int, is_value, term_index
from .state import Entry, State, View, Vocab, load_state, tool_point

__all__ = ["QdrantToolIndex"]

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------- the index


class QdrantToolIndex(ToolIndex):
    """Hybrid retrieval over a Qdrant collection, pinned to one catalog version until refreshed.

    Build one with :meth:`build` (or :meth:`from_index`, reusing an embedded index's vectors),
    open an existing collection with :meth:`open`. Thread-safe for concurrent reads and one
    writer per process; writers in several processes are serialised by the collection's lock.
    """

    def __init__(self, collection: QdrantCollection, encoder: Encoder, state: State, *, head: dict[str, Any],
                 owner: str | None = None):
        # Deliberately not ToolIndex.__init__: there is no local BM25 or FAISS to build.
        self.collection = collection
        self.encoder = encoder
        self.owner = owner
        self.with_examples, self.fusion = self._recorded_fusion(head, state)
        self.k1 = float(head.get("k1", 1.2))
        self.b = float(head.get("b", 0.75))
        self.avgdl = float(head.get("avgdl", 1.0))
        self.idf = "engine" if head.get("idf") == "engine" else "client"
        self._head = dict(head)
        self._lock = threading.RLock()
        self._state = state

    # -------------------------------------------------------------------------- what ToolIndex users read

    @property
    def _view(self) -> View:
        """The tool table as this index's tenant sees it (made on first use after each version)."""
        return self._state.view(self.owner)

    @property
    def catalog(self) -> Catalog:  # type: ignore[override]
        return self._view.catalog

    @property
    def version(self) -> int:  # type: ignore[override]
        return self._state.version

    @version.setter
    def version(self, value: int) -> None:  # ToolIndex.__init__ never runs here; refuse silent misuse
        raise AttributeError("a Qdrant index's version is the collection's: change it with upsert_server / remove_server")

    def tool(self, tool_id: ToolId) -> Tool | None:
        return self.catalog.get(tool_id)

    def snapshot(self) -> tuple[int, Catalog]:
        """The version and the catalog of one moment: one view holds both."""
        view = self._view
        return view.version, view.catalog

    # -------------------------------------------------------------------------- opening and building

    @classmethod
    def open(cls, config: QdrantConfig | QdrantCollection, *, encoder: Encoder | None = None,
             owner: str | None = None) -> "QdrantToolIndex":
        """Open the collection at its newest version.

        Raises:
            QdrantUnavailable: Qdrant cannot be reached.
            IndexLoadError: the collection holds no toolrank index, or one embedded with another model.
        """
        coll = config if isinstance(config, QdrantCollection) else QdrantCollection.connect(config)
        head = coll.head()
        if head is None:
            raise IndexLoadError(f"{coll.config.where} holds no toolrank index; build one with "
                                 "`toolrank index --backend qdrant --catalog FILE` (or QdrantToolIndex.build)")
        _check_head(head, coll)
        encoder = encoder or OnnxEncoder()
        if head.get("embedding_model") != getattr(encoder, "name", None):
            raise IndexLoadError(f"{coll.config.where} was embedded with {head.get('embedding_model')!r}, not "
                                 f"{getattr(encoder, 'name', None)!r}; rebuild it with --recreate")
        state = load_state(coll, head, None, Vocab())
        return cls(coll, encoder, state, head=head, owner=owner)

    @classmethod
    def build(cls, catalog: Catalog, *, config: QdrantConfig | QdrantCollection | None = None,
              encoder: Encoder | None = None, with_examples: bool = True, fusion: FusionConfig | None = None,
              show_progress: bool = False, recreate: bool = False, if_absent: bool = False,
              vectors: dict[ToolId, np.ndarray] | None = None, k1: float = 1.2, b: float = 0.75,
              idf: IdfMode | None = None) -> "QdrantToolIndex":
        """Index every tool of ``catalog`` into a new collection (all shared: owner ``""``).

        Args:
            catalog: the tools.
            config: where (default: ``QdrantConfig(path=":memory:")``, an in-process Qdrant).
            encoder: the dense encoder (default: the shipped one).
            with_examples: index the tools' example requests (as the embedded backend).
            fusion: the fusion weights, recorded in the collection.
            recreate: drop an existing collection first (every replica then reloads).
            if_absent: if the collection already holds an index, open it instead (for seeding
                from several processes at once).
            vectors: precomputed unit vectors per tool (e.g. from an embedded index); the rest are embedded.
            k1, b: BM25 parameters (bm25s' defaults).
            idf: override ``config.idf``.
        Raises:
            IndexSaveError: the collection already holds an index (and neither flag was given).
            QdrantUnavailable: Qdrant cannot be reached.
        """
        if config is None:
            config = QdrantConfig(path=":memory:")
        coll = config if isinstance(config, QdrantCollection) else QdrantCollection.connect(config)
        encoder = encoder or OnnxEncoder()
        idf = idf or coll.config.idf
        fusion = fusion or FusionConfig.for_catalog(catalog.tools, with_examples)
        first = 1
        if recreate:
            previous = coll.head()
            # Versions keep rising across a rebuild, so every serving replica moves on to it.
            first = int(previous["version"]) + 1 if previous is not None else 1
            coll.drop()
        head = coll.head()
        if head is not None and if_absent:
            return cls.open(coll, encoder=encoder)
        if head is not None:
            raise IndexSaveError(f"{coll.config.where} already holds a toolrank index (version {head.get('version')}); "
                                 "search it as it is (without --catalog), or rebuild it with "
                                 "`toolrank index --backend qdrant --catalog FILE --recreate` (recreate=True)")
        coll.create(int(getattr(encoder, "dim", 384)), idf)
        with coll.writing() as lease:
            head = coll.head()
            if head is not None:   # another process built it while we waited for the lock
                if if_absent:
                    return cls.open(coll, encoder=encoder)
                raise IndexSaveError(f"{coll.config.where} was built by another process meanwhile; open it")
            coll.call(coll.client.delete, coll.name, points_selector=models.FilterSelector(
                filter=models.Filter(must=[is_value("kind", "tool")])), wait=True)   # a crashed build's leftovers
            t0 = time.perf_counter()
            docs = tokenize([tool_document(t, with_examples=with_examples) for t in catalog.tools])
            avgdl = float(np.mean([len(d) for d in docs])) if docs else 1.0
            head = {"kind": "head", "version": first, "oldest": first, "format_version": FORMAT_VERSION,
                    "package_version": package_version(),
                    "embedding_model": getattr(encoder, "name", type(encoder).__name__),
                    "embedding_dim": int(getattr(encoder, "dim", 0)), "with_examples": with_examples,
                    "fusion": asdict(fusion), "k1": k1, "b": b, "avgdl": max(avgdl, 1e-9), "idf": idf,
                    "term_hash": "crc32", "writer": lease.token, "build": uuid.uuid4().hex,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            vocab = Vocab()
            entries: list[Entry] = []
            tools = list(catalog.tools)
            step = 2048
            for start in range(0, len(tools), step):
                lease.renew()
                chunk = tools[start:start + step]
                given = vectors or {}
                missing = [t for t in chunk if t.id not in given]
                embedded = _embed(encoder, missing, with_examples, show_progress) if missing else {}
                vecs = [given[t.id] if t.id in given else embedded[t.id] for t in chunk]
                points = []
                for i, (t, vec) in enumerate(zip(chunk, vecs)):
                    seq = start + i
                    point, entry = tool_point(t, PUBLIC, first, seq, vec, docs[seq], head, vocab)
                    points.append(point)
                    entries.append(entry)
                coll.upsert(points, lease)
            lease.renew()
            coll.call(coll.client.upsert, coll.name, points=[models.PointStruct(id=HEAD_ID, vector={}, payload=head)],
                      wait=True)
            log.info("built %s: %d tools in %.1f s", coll.config.where, len(tools), time.perf_counter() - t0)
        state = State.from_entries(first, first, vocab, entries)
        return cls(coll, encoder, state, head=head)

    @classmethod
    def from_index(cls, index: ToolIndex, *, config: QdrantConfig | QdrantCollection | None = None,
                   **kwargs: Any) -> "QdrantToolIndex":
        """The same catalog, encoder, examples setting and fusion as an embedded index, reusing its vectors."""
        if isinstance(index, QdrantToolIndex):
            cached = index.tool_vectors()
        else:
            with index._lock:  # the embedded index's cache: content hash and centroid row per tool
                cached = dict(index._vectors)
        current = {t.id: t.content_hash() for t in index.catalog.tools}
        vectors = {tid: np.asarray(vec, dtype=np.float32)[0] for tid, (h, vec) in cached.items()
                   if len(vec) == 1 and current.get(tid) == h}
        kwargs.setdefault("encoder", index.encoder)
        return cls.build(index.catalog, config=config, with_examples=index.with_examples, fusion=index.fusion,
                         vectors=vectors, **kwargs)

    def tool_vectors(self) -> dict[ToolId, tuple[str, np.ndarray]]:
        """Every tool's content hash and vector (one row), read from Qdrant."""
        view = self._view
        out: dict[ToolId, tuple[str, np.ndarray]] = {}
        ids = [e.point for e in view.entries]
        for start in range(0, len(ids), 512):
            got = self.collection.call(self.collection.client.retrieve, self.collection.name,
                                       ids[start:start + 512], with_payload=False, with_vectors=[DENSE])
            for p in got:
                e = view.entries[view.point_row[str(p.id)]]
                vec = np.asarray(p.vector[DENSE], dtype=np.float32)[None, :]
                out[e.tool.id] = (e.tool.content_hash(), vec)
        return out

    # -------------------------------------------------------------------------- versions and tenants

    def head_version(self) -> int | None:
        """The newest committed version in Qdrant (one request)."""
        return self.collection.head_version()

    def refresh(self) -> bool:
        """Move this index to the newest committed version; returns whether it changed.

        Call it between searches (a pipeline reads the catalog before it retrieves).
        """
        head = self.collection.head()
        if head is None:
            raise IndexLoadError(f"{self.collection.config.where} no longer holds a toolrank index (dropped?); "
                                 "rebuild it, then restart")
        with self._lock:
            if int(head["version"]) <= self._state.version and head.get("build") == self._head.get("build"):
                return False
            self._advance(head)
            return True

    def tenant_view(self, tenant: str | None) -> "QdrantToolIndex":
        """The index as ``tenant`` sees it: the shared servers and its own (``None``: the shared ones only).

        Its writes store servers as the tenant's own; its searches never return another tenant's.
        """
        if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
            raise ValueError(f"tenant {tenant!r} must be a non-blank name (or None for the shared servers)")
        with self._lock:
            return type(self)(self.collection, self.encoder, self._state, head=self._head, owner=tenant)

    def _advance(self, head: dict[str, Any]) -> None:
        state = load_state(self.collection, head, self._state if head.get("build") == self._head.get("build")
                            else None, self._state.vocab)
        rebuilt = head.get("build") != self._head.get("build")
        self._head = dict(head)
        self.avgdl = float(head.get("avgdl", self.avgdl))
        self._state = state
        if rebuilt:   # a rebuild (--recreate) may carry other weights: search with the ones it recorded
            self.with_examples, self.fusion = self._recorded_fusion(head, state)

    @staticmethod
    def _recorded_fusion(head: dict[str, Any], state: State) -> tuple[bool, FusionConfig]:
        """The build's ``with_examples`` and the weights it searches with (:meth:`FusionConfig.from_manifest`)."""
        with_examples = bool(head.get("with_examples", True))
        return with_examples, FusionConfig.from_manifest(head.get("fusion", {}), head.get("package_version"),
                                                         lambda: state.view(None).catalog.tools, with_examples)

    # -------------------------------------------------------------------------- writes

    def upsert_server(self, name: str, description: str, tools: Iterable[Tool], *,
                      owner: str | None = None) -> int:
        """Replace one server's tools (adding the server if new); returns how many were embedded.

        Only that server's points are written: tools whose content is unchanged keep their
        point; changed and new ones get a point at the next version; the rest are closed.

        Args:
            owner: whose server this is (default: this view's tenant; ``""`` the shared servers).
        """
        owner = self._owner_for_write(owner)
        new_tools = server_tools(name, description, tools)
        if not name or not name.strip():
            raise CatalogError(f"server name {name!r} must be non-blank")
        return self._write(owner, name, new_tools)[0]

    def remove_server(self, name: str, *, owner: str | None = None) -> int:
        """Remove one server's tools; returns how many were removed (0 if the view has no such server)."""
        owner = self._owner_for_write(owner)
        return self._write(owner, name, None)[1]

    def _owner_for_write(self, owner: str | None) -> str:
        if owner is None:
            return self.owner if self.owner is not None else PUBLIC
        if not isinstance(owner, str):
            raise ValueError(f"owner must be a tenant name or '' (shared), got {owner!r}")
        if self.owner is not None and owner not in (self.owner,):
            raise ValueError(f"a view of tenant {self.owner!r} cannot write servers of {owner!r}")
        return owner

    def _write(self, owner: str, server: str, new_tools: list[Tool] | None) -> tuple[int, int]:
        coll = self.collection
        with self._lock, coll.writing() as lease:
            head = coll.head()
            if head is None:
                raise IndexLoadError(f"{coll.config.where} holds no toolrank index; build one first")
            if int(head["version"]) != self._state.version or head.get("build") != self._head.get("build"):
                self._advance(head)   # build on the newest state, whoever wrote it
            state, version = self._state, self._state.version
            old = state.entries_of(owner, server)
            if new_tools is None:
                added_tools, closed = [], list(old)
            else:
                old_by_name = {e.tool.name: e for e in old}
                added_tools = [t for t in new_tools if t.name not in old_by_name
                               or old_by_name[t.name].tool.content_hash() != t.content_hash()]
                unchanged = {t.name for t in new_tools} - {t.name for t in added_tools}
                closed = [e for e in old if e.tool.name not in unchanged]
            if not added_tools and not closed:
                return 0, 0
            new_version = version + 1
            vectors = _embed(self.encoder, added_tools, self.with_examples, False) if added_tools else {}
            docs = tokenize([tool_document(t, with_examples=self.with_examples) for t in added_tools]) \
                if added_tools else []
            points, added = [], []
            for seq, (t, doc) in enumerate(zip(added_tools, docs)):
                point, entry = tool_point(t, owner, new_version, seq, vectors[t.id], doc, self._head, state.vocab)
                points.append(point)
                added.append(entry)
            coll.upsert(points, lease)
            if closed:
                lease.renew()
                coll.call(coll.client.set_payload, coll.name, payload={"v_to": new_version},
                          points=[e.point for e in closed], wait=True)
            oldest = max(int(head.get("oldest", 1)), new_version - coll.config.keep_versions + 1)
            # Points closed at version c are read by versions before c only: collectable once c <= oldest.
            closed_at = {v: ids for v, ids in (head.get("closed") or {}).items()}
            if closed:
                closed_at[str(new_version)] = [e.point for e in closed]
            collect = [pid for v, ids in closed_at.items() if int(v) <= oldest for pid in ids]
            closed_at = {v: ids for v, ids in closed_at.items() if int(v) > oldest}
            commit = {**head, "version": new_version, "oldest": oldest, "writer": lease.token, "closed": closed_at}
            if collect:   # read by no readable version any more (nor listed by the new head): delete them, by id
                coll.call(coll.client.delete, coll.name, points_selector=models.PointIdsList(points=collect), wait=True)
            lease.renew()
            coll.call(coll.client.upsert, coll.name, points=[models.PointStruct(id=HEAD_ID, vector={}, payload=commit)],
                      wait=True, update_filter=models.Filter(must=[is_int("version", version)]))
            now = coll.head() or {}
            if int(now.get("version", -1)) != new_version or now.get("writer") != lease.token:
                raise lease.conflict(f"another writer committed version {now.get('version')} of {coll.config.where} "
                                          "while our lock had expired; retry the change")
            self._head = commit
            self._state = state.changed(new_version, oldest, added, closed).with_hidden(commit)
            log.info("%s server %r (owner %r): version %d, %d points written, %d closed",
                     "removed" if new_tools is None else "upserted", server, owner, new_version, len(points), len(closed))
            return len(added_tools), len(closed)

    # -------------------------------------------------------------------------- search

    def retrieve(self, request: str, need: str | None = None, eligible: Eligibility | None = None,
                 k: int = 100, *, stage: Stage = "hybrid", query_vector: np.ndarray | None = None,
                 need_vector: np.ndarray | None = None) -> list[Hit]:
        """The top-k eligible tools for a request (and need); see :meth:`ToolIndex.retrieve`.

        Every search (the request's BM25 and dense, and the need's) runs in Qdrant in one batch
        request under the same payload filter; BM25's IDF covers exactly the tools that filter allows.
        """
        if not isinstance(request, str) or not request.strip():
            raise ValueError("request must be a non-empty string")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if stage not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"unknown stage {stage!r}: use hybrid, bm25 or dense")
        with self._lock:
            view = self._view
        if not view.entries:
            return []
        flt = view.filter(eligible)
        if flt is None:
            return []
        query, need_q = self.request_text(request, need), self.need_text(need)
        depth = max(k, self.fusion.depth)
        requests, kinds = [], []
        if stage != "bm25":
            if query_vector is None:
                query_vector, need_vector = self.embed_queries(request, need)
            elif need_q and need_vector is None:
                need_vector = self.encoder.encode([need_q])[0]
        for kind, text in (("bm25", query), ("need_bm25", need_q)):
            if stage == "dense" or not text:
                continue
            sparse = self.sparse_query(text, eligible, view)
            if sparse is not None:
                params = models.SearchParams(idf=models.IdfCorpusParams(corpus=flt)) if self.idf == "engine" else None
                requests.append(models.QueryRequest(query=sparse, using=SPARSE, filter=flt, limit=depth,
                                                    params=params, with_payload=False))
                kinds.append(kind)
        for kind, vector in (("dense", query_vector), ("need_dense", need_vector)):
            if stage == "bm25" or vector is None:
                continue
            cfg = self.collection.config
            params = models.SearchParams(exact=cfg.exact, hnsw_ef=cfg.hnsw_ef)
            requests.append(models.QueryRequest(query=np.asarray(vector, dtype=np.float32).ravel().tolist(),
                                                using=DENSE, filter=flt, limit=depth, params=params,
                                                with_payload=False))
            kinds.append(kind)
        responses = self.collection.query(requests) if requests else []
        lists: dict[str, list[tuple[int, float]]] = {"bm25": [], "dense": [], "need_bm25": [], "need_dense": []}
        for kind, response in zip(kinds, responses):
            pairs = []
            for p in response.points:
                row = view.point_row.get(str(p.id))
                if row is None:   # cannot happen at a pinned version; never return an unknown point
                    log.warning("Qdrant returned point %s, unknown at version %d; skipped", p.id, view.version)
                    continue
                if kind.endswith("bm25") and p.score <= 0:
                    continue
                pairs.append((row, float(p.score)))
            pairs.sort(key=lambda rs: (-rs[1], rs[0]))   # ties by catalog row, as the embedded backend
            lists[kind] = pairs
        b_rank = {r: (i + 1, s) for i, (r, s) in enumerate(lists["bm25"])}
        d_rank = {r: (i + 1, s) for i, (r, s) in enumerate(lists["dense"])}
        nb_rank = {r: i + 1 for i, (r, _) in enumerate(lists["need_bm25"])}
        nd_rank = {r: (i + 1, s) for i, (r, s) in enumerate(lists["need_dense"])}
        if stage == "bm25" and not need_q:
            ranked = lists["bm25"]
        elif stage == "dense" and not need_q:
            ranked = lists["dense"]
        else:
            ranked = fused_lists(*([r for r, _ in lists[name]] for name in ("bm25", "dense", "need_bm25", "need_dense")),
                                 self.fusion)
        hits = []
        tools = view.catalog.tools
        for rank, (row, score) in enumerate(ranked[:k], 1):
            br, bs = b_rank.get(row, (None, None))
            dr, ds = d_rank.get(row, (None, None))
            ndr, nds = nd_rank.get(row, (None, None))
            hits.append(Hit(tools[row].id, rank, score, br, bs, dr, ds, nb_rank.get(row), ndr, nds))
        return hits

    def sparse_query(self, query: str, eligible: Eligibility | None = None, view: "View | None" = None) -> Any | None:
        """The query's sparse vector: term counts, times IDF over the eligible tools (``idf="client"``).

        Terms no eligible tool contains are left out (they match nothing the search may return).
        None when nothing is left.
        """
        view = view or self._view
        n, df = view.stats(eligible)
        vocab = view.state.vocab
        values: dict[int, float] = {}
        for term, count in Counter(tokenize([query])[0]).items():
            tid = vocab.get(term)
            freq = int(df[tid]) if tid is not None and tid < len(df) else 0
            if freq <= 0:
                continue
            weight = float(count)
            if self.idf == "client":
                weight *= math.log(1.0 + (n - freq + 0.5) / (freq + 0.5))
            idx = term_index(term)
            values[idx] = values.get(idx, 0.0) + weight
        if not values:
            return None
        idx = sorted(values)
        return models.SparseVector(indices=idx, values=[values[i] for i in idx])

    # -------------------------------------------------------------------------- persistence

    def manifest(self) -> dict:
        cfg = self.collection.config
        return {
            "backend": "qdrant", "where": cfg.where, "format_version": self._head.get("format_version"),
            "package_version": package_version(), "embedding_model": self._head.get("embedding_model"),
            "embedding_dim": self._head.get("embedding_dim"), "with_examples": self.with_examples,
            "fusion": asdict(self.fusion), "version": self.version, "owner": self.owner, "idf": self.idf,
            "k1": self.k1, "b": self.b, "avgdl": self.avgdl, "created": self._head.get("created"),
            "counts": {"servers": len(self.catalog.servers), "tools": len(self.catalog.tools)},
        }

    def save(self, directory: str | Path) -> Path:
        """Export this view as an embedded index folder (``ToolIndex.load`` reads it); Qdrant is not changed."""
        vectors = self.tool_vectors()
        local = ToolIndex(self.catalog, self.encoder, with_examples=self.with_examples, fusion=self.fusion,
                          vectors=vectors, version=self.version)
        return local.save(directory)

    @classmethod
    def load(cls, directory: str | Path, *, encoder: Encoder | None = None) -> "ToolIndex":
        raise IndexLoadError(f"{directory}: a Qdrant index is opened with QdrantToolIndex.open(QdrantConfig(...)), "
                             "not loaded from a folder (a folder saved from one loads with ToolIndex.load)")


# ---------------------------------------------------------------------------------- helpers


def _embed(encoder: Encoder, tools: Sequence[Tool], with_examples: bool, show_progress: bool) -> dict[ToolId, np.ndarray]:
    """Each tool's unit vector: the normalised centroid of its passages (as the embedded backend)."""
    texts, counts = [], []
    for t in tools:
        passages = tool_passages(t, with_examples=with_examples)
        texts.extend(passages)
        counts.append(len(passages))
    vecs = encoder.encode(texts, show_progress=show_progress) if texts else np.zeros((0, 1), np.float32)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    out = {}
    for i, t in enumerate(tools):
        centroid = vecs[starts[i]:starts[i + 1]].mean(0)
        out[t.id] = (centroid / max(float(np.linalg.norm(centroid)), 1e-12)).astype(np.float32)
    return out


def _check_head(head: dict[str, Any], coll: QdrantCollection) -> None:
    if head.get("format_version") != FORMAT_VERSION:
        raise IndexLoadError(f"{coll.config.where}: index format {head.get('format_version')} is not {FORMAT_VERSION}; "
                             "rebuild it with --recreate")
