"""POST / GET /v1/calibration: the served catalog calibrated in the background from probes (serve/calibration.py),
saved as a new index version, refused while one runs, never saved over a catalog that changed meanwhile."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

import retrieval.index.examples as ix
from fakes import ProbeClient
from real_app import key, real_client
from serve.calibration import LOCK_FILE, STATE_FILE

BODY = {"description": "Issue tracker", "tools": [{"name": "create_ticket", "description": "Create a ticket"}]}


@pytest.fixture
def service(tmp_path):
    c = real_client(tmp_path)
    yield c
    jobs = c.app.state.toolrank.calibration_jobs
    if jobs is not None:
        jobs.wait(30)
    c.__exit__(None, None, None)


def use(monkeypatch, client):
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: client)


def wait_done(service, timeout=30.0, started=False):
    """The job's record once it is not running (``started``: once one has started at all)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        body = service.get("/v1/calibration", headers=key("ops")).json()
        if body["state"] not in ("running", *(("none",) if started else ())):
            return body
        time.sleep(0.05)
    raise AssertionError("the calibration did not end")


def wait_for_change_run(client, timeout=30.0):
    """The record of the run a catalog change started, once it has ended."""
    end = time.monotonic() + timeout
    while True:
        rec = client.get("/v1/calibration", headers=key("ops")).json()
        if rec["trigger"] == "a catalog change" and rec["state"] != "running":
            return rec
        assert time.monotonic() < end, rec
        time.sleep(0.05)


def search(service, request="open an issue on github for the login bug"):
    r = service.post("/v1/search", json={"request": request}, headers=key("ops"))
    assert r.status_code == 200, r.text
    return r.json()


def test_a_calibration_is_saved_as_a_new_version_and_leaves_every_decision(service, monkeypatch):
    assert service.get("/v1/calibration", headers=key("ops")).json()["state"] == "none"
    before = search(service)
    version = service.get("/readyz", headers=key("ops")).json()["index_version"]
    fake = ProbeClient()
    use(monkeypatch, fake)
    r = service.post("/v1/calibration", json={"probes": 10}, headers=key("ops"))
    assert r.status_code == 202, r.text
    assert r.headers["location"] == "/v1/calibration" and r.json()["probed_version"] == version
    body = wait_done(service)
    assert body["state"] == "done", body
    assert body["saved_version"] == version + 1 and "searches" in body["message"] and fake.closed
    assert body["catalog_calibration"] == body["calibration"] and body["calibration"]["kind"] == "probe_platt"
    ready = service.get("/readyz", headers=key("ops")).json()
    assert ready["index_version"] == version + 1 and ready["catalog_calibration"] == body["calibration"]
    after = search(service)
    assert after["decision"] == before["decision"]
    assert [(t["server"], t["tool"]) for t in after["tools"]] == [(t["server"], t["tool"]) for t in before["tools"]]
    assert after["best_probability"] != pytest.approx(before["best_probability"])   # what the numbers mean moved


def test_a_second_calibration_while_one_runs_is_refused(service, monkeypatch):
    gate = threading.Event()
    use(monkeypatch, ProbeClient(gate))
    assert service.post("/v1/calibration", headers=key("ops")).status_code == 202
    running = service.get("/v1/calibration", headers=key("ops")).json()
    assert running["state"] == "running" and running["phase"] in ("starting", "writing")
    second = ProbeClient()
    use(monkeypatch, second)
    r = service.post("/v1/calibration", headers=key("ops"))
    assert r.status_code == 409 and r.json()["error"]["code"] == "calibration_running"
    assert second.closed and second.calls == 0
    gate.set()
    assert wait_done(service)["state"] == "done"


def test_a_catalog_changed_while_probing_gets_no_calibration(service, monkeypatch):
    gate = threading.Event()
    use(monkeypatch, ProbeClient(gate))
    assert service.post("/v1/calibration", headers=key("ops")).status_code == 202
    assert service.put("/v1/servers/Tracker", json=BODY, headers=key("ops")).status_code == 201
    gate.set()
    body = wait_done(service)
    assert body["state"] == "failed" and "changed while it was probed" in body["message"], body
    assert body["saved_version"] is None and body["catalog_calibration"] is None
    assert service.get("/readyz", headers=key("ops")).json()["catalog_calibration"] is None


