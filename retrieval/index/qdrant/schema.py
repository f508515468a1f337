"""What the Qdrant collection holds: its configuration, the layout constants of its points (the
head, the write lock, tool points with ``v_from`` / ``v_to``), the errors, and the payload filters."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from qdrant_client import models

__all__ = ["FORMAT_VERSION", "DENSE", "SPARSE", "PUBLIC", "LIVE", "HEAD_ID", "LOCK_ID", "IdfMode", "QdrantConfig",
           "QdrantUnavailable", "QdrantLockTimeout", "QdrantWriteConflict", "term_index"]

FORMAT_VERSION = 1
DENSE, SPARSE = "dense", "bm25"
PUBLIC = ""                      # owner of the deployment's shared servers
LIVE = 2 ** 62                   # v_to of a point that no version has closed yet
NAMESPACE = uuid.UUID("6f1c0e52-64a4-4d3e-9a57-2f0f6b1c7a10")
HEAD_ID = str(uuid.uuid5(NAMESPACE, "toolrank:head"))
LOCK_ID = str(uuid.uuid5(NAMESPACE, "toolrank:lock"))
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


# ---------------------------------------------------------------------------------- payload filters


def is_value(key: str, value: str) -> Any:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def is_int(key: str, value: int) -> Any:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def is_any(key: str, values: list[str]) -> Any:
    return models.FieldCondition(key=key, match=models.MatchAny(any=values))


def in_range(key: str, **bounds: float) -> Any:
    return models.FieldCondition(key=key, range=models.Range(**bounds))
