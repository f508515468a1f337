"""Why a tool is in the result (``explain=True``): its retrieval evidence, the query terms its
document shares, and the reason in words."""

from __future__ import annotations

from typing import Any, Sequence

from retrieval.catalog.model import Tool
from retrieval.index.bm25 import tokenize
from retrieval.index.hits import Hit
from retrieval.index.text import tool_document

from .decision import Policy

__all__ = ["query_terms", "explanation"]

REASONS = {
    "always_available": "always-available tool whose keywords the request contains",
    "server_mention": "best tool of the server the request names (the search was restricted to it; "
                      "the probability is the scorer's own)",
    "exact_name": "the request names this tool exactly",
}


def query_terms(query: str) -> set[str]:
    """The request's terms as BM25 sees them (stemmed, stop words removed)."""
    return set(tokenize([query])[0])


def explanation(hit: Hit | None, tool: Tool, p: float, src: str, decision: str, policy: Policy,
                query_terms: set[str], *, with_examples: bool, named: Sequence[str] = (),
                casual: Sequence[str] = ()) -> dict[str, Any]:
    """One tool's explanation.

    Args:
        hit: its retrieval evidence (None for a tool that only a shortcut brought in).
        tool: the tool; its document is read as the index reads it (``with_examples``).
        p, src: its probability and how it got into the result.
        decision, policy: the search's decision and thresholds.
        query_terms: the request's terms (:func:`query_terms`).
        named, casual: servers the request names explicitly, and casually.
    """
    doc_terms = set(tokenize([tool_document(tool, with_examples=with_examples)])[0])
    out: dict[str, Any] = {
        "probability": round(p, 4),
        "source": src,
        "fused_rank": hit.rank if hit and hit.score else None,
        "fused_score": round(hit.score, 6) if hit and hit.score else None,
        "bm25_rank": hit.bm25_rank if hit else None,
        "bm25_score": round(hit.bm25_score, 4) if hit and hit.bm25_score is not None else None,
        "dense_rank": hit.dense_rank if hit else None,
        "dense_score": round(hit.dense_score, 4) if hit and hit.dense_score is not None else None,
        "matched_terms": sorted(query_terms & doc_terms),
    }
    if src == "ranked":
        out["reason"] = (f"ranked by calibrated probability; decision {decision} "
                         f"(proceed at >= {policy.proceed_threshold:.3g}, list floor {policy.floor:.3g})")
    else:
        out["reason"] = REASONS[src]
    if named and tool.server not in named:  # names are public or the tenant's own
        out["reason"] += f"; lowered: the request names {', '.join(named)}, not this tool's server"
    elif tool.server in casual and src == "ranked":
        out["reason"] += f"; raised: the request mentions {tool.server}"
    return out
