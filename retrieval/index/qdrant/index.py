"""The Qdrant index backend: one collection holds every tool's dense vector, its BM25 terms
as a sparse vector and its record as payload; replicas hold no index, only the tool table.

    from retrieval.qdrant_index import QdrantConfig, QdrantToolIndex
    index = QdrantToolIndex.build(catalog, config=QdrantConfig(url="http://localhost:6333"))
    index = QdrantToolIndex.open(QdrantConfig(url="http://localhost:6333"))   # any other replica
    index.retrieve("list shard allocation for an index", eligible=Eligibility.of(servers=[...]))

Same interface as :class:`~retrieval.index.embedded.ToolIndex` (it subclasses it), so the pipeline,
evaluation, the CLI and the service take either. What differs is where things live:

* **Search.** Both searches run in Qdrant, in one ``query_batch_points`` call: the dense
  centroid vector (the shipped encoder, as the embedded backend) and BM25 as a sparse vector
  (``tokenize`` of :mod:`retrieval.index.bm25`, the Lucene weights bm25s uses: document values
  ``tf / (tf + k1 (1 - b + b dl / avgdl))``, query values ``count x idf``). The two lists are
  fused here exactly as the embedded backend fuses them (:func:`reciprocal_rank_fusion`).
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

import bisect
import contextlib
import json
import logging
import math
import random
import threading
import time
import uuid
import zlib
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Sequence

import numpy as np

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.index.bm25 import tokenize
from retrieval.index.embedded import IndexLoadError, IndexSaveError, Stage, ToolIndex, server_tools
from retrieval.index.encoder import Encoder, OnnxEncoder
from retrieval.index.fusion import FusionConfig, reciprocal_rank_fusion
from retrieval.index.hits import Hit
from retrieval.index.text import tool_document, tool_passages
from retrieval.version import package_version

try:
    from qdrant_client import QdrantClient, models
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("the Qdrant backend needs qdrant-client: pip install 'toolrank[qdrant]'") from exc

__all__ = ["QdrantConfig", "QdrantCollection", "QdrantToolIndex", "QdrantUnavailable", "QdrantLockTimeout",
           "QdrantWriteConflict", "PUBLIC", "term_index"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DENSE, SPARSE = "dense", "bm25"
PUBLIC = ""                      # owner of the deployment's shared servers
LIVE = 2 ** 62                   # v_to of a point that no version has closed yet
_NAMESPACE = uuid.UUID("6f1c0e52-64a4-4d3e-9a57-2f0f6b1c7a10")
HEAD_ID = str(uuid.uuid5(_NAMESPACE, "toolrank:head"))
LOCK_ID = str(uuid.uuid5(_NAMESPACE, "toolrank:lock"))
IdfMode = Literal["client", "engine"]


class QdrantUnavailable(ConnectionError):
    """Qdrant cannot be reached (or refused us); the message says where and what to check."""


class QdrantLockTimeout(TimeoutError):
    """Another writer held the collection's write lock for longer than we were willing to wait."""


class QdrantWriteConflict(RuntimeError):
    """Our write lock expired and another writer moved the catalog on; nothing of ours was published."""


def term_index(term: str) -> int:
    """The sparse-vector dimension of a term: its CRC-32 (stable across replicas, no shared vocabulary)."""
    return zlib.crc32(term.encode("utf-8"))


# ---------------------------------------------------------------------------------- configuration


