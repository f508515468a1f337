"""The engine's index store over a Qdrant collection: no shared folder, no lock file, no polling.

:class:`~serve.engine.Engine` asks a store for the current version, loads a version, publishes
a changed index and holds a write lock around a change. Over Qdrant:

* the current version is the collection's head (one point read); the engine reads it on every
  request (``read_through``), so a change is served by every worker of every replica from the
  next request on;
* loading a version fetches only the points that changed since this worker's last one;
* a change is already committed when ``upsert_server`` / ``remove_server`` return (they take
  the collection's own lease lock, so writers in any replica are serialised), so publishing
  only reports its version.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

from retrieval.index.qdrant.collection import QdrantCollection
from retrieval.index.qdrant.index import QdrantToolIndex

__all__ = ["QdrantStore", "qdrant_store"]

log = logging.getLogger(__name__)


class QdrantStore:
    """The :class:`~serve.index_store.IndexStore` interface over one Qdrant collection."""

    read_through = True   # the engine reads the head on every request instead of polling

    def __init__(self, collection: QdrantCollection, encoder: Callable[[], Any]):
        self.collection = collection
        self._encoder = encoder
        self._latest: QdrantToolIndex | None = None   # private: never served, only cloned
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        return self.collection.config.where

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """Nothing to hold here: each write takes the collection's lease lock itself."""
        yield

    def clean_leftovers(self) -> list[str]:
        """Nothing on disk: an interrupted write is undone by the next writer that takes the lease lock."""
        return []

    def current_version(self) -> int | None:
        return self.collection.head_version()

    def versions_on_disk(self) -> list[int]:
        """The committed head, as the one version there is to read ([] for an empty collection)."""
        version = self.current_version()
        return [] if version is None else [version]

    def load_newest_readable(self) -> tuple[int, QdrantToolIndex, list[tuple[int, str]]]:
        """The head version (Qdrant keeps no unreadable versions to skip).

        Raises:
            LookupError: the collection holds no index (dropped while serving).
        """
        version = self.current_version()
        if version is None:
            raise LookupError(f"{self.root} holds no toolrank index (dropped?); restart the service to reseed it")
        return version, self.load(version), []

    def load(self, version: int) -> QdrantToolIndex:
        """A new index object at ``version`` or newer (the served ones are never changed in place)."""
        with self._lock:
            if self._latest is None:
                self._latest = QdrantToolIndex.open(self.collection, encoder=self._encoder())
            elif self._latest.version < version:
                self._latest.refresh()
            return self._latest.tenant_view(None)

    def publish(self, index: Any) -> int:
        """The version a change committed (Qdrant indexes commit as they write)."""
        if not isinstance(index, QdrantToolIndex):
            raise TypeError(f"the Qdrant store publishes Qdrant indexes, not {type(index).__name__}")
        return index.version


def qdrant_store(settings: Any, seed: Callable[[], Any], index: Any = None) -> tuple[QdrantStore, Callable[[], Any]]:
    """The store and the seeding function for ``settings.backend == "qdrant"``.

    Args:
        settings: the service settings (``qdrant_url`` or ``qdrant_path``, ``collection``, key).
        seed: the first index when the collection is empty (an embedded index: its vectors
            are uploaded, not recomputed).
        index: an injected pipeline's index; when it is a Qdrant index its connection and
            encoder are used (tests, embedding applications).
    """
    if isinstance(index, QdrantToolIndex):
        collection, encoder = index.collection, index.encoder
        get_encoder: Callable[[], Any] = lambda: encoder   # noqa: E731
    else:
        from retrieval.index.backends import BackendConfig

        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key is not None else None
        config = BackendConfig(backend="qdrant", qdrant_url=settings.qdrant_url,
                               qdrant_path=str(settings.qdrant_path) if settings.qdrant_path else None,
                               qdrant_api_key=key, collection=settings.collection).qdrant()
        collection = QdrantCollection.connect(config)
        shared: dict[str, Any] = {}

        def get_encoder() -> Any:
            if "encoder" not in shared:
                from retrieval.index.encoder import OnnxEncoder
                shared["encoder"] = OnnxEncoder()
            return shared["encoder"]

    def seed_qdrant() -> QdrantToolIndex:
        first = seed()
        if isinstance(first, QdrantToolIndex):
            return first
        log.info("uploading the first index into %s", collection.config.where)
        return QdrantToolIndex.from_index(first, config=collection, if_absent=True)

    return QdrantStore(collection, get_encoder), seed_qdrant
