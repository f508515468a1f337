"""A tenant's learned examples as an index of its own (issue 36.1): vectors stored at feedback time,
the same bytes whoever embedded first, a lexical channel, a bound per tenant."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from retrieval.index import learned as learned_mod
from retrieval.index.embedded import ToolIndex
from retrieval.index.learned import LearnedExamples, retrieve_with_learned, tenant_vector

SHARDS = ToolId("Elasticsearch", "get_shards")
ISSUE = ToolId("GitHub", "create_issue")


class BatchSensitiveEncoder(HashEncoder):
    """Like an int8 encoder with dynamic quantisation: a text's vector moves with what it is batched with."""

    name = "batch-sensitive-test"

    def encode(self, texts, **kw):
        out = super().encode(texts, **kw)
        return out + 0.05 * out.mean(0, keepdims=True)


class CountingEncoder(HashEncoder):
    name = "counting-test"

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def encode(self, texts, **kw):
        self.seen += list(texts)
        return super().encode(texts, **kw)


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch):
    monkeypatch.setattr(learned_mod, "_VECTORS", learned_mod._TextVectors())
    monkeypatch.setattr(learned_mod, "_TOOL_VECTORS", type(learned_mod._TOOL_VECTORS)())


def _clear():
    learned_mod._VECTORS = learned_mod._TextVectors()
    learned_mod._TOOL_VECTORS.clear()


def test_tenant_vectors_are_the_same_bytes_whoever_taught_the_tool_first():
    index = ToolIndex.build(tiny_catalog(), encoder=BatchSensitiveEncoder())
    alice = LearnedExamples().add(SHARDS, "why is my cluster yellow", at=1)
    bob = LearnedExamples().add(SHARDS, "replica shards unassigned on node 3", at=1)
    request = "shards stuck unassigned"

    retrieve_with_learned(index, alice, request)            # alice's tenant embeds the tool first
    bob_after_alice = retrieve_with_learned(index, bob, request)
    _clear()
    bob_first = retrieve_with_learned(index, bob, request)  # bob's tenant first, in a fresh process
    retrieve_with_learned(index, alice, request)
    assert bob_after_alice == bob_first
    assert [h.dense_score for h in bob_after_alice] == [h.dense_score for h in bob_first]


def test_with_stored_vectors_a_search_embeds_only_its_query():
    encoder = CountingEncoder()
    index = ToolIndex.build(tiny_catalog(), encoder=encoder)
    learned = LearnedExamples()
    for i, tid in enumerate([SHARDS, ISSUE]):
        learned = learned.add(tid, f"learned request {i} for the tool", at=i)
        learned = learned.with_vector(tid, *tenant_vector(index, tid, learned.requests(tid)))
    _clear()
    encoder.seen.clear()
    retrieve_with_learned(index, learned, "the cluster is yellow", "show shard allocation")
    assert set(encoder.seen) <= {"the cluster is yellow", "show shard allocation",
                                 index.request_text("the cluster is yellow", "show shard allocation")}


def test_stored_vectors_round_trip_and_a_stale_one_is_not_used(tmp_path):
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = LearnedExamples().add(SHARDS, "cluster yellow", at=1)
    key, vec = tenant_vector(index, SHARDS, learned.requests(SHARDS))
    learned = learned.with_vector(SHARDS, key, vec)
    learned.save(tmp_path / "v1")
    back = LearnedExamples.load(tmp_path / "v1")
    assert back == learned and np.array_equal(back.vector(SHARDS, key), vec)
    assert back.vector(SHARDS, "another-key") is None
    more = back.add(SHARDS, "replica unassigned", at=2)       # its requests changed: the vector is dropped
    assert more.vector(SHARDS, key) is None and more.vectors_stored == 0
    assert tenant_vector(index, ("Nope", "nothing"), ["x"]) is None


