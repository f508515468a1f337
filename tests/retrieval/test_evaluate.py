"""The evaluation harness on the tiny catalog, with ranks checked by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.catalog.model import CatalogError, ToolId
from retrieval.evaluation.harness import Query, draw_organisation, evaluate, format_report, load_queries

# Ranks of each target per stage on the tiny catalog with the hash encoder:
#                                               bm25  dense  hybrid
# q1 "list pull requests" -> GitHub/list_pull_requests    1     1     1
# q2 "list pull requests" -> Elasticsearch/list_indices   3     4     3
# q3 "weather forecast..." -> Weather/get_alerts          2     2     2   (lenient: get_forecast, rank 1)
# q4 "post a message..."  -> Elasticsearch/get_shards     -     8     8   (no shared word: BM25 misses it)
QUERIES = [
    Query("q1", "list pull requests", ToolId("GitHub", "list_pull_requests"), style="function"),
    Query("q2", "list pull requests", ToolId("Elasticsearch", "list_indices"), style="category"),
    Query("q3", "weather forecast for Paris", ToolId("Weather", "get_alerts"), style="category",
          acceptable=(ToolId("Weather", "get_forecast"),)),
    Query("q4", "post a message to a channel", ToolId("Elasticsearch", "get_shards"), style="function"),
]


def test_per_query_ranks(index):
    rows: list = []
    evaluate(index, QUERIES, per_query=rows)
    strict = [{k: v for k, v in r.items() if not k.endswith("_lenient")} for r in rows]
    assert strict == [
        {"id": "q1", "style": "function", "bm25": 1, "dense": 1, "hybrid": 1},
        {"id": "q2", "style": "category", "bm25": 3, "dense": 4, "hybrid": 3},
        {"id": "q3", "style": "category", "bm25": 2, "dense": 2, "hybrid": 2},
        {"id": "q4", "style": "function", "bm25": None, "dense": 8, "hybrid": 8},
    ]
    # lenient: any acceptable tool counts, so never worse than strict
    for r in rows:
        for stage in ("bm25", "dense", "hybrid"):
            assert r[f"{stage}_lenient"] is not None or r[stage] is None
            assert r[stage] is None or r[f"{stage}_lenient"] <= r[stage]


def test_metrics(index):
    report = evaluate(index, QUERIES)
    assert report["n"] == 4 and report["org_size"] is None and report["seed"] == 0
    assert report["use_need"] is False and report["examples"] is True
    h = report["stages"]["hybrid"]
    assert (h["top1"], h["top5"], h["top20"], h["recall100"]) == (0.25, 0.75, 1.0, 1.0)
    assert (h["top1_lenient"], h["top5_lenient"]) == (0.5, 0.75)        # q3 counts at rank 1 leniently
    assert h["by_style"] == {"category": {"top1": 0.0, "top5": 1.0, "n": 2},
                             "function": {"top1": 0.5, "top5": 0.5, "n": 2}}
    b = report["stages"]["bm25"]
    assert (b["top1"], b["top5"], b["top20"], b["recall100"]) == (0.25, 0.75, 0.75, 0.75)
    d = report["stages"]["dense"]
    assert (d["top1"], d["top5"], d["top20"]) == (0.25, 0.75, 1.0)


def test_scorer_stage_uses_the_reranker(index):
    seen = []

    def reverse(request, need, hits, eligible):
        seen.append(len(hits))
        return [h.tool_id for h in reversed(hits)]

    rows: list = []
    report = evaluate(index, QUERIES, stages=("hybrid", "scorer"), reranker=reverse, per_query=rows)
    assert [r["scorer"] for r in rows] == [8, 6, 7, 1]
    assert report["stages"]["scorer"]["top1"] == 0.25
    assert seen == [8, 8, 8, 8]
    # Question by question: the reversed list wins q4 and loses q1 against the hybrid.
    paired = report["paired_top1"]
    assert paired["stage"] == "scorer" and list(paired["against"]) == ["hybrid"]
    vs = paired["against"]["hybrid"]
    assert (vs["wins"], vs["losses"], vs["p"]) == (1, 1, 1.0)
    assert vs["by_style"]["function"] == {"n": 2, "wins": 1, "losses": 1, "p": 1.0}
    assert vs["by_style"]["category"] == {"n": 2, "wins": 0, "losses": 0, "p": 1.0}
    assert "paired, top 1: scorer against each stage" in format_report(report)


def test_one_stage_has_no_paired_comparison(index):
    assert "paired_top1" not in evaluate(index, QUERIES, stages=("hybrid",))


def test_stage_errors(index):
    with pytest.raises(ValueError, match=r"unknown stage\(s\) \['bm26'\]"):
        evaluate(index, QUERIES, stages=("bm26",))
    with pytest.raises(ValueError, match="the 'scorer' stage needs a model"):
        evaluate(index, QUERIES, stages=("scorer",))
    with pytest.raises(CatalogError, match=r"1 queries name tools not in the index, e.g. Nope / x"):
        evaluate(index, [Query("q", "anything", ToolId("Nope", "x"))])
    with pytest.raises(ValueError, match=r"org_size must be at least 1 server .*got 0"):
        evaluate(index, QUERIES, stages=("bm25",), org_size=0)


def test_use_need(index):
    q = Query("q", "can you help me", ToolId("Slack", "post_message"), need="post a message to a channel")
    rows: list = []
    report = evaluate(index, [q], stages=("bm25",), use_need=True, per_query=rows)
    assert rows[0]["bm25"] == 1 and report["use_need"] is True
    rows.clear()
    evaluate(index, [q], stages=("bm25",), per_query=rows)
    assert rows[0]["bm25"] is None                           # the request alone matches nothing


# ---------------------------------------------------------------- organisations


def record_orgs(index, monkeypatch):
    orgs: list = []
    original = index.retrieve

    def spy(request, need=None, eligible=None, k=100, **kw):
        if kw.get("stage") == "hybrid":
            orgs.append(None if eligible is None else sorted(eligible.servers))
        return original(request, need, eligible, k, **kw)

    monkeypatch.setattr(index, "retrieve", spy)
    return orgs


def test_org_draws_include_the_labelled_server_and_are_seeded(index, monkeypatch):
    orgs = record_orgs(index, monkeypatch)
    evaluate(index, QUERIES, org_size=2, seed=3)
    first = list(orgs)
    assert len(first) == 4
    for q, org in zip(QUERIES, first):
        assert q.target.server in org and len(org) == 2
    orgs.clear()
    evaluate(index, QUERIES, org_size=2, seed=3)
    assert orgs == first                                      # same seed, same organisations
    orgs.clear()
    evaluate(index, QUERIES, org_size=2, seed=4)
    assert orgs != first


def test_org_of_one_server(index):
    rows: list = []
    report = evaluate(index, QUERIES, stages=("hybrid",), org_size=1, per_query=rows)
    # Inside its own server only: q2's list_indices beats get_shards, q4's get_shards is 2nd of 2.
    assert [r["hybrid"] for r in rows] == [1, 1, 2, 2]
    assert report["org_size"] == 1
    assert report["stages"]["hybrid"]["top1"] == 0.5


def test_draw_organisation():
    servers = ["A", "B", "C", "D", "E"]
    org = draw_organisation(servers, "C", 3, np.random.default_rng(0))
    assert org[0] == "C" and len(org) == 3 and len(set(org)) == 3 and set(org) <= set(servers)
    assert org == draw_organisation(servers, "C", 3, np.random.default_rng(0))
    assert sorted(draw_organisation(servers, "C", 99, np.random.default_rng(0))) == servers   # clamped
    assert draw_organisation(servers, "C", 1, np.random.default_rng(0)) == ["C"]


# ---------------------------------------------------------------- query files


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_queries(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [
        json.dumps({"id": "a", "split": "dev", "style": "function", "query": "x", "need": "n",
                    "server": "S", "tool": "t", "acceptable": [{"server": "S", "tool": "u"}]}),
        "",
        json.dumps({"split": "test", "query": "y", "server": "S", "tool": "u"}),
    ])
    qs = load_queries(path)
    assert qs[0] == Query("a", "x", ToolId("S", "t"), "n", "function", "dev", (ToolId("S", "u"),))
    assert qs[0].lenient_targets == {ToolId("S", "t"), ToolId("S", "u")}
    assert qs[1].id == "3"                                     # the line number when there is no id
    assert [q.id for q in load_queries(path, split="dev")] == ["a"]


def test_load_queries_missing_fields(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"query": "x", "server": "S", "tool": "t"}),
                                              json.dumps({"server": "S", "tool": 3})])
    with pytest.raises(CatalogError, match=r"q\.jsonl, line 2: missing or non-string field\(s\) query, tool"):
        load_queries(path)


def test_load_queries_invalid_json(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"query": "x", "server": "S", "tool": "t"}), "{oops"])
    with pytest.raises(CatalogError, match=r"q\.jsonl, line 2: invalid JSON"):
        load_queries(path)


def test_load_queries_bad_acceptable(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"query": "x", "server": "S", "tool": "t",
                                                          "acceptable": [["S", "u"]]})])
    with pytest.raises(CatalogError, match=r"q\.jsonl, line 1: 'acceptable' must be a list of"):
        load_queries(path)


def test_load_queries_empty_split(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"split": "dev", "query": "x", "server": "S", "tool": "t"})])
    with pytest.raises(CatalogError, match=r"no queries with split 'test'"):
        load_queries(path, split="test")


def test_load_queries_missing_file(tmp_path):
    with pytest.raises(CatalogError, match=r"nope\.jsonl: queries file not found"):
        load_queries(tmp_path / "nope.jsonl")


def test_format_report(index):
    text = format_report(evaluate(index, QUERIES))
    assert "queries: 4" in text and "org size: all servers" in text
    lines = text.splitlines()
    hybrid = next(line for line in lines if line.startswith("hybrid "))
    assert "25.0%" in hybrid and "75.0%" in hybrid
    assert "by style (top1 / top5):" in text
    assert "category" in text and "function" in text
