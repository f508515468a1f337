"""The record every retrieval stage returns: one candidate tool with its evidence."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.catalog.model import ToolId

__all__ = ["Hit"]


@dataclass(frozen=True)
class Hit:
    """A retrieved candidate. Ranks are 1-based; ``None`` means "not in that list".

    ``need_*``: the candidate in the lists of the agent's need alone (None without a need, or not in
    that list): how the need, the easy text to match, sees the candidate (a confidence feature).
    """

    tool_id: ToolId
    rank: int
    score: float
    bm25_rank: int | None = None
    bm25_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    need_bm25_rank: int | None = None
    need_dense_rank: int | None = None
    need_dense_score: float | None = None
