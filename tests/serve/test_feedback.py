"""Learning from use over the real pipeline: POST /v1/feedback, GET/DELETE /v1/examples."""

from __future__ import annotations

import json

import pytest

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
    # the recalibration it supports: off by default, three pieces of evidence, under the minimum: no fit
    assert got["recalibration"] == {"enabled": False, "audits_on": False, "evidence": 3, "source": "feedback",
                                    "applied": False, "minimum": 25, "fitted": False, "a": None, "b": None,
                                    "audited": 0, "audited_fits": 0, "tail_shift": None, "tail_judged": 0,
                                    "tail_fits": 0}
    other = service.get("/v1/metrics/use", headers=key("all")).json()
    assert other["observations"] == 0                                   # another tenant sees only its own
    assert other["recalibration"]["evidence"] == 0
    assert service.get("/v1/metrics/use?tenant=acme", headers=key("all")).status_code == 403
    assert service.get("/v1/metrics/use?tenant=acme", headers=key("ops")).json()["observations"] == got["observations"]


def test_a_tenants_recalibration_follows_its_own_feedback_only(tmp_path):
    """TOOLRANK_USE_RECALIBRATION: once a tenant's feedback says its best tool is never the one called, its
    probabilities come down (the order stays); another tenant's searches are untouched. (The tenant does not
    learn examples here, so the probabilities before recalibration stay those of the first search.)"""
    from fastapi.testclient import TestClient

    from real_app import TENANTS, real_pipeline
    from retrieval.pipeline.recalibration import fit_use_recalibration
    from serve.app import create_app
    from serve.settings import Settings
    from serve_fakes import wait_ready

    ask = "create an issue about the failing build"
    quiet = tenants_toml({"name": "quiet", "key": "k-quiet", "servers": "*", "learn_from_use": False})
    (tmp_path / "tenants.toml").write_text(TENANTS + "\n" + quiet)
    KEYS["quiet"] = "k-quiet"
    app = create_app(Settings(config=tmp_path / "tenants.toml", index_dir=tmp_path / "store",
                              use_recalibration=True, use_recalibration_min=10, use_recalibration_refit_s=0),
                     pipeline=real_pipeline())

    def one(client, tenant, rid):
        r = client.post("/v1/search", json={"request": ask, "k": 5}, headers={**key(tenant), "X-Request-ID": rid})
        assert r.status_code == 200, r.text
        return r.json()

    try:
        with TestClient(app) as c:
            wait_ready(c)
            before = one(c, "quiet", "first")
            assert before["recalibrated_from"] is None and len(before["tools"]) >= 2
            for i in range(12):   # the agent always calls the second tool: the best one is never right
                body = one(c, "quiet", f"use-{i}")
                assert body["recalibrated_from"] is None if i < 10 else body["recalibrated_from"] == i
                second = body["tools"][1]
                assert feedback(c, "quiet", f"use-{i}", second["server"], second["tool"]).status_code == 200
            after = one(c, "quiet", "after")
            assert after["recalibrated_from"] == 12
            assert after["best_probability"] < before["best_probability"] - 0.1
            assert [(t["server"], t["tool"]) for t in after["tools"]] == \
                [(t["server"], t["tool"]) for t in before["tools"]]
            other = one(c, "all", "other")              # another tenant: its own (no) feedback, the shipped figures
            assert other["recalibrated_from"] is None
            assert other["best_probability"] == before["best_probability"]
            # the fit reads the probability before any recalibration, not the one served
            log = tmp_path / "store" / "usage" / tenant_folder("quiet") / "feedback.jsonl"
            assert feedback(c, "quiet", "after", after["tools"][1]["server"], after["tools"][1]["tool"]).status_code == 200
            events = [json.loads(line) for line in log.read_text().splitlines()]
            # every search kept its first tool's probability before recalibration, recalibrated or not
            assert all(e["offered_raw_best"] == pytest.approx(before["best_probability"], abs=1e-5) for e in events)
            assert events[-1]["offered_probabilities"][0][2] == pytest.approx(after["tools"][0]["probability"], abs=1e-4)
            fitted = fit_use_recalibration([before["best_probability"]] * 12, [0.0] * 12, min_observations=10)
            assert float(fitted.apply(before["best_probability"])) == pytest.approx(after["best_probability"], abs=1e-3)
            state = c.get("/v1/metrics/use", headers=key("quiet")).json()["recalibration"]
            assert state["enabled"] and state["fitted"] and state["evidence"] == 13 and state["minimum"] == 10
            # the console says it is on and applied, with the fitted map
            assert c.post("/ui/login", data={"key": KEYS["quiet"]}, follow_redirects=False).status_code == 303
            page = c.get("/ui/calibration").text
            assert "13 observations (feedback), 10 needed" in page and "applied to your searches" in page
            assert f"sigmoid({state['a']:.2f}" in page
    finally:
        KEYS.pop("quiet", None)


def test_without_the_setting_feedback_never_changes_the_probabilities(service):
    ask = "create an issue about the failing build"
    bodies = []
    for i in range(12):
        r = service.post("/v1/search", json={"request": ask, "k": 5}, headers={**key("acme"), "X-Request-ID": f"o-{i}"})
        body = r.json()
        bodies.append(body)
        feedback(service, "acme", f"o-{i}", body["tools"][1]["server"], body["tools"][1]["tool"])
    assert all(b["recalibrated_from"] is None for b in bodies)     # off by default, whatever the feedback says


