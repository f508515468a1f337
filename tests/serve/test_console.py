"""The operator console (/ui) over the real pipeline: keys, tenants, escaping, headers (issue 38).
The same flows in a real browser: tests/serve/test_console_browser.py."""

from __future__ import annotations

import pytest

from real_app import KEYS, key, real_client

HOSTILE = "Adds <script>alert('x')</script> a row \u202egnp.exe\u202c and\u2028breaks <img src=x onerror=alert(1)>"


@pytest.fixture
def ui(tmp_path):
    client = real_client(tmp_path)
    yield client
    client.__exit__(None, None, None)


def login(client, tenant: str) -> None:
    r = client.post("/ui/login", data={"key": KEYS[tenant]}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/search"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and KEYS[tenant] not in r.headers["location"]


def test_nothing_is_readable_without_a_key(ui):
    for path in ("/ui/search", "/ui/catalog", "/ui/catalog/GitHub", "/ui/calibration", "/ui/service"):
        r = ui.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login", path
    assert ui.post("/ui/login", data={"key": "nope"}).status_code == 401
    assert ui.post("/ui/search", data={"request": "x"}, follow_redirects=False).headers["location"] == "/ui/login"


def test_every_page_has_a_strict_policy(ui):
    login(ui, "acme")
    for path in ("/ui/login", "/ui/search", "/ui/catalog", "/ui/calibration"):
        r = ui.get(path)
        assert r.status_code == 200, path
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"
        assert "<script" not in r.text.lower()


def test_a_search_shows_the_decision_tools_evidence_and_definitions(ui):
    login(ui, "acme")
    r = ui.post("/ui/search", data={"request": "create an issue about the failing build",
                                     "need": "create an issue in a repository", "k": "3"})
    assert r.status_code == 200
    assert 'id="decision"' in r.text and "create_issue" in r.text and "evidence" in r.text
    assert "openai" in r.text and "anthropic" in r.text and "tokens of definitions" in r.text
    assert "Weather" not in r.text     # acme may see Elasticsearch and GitHub only


def test_another_tenants_servers_are_unreachable(ui):
    login(ui, "acme")
    assert ui.get("/ui/catalog/Weather").status_code == 404            # exists, not acme's
    assert ui.get("/ui/catalog/NoSuchServer").status_code == 404       # does not exist: the same answer
    assert ui.get("/ui/catalog/GitHub").status_code == 200
    assert ui.get("/ui/catalog?as_tenant=all").text.count("Weather") == 0   # not an admin: always itself
    assert ui.get("/ui/service").status_code == 403


def test_a_hostile_catalog_renders_inert(ui):
    r = ui.put("/v1/servers/Evil", json={"description": HOSTILE, "tools": [
        {"name": "evil<b>tool</b>", "description": HOSTILE}]}, headers=key("ops"))
    assert r.status_code in (200, 201), r.text
    login(ui, "ops")
    page = ui.get("/ui/catalog/Evil").text
    assert "<script>" not in page and "<img" not in page and "<b>tool</b>" not in page
    assert "&lt;script&gt;" in page and "⟨U+202E⟩" in page and "⟨U+2028⟩" in page
    found = ui.post("/ui/search", data={"request": "adds a row evil tool"}).text
    assert "<script>" not in found and "<img" not in found


def test_removing_a_learned_example_in_the_console(ui):
    r = ui.post("/v1/search", json={"request": "the cluster turned yellow overnight"},
                headers={**key("acme"), "X-Request-ID": "ui-1"})
    first = r.json()["tools"][0]
    f = ui.post("/v1/feedback", json={"request_id": "ui-1", "server": first["server"], "tool": first["tool"],
                                      "outcome": "success"}, headers=key("acme"))
    assert f.json()["learned"]
    login(ui, "acme")
    page = ui.get(f"/ui/catalog/{first['server']}").text
    assert "the cluster turned yellow overnight" in page and "Remove" in page
    gone = ui.post("/ui/examples/remove", data={"server": first["server"], "tool": first["tool"],
                                                "example": "the cluster turned yellow overnight"})
    assert gone.status_code == 200 and "the cluster turned yellow overnight" not in gone.text
    assert ui.get("/v1/examples", headers=key("acme")).json()["tools"] == []


def test_the_console_can_be_switched_off(tmp_path):
    client = real_client(tmp_path, ui=False)
    try:
        assert client.get("/ui/login").status_code == 404
    finally:
        client.__exit__(None, None, None)


def test_calibration_and_service_pages(ui):
    for i in range(2):
        r = ui.post("/v1/search", json={"request": "list the open issues of the repo"},
                    headers={**key("acme"), "X-Request-ID": f"c-{i}"})
        t = r.json()["tools"][0]
        ui.post("/v1/feedback", json={"request_id": f"c-{i}", "server": t["server"], "tool": t["tool"],
                                      "outcome": "success"}, headers=key("acme"))
    login(ui, "acme")
    page = ui.get("/ui/calibration").text
    assert 'id="reliability"' in page and "ECE" in page and 'id="days"' in page
    assert 'id="recalibration"' in page and "Audits off" in page and "from feedback: off" in page
    assert "2 observations (feedback), 25 needed" in page
    login(ui, "ops")
    assert "index version" in ui.get("/ui/service").text
    as_acme = ui.get("/ui/calibration?as_tenant=acme").text       # an admin may look as a tenant
    assert 'id="reliability"' in as_acme
    assert 'id="no-data"' in ui.get("/ui/calibration").text       # ops itself gave no feedback


def test_hostile_input_to_every_console_route_is_never_a_5xx(ui):
    """The console's forms and paths under generated input (the API routes are fuzzed from the OpenAPI
    schema in test_fuzz_api.py; the console's are not in it)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    login(ui, "ops")
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(request=text, need=text, k=st.one_of(st.integers(-5, 80).map(str), text), as_tenant=text,
           server=text.filter(lambda s: "/" not in s and s not in ("", ".", "..")), example=text)
    def run(request, need, k, as_tenant, server, example):
        from urllib.parse import quote

        for r in (ui.post("/ui/search", data={"request": request, "need": need, "k": k, "as_tenant": as_tenant}),
                  ui.get(f"/ui/catalog/{quote(server, safe='')}", params={"as_tenant": as_tenant}),
                  ui.get("/ui/calibration", params={"as_tenant": as_tenant}),
                  ui.post("/ui/examples/remove", data={"server": server, "tool": server, "example": example,
                                                       "as_tenant": as_tenant}),
                  ui.post("/ui/login", data={"key": request})):
            assert r.status_code < 500, (r.status_code, r.text[:300])
    run()