@dataclass(frozen=True, kw_only=True)
class QdrantConfig:
    """Where the collection lives and how it is searched.

    Args:
        url: a Qdrant server (``http://host:6333``). Exactly one of ``url`` and ``path``.
        path: an embedded Qdrant (local mode) in this folder, or ``":memory:"``. One process only.
        api_key: the server's API key, if it has one.
        collection: the collection's name.
        timeout_s: per-request timeout against the server.
        idf: ``"client"`` (IDF computed here over the search's eligible tools) or ``"engine"``
            (Qdrant's IDF modifier with a per-query corpus equal to the search filter; server 1.19+).
            Fixed when the collection is built.
        exact: exact dense search (no HNSW); the default uses HNSW on a server.
        hnsw_ef: HNSW beam width at query time (None: the server's default).
        keep_versions: catalog versions kept readable (closed points older than that are deleted).
        lock_lease_s: how long a write lock lasts unless renewed (a crashed writer frees it then).
        lock_wait_s: how long a writer waits for the lock before giving up.
        batch_size: points per upsert request.
        shards, replicas: the collection's shard number and replication factor when toolrank
            creates it (a server cluster; None: the server's defaults).
        on_disk_payload: keep payloads (tool records) on disk when toolrank creates the collection.
        quantize: keep int8-quantized dense vectors in RAM (the float originals on disk rescore).
    """

    url: str | None = None
    path: str | None = None
    api_key: str | None = field(default=None, repr=False)
    collection: str = "toolrank"
    timeout_s: float = 10.0
    idf: IdfMode = "client"
    exact: bool = False
    hnsw_ef: int | None = None
    keep_versions: int = 3
    lock_lease_s: float = 30.0
    lock_wait_s: float = 60.0
    batch_size: int = 256
    shards: int | None = None
    replicas: int | None = None
    on_disk_payload: bool = False
    quantize: bool = False

    def __post_init__(self) -> None:
        if (self.url is None) == (self.path is None):
            raise ValueError("give the Qdrant backend either url= (a server, e.g. http://localhost:6333) or "
                             "path= (an embedded Qdrant folder, or ':memory:'), not both or neither")
        if self.url is not None and not str(self.url).startswith(("http://", "https://")):
            raise ValueError(f"Qdrant url {self.url!r} must start with http:// or https:// (e.g. http://localhost:6333)")
        if not self.collection or not self.collection.strip() or "/" in self.collection:
            raise ValueError(f"collection name {self.collection!r} must be non-blank and contain no '/'")
        if self.idf not in ("client", "engine"):
            raise ValueError(f"idf={self.idf!r}: use 'client' (computed by toolrank) or 'engine' (Qdrant 1.19+)")
        if self.keep_versions < 2:
            raise ValueError(f"keep_versions={self.keep_versions}: keep at least 2 so a search in flight keeps its version")
        if (self.shards is not None and self.shards < 1) or (self.replicas is not None and self.replicas < 1):
            raise ValueError(f"shards={self.shards}, replicas={self.replicas}: use 1 or more (or None for the defaults)")
        if self.timeout_s <= 0 or self.lock_lease_s <= 0 or self.lock_wait_s < 0 or self.batch_size < 1:
            raise ValueError("timeout_s, lock_lease_s and batch_size must be positive, lock_wait_s at least 0")

    @property
    def where(self) -> str:
        """Where the collection is, for messages (never the API key)."""
        return f"{self.url if self.url is not None else self.path}, collection {self.collection!r}"


# ---------------------------------------------------------------------------------- the collection


