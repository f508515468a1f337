"""The MCP find_tools and HTTP /v1/search give the same decision, zone by zone, on the same pipeline (issue 34)."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))

from fakes import HashEncoder, logit, tiny_catalog  # noqa: E402
from gateway_fakes import LOGIT  # noqa: E402
from mcp.shared.memory import create_connected_server_and_client_session  # noqa: E402
from mcp_helpers import payload, run  # noqa: E402
from real_app import key, real_client  # noqa: E402
from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.pipeline.decision import Policy  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402
from serve.mcp_gateway import Components, Gateway  # noqa: E402
from serve.mcp_server import FIND_TOOLS, build_server  # noqa: E402

# Each request's best probability puts it in one zone: proceed (0.95), choose (0.4), no_fit (0.03).
ZONED = {"forecast": 0.95, "alerts": 0.4}


class ZoneScorer:
    info = {"name": "zone-scorer-test", "version": 1}
    path = None

    def logits(self, request, need, tools) -> np.ndarray:
        text = f"{request} {need or ''}".lower()
        return np.array([logit(next((p for w, p in ZONED.items() if w in text and w in t.name), 0.03))
                         for t in tools])

    def score(self, request, need, tools):
        return [float(1 / (1 + np.exp(-z))) for z in self.logits(request, need, tools)]


POLICY = Policy(proceed_threshold=0.85, no_fit_below=0.1)
CASES = [("weather forecast for Paris", "get a weather forecast for a city"),
         ("any weather alerts near Lyon?", "list severe weather alerts for a region"),
         ("book me a table for two tonight", "reserve a restaurant table")]


def make_pipeline(index: ToolIndex) -> Pipeline:
    return Pipeline(index, ZoneScorer(), confidence=LOGIT, policy=POLICY)


@asynccontextmanager
async def mcp_and_http(tmp_path):
    """An MCP client of the gateway and an HTTP client of the service, over the same pipeline and catalog."""
    encoder = HashEncoder()
    index = ToolIndex.build(tiny_catalog(), encoder=encoder)
    components = Components(encoder, make_pipeline, lambda p: ToolIndex.load(p, encoder=encoder), lambda: None)
    http = real_client(tmp_path, pipeline=make_pipeline(ToolIndex.build(tiny_catalog(), encoder=encoder)))
    try:
        gw = Gateway(components=components, index=index)
        async with gw.running():
            async with create_connected_server_and_client_session(build_server(gw)) as client:
                yield client, http
    finally:
        http.__exit__(None, None, None)


@run
async def test_mcp_and_http_decide_alike(tmp_path):
    async with mcp_and_http(tmp_path) as (client, http):
        seen = []
        for request, need in CASES:
            m1 = payload(await client.call_tool(FIND_TOOLS, {"request": request, "need": need}))
            h1 = http.post("/v1/search", json={"request": request, "need": need}, headers=key("all")).json()
            assert m1["decision"] == h1["decision"], request
            m2 = payload(await client.call_tool(FIND_TOOLS, {"request": request, "need": need, "attempt": 2}))
            h2 = http.post("/v1/search", headers=key("all"), json={
                "request": request, "need": need,
                "previous": {"attempt": 1, "decision": h1["decision"]}}).json()
            assert m2["decision"] == h2["decision"], request
            assert [t["name"] for t in m2["tools"]][:1] == [t["tool"] for t in h2["tools"]][:1]
            seen.append((h1["decision"], h2["decision"]))
        assert seen == [("proceed", "proceed"), ("search_again", "choose"), ("search_again", "no_fit")]
        # a 0.6 client asks for the three old decisions: choose comes back as proceed, with its tools
        old = http.post("/v1/search", headers=key("all"), json={
            "request": CASES[1][0], "need": CASES[1][1], "legacy_decisions": True,
            "previous": {"attempt": 1, "decision": "search_again"}}).json()
        assert old["decision"] == "proceed" and old["tools"]


@run
async def test_a_second_search_keeps_the_first_answer_over_mcp_and_http(tmp_path):
    """Issue 34: the sharper need finds less (0.4 -> 0.03, under the floor): MCP (which remembers the first
    answer) and HTTP (given the earlier answer's tools and probabilities) both keep the first answer's tools
    as choose; an HTTP client that sends back only the attempt still gets no_fit, as before."""
    request, need1, need2 = "warn me about storms near Lyon", "list weather alerts for a region", "get storm warnings"
    async with mcp_and_http(tmp_path) as (client, http):
        m1 = payload(await client.call_tool(FIND_TOOLS, {"request": request, "need": need1}))
        h1 = http.post("/v1/search", json={"request": request, "need": need1}, headers=key("all")).json()
        assert m1["decision"] == h1["decision"] == "search_again"
        m2 = payload(await client.call_tool(FIND_TOOLS, {"request": request, "need": need2, "attempt": 2}))
        back = [{"server": t["server"], "tool": t["tool"], "probability": t["probability"]} for t in h1["tools"]]
        h2 = http.post("/v1/search", headers=key("all"), json={
            "request": request, "need": need2,
            "previous": {"attempt": 1, "decision": "search_again", "tools": back}}).json()
        assert m2["decision"] == h2["decision"] == "choose"
        assert h2["tools"][0]["tool"] == h1["tools"][0]["tool"] == [t["name"] for t in m2["tools"]][0]
        assert h2["best_probability"] == h1["best_probability"]
        bare = http.post("/v1/search", headers=key("all"), json={
            "request": request, "need": need2, "previous": {"attempt": 1, "decision": "search_again"}}).json()
        assert bare["decision"] == "no_fit" and bare["tools"] == []


def test_http_keeps_only_what_the_tenant_may_use_and_legacy_clients_get_the_old_answer(tmp_path):
    """previous.tools come from the client: a tool the tenant may not use (here Weather, for acme) is never kept,
    an always-available one is not kept either, and a 0.6 client (legacy_decisions) keeps 0.12.0's no_fit."""
    from real_app import real_client as client_of
    http = client_of(tmp_path, pipeline=make_pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder())))
    try:
        back = [{"server": "Weather", "tool": "get_alerts", "probability": 0.9},
                {"server": "Elasticsearch", "tool": "get_shards", "probability": 0.8, "source": "always_available"},
                {"server": "GitHub", "tool": "create_issue", "probability": 0.5}]
        body = {"request": "warn me about storms near Lyon", "need": "get storm warnings",
                "previous": {"attempt": 1, "decision": "search_again", "tools": back}}
        kept = http.post("/v1/search", headers=key("acme"), json=body).json()
        assert kept["decision"] == "choose" and [t["tool"] for t in kept["tools"]] == ["create_issue"]
        assert kept["best_probability"] == 0.5
        legacy = http.post("/v1/search", headers=key("acme"), json={**body, "legacy_decisions": True}).json()
        assert legacy["decision"] == "no_fit" and legacy["tools"] == []
        bad = http.post("/v1/search", headers=key("acme"), json={**body, "previous": {
            "attempt": 1, "decision": "search_again", "tools": [{"server": "GitHub", "tool": "x", "source": "bogus"}]}})
        assert bad.status_code == 422
    finally:
        http.__exit__(None, None, None)


@run
async def test_the_gateway_remembers_a_bounded_number_of_first_answers(monkeypatch):
    import serve.mcp_gateway as gateway_module
    monkeypatch.setattr(gateway_module, "FIRST_ANSWERS_KEPT", 1)
    encoder = HashEncoder()
    components = Components(encoder, make_pipeline, lambda p: ToolIndex.load(p, encoder=encoder), lambda: None)
    gw = Gateway(components=components, index=ToolIndex.build(tiny_catalog(), encoder=encoder))
    async with gw.running():
        storms = "warn me about storms near Lyon"
        assert (await gw.find(storms, "list weather alerts for a region")).decision == "search_again"
        assert (await gw.find(storms, "get storm warnings", attempt=2)).decision == "choose"   # remembered
        respaced = await gw.find("  warn me about storms\tnear  Lyon ", "get storm warnings", attempt=2)
        assert respaced.decision == "choose"                      # spacing makes no other request
        recased = await gw.find("Warn me about storms near LYON", "get storm warnings", attempt=2)
        assert recased.decision == "no_fit"                      # case may: nothing kept
        other = await gw.find("warn me about storms near Paris", "get storm warnings", attempt=2)
        assert other.decision == "no_fit"                        # another request: nothing of Lyon's kept
        await gw.find("book me a table for two tonight", "reserve a restaurant table")            # pushes it out
        assert len(gw._first_answers) == 1
        forgotten = await gw.find(storms, "get storm warnings", attempt=2)
        assert forgotten.decision == "no_fit" and forgotten.tools == []
