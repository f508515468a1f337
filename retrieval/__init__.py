"""toolrank retrieval: the catalog, the hybrid index, and the pipeline that joins retrieval,
scoring and the decision. Import this to use toolrank from Python."""

from __future__ import annotations

from .catalog.eligibility import Eligibility
from .catalog.formats import load_catalog, load_default_catalog, load_examples
from .catalog.model import Catalog, CatalogError, Tool, ToolId
from .catalog.smithery import load_smithery
from .index.embedded import IndexLoadError, IndexSaveError, ToolIndex
from .index.fusion import FusionConfig
from .index.hits import Hit
from .pipeline.results import ScoredTool, SearchResult, TokenReport

__all__ = [
    "Catalog", "CatalogError", "Tool", "ToolId", "load_catalog", "load_default_catalog", "load_examples",
    "Eligibility", "FusionConfig", "Hit", "IndexLoadError", "IndexSaveError", "ToolIndex",
    "ScoredTool", "SearchResult", "TokenReport", "load_smithery",
    "Pipeline", "Policy", "load_pipeline", "load_or_build_default",
]


def __getattr__(name: str):
    # The pipeline pulls in the token counter and the shortcuts: load it on first use.
    if name in ("Pipeline", "Policy", "load_pipeline"):
        from .pipeline import flow
        return getattr(flow, name)
    if name == "load_or_build_default":
        from .index.default import load_or_build_default
        return load_or_build_default
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
