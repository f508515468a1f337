"""One run of the real command: uvicorn on loopback, a few calls, a graceful stop."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx

from serve.cli import main
from serve_fakes import KEYS
from testkit import service_process

HERE = Path(__file__).resolve().parent


def test_serve_over_real_http(tenants_file, tmp_path):
    args = ["--app", "serve_fakes:app_from_env", "--config", str(tenants_file), "--index", str(tmp_path / "store")]
    with service_process(args, tmp_path / "server.log", python_path=[HERE]) as service:
        base = service.base
        body = {"request": "send an email message, private words"}
        assert httpx.post(f"{base}/v1/search", json=body, timeout=30).status_code == 401
        r = httpx.post(f"{base}/v1/search", json=body, headers={"X-API-Key": KEYS["acme"]}, timeout=30)
        assert r.status_code == 200 and r.json()["tools"][0]["tool"] == "send_email"
        assert "server" not in {k.lower() for k in r.headers}  # no server banner
    stderr = service.stderr
    # uvicorn finishes the graceful shutdown, then re-raises the signal it caught
    assert service.proc.returncode in (0, -signal.SIGTERM), stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    access = [rec for rec in lines if rec["logger"] == "serve.access" and rec.get("endpoint") == "/v1/search"]
    assert [rec["status"] for rec in access] == [401, 200]
    assert access[1]["tenant"] == "acme" and access[1]["duration_ms"] >= 0
    assert "private words" not in stderr  # request bodies are never logged
    assert any(rec["msg"] == "stopped" for rec in lines)  # the lifespan shut down cleanly


def test_cli_refuses_open_service_off_loopback(capsys):
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "refusing to serve without API keys" in capsys.readouterr().err


def test_cli_rejects_a_bad_tenants_file(tmp_path, capsys):
    bad = tmp_path / "t.toml"
    bad.write_text("[[tenants]]\nname = 'x'\n")
    before = dict(os.environ)
    assert main(["--config", str(bad)]) == 2
    assert "key_sha256" in capsys.readouterr().err
    assert dict(os.environ) == before   # a refused start leaves the environment alone


def test_cli_new_key(capsys):
    assert main(["--new-key"]) == 0
    out = capsys.readouterr().out
    assert "key_sha256" in out and "tr_" in out


def test_cli_checks_paths_before_starting(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "no-model")]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["--catalog", str(tmp_path / "none.json")]) == 2
    assert "--catalog" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["--index", str(tmp_path / "afile")]) == 2
    assert "--index" in capsys.readouterr().err


def test_cli_reads_the_tenants_file_from_the_environment(tenants_file, monkeypatch, capsys):
    """TOOLRANK_CONFIG without --config: keys stay on (it used to say 'authentication is OFF' and then
    fail on TOOLRANK_AUTH_DISABLED, a setting the user never set)."""
    import uvicorn

    seen = {}

    def fake_run(*args, **kwargs):
        seen.update({k: v for k, v in os.environ.items() if k.startswith("TOOLRANK_")})

    monkeypatch.setattr(uvicorn, "run", fake_run)
    for name in [k for k in os.environ if k.startswith("TOOLRANK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TOOLRANK_CONFIG", str(tenants_file))
    assert main(["serve", "--host", "0.0.0.0"]) == 0
    err = capsys.readouterr().err
    assert "authentication is OFF" not in err and "error" not in err
    assert seen["TOOLRANK_CONFIG"] == str(tenants_file.resolve()) and "TOOLRANK_AUTH_DISABLED" not in seen
