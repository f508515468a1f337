"""The Qdrant backend: parity with the embedded backend and bm25s, eligibility in the engine,
tenants, versions, incremental updates, the write lock and bad configuration.

Every test runs against Qdrant's embedded local mode (``:memory:``); with ``QDRANT_URL`` set
(e.g. ``docker run -p 6333:6333 qdrant/qdrant``, then ``QDRANT_URL=http://localhost:6333``)
the same tests also run against that server, each in its own collection.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections import Counter

import numpy as np
import pytest
from qdrant_client import models

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.bm25 import BM25Index, tokenize
from retrieval.index.embedded import IndexLoadError, IndexSaveError, ToolIndex
from retrieval.index.qdrant.collection import QdrantCollection
from retrieval.index.qdrant.index import QdrantToolIndex
from retrieval.index.qdrant.schema import LIVE, LOCK_ID, PUBLIC, QdrantConfig, QdrantLockTimeout, QdrantUnavailable
from retrieval.index.qdrant.state import tool_point
from retrieval.index.text import tool_document

SERVER = os.environ.get("QDRANT_URL")
QUERIES = ["list the shards of an index", "post a message to the slack channel", "severe weather alerts",
           "create an issue in the repository", "forecast for Lisbon", "pull requests"]


class Qdrant:
    """Makes collections in local mode or on the server; ``replica`` opens another process's view."""

    def __init__(self, mode: str):
        self.mode = mode
        self.made: list[QdrantConfig] = []

    def config(self, **kw) -> QdrantConfig:
        name = f"toolrank-test-{uuid.uuid4().hex[:12]}"
        if self.mode == "local":
            cfg = QdrantConfig(path=":memory:", collection=name, **kw)
        else:
            cfg = QdrantConfig(url=SERVER, api_key=os.environ.get("QDRANT_API_KEY"), collection=name, **kw)
        self.made.append(cfg)
        return cfg

    def build(self, catalog=None, encoder=None, **kw) -> QdrantToolIndex:
        cfg_kw = {k: kw.pop(k) for k in ("idf", "keep_versions", "lock_wait_s", "lock_lease_s") if k in kw}
        return QdrantToolIndex.build(catalog if catalog is not None else tiny_catalog(),
                                     config=self.config(**cfg_kw), encoder=encoder or HashEncoder(), **kw)

    def replica(self, index: QdrantToolIndex) -> QdrantToolIndex:
        # Local mode keeps the collection in one client; a server is reached with a new client.
        target = index.collection if self.mode == "local" else QdrantCollection.connect(index.collection.config)
        return QdrantToolIndex.open(target, encoder=index.encoder)


@pytest.fixture(params=["local", pytest.param("server", marks=pytest.mark.skipif(
    not SERVER, reason="set QDRANT_URL to run the Qdrant tests against a server"))])
def qdrant(request):
    q = Qdrant(request.param)
    yield q
    if q.mode == "server":
        for cfg in q.made:
            QdrantCollection.connect(cfg).drop()


def tool_points(index: QdrantToolIndex) -> dict[str, dict]:
    flt = models.Filter(must=[models.FieldCondition(key="kind", match=models.MatchValue(value="tool"))])
    return {str(p.id): dict(p.payload) for p in index.collection.scroll(flt)}


def ties_apart(hits, attr: str = "score") -> list[tuple[float, frozenset]]:
    """Hits as (score, ids) groups: equal scores may come in either order."""
    groups: dict[float, set] = {}
    for h in hits:
        groups.setdefault(round(getattr(h, attr), 5), set()).add(h.tool_id)
    return sorted(((s, frozenset(ids)) for s, ids in groups.items()), key=lambda g: -g[0])


# ------------------------------------------------------------------ parity


@pytest.mark.parametrize("idf", ["client", "engine"])
def test_bm25_scores_are_bm25s_scores_over_the_whole_catalog(qdrant, idf):
    catalog = tiny_catalog()
    index = qdrant.build(catalog, idf=idf)
    reference = BM25Index.build([tool_document(t) for t in catalog.tools])
    for query in QUERIES:
        expected = reference.scores(query)
        hits = index.retrieve(query, stage="bm25", k=100)
        got = {h.tool_id: h.bm25_score for h in hits}
        want = {t.id: float(s) for t, s in zip(catalog.tools, expected) if s > 0}
        assert got.keys() == want.keys(), query
        np.testing.assert_allclose([got[t] for t in want], list(want.values()), rtol=1e-5)