class QdrantCollection:
    """One Qdrant collection and the client that reaches it; shared by every index version of a process."""

    def __init__(self, client: QdrantClient, config: QdrantConfig):
        self.client = client
        self.config = config
        self.name = config.collection

    @classmethod
    def connect(cls, config: QdrantConfig, client: QdrantClient | None = None) -> "QdrantCollection":
        """Open a client (or use ``client``) and check that Qdrant answers.

        Raises:
            QdrantUnavailable: the server cannot be reached, refuses the key, or the local folder
                is held by another process.
        """
        if client is None:
            try:
                if config.url is not None:
                    client = QdrantClient(url=config.url, api_key=config.api_key, timeout=max(1, int(config.timeout_s)),
                                          check_compatibility=False)   # checked below, with a message
                else:
                    client = QdrantClient(path=config.path) if config.path != ":memory:" else QdrantClient(":memory:")
            except Exception as exc:
                if config.url is None and ("already accessed" in str(exc) or isinstance(exc, BlockingIOError)):
                    raise QdrantUnavailable(f"the embedded Qdrant folder {config.path} is open in another process "
                                            "(local mode serves one process); use a server (--qdrant-url) for "
                                            "several") from None
                raise QdrantUnavailable(f"cannot open Qdrant at {config.where}: {_reason(exc)}") from None
        coll = cls(client, config)
        coll.call(client.get_collections)   # the first request: fails here, with a message, if unreachable
        if config.url is not None:
            version = str(getattr(coll.call(client.info), "version", "") or "")
            parts = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
            need = (1, 19) if config.idf == "engine" else (1, 17)
            if len(parts) == 2 and parts < need:
                raise QdrantUnavailable(f"Qdrant {version} at {config.url} is too old: toolrank needs "
                                        f"{need[0]}.{need[1]} or newer (insert-only upserts for its write lock"
                                        + ("; per-query IDF corpus for idf='engine'" if config.idf == "engine" else "")
                                        + ")")
        return coll

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one client call; a connection or authentication failure becomes QdrantUnavailable."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if status in (401, 403):
                raise QdrantUnavailable(f"Qdrant at {self.config.where} refused the API key (HTTP {status}); "
                                        "check --qdrant-api-key / TOOLRANK_QDRANT_API_KEY") from None
            if _is_connection_error(exc):
                fix = ("start one (docker run -p 6333:6333 qdrant/qdrant) or check --qdrant-url"
                       if self.config.url else "use a server (--qdrant-url) for several processes")
                raise QdrantUnavailable(f"cannot reach Qdrant at {self.config.where}: {_reason(exc)}; {fix}") from None
            raise

    # -------------------------------------------------------------------------- meta points

    def exists(self) -> bool:
        return bool(self.call(self.client.collection_exists, self.name))

    def head(self) -> dict[str, Any] | None:
        """The committed head (version and build parameters), or None for an empty or missing collection."""
        try:   # one request when the collection exists (every search in the service reads this)
            found = self.call(self.client.retrieve, self.name, [HEAD_ID], with_payload=True)
        except QdrantUnavailable:
            raise
        except Exception:
            if not self.exists():
                return None
            raise
        return dict(found[0].payload) if found else None

    def head_version(self) -> int | None:
        head = self.head()
        return None if head is None else int(head["version"])

    def create(self, dim: int, idf: IdfMode) -> None:
        """Create the collection and its payload indexes unless it exists (another process may race us).

        Raises:
            IndexLoadError: it exists with another vector size or IDF mode.
        """
        cfg = self.config
        if not self.exists():
            try:
                self.call(
                    self.client.create_collection, self.name,
                    vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.DOT,
                                                               on_disk=True if cfg.quantize else None)},
                    sparse_vectors_config={SPARSE: models.SparseVectorParams(
                        modifier=models.Modifier.IDF if idf == "engine" else None)},
                    shard_number=cfg.shards, replication_factor=cfg.replicas,
                    on_disk_payload=cfg.on_disk_payload or None,
                    quantization_config=models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
                        type=models.ScalarType.INT8, always_ram=True)) if cfg.quantize else None,
                )
            except QdrantUnavailable:
                raise
            except Exception:
                if not self.exists():   # not a lost race: a real failure
                    raise
            with warnings_off():
                for name, schema in (("owner", models.KeywordIndexParams(type="keyword", is_tenant=True)),
                                     ("server", models.PayloadSchemaType.KEYWORD),
                                     ("tool_key", models.PayloadSchemaType.KEYWORD),
                                     ("kind", models.PayloadSchemaType.KEYWORD),
                                     ("v_from", models.PayloadSchemaType.INTEGER),
                                     ("v_to", models.PayloadSchemaType.INTEGER)):
                    self.call(self.client.create_payload_index, self.name, name, schema)
        info = self.call(self.client.get_collection, self.name)
        vectors = info.config.params.vectors
        size = vectors[DENSE].size if isinstance(vectors, dict) and DENSE in vectors else None
        sparse = (info.config.params.sparse_vectors or {}).get(SPARSE)
        modifier = getattr(sparse, "modifier", None) if sparse is not None else None
        mode = "engine" if modifier == models.Modifier.IDF else "client"
        if size != dim or sparse is None or mode != idf:
            raise IndexLoadError(f"collection {self.name!r} at {self.config.where} was made for {size}-dim vectors "
                                 f"and idf={mode!r}, not {dim} and {idf!r}: rebuild it (recreate=True, --recreate) "
                                 "or choose another --collection")

    def drop(self) -> None:
        if self.exists():
            self.call(self.client.delete_collection, self.name)

    # -------------------------------------------------------------------------- the write lock

    @contextlib.contextmanager
    def writing(self) -> Iterator["_Lease"]:
        """Hold the collection's write lock (a lease point, taken with an insert-only upsert).

        A holder that crashed frees it when its lease runs out; the next writer then undoes
        whatever the crashed one left unpublished.

        Raises:
            QdrantLockTimeout: another writer held it for longer than ``lock_wait_s``.
        """
        lease = _Lease(self, uuid.uuid4().hex)
        stale = lease.acquire()
        try:
            if stale:
                self.recover()
            yield lease
        except BaseException:
            # Nothing unpublished may stay behind: the next writer would publish it with its own.
            if not isinstance(lease.lost, QdrantWriteConflict):
                with contextlib.suppress(Exception):
                    self.recover()
            raise
        finally:
            lease.release()

    def recover(self) -> None:
        """Undo an unpublished write: drop points above the head, reopen points closed above it."""
        version = self.head_version() or 0
        self.call(self.client.delete, self.name, points_selector=models.FilterSelector(filter=models.Filter(must=[
            _match("kind", "tool"), _range("v_from", gt=version)])), wait=True)
        self.call(self.client.set_payload, self.name, payload={"v_to": LIVE},
                  points=models.FilterSelector(filter=models.Filter(must=[
                      _match("kind", "tool"), _range("v_to", gt=version, lt=LIVE)])), wait=True)
        log.warning("recovered collection %r from an interrupted write above version %d", self.name, version)

    # -------------------------------------------------------------------------- points

    def upsert(self, points: list[Any], lease: "_Lease | None" = None) -> None:
        size = self.config.batch_size
        for start in range(0, len(points), size):
            if lease is not None:
                lease.renew()
            self.call(self.client.upsert, self.name, points=points[start:start + size], wait=True)

    def scroll(self, flt: Any, batch: int | None = None) -> Iterator[Any]:
        # Local mode re-sorts and re-filters every point for each page: read it in one page there.
        batch = batch or (2048 if self.config.url is not None else 10 ** 9)
        offset = None
        while True:
            points, offset = self.call(self.client.scroll, self.name, scroll_filter=flt, limit=batch, offset=offset,
                                       with_payload=True, with_vectors=False)
            yield from points
            if offset is None:
                return

    def query(self, requests: list[Any]) -> list[Any]:
        return self.call(self.client.query_batch_points, self.name, requests=requests)


