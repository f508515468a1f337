"""A tenant's learned examples as an index of its own (issue 36.1): vectors stored at feedback time,
the same bytes whoever embedded first, a lexical channel, a bound per tenant."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index import learned as learned_mod
from retrieval.index.embedded import ToolIndex
from retrieval.index.fusion import FusionConfig
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


def test_the_learned_lexical_list_lifts_a_tool_by_its_learned_words():
    """0.9.0's lexical channel (``learned_lexical="list"``): BM25 over the learned requests alone, fused."""
    request = "zorblax the quarterly flurgen"
    learned = LearnedExamples().add(ISSUE, "zorblax the quarterly flurgen report", at=1)
    listed = dataclasses.replace(FusionConfig(), learned_lexical="list")
    with_lex = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(), fusion=listed)
    without = ToolIndex.build(tiny_catalog(), encoder=HashEncoder(),
                              fusion=dataclasses.replace(listed, w_learned_bm25=0.0))
    rank = lambda hits: next(h.rank for h in hits if h.tool_id == ISSUE)   # noqa: E731
    assert rank(retrieve_with_learned(with_lex, learned, request)) <= rank(retrieve_with_learned(without, learned, request))
    a, b = retrieve_with_learned(with_lex, learned, request), retrieve_with_learned(without, learned, request)
    assert next(h.score for h in a if h.tool_id == ISSUE) > next(h.score for h in b if h.tool_id == ISSUE)
    only_es = Eligibility.of(servers=["Elasticsearch"])
    assert all(h.tool_id.server == "Elasticsearch" for h in retrieve_with_learned(with_lex, learned, request,
                                                                                  eligible=only_es))


def _with_examples(catalog, examples):
    """``catalog`` with ``examples`` (tool -> requests) as the tools' example requests."""
    return Catalog([Tool(t.server, t.name, t.description, t.input_schema, t.server_description,
                         tuple(examples.get(t.id, ()))) for t in catalog.tools], catalog.server_descriptions)


TAUGHT = {ISSUE: ["zorblax the quarterly flurgen report", "file a bug about the flurgen"],
          SHARDS: ["why is my cluster yellow", "replica shards unassigned on node 3"]}


def _taught_lexically(taught=TAUGHT):
    learned, at = LearnedExamples(), 0
    for tid, requests in taught.items():
        for r in requests:
            learned, at = learned.add(tid, r, at=at), at + 1
    return learned


@pytest.mark.parametrize("servers", [None, ["GitHub", "Weather"]])
def test_learned_requests_count_in_their_tools_bm25_document_as_indexed_examples(servers):
    """The default (``learned_lexical="document"``): a taught tool's learned requests are part of its BM25
    document, weighed with the statistics of the catalog so extended: the very scores of a BM25 built over
    the catalog with those requests as the tools' examples (under a tenant's eligibility too)."""
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = _taught_lexically()
    indexed = ToolIndex.build(_with_examples(tiny_catalog(), TAUGHT), encoder=HashEncoder())
    eligible = Eligibility.of(servers=servers) if servers else None
    mask = index._mask(eligible)
    full = np.ones(len(index.catalog.tools), dtype=bool) if mask is None else mask
    bm25, lex_rows, doc_len, _ = learned._document_statistics(index)
    for query in ("zorblax flurgen", "cluster yellow shards", "weather alerts for a region", "nothing matches qqq"):
        got = learned_mod._bm25_with_learned(bm25, learned.lexicon()[0], lex_rows, doc_len, query, mask)
        assert np.array_equal(got, indexed._bm25.scores(query, full))


def test_a_tenant_with_learned_requests_ranks_as_an_index_with_them_as_examples():
    """Lexical and dense alike: the tenant's hits are the hits of an index whose taught tools carry the
    learned requests as example requests (the same lists, so the same fused order)."""
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = _taught_lexically()
    indexed = ToolIndex.build(_with_examples(tiny_catalog(), TAUGHT), encoder=HashEncoder())
    for request, need in (("zorblax the flurgen", None), ("cluster yellow", "list shard allocation"),
                          ("post to the team channel", None)):
        mine = retrieve_with_learned(index, learned, request, need, k=8)
        theirs = indexed.retrieve(request, need, k=8)
        assert [h.tool_id for h in mine] == [h.tool_id for h in theirs]
        assert [h.bm25_rank for h in mine] == [h.bm25_rank for h in theirs]
        assert [h.bm25_score or 0.0 for h in mine] == pytest.approx([h.bm25_score or 0.0 for h in theirs], rel=1e-6)
    assert retrieve_with_learned(index, learned, "zorblax the flurgen")[0].tool_id == ISSUE
    assert ISSUE not in [h.tool_id for h in index.retrieve("zorblax the flurgen", stage="bm25")]


