"""BM25: a masked search is scored with the allowed documents' statistics only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.index.bm25 import BM25Index

DOCS = [
    "get shard allocation and status for an index",          # 0  tenant
    "list all indices in the cluster",                        # 1  tenant
    "create a new issue in a repository",                     # 2  tenant
    "shard shard shard index index cluster issue",            # 3  hidden, shares the tenant's words
    "post a message to a channel",                            # 4  hidden
    "issue tracker: create an issue, close an issue",         # 5  hidden
]
QUERIES = ["shard allocation of an index", "create an issue", "list indices in the cluster", "message",
           "nothing matches this", "shard shard index"]
TENANT = np.array([True, True, True, False, False, False])


def sub_scores(docs, mask, query):
    """What an index of the allowed documents alone would score, spread back to all rows."""
    rows = np.flatnonzero(mask)
    out = np.zeros(len(docs), dtype=np.float32)
    out[rows] = BM25Index.build([docs[i] for i in rows]).scores(query)
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_masked_scores_equal_an_index_of_the_allowed_documents_alone(query):
    index = BM25Index.build(DOCS)
    got = index.scores(query, TENANT)
    assert np.array_equal(got, sub_scores(DOCS, TENANT, query))  # bit for bit
    assert np.all(got[~TENANT] == 0)


def test_an_all_true_mask_gives_todays_scores_exactly():
    index = BM25Index.build(DOCS)
    everything = np.ones(len(DOCS), dtype=bool)
    for q in QUERIES:
        assert np.array_equal(index.scores(q, everything), index.scores(q))
        assert np.array_equal(index._masked_scores(index._query_ids(q), everything), index.scores(q))


def test_hidden_documents_do_not_move_a_tenants_scores_or_order():
    alone = BM25Index.build(DOCS[:3])
    with_hidden = BM25Index.build(DOCS)
    for q in QUERIES:
        rows_a, scores_a = alone.search(q, 10, np.ones(3, dtype=bool))
        rows_b, scores_b = with_hidden.search(q, 10, TENANT)
        assert rows_a.tolist() == rows_b.tolist() and np.array_equal(scores_a, scores_b)
    # ...whereas the whole-index statistics do move them (what the masked path avoids)
    q = "shard allocation of an index"
    assert not np.array_equal(with_hidden.scores(q)[:3], alone.scores(q))


def test_equal_scores_rank_by_row_under_a_mask():
    docs = ["alpha beta", "gamma", "alpha beta", "alpha beta"]
    index = BM25Index.build(docs)
    rows, scores = index.search("alpha", 10, np.array([True, True, False, True]))
    assert rows.tolist() == [0, 3] and scores[0] == scores[1]


def test_empty_masks_and_empty_indexes():
    index = BM25Index.build(DOCS)
    assert not index.scores("shard", np.zeros(len(DOCS), dtype=bool)).any()
    assert index.search("shard", 5, np.zeros(len(DOCS), dtype=bool))[0].size == 0
    assert BM25Index.build([]).scores("shard", np.zeros(0, dtype=bool)).size == 0
    with pytest.raises(ValueError, match="one bool per document"):
        index.scores("shard", np.ones(3, dtype=bool))


def test_save_and_load_keep_the_term_frequencies(tmp_path):
    index = BM25Index.build(DOCS)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", len(DOCS))
    assert loaded.tenant_invariant
    for q in QUERIES:
        assert np.array_equal(loaded.scores(q, TENANT), index.scores(q, TENANT))
        assert np.array_equal(loaded.scores(q), index.scores(q))


def test_an_index_saved_without_term_frequencies_is_rebuilt_by_the_tool_index(tmp_path, catalog, encoder):
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.index.embedded import ToolIndex

    built = ToolIndex.build(catalog, encoder=encoder)
    built.save(tmp_path / "idx")
    (tmp_path / "idx" / "bm25" / "term_freqs.npz").unlink()  # as written before this version
    assert not BM25Index.load(tmp_path / "idx" / "bm25", len(catalog)).tenant_invariant
    loaded = ToolIndex.load(tmp_path / "idx", encoder=encoder)
    assert loaded._bm25.tenant_invariant
    only = Eligibility.of(servers=["GitHub"])
    a = loaded.retrieve("create an issue", eligible=only, stage="bm25")
    b = built.retrieve("create an issue", eligible=only, stage="bm25")
    assert [(h.tool_id, h.bm25_score) for h in a] == [(h.tool_id, h.bm25_score) for h in b]


def test_tool_index_bm25_scores_ignore_hidden_servers(catalog, encoder):
    """Through ToolIndex.retrieve: adding a server the tenant cannot see changes none of its hits."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.catalog.model import Tool
    from retrieval.index.embedded import ToolIndex

    tenant = Eligibility.of(servers=["Elasticsearch", "GitHub"])
    index = ToolIndex.build(catalog, encoder=encoder)
    before = [json.dumps(vars(h), default=str) for h in index.retrieve("shard allocation of an index", eligible=tenant)]
    index.upsert_server("Shadow", "shards", [Tool("Shadow", "shards", "shard shard index allocation status index")])
    after = [json.dumps(vars(h), default=str) for h in index.retrieve("shard allocation of an index", eligible=tenant)]
    assert after == before