class _Lease:
    def __init__(self, coll: QdrantCollection, token: str):
        self.coll = coll
        self.token = token
        self._renewed = 0.0
        self.lost: QdrantWriteConflict | None = None

    def _point(self, holder: str | None = None) -> Any:
        free = holder == ""
        return models.PointStruct(id=LOCK_ID, vector={}, payload={
            "kind": "lock", "holder": self.token if holder is None else holder,
            "expires": 0.0 if free else time.time() + self.coll.config.lock_lease_s})

    def _holder(self) -> dict[str, Any] | None:
        found = self.coll.call(self.coll.client.retrieve, self.coll.name, [LOCK_ID], with_payload=True)
        return dict(found[0].payload) if found else None

    def acquire(self) -> bool:
        """Take the lock; returns True when it was taken over from a writer whose lease ran out."""
        c, cfg = self.coll, self.coll.config
        deadline = time.monotonic() + cfg.lock_wait_s
        while True:
            c.call(c.client.upsert, c.name, points=[self._point()], update_mode=models.UpdateMode.INSERT_ONLY,
                   wait=True)
            held = self._holder()
            if held is not None and held.get("holder") == self.token:
                self._renewed = time.monotonic()
                return False
            if held is not None and held.get("holder") == "":   # released: take it if nobody was faster
                c.call(c.client.upsert, c.name, points=[self._point()], wait=True,
                       update_filter=models.Filter(must=[_match("holder", "")]))
                if (self._holder() or {}).get("holder") == self.token:
                    self._renewed = time.monotonic()
                    return False
                continue
            if held is not None and float(held.get("expires", 0)) < time.time():
                # Take over only if the stale holder still has it (two waiters may both see it stale).
                c.call(c.client.upsert, c.name, points=[self._point()], wait=True, update_filter=models.Filter(must=[
                    _match("holder", held.get("holder", "")), _range("expires", lt=time.time())]))
                if (self._holder() or {}).get("holder") == self.token:
                    log.warning("took over the write lock of %r from a writer whose lease ran out", c.name)
                    self._renewed = time.monotonic()
                    return True
            if time.monotonic() > deadline:
                raise QdrantLockTimeout(f"another writer has held the write lock of {c.config.where} for over "
                                        f"{cfg.lock_wait_s:.0f} s; retry later (a crashed writer frees it within "
                                        f"{cfg.lock_lease_s:.0f} s)")
            time.sleep(0.02 + random.random() * 0.05)

    def renew(self) -> None:
        """Extend the lease (long writes call this between batches)."""
        if time.monotonic() - self._renewed < self.coll.config.lock_lease_s / 3:
            return
        c = self.coll
        c.call(c.client.upsert, c.name, points=[self._point()], wait=True,
               update_filter=models.Filter(must=[_match("holder", self.token)]))
        if (self._holder() or {}).get("holder") != self.token:
            self.lost = QdrantWriteConflict(f"the write lock of {c.config.where} expired and was taken by another "
                                            "writer; nothing of this write was published")
            raise self.lost
        self._renewed = time.monotonic()

    def conflict(self, message: str) -> QdrantWriteConflict:
        self.lost = QdrantWriteConflict(message)
        return self.lost

    def release(self) -> None:
        """Free the lock (holder ``""``) if we still hold it; one point is read and written."""
        c = self.coll
        with contextlib.suppress(Exception):
            c.call(c.client.upsert, c.name, points=[self._point("")], wait=True,
                   update_filter=models.Filter(must=[_match("holder", self.token)]))


# ---------------------------------------------------------------------------------- the tool table


