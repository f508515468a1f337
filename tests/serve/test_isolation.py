"""A tenant never sees, is scored against, or learns of another tenant's servers."""

from __future__ import annotations

import json

import pytest

from serve_fakes import FakeIndex, FakePipeline, auth, demo_catalog

SECRET_SERVER, SECRET_TOOL = "Gamma Secret", "launch_rocket"
ROCKET = "launch the rocket to orbit with a payload using Gamma Secret"
TOOLS = {"tools": [{"name": "ping", "description": "Ping a host"}]}


def leaks(text: str) -> bool:
    return SECRET_SERVER.lower() in text.lower() or SECRET_TOOL in text.lower()


def strip_id(body: dict) -> dict:
    body["error"].pop("request_id", None)
    return body


@pytest.fixture(params=[False, True], ids=["pipeline-honest", "pipeline-leaky"])
def client(request, make_client):
    # The leaky fake ignores eligibility and suggests every server: the service must still filter.
    return make_client(FakePipeline(FakeIndex(demo_catalog()), leak=request.param))


def test_owner_finds_its_server(client):
    r = client.post("/v1/search", json={"request": ROCKET}, headers=auth("globex"))
    assert r.json()["tools"][0]["server"] == SECRET_SERVER


@pytest.mark.parametrize("body", [
    {"request": ROCKET},
    {"request": ROCKET, "explain": True, "format": "openai", "k": 50},
    {"request": "zzz qqq nothing matches", "previous": {"attempt": 1, "decision": "search_again"}},  # no_fit
    {"request": ROCKET, "previous": {"attempt": 1, "decision": "search_again",
                                     "tools": [{"server": SECRET_SERVER, "tool": SECRET_TOOL, "probability": 0.9}]}},
])
@pytest.mark.parametrize("tenant", ["acme", "narrow"])
def test_search_never_shows_another_tenants_server(client, body, tenant):
    r = client.post("/v1/search", json=body, headers=auth(tenant))
    assert r.status_code == 200
    assert not leaks(r.text), r.text


def test_no_fit_suggestions_are_filtered(client):
    r = client.post("/v1/search", json={"request": "zzz qqq", "previous": {"attempt": 1, "decision": "search_again"}},
                    headers=auth("acme"))
    body = r.json()
    assert body["decision"] == "no_fit"
    assert "Public Weather" in body["suggestions"]
    assert SECRET_SERVER not in body["suggestions"]


def test_previous_tools_of_another_tenant_never_reach_the_pipeline(make_client):
    pipeline = FakePipeline(FakeIndex(demo_catalog()))
    c = make_client(pipeline)
    prev = {"attempt": 1, "decision": "search_again",
            "tools": [{"server": SECRET_SERVER, "tool": SECRET_TOOL}, {"server": "Alpha Mail", "tool": "send_email"}]}
    c.post("/v1/search", json={"request": "send mail", "previous": prev}, headers=auth("acme"))
    sent = pipeline.calls[-1]["previous"]
    assert sent.attempt == 1 and sent.decision == "search_again"
    assert [tuple(t.tool_id) for t in sent.tools] == [("Alpha Mail", "send_email")]
    assert sent.tools[0].tool_id.server == "Alpha Mail"


def test_tenant_eligibility_and_policy_are_passed(make_client):
    pipeline = FakePipeline(FakeIndex(demo_catalog()))
    c = make_client(pipeline)
    c.post("/v1/search", json={"request": "send mail"}, headers=auth("acme"))
    call = pipeline.calls[-1]
    assert call["eligible"].servers == frozenset({"Alpha Mail", "Beta Calendar", "Delta Files"})
    assert call["policy"].proceed_threshold == 0.6 and call["policy"].floor == pipeline.policy.floor
    c.post("/v1/search", json={"request": "send mail"}, headers=auth("globex"))
    assert pipeline.calls[-1]["policy"] is None  # no overrides: the pipeline's own policy


def test_server_list_shows_only_the_tenants_servers(client):
    names = lambda t: [s["name"] for s in client.get("/v1/servers", headers=auth(t)).json()["servers"]]  # noqa: E731
    assert names("acme") == ["Alpha Mail", "Beta Calendar", "Delta Files"]
    assert names("globex") == ["Alpha Mail", SECRET_SERVER]
    assert names("ops") == ["Alpha Mail", "Beta Calendar", SECRET_SERVER, "Delta Files"]
    narrow = client.get("/v1/servers", headers=auth("narrow")).json()["servers"]
    assert narrow == [{"name": "Alpha Mail", "description": "Email", "tools": 1}]


def test_invisible_server_answers_like_a_missing_one(client):
    for tenant in ("acme", "narrow"):
        hidden = client.get(f"/v1/servers/{SECRET_SERVER}", headers=auth(tenant))
        missing = client.get("/v1/servers/Nowhere Server", headers=auth(tenant))
        assert hidden.status_code == missing.status_code == 404
        assert strip_id(hidden.json()) == json.loads(
            json.dumps(strip_id(missing.json())).replace("Nowhere Server", SECRET_SERVER))
        assert set(hidden.headers) - {"x-request-id"} == set(missing.headers) - {"x-request-id"}
    # narrow sees Alpha Mail but not its read_inbox tool
    detail = client.get("/v1/servers/Alpha Mail", headers=auth("narrow")).json()
    assert [t["name"] for t in detail["tools"]] == ["send_email"]


@pytest.mark.parametrize("method", ["put", "delete"])
def test_a_tenant_can_change_no_server_and_learns_nothing_by_trying(client, method):
    """Catalog writes are an admin's: a tenant's PUT or DELETE changes nothing, whether it names its
    own server, another tenant's or none, and the refusal is the same for all three."""
    before = client.get("/v1/servers", headers=auth("ops")).json()
    answers = {}
    for name in ("Alpha Mail", SECRET_SERVER, "Nowhere Server"):
        r = getattr(client, method)(f"/v1/servers/{name}", headers=auth("acme"),
                                    **({"json": TOOLS} if method == "put" else {}))
        answers[name] = (r.status_code, strip_id(r.json()), set(r.headers) - {"x-request-id", "content-length"})
    assert answers["Alpha Mail"][0] == 403 and answers["Alpha Mail"][1]["error"]["code"] == "admin_required"
    assert answers["Alpha Mail"] == answers[SECRET_SERVER] == answers["Nowhere Server"]
    assert client.get("/v1/servers", headers=auth("ops")).json() == before      # nothing was written


def test_errors_never_name_another_tenants_server(client):
    bad = [
        ("post", "/v1/search", {"request": ROCKET, "k": 0}),
        ("post", "/v1/search", {"request": ROCKET, "format": "xml"}),
        ("post", "/v1/score", {"request": ROCKET, "candidates": []}),
        ("get", "/v1/servers/Nowhere", None),
    ]
    for method, path, body in bad:
        kw = {"json": body} if body is not None else {}
        r = getattr(client, method)(path, headers=auth("acme"), **kw)
        assert 400 <= r.status_code < 500
        assert not leaks(r.text.replace(ROCKET, "")), r.text


def test_metrics_and_readiness_name_no_servers(client):
    client.post("/v1/search", json={"request": ROCKET}, headers=auth("globex"))
    client.get(f"/v1/servers/{SECRET_SERVER}", headers=auth("globex"))
    assert not leaks(client.get("/metrics", headers=auth("ops")).text)
    assert not leaks(client.get("/readyz").text)