def test_the_learned_lexical_channel_lifts_a_tool_by_its_learned_words():
    request = "zorblax the quarterly flurgen"
    learned = LearnedExamples().add(ISSUE, "zorblax the quarterly flurgen report", at=1)
    with_lex = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    without = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(),
                              fusion=dataclasses.replace(with_lex.fusion, w_learned_bm25=0.0))
    rank = lambda hits: next(h.rank for h in hits if h.tool_id == ISSUE)   # noqa: E731
    assert rank(retrieve_with_learned(with_lex, learned, request)) <= rank(retrieve_with_learned(without, learned, request))
    a, b = retrieve_with_learned(with_lex, learned, request), retrieve_with_learned(without, learned, request)
    assert next(h.score for h in a if h.tool_id == ISSUE) > next(h.score for h in b if h.tool_id == ISSUE)
    only_es = Eligibility.of(servers=["Elasticsearch"])
    assert all(h.tool_id.server == "Elasticsearch" for h in retrieve_with_learned(with_lex, learned, request,
                                                                                  eligible=only_es))


def test_a_tenant_keeps_at_most_max_total_learned_requests_oldest_first():
    learned = LearnedExamples(max_total=5)
    for i in range(8):
        learned = learned.add(SHARDS if i % 2 else ISSUE, f"request {i} words differ {i}", at=i)
    assert learned.total == 5
    kept = sorted(e.learned_at for t in learned for e in learned[t])
    assert kept == [3, 4, 5, 6, 7]


def test_without_stored_vectors_a_search_computes_a_bounded_few(monkeypatch):
    """After a catalog change (or an older store), tenant vectors are recomputed a few per search, never
    all of them at once; the rest search with the stale stored vector or the index's own."""
    encoder = CountingEncoder()
    index = ToolIndex.build(tiny_catalog(), encoder=encoder)
    monkeypatch.setattr(learned_mod, "RECOMPUTE_PER_SEARCH", 2)
    learned = LearnedExamples()
    tools = list(index.catalog)
    for i, t in enumerate(tools):
        learned = learned.add(t.id, f"learned words number {i}", at=i)
    _clear()
    encoder.seen.clear()
    retrieve_with_learned(index, learned, "anything at all")
    first = len(encoder.seen)
    retrieve_with_learned(index, learned, "anything at all")
    assert first <= 2 * 8 + 3          # two tools' passages and requests, and the query
    assert len(learned._resolved[2]) == len(tools) - 4   # two per search so far


def test_max_total_is_kept_with_the_examples(tmp_path):
    learned = LearnedExamples(max_total=7).add(SHARDS, "a b c", at=1)
    learned.save(tmp_path / "v")
    assert LearnedExamples.load(tmp_path / "v").max_total == 7


def test_the_lexical_index_is_written_with_the_version_and_read_back(tmp_path):
    import shutil

    learned = LearnedExamples().add(SHARDS, "zorblax shard report", at=1).add(ISSUE, "file a flurgen bug", at=2)
    learned.save(tmp_path / "v1")
    back = LearnedExamples.load(tmp_path / "v1")
    assert back._lexicon is not None                       # read, not built on the first search
    rows, scores = back.lexicon()[0].search("zorblax report", 2)
    assert back.lexicon()[1][int(rows[0])] == SHARDS
    for child in (tmp_path / "v1" / "lexicon").iterdir():  # damaged: built again on first use
        child.write_bytes(b"\x00garbage")
    again = LearnedExamples.load(tmp_path / "v1")
    assert again.lexicon()[1][int(again.lexicon()[0].search("zorblax report", 2)[0][0])] == SHARDS
    shutil.rmtree(tmp_path / "v1" / "lexicon")
    assert LearnedExamples.load(tmp_path / "v1") == learned


def test_learned_requests_of_stop_words_only_give_no_lexical_list():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = LearnedExamples().add(SHARDS, "a the of", at=1)
    assert learned.lexicon()[1] == []
    assert retrieve_with_learned(index, learned, "what is the shard status")   # no crash, hits as usual
