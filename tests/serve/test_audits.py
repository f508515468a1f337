"""Audits (serve/audits.py): a share of searches drawn by request id, their first tool judged by the LLM endpoint in
the background, only the verdict kept, and each tenant's recalibration fitted on its own audits."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import retrieval.index.examples as ix
from fakes import ProbeClient
from real_app import key, real_client
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.pipeline.recalibration import fit_audit_recalibration, platt
from serve.audits import Auditor, drawn
from serve.usage import UsageBook, tenant_folder

CATALOG = Catalog([Tool("Mail", "send_email", "Send an email message"),
                   Tool("Files", "read_file", "Read a file from disk")])


def answer(tool=("Mail", "send_email"), raw=0.6, source="ranked"):
    return SimpleNamespace(tools=[SimpleNamespace(tool_id=ToolId(*tool), source=source)], raw_best=raw)


def tenant(name="acme", audit=True):
    return SimpleNamespace(name=name, audit=audit)


def test_the_draw_is_fixed_by_the_request_id_and_the_deployments_secret_and_keeps_its_share(tmp_path):
    from serve.audits import audit_salt

    assert not drawn("acme", "r1", 0.0) and drawn("acme", "r1", 1.0) and not drawn("acme", None, 1.0)
    ids = [f"req-{i}" for i in range(20_000)]
    share = np.mean([drawn("acme", r, 0.1) for r in ids])
    assert share == pytest.approx(0.1, abs=0.01)
    assert [drawn("acme", r, 0.1) for r in ids[:500]] == [drawn("acme", r, 0.1) for r in ids[:500]]   # no state
    # each tenant its own draw, and a larger share keeps every search a smaller one drew
    assert [drawn("acme", r, 0.1) for r in ids[:2000]] != [drawn("other", r, 0.1) for r in ids[:2000]]
    assert all(drawn("acme", r, 0.3) for r in ids[:2000] if drawn("acme", r, 0.1))
    # keyed with a secret made once per usage root (0600): a client choosing request ids cannot tell the draw
    salt = audit_salt(tmp_path)
    assert len(salt) == 32 and audit_salt(tmp_path) == salt and ((tmp_path / "audit-salt").stat().st_mode & 0o777) == 0o600
    assert [drawn("acme", r, 0.1, salt) for r in ids[:2000]] != [drawn("acme", r, 0.1) for r in ids[:2000]]
    assert audit_salt(tmp_path / "other") != salt


class Recording(ProbeClient):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.sent = []

    def chat(self, messages, temperature=0.0):
        self.sent.append(messages)
        return super().chat(messages, temperature)


def test_an_audit_keeps_the_verdict_and_never_the_request(tmp_path):
    book = UsageBook(tmp_path)
    client = Recording(judge_yes=0.9)
    auditor = Auditor(book, 1.0, 100, lambda: client)
    assert auditor.offer(tenant(), "r1", "please send email for me, token sk-live-abcdefghijklmnop1234", answer(),
                         CATALOG, 3)
    assert auditor.offer(tenant(), "r2", "what is the weather in Paris", answer(raw=0.3), CATALOG, 3)
    assert auditor.join(30)
    rows = book.tenant("acme").audits()
    assert [(r["request_id"], r["fit"], r["raw_best"], r["tool"]) for r in rows] == [
        ("r1", True, 0.6, "send_email"), ("r2", False, 0.3, "send_email")]
    text = (tmp_path / tenant_folder("acme") / "audits.jsonl").read_text()
    assert "Paris" not in text and "please" not in text and "sk-live" not in text
    sent = " ".join(m["content"] for messages in client.sent for m in messages)   # what went to the endpoint
    assert "please send email for me" in sent and "sk-live-abcdefghijklmnop1234" not in sent
    assert book.audit_observations("acme") == ([0.6, 0.3], [1.0, 0.0])
    assert book.audit_observations("nobody") == ([], [])
    assert auditor.state()["judged"] == 2
    auditor.close()
    assert client.closed


def test_what_is_never_audited(tmp_path):
    book = UsageBook(tmp_path)
    auditor = Auditor(book, 1.0, 48, lambda: ProbeClient())   # 48 a day: two at once (an hour's worth)
    assert not auditor.offer(tenant(audit=False), "r1", "send email", answer(), CATALOG)      # opted out
    assert not auditor.offer(tenant(), "r2", "send email", answer(source="exact_name"), CATALOG)   # a shortcut
    assert not auditor.offer(tenant(), "r3", "send email", answer(raw=None), CATALOG)        # no calibrated number
    assert not auditor.offer(tenant(), "r4", "send email", answer(tool=("Gone", "x")), CATALOG)   # not in the catalog
    assert not auditor.offer(tenant(), "r5", "send email", SimpleNamespace(tools=[], raw_best=0.5), CATALOG)
    assert auditor.offer(tenant(), "r6", "send email", answer(), CATALOG)
    assert auditor.offer(tenant(), "r7", "send email", answer(), CATALOG)
    assert not auditor.offer(tenant(), "r8", "send email", answer(), CATALOG)                # the bucket is empty
    assert auditor.offer(tenant("other"), "r8", "send email", answer(), CATALOG)             # per tenant
    assert auditor.join(30)
    assert auditor.state()["over_daily"] == 1 and len(book.tenant("acme").audits()) == 2
    # paced over the day: an audit comes back every half hour (48 a day), not at midnight
    clock = [1000.0]
    import serve.audits as audits_module

    real = audits_module.time.monotonic
    audits_module.time.monotonic = lambda: clock[0]
    try:
        paced = Auditor(book, 1.0, 48, lambda: ProbeClient())
        assert [paced.offer(tenant("p"), f"p{i}", "send email", answer(), CATALOG) for i in range(3)] == [True, True, False]
        clock[0] += 600
        assert not paced.offer(tenant("p"), "p3", "send email", answer(), CATALOG)
        clock[0] += 1200
        assert paced.offer(tenant("p"), "p4", "send email", answer(), CATALOG)
    finally:
        audits_module.time.monotonic = real
        paced.close()
    auditor.close()


def test_a_failing_judge_or_a_full_queue_costs_nothing_but_the_audit(tmp_path):
    book = UsageBook(tmp_path)
    auditor = Auditor(book, 1.0, 100, lambda: ProbeClient(fail=True), attempts=1)
    assert auditor.offer(tenant(), "r1", "send email", answer(), CATALOG)
    assert auditor.join(30)
    assert auditor.state()["failed"] == 1 and book.tenant("acme").audits() == []
    auditor.close()

    gate = threading.Event()
    held = Auditor(book, 1.0, 100, lambda: ProbeClient(gate=gate), queue_max=2)
    queued = [held.offer(tenant(), f"q{i}", "send email", answer(), CATALOG) for i in range(6)]
    assert queued[:2] == [True, True] and not all(queued) and held.state()["dropped"] >= 1
    gate.set()
    assert held.join(30)
    held.close()
    assert not held.offer(tenant(), "late", "send email", answer(), CATALOG)   # closed: nothing more is taken

    # a judgment in flight when the auditor closes is not written; no client is made after close
    gate2, made = threading.Event(), []
    inflight = Auditor(UsageBook(tmp_path / "b2"), 1.0, 100, lambda: made.append(1) or ProbeClient(gate=gate2))
    assert inflight.offer(tenant(), "f1", "send email", answer(), CATALOG)
    end = __import__("time").monotonic() + 10
    while not made and __import__("time").monotonic() < end:
        __import__("time").sleep(0.01)
    closer = threading.Thread(target=inflight.close, kwargs={"timeout": 10})
    closer.start()
    gate2.set()
    closer.join(15)
    assert inflight.book.tenant("acme").audits() == [] and len(made) == 1
    never = Auditor(UsageBook(tmp_path / "b3"), 1.0, 100, lambda: made.append(2) or ProbeClient())
    never.close()
    assert not never.offer(tenant(), "f2", "send email", answer(), CATALOG) and made == [1]


def test_what_the_fit_reads_of_the_audits_file(tmp_path, monkeypatch):
    """A damaged or half-written line is skipped, a request id counts once, audits of another scorer are left
    out, and the fit follows the catalog's map it is pulled towards."""
    book = UsageBook(tmp_path)
    usage = book.tenant("acme")
    for i in range(30):
        usage.record_audit({"request_id": f"r{i}", "raw_best": 0.5, "fit": i % 3 != 0, "model": "m1", "question": "step"})
    usage.record_audit({"request_id": "r0", "raw_best": 0.9, "fit": True, "model": "m1", "question": "step"})  # replayed
    usage.record_audit({"request_id": "o1", "raw_best": 0.9, "fit": False, "model": "m0", "question": "step"})  # scorer
    with open(usage.audits_path, "a") as fh:
        fh.write('{"request_id": "torn", "raw_be\n[1, 2]\nnot json\n{"request_id": "half"')
    p, y = book.audit_observations("acme", "m1")
    assert len(p) == 30 and p == [0.5] * 30 and sum(y) == 20
    assert len(book.audit_observations("acme")[0]) == 31   # without a model: every scorer's
    one = book.recalibration("acme", 25, 0.0, feedback=False, audits=True, prior=(1.0, 0.0), model="m1")
    other = book.recalibration("acme", 25, 0.0, feedback=False, audits=True, prior=(1.0, 2.0), model="m1")
    assert one.observations == 30 and other.b > one.b            # a new catalog map: refitted towards it
    assert book.recalibration("acme", 25, 0.0, feedback=False, audits=True, model="m9") is None
    assert book.recalibration("acme", 25, 0.0, feedback=False, audits=False) is None
    # a minimum above what is kept is capped at what is kept, never out of reach
    import serve.usage as usage_module

    monkeypatch.setattr(usage_module, "AUDITS_KEPT", 25)
    capped = book.recalibration("acme", 50_000, 0.0, feedback=False, audits=True, model="m1")
    assert capped is not None and capped.observations <= 25
    monkeypatch.undo()
    usage.record_audit({"request_id": "tail", "raw_best": 0.5, "fit": True, "model": "m1", "question": "step"})
    assert book.audit_observations("acme", "m1")[0][-1] == 0.5   # appending after a torn line still works


