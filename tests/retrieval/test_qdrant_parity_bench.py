"""benchmarks/qdrant_parity.py's BM25 agreement measure: ties apart, equal lists agree; a real
difference is counted."""

from __future__ import annotations

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.model import ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.index.hits import Hit
from retrieval.index.qdrant.index import QdrantToolIndex
from retrieval.index.qdrant.schema import QdrantConfig


def test_the_backends_agree_up_to_ties(load_benchmark):
    bench = load_benchmark("qdrant_parity")
    embedded = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    index = QdrantToolIndex.from_index(embedded, config=QdrantConfig(path=":memory:"))
    got = bench.bm25_agreement(embedded, index, ["list the channels", "weather alerts for a region", "create an issue"])
    assert got["same_ranking_up_to_ties"] == 1.0 and got["max_relative_score_difference"] < 1e-5


def test_ties_are_sets_and_real_differences_count(load_benchmark):
    bench = load_benchmark("qdrant_parity")
    a, b, c = ToolId("S", "a"), ToolId("S", "b"), ToolId("S", "c")

    def hits(*pairs):
        return [Hit(t, i + 1, s, i + 1, s) for i, (t, s) in enumerate(pairs)]

    assert bench._up_to_ties(hits((a, 2.0), (b, 2.0), (c, 1.0)), 0.0) == \
        bench._up_to_ties(hits((b, 2.0), (a, 2.0000001), (c, 1.0)), 0.0)
    assert bench._up_to_ties(hits((a, 2.0), (b, 1.5), (c, 1.0)), 0.0) != \
        bench._up_to_ties(hits((b, 2.0), (a, 1.5), (c, 1.0)), 0.0)
    assert bench._up_to_ties(hits((a, 2.0), (b, 1.0), (c, 1.0)), 1.0) == [frozenset({a})]   # the tie at the cut is left out
