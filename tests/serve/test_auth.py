from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from serve.settings import Settings
from serve.tenants import TenantConfigError, Tenants, hash_key, load_tenants, new_key
from serve_fakes import KEYS, auth

SEARCH = {"request": "send an email to bob"}
TOOLS = {"tools": [{"name": "ping", "description": "Ping a host"}]}


def test_no_key_is_401_with_a_hint(client):
    r = client.post("/v1/search", json=SEARCH)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "missing_api_key"
    assert "Authorization: Bearer" in r.json()["error"]["message"]
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer nope"}, {"X-API-Key": "nope"},
                                     {"Authorization": f"Basic {KEYS['acme']}"}])
def test_wrong_key_is_401(client, headers):
    r = client.post("/v1/search", json=SEARCH, headers=headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] in {"invalid_api_key", "missing_api_key"}


@pytest.mark.parametrize("headers", [{"Authorization": f"Bearer {KEYS['acme']}"}, {"X-API-Key": KEYS["acme"]},
                                     {"authorization": f"bearer {KEYS['acme']}"}])
def test_either_header_works(client, headers):
    assert client.post("/v1/search", json=SEARCH, headers=headers).status_code == 200


def test_every_v1_endpoint_needs_a_key(client):
    assert client.get("/v1/servers").status_code == 401
    assert client.get("/v1/servers/Alpha Mail").status_code == 401
    assert client.post("/v1/score", json={"request": "x", "candidates": [{"id": "1", "name": "a"}]}).status_code == 401
    assert client.put("/v1/servers/X", json=TOOLS).status_code == 401
    assert client.delete("/v1/servers/X").status_code == 401


def test_catalog_changes_need_an_admin_key(client):
    for tenant in ("acme", "globex", "narrow"):
        r = client.put("/v1/servers/Zeta", json=TOOLS, headers=auth(tenant))
        assert r.status_code == 403, tenant
        assert r.json()["error"]["message"] == "catalog changes need an admin API key"
        assert client.delete("/v1/servers/Alpha Mail", headers=auth(tenant)).status_code == 403
    assert client.put("/v1/servers/Zeta", json=TOOLS, headers=auth("ops")).status_code == 201
    assert client.delete("/v1/servers/Zeta", headers=auth("ops")).status_code == 200


def test_probes_are_open_and_metrics_need_an_admin_key(client, make_client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    # /metrics counts catalog changes and shows the store's version: admins only, unless opened
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=auth("acme")).status_code == 403
    assert client.get("/metrics", headers=auth("ops")).status_code == 200
    assert make_client(metrics_public=True, index_dir=None).get("/metrics").status_code == 200


def test_readiness_shows_the_version_to_admins_only(client):
    assert client.get("/readyz").json()["index_version"] is None
    assert client.get("/readyz", headers=auth("acme")).json()["index_version"] is None
    assert client.get("/readyz", headers=auth("ops")).json()["index_version"] == 1


def test_dev_mode_is_explicit_and_open(make_client):
    c = make_client(auth_disabled=True)
    assert c.post("/v1/search", json=SEARCH).status_code == 200
    assert c.put("/v1/servers/Zeta", json=TOOLS).status_code == 201


def test_settings_refuse_to_run_without_keys_unless_told(monkeypatch):
    monkeypatch.delenv("TOOLRANK_AUTH_DISABLED", raising=False)
    monkeypatch.delenv("TOOLRANK_CONFIG", raising=False)
    with pytest.raises(ValidationError, match="TOOLRANK_AUTH_DISABLED=1"):
        Settings()
    monkeypatch.setenv("TOOLRANK_AUTH_DISABLED", "1")
    assert Settings().auth_disabled is True


def test_keys_are_stored_as_hashes():
    key, digest = new_key()
    assert digest == hash_key(key) and len(digest) == 64 and key not in digest
    tenants = Tenants.from_dict({"tenants": [{"name": "a", "key_sha256": [digest], "servers": ["S"]}]})
    assert tenants.authenticate(key).name == "a"
    assert tenants.authenticate(digest) is None  # the hash itself is not a key


def tenant(**kw):
    base = {"name": "a", "key_sha256": [hash_key("k")], "servers": ["S"]}
    return {"tenants": [{**base, **kw}]}


@pytest.mark.parametrize("data, match", [
    (tenant(key_sha256=["k"]), "not a lowercase SHA-256 hex digest"),
    (tenant(servers=None), "tenants.0.servers"),
    (tenant(colour="red"), "colour"),
    (tenant(policy={"proceed_threshold": 1.5}), "proceed_threshold"),
    (tenant(policy={"proceed_threshold": 0.3, "floor": 0.5}), "floor 0.5 is above proceed_threshold"),
    ({"tenants": [tenant()["tenants"][0], tenant()["tenants"][0]]}, "appears twice"),
    ({"tenants": [tenant()["tenants"][0], {**tenant()["tenants"][0], "name": "b"}]}, "reuses a key hash"),
])
def test_bad_tenants_files_say_what_to_fix(data, match):
    with pytest.raises(TenantConfigError, match=match):
        Tenants.from_dict(data)


def test_tenants_file_formats(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps(tenant(policy={"floor": 0.1})))
    t = load_tenants(tmp_path / "t.json").authenticate("k")
    assert t.policy == {"floor": 0.1} and t.eligibility.servers == frozenset({"S"})
    (tmp_path / "t.yaml").write_text("x")
    with pytest.raises(TenantConfigError, match=r"\*.toml or \*.json"):
        load_tenants(tmp_path / "t.yaml")
    with pytest.raises(TenantConfigError, match="not found"):
        load_tenants(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[[tenants]\n")
    with pytest.raises(TenantConfigError, match="cannot parse"):
        load_tenants(tmp_path / "bad.toml")


def test_tenant_policy_can_set_the_fast_operating_point():
    from retrieval.pipeline.decision import Policy

    t = Tenants.from_dict(tenant(policy={"score_top": 20})).authenticate("k")
    assert t.policy == {"score_top": 20}
    assert Policy().with_overrides(**t.policy).score_top == 20
    with pytest.raises(TenantConfigError, match="score_top"):
        Tenants.from_dict(tenant(policy={"score_top": 0}))