def test_the_audit_fit_starts_at_the_catalogs_map_and_follows_the_audits():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.3, 0.95, 2000)
    truth = platt(p, 1.0, 1.5)                       # the tenant's traffic fits far more often than p says
    y = (rng.random(p.size) < truth).astype(float)
    assert fit_audit_recalibration(p[:10], y[:10], min_observations=25) is None
    few = fit_audit_recalibration(p[:5], y[:5], prior=(0.8, 0.4), min_observations=5, pull=1e6)
    assert (few.a, few.b) == pytest.approx((0.8, 0.4), abs=1e-3)    # no evidence to speak of: the catalog's map
    many = fit_audit_recalibration(p, y, prior=(0.8, -1.0))
    assert many.b == pytest.approx(1.5, abs=0.4) and many.observations == 2000   # enough: the audits' own level
    with pytest.raises(ValueError):
        fit_audit_recalibration([0.5] * 30, [1.0] * 29)


def test_a_served_tenants_audits_recalibrate_its_searches_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", "judge")
    fake = ProbeClient(judge_yes=0.95)
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: fake)
    c = real_client(tmp_path, audit_share=1.0, use_recalibration_min=5, use_recalibration_refit_s=0)
    try:
        auditor = c.app.state.toolrank.auditor
        request = "search github issues"

        def search(who):
            r = c.post("/v1/search", json={"request": request}, headers=key(who))
            assert r.status_code == 200, r.text
            return r.json()

        before = search("acme")
        assert before["recalibrated_from"] is None
        assert auditor.join(30)
        first = before["tools"][0]
        rows = c.app.state.toolrank.usage.tenant("acme").audits()
        assert rows and rows[0]["tool"] == first["tool"] and rows[0]["request_id"] == before["request_id"]
        # the judge accepts a first tool whose words are in the request; the verdicts are the tenant's evidence
        verdict = rows[0]["fit"]
        for _ in range(5):
            search("acme")
        assert auditor.join(30)
        after = search("acme")
        assert after["recalibrated_from"] >= 5
        assert after["decision"] == before["decision"]        # thresholds move with the map: the same decision
        if verdict:
            assert after["best_probability"] > before["best_probability"]
        else:
            assert after["best_probability"] < before["best_probability"]
        # evidence that cannot be read never fails a search: it goes on with the catalog's own numbers
        usage = c.app.state.toolrank.usage
        real_recal = usage.recalibration
        usage.recalibration = lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone"))
        try:
            unread = search("acme")
            assert unread["recalibrated_from"] is None and unread["decision"] == before["decision"]
        finally:
            usage.recalibration = real_recal
        other = search("all")                                 # another tenant: its own (one) audit, no fit
        assert other["recalibrated_from"] is None
        audits = c.get("/readyz", headers=key("ops")).json()["audits"]
        assert audits["share"] == 1.0 and audits["judged"] >= 7 and audits["failed"] == 0
        assert c.get("/readyz", headers=key("acme")).json()["audits"] is None   # admins only
        state = c.get("/v1/metrics/use", headers=key("acme")).json()["recalibration"]
        assert state["source"] == "audits" and state["applied"] and state["audits_on"]
        assert state["audited"] >= 6 and not state["enabled"]
        folder = tmp_path / "store" / "usage" / tenant_folder("acme") / "audits.jsonl"
        assert request not in folder.read_text()
        kept = [json.loads(line)["raw_best"] for line in folder.read_text().splitlines()]
        assert len(kept) >= 7 and kept == [rows[0]["raw_best"]] * len(kept)   # the shipped scale, recalibrated or not
    finally:
        c.__exit__(None, None, None)
    assert fake.closed