def test_learned_requests_in_the_documents_never_reach_another_tenant():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    before = index.retrieve("zorblax the flurgen report", k=8)
    bm25_before = index._bm25.scores("zorblax the flurgen report").copy()
    retrieve_with_learned(index, _taught_lexically(), "zorblax the flurgen report", k=8)
    assert index.retrieve("zorblax the flurgen report", k=8) == before
    assert np.array_equal(index._bm25.scores("zorblax the flurgen report"), bm25_before)
    assert retrieve_with_learned(index, LearnedExamples(), "zorblax the flurgen report", k=8) == before


@pytest.mark.parametrize("servers", [None, ["GitHub", "Slack"]])
def test_a_catalog_update_right_after_the_bm25_statistics_falls_back_to_the_new_catalogs_bm25(servers):
    """An update between reading the tenant's BM25 statistics and using them: the statistics' rows belong
    to the old catalog, so the search falls back to the index's BM25 over the new one, never crediting a
    tool with another's words (Elasticsearch removed: the old row of create_issue is post_message's now)
    nor failing on a mask of the new catalog's length."""
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = _taught_lexically()
    read = learned._document_statistics

    def then_updated(ix):
        got = read(ix)
        ix.remove_server("Elasticsearch")
        return got

    learned._document_statistics = then_updated
    eligible = Eligibility.of(servers=servers) if servers else None
    hits = retrieve_with_learned(index, learned, "zorblax flurgen post a message", eligible=eligible, k=8)
    plain = {h.tool_id: (h.bm25_rank, h.bm25_score) for h in
             index.retrieve("zorblax flurgen post a message", None, eligible, k=8, stage="bm25")}
    assert hits
    assert {h.tool_id: (h.bm25_rank, h.bm25_score) for h in hits if h.bm25_rank} == plain


def test_forgotten_requests_leave_the_tenants_bm25(tmp_path):
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = _taught_lexically()
    learned.save(tmp_path / "v1")
    forgot, n = LearnedExamples.load(tmp_path / "v1").remove(ISSUE, "zorblax the quarterly flurgen report")
    assert n == 1
    forgot.save(tmp_path / "v2")
    back = LearnedExamples.load(tmp_path / "v2")
    hits = retrieve_with_learned(index, back, "zorblax quarterly", k=8)
    assert all(h.bm25_rank is None for h in hits)   # no document holds those words any more
    for path in (tmp_path / "v2").rglob("*"):
        if path.is_file():
            assert b"zorblax" not in path.read_bytes()


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
    assert len(learned._resolved.pending) == len(tools) - 4   # two per search so far


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


# ------------------------------------------------------------------ the store (format 2) and 0.8.0's

V1 = Path(__file__).resolve().parent.parent / "data" / "learned_v1"   # a version written by 0.8.0 (format 1)
POST = ToolId("Slack", "post_message")


def _v1_copy(tmp_path):
    shutil.copytree(V1, tmp_path / "v1")
    return tmp_path / "v1"


def _taught(index, vectors=(SHARDS, ISSUE)):
    """What tests/data/learned_v1 holds (vectors for two of its three tools), taught again today."""
    learned = (LearnedExamples().add(SHARDS, "why is my cluster yellow", at=1000.5)
               .add(SHARDS, "replica shards unassigned on node 3", at=1001.25)
               .add(ISSUE, "file a bug about the zorblax crash — naïve ünïcode", at=1002)
               .add(ISSUE, "file a bug about the zorblax crash naïve ünïcode", at=1003)
               .add(POST, "tell the team the deploy is done", at=1004))
    for tid in vectors:
        learned = learned.with_vector(tid, *tenant_vector(index, tid, learned.requests(tid)))
    return learned


class RecordingHashEncoder(HashEncoder):   # the name 0.8.0's vectors were made with
    def encode(self, texts, **kw):
        self.seen = [*getattr(self, "seen", []), *texts]
        return super().encode(texts, **kw)


