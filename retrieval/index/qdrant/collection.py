"""One Qdrant collection and its client (connection errors named), its meta points (the head), and
the write lock: a lease point taken with an insert-only upsert, renewed by long writes, taken over
when it runs out; the next writer undoes what a crashed one left unpublished."""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from typing import Any, Iterator

from qdrant_client import QdrantClient, models

from retrieval.index.embedded import IndexLoadError

from .schema import (DENSE, HEAD_ID, LIVE, LOCK_ID, SPARSE, IdfMode, QdrantConfig, QdrantLockTimeout,
                     QdrantUnavailable, QdrantWriteConflict, in_range, is_value)

__all__ = ["QdrantCollection"]

log = logging.getLogger(__name__)

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
            is_value("kind", "tool"), in_range("v_from", gt=version)])), wait=True)
        self.call(self.client.set_payload, self.name, payload={"v_to": LIVE},
                  points=models.FilterSelector(filter=models.Filter(must=[
                      is_value("kind", "tool"), in_range("v_to", gt=version, lt=LIVE)])), wait=True)
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
                       update_filter=models.Filter(must=[is_value("holder", "")]))
                if (self._holder() or {}).get("holder") == self.token:
                    self._renewed = time.monotonic()
                    return False
                continue
            if held is not None and float(held.get("expires", 0)) < time.time():
                # Take over only if the stale holder still has it (two waiters may both see it stale).
                c.call(c.client.upsert, c.name, points=[self._point()], wait=True, update_filter=models.Filter(must=[
                    is_value("holder", held.get("holder", "")), in_range("expires", lt=time.time())]))
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
               update_filter=models.Filter(must=[is_value("holder", self.token)]))
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
                   update_filter=models.Filter(must=[is_value("holder", self.token)]))


# ---------------------------------------------------------------------------------- helpers


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