class _Vocab:
    """Term -> local id (append-only, shared by every state of a process; ids never leave it)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, term: str) -> int | None:
        return self._ids.get(term)

    def ids(self, terms: Iterable[str]) -> np.ndarray:
        out = []
        with self._lock:
            for t in terms:
                i = self._ids.get(t)
                if i is None:
                    i = self._ids[t] = len(self._ids)
                out.append(i)
        return np.asarray(out, dtype=np.int32)


@dataclass(frozen=True)
class _Entry:
    """One live tool point as a replica holds it."""

    tool: Tool
    owner: str
    point: str
    terms: np.ndarray        # local ids of the document's distinct terms
    v_from: int
    seq: int


def _order_key(entries: Sequence[_Entry]) -> tuple[int, int]:
    return min((e.v_from, e.seq) for e in entries)


class _State:
    """Every owner's tools at one catalog version (immutable once made)."""

    def __init__(self, version: int, oldest: int, vocab: _Vocab, servers: dict[tuple[str, str], tuple[_Entry, ...]],
                 order: list[tuple[int, int, str, str]], df: dict[str, np.ndarray], counts: dict[str, int]):
        self.version = version
        self.oldest = oldest
        self.vocab = vocab
        self.servers = servers      # (owner, server) -> entries in (v_from, seq) order
        self.order = order          # sorted (v_from, seq, owner, server) of each server's first entry
        self.df = df                # owner -> document frequency per local term id
        self.counts = counts        # owner -> tools
        self.hidden: frozenset[str] = frozenset()   # points closed at or before this version, not yet deleted
        self._views: dict[str | None, _View] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_entries(cls, version: int, oldest: int, vocab: _Vocab, entries: Iterable[_Entry]) -> "_State":
        groups: dict[tuple[str, str], list[_Entry]] = {}
        for e in entries:
            groups.setdefault((e.owner, e.tool.server), []).append(e)
        empty = cls(version, oldest, vocab, {}, [], {}, {})
        return empty.changed(version, oldest, added=[e for g in groups.values() for e in g], removed=[])

    def changed(self, version: int, oldest: int, added: Sequence[_Entry], removed: Sequence[_Entry]) -> "_State":
        """A new state: this one with ``removed`` entries gone and ``added`` ones in (only their servers are touched)."""
        servers = dict(self.servers)
        order = list(self.order)
        df = dict(self.df)
        counts = dict(self.counts)
        size = len(self.vocab)
        touched_owners = {e.owner for e in added} | {e.owner for e in removed}
        for owner in touched_owners:
            old = df.get(owner)
            new = np.zeros(size, dtype=np.int32)
            if old is not None:
                new[:len(old)] = old
            df[owner] = new
        gone_points = {e.point for e in removed}
        touched: dict[tuple[str, str], list[_Entry]] = {}
        for e in removed:
            key = (e.owner, e.tool.server)
            if key not in touched:
                touched[key] = list(servers.get(key, ()))
        for e in added:
            key = (e.owner, e.tool.server)
            if key not in touched:
                touched[key] = list(servers.get(key, ()))
        for key, current in touched.items():
            if key in servers and servers[key]:
                v, s = _order_key(servers[key])
                i = bisect.bisect_left(order, (v, s, key[0], key[1]))
                if i < len(order) and order[i] == (v, s, key[0], key[1]):
                    order.pop(i)
            kept = [e for e in current if e.point not in gone_points]
            for e in current:
                if e.point in gone_points:
                    df[e.owner][e.terms] -= 1
                    counts[e.owner] = counts.get(e.owner, 0) - 1
            touched[key] = kept
        for e in added:
            key = (e.owner, e.tool.server)
            touched[key].append(e)
            df[e.owner][e.terms] += 1
            counts[e.owner] = counts.get(e.owner, 0) + 1
        for key, entries in touched.items():
            if entries:
                entries.sort(key=lambda e: (e.v_from, e.seq))
                servers[key] = tuple(entries)
                v, s = _order_key(entries)
                bisect.insort(order, (v, s, key[0], key[1]))
            else:
                servers.pop(key, None)
        return _State(version, oldest, self.vocab, servers, order, df, counts)

    def view(self, owner: str | None) -> "_View":
        with self._lock:
            found = self._views.get(owner)
            if found is None:
                found = self._views[owner] = _View(self, owner)
            return found

    def entries_of(self, owner: str, server: str) -> tuple[_Entry, ...]:
        return self.servers.get((owner, server), ())

    def with_hidden(self, head: dict[str, Any]) -> "_State":
        """This state, knowing from ``head`` which closed points it must exclude by id."""
        closed = head.get("closed") or {}
        self.hidden = frozenset(pid for v, ids in closed.items() if int(v) <= self.version for pid in ids)
        return self


