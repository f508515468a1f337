"""Issue 24, points 4 and 5: named probability scales and honest errors."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from serve import cli
from serve.app import allow_list_warnings
from serve.settings import unknown_variables
from serve.tenants import TenantConfigError, Tenants, hash_key
from serve_fakes import FakeIndex, SlowPipeline, auth, demo_catalog

H = {"Content-Type": "application/json"}


# ------------------------------------------------------------------ point 4: two named scales


def test_score_and_search_name_their_different_probabilities(client):
    """/v1/score's number is the scorer alone, /v1/search's the decision probability: they used to share
    the name `probability` while differing for the same tool (0.673 vs 0.961)."""
    cand = {"id": "a", "server": "Alpha Mail", "name": "send_email", "description": "Send an email message"}
    score = client.post("/v1/score", json={"request": "send an email message", "candidates": [cand]},
                        headers=auth("acme")).json()
    assert set(score["scores"][0]) == {"id", "scorer_probability"}
    search = client.post("/v1/search", json={"request": "send an email message"}, headers=auth("acme")).json()
    assert "probability" in search["tools"][0] and "scorer_probability" not in search["tools"][0]
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    scorer_text = schemas["CandidateScore"]["properties"]["scorer_probability"]["description"]
    decision_text = schemas["ToolResult"]["properties"]["probability"]["description"]
    assert "/v1/search" in scorer_text and "/v1/score" in decision_text


# ------------------------------------------------------------------ strict types, bounded 422, duplicate keys


@pytest.mark.parametrize("body, path", [
    ({"request": "send an email", "k": "5"}, "body.k"),
    ({"request": "send an email", "k": True}, "body.k"),
    ({"request": "send an email", "explain": "yes"}, "body.explain"),
    ({"request": 5}, "body.request"),
])
def test_values_of_the_wrong_json_type_are_refused(client, body, path):
    r = client.post("/v1/search", json=body, headers=auth("acme"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["fields"][0]["path"] == path


def test_a_tenants_file_with_admin_yes_is_refused():
    spec = {"tenants": [{"name": "ops", "key_sha256": [hash_key("k")], "servers": "*", "admin": "yes"}]}
    with pytest.raises(TenantConfigError, match="admin"):
        Tenants.from_dict(spec)
    spec["tenants"][0].update(admin=True, tools=[["Alpha Mail", "send_email"]])
    assert Tenants.from_dict(spec).authenticate("k").admin


def test_a_body_of_many_unknown_fields_gets_a_short_422(client):
    body = {"request": "send an email", **{f"unknown_field_{i}": i for i in range(20_000)}}
    r = client.post("/v1/search", json=body, headers=auth("acme"))
    assert r.status_code == 422
    err = r.json()["error"]
    assert len(err["fields"]) == 20 and "20000 more problem(s)" not in err["message"]
    assert "19999 more problem(s)" in err["message"] and len(r.content) < 10_000


def test_duplicate_json_keys_are_refused(client):
    raw = b'{"request": "send an email", "k": 1, "k": 50}'
    r = client.post("/v1/search", content=raw, headers={**auth("acme"), **H})
    assert r.status_code == 422 and "'k' appears twice" in r.json()["error"]["message"]
    nested = b'{"request": "x", "previous": {"attempt": 1, "decision": "no_fit", "attempt": 2}}'
    assert client.post("/v1/search", content=nested, headers={**auth("acme"), **H}).status_code == 422


# ------------------------------------------------------------------ overload, probes, metrics


def test_the_overload_message_reveals_no_counts(make_client):
    slow = SlowPipeline(FakeIndex(demo_catalog()))
    c = make_client(slow, max_concurrency=1, max_queue=0, index_dir=None)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(c.post, "/v1/search", json={"request": "slow first"}, headers=auth("acme"))
            deadline = time.monotonic() + 10
            while ("start", "slow first") not in slow.log:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            r = c.post("/v1/search", json={"request": "send an email"}, headers=auth("globex"))
            slow.gate.set()
            first.result()
    finally:
        slow.gate.set()
    assert r.status_code == 503
    message = r.json()["error"]["message"]
    assert re.findall(r"\d+", message) == [r.headers["retry-after"]], message  # only the retry delay


def test_head_healthz_answers(client):
    r = client.head("/healthz")
    assert r.status_code == 200 and r.content == b""


def test_metrics_refusal_speaks_of_metrics(client):
    r = client.get("/metrics", headers=auth("acme"))
    assert r.status_code == 403
    message = r.json()["error"]["message"]
    assert "/metrics" in message and "catalog changes" not in message


# ------------------------------------------------------------------ a full disk


def test_a_full_disk_is_507_out_of_space(make_client, monkeypatch):
    c = make_client()

    def full(self, directory):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(FakeIndex, "save", full)
    before = c.get("/v1/servers", headers=auth("ops")).json()
    r = c.put("/v1/servers/New", json={"tools": [{"name": "t"}]}, headers=auth("ops"))
    assert r.status_code == 507 and r.json()["error"]["code"] == "out_of_space"
    assert "out of disk space" in r.json()["error"]["message"]
    assert c.delete("/v1/servers/Alpha%20Mail", headers=auth("ops")).status_code == 507
    assert c.get("/v1/servers", headers=auth("ops")).json() == before


# ------------------------------------------------------------------ start-up warnings


def test_misspelt_allow_list_names_are_warned_about(make_client, tmp_path, caplog):
    from serve_fakes import TENANTS_TOML

    config = tmp_path / "typo.toml"
    config.write_text(TENANTS_TOML + f"""
