"""The catalog: what a tool is, and every way tools come in.

* :mod:`.model`: ``ToolId``, ``Tool``, ``Catalog``, ``CatalogError``.
* :mod:`.rules`: the content rules every loader and the service's ``PUT`` apply (names, texts, schemas).
* :mod:`.formats`: catalog files (MCP-Zero, wrapped ``tools/list`` results, JSONL) and example requests.
* :mod:`.smithery`: a folder of Smithery registry records.
* :mod:`.mcp_harvest`: an MCP client configuration, harvested by starting each server
  (its index: :mod:`retrieval.index.mcp`).
* :mod:`.eligibility`: which tools a tenant may use (a filter, never a ranking signal).
"""
