"""The service over the real ToolIndex + Pipeline on the 5-server MCP-Zero catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("retrieval.pipeline.flow")
pytest.importorskip("retrieval.index.embedded")

from fastapi.testclient import TestClient  # noqa: E402

from serve.app import create_app  # noqa: E402
from serve.settings import Settings  # noqa: E402
from serve_fakes import wait_ready  # noqa: E402
from testkit import tenants_toml, wait_until  # noqa: E402

# A 5-server slice of the MCP-Zero catalog (MIT), shipped with the tests.
CATALOG = Path(__file__).resolve().parents[1] / "data" / "mcp_tools_5.json"
ACME = ["AgentQL", "Aiven", "Apache IoTDB"]
HIDDEN = "Apify"

TENANTS = tenants_toml(
    {"name": "ops", "admin": True, "key": "k-ops", "servers": "*"},
    {"name": "acme", "key": "k-acme", "servers": ACME},
    {"name": "strict", "key": "k-strict", "servers": "*", "policy": {"proceed_threshold": 1.0}},
)


@pytest.fixture(scope="module")
def real_pipeline():
    if not CATALOG.exists():
        pytest.skip("tiny catalog mcp_tools_5.json not available")
    from retrieval.catalog.formats import load_catalog
    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.flow import Pipeline

    return Pipeline(ToolIndex.build(load_catalog(CATALOG)))


@pytest.fixture
def clients(real_pipeline, tmp_path):
    (tmp_path / "t.toml").write_text(TENANTS)
    made = []

    def make():
        settings = Settings(config=tmp_path / "t.toml", index_dir=tmp_path / "store", poll_interval_s=0.1)
        c = TestClient(create_app(settings, pipeline=real_pipeline), raise_server_exceptions=False)
        c.__enter__()
        made.append(c)
        wait_ready(c, timeout=180)
        return c

    yield make
    for c in made:
        c.__exit__(None, None, None)


def h(key):
    return {"Authorization": f"Bearer {key}"}


def test_search_over_the_real_pipeline(clients):
    c = clients()
    r = c.post("/v1/search", json={"request": "extract structured data from a web page with a prompt",
                                   "explain": True}, headers=h("k-acme"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["decision"] in {"proceed", "search_again", "no_fit"}
    assert body["tools"] and body["tools"][0]["server"] == "AgentQL"
    assert all(t["server"] in ACME for t in body["tools"])
    assert all(0.0 <= t["probability"] <= 1.0 for t in body["tools"])
    assert body["tools"][0]["definition"]["name"] == "extract-web-data"
    assert body["tokens"] is None or body["tokens"]["catalog"] >= body["tokens"]["selected"]

    again = c.post("/v1/search", json={"request": "extract structured data from a web page", "need": "scrape a page",
                                       "previous": {"attempt": body["attempt"], "decision": "search_again"}},
                   headers=h("k-acme"))
    assert again.status_code == 200 and again.json()["attempt"] == 2


def test_real_pipeline_never_reveals_a_hidden_server(clients):
    c = clients()
    for name in (HIDDEN, "Nowhereify"):
        for fmt in ("mcp", "openai", "anthropic"):
            r = c.post("/v1/search", json={"request": f"use {name} to run an actor that crawls a website",
                                           "explain": True, "format": fmt},
                       headers=h("k-acme"))
            assert r.status_code == 200, r.text
            assert HIDDEN.lower() not in r.text.lower()
            assert r.json()["restricted_to"] == []
            assert all(t["server"] in ACME for t in r.json()["tools"])
    assert HIDDEN not in c.get("/v1/servers", headers=h("k-acme")).text
    assert c.get(f"/v1/servers/{HIDDEN}", headers=h("k-acme")).status_code == 404


def test_catalog_update_with_the_real_index_reaches_a_second_app(clients):
    first, second = clients(), clients()
    tools = {"description": "Weather data", "tools": [
        {"name": "forecast", "description": "Weather forecast for a city for the next days"},
        {"name": "alerts", "description": "Severe weather alerts for a region"}]}
    r = first.put("/v1/servers/Weather", json=tools, headers=h("k-ops"))
    assert r.status_code == 201 and r.json()["re_embedded"] == 2
    tools["tools"][1]["description"] = "Severe weather warnings for a region"
    r = first.put("/v1/servers/Weather", json=tools, headers=h("k-ops"))
    assert r.json()["re_embedded"] == 1
    version = r.json()["index_version"]
    wait_until(lambda: second.get("/readyz", headers=h("k-ops")).json()["index_version"] == version,
               "the second app serving the new version")
    found = second.post("/v1/search", json={"request": "what is the weather forecast for Paris"},
                        headers=h("k-ops")).json()
    assert found["index_version"] == version
    assert found["tools"][0]["server"] == "Weather"
    # acme does not have the new server
    acme = second.post("/v1/search", json={"request": "what is the weather forecast for Paris"},
                       headers=h("k-acme")).json()
    assert all(t["server"] in ACME for t in acme["tools"])


def test_tenant_policy_and_no_scorer_with_the_real_pipeline(clients):
    c = clients()
    body = {"request": "extract structured data from a web page with a prompt"}
    assert c.post("/v1/search", json=body, headers=h("k-strict")).json()["decision"] == "search_again"
    r = c.post("/v1/score", json={"request": "x", "candidates": [{"id": "1", "name": "a"}]}, headers=h("k-acme"))
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_scorer"


def test_the_app_builds_the_real_pipeline_itself(tmp_path):
    (tmp_path / "t.toml").write_text(TENANTS)
    settings = Settings(config=tmp_path / "t.toml", index_dir=tmp_path / "store", catalog=CATALOG,
                        public_suggestions=False, model_dir=None)
    with TestClient(create_app(settings)) as c:
        wait_ready(c, timeout=180)
        ready = c.get("/readyz", headers=h("k-ops")).json()
        assert ready["index_version"] == 1
        r = c.post("/v1/search", json={"request": "list the instances of my Aiven project"}, headers=h("k-acme"))
        assert r.status_code == 200 and r.json()["tools"][0]["server"] == "Aiven"
    assert (tmp_path / "store" / "CURRENT").read_text() == "v1\n"


def test_the_service_starts_from_an_empty_catalog_file_and_says_so(tmp_path, caplog):
    import logging

    (tmp_path / "t.toml").write_text(TENANTS)
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    settings = Settings(config=tmp_path / "t.toml", index_dir=tmp_path / "store", catalog=empty,
                        public_suggestions=False, model_dir=None)
    with caplog.at_level(logging.WARNING, logger="serve.loading"):
        with TestClient(create_app(settings)) as c:
            wait_ready(c, timeout=180)
            assert c.get("/readyz", headers=h("k-ops")).json()["index_version"] == 1
    assert "holds no tools" in caplog.text


@pytest.mark.slow
def test_score_with_the_shipped_scorer(real_pipeline, tmp_path):
    scorer_pkg = pytest.importorskip("scorer")
    default = getattr(scorer_pkg, "default_model_path", None)
    if default is None or not (Path(default()) / "model.onnx").exists():
        pytest.skip("no shipped scorer model")
    from retrieval.pipeline.flow import Pipeline

    pipeline = Pipeline(real_pipeline.index, scorer_pkg.Scorer.load(default()))
    (tmp_path / "t.toml").write_text(TENANTS)
    with TestClient(create_app(Settings(config=tmp_path / "t.toml"), pipeline=pipeline)) as c:
        wait_ready(c, timeout=180)
        cands = [{"id": str(i), "server": t.server, "name": t.name, "description": t.description}
                 for i, t in enumerate(real_pipeline.index.catalog.tools)]
        r = c.post("/v1/score", json={"request": "extract structured data from a web page", "candidates": cands},
                   headers=h("k-acme"))
        assert r.status_code == 200
        probs = [s["scorer_probability"] for s in r.json()["scores"]]
        assert len(probs) == len(cands) and all(0 <= p <= 1 for p in probs)
        best = max(range(len(probs)), key=probs.__getitem__)
        assert cands[best]["name"] == "extract-web-data"
