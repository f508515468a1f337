"""The operator console in a real browser: headless Debian Chromium driven by Playwright (issue 38).

Skipped with a one-line reason where no Chromium exists; required in CI (``TOOLRANK_REQUIRE_BROWSER=1``,
set by ``.ci/run``, which installs Debian's chromium). With ``TOOLRANK_SCREENSHOTS=DIR`` each page is
saved as a PNG (docs/operations.md shows them).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from real_app import KEYS, TENANTS, key, real_pipeline

CHROMIUM = os.environ.get("TOOLRANK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    if os.environ.get("TOOLRANK_REQUIRE_BROWSER") == "1":
        raise RuntimeError("TOOLRANK_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
    pytest.skip("no chromium here (apt-get install chromium; CI requires it)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
SHOTS = os.environ.get("TOOLRANK_SCREENSHOTS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import httpx
    import uvicorn

    from serve.app import create_app
    from serve.settings import Settings

    tmp = tmp_path_factory.mktemp("console")
    (tmp / "tenants.toml").write_text(TENANTS)
    app = create_app(Settings(config=tmp / "tenants.toml", index_dir=tmp / "store"), pipeline=real_pipeline())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    else:
        raise RuntimeError("the service did not become ready")
    yield base
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    pg = context.new_page()
    pg.dialogs = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    context.close()


def shot(pg, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def log_in(pg, base: str, tenant: str) -> None:
    pg.goto(f"{base}/ui/search")
    assert pg.url.endswith("/ui/login")
    pg.fill("#key", KEYS[tenant])
    pg.click("button[type=submit]")
    pg.wait_for_url(f"{base}/ui/search")
    assert KEYS[tenant] not in pg.url


def test_log_in_and_run_a_search(server, page):
    log_in(page, server, "acme")
    page.fill("#request", "create an issue about the failing build")
    page.fill("#need", "create an issue in a repository")
    page.click("#run")
    page.wait_for_selector("#tools")
    tools = page.locator("#tools td.tool").all_inner_texts()
    assert "create_issue" in tools
    assert page.inner_text("#decision") in ("proceed", "search_again", "choose", "no_fit")
    shot(page, "search")


def test_removing_a_learned_example_changes_the_answer(server, page):
    import httpx

    r = httpx.post(f"{server}/v1/search", json={"request": "zebra quarterly report for the board"},
                   headers={**key("acme"), "X-Request-ID": "b-1"})
    t = r.json()["tools"][-1]
    httpx.post(f"{server}/v1/feedback", json={"request_id": "b-1", "server": t["server"], "tool": t["tool"],
                                               "outcome": "success"}, headers=key("acme"))
    log_in(page, server, "acme")
    page.fill("#request", "zebra quarterly report for the board")
    page.click("#run")
    page.wait_for_selector("#tools")
    before = page.locator("#tools td.tool").all_inner_texts()
    page.goto(f"{server}/ui/catalog/{t['server']}")
    assert "zebra quarterly report for the board" in page.inner_text("ul.learned")
    shot(page, "catalog-server")
    page.click("button.remove")
    page.wait_for_load_state()
    assert page.locator("ul.learned").count() == 0
    page.goto(f"{server}/ui/search")
    page.fill("#request", "zebra quarterly report for the board")
    page.click("#run")
    page.wait_for_selector("#tools")
    after = page.locator("#tools td.tool").all_inner_texts()
    assert before.index(t["tool"]) < after.index(t["tool"]) if t["tool"] in after else True
    assert before != after


def test_a_hostile_catalog_renders_inert(server, page):
    import httpx

    hostile = "Adds <script>alert('x')</script> a row \u202egnp.exe\u202c <img src=x onerror=alert(1)>"
    r = httpx.put(f"{server}/v1/servers/Evil", json={"description": hostile,
                                                     "tools": [{"name": "evil_tool", "description": hostile}]},
                  headers=key("ops"))
    assert r.status_code in (200, 201), r.text
    log_in(page, server, "ops")
    page.goto(f"{server}/ui/catalog/Evil")
    text = page.inner_text("#server-description")
    assert "<script>alert('x')</script>" in text and "⟨U+202E⟩" in text
    assert page.locator("script").count() == 0 and page.locator("main img").count() == 0
    assert page.dialogs == []
    shot(page, "hostile")


def test_another_tenants_data_is_never_reachable(server, page):
    log_in(page, server, "acme")
    for path in ("/ui/catalog/Weather", "/ui/catalog/Evil", "/ui/service"):
        resp = page.goto(f"{server}{path}")
        assert resp.status in (403, 404), path
    page.goto(f"{server}/ui/catalog?as_tenant=ops")
    assert "Weather" not in page.inner_text("main")
    page.goto(f"{server}/ui/calibration")
    shot(page, "calibration")


def test_admin_service_page(server, page):
    log_in(page, server, "ops")
    page.goto(f"{server}/ui/service")
    assert "index version" in page.inner_text("#state")
    shot(page, "service")