def reference_bm25(catalog: Catalog, query: str, allowed: set[str], avgdl: float, k1=1.2, b=0.75) -> dict:
    """BM25 (Lucene weights) whose IDF counts only the allowed servers' tools; avgdl given."""
    docs = {t.id: tokenize([tool_document(t)])[0] for t in catalog.tools if t.server in allowed}
    n = len(docs)
    df = Counter(term for d in docs.values() for term in set(d))
    q = Counter(tokenize([query])[0])
    out = {}
    for tid, d in docs.items():
        tf = Counter(d)
        s = sum(c * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
                for t, c in q.items() if tf[t])
        if s > 0:
            out[tid] = s
    return out


@pytest.mark.parametrize("idf", ["client", "engine"])
def test_restricted_bm25_counts_only_the_eligible_tools(qdrant, idf):
    catalog = tiny_catalog()
    index = qdrant.build(catalog, idf=idf)
    allowed = {"GitHub", "Slack"}
    for query in QUERIES:
        hits = index.retrieve(query, eligible=Eligibility.of(servers=allowed), stage="bm25")
        want = reference_bm25(catalog, query, allowed, index.avgdl)
        got = {h.tool_id: h.bm25_score for h in hits}
        assert got.keys() == want.keys(), query
        np.testing.assert_allclose([got[t] for t in want], list(want.values()), rtol=1e-5)
    # and the whole-catalog IDF would have given other numbers (so the test can tell them apart)
    whole = reference_bm25(catalog, "list the channels", set(catalog.servers), index.avgdl)
    part = reference_bm25(catalog, "list the channels", allowed, index.avgdl)
    assert whole[ToolId("Slack", "list_channels")] != pytest.approx(part[ToolId("Slack", "list_channels")])


def test_hybrid_matches_the_embedded_backend(qdrant):
    catalog, encoder = tiny_catalog(), HashEncoder()
    embedded = ToolIndex.build(catalog, encoder=encoder)
    index = qdrant.build(catalog, encoder=encoder)
    for query in QUERIES:
        for stage in ("bm25", "dense"):
            a = embedded.retrieve(query, stage=stage)
            b = index.retrieve(query, stage=stage)
            assert ties_apart(a) == ties_apart(b), (query, stage)
        a, b = embedded.retrieve(query), index.retrieve(query)
        assert [h.tool_id for h in a][:1] == [h.tool_id for h in b][:1]
        assert sorted(round(h.score, 6) for h in a) == sorted(round(h.score, 6) for h in b)


def test_pipeline_and_evaluation_take_the_qdrant_index(qdrant):
    from retrieval.evaluation.harness import Query, evaluate
    from retrieval.pipeline.flow import load_pipeline

    index = qdrant.build()
    pipe = load_pipeline(index, model_dir=False, public_suggestions=False)
    res = pipe.search("post a message to the slack channel", eligible=Eligibility.of(servers=["Slack", "GitHub"]))
    assert res.tools and res.tools[0].tool_id == ToolId("Slack", "post_message")
    assert all(t.tool_id.server in ("Slack", "GitHub") for t in res.tools)
    report = evaluate(index, [Query("1", "severe weather alerts", ToolId("Weather", "get_alerts"))])
    assert report["stages"]["hybrid"]["top1"] == 1.0


# ------------------------------------------------------------------ eligibility


def test_eligibility_is_applied_inside_both_searches(qdrant):
    index = qdrant.build()
    only_slack = Eligibility.of(servers=["Slack"])
    for stage in ("bm25", "dense", "hybrid"):
        hits = index.retrieve("list the shards of an index", eligible=only_slack, stage=stage)
        assert hits and {h.tool_id.server for h in hits} == {"Slack"}
    one_tool = Eligibility.of(servers=["GitHub", "Slack"], tools=[("GitHub", "create_issue"), ("Weather", "get_alerts")])
    assert [h.tool_id for h in index.retrieve("create an issue", eligible=one_tool)] == [ToolId("GitHub", "create_issue")]
    assert index.retrieve("anything", eligible=Eligibility.of(servers=["Nope"])) == []
    assert len(index.retrieve("list", k=3)) == 3 and len(index.retrieve("list", k=500)) == 8


# ------------------------------------------------------------------ tenants


def private_tools(*names: str) -> list[Tool]:
    texts = {"search_wiki": "Search the internal wiki pages", "deploy_service": "Deploy a service to the cluster",
             "rollback": "Roll back a deployment of a service", "create_issue": "Create a ticket in our tracker"}
    return [Tool("", n, texts[n]) for n in names]