def test_the_gateway_recalibrates_from_its_own_calls_when_switched_on(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from retrieval.catalog.model import ToolId
    from serve.settings import GatewaySettings
    from serve.usage import GatewayUsage

    def answer(p_best):
        tools = [SimpleNamespace(tool_id=ToolId("Git", "git_commit"), probability=p_best),
                 SimpleNamespace(tool_id=ToolId("Git", "git_add"), probability=0.3)]
        return SimpleNamespace(tools=tools, decision="search_again", best_probability=p_best, raw_best=p_best)

    off = GatewayUsage(tmp_path / "off")
    monkeypatch.setenv("TOOLRANK_USE_RECALIBRATION", "1")
    monkeypatch.setenv("TOOLRANK_USE_RECALIBRATION_MIN", "10")
    monkeypatch.setenv("TOOLRANK_USE_RECALIBRATION_REFIT_S", "0")
    on = GatewayUsage(tmp_path / "on", settings=GatewaySettings())
    for usage in (off, on):
        for _ in range(12):   # the agent always calls the second tool
            usage.offered("commit the staged files", None, answer(0.9))
            usage.called("Git", "git_add", SimpleNamespace(isError=False))
    assert off.recalibration() is None                       # the setting read at construction: off
    fitted = on.recalibration()
    assert fitted is not None and fitted.observations == 12 and float(fitted.apply(0.9)) < 0.5


def test_shortcut_answers_are_not_recalibration_evidence(tmp_path):
    """A search whose first tool is a shortcut (named exactly, always available) keeps no probability for
    the fit; older events (before 0.11.0) read what was offered."""
    from serve.usage import UsageBook

    book = UsageBook(tmp_path / "u")
    usage = book.tenant("t")
    for i, raw in enumerate([0.7, None, 0.4]):
        usage.record({"request_id": f"r{i}", "outcome": "success", "offered": True, "server": "A", "tool": "a",
                      "offered_probabilities": [["A", "a", 0.9], ["B", "b", 0.2]], "offered_raw_best": raw})
    usage.record({"request_id": "old", "outcome": "success", "offered": True, "server": "B", "tool": "b",
                  "offered_probabilities": [["A", "a", 0.6], ["B", "b", 0.2]]})
    usage.record({"request_id": "r0", "outcome": "success", "offered": True, "server": "A", "tool": "a",
                  "offered_probabilities": [["A", "a", 0.9]], "offered_raw_best": 0.7})   # a replay: once
    assert book.use_observations("t") == ([0.7, 0.4, 0.6], [1.0, 1.0, 0.0])


def test_the_two_readers_of_feedback_count_per_request_and_per_call(tmp_path):
    """The recalibration keeps one observation per search (its first successful call); the calibration page one
    per tool called after it; failures and calls to tools not offered are not evidence, the latter counted."""
    from serve.usage import UsageBook

    book = UsageBook(tmp_path / "u")
    usage = book.tenant("t")
    offered = [["A", "a", 0.8], ["B", "b", 0.3]]
    for server, tool in (("A", "a"), ("B", "b")):   # one search, two tools called after it
        usage.record({"request_id": "r1", "outcome": "success", "offered": True, "server": server, "tool": tool,
                      "offered_probabilities": offered, "offered_raw_best": 0.8})
    usage.record({"request_id": "r2", "outcome": "error", "offered": True, "server": "A", "tool": "a",
                  "offered_probabilities": offered, "offered_raw_best": 0.8})
    usage.record({"request_id": "r3", "outcome": "success", "offered": False, "server": "C", "tool": "c",
                  "offered_probabilities": offered, "offered_raw_best": 0.8})
    assert book.use_observations("t") == ([0.8], [1.0])
    page = book.use_calibration("t")
    assert page["searches_with_feedback"] == 2 and page["observations"] == 4   # two calls x two offered tools
    assert page["calls_to_tools_not_offered"] == 1
    assert book.use_observations("nobody") == ([], []) and book.use_calibration("nobody")["observations"] == 0


def test_the_recalibration_state_reuses_the_fit_until_the_feedback_changes(tmp_path, monkeypatch):
    """``/v1/metrics/use`` reads the same cached fit the searches use: the log is read and fitted again only
    when the tenant's feedback files changed, and the evidence count follows the new events."""
    import retrieval.pipeline.recalibration as recal
    from serve.usage import UsageBook

    fits = []
    real = recal.fit_use_recalibration
    monkeypatch.setattr(recal, "fit_use_recalibration", lambda *a, **k: fits.append(1) or real(*a, **k))
    book = UsageBook(tmp_path / "u")
    usage = book.tenant("t")

    def event(i):
        usage.record({"request_id": f"r{i}", "outcome": "success", "offered": True, "server": "A", "tool": "a",
                      "offered_probabilities": [["A", "a", 0.9]], "offered_raw_best": 0.9})

    for i in range(3):
        event(i)
    first = book.recalibration_state("t", enabled=False, min_observations=25)
    again = book.recalibration_state("t", enabled=False, min_observations=25)
    assert first == again and first["evidence"] == 3 and len(fits) == 1
    event(3)
    assert book.recalibration_state("t", enabled=False, min_observations=25)["evidence"] == 4 and len(fits) == 2
    assert book.recalibration_state("nobody", enabled=True)["evidence"] == 0 and len(fits) == 2


def test_a_fit_for_another_minimum_is_never_served_from_the_cache(tmp_path):
    from serve.usage import UsageBook

    book = UsageBook(tmp_path / "u")
    usage = book.tenant("t")
    for i in range(12):   # the first tool was never the one called: a fit that lowers 0.9
        usage.record({"request_id": f"r{i}", "outcome": "success", "offered": True, "server": "B", "tool": "b",
                      "offered_probabilities": [["A", "a", 0.9], ["B", "b", 0.3]], "offered_raw_best": 0.9})
    assert book.recalibration("t", min_observations=25, refit_s=3600) is None      # under this minimum
    fitted = book.recalibration("t", min_observations=10, refit_s=3600)            # within refit_s, another minimum
    assert fitted is not None and fitted.observations == 12
