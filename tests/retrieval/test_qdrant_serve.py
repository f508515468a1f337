"""The service on the Qdrant backend: workers share one collection, no folder and no polling;
a change made through one worker is served by the others on their next request; tenant
eligibility is a filter inside the engine. ``toolrank serve`` refuses bad Qdrant options with
one line."""

from __future__ import annotations

import os
import time

import pytest
from fastapi.testclient import TestClient

from fakes import HashEncoder, tiny_catalog
from retrieval.index.qdrant.index import QdrantToolIndex
from retrieval.pipeline.flow import Pipeline
from serve.app import create_app
from serve.settings import Settings
from serve.tenants import hash_key

os.environ.setdefault("OMP_NUM_THREADS", "1")

TENANTS = f"""
[[tenants]]
name = "ops"
admin = true
key_sha256 = ["{hash_key('ops-key')}"]
servers = "*"

[[tenants]]
name = "acme"
key_sha256 = ["{hash_key('acme-key')}"]
servers = ["Slack", "Linear"]
"""


def ready(client: TestClient) -> TestClient:
    for _ in range(200):
        if client.get("/readyz").status_code == 200:
            return client
        time.sleep(0.02)
    raise AssertionError(f"not ready: {client.get('/readyz').json()}")


@pytest.fixture
def workers(tmp_path):
    """Two service workers over one embedded Qdrant collection (local mode: one shared client)."""
    (tmp_path / "tenants.toml").write_text(TENANTS)
    index = QdrantToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    settings = Settings(config=tmp_path / "tenants.toml", backend="qdrant", qdrant_path=":memory:",
                        poll_interval_s=60, public_suggestions=False)
    clients = []
    for view in (index, QdrantToolIndex.open(index.collection, encoder=index.encoder)):
        client = TestClient(create_app(settings, pipeline=Pipeline(view, None)), raise_server_exceptions=False)
        client.__enter__()
        clients.append(ready(client))
    yield clients
    for c in clients:
        c.__exit__(None, None, None)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_change_through_one_worker_is_served_by_the_other_at_once(workers):
    a, b = workers
    linear = {"description": "Issue tracking", "tools": [
        {"name": "create_ticket", "description": "Create a Linear ticket for the team", "inputSchema": {"type": "object"}}]}
    put = a.put("/v1/servers/Linear", json=linear, headers=auth("ops-key"))
    assert put.status_code == 201, put.text
    assert put.json()["index_version"] == 2 and put.json()["re_embedded"] == 1
    # no poll (60 s), no folder: the other worker reads the head on this request
    found = b.post("/v1/search", json={"request": "create a linear ticket for the team"}, headers=auth("ops-key"))
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["index_version"] == 2
    assert (body["tools"][0]["server"], body["tools"][0]["tool"]) == ("Linear", "create_ticket")
    gone = b.delete("/v1/servers/Linear", headers=auth("ops-key"))
    assert gone.status_code == 200 and gone.json()["index_version"] == 3
    again = a.post("/v1/search", json={"request": "create a linear ticket for the team", "k": 50},
                   headers=auth("ops-key")).json()
    assert again["index_version"] == 3 and all(t["server"] != "Linear" for t in again["tools"])
    assert a.get("/v1/servers/Linear", headers=auth("ops-key")).status_code == 404


def test_tenant_eligibility_is_enforced_in_the_engine(workers):
    a, _ = workers
    body = a.post("/v1/search", json={"request": "list the shards of an index", "k": 50},
                  headers=auth("acme-key")).json()
    assert body["tools"] and {t["server"] for t in body["tools"]} <= {"Slack", "Linear"}
    index = a.app.state.toolrank.engine.snapshot.index
    calls = []
    retrieve = index.retrieve

    def spy(request, need=None, eligible=None, k=100, **kw):
        calls.append(eligible)
        return retrieve(request, need, eligible, k, **kw)

    index.retrieve = spy
    a.post("/v1/search", json={"request": "weather forecast"}, headers=auth("acme-key"))
    assert calls and calls[-1].servers == frozenset({"Slack", "Linear"})


def test_serve_refuses_bad_qdrant_options_with_one_line(capsys, monkeypatch):
    from serve.cli import main

    for name in ("TOOLRANK_BACKEND", "TOOLRANK_QDRANT_URL", "TOOLRANK_QDRANT_PATH", "TOOLRANK_INDEX_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--backend", "qdrant", "--qdrant-url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot reach Qdrant at http://127.0.0.1:9") and "Traceback" not in "".join(err)
    assert "TOOLRANK_BACKEND" not in os.environ     # the caller's environment is left as it was
    assert main(["--backend", "qdrant", "--qdrant-path", "/tmp/q", "--workers", "2"]) == 2
    assert "serves one process" in capsys.readouterr().err
    assert main(["--backend", "qdrant"]) == 2
    assert "needs TOOLRANK_QDRANT_URL" in capsys.readouterr().err