[[tenants]]
name = "typo"
key_sha256 = ["{hash_key('key-typo')}"]
servers = ["Alpha Male", "Beta Calendar"]
tools = [["Beta Calendar", "create_evnt"], ["Nowhere", "x"]]
""")
    with caplog.at_level(logging.WARNING, logger="serve.app"):
        make_client(config=config)
    lines = [r.getMessage() for r in caplog.records if r.name == "serve.app"]
    assert any("'Alpha Male'" in m and "did you mean 'Alpha Mail'" in m for m in lines), lines
    assert any("'create_evnt'" in m and "did you mean 'create_event'" in m for m in lines), lines
    assert any("'Nowhere'" in m for m in lines), lines
    assert not any("'Beta Calendar' is not" in m for m in lines)


def test_allow_list_warnings_are_quiet_for_a_correct_file():
    from serve_fakes import TENANTS_TOML
    import tomllib

    tenants = Tenants.from_dict(tomllib.loads(TENANTS_TOML))
    assert allow_list_warnings(tenants, demo_catalog()) == []


def test_unknown_toolrank_variables_are_named(monkeypatch, capsys, tenants_file):
    assert unknown_variables({"TOOLRANK_MAX_CONCURENCY": "8", "TOOLRANK_CONFIG": "x", "TOOLRANK_CACHE": "c",
                              "HOME": "/root"}) == [
        "TOOLRANK_MAX_CONCURENCY is not a toolrank setting and is ignored; did you mean TOOLRANK_MAX_CONCURRENCY?"]
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    for name in [k for k in os.environ if k.startswith("TOOLRANK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TOOLRANK_REQUEST_TIMEOUT", "5")
    assert cli.main(["--config", str(tenants_file)]) == 0
    assert "TOOLRANK_REQUEST_TIMEOUT is not a toolrank setting" in capsys.readouterr().err
    assert "TOOLRANK_FAIL_FAST" not in os.environ  # main() leaves the caller's environment as it was


# ------------------------------------------------------------------ leftovers of kill -9


def test_metrics_folders_of_dead_services_are_removed(tmp_path):
    dead = tmp_path / "toolrank-metrics-999999999-abc"   # no such pid
    alive = tmp_path / f"toolrank-metrics-{os.getpid()}-def"
    other = tmp_path / "toolrank-metrics-xyz"            # not ours to judge
    for d in (dead, alive, other):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"x")
    assert cli._remove_orphaned_metrics_dirs(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()


def test_the_gateways_own_variables_are_not_called_unknown():
    from serve.settings import unknown_variables

    assert unknown_variables({"TOOLRANK_MCP_TOKEN": "t", "TOOLRANK_MCP_PARENTS": "/a.json",
                              "TOOLRANK_PUBLIC_CORPORA": "/d"}) == []