def test_two_tenants_with_the_same_server_name_never_see_each_other(qdrant):
    index = qdrant.build()
    acme, globex = index.tenant_view("acme"), index.tenant_view("globex")
    acme.upsert_server("Internal", "acme's tools", private_tools("search_wiki"))
    globex.upsert_server("Internal", "globex's tools", private_tools("deploy_service", "rollback"))
    acme.refresh()
    assert [t.name for t in acme.catalog.server_tools("Internal")] == ["search_wiki"]
    assert [t.name for t in globex.catalog.server_tools("Internal")] == ["deploy_service", "rollback"]
    shared = qdrant.replica(index)
    assert "Internal" not in shared.catalog.servers
    for view in (acme, acme.tenant_view("acme")):
        for eligible in (None, Eligibility.of(servers=["Internal"])):
            for stage in ("bm25", "dense", "hybrid"):
                hits = view.retrieve("deploy the service, roll back the deployment", eligible=eligible, stage=stage)
                assert {h.tool_id.tool for h in hits if h.tool_id.server == "Internal"} <= {"search_wiki"}
    hits = globex.retrieve("deploy the service", eligible=Eligibility.of(servers=["Internal"]))
    assert hits[0].tool_id == ToolId("Internal", "deploy_service")
    # stored once each, with its owner
    internal = [p for p in tool_points(index).values() if p["server"] == "Internal" and p["v_to"] == LIVE]
    assert Counter((p["owner"], p["tool"]) for p in internal) == Counter(
        {("acme", "search_wiki"): 1, ("globex", "deploy_service"): 1, ("globex", "rollback"): 1})
    # a tenant removes only its own
    assert globex.remove_server("Internal") == 2
    acme.refresh()
    assert [t.name for t in acme.catalog.server_tools("Internal")] == ["search_wiki"]


def test_a_private_server_shadows_a_shared_one_of_the_same_name(qdrant):
    index = qdrant.build()
    acme = index.tenant_view("acme")
    acme.upsert_server("GitHub", "acme's own tracker", private_tools("create_issue"))
    assert [t.description for t in acme.catalog.server_tools("GitHub")] == ["Create a ticket in our tracker"]
    hits = acme.retrieve("list pull requests of a repository", eligible=Eligibility.of(servers=["GitHub"]))
    assert [h.tool_id for h in hits] == [ToolId("GitHub", "create_issue")]
    assert len(qdrant.replica(index).catalog.server_tools("GitHub")) == 2   # others still see the shared one


@pytest.mark.parametrize("idf", ["client", "engine"])
def test_statistics_do_not_cross_tenants(qdrant, idf):
    index = qdrant.build(idf=idf)
    acme, globex = index.tenant_view("acme"), index.tenant_view("globex")
    query = "list the channels and post a message"

    def scores(view):
        return {h.tool_id: (h.bm25_score, h.dense_score) for h in view.retrieve(query, k=100)}

    before = scores(acme)
    slack_before = scores(globex)[ToolId("Slack", "list_channels")][0]
    # globex adds a server full of the query's terms: globex's own statistics move, acme's must not
    globex.upsert_server("Chat", "team chat", [Tool("", f"list_channels_{i}", "List the channels; post a message")
                                               for i in range(5)])
    acme.refresh()
    assert acme.version == globex.version == 2
    assert scores(acme) == before
    assert scores(globex)[ToolId("Slack", "list_channels")][0] < slack_before


# ------------------------------------------------------------------ updates and versions


def test_an_upsert_touches_only_that_servers_points(qdrant, caplog):
    encoder = HashEncoder()
    index = qdrant.build(encoder=encoder)
    pinned = qdrant.replica(index)
    before = tool_points(index)
    slack = index.catalog.server_tools("Slack")
    changed = [slack[0], Tool("Slack", slack[1].name, "List every channel of a workspace")]
    calls = encoder.calls
    assert index.upsert_server("Slack", "Team chat", changed) == 1
    assert encoder.calls - calls == 1          # one tool embedded again
    after = tool_points(index)
    for pid, payload in before.items():
        if payload["server"] != "Slack":
            assert after[pid] == payload       # not written at all
    old_id = next(pid for pid, p in before.items() if p["tool"] == "list_channels")
    kept_id = next(pid for pid, p in before.items() if p["tool"] == "post_message")
    new = [pid for pid in after if pid not in before]
    assert after[kept_id]["v_to"] == LIVE and after[old_id]["v_to"] == 2
    assert len(new) == 1 and after[new[0]]["v_from"] == 2 and after[new[0]]["tool"] == "list_channels"
    assert index.version == 2
    assert index.catalog[ToolId("Slack", "list_channels")].description == "List every channel of a workspace"
    assert index.upsert_server("Slack", "Team chat", changed) == 0 and index.version == 2   # nothing changed
    # each version's search sees its own point of the changed tool, never the other's
    for view, version in ((index, 2), (pinned, 1)):
        hits = view.retrieve("list every channel of a workspace", k=100)
        assert view.version == version and len(hits) == 8 and len({h.tool_id for h in hits}) == 8
    assert "unknown at version" not in caplog.text


