"""The configuration file of every major MCP client, as each writes it (samples in client_configs/):
read by `load_mcp_config`, and indexed by `toolrank index --mcp-config` with a real server."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from retrieval.catalog.mcp_harvest import load_mcp_config
from serve.commands import main as toolrank

from mcp_helpers import HERE

SAMPLES = HERE / "client_configs"
FILES = {"claude_desktop": "claude_desktop_config.json", "claude_code": "claude_code.mcp.json",
         "cursor": "cursor.mcp.json", "vscode": "vscode.mcp.json", "windsurf": "windsurf_mcp_config.json",
         "cline": "cline_mcp_settings.json", "zed": "zed_settings.json"}
SECRET = "lin_secret_123"


@pytest.mark.parametrize("client", FILES)
def test_each_clients_file_is_read(client, monkeypatch):
    monkeypatch.delenv("TOOLRANK_SAMPLE_UNITS", raising=False)
    monkeypatch.delenv("TOOLRANK_SAMPLE_TOKEN", raising=False)
    cfg = load_mcp_config(SAMPLES / FILES[client])
    weather = cfg.servers["weather"]
    assert (weather.transport, weather.command) == ("stdio", "python")
    assert weather.args[-1].endswith("servers/weather.py")
    assert SECRET not in repr(cfg) and SECRET not in " ".join(cfg.warnings)
    if client != "vscode":
        linear = cfg.servers["linear"]
        assert linear.transport == "http" and linear.url.startswith("https://mcp.linear.app/mcp")
        assert SECRET not in linear.target



def test_what_each_client_writes_is_understood(monkeypatch):
    monkeypatch.setenv("TOOLRANK_SAMPLE_TOKEN", "tok")
    monkeypatch.delenv("TOOLRANK_SAMPLE_UNITS", raising=False)
    load = lambda c: load_mcp_config(SAMPLES / FILES[c])  # noqa: E731

    desktop = load("claude_desktop")
    assert desktop.servers["weather"].env == {"UNITS": "metric"} and not desktop.warnings
    assert desktop.servers["linear"].target == "https://mcp.linear.app/mcp?api_key=***"

    code = load("claude_code")                                        # ${VAR:-default}, ${VAR}; SSE left out
    assert code.servers["weather"].env == {"UNITS": "metric"}
    assert code.servers["linear"].headers == {"Authorization": "Bearer tok"}
    assert "deprecated SSE" in code.skipped["legacy"]

    cursor = load("cursor")                                           # envFile read, a number in env written as text
    assert cursor.servers["weather"].env == {"UNITS": "metric", "API_TOKEN": "from-env-file", "RETRIES": "3"}
    assert any("'RETRIES' is a number" in w for w in cursor.warnings)

    vscode = load("vscode")                                           # "servers", comments, trailing commas
    assert vscode.section == "servers"
    assert vscode.servers["weather"].args == (str(SAMPLES / "servers" / "weather.py"),)   # ${workspaceFolder}
    assert "${input:linear-key}" in vscode.skipped["linear"] and "prompts for" in vscode.skipped["linear"]

    windsurf = load("windsurf")                                       # serverUrl
    assert windsurf.servers["linear"].transport == "http" and not windsurf.warnings

    cline = load("cline")                                             # transportType, disabled, timeout
    assert cline.servers["linear"].transport == "http" and cline.servers["weather"].timeout_s == 60.0
    assert cline.skipped == {"off": "disabled in the configuration"} and not cline.warnings

    zed = load("zed")                                                 # context_servers, command.path, enabled
    assert zed.section == "context_servers" and zed.servers["weather"].env == {"UNITS": "metric"}
    assert zed.skipped == {"off": "disabled in the configuration"} and not zed.warnings


def test_keys_toolrank_does_not_use_are_ignored_with_a_warning(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "someFutureKey": 1, "autoApprove": []}}}))
    cfg = load_mcp_config(path)
    assert cfg.servers["a"].command == "x"
    assert cfg.warnings == [f"{path}, server 'a': ignored key(s) 'someFutureKey' (toolrank uses command, args, env, "
                            "envFile, cwd, url, headers, type, timeout, description, disabled)"]


@pytest.mark.parametrize("client", FILES)
def test_toolrank_index_reads_each_clients_file(client, tmp_path, capsys):
    """The real weather server, started from each client's file; the hosted server is unreachable
    (a closed local port) and reported without its key."""
    shutil.copytree(HERE / "servers", tmp_path / "servers")
    text = (SAMPLES / FILES[client]).read_text().replace('"python"', json.dumps(sys.executable))
    text = text.replace("https://mcp.linear.app/mcp", "http://127.0.0.1:9/mcp")
    text = text.replace('"servers/', json.dumps(str(tmp_path / "servers"))[:-1] + "/")   # clients start it elsewhere
    path = tmp_path / FILES[client]
    path.write_text(text)
    if client == "cursor":
        shutil.copy(SAMPLES / "sample.env", tmp_path / "sample.env")
    code = toolrank(["index", "--mcp-config", str(path), "--index", str(tmp_path / "index"), "--timeout", "20"])
    out, err = capsys.readouterr()
    weather = next(line for line in out.splitlines() if line.startswith("weather "))
    assert weather.split()[1:3] == ["added", "2"], out
    linear = [line for line in out.splitlines() if line.startswith("linear ")]
    if client == "vscode":
        assert code == 0 and "skipped" in linear[0]
    else:
        assert code == 1 and "failed" in linear[0] and "cannot reach http://127.0.0.1:9/mcp" in linear[0]
    assert SECRET not in out + err


def test_credentials_in_urls_are_redacted():
    from retrieval.catalog.mcp_harvest import redact, redact_url

    assert redact_url("https://user:pa55@host.io/mcp?api_key=k1&region=eu&flag") == \
        "https://***@host.io/mcp?api_key=***&region=***&flag"
    assert redact_url("https://host.io/mcp#token=abc") == "https://host.io/mcp#***"
    assert redact_url("https://host.io/mcp") == "https://host.io/mcp"
    assert redact("cannot reach https://h.io/mcp?key=s3cret: ConnectError; see http://a:b@c/d.") == \
        "cannot reach https://h.io/mcp?key=***: ConnectError; see http://***@c/d."
