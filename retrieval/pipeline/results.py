"""What the pipeline returns to an agent: selected tools, probabilities, the decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from retrieval.catalog.model import ToolId

__all__ = ["Decision", "Source", "ScoredTool", "TokenReport", "SearchResult"]

# proceed: use the tools; search_again: retry once with a sharper need (the tools are the best so far);
# choose (second attempt only): the tools may fit, none clearly does: read and pick, or ask the user;
# no_fit: nothing connected fits (best probability under the floor after two searches).
Decision = Literal["proceed", "search_again", "choose", "no_fit"]
# How a tool got into the result: ranked normally, or by one of the shortcuts.
Source = Literal["ranked", "always_available", "server_mention", "exact_name"]


@dataclass(frozen=True)
class ScoredTool:
    tool_id: ToolId
    probability: float
    rank: int
    source: Source = "ranked"
    definition: dict[str, Any] | None = None
    explanation: dict[str, Any] | None = None


@dataclass(frozen=True)
class TokenReport:
    selected: int          # tokens of the selected definitions
    catalog: int           # tokens of every eligible definition
    encoding: str = "cl100k_base"

    @property
    def reduction(self) -> float:
        return 1.0 - self.selected / self.catalog if self.catalog else 0.0


@dataclass(frozen=True)
class SearchResult:
    decision: Decision
    tools: list[ScoredTool]
    best_probability: float
    attempt: int                         # 1 for a first search, 2 after search_again
    tokens: TokenReport | None = None
    message: str = ""                    # plain words for the agent/user
    suggestions: list[str] = field(default_factory=list)   # public servers to connect on no_fit
    restricted_to: list[str] = field(default_factory=list) # servers named explicitly in the request
    # the first tool's probability before a tenant's recalibration from use; None when the first tool is a
    # shortcut (always available, named exactly) rather than a calibrated candidate: the evidence a later fit reads
    raw_best: float | None = None
    # the candidates past the head the cross-encoder read, with their shipped probabilities (shortcut tools left
    # out; empty without a tail of its own): what an audit draws its tail candidate from (serve/audits.py, 0.18.0)
    tail: tuple[tuple[ToolId, float], ...] = field(default=(), repr=False, compare=False)