def test_a_catalog_change_after_it_drops_the_calibration(service, monkeypatch):
    use(monkeypatch, ProbeClient())
    service.post("/v1/calibration", headers=key("ops"))
    assert wait_done(service)["state"] == "done"
    assert service.put("/v1/servers/Tracker", json=BODY, headers=key("ops")).status_code == 201
    body = service.get("/v1/calibration", headers=key("ops")).json()
    assert body["state"] == "done" and body["catalog_calibration"] is None   # measured on other tools


def test_a_failing_endpoint_saves_nothing_and_says_why(service, monkeypatch):
    use(monkeypatch, ProbeClient(fail=True))
    assert service.post("/v1/calibration", headers=key("ops")).status_code == 202
    body = wait_done(service)
    assert body["state"] == "failed" and "no calibration saved" in body["message"] and "503" in body["message"]
    assert service.get("/readyz", headers=key("ops")).json()["catalog_calibration"] is None


def test_a_job_whose_worker_stopped_reads_interrupted(service, tmp_path, monkeypatch):
    root = tmp_path / "store"
    (root / STATE_FILE).write_text(json.dumps({"state": "running", "phase": "writing", "done": 3, "total": 10}))
    body = service.get("/v1/calibration", headers=key("ops")).json()
    assert body["state"] == "interrupted" and "start it again" in body["message"]
    import fcntl   # held by another process's open file: still running
    with open(root / LOCK_FILE, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert service.get("/v1/calibration", headers=key("ops")).json()["state"] == "running"
        use(monkeypatch, ProbeClient())
        r = service.post("/v1/calibration", headers=key("ops"))
        assert r.status_code == 409 and "another worker" in r.json()["error"]["message"]
        fcntl.flock(f, fcntl.LOCK_UN)


def test_refusals_say_what_to_fix(service, monkeypatch):
    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    r = service.post("/v1/calibration", headers=key("ops"))
    assert r.status_code == 422 and "TOOLRANK_LLM_BASE_URL" in r.json()["error"]["message"]
    assert service.get("/v1/calibration", headers=key("ops")).json()["state"] == "none"
    assert service.post("/v1/calibration", headers=key("acme")).status_code == 403
    assert service.get("/v1/calibration", headers=key("acme")).status_code == 403
    assert service.post("/v1/calibration").status_code == 401
    use(monkeypatch, ProbeClient())
    for body in ({"probes": 5}, {"probes": "100"}, {"probes": 100, "extra": 1}):
        r = service.post("/v1/calibration", json=body, headers=key("ops"))
        assert r.status_code == 422, (body, r.text)


def test_an_index_that_cannot_carry_one_is_refused(make_client, monkeypatch):
    from serve_fakes import auth

    client = make_client()   # serve_fakes' FakeIndex: no tool hashes, as Qdrant's
    use(monkeypatch, ProbeClient())
    r = client.post("/v1/calibration", headers=auth("ops"))
    assert r.status_code == 501 and r.json()["error"]["code"] == "calibration_unsupported", r.text
    assert client.get("/v1/calibration", headers=auth("ops")).json()["state"] == "none"


def test_the_console_shows_the_calibration_in_effect_and_the_last_job(service, monkeypatch):
    from real_app import KEYS

    assert service.post("/ui/login", data={"key": KEYS["ops"]}, follow_redirects=False).status_code == 303
    page = service.get("/ui/service").text
    assert 'id="calibration"' in page and "none: the shipped probabilities" in page and "last job" in page
    use(monkeypatch, ProbeClient())
    service.post("/v1/calibration", headers=key("ops"))
    assert wait_done(service)["state"] == "done"
    page = service.get("/ui/service").text
    assert "probabilities mapped by sigmoid(" in page and "decisions unchanged" in page and "done: calibration probes" in page
    from retrieval.pipeline.flow import Pipeline
    from retrieval.pipeline.probes import CatalogCalibration

    monkeypatch.setattr(Pipeline, "catalog_calibration", CatalogCalibration(   # a catalog whose tail level moved
        1.1, 0.8, 200, 170, 0.7, "m", tail_shift=5.5, tail_judged=200, tail_fits=15))
    page = service.get("/ui/service").text
    assert "past the head 15 of 200 judged candidates fit: their level moves by +5.50 logits" in page


def test_a_calibrated_catalog_calibrates_again_and_the_lock_is_released(service, monkeypatch):
    use(monkeypatch, ProbeClient())
    service.post("/v1/calibration", headers=key("ops"))
    first = wait_done(service)
    again = ProbeClient()
    use(monkeypatch, again)
    assert service.post("/v1/calibration", headers=key("ops")).status_code == 202
    second = wait_done(service)
    assert second["state"] == "done", second                  # probed on the shipped scale, not through its own map
    assert again.calls == 0 and "13 from the cache" in second["message"]
    assert second["calibration"] == first["calibration"]      # the same probes read the same: the same map,
    assert second["saved_version"] == first["saved_version"]  # and no new version for it
    assert second["catalog_calibration"] == second["calibration"]


def test_progress_names_the_phase_and_its_counts(service, monkeypatch):
    gate = threading.Event()
    use(monkeypatch, ProbeClient(gate))
    service.post("/v1/calibration", json={"probes": 10}, headers=key("ops"))
    end = time.monotonic() + 10
    body = {}
    while time.monotonic() < end:
        body = service.get("/v1/calibration", headers=key("ops")).json()
        if body.get("phase") == "writing":
            break
        time.sleep(0.02)
    assert body["phase"] == "writing" and body["total"] == 13 and body["done"] == 0, body   # 8 tools: 13 probes
    assert body["worker"].endswith(f":{__import__('os').getpid()}")
    gate.set()
    done = wait_done(service)
    assert done["phase"] == "saving" and done["done"] == done["total"] == 1


def test_a_stop_keeps_what_was_written_and_saves_nothing(service, monkeypatch, tmp_path):
    assert service.delete("/v1/calibration", headers=key("ops")).status_code == 404
    gate = threading.Event()
    fake = ProbeClient(gate)
    use(monkeypatch, fake)
    service.post("/v1/calibration", headers=key("ops"))
    end = time.monotonic() + 10
    while fake.calls == 0 and time.monotonic() < end:   # calls in flight, held at the gate
        time.sleep(0.01)
    r = service.delete("/v1/calibration", headers=key("ops"))
    assert r.status_code == 200 and r.json()["state"] == "running", r.text   # it stops after the calls in flight
    gate.set()
    body = wait_done(service)
    assert body["state"] == "stopped" and "stopped on request" in body["message"], body
    assert body["saved_version"] is None
    assert service.get("/readyz", headers=key("ops")).json()["catalog_calibration"] is None
    cache = tmp_path / "store" / "probes-cache.jsonl"
    assert 0 < len(cache.read_text().splitlines()) < 13          # the calls in flight were kept, no more
    assert service.delete("/v1/calibration", headers=key("ops")).status_code == 404
    use(monkeypatch, ProbeClient())                                # and a new run goes on from there
    service.post("/v1/calibration", headers=key("ops"))
    assert wait_done(service)["state"] == "done"


def test_a_worker_shutting_down_records_that_its_job_stopped(tmp_path, monkeypatch):
    client = real_client(tmp_path)
    gate = threading.Event()
    use(monkeypatch, ProbeClient(gate))
    assert client.post("/v1/calibration", headers=key("ops")).status_code == 202
    threading.Timer(0.3, gate.set).start()
    started = time.monotonic()
    client.__exit__(None, None, None)
    assert time.monotonic() - started < 10
    record = json.loads((tmp_path / "store" / STATE_FILE).read_text())
    assert record["state"] == "stopped" and record["finished_at"]


def test_an_unreadable_or_foreign_record_is_no_record(service, tmp_path):
    for record in ({}, {"state": "cancelled"}, {"state": "done", "done": -1}, [1]):
        (tmp_path / "store" / STATE_FILE).write_text(json.dumps(record))
        r = service.get("/v1/calibration", headers=key("ops"))
        assert r.status_code == 200 and r.json()["state"] == "none" and "cannot be read" in r.json()["message"]


def test_a_read_only_copy_reads_the_record_and_refuses_to_calibrate(tmp_path, monkeypatch):
    writer = real_client(tmp_path)
    writer.__exit__(None, None, None)
    (tmp_path / "store" / STATE_FILE).write_text(json.dumps({"state": "failed", "message": "endpoint down"}))
    copy = real_client(tmp_path, read_only=True)
    try:
        use(monkeypatch, ProbeClient())
        r = copy.post("/v1/calibration", headers=key("ops"))
        assert r.status_code == 405 and r.json()["error"]["code"] == "read_only_store"
        body = copy.get("/v1/calibration", headers=key("ops")).json()
        assert body["state"] == "failed" and body["message"] == "endpoint down"
    finally:
        copy.__exit__(None, None, None)


def test_a_qdrant_store_is_refused(service, monkeypatch):
    use(monkeypatch, ProbeClient())
    monkeypatch.setattr(service.app.state.toolrank.engine.store, "read_through", True, raising=False)
    monkeypatch.setattr(service.app.state.toolrank.engine, "refresh", lambda: False)
    r = service.post("/v1/calibration", headers=key("ops"))
    assert r.status_code == 501 and r.json()["error"]["code"] == "calibration_unsupported"
    assert "Qdrant" in service.get("/v1/calibration", headers=key("ops")).json()["message"]


def test_the_automatic_calibration_follows_the_catalog(tmp_path, monkeypatch):
    use(monkeypatch, ProbeClient())
    client = real_client(tmp_path, calibrate_after_change_s=0.05)
    try:
        at_start = wait_done(client, started=True)          # at start: the served index had none
        assert at_start["state"] == "done" and at_start["trigger"] == "start", at_start
        assert client.put("/v1/servers/Tracker", json=BODY, headers=key("ops")).status_code == 201
        body = wait_for_change_run(client)                 # the change dropped it; a new one follows
        assert body["state"] == "done" and body["saved_version"] > at_start["saved_version"], body
        assert body["catalog_calibration"] == body["calibration"]
        cached = int(re.search(r"(\d+) from the cache", body["message"]).group(1))
        assert cached >= 8, body["message"]                 # the eight tools probed before are not asked again
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)