class _View:
    """The catalog one tenant sees at one version (``owner=None``: the shared servers only)."""

    def __init__(self, state: _State, owner: str | None):
        self.state = state
        self.owner = owner
        self.version = state.version
        own = {s for (o, s) in state.servers if owner is not None and o == owner}
        self.shadowed = frozenset(s for s in own if (PUBLIC, s) in state.servers)
        entries: list[_Entry] = []
        for _, _, o, s in state.order:
            if o == owner or (o == PUBLIC and s not in self.shadowed):
                entries.extend(state.servers[(o, s)])
        self.entries = entries
        self.catalog = Catalog([e.tool for e in entries],
                               {e.tool.server: e.tool.server_description for e in entries})
        self.point_row = {e.point: i for i, e in enumerate(entries)}
        self.row_of_tool = {e.tool.id: i for i, e in enumerate(entries)}
        self.rows_of_server: dict[str, list[int]] = {}
        for i, e in enumerate(entries):
            self.rows_of_server.setdefault(e.tool.server, []).append(i)
        size = len(state.vocab)
        df = np.zeros(size, dtype=np.int64)
        for o in {PUBLIC, owner} - {None}:
            arr = state.df.get(o)
            if arr is not None:
                df[:len(arr)] += arr
        for s in self.shadowed:
            for e in state.servers[(PUBLIC, s)]:
                df[e.terms] -= 1
        self.df = df
        self.n = len(entries)
        self._stats: OrderedDict[tuple, tuple[int, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------- eligibility

    def eligible_rows(self, eligible: Eligibility) -> np.ndarray:
        rows: set[int] | None = None
        if eligible.servers is not None:
            rows = {r for s in eligible.servers for r in self.rows_of_server.get(s, ())}
        if eligible.tools is not None:
            by_tool = {self.row_of_tool[t] for t in eligible.tools if t in self.row_of_tool}
            rows = by_tool if rows is None else rows & by_tool
        return np.fromiter(sorted(rows or ()), dtype=np.int64)

    def stats(self, eligible: Eligibility | None) -> tuple[int, np.ndarray]:
        """(N, document frequency per local term id) over the tools ``eligible`` allows in this view."""
        if eligible is None or eligible.unrestricted:
            return self.n, self.df
        key = (eligible.servers, eligible.tools)
        with self._lock:
            found = self._stats.get(key)
            if found is not None:
                self._stats.move_to_end(key)
                return found
        rows = self.eligible_rows(eligible)
        size = len(self.df)
        if 2 * len(rows) <= self.n:
            parts = [self.entries[r].terms for r in rows]
            df = np.bincount(np.concatenate(parts), minlength=size)[:size] if parts else np.zeros(size, np.int64)
        else:  # most of the view: subtract the few excluded tools instead
            mask = np.ones(self.n, dtype=bool)
            mask[rows] = False
            parts = [self.entries[r].terms for r in np.flatnonzero(mask)]
            df = self.df - (np.bincount(np.concatenate(parts), minlength=size)[:size] if parts else 0)
        found = (len(rows), df)
        with self._lock:
            self._stats[key] = found
            if len(self._stats) > 128:
                self._stats.popitem(last=False)
        return found

    def filter(self, eligible: Eligibility | None) -> Any | None:
        """The payload filter of a search in this view at this version; None when nothing is eligible."""
        v = self.version
        # Visible at v: written at or before v and not closed at or before v. The points closed at or
        # before v that still exist are few and known (the head lists them until they are deleted).
        must: list[Any] = [_range("v_from", lte=v)]
        must_not: list[Any] = [models.HasIdCondition(has_id=sorted(self.state.hidden))] if self.state.hidden else []
        others = [o for o, n in self.state.counts.items() if n > 0 and o not in (PUBLIC, self.owner)]
        if others:   # only then can another owner's point match (later ones are excluded by version)
            must.append(_match("owner", PUBLIC) if self.owner is None else _match_any("owner", [PUBLIC, self.owner]))
        if self.shadowed:
            must_not.append(models.Filter(must=[_match("owner", PUBLIC), _match_any("server", sorted(self.shadowed))]))
        if eligible is not None and eligible.servers is not None:
            servers = sorted(s for s in eligible.servers if s in self.rows_of_server)
            if not servers:
                return None
            must.append(_match_any("server", servers))
        if eligible is not None and eligible.tools is not None:
            keys = sorted(f"{t.server}\x1f{t.tool}" for t in eligible.tools if t in self.row_of_tool)
            if not keys:
                return None
            must.append(_match_any("tool_key", keys))
        return models.Filter(must=must, must_not=must_not or None)


# ---------------------------------------------------------------------------------- the index


class QdrantToolIndex(ToolIndex):
    """Hybrid retrieval over a Qdrant collection, pinned to one catalog version until refreshed.

    Build one with :meth:`build` (or :meth:`from_index`, reusing an embedded index's vectors),
    open an existing collection with :meth:`open`. Thread-safe for concurrent reads and one
    writer per process; writers in several processes are serialised by the collection's lock.
    """

    def __init__(self, collection: QdrantCollection, encoder: Encoder, state: _State, *, head: dict[str, Any],
                 owner: str | None = None):
        # Deliberately not ToolIndex.__init__: there is no local BM25 or FAISS to build.
        self.collection = collection
        self.encoder = encoder
        self.owner = owner
        self.with_examples = bool(head.get("with_examples", True))
        self.fusion = FusionConfig(**head.get("fusion", {}))
        self.k1 = float(head.get("k1", 1.2))
        self.b = float(head.get("b", 0.75))
        self.avgdl = float(head.get("avgdl", 1.0))
        self.idf = "engine" if head.get("idf") == "engine" else "client"
        self._head = dict(head)
        self._lock = threading.RLock()
        self._state = state

    # -------------------------------------------------------------------------- what ToolIndex users read

    @property
    def _view(self) -> _View:
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
        state = _load_state(coll, head, None, _Vocab())
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
        fusion = fusion or FusionConfig()
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
                filter=models.Filter(must=[_match("kind", "tool")])), wait=True)   # a crashed build's leftovers
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
            vocab = _Vocab()
            entries: list[_Entry] = []
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
                    point, entry = _point(t, PUBLIC, first, seq, vec, docs[seq], head, vocab)
                    points.append(point)
                    entries.append(entry)
                coll.upsert(points, lease)
            lease.renew()
            coll.call(coll.client.upsert, coll.name, points=[models.PointStruct(id=HEAD_ID, vector={}, payload=head)],
                      wait=True)
            log.info("built %s: %d tools in %.1f s", coll.config.where, len(tools), time.perf_counter() - t0)
        state = _State.from_entries(first, first, vocab, entries)
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

    def at_head(self, version: int | None = None) -> "QdrantToolIndex":
        """A new index object at the newest version (or at least ``version``); this one is not changed."""
        with self._lock:
            clone = type(self)(self.collection, self.encoder, self._state, head=self._head, owner=self.owner)
        if version is None or clone.version < version:
            clone.refresh()
        return clone

    def tenant_view(self, tenant: str | None) -> "QdrantToolIndex":
        """The index as ``tenant`` sees it: the shared servers and its own (``None``: the shared ones only).

        Its writes store servers as the tenant's own; its searches never return another tenant's.
        """
        if tenant is not None and (not isinstance(tenant, str) or not tenant.strip()):
            raise ValueError(f"tenant {tenant!r} must be a non-blank name (or None for the shared servers)")
        with self._lock:
            return type(self)(self.collection, self.encoder, self._state, head=self._head, owner=tenant)

    def owned_servers(self) -> list[str]:
        """The servers this view's tenant owns (none for the shared view)."""
        return [s for (o, s) in self._state.servers if self.owner is not None and o == self.owner]

    def _advance(self, head: dict[str, Any]) -> None:
        state = _load_state(self.collection, head, self._state if head.get("build") == self._head.get("build")
                            else None, self._state.vocab)
        self._head = dict(head)
        self.avgdl = float(head.get("avgdl", self.avgdl))
        self._state = state

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
                point, entry = _point(t, owner, new_version, seq, vectors[t.id], doc, self._head, state.vocab)
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
                      wait=True, update_filter=models.Filter(must=[_match_int("version", version)]))
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
                 k: int = 100, *, stage: Stage = "hybrid", query_vector: np.ndarray | None = None) -> list[Hit]:
        """The top-k eligible tools for a request; see :meth:`ToolIndex.retrieve`.

        Both searches run in Qdrant (one batch request) under the same payload filter; BM25's
        IDF covers exactly the tools that filter allows.
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
        query = self.query_text(request, need)
        depth = max(k, self.fusion.depth)
        requests, kinds = [], []
        if stage != "dense":
            sparse = self.sparse_query(query, eligible, view)
            if sparse is not None:
                params = models.SearchParams(idf=models.IdfCorpusParams(corpus=flt)) if self.idf == "engine" else None
                requests.append(models.QueryRequest(query=sparse, using=SPARSE, filter=flt, limit=depth,
                                                    params=params, with_payload=False))
                kinds.append("bm25")
        if stage != "bm25":
            qv = query_vector if query_vector is not None else self.embed_query(request, need)
            cfg = self.collection.config
            params = models.SearchParams(exact=cfg.exact, hnsw_ef=cfg.hnsw_ef)
            requests.append(models.QueryRequest(query=np.asarray(qv, dtype=np.float32).ravel().tolist(), using=DENSE,
                                                filter=flt, limit=depth, params=params, with_payload=False))
            kinds.append("dense")
        responses = self.collection.query(requests) if requests else []
        lists: dict[str, list[tuple[int, float]]] = {"bm25": [], "dense": []}
        for kind, response in zip(kinds, responses):
            pairs = []
            for p in response.points:
                row = view.point_row.get(str(p.id))
                if row is None:   # cannot happen at a pinned version; never return an unknown point
                    log.warning("Qdrant returned point %s, unknown at version %d; skipped", p.id, view.version)
                    continue
                if kind == "bm25" and p.score <= 0:
                    continue
                pairs.append((row, float(p.score)))
            pairs.sort(key=lambda rs: (-rs[1], rs[0]))   # ties by catalog row, as the embedded backend
            lists[kind] = pairs
        b_rank = {r: (i + 1, s) for i, (r, s) in enumerate(lists["bm25"])}
        d_rank = {r: (i + 1, s) for i, (r, s) in enumerate(lists["dense"])}
        if stage == "bm25":
            ranked = lists["bm25"]
        elif stage == "dense":
            ranked = lists["dense"]
        else:
            f = self.fusion
            ranked = reciprocal_rank_fusion([[r for r, _ in lists["bm25"]], [r for r, _ in lists["dense"]]],
                                            [f.w_bm25, f.w_dense], f.k)
        hits = []
        tools = view.catalog.tools
        for rank, (row, score) in enumerate(ranked[:k], 1):
            br, bs = b_rank.get(row, (None, None))
            dr, ds = d_rank.get(row, (None, None))
            hits.append(Hit(tools[row].id, rank, score, br, bs, dr, ds))
        return hits

    def sparse_query(self, query: str, eligible: Eligibility | None = None, view: "_View | None" = None) -> Any | None:
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


def _point(tool: Tool, owner: str, version: int, seq: int, vector: np.ndarray, doc: list[str],
           head: dict[str, Any], vocab: _Vocab) -> tuple[Any, _Entry]:
    """One tool's point (dense vector, BM25 document weights, payload) and the replica's entry for it."""
    k1, b, avgdl = float(head["k1"]), float(head["b"]), float(head["avgdl"])
    norm = k1 * (1.0 - b + b * len(doc) / avgdl)
    weights: dict[int, float] = {}
    counts = Counter(doc)
    for term, tf in counts.items():
        idx = term_index(term)
        weights[idx] = weights.get(idx, 0.0) + tf / (tf + norm)
    idx = sorted(weights)
    vectors: dict[str, Any] = {DENSE: np.asarray(vector, dtype=np.float32).ravel().tolist()}
    if idx:
        vectors[SPARSE] = models.SparseVector(indices=idx, values=[weights[i] for i in idx])
    point_id = str(uuid.uuid5(_NAMESPACE, f"{owner}\x1f{tool.server}\x1f{tool.name}\x1f{version}"))
    terms = sorted(counts)
    payload = {"kind": "tool", "owner": owner, "server": tool.server, "tool": tool.name,
               "tool_key": f"{tool.server}\x1f{tool.name}", "v_from": version, "v_to": LIVE, "seq": seq,
               "hash": tool.content_hash(), "terms": " ".join(terms),
               "record": json.dumps(tool.to_dict(), ensure_ascii=False)}
    entry = _Entry(tool, owner, point_id, vocab.ids(terms), version, seq)
    return models.PointStruct(id=point_id, vector=vectors, payload=payload), entry


def _entry_of(point: Any, vocab: _Vocab) -> _Entry:
    p = point.payload
    tool = Tool.from_dict(json.loads(p["record"]))
    terms = p.get("terms") or ""
    return _Entry(tool, p.get("owner", PUBLIC), str(point.id), vocab.ids(terms.split()), int(p["v_from"]),
                  int(p.get("seq", 0)))


def _load_state(coll: QdrantCollection, head: dict[str, Any], base: _State | None, vocab: _Vocab) -> _State:
    """The state at ``head``'s version: what changed since ``base`` when it is recent enough, else everything."""
    version, oldest = int(head["version"]), int(head.get("oldest", 1))
    if base is not None and oldest <= base.version <= version:
        if base.version == version:
            return base
        lo = base.version
        flt = models.Filter(must=[_match("kind", "tool")], should=[
            _range("v_from", gt=lo, lte=version), _range("v_to", gt=lo, lte=version)])
        events: list[tuple[int, int, _Entry | str]] = []
        points = list(coll.scroll(flt))
        after = coll.head() or {}
        if int(after.get("oldest", 1)) > base.version:   # collected while we read: read everything anew
            return _load_state(coll, after, None, vocab)
        known = {e.point: e for entries in base.servers.values() for e in entries}
        for p in points:
            v_from, v_to = int(p.payload["v_from"]), int(p.payload["v_to"])
            if lo < v_to <= version:
                events.append((v_to, 0, str(p.id)))
            if lo < v_from <= version:
                events.append((v_from, 1, str(p.id)))
        by_id = {str(p.id): p for p in points}
        state = base
        for v in sorted({e[0] for e in events}):
            removed = [known[pid] for vv, kind, pid in events if vv == v and kind == 0 and pid in known]
            added = [_entry_of(by_id[pid], vocab) for vv, kind, pid in events if vv == v and kind == 1]
            for a in added:
                known[a.point] = a
            state = state.changed(v, oldest, added, removed)
        return _State(version, oldest, state.vocab, state.servers, state.order, state.df, state.counts).with_hidden(head)
    flt = models.Filter(must=[_match("kind", "tool"), _range("v_from", lte=version), _range("v_to", gt=version)])
    entries = [_entry_of(p, vocab) for p in coll.scroll(flt)]
    after = coll.head() or {}
    if int(after.get("oldest", 1)) > version:   # points of our version were collected while we read
        return _load_state(coll, after, None, vocab)
    return _State.from_entries(version, oldest, vocab, entries).with_hidden(head)


