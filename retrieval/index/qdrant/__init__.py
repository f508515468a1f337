"""The Qdrant index backend, by concern (the overview is :mod:`.index`'s docstring).

* :mod:`.schema`: what the collection holds: configuration, point layout constants, errors, filters.
* :mod:`.collection`: the collection and its client; the write lock (a lease kept in the collection).
* :mod:`.state`: the versioned tool table a replica holds, and reading it from the collection.
* :mod:`.index`: ``QdrantToolIndex``: open, build, refresh, tenant views, writes, search.
"""