def test_the_automatic_calibration_without_an_endpoint_fails_at_start(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from real_app import TENANTS, real_pipeline
    from serve.app import create_app
    from serve.settings import Settings

    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    (tmp_path / "tenants.toml").write_text(TENANTS)
    app = create_app(Settings(config=tmp_path / "tenants.toml", index_dir=tmp_path / "store",
                              calibrate_after_change_s=1.0), pipeline=real_pipeline())
    with TestClient(app, raise_server_exceptions=False) as client:
        end = time.monotonic() + 30
        while time.monotonic() < end and client.get("/readyz").json()["status"] == "loading":
            time.sleep(0.05)
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "failed"


def test_an_admin_starts_and_stops_a_calibration_from_the_console(service, monkeypatch):
    from real_app import KEYS

    assert service.post("/ui/login", data={"key": KEYS["acme"]}, follow_redirects=False).status_code == 303
    assert service.post("/ui/calibration/start", follow_redirects=False).status_code == 403
    assert service.post("/ui/login", data={"key": KEYS["ops"]}, follow_redirects=False).status_code == 303
    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    r = service.post("/ui/calibration/start", follow_redirects=False)
    assert r.status_code == 422 and "TOOLRANK_LLM_BASE_URL" in r.text
    gate = threading.Event()
    use(monkeypatch, ProbeClient(gate))
    r = service.post("/ui/calibration/start", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/service"
    page = service.get("/ui/service").text
    assert "Stop the calibration" in page and "running" in page
    assert service.post("/ui/calibration/start", follow_redirects=False).status_code == 409
    assert service.post("/ui/calibration/stop", follow_redirects=False).status_code == 303
    gate.set()
    assert wait_done(service)["state"] == "stopped"
    assert "Calibrate the catalog" in service.get("/ui/service").text
    assert service.post("/ui/calibration/other", follow_redirects=False).status_code == 404


def test_an_automatic_run_does_not_undo_a_stop_nor_retry_a_failure_of_the_same_catalog(tmp_path, monkeypatch):
    gate = threading.Event()
    fake = ProbeClient(gate)
    use(monkeypatch, fake)
    client = real_client(tmp_path, calibrate_after_change_s=0.05)
    try:
        end = time.monotonic() + 10
        while fake.calls == 0 and time.monotonic() < end:                # the run at start, held at the gate
            time.sleep(0.01)
        assert client.delete("/v1/calibration", headers=key("ops")).status_code == 200
        gate.set()
        assert wait_done(client)["state"] == "stopped"
        calls = fake.calls
        state = client.app.state.toolrank
        state.calibration_jobs.schedule(state.engine, 10, 0.05, "a catalog change")   # another worker's timer
        time.sleep(0.5)
        assert client.get("/v1/calibration", headers=key("ops")).json()["state"] == "stopped" and fake.calls == calls
        assert client.put("/v1/servers/Tracker", json=BODY, headers=key("ops")).status_code == 201
        assert wait_for_change_run(client)["state"] == "done"           # a new catalog: tried again
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)


def _runs(monkeypatch, client_factory):
    """Count the automatic runs: each asks the factory for one endpoint client."""
    made = []

    def factory(concurrency=4):
        made.append(client_factory())
        return made[-1]

    monkeypatch.setattr(ix, "llm_client", factory)
    return made


def test_a_burst_of_changes_is_one_run_and_a_calibrated_store_starts_none(tmp_path, monkeypatch):
    made = _runs(monkeypatch, ProbeClient)
    client = real_client(tmp_path, calibrate_after_change_s=0.6)
    try:
        assert wait_done(client, started=True)["state"] == "done"
        before = len(made)                                                 # the endpoint check + the start run
        for i in range(3):             # each change within the delay of the one before: one run, after the last
            body = {**BODY, "tools": [{"name": f"t{i}", "description": f"ticket action {i}"}]}
            assert client.put("/v1/servers/Tracker", json=body, headers=key("ops")).status_code in (200, 201)
            time.sleep(0.35 if i < 2 else 0)
        rec = wait_for_change_run(client)
        time.sleep(0.5)
        assert rec["state"] == "done" and len(made) == before + 1           # one run for the burst
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)
    started = rec["started_at"]
    client = real_client(tmp_path, calibrate_after_change_s=0.05)           # a restart on the calibrated store
    try:
        time.sleep(0.5)
        rec = client.get("/v1/calibration", headers=key("ops")).json()
        assert rec["started_at"] == started and rec["catalog_calibration"] is not None   # no new run
    finally:
        client.__exit__(None, None, None)