def test_audits_without_an_endpoint_fail_at_start_with_what_to_set(tmp_path, monkeypatch):
    """...and a read-only replica, which audits nothing, starts without one."""
    from serve.app import create_app
    from serve.settings import Settings

    for name in ("TOOLRANK_LLM_BASE_URL", "TOOLRANK_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="TOOLRANK_AUDIT_SHARE=0.1 needs the LLM endpoint"):
        create_app(Settings(auth_disabled=True, audit_share=0.1))
    with pytest.raises(ValueError):
        Settings(auth_disabled=True, audit_share=1.5)
    (tmp_path / "idx").mkdir()
    app = create_app(Settings(auth_disabled=True, audit_share=0.1, read_only=True, index_dir=tmp_path / "idx"))
    assert app.state.toolrank.auditor is None


def test_the_gateway_audits_its_own_searches_unless_its_tenant_opts_out(tmp_path, monkeypatch):
    from serve.settings import GatewaySettings
    from serve.usage import GatewayUsage

    fake = ProbeClient(judge_yes=0.9)
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: fake)
    settings = GatewaySettings(audit_share=1.0, use_recalibration_min=5, use_recalibration_refit_s=0)
    usage = GatewayUsage(tmp_path / "g", settings=settings)
    for i in range(5):
        usage.offered("please send email for me", None, answer(raw=0.5), CATALOG)
    assert usage.auditor.join(30)
    assert usage.book.audit_observations(usage.tenant) == ([0.5] * 5, [1.0] * 5)
    pipeline = SimpleNamespace(catalog_calibration=SimpleNamespace(a=1.0, b=0.0))
    fitted = usage.recalibration(pipeline)
    assert fitted is not None and fitted.observations == 5 and float(fitted.apply(0.5)) > 0.5
    usage.close()
    assert fake.closed
    quiet = GatewayUsage(tmp_path / "g", settings=settings, audit=False)   # the same folder, five audits in it
    assert quiet.auditor is None
    quiet.offered("please send email for me", None, answer(raw=0.5), CATALOG)
    assert len(quiet.book.audit_observations(quiet.tenant)[0]) == 5
    assert quiet.recalibration(pipeline) is None               # opted out: the audits on disk are not read