def test_a_replica_keeps_its_version_until_refreshed_then_sees_the_change(qdrant):
    index = qdrant.build()
    replica = qdrant.replica(index)
    slack = index.catalog.server_tools("Slack")
    index.upsert_server("Slack", "Team chat", slack + [Tool("Slack", "send_dm", "Send a direct message to a user")])
    query = "send a direct message to a user"
    assert replica.version == 1
    assert ToolId("Slack", "send_dm") not in {h.tool_id for h in replica.retrieve(query)}
    assert len(replica.retrieve(query, k=100)) == 8     # version 1, whole
    assert replica.refresh() is True and replica.version == 2 and replica.refresh() is False
    assert replica.retrieve(query)[0].tool_id == ToolId("Slack", "send_dm")
    assert replica.remove_server("Weather") == 2         # a replica can write too; the writer then catches up
    assert index.refresh() and "Weather" not in index.catalog.servers and index.version == 3
    assert all(h.tool_id.server != "Weather" for h in index.retrieve("weather forecast", k=100))


def test_writers_that_start_from_an_old_version_lose_nothing(qdrant):
    index = qdrant.build()
    stale = qdrant.replica(index)
    index.upsert_server("Jira", "Tickets", [Tool("", "create_ticket", "Create a ticket")])
    stale.upsert_server("Notion", "Pages", [Tool("", "create_page", "Create a page")])    # built on version 2
    index.refresh()
    for view in (index, stale, qdrant.replica(index)):
        assert view.version == 3 and {"Jira", "Notion", "Slack"} <= set(view.catalog.servers)


def test_old_versions_are_collected_and_a_far_behind_replica_reloads(qdrant):
    index = qdrant.build(keep_versions=2)
    behind = qdrant.replica(index)
    for i in range(4):
        index.upsert_server("Slack", "Team chat", [Tool("", "post_message", f"Post a message, take {i}")])
    live = [p for p in tool_points(index).values() if p["server"] == "Slack"]
    assert sorted(p["v_to"] for p in live) == [5, LIVE]   # versions 4 and 5 readable, older points gone
    assert behind.refresh() and behind.version == 5
    assert [t.description for t in behind.catalog.server_tools("Slack")] == ["Post a message, take 3"]
    assert behind.catalog.servers == index.catalog.servers


def test_a_crashed_writers_lock_is_taken_over_and_its_leftovers_undone(qdrant):
    index = qdrant.build(lock_lease_s=5.0)
    coll = index.collection
    ghost = tool_point(  # a point a crashed writer left at version 2
        Tool("Ghost", "boo", "unpublished"), PUBLIC, 2, 0, np.ones(64, np.float32) / 8, ["boo"], index._head,
        index._state.vocab)[0]
    coll.client.upsert(coll.name, points=[ghost, models.PointStruct(id=LOCK_ID, vector={}, payload={
        "kind": "lock", "holder": "crashed", "expires": time.time() - 1})])
    index.upsert_server("Slack", "Team chat", [Tool("", "post_message", "Post a message")])
    assert "Ghost" not in index.catalog.servers
    assert all(p["server"] != "Ghost" for p in tool_points(index).values())
    assert coll.client.retrieve(coll.name, [LOCK_ID])[0].payload["holder"] == ""   # released


def test_a_live_lock_makes_a_writer_wait_then_give_up(qdrant):
    index = qdrant.build(lock_wait_s=0.2)
    coll = index.collection
    coll.client.upsert(coll.name, points=[models.PointStruct(id=LOCK_ID, vector={}, payload={
        "kind": "lock", "holder": "busy", "expires": time.time() + 60})])
    with pytest.raises(QdrantLockTimeout, match="another writer has held the write lock"):
        index.upsert_server("Slack", "Team chat", [])
    assert index.version == 1 and qdrant.replica(index).version == 1


# ------------------------------------------------------------------ building, opening, exporting