def test_a_change_during_a_run_is_followed_by_a_run_on_the_new_catalog(tmp_path, monkeypatch):
    gate = threading.Event()
    made = _runs(monkeypatch, lambda: ProbeClient(gate))
    client = real_client(tmp_path, calibrate_after_change_s=0.05)
    try:
        end = time.monotonic() + 10
        while not any(c.calls for c in made) and time.monotonic() < end:   # the start run, held at the gate
            time.sleep(0.01)
        assert client.put("/v1/servers/Tracker", json=BODY, headers=key("ops")).status_code == 201
        time.sleep(0.3)                                                      # its timer waits for the run
        assert client.get("/v1/calibration", headers=key("ops")).json()["trigger"] == "start"
        gate.set()
        rec = wait_for_change_run(client)
        assert rec["state"] == "done" and rec["catalog_calibration"] == rec["calibration"]
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)


def test_a_calibration_whose_tail_awaits_judgments_is_run_again_at_start(tmp_path, monkeypatch):
    from retrieval.pipeline.probes import CatalogCalibration

    made = _runs(monkeypatch, ProbeClient)
    client = real_client(tmp_path, calibrate_after_change_s=0.05)
    try:
        first = wait_done(client, started=True)
        assert first["state"] == "done"
        engine = client.app.state.toolrank.engine
        cal = CatalogCalibration.from_dict(first["catalog_calibration"])
        partial = CatalogCalibration(cal.a, cal.b, cal.searches, cal.fits, cal.mean_best, cal.model, tail_waiting=4)
        engine.set_calibration(partial.to_dict(), engine.snapshot.pipeline.index.tool_hashes())   # as a failed tail leaves it
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)
    runs = len(made)
    client = real_client(tmp_path, calibrate_after_change_s=0.05)           # a restart on that store
    try:
        end = time.monotonic() + 30
        while True:
            rec = client.get("/v1/calibration", headers=key("ops")).json()
            if rec["state"] == "done" and (rec.get("catalog_calibration") or {}).get("tail_waiting", 1) == 0:
                break
            assert time.monotonic() < end, rec
            time.sleep(0.05)
        assert len(made) > runs and "0 written" in rec["message"]   # a second run: the cache had every probe
    finally:
        client.app.state.toolrank.calibration_jobs.wait(30)
        client.__exit__(None, None, None)
