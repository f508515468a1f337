"""Plain-JSON forms of pipeline results (shared by the CLI and the HTTP service)."""

from __future__ import annotations

from typing import Any

from .results import ScoredTool, SearchResult

__all__ = ["tool_to_dict", "result_to_dict", "previous_from_dict", "earlier_answer"]

_DECISIONS = ("proceed", "search_again", "choose", "no_fit")
_SOURCES = ("ranked", "always_available", "server_mention", "exact_name")


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


def previous_from_dict(d: Any, where: str = "previous") -> SearchResult:
    """An earlier answer read back from its JSON (``result_to_dict``'s form, as ``toolrank search --json`` prints
    it): its attempt, decision and tools with their probabilities, what a second search needs. Anything else in
    it is ignored; a malformed answer raises ``ValueError`` naming what is wrong."""
    from retrieval.catalog.model import ToolId

    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object (an answer printed by `toolrank search --json`)")
    decision, attempt = d.get("decision"), d.get("attempt")
    if decision not in _DECISIONS:
        raise ValueError(f"{where}: 'decision' must be one of {', '.join(_DECISIONS)} (got {decision!r})")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 1 <= attempt <= 5:
        raise ValueError(f"{where}: 'attempt' must be a whole number from 1 to 5 (got {attempt!r})")
    rows = d.get("tools") or []
    if not isinstance(rows, list):
        raise ValueError(f"{where}: 'tools' must be a list")
    tools = []
    for i, r in enumerate(rows):
        try:
            raw = r["probability"]
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise TypeError(raw)
            p = float(raw)
            tid = ToolId(str(r["server"]), str(r["tool"]))
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: tools[{i}] needs 'server', 'tool' and a numeric 'probability'") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{where}: tools[{i}].probability must be in [0, 1] (got {p:g})")
        source = r.get("source") or "ranked"
        if source not in _SOURCES:
            raise ValueError(f"{where}: tools[{i}].source must be one of {', '.join(_SOURCES)} (got {source!r})")
        tools.append(ScoredTool(tid, p, i + 1, source))
    return earlier_answer(decision, attempt, tools)


def earlier_answer(decision: str, attempt: int, tools: list[ScoredTool]) -> SearchResult:
    """An earlier answer as a second search reads it: its decision, attempt and tools (best first), its best
    probability the highest of theirs (0 without tools)."""
    return SearchResult(decision=decision, tools=tools, best_probability=max((t.probability for t in tools), default=0.0),
                        attempt=attempt)