def test_a_version_written_by_0_8_0_is_read_searched_alike_and_rewritten_in_todays_form(tmp_path):
    index = ToolIndex.build(tiny_catalog(), encoder=RecordingHashEncoder())
    old = LearnedExamples.load(_v1_copy(tmp_path))
    today = _taught(index)
    assert dict(old.items()) == dict(today.items()) and old.total == 4
    _clear()
    index.encoder.seen = []
    for request, need in (("cluster shards yellow", None), ("zorblax crash", "file a bug")):
        assert retrieve_with_learned(index, old, request, need) == retrieve_with_learned(index, today, request, need)
    # 0.8.0's stored vectors are used as they are (the tool without one is computed, as then)
    assert not set(index.encoder.seen) & set(old.requests(SHARDS) + old.requests(ISSUE))
    assert set(old.requests(POST)) <= set(index.encoder.seen)
    assert old == today                       # their keys now in today's form
    old.save(tmp_path / "v2")
    names = sorted(p.name for p in (tmp_path / "v2").iterdir())
    assert names == ["learned.json", "lexicon", "requests.jsonl", "vectors.npy"]
    head = json.loads((tmp_path / "v2" / "learned.json").read_text(encoding="utf-8"))
    assert head["format"] == learned_mod.FORMAT == 2 and all(":" in row[3] for row in head["tools"] if row[3])
    back = LearnedExamples.load(tmp_path / "v2")
    assert back == today
    assert retrieve_with_learned(index, back, "zorblax crash", "file a bug") == \
        retrieve_with_learned(index, today, "zorblax crash", "file a bug")


def test_a_search_after_a_restart_reads_no_learned_request(tmp_path, monkeypatch):
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    every = (SHARDS, ISSUE, POST)
    _taught(index, every).save(tmp_path / "v")
    expected = retrieve_with_learned(index, _taught(index, every), "zorblax crash", "file a bug")
    back = LearnedExamples.load(tmp_path / "v")

    def parse(*_a):
        raise AssertionError("a request was parsed")
    monkeypatch.setattr(learned_mod, "_parse_row", parse)
    assert retrieve_with_learned(index, back, "zorblax crash", "file a bug") == expected
    assert SHARDS in back and ("Nope", "x") not in back and len(back) == 3 and back.total == 4
    monkeypatch.undo()
    assert back.requests(ISSUE) == ("file a bug about the zorblax crash naïve ünïcode",)


def test_unchanged_tools_are_written_back_as_read_and_a_removed_request_leaves_no_trace(tmp_path):
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    _taught(index).save(tmp_path / "v1")
    back = LearnedExamples.load(tmp_path / "v1")
    lines = (tmp_path / "v1" / "requests.jsonl").read_bytes().split(b"\n")
    fewer, n = back.remove(SHARDS, "why is my cluster yellow")
    assert n == 1 and fewer.vector(SHARDS, back._vectors[SHARDS][0]) is None   # its requests changed
    assert fewer.vectors_stored == 1                                             # the other tool's stays
    fewer.save(tmp_path / "v2")
    folder = tmp_path / "v2"
    assert b"cluster yellow" not in b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    again = (folder / "requests.jsonl").read_bytes().split(b"\n")
    assert again[1:] == lines[1:] and again[0] != lines[0]
    assert LearnedExamples.load(folder) == fewer


