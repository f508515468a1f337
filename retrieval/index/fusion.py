"""Weighted reciprocal-rank fusion of the lexical and dense lists."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["FusionConfig", "reciprocal_rank_fusion", "fused_lists"]


@dataclass(frozen=True, kw_only=True)
class FusionConfig:
    """``score = w_bm25 / (k + rank_bm25) + w_dense / (k + rank_dense)``, and with an agent's need
    ``+ w_need_bm25 / (k + rank_need_bm25) + w_need_dense / (k + rank_need_dense)``.

    The need is a query of its own (need-to-description matching is the easy task): BM25 and dense
    over the need alone, fused with the lists of the request. The request's lists stay (the need
    never replaces the request); ``need_joint`` also joins the need to the request's query text (the
    0.6.0 behaviour, where the need had no lists of its own). Defaults were chosen on the dev
    questions with needs written blind (README, "Need-first search"; ``benchmarks/need_fusion.py``).
    """

    k: float = 10.0
    w_bm25: float = 1.0
    w_dense: float = 2.0
    depth: int = 200     # how deep each list is read before fusing
    w_need_bm25: float = 0.5
    w_need_dense: float = 1.0
    need_joint: bool = True
    w_learned_bm25: float = 0.5   # a tenant's learned requests as a lexical list of their own ("list", "both")
    learned_lexical: str = "document"   # where a tenant's learned requests count lexically: "document" (in their
    #   tool's BM25 document, as indexed example requests; replaces the index's BM25 list for that tenant), "list"
    #   (0.9.0: a BM25 over the learned requests alone, fused with weight w_learned_bm25) or "both"

    def __post_init__(self) -> None:
        if self.k < 0 or self.w_bm25 < 0 or self.w_dense < 0 or self.w_bm25 + self.w_dense == 0:
            raise ValueError(f"invalid fusion config {self}: k and weights must be >= 0, weights not both 0")
        if self.w_need_bm25 < 0 or self.w_need_dense < 0 or self.w_learned_bm25 < 0:
            raise ValueError(f"invalid fusion config {self}: the need's weights must be >= 0")
        if self.learned_lexical not in ("document", "list", "both"):
            raise ValueError(f"invalid fusion config {self}: learned_lexical is 'document', 'list' or 'both'")

    @classmethod
    def day_one(cls) -> "FusionConfig":
        """The weights for a catalog without example requests (a user's own catalog on its first day): the
        dense lists count more and fuse sharper. Chosen on the mean over writers, day one: MCP-Zero dev (request
        alone and with the blind need) and the held-out dev corpora API-Bank, RestBench and MCPToolBench++
        (``benchmarks/fusion_writers.py``; rank 1 73.3 against 71.8 for the defaults, which stay where example
        requests are indexed: there BM25 over the examples is the stronger list)."""
        return cls(k=5.0, w_dense=3.0, w_need_dense=1.5)

    @classmethod
    def for_catalog(cls, tools: "Iterable[object]", with_examples: bool) -> "FusionConfig":
        """The default weights for an index of ``tools``: :meth:`day_one`'s unless example requests are
        indexed for at least half of them."""
        tools = list(tools)
        with_ex = with_examples and sum(bool(getattr(t, "examples", ())) for t in tools) * 2 >= max(len(tools), 1)
        return cls() if with_ex else cls.day_one()

    @property
    def day_one_weights(self) -> bool:
        """Whether these are :meth:`day_one`'s weights (the confidence models for catalogs without example
        requests were fitted on lists fused so; ``retrieval.pipeline.flow`` picks its models by this)."""
        return _weights(self) == _weights(self.day_one())

    @classmethod
    def from_manifest(cls, saved: dict, built_by: str | None,
                      tools: "Iterable[object] | Callable[[], Iterable[object]]", with_examples: bool) -> "FusionConfig":
        """The weights a saved index searches with: the ones it saved, except that an index built before
        0.12.0 with the then defaults over a catalog without example requests takes :meth:`day_one`'s (fusion
        happens at query time, so nothing stored changes; the day-one confidence models of 0.12.0 on were
        fitted with them). ``tools`` may be a callable, read only when that question arises."""
        cfg = cls(**saved)
        if _older_than(built_by, "0.12.0") and _weights(cfg) == _weights(cls()) \
                and cls.for_catalog(tools() if callable(tools) else tools, with_examples).day_one_weights:
            return cls(**{**saved, **{k: getattr(cls.day_one(), k) for k in _WEIGHTS}})
        return cfg

    @property
    def need_channel(self) -> bool:
        """Whether a need gets lists of its own."""
        return self.w_need_bm25 > 0 or self.w_need_dense > 0


_WEIGHTS = ("k", "w_bm25", "w_dense", "w_need_bm25", "w_need_dense")


def _weights(cfg: FusionConfig) -> tuple[float, ...]:
    return tuple(float(getattr(cfg, k)) for k in _WEIGHTS)


def _older_than(version: str | None, than: str) -> bool:
    """Whether a package version string is older than ``than`` (PEP 440, so ``0.12.0rc1`` is older than
    ``0.12.0``); no version: built before versions were recorded, so older; an unreadable one: not older."""
    from packaging.version import InvalidVersion, Version

    if not version:
        return True
    try:
        return Version(str(version)) < Version(than)
    except InvalidVersion:
        return False


def reciprocal_rank_fusion(lists: list[list[int]], weights: list[float], k: float) -> list[tuple[int, float]]:
    """Fuse ranked lists of row ids; returns (row, score) best first, ties by first appearance."""
    fused: dict[int, float] = {}
    for rows, w in zip(lists, weights):
        if w == 0:
            continue
        for rank, row in enumerate(rows, 1):
            fused[row] = fused.get(row, 0.0) + w / (k + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])


def fused_lists(bm25: list[int], dense: list[int], need_bm25: list[int], need_dense: list[int],
                cfg: FusionConfig, learned_bm25: list[int] | None = None) -> list[tuple[int, float]]:
    """The request's two lists and the need's two (empty without a need) fused by ``cfg``'s weights;
    with ``learned_bm25``, a tenant's learned requests as a fifth (lexical) list."""
    return reciprocal_rank_fusion([bm25, dense, need_bm25, need_dense, learned_bm25 or []],
                                  [cfg.w_bm25, cfg.w_dense, cfg.w_need_bm25, cfg.w_need_dense, cfg.w_learned_bm25],
                                  cfg.k)
