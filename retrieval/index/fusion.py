"""Weighted reciprocal-rank fusion of the lexical and dense lists."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FusionConfig", "reciprocal_rank_fusion"]


@dataclass(frozen=True, kw_only=True)
class FusionConfig:
    """``score = w_bm25 / (k + rank_bm25) + w_dense / (k + rank_dense)``.

    Defaults were chosen on the dev questions (see README, "Fusion weights").
    """

    k: float = 10.0
    w_bm25: float = 1.0
    w_dense: float = 2.0
    depth: int = 200     # how deep each list is read before fusing

    def __post_init__(self) -> None:
        if self.k < 0 or self.w_bm25 < 0 or self.w_dense < 0 or self.w_bm25 + self.w_dense == 0:
            raise ValueError(f"invalid fusion config {self}: k and weights must be >= 0, weights not both 0")


def reciprocal_rank_fusion(lists: list[list[int]], weights: list[float], k: float) -> list[tuple[int, float]]:
    """Fuse ranked lists of row ids; returns (row, score) best first, ties by first appearance."""
    fused: dict[int, float] = {}
    for rows, w in zip(lists, weights):
        if w == 0:
            continue
        for rank, row in enumerate(rows, 1):
            fused[row] = fused.get(row, 0.0) + w / (k + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])
