from __future__ import annotations

import pytest

from serve_fakes import FakeIndex, FakePipeline, auth, demo_catalog


def test_score_keeps_order_and_probabilities(client):
    cands = [
        {"id": "b", "server": "Beta Calendar", "name": "create_event", "description": "Create a calendar event"},
        {"id": "a", "server": "Alpha Mail", "name": "send_email", "description": "Send an email message"},
        {"id": "z", "name": "noop"},
    ]
    r = client.post("/v1/score", json={"request": "send an email message", "candidates": cands}, headers=auth("acme"))
    assert r.status_code == 200
    body = r.json()
    assert [s["id"] for s in body["scores"]] == ["b", "a", "z"]
    # the fake scorer's word overlap, in the candidates' order: all of "send an email message" is in
    # Alpha Mail's send_email, none of it in the other two
    assert [s["scorer_probability"] for s in body["scores"]] == [0.0, 1.0, 0.0]
    assert body["model"] == {"name": "fake-scorer", "version": "1"}


@pytest.mark.parametrize("answer", [[1.5], [-0.1], [float("nan")], [0.5, 0.5]],
                         ids=["above-1", "below-0", "nan", "one-too-many"])
def test_a_scorer_answer_that_is_not_one_probability_per_candidate_is_a_500(make_client, answer):
    """The service checks what the scorer returns before answering: never a probability outside
    [0, 1], nor scores that do not line up with the candidates."""
    class Answers(FakePipeline):
        def score(self, request, need, tools):
            return answer

        def with_index(self, index):
            return Answers(index)

    c = make_client(Answers(FakeIndex(demo_catalog())))
    r = c.post("/v1/score", json={"request": "send an email", "candidates": [{"id": "1", "name": "send_email"}]},
               headers=auth("acme"))
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"


def test_score_without_a_scorer_is_503(make_client):
    c = make_client(FakePipeline(FakeIndex(demo_catalog()), scorer=None))
    r = c.post("/v1/score", json={"request": "x", "candidates": [{"id": "1", "name": "a"}]}, headers=auth("acme"))
    assert r.status_code == 503 and "--model" in r.json()["error"]["message"]
    assert c.get("/readyz").json()["scorer"]["loaded"] is False


def test_search_result_shape(client):
    r = client.post("/v1/search", json={"request": "send an email message to bob", "need": "send email"},
                    headers=auth("acme"))
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"decision", "attempt", "best_probability", "tools", "tokens", "message", "suggestions",
                         "restricted_to", "index_version", "model", "request_id", "recalibrated_from"}
    assert body["recalibrated_from"] is None      # recalibration from use is off by default
    assert body["decision"] == "proceed" and body["attempt"] == 1
    top = body["tools"][0]
    assert (top["server"], top["tool"], top["rank"], top["source"]) == ("Alpha Mail", "send_email", 1, "ranked")
    assert top["probability"] == body["best_probability"]
    assert top["definition"]["name"] == "send_email" and top["explanation"] is None
    assert [t["rank"] for t in body["tools"]] == list(range(1, len(body["tools"]) + 1))
    assert body["tokens"]["catalog"] == 10_000 and 0 < body["tokens"]["reduction"] < 1
    assert body["model"]["name"] == "fake-scorer"
    # acme sees some servers only: its version is a fingerprint of its view, the same on every endpoint
    assert body["index_version"] == client.get("/v1/servers", headers=auth("acme")).json()["index_version"]
    assert 0 <= body["index_version"] < 2 ** 53 and body["index_version"] != 1
    admin = client.post("/v1/search", json={"request": "send an email message to bob"}, headers=auth("ops")).json()
    assert admin["index_version"] == 1  # an admin sees the store's version


def test_search_options_reach_the_pipeline(make_client):
    pipeline = FakePipeline(FakeIndex(demo_catalog()))
    c = make_client(pipeline)
    r = c.post("/v1/search", json={"request": "send email", "k": 1, "explain": True, "format": "openai"},
               headers=auth("acme"))
    call = pipeline.calls[-1]
    assert (call["k"], call["explain"], call["fmt"], call["need"]) == (1, True, "openai", None)
    tools = r.json()["tools"]
    assert len(tools) == 1 and tools[0]["explanation"]["retrieval_rank"] == 1
    assert tools[0]["definition"]["type"] == "function"