def _check_head(head: dict[str, Any], coll: QdrantCollection) -> None:
    if head.get("format_version") != FORMAT_VERSION:
        raise IndexLoadError(f"{coll.config.where}: index format {head.get('format_version')} is not {FORMAT_VERSION}; "
                             "rebuild it with --recreate")


def _match(key: str, value: str) -> Any:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_int(key: str, value: int) -> Any:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: list[str]) -> Any:
    return models.FieldCondition(key=key, match=models.MatchAny(any=values))


def _range(key: str, **bounds: float) -> Any:
    return models.FieldCondition(key=key, range=models.Range(**bounds))


def _is_connection_error(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 6:
        name = type(exc).__name__
        if isinstance(exc, (ConnectionError, TimeoutError)) or name in (
                "ResponseHandlingException", "ConnectError", "ConnectTimeout", "ReadTimeout", "RemoteProtocolError",
                "_InactiveRpcError", "AioRpcError"):
            return True
        if "already accessed by another instance" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _reason(exc: BaseException) -> str:
    root = exc
    while root.__cause__ is not None or root.__context__ is not None:
        root = root.__cause__ or root.__context__
    text = str(root) or type(root).__name__
    return text.splitlines()[0][:200]


@contextlib.contextmanager
def warnings_off() -> Iterator[None]:
    """Local mode warns that payload indexes do nothing there; they matter on a server."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield
