"""Learning from use over the real pipeline: POST /v1/feedback, GET/DELETE /v1/examples."""

from __future__ import annotations

import json

from real_app import KEYS, key
from serve.usage import tenant_folder
from testkit import tenants_toml

USE = "the cluster turned yellow overnight, which replica is unassigned"   # words of no tool card
LATER = "cluster yellow again, replica unassigned?"


def search(service, tenant, request, **extra):
    r = service.post("/v1/search", json={"request": request, "explain": True, "k": 8, **extra},
                    headers={**key(tenant), "X-Request-ID": "fixed-id"})
    assert r.status_code == 200, r.text
    return r.json()


def rank_of(body, server, tool):
    return next((t["rank"] for t in body["tools"] if (t["server"], t["tool"]) == (server, tool)), None)


def dense_of(body, server, tool):
    return next(t["explanation"]["dense_score"] for t in body["tools"] if (t["server"], t["tool"]) == (server, tool))


def feedback(service, tenant, request_id, server, tool, outcome="success"):
    return service.post("/v1/feedback", json={"request_id": request_id, "server": server, "tool": tool,
                                             "outcome": outcome}, headers=key(tenant))


def test_a_successful_call_to_an_offered_tool_is_learned_and_changes_the_ranking(service, tmp_path):
    before = search(service, "acme", LATER)
    offered = search(service, "acme", USE)
    assert offered["request_id"] == "fixed-id"
    assert ("Elasticsearch", "get_shards") in {(t["server"], t["tool"]) for t in offered["tools"]}
    r = feedback(service, "acme", "fixed-id", "Elasticsearch", "get_shards")
    assert r.status_code == 200, r.text
    assert r.json()["learned"] is True and r.json()["examples"] == 1

    after = search(service, "acme", LATER)
    assert after != before
    assert dense_of(after, "Elasticsearch", "get_shards") > dense_of(before, "Elasticsearch", "get_shards") + 0.05
    assert rank_of(after, "Elasticsearch", "get_shards") <= rank_of(before, "Elasticsearch", "get_shards")

    listed = service.get("/v1/examples", headers=key("acme")).json()
    assert listed["learning"] is True
    assert [(t["server"], t["tool"], [e["request"] for e in t["examples"]]) for t in listed["tools"]] == \
        [("Elasticsearch", "get_shards", [USE])]
    # stored with the store's guarantees: a version folder and a CURRENT pointer per tenant
    folder = tmp_path / "store" / "usage" / tenant_folder("acme")
    assert (folder / "CURRENT").read_text().strip() == "v1"

    r = service.delete("/v1/examples/Elasticsearch/get_shards", headers=key("acme"))
    assert r.status_code == 200 and r.json() == {"removed": 1}
    assert search(service, "acme", LATER) == before        # forgotten: the answer is the day-one answer again
    assert service.delete("/v1/examples/Elasticsearch/get_shards", headers=key("acme")).status_code == 404


def test_failed_calls_and_tools_not_offered_are_recorded_not_learned(service, tmp_path):
    offered = search(service, "acme", USE)
    names = {(t["server"], t["tool"]) for t in offered["tools"]}
    r = feedback(service, "acme", "fixed-id", "Elasticsearch", "get_shards", outcome="error")
    assert r.status_code == 200 and r.json()["learned"] is False and "failed" in r.json()["reason"]
    outside = next((s, t) for s, t in [("GitHub", "create_issue"), ("GitHub", "list_pull_requests"),
                                       ("Elasticsearch", "list_indices")] if (s, t) not in names) \
        if len(names) < 4 else None
    if outside is None:   # k=8 may offer every tool acme has: ask for fewer
        search(service, "acme", USE, k=1)
        outside = ("GitHub", "list_pull_requests")
    r = feedback(service, "acme", "fixed-id", *outside)
    assert r.status_code == 200 and r.json()["learned"] is False and "not among" in r.json()["reason"]
    assert service.get("/v1/examples", headers=key("acme")).json()["tools"] == []
    log = (tmp_path / "store" / "usage" / tenant_folder("acme") / "feedback.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in log]
    assert [(e["outcome"], e["offered"], e["learned"]) for e in events] == [("error", True, False),
                                                                            ("success", False, False)]


def test_feedback_needs_the_callers_own_recent_search(service):
    search(service, "acme", USE)
    r = feedback(service, "all", "fixed-id", "Elasticsearch", "get_shards")   # another tenant's request id
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_request_id"
    assert feedback(service, "acme", "never-issued", "Elasticsearch", "get_shards").status_code == 404
    r = service.post("/v1/feedback", json={"request_id": "fixed-id", "server": "Elasticsearch", "tool": "get_shards",
                                          "outcome": "maybe"}, headers=key("acme"))
    assert r.status_code == 422


def test_learning_can_be_switched_off_per_tenant(tmp_path):
    from fastapi.testclient import TestClient

    from real_app import TENANTS, real_pipeline
    from serve.app import create_app
    from serve.settings import Settings
    from serve_fakes import wait_ready

    quiet = tenants_toml({"name": "quiet", "key": "k-quiet", "servers": "*", "learn_from_use": False})
    (tmp_path / "tenants.toml").write_text(TENANTS + "\n" + quiet)
    KEYS["quiet"] = "k-quiet"
    try:
        app = create_app(Settings(config=tmp_path / "tenants.toml", index_dir=tmp_path / "store"),
                         pipeline=real_pipeline())
        with TestClient(app) as q:
            wait_ready(q)
            first = search(q, "quiet", USE)["tools"][0]
            r = feedback(q, "quiet", "fixed-id", first["server"], first["tool"])
            assert r.status_code == 200 and r.json()["learned"] is False and "switched off" in r.json()["reason"]
            assert q.get("/v1/examples", headers=key("quiet")).json() == {"learning": False, "tools": []}
            # ... while a tenant that learns does learn the same call
            first = search(q, "all", USE)["tools"][0]
            assert feedback(q, "all", "fixed-id", first["server"], first["tool"]).json()["learned"] is True
    finally:
        KEYS.pop("quiet", None)


def test_the_gateways_learning_follows_its_tenant(tmp_path):
    """`toolrank mcp --tenants F --tenant alice`: alice's `learn_from_use = false` means no learning at all,
    and when she learns, it is as alice, not as the gateway's `local`."""
    from serve.usage import LOCAL_TENANT, GatewayUsage

    assert GatewayUsage.for_index(tmp_path / "ix", learn=False, tenant="alice") is None
    assert GatewayUsage.for_index(None) is None                               # --no-save: nothing written
    usage = GatewayUsage.for_index(tmp_path / "ix", tenant="alice")
    assert usage is not None and usage.tenant == "alice"
    assert GatewayUsage.for_index(tmp_path / "ix").tenant == LOCAL_TENANT


def test_learned_text_is_private_on_disk(tmp_path):
    """What users typed is stored in 0600 files inside 0700 folders, whatever the umask."""
    import os
    import stat

    from retrieval.catalog.model import ToolId
    from serve.usage import TenantUsage

    old = os.umask(0o022)
    try:
        usage = TenantUsage(tmp_path / "usage", "alice")
        usage.record({"event": "called", "request": "reset my password to hunter2"})
        usage.change(lambda cur: (cur.add(ToolId("S", "t"), "reset my password"), None))
    finally:
        os.umask(old)
    files = [p for p in usage.root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert any(p.name == "feedback.jsonl" for p in files) and len(files) >= 3
    # every folder, and every file that holds text users typed (CURRENT only names a version number)
    for path in [usage.root, usage.root.parent, *usage.root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir() or path.suffix in (".json", ".jsonl"):
            assert mode & 0o077 == 0, (path, oct(mode))


def test_feedback_on_a_store_that_cannot_be_written_is_a_clear_4xx_or_507(monkeypatch):
    """A read-only replica answers POST /v1/feedback with 405 and Allow, a full disk with 507: never a 500."""
    import errno

    import anyio

    from serve.errors import ServiceError
    from serve.routes.common import write_to_store

    def fails(code):
        def change():
            raise OSError(code, "nope")
        return change

    for code, status in ((errno.EROFS, 405), (errno.EACCES, 405), (errno.ENOSPC, 507), (errno.EDQUOT, 507)):
        try:
            anyio.run(lambda: write_to_store(fails(code), what="the feedback"))
        except ServiceError as exc:
            assert exc.status == status, (code, exc.status)
        else:
            raise AssertionError("no error")


def test_real_use_calibration_comes_from_the_tenants_feedback(service):
    from real_app import key

    for i in range(3):
        r = service.post("/v1/search", json={"request": "create an issue about the failing build"},
                         headers={**key("acme"), "X-Request-ID": f"cal-{i}"})
        assert r.status_code == 200, r.text
        tools = r.json()["tools"]
        f = service.post("/v1/feedback", json={"request_id": f"cal-{i}", "server": tools[0]["server"],
                                              "tool": tools[0]["tool"], "outcome": "success"}, headers=key("acme"))
        assert f.status_code == 200, f.text
    got = service.get("/v1/metrics/use", headers=key("acme")).json()
    assert got["searches_with_feedback"] == 3 and got["observations"] == 3 * len(tools)
    assert sum(b["n"] for b in got["bins"]) == got["observations"] and 0 <= got["ece"] <= 1
    assert sum(d["searches"] for d in got["days"]) >= 3 and sum(d["successes"] for d in got["days"]) == 3
    other = service.get("/v1/metrics/use", headers=key("all")).json()
    assert other["observations"] == 0                                   # another tenant sees only its own
    assert service.get("/v1/metrics/use?tenant=acme", headers=key("all")).status_code == 403
    assert service.get("/v1/metrics/use?tenant=acme", headers=key("ops")).json()["observations"] == got["observations"]