def test_second_search_knows_it_is_the_second(client):
    first = client.post("/v1/search", json={"request": "calendar stuff for me"}, headers=auth("acme")).json()
    assert first["decision"] == "search_again"
    second = client.post("/v1/search", json={"request": "calendar stuff for me", "need": "list upcoming events",
                                             "previous": {"attempt": first["attempt"], "decision": first["decision"],
                                                          "tools": [{"server": t["server"], "tool": t["tool"]}
                                                                    for t in first["tools"]]}},
                         headers=auth("acme")).json()
    assert second["attempt"] == 2


def test_servers_crud(client):
    admin = auth("ops")
    mcp = {"description": "Weather data", "tools": [
        {"name": "forecast", "description": "Weather forecast for a city", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": True}},
        {"name": "alerts", "description": "Severe weather alerts"}],
        "examples": {"forecast": ["will it rain in Paris tomorrow"]}}
    r = client.put("/v1/servers/Weather", json=mcp, headers=admin)
    assert r.status_code == 201
    assert r.json() | {"index_version": 0} == {"name": "Weather", "created": True, "changed": True, "tools": 2,
                                               "re_embedded": 2, "index_version": 0}
    v1 = r.json()["index_version"]
    detail = client.get("/v1/servers/Weather", headers=admin).json()
    assert [t["name"] for t in detail["tools"]] == ["forecast", "alerts"] and detail["description"] == "Weather data"
    assert detail["tools"][0]["inputSchema"] == {"type": "object"}

    # the same definition again changes nothing, and keeps the examples
    same = client.put("/v1/servers/Weather", json={k: v for k, v in mcp.items() if k != "examples"}, headers=admin)
    assert same.status_code == 200 and same.json()["changed"] is False and same.json()["index_version"] == v1

    # one changed tool: only it is re-embedded
    mcp["tools"][1]["description"] = "Severe weather alerts for a region"
    r = client.put("/v1/servers/Weather", json=mcp, headers=admin)
    assert r.status_code == 200 and r.json()["re_embedded"] == 1 and r.json()["index_version"] == v1 + 1

    # visible to search (admin sees everything)
    found = client.post("/v1/search", json={"request": "will it rain in Paris tomorrow"}, headers=admin).json()
    assert found["tools"][0]["tool"] == "forecast"

    r = client.delete("/v1/servers/Weather", headers=admin)
    assert r.status_code == 200 and r.json()["tools"] == 2
    assert client.get("/v1/servers/Weather", headers=admin).status_code == 404
    assert client.delete("/v1/servers/Weather", headers=admin).status_code == 404


def test_examples_left_out_are_kept_and_empty_clears(make_client):
    pipeline = FakePipeline(FakeIndex(demo_catalog()))
    c = make_client(pipeline)
    admin = auth("ops")
    c.put("/v1/servers/W", json={"tools": [{"name": "f"}], "examples": {"f": ["alpha request"]}}, headers=admin)
    c.put("/v1/servers/W", json={"tools": [{"name": "f", "description": "new"}]}, headers=admin)
    engine = c.app.state.toolrank.engine
    tool = engine.snapshot.catalog.server_tools("W")[0]
    assert tool.examples == ("alpha request",) and tool.description == "new"
    c.put("/v1/servers/W", json={"tools": [{"name": "f", "description": "new"}], "examples": {"f": []}},
          headers=admin)
    assert engine.snapshot.catalog.server_tools("W")[0].examples == ()


def test_new_server_reaches_the_tenants_that_allow_it(client):
    client.put("/v1/servers/Gamma Secret", json={"tools": [{"name": "land_rocket", "description": "Land it"}]},
               headers=auth("ops"))
    globex = [s["name"] for s in client.get("/v1/servers", headers=auth("globex")).json()["servers"]]
    acme = [s["name"] for s in client.get("/v1/servers", headers=auth("acme")).json()["servers"]]
    assert "Gamma Secret" in globex and "Gamma Secret" not in acme


def test_health_and_readiness(make_client):
    c = make_client()
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz", headers=auth("ops")).json()
    assert ready["ready"] is True and ready["status"] == "ready" and ready["index_version"] == 1


def test_readiness_shows_admins_the_catalog_calibration(make_client, monkeypatch):
    from retrieval.pipeline.probes import CatalogCalibration

    assert make_client().get("/readyz", headers=auth("ops")).json()["catalog_calibration"] is None
    # every served version's pipeline carries it (the fake's with_index builds a new one)
    monkeypatch.setattr(FakePipeline, "catalog_calibration",
                        CatalogCalibration(1.1, 0.8, 200, 170, 0.7, "m@1/toolrank-x"), raising=False)
    c = make_client(FakePipeline(FakeIndex(demo_catalog())))
    shown = c.get("/readyz", headers=auth("ops")).json()["catalog_calibration"]
    assert shown == {"kind": "probe_platt", "a": 1.1, "b": 0.8, "searches": 200, "fits": 170, "mean_best": 0.7,
                     "model": "m@1/toolrank-x", "tail_shift": 0.0, "tail_judged": 0, "tail_fits": 0, "tail_waiting": 0}
    assert c.get("/readyz", headers=auth("acme")).json()["catalog_calibration"] is None   # a tenant's key


def test_not_ready_until_loaded(make_client):
    import threading

    gate = threading.Event()

    class SlowIndex(FakeIndex):
        def save(self, directory):
            gate.wait(10)
            return super().save(directory)

    c = make_client(FakePipeline(SlowIndex(demo_catalog())), wait=False, index_dir=None)
    try:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = c.post("/v1/search", json={"request": "x"}, headers=auth("acme"))
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
    finally:
        gate.set()


def test_failed_start_is_reported(make_client):
    class Unsaveable(FakeIndex):
        def save(self, directory):
            raise OSError("disk full")

    c = make_client(FakePipeline(Unsaveable(demo_catalog())), wait=False, index_dir=None)
    for _ in range(200):
        if c.get("/readyz").json()["status"] == "failed":
            break
        import time
        time.sleep(0.01)
    assert c.get("/readyz").status_code == 503 and c.get("/readyz").json()["status"] == "failed"
    assert c.get("/healthz").status_code == 500


def test_metrics(client):
    client.post("/v1/search", json={"request": "send an email message"}, headers=auth("acme"))
    client.post("/v1/search", json={"request": "x", "k": 0}, headers=auth("acme"))
    client.put("/v1/servers/W", json={"tools": [{"name": "f"}]}, headers=auth("ops"))
    text = client.get("/metrics", headers=auth("ops")).text
    assert 'toolrank_http_requests_total{endpoint="/v1/search",method="POST",status="200"} 1.0' in text
    assert 'toolrank_http_requests_total{endpoint="/v1/search",method="POST",status="422"} 1.0' in text
    assert 'toolrank_http_requests_total{endpoint="/v1/servers/{name}",method="PUT",status="201"} 1.0' in text
    assert 'toolrank_http_request_seconds_bucket{endpoint="/v1/search",le="0.5"}' in text
    assert 'toolrank_search_decisions_total{decision="proceed"} 1.0' in text
    assert "toolrank_index_version 2.0" in text


def test_request_id_is_echoed(client):
    r = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = client.get("/healthz", headers={"X-Request-ID": "bad id\twith junk"})
    assert r.headers["x-request-id"] != "bad id\twith junk"


def test_openapi_describes_every_field(client):
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    assert {"/v1/score", "/v1/search", "/v1/servers", "/v1/servers/{name}", "/healthz", "/readyz",
            "/metrics"} <= set(paths)
    assert "422" in paths["/v1/search"]["post"]["responses"]
    assert paths["/v1/search"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorResponse")
    undescribed = [f"{name}.{prop}" for name, schema in doc["components"]["schemas"].items()
                   for prop, spec in schema.get("properties", {}).items()
                   if "description" not in spec and name not in {"ErrorResponse", "ValidationError", "HTTPValidationError"}]
    assert undescribed == []
    request = doc["components"]["schemas"]["SearchRequest"]["properties"]
    assert request["k"]["anyOf"][0]["maximum"] == 50 and request["request"]["maxLength"] == 4000


@pytest.mark.parametrize("fmt", ["mcp", "openai", "anthropic"])
def test_formats_accepted(client, fmt):
    assert client.post("/v1/search", json={"request": "email", "format": fmt}, headers=auth("acme")).status_code == 200