def test_build_reuses_an_embedded_index_vectors_and_export_round_trips(qdrant, tmp_path):
    encoder = HashEncoder()
    embedded = ToolIndex.build(tiny_catalog(), encoder=encoder)
    calls = encoder.calls
    index = QdrantToolIndex.from_index(embedded, config=qdrant.config())
    assert encoder.calls == calls                       # nothing embedded again
    assert index.retrieve("severe weather alerts")[0].tool_id == ToolId("Weather", "get_alerts")
    loaded = ToolIndex.load(index.save(tmp_path / "export"), encoder=encoder)
    for query in QUERIES:
        assert ties_apart(loaded.retrieve(query)) == ties_apart(embedded.retrieve(query))


def test_build_refuses_a_collection_that_holds_an_index(qdrant):
    index = qdrant.build()
    with pytest.raises(IndexSaveError, match="already holds a toolrank index.*--recreate"):
        QdrantToolIndex.build(tiny_catalog(), config=index.collection, encoder=HashEncoder())
    index.upsert_server("Jira", "Tickets", [Tool("", "create_ticket", "Create a ticket")])
    again = QdrantToolIndex.build(Catalog([Tool("Solo", "one", "only tool")]), config=index.collection,
                                  encoder=HashEncoder(), recreate=True)
    assert again.catalog.servers == ["Solo"] and again.version == 3   # versions keep rising: replicas move on
    same = QdrantToolIndex.build(tiny_catalog(), config=index.collection, encoder=HashEncoder(), if_absent=True)
    assert same.catalog.servers == ["Solo"]
    old = index.refresh()   # the old object notices the rebuild and reloads everything
    assert old and index.catalog.servers == ["Solo"] and index.version == 3
    assert index.fusion == again.fusion   # the weights the rebuild recorded, too


def test_a_rebuild_with_other_fusion_weights_reaches_every_replica(qdrant):
    from retrieval.index.fusion import FusionConfig

    index = qdrant.build()
    assert index.fusion == FusionConfig.day_one()            # a catalog without example requests
    rich = Catalog([t.with_examples(["an example request"]) for t in tiny_catalog().tools])
    QdrantToolIndex.build(rich, config=index.collection, encoder=HashEncoder(), recreate=True)
    assert index.refresh() and index.fusion == FusionConfig()   # rebuilt with examples: the defaults
    assert index.tenant_view("acme").fusion == FusionConfig()


def test_open_says_what_is_wrong(qdrant):
    cfg = qdrant.config()
    coll = QdrantCollection.connect(cfg)
    with pytest.raises(IndexLoadError, match="holds no toolrank index; build one"):
        QdrantToolIndex.open(coll, encoder=HashEncoder())
    index = QdrantToolIndex.build(tiny_catalog(), config=coll, encoder=HashEncoder())
    other = HashEncoder()
    other.name = "another-encoder"
    with pytest.raises(IndexLoadError, match="embedded with 'hash-encoder-test', not 'another-encoder'"):
        QdrantToolIndex.open(index.collection, encoder=other)
    with pytest.raises(IndexLoadError, match="opened with QdrantToolIndex.open"):
        QdrantToolIndex.load("somewhere")


def test_an_empty_catalog_gives_empty_results(qdrant):
    index = qdrant.build(Catalog([]))
    assert index.retrieve("anything") == [] and index.version == 1


def test_bad_configuration_is_one_clear_line():
    with pytest.raises(ValueError, match="either url= .* or path="):
        QdrantConfig()
    with pytest.raises(ValueError, match="either url="):
        QdrantConfig(url="http://localhost:6333", path=":memory:")
    with pytest.raises(ValueError, match="must start with http"):
        QdrantConfig(url="localhost:6333")
    with pytest.raises(ValueError, match="idf='bm25'"):
        QdrantConfig(path=":memory:", idf="bm25")
    with pytest.raises(ValueError, match="shards=0"):
        QdrantConfig(path=":memory:", shards=0)
    with pytest.raises(QdrantUnavailable) as info:
        QdrantCollection.connect(QdrantConfig(url="http://127.0.0.1:9", timeout_s=2))
    message = str(info.value)
    assert "cannot reach Qdrant at http://127.0.0.1:9" in message and "\n" not in message
    assert "docker run -p 6333:6333 qdrant/qdrant" in message


def test_a_local_folder_is_held_by_one_process_at_a_time(tmp_path):
    cfg = QdrantConfig(path=str(tmp_path / "q"))
    first = QdrantCollection.connect(cfg)
    with pytest.raises(QdrantUnavailable, match="use a server"):
        QdrantCollection.connect(cfg)
    first.client.close()
