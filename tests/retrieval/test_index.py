"""The hybrid index with the fake encoder: ranking, eligibility, save/load, incremental updates."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId
from retrieval.index.embedded import FORMAT_VERSION, IndexLoadError, IndexSaveError, ToolIndex
from retrieval.index.fusion import FusionConfig

QUERIES = [
    "shard allocation of an index",
    "post a message to a channel",
    "weather forecast for Paris",
    "create an issue in a repository",
    "list pull requests",
]


def ids(hits):
    return [(h.tool_id.server, h.tool_id.tool) for h in hits]


# ---------------------------------------------------------------- ranking


@pytest.mark.parametrize("query, expected", [
    ("shard allocation of an index", [("Elasticsearch", "get_shards")]),
    ("post a message to a channel", [("Slack", "post_message"), ("Slack", "list_channels")]),
    ("weather forecast for Paris", [("Weather", "get_forecast"), ("Weather", "get_alerts")]),
    ("create an issue in a repository", [("GitHub", "create_issue"), ("GitHub", "list_pull_requests")]),
    ("list pull requests", [("GitHub", "list_pull_requests"), ("Slack", "list_channels"),
                            ("Elasticsearch", "list_indices")]),
])
def test_expected_top_ids(index, query, expected):
    assert ids(index.retrieve(query, k=len(expected))) == expected
    assert ids(index.retrieve(query, k=len(expected), stage="bm25")) == expected


def test_hits_carry_both_lists(index):
    hits = index.retrieve("list pull requests", k=3)
    top = hits[0]
    assert (top.rank, top.bm25_rank, top.dense_rank) == (1, 1, 1)
    # fused score = w_bm25 / (k + 1) + w_dense / (k + 1) with the default config
    f = index.fusion
    assert top.score == pytest.approx(f.w_bm25 / (f.k + 1) + f.w_dense / (f.k + 1))
    assert top.bm25_score > 0 and 0 < top.dense_score <= 1.0001
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_bm25_stage_drops_non_matching_tools(index):
    hits = index.retrieve("shard allocation of an index", k=100, stage="bm25")
    assert ids(hits) == [("Elasticsearch", "get_shards")]
    assert hits[0].dense_rank is None


def test_dense_stage_ranks_every_tool(index):
    hits = index.retrieve("shard allocation of an index", k=100, stage="dense")
    assert len(hits) == 8
    assert hits[0].tool_id == ToolId("Elasticsearch", "get_shards")
    assert all(h.bm25_rank is None for h in hits)


def test_need_joins_the_query(index):
    assert ToolIndex.query_text("hi", "post a message") == "hi\npost a message"
    assert ToolIndex.query_text("hi", "  ") == "hi"
    hits = index.retrieve("can you help me", "post a message to a channel", k=1)
    assert ids(hits) == [("Slack", "post_message")]


def test_query_vector_skips_the_encoder(index, encoder):
    qv = index.embed_query("weather forecast for Paris")
    before = encoder.calls
    hits = index.retrieve("weather forecast for Paris", k=2, query_vector=qv)
    assert encoder.calls == before
    assert ids(hits) == ids(index.retrieve("weather forecast for Paris", k=2))
    index.retrieve("weather forecast", k=2, stage="bm25")
    assert encoder.calls == before + 1          # only the call without a vector embedded the query


def test_a_zero_dense_weight_gives_the_bm25_order(catalog, encoder):
    idx = ToolIndex.build(catalog, encoder=encoder, fusion=FusionConfig(w_dense=0.0))
    q = "list pull requests"
    assert ids(idx.retrieve(q, k=100)) == ids(idx.retrieve(q, k=100, stage="bm25"))


def test_k_is_clamped_for_small_catalogs(index):
    hits = index.retrieve("list", k=100)
    assert len(hits) == 8
    assert [h.rank for h in hits] == list(range(1, 9))
    assert len(index.retrieve("list", k=100, eligible=Eligibility.of(servers=["Weather"]))) == 2


@pytest.mark.parametrize("request_", ["", "   ", None])
def test_empty_request_is_rejected(index, request_):
    with pytest.raises(ValueError, match="request must be a non-empty string"):
        index.retrieve(request_)


def test_k_below_one_is_rejected(index):
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        index.retrieve("list", k=0)


def test_empty_catalog_gives_empty_results(encoder, tmp_path):
    idx = ToolIndex.build(Catalog(), encoder=encoder)
    assert idx.retrieve("anything") == []
    idx.save(tmp_path / "empty")
    loaded = ToolIndex.load(tmp_path / "empty", encoder=HashEncoder())
    assert len(loaded.catalog) == 0 and loaded.retrieve("anything") == []


# ---------------------------------------------------------------- eligibility


def crowded_catalog() -> Catalog:
    """Ten 'Billing' tools beat every 'Books' tool on an invoice query."""
    tools = [Tool("Billing", f"invoice_{i}", f"Create invoice number {i} for a customer") for i in range(10)]
    tools += [Tool("Books", f"ledger_{i}", f"Record an invoice in ledger {i}") for i in range(4)]
    return Catalog(tools)


@pytest.mark.parametrize("stage", ["bm25", "dense", "hybrid"])
def test_an_organisation_gets_its_own_best_k(encoder, stage):
    # depth=1: each list is read only k deep, so a filter applied after a global search
    # would find no Books tool at all.
    idx = ToolIndex.build(crowded_catalog(), encoder=encoder, fusion=FusionConfig(depth=1))
    q = "create an invoice for a customer"
    global_top = idx.retrieve(q, k=3, stage=stage)
    assert {h.tool_id.server for h in global_top} == {"Billing"}
    assert [h for h in global_top if h.tool_id.server == "Books"] == []   # post-filtering: 0 of 3
    own = idx.retrieve(q, k=3, stage=stage, eligible=Eligibility.of(servers=["Books"]))
    assert len(own) == 3
    assert {h.tool_id.server for h in own} == {"Books"}


def spy_on_stages(idx, monkeypatch):
    """Record the tool rows each underlying search returns."""
    seen: dict[str, list[int]] = {"bm25": [], "dense": []}
    for name, attr in (("bm25", "_bm25"), ("dense", "_dense")):
        inner = getattr(idx, attr)
        original = inner.search

        def wrapped(*args, _orig=original, _name=name, **kwargs):
            rows, scores = _orig(*args, **kwargs)
            seen[_name].extend(int(r) for r in rows)
            return rows, scores

        monkeypatch.setattr(inner, "search", wrapped)
    return seen


@pytest.mark.parametrize("eligible", [
    Eligibility.of(servers=["Slack", "Weather"]),
    Eligibility.of(tools=[("GitHub", "create_issue"), ("Slack", "list_channels")]),
    Eligibility.of(servers=["GitHub"], tools=[("GitHub", "list_pull_requests"), ("Slack", "post_message")]),
])
def test_an_ineligible_tool_never_appears_in_any_stage(index, monkeypatch, eligible):
    seen = spy_on_stages(index, monkeypatch)
    allowed = {t.id for t in index.catalog if eligible.allows(t.id)}
    for q in QUERIES:
        for stage in ("bm25", "dense", "hybrid"):
            hits = index.retrieve(q, k=100, eligible=eligible, stage=stage)
            assert {h.tool_id for h in hits} <= allowed
            if stage != "bm25":
                assert {h.tool_id for h in hits} == allowed      # dense reaches every eligible tool
    rows_seen = {index.catalog.tools[r].id for r in seen["bm25"] + seen["dense"]}
    assert seen["bm25"] and seen["dense"]
    assert rows_seen <= allowed


def test_unknown_or_empty_eligibility_gives_nothing(index):
    assert index.retrieve("list", eligible=Eligibility.of(servers=["Nope"])) == []
    assert index.retrieve("list", eligible=Eligibility.of(servers=[])) == []
    assert index.retrieve("list", eligible=Eligibility.of(tools=[("Nope", "x")])) == []


def test_unrestricted_eligibility_equals_none(index):
    for q in QUERIES:
        assert ids(index.retrieve(q, k=5, eligible=Eligibility())) == ids(index.retrieve(q, k=5))


# ---------------------------------------------------------------- save / load


def test_save_load_round_trip(index, tmp_path):
    path = index.save(tmp_path / "idx")
    assert path == tmp_path / "idx"
    loaded = ToolIndex.load(path, encoder=HashEncoder())
    assert [t.id for t in loaded.catalog] == [t.id for t in index.catalog]
    assert loaded.catalog.server_descriptions == index.catalog.server_descriptions
    assert loaded.version == index.version
    assert loaded.fusion == index.fusion
    elig = Eligibility.of(servers=["Slack", "GitHub"])
    for q in QUERIES:
        for stage in ("bm25", "dense", "hybrid"):
            assert loaded.retrieve(q, k=8, stage=stage) == index.retrieve(q, k=8, stage=stage)
        assert loaded.retrieve(q, k=3, eligible=elig) == index.retrieve(q, k=3, eligible=elig)


def test_manifest(index, tmp_path):
    index.save(tmp_path / "idx")
    m = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert m["format_version"] == FORMAT_VERSION
    assert isinstance(m["package_version"], str) and m["package_version"]
    assert m["embedding_model"] == HashEncoder.name
    assert m["embedding_dim"] == HashEncoder.dim
    assert m["counts"] == {"servers": 4, "tools": 8, "passages": 8}
    assert m["tools"] == {f"{t.server}\t{t.name}": t.content_hash() for t in index.catalog}
    assert len(m["tools"]) == 8


def test_loading_re_embeds_nothing(index, tmp_path):
    index.save(tmp_path / "idx")
    enc = HashEncoder()
    loaded = ToolIndex.load(tmp_path / "idx", encoder=enc)
    assert enc.calls == 0
    slack = index.catalog.server_tools("Slack")
    assert loaded.upsert_server("Slack", "Team chat", slack) == 0
    assert enc.calls == 0


def test_save_is_atomic_and_overwrites(index, tmp_path):
    index.save(tmp_path / "idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    index.upsert_server("Jira", "Issue tracker", [Tool("Jira", "create_ticket", "Create a ticket")])
    index.save(tmp_path / "idx")                                    # overwrite the existing folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]   # no temp or old folder left
    loaded = ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())
    assert ToolId("Jira", "create_ticket") in loaded.catalog
    assert loaded.version == index.version


def test_a_failed_save_keeps_the_old_index(index, tmp_path, monkeypatch):
    index.save(tmp_path / "idx")
    index.remove_server("Slack")

    def broken(directory):
        raise OSError("disk full")

    monkeypatch.setattr(index._bm25, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        index.save(tmp_path / "idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    old = ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())
    assert "Slack" in old.catalog.servers


def test_save_refuses_to_replace_what_is_not_an_index(index, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(IndexSaveError, match=r"mine exists and is not a toolrank index; .*new or empty folder"):
        index.save(folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("keep me too")
    with pytest.raises(IndexSaveError, match="is not a toolrank index"):
        index.save(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    index.save(tmp_path / "empty")                                   # an empty folder is fine
    assert (tmp_path / "empty" / "manifest.json").exists()


def test_load_corrupt_tool_table(index, tmp_path):
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "tools.jsonl").write_text('{"name": "no server"}\n')
    with pytest.raises(IndexLoadError, match=r"corrupt tool table \(KeyError"):
        ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())


def test_load_missing_folder(tmp_path):
    with pytest.raises(IndexLoadError, match=r"nope is not a toolrank index \(no manifest.json\); build one"):
        ToolIndex.load(tmp_path / "nope", encoder=HashEncoder())


def test_load_missing_manifest(index, tmp_path):
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").unlink()
    with pytest.raises(IndexLoadError, match="no manifest.json"):
        ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())


def test_load_invalid_manifest(index, tmp_path):
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").write_text("{not json")
    with pytest.raises(IndexLoadError, match=r"manifest.json: invalid JSON"):
        ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())


def test_load_wrong_format_version(index, tmp_path):
    index.save(tmp_path / "idx")
    mpath = tmp_path / "idx" / "manifest.json"
    m = json.loads(mpath.read_text())
    m["format_version"] = FORMAT_VERSION + 1
    mpath.write_text(json.dumps(m))
    with pytest.raises(IndexLoadError, match=rf"index format {FORMAT_VERSION + 1} is not {FORMAT_VERSION}; rebuild it"):
        ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())


def test_load_wrong_embedding_model(index, tmp_path):
    class OtherEncoder(HashEncoder):
        name = "other-encoder"

    index.save(tmp_path / "idx")
    with pytest.raises(IndexLoadError, match=r"embedded with 'hash-encoder-test', not 'other-encoder'; rebuild it"):
        ToolIndex.load(tmp_path / "idx", encoder=OtherEncoder())


@pytest.mark.parametrize("missing", ["vectors.npy", "tools.jsonl", "owner.npy", "servers.json"])
def test_load_incomplete_folder(index, tmp_path, missing):
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / missing).unlink()
    with pytest.raises(IndexLoadError, match=rf"incomplete index, missing {missing}; rebuild it"):
        ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())


def test_index_load_error_is_a_value_error():
    assert issubclass(IndexLoadError, ValueError)


# ---------------------------------------------------------------- incremental updates


@pytest.fixture
def index_with_examples(encoder):
    cat = tiny_catalog().with_examples({
        ToolId("Slack", "post_message"): ["send hi to #general", "tell the team lunch is here"],
        ToolId("Slack", "list_channels"): ["which channels exist"],
    })
    return ToolIndex.build(cat, encoder=encoder)


def test_build_embeds_every_passage_once(index_with_examples, encoder):
    # 8 tool cards + 3 example requests
    assert encoder.calls == 11


def test_a_tool_vector_is_the_centroid_of_its_passages(index_with_examples):
    from retrieval.index.text import tool_passages

    idx = index_with_examples
    for tid in (ToolId("Slack", "post_message"), ToolId("GitHub", "create_issue")):
        vecs = HashEncoder().encode(tool_passages(idx.catalog[tid]))
        centroid = vecs.mean(0)
        row = idx.catalog.tools.index(idx.catalog[tid])
        assert idx._dense.vectors[row] == pytest.approx(centroid / np.linalg.norm(centroid), abs=1e-6)


def test_upsert_re_embeds_only_the_changed_tool(index_with_examples, encoder):
    idx = index_with_examples
    before, version = encoder.calls, idx.version
    post, channels = idx.catalog.server_tools("Slack")
    changed = Tool("Slack", "post_message", "Send a direct message to a person", None, "Team chat", post.examples)
    assert idx.upsert_server("Slack", "Team chat", [changed, channels]) == 1
    assert encoder.calls - before == 3                     # its card and its two examples, nothing else
    assert idx.version == version + 1
    assert idx.catalog[ToolId("Slack", "post_message")].description == "Send a direct message to a person"
    assert ids(idx.retrieve("direct message to a person", k=1)) == [("Slack", "post_message")]
    assert len(idx.catalog) == 8


def test_upsert_with_a_new_server_description_re_embeds_its_tools(index, encoder):
    before = encoder.calls
    assert index.upsert_server("Slack", "Chat for teams", index.catalog.server_tools("Slack")) == 2
    assert encoder.calls - before == 2
    assert index.catalog.server_descriptions["Slack"] == "Chat for teams"
    assert all(t.server_description == "Chat for teams" for t in index.catalog.server_tools("Slack"))


def test_upsert_adds_a_new_server(index, encoder):
    before = encoder.calls
    new = [Tool("anything", "create_ticket", "Create a Jira ticket"), Tool("", "search_tickets", "Search Jira tickets")]
    assert index.upsert_server("Jira", "Issue tracker", new) == 2
    assert encoder.calls - before == 2
    assert index.catalog.servers[-1] == "Jira"
    assert {t.id for t in index.catalog.server_tools("Jira")} == {ToolId("Jira", "create_ticket"),
                                                                     ToolId("Jira", "search_tickets")}
    assert index.catalog.server_descriptions["Jira"] == "Issue tracker"
    assert ids(index.retrieve("search jira tickets", k=1)) == [("Jira", "search_tickets")]
    assert len(index.catalog) == 10


def test_upsert_can_drop_a_tool(index):
    post = index.catalog[ToolId("Slack", "post_message")]
    assert index.upsert_server("Slack", "Team chat", [post]) == 0
    assert ToolId("Slack", "list_channels") not in index.catalog
    assert all(h.tool_id != ToolId("Slack", "list_channels") for h in index.retrieve("list channels", k=100))


def test_remove_server(index):
    version = index.version
    assert index.remove_server("Slack") == 2
    assert index.version == version + 1
    assert "Slack" not in index.catalog.servers
    assert "Slack" not in index.catalog.server_descriptions
    assert len(index.catalog) == 6
    assert all(h.tool_id.server != "Slack" for h in index.retrieve("post a message to a channel", k=100))


def test_remove_unknown_server(index):
    version = index.version
    assert index.remove_server("Nope") == 0
    assert index.version == version
    assert len(index.catalog) == 8


def test_upsert_duplicate_tool_names(index, encoder):
    version, before = index.version, encoder.calls
    with pytest.raises(CatalogError, match="server 'Jira': duplicate tool name 'create_ticket'"):
        index.upsert_server("Jira", "", [Tool("Jira", "create_ticket", "a"), Tool("Jira", "create_ticket", "b")])
    assert index.version == version and encoder.calls == before
    assert "Jira" not in index.catalog.servers


def test_updates_survive_save_and_load(index, tmp_path):
    index.upsert_server("Jira", "Issue tracker", [Tool("Jira", "create_ticket", "Create a ticket")])
    index.remove_server("Weather")
    index.save(tmp_path / "idx")
    loaded = ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())
    assert loaded.version == index.version
    assert loaded.catalog.servers == index.catalog.servers
    for q in QUERIES + ["create a ticket"]:
        assert loaded.retrieve(q, k=5) == index.retrieve(q, k=5)


def test_readers_see_a_whole_index_during_updates(index):
    errors: list[BaseException] = []
    stop = threading.Event()
    jira = [Tool("Jira", "create_ticket", "Create a ticket")]

    def read():
        try:
            while not stop.is_set():
                hits = index.retrieve("create a ticket", k=100)
                assert len(hits) in (8, 9)
                assert len({h.tool_id for h in hits}) == len(hits)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=read)
    t.start()
    for _ in range(10):
        index.upsert_server("Jira", "Issue tracker", jira)
        index.remove_server("Jira")
    stop.set()
    t.join()
    assert errors == []
    assert index.version == 21
    assert len(index.catalog) == 8