def test_the_step_question_is_asked_kept_and_read_apart(tmp_path):
    """TOOLRANK_AUDIT_QUESTION=step (the default) asks whether the tool is a right one to call (the request or one of
    its steps), tool whether it does everything by itself; each verdict is kept with its question and a fit reads
    only the question asked now."""
    book = UsageBook(tmp_path)
    client = Recording(judge_yes=0.9)
    step = Auditor(book, 1.0, 100, lambda: client, question="step")
    assert step.offer(tenant(), "s1", "please send email for me and then archive it", answer(), CATALOG)
    assert step.join(30)
    assert client.sent[0][0]["content"].startswith("# Is this tool a right one to call")
    assert book.tenant("acme").audits()[0]["question"] == "step" and step.state()["question"] == "step"
    step.close()
    tool = Auditor(book, 1.0, 100, lambda: ProbeClient(judge_yes=0.9), question="tool")
    assert tool.offer(tenant(), "t1", "please send email for me", answer(), CATALOG)
    assert tool.join(30)
    tool.close()
    assert len(book.audit_observations("acme", question="step")[0]) == 1
    assert len(book.audit_observations("acme", question="tool")[0]) == 1
    assert len(book.audit_observations("acme")[0]) == 2
    with pytest.raises(ValueError, match="audit question"):
        Auditor(book, 1.0, 100, lambda: ProbeClient(), question="other")


