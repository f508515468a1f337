"""Plain-JSON forms of pipeline results (shared by the CLI and the HTTP service)."""

from __future__ import annotations

from typing import Any

from .results import ScoredTool, SearchResult

__all__ = ["tool_to_dict", "result_to_dict"]


def tool_to_dict(t: ScoredTool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "server": t.tool_id.server, "tool": t.tool_id.tool, "rank": t.rank,
        "probability": float(t.probability), "source": t.source, "definition": t.definition,
    }
    if t.explanation is not None:
        out["explanation"] = t.explanation
    return out


def result_to_dict(r: SearchResult) -> dict[str, Any]:
    return {
        "decision": r.decision,
        "best_probability": float(r.best_probability),
        "attempt": r.attempt,
        "message": r.message,
        "tools": [tool_to_dict(t) for t in r.tools],
        "suggestions": list(r.suggestions),
        "restricted_to": list(r.restricted_to),
        "tokens": None if r.tokens is None else {
            "selected": r.tokens.selected, "catalog": r.tokens.catalog,
            "reduction": round(r.tokens.reduction, 4), "encoding": r.tokens.encoding,
        },
    }