def test_a_damaged_version_is_a_clear_error_and_the_store_serves_the_one_before(tmp_path):
    from serve.index_store import IndexStore

    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    store = IndexStore(tmp_path, LearnedExamples.load, keep=3)
    first = LearnedExamples().add(SHARDS, "cluster yellow", at=1)
    with store.write_lock():
        store.publish(first)
        store.publish(_taught(index))
    v2 = tmp_path / "v2"
    requests = (v2 / "requests.jsonl").read_bytes()
    (v2 / "requests.jsonl").write_bytes(requests.replace(b"yellow", b"yelLow"))
    with pytest.raises(ValueError, match="damaged"):
        LearnedExamples.load(v2)
    version, found, skipped = store.load_newest_readable()
    assert version == 1 and found == first and "damaged" in skipped[0][1]
    (v2 / "requests.jsonl").write_bytes(requests)
    head = (v2 / "learned.json").read_text(encoding="utf-8")
    for text, match in ((head[: len(head) // 2], "invalid JSON"), (head.replace('"format": 2', '"format": 9'), "format 9"),
                        (head.replace(", 2, ", ", 2.5, ", 1), "malformed"), ('{"format": 2}', "malformed")):
        (v2 / "learned.json").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            LearnedExamples.load(v2)
    (v2 / "learned.json").write_text(head, encoding="utf-8")
    (v2 / "requests.jsonl").unlink()
    with pytest.raises(ValueError, match="requests.jsonl"):
        LearnedExamples.load(v2)
    (v2 / "requests.jsonl").write_bytes(requests)
    (v2 / "vectors.npy").write_bytes(b"\x00garbage")          # a cache: recomputed, never fatal
    damaged = LearnedExamples.load(v2)
    assert damaged.vectors_stored == 0 and dict(damaged.items()) == dict(_taught(index).items())
    assert retrieve_with_learned(index, damaged, "zorblax crash")


def test_a_vector_is_stored_only_with_the_requests_it_was_made_for():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = LearnedExamples().add(SHARDS, "cluster yellow", at=1)
    key, vec = tenant_vector(index, SHARDS, ["something else entirely"])
    with pytest.raises(ValueError, match="other learned requests"):
        learned.with_vector(SHARDS, key, vec)
    assert LearnedExamples(learned._tools, vectors={SHARDS: (key, vec)}).vectors_stored == 0


def test_a_tenant_score_is_the_same_whichever_tools_are_eligible():
    """A tool's tenant score does not depend on which other tools are scored with it (nor on the process's
    hash seed, which orders sets): one row's dot product each."""
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    learned = LearnedExamples()
    for i, t in enumerate(index.catalog):
        learned = learned.add(t.id, f"learned words number {i} {t.name}", at=i)
        learned = learned.with_vector(t.id, *tenant_vector(index, t.id, learned.requests(t.id)))
    request = "list the shards and the channels"
    every = {h.tool_id: h.dense_score for h in retrieve_with_learned(index, learned, request)}
    for servers in (["Elasticsearch"], ["Slack", "Weather"], ["GitHub", "Elasticsearch", "Slack"]):
        some = retrieve_with_learned(index, learned, request, eligible=Eligibility.of(servers=servers))
        assert some and all(h.dense_score == every[h.tool_id] for h in some if h.dense_score is not None)


def test_a_tenant_with_learned_requests_searches_a_qdrant_index_its_learned_words_counting_lexically():
    """A Qdrant index keeps its BM25 in the collection (no local term frequencies): the document mode
    cannot extend its documents, so the learned requests count as 0.9.0's list of their own, and the
    search works (it failed with AttributeError: no ``_bm25``)."""
    pytest.importorskip("qdrant_client")
    from retrieval.index.qdrant.index import QdrantToolIndex
    from retrieval.index.qdrant.schema import QdrantConfig

    index = QdrantToolIndex.build(tiny_catalog(), encoder=HashEncoder(),
                                  config=QdrantConfig(path=":memory:", collection="toolrank-test-learned-lexical"))
    assert index.fusion.learned_lexical == "document"
    learned = _taught_lexically()
    request = "zorblax the flurgen"
    assert ISSUE not in [h.tool_id for h in index.retrieve(request, stage="bm25")]
    mine = retrieve_with_learned(index, learned, request, k=8)
    off = dataclasses.replace(index.fusion, w_learned_bm25=0.0)
    index.fusion, on = off, index.fusion
    unlifted = retrieve_with_learned(index, learned, request, k=8)
    index.fusion = on
    score = lambda hits: next(h.score for h in hits if h.tool_id == ISSUE)   # noqa: E731
    assert mine[0].tool_id == ISSUE and score(mine) > score(unlifted)   # the learned list's share
    only_es = Eligibility.of(servers=["Elasticsearch"])
    assert all(h.tool_id.server == "Elasticsearch" for h in retrieve_with_learned(index, learned, request, eligible=only_es))


def test_two_tenants_teaching_the_same_tool_get_the_same_bm25_in_either_order():
    """Document mode: each tenant's BM25 is its own (nothing cached on the shared index), so a tenant's
    hits are the same bytes whether another tenant taught the same tool and searched before or after it;
    a learned tool no longer in the catalog adds nothing to the documents' statistics."""
    queries = [("zorblax the flurgen", None), ("cluster yellow", "list shard allocation")]

    def run(first, second):
        index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
        out = {}
        for name, learned in (first, second):
            out[name] = [retrieve_with_learned(index, learned, r, n, k=8) for r, n in queries]
        return out

    a = ("a", _taught_lexically({ISSUE: ["zorblax the flurgen of doom", "flurgen flurgen flurgen"]}))
    b = ("b", _taught_lexically({ISSUE: ["zorblax the quarterly flurgen report"]}))
    assert run(a, b)["b"] == run(b, a)["b"] == run(("none", LearnedExamples()), b)["b"]
    assert run(a, b)["a"] == run(b, a)["a"]
    gone = _taught_lexically({ISSUE: ["zorblax the quarterly flurgen report"],
                              ToolId("Gone", "vanished"): ["zorblax flurgen " * 50]})
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    assert ([retrieve_with_learned(index, gone, r, n, k=8) for r, n in queries] ==
            run(("none", LearnedExamples()), b)["b"])
