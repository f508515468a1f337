"""The index: how tools are found for a request (retrieve 100, before any scoring).

* :mod:`.text`: how a tool becomes searchable text. :mod:`.bm25`: lexical search (bm25s).
  :mod:`.encoder`: sentence embeddings (ONNX). :mod:`.dense`: dense search (FAISS).
  :mod:`.fusion`: weighted reciprocal-rank fusion. :mod:`.hits`: the ``Hit`` every stage returns.
* :mod:`.embedded`: ``ToolIndex``, the default backend (bm25s + FAISS in the process).
* :mod:`.qdrant`: ``QdrantToolIndex``, the shared backend (one Qdrant collection, replicas hold no index).
* :mod:`.backends`: choosing one. :mod:`.default`: the shipped catalog's index, built once into a cache.
* :mod:`.mcp`: an MCP client configuration's index (a harvest of its servers, built or updated).
* :mod:`.examples`: example requests written at index time. :mod:`.learned`: example requests
  learned from use, one tenant's.
"""