def test_a_restricted_tenants_audits_judge_only_its_own_tools(tmp_path, monkeypatch):
    """Over HTTP: the tail candidates an audit judges come from the tenant's own search (its servers only)."""
    from fakes import FakeScorer, HashEncoder, tiny_catalog
    from real_app import ACME
    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.confidence import ConfidenceModel, TailCalibration
    from retrieval.pipeline.decision import Policy
    from retrieval.pipeline.flow import Pipeline

    logit = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "combiner-noex.json").write_text(json.dumps(logit.to_dict()))
    TailCalibration(a=-4.0, b=0.0, c=-0.5, d=0.0).save(tmp_path / "m" / "tail_calibration.json")
    pipe = Pipeline(ToolIndex(tiny_catalog(), HashEncoder(), with_examples=False),
                    FakeScorer({}, default=0.3, path=tmp_path / "m"), policy=Policy(score_top=2))
    assert pipe.tail_calibration is not None
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", "judge")
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: ProbeClient(judge_yes=0.9))
    c = real_client(tmp_path, pipeline=pipe, audit_share=1.0, audit_daily_max=24_000)
    try:
        for i in range(12):
            r = c.post("/v1/search", json={"request": f"search the logs and issues {i}"}, headers=key("acme"))
            assert r.status_code == 200, r.text
        assert c.app.state.toolrank.auditor.join(30)
        rows = c.app.state.toolrank.usage.tenant("acme").audits()
        tails = [r["tail"] for r in rows if "tail" in r]
        assert len(rows) == 12 and len(tails) >= 6 and all(t["server"] in ACME for t in tails)
        assert all(r["server"] in ACME for r in rows)
    finally:
        c.__exit__(None, None, None)


def test_tail_rows_naming_a_hidden_tool_never_reach_an_audit():
    """Defence in depth: were a pipeline to leak, the tail rows an audit draws from keep the tenant's tools only."""
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.pipeline.results import ScoredTool, SearchResult
    from serve.routes.ranking import _visible_result
    from serve.tenants import Tenant

    who = Tenant("acme", Eligibility.of(servers=["Mail"]))
    snap = SimpleNamespace(catalog=SimpleNamespace(servers=["Mail", "Files"]), pipeline=SimpleNamespace())
    mail, hidden = ToolId("Mail", "send_email"), ToolId("Files", "read_file")
    leaky = SearchResult("proceed", [ScoredTool(mail, 0.9, 1, "ranked")], 0.9, 1, tail=((hidden, 0.01), (mail, 0.02)))
    assert _visible_result(leaky, who, snap).tail == ((mail, 0.02),)
    both = SearchResult("proceed", [ScoredTool(mail, 0.9, 1, "ranked"), ScoredTool(hidden, 0.5, 2, "ranked")], 0.9, 1,
                        tail=((hidden, 0.01),))
    shown = _visible_result(both, who, snap)
    assert shown.tail == () and [t.tool_id for t in shown.tools] == [mail]


def test_a_tenant_opts_out_in_the_tenants_file(tmp_path, monkeypatch):
    """``audit = false``: none of its searches is drawn, over HTTP, while another tenant's are."""
    from testkit import tenants_toml

    from serve.app import create_app
    from serve.settings import Settings
    from serve.tenants import load_tenants
    from fastapi.testclient import TestClient
    from real_app import real_pipeline
    from serve_fakes import wait_ready

    path = tmp_path / "tenants.toml"
    path.write_text(tenants_toml({"name": "quiet", "key": "k-quiet", "servers": "*", "audit": False},
                                 {"name": "open", "key": "k-open", "servers": "*"}))
    tenants = {t.name: t for t in load_tenants(path).all()}
    assert tenants["quiet"].audit is False and tenants["open"].audit is True
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", "judge")
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: ProbeClient(judge_yes=0.9))
    app = create_app(Settings(config=path, index_dir=tmp_path / "store", audit_share=1.0), pipeline=real_pipeline())
    with TestClient(app) as c:
        wait_ready(c)
        for who in ("quiet", "open"):
            r = c.post("/v1/search", json={"request": "search github issues"}, headers={"Authorization": f"Bearer k-{who}"})
            assert r.status_code == 200, r.text
        assert app.state.toolrank.auditor.join(30)
        usage = app.state.toolrank.usage
        assert usage.tenant("quiet").audits() == [] and len(usage.tenant("open").audits()) == 1
