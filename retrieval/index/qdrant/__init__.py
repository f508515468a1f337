"""The Qdrant index backend, by concern (the overview is :mod:`.index`'s docstring).

* :mod:`.schema`: what the collection holds: configuration, point layout constants, errors, filters.
* :mod:`.collection`: the collection and its client; the write lock (a lease kept in the collection).
* :mod:`.state`: the versioned tool table a replica holds, and reading it from the collection.
* :mod:`.index`: ``QdrantToolIndex``: open, build, refresh, tenant views, writes, search.
"""

try:  # every module here needs the client: one message, whichever is imported first
    import qdrant_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("the Qdrant backend needs qdrant-client: pip install 'toolrank[qdrant]'") from exc
