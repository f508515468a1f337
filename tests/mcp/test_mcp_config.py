"""Reading an MCP client configuration: what is accepted, and a clear one-line error for the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.catalog.mcp_harvest import McpConfigError, load_mcp_config
from serve.commands import main as toolrank
from retrieval.index.mcp import default_mcp_index_path

from mcp_helpers import FAKES, ROOT, child_env, toolrank_args


def write(tmp_path: Path, data, name: str = "mcp.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_stdio_and_http_entries_as_clients_write_them(tmp_path):
    path = write(tmp_path, {
        "globalShortcut": "Ctrl+Space",                       # other client settings are ignored
        "mcpServers": {
            "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                       "env": {"GITHUB_TOKEN": "secret-token"}, "autoApprove": []},
            "linear": {"type": "http", "url": "https://mcp.linear.app/mcp",
                       "headers": {"Authorization": "Bearer secret"}, "timeout": 5},
            "local": {"command": "python", "args": ["server.py"], "cwd": "servers", "description": "my tools"},
            "off": {"command": "python", "disabled": True},
            "toolrank": {"command": "toolrank", "args": ["mcp", "--mcp-config", str(tmp_path / "mcp.json")]},
        }})
    cfg = load_mcp_config(path)
    assert list(cfg.servers) == ["github", "linear", "local"]
    gh, lin, local = cfg.servers.values()
    assert (gh.transport, gh.command, gh.args, gh.env) == ("stdio", "npx", ("-y", "@modelcontextprotocol/server-github"),
                                                           {"GITHUB_TOKEN": "secret-token"})
    assert (lin.transport, lin.url, lin.timeout_s) == ("http", "https://mcp.linear.app/mcp", 5.0)
    assert local.cwd == (tmp_path / "servers").resolve() and local.description == "my tools"
    assert set(cfg.skipped) == {"off", "toolrank"}
    assert "itself" in cfg.skipped["toolrank"]
    assert "secret" not in repr(cfg)                          # secrets stay out of reprs and logs


@pytest.mark.parametrize("data, match", [
    ("{not json", r"invalid JSON at line 1"),
    ({"other": {}}, r"no 'mcpServers' object \(top-level keys: other\)"),
    ({"servers": {}}, r"'servers' lists no servers"),
    ({"mcpServers": {}}, r"lists no servers"),
    ({"mcpServers": []}, r"must be an object mapping server names"),
    ({"mcpServers": {"a": {"comand": "x"}}}, r"server 'a': give either 'command' .* \(it has 'comand'\)"),
    ({"mcpServers": {"a": {"args": ["x"]}}}, r"give either 'command' .* or 'url'"),
    ({"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}, r"not both"),
    ({"mcpServers": {"a": {"command": "x", "headers": {}}}}, r"'headers' does not apply to a stdio server"),
    ({"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}, r"no servers left .*a: uses the deprecated SSE"),
    ({"mcpServers": {"a": {"command": "x", "args": "--flag"}}}, r"'args' must be a list of strings"),
    ({"mcpServers": {"a": {"command": "x", "env": ["K=1"]}}}, r"'env' must be an object of strings"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": [1]}}}}, r"env 'K' must be a string, not list"),
    ({"mcpServers": {"a": {"url": "http://h/mcp", "serverUrl": "http://h/mcp"}}}, r"as 'url' or 'serverUrl', not both"),
    ({"projects": {"/p": {"mcpServers": {"a": {"command": "x"}}}}}, r"servers are per project"),
    ({"mcpServers": {"a": {"url": "ftp://h"}}}, r"'url' must be an http"),
    ({"mcpServers": {"a": {"command": "x", "timeout": 0}}}, r"'timeout' must be a positive number"),
    ({"mcpServers": {"a": {"command": "x", "disabled": True}}}, r"no servers left to index \(a: disabled"),
])
def test_bad_configurations_name_the_problem(tmp_path, data, match):
    with pytest.raises(McpConfigError, match=match):
        load_mcp_config(write(tmp_path, data))


def test_missing_file(tmp_path):
    with pytest.raises(McpConfigError, match="MCP configuration file not found"):
        load_mcp_config(tmp_path / "nope.json")


def test_default_index_folder_is_per_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLRANK_CACHE", str(tmp_path / "cache"))
    a, b = write(tmp_path, "{}", "a.json"), write(tmp_path, "{}", "b.json")
    assert default_mcp_index_path(a) != default_mcp_index_path(b)
    assert default_mcp_index_path(a).parent == tmp_path / "cache"


@pytest.mark.parametrize("data, match", [
    (None, "MCP configuration file not found"),
    ("{oops", "invalid JSON"),
    ({"mcpServers": {"a": {"command": 5}}}, "'command' must be a non-empty string"),
    ({"mcpServers": {}}, "lists no servers"),
])
def test_index_command_reports_bad_configurations_in_one_line(tmp_path, capsys, data, match):
    path = tmp_path / "mcp.json" if data is None else write(tmp_path, data)
    assert toolrank(["index", "--mcp-config", str(path), "--index", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "idx").exists()


def test_index_command_option_errors(tmp_path, capsys):
    path = write(tmp_path, {"mcpServers": {"a": {"command": "x"}}})
    assert toolrank(["index", "--mcp-config", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "--index DIR" in capsys.readouterr().err
    assert toolrank(["index", "--mcp-config", str(path), "--timeout", "0"]) == 2
    assert "--timeout must be a positive" in capsys.readouterr().err


def test_mcp_command_reports_bad_options_without_starting(tmp_path, capsys):
    """`toolrank mcp` with a bad configuration, option or host exits 2 with one line on stderr."""
    bad = write(tmp_path, {"mcpServers": {"a": {"command": "x", "args": "--flag"}}})
    good = write(tmp_path, {"mcpServers": {"a": {"command": "x"}}}, "good.json")
    fakes = ["--components", FAKES]
    for args, match in ((["--mcp-config", str(bad)], "'args' must be a list of strings"),
                        (["--mcp-config", str(tmp_path / "none.json")], "not found"),
                        (["--mcp-config", str(good), "--http", "0.0.0.0:8765"], "loopback only"),
                        (["--mcp-config", str(good), "--http", "8765"], "give HOST:PORT"),
                        (["--mcp-config", str(good), "--server", "zzz"], "--server 'zzz': not in the configuration"),
                        (["--mcp-config", str(good), "--tenant", "acme"], "--tenants FILE and --tenant NAME together"),
                        (["--mcp-config", str(good), "--tenants", str(tmp_path / "t.toml"), "--tenant", "a"],
                         "tenants file not found"),
                        (["--mcp-config", str(good), "--timeout", "-1"], "must be positive")):
        assert toolrank(["mcp", *args, *fakes]) == 2, args
        out = capsys.readouterr()
        assert match in out.err and "Traceback" not in out.err, (args, out.err)
        assert out.out == ""       # over stdio, stdout is the protocol channel


def test_mcp_subprocess_keeps_stdout_clean_on_error(tmp_path):
    proc = subprocess.run([sys.executable, *toolrank_args("mcp", "--mcp-config", str(tmp_path / "none.json"))],
                          cwd=ROOT, capture_output=True, text=True, env={**child_env(tmp_path), "PATH": "/usr/bin:/bin"},
                          timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"toolrank mcp: {tmp_path / 'none.json'}: MCP configuration file not found"


def test_a_zed_extension_server_is_skipped_not_refused(tmp_path):
    """Zed's settings.json may hold a server an extension provides (no command): that entry is skipped with
    its reason, the others load."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"context_servers": {
        "postgres": {"source": "extension", "settings": {"database_url": "postgres://x"}},
        "weather": {"command": "python", "args": ["-m", "weather"]}}}))
    cfg = load_mcp_config(path)
    assert list(cfg.servers) == ["weather"]
    assert "Zed extension" in cfg.skipped["postgres"]


@pytest.mark.parametrize("text, value", [
    ('["a, ]"]', ["a, ]"]),                                   # a comma and bracket inside a string stay
    ('{"a": [1, 2, ], // note\n "b": "x, }", /* c */ }', {"a": [1, 2], "b": "x, }"}),
    ('{"u": "http://host//path",}', {"u": "http://host//path"}),
    ('[1, /* c */ ]', [1]),
])
def test_comments_and_trailing_commas_only_outside_strings(text, value):
    from retrieval.catalog.mcp_harvest import _strip_jsonc

    assert json.loads(_strip_jsonc(text)) == value


@pytest.mark.parametrize("url, shown", [
    ("https://mcp.example.com/v1/sk-abc123def456ghi789/mcp", "https://mcp.example.com/v1/***/mcp"),
    ("https://h.example/mcp;token=s3cr3t", "https://h.example/mcp;token=***"),
    ("https://h.example/x/AbCdEf0123456789GhIjKlMn/mcp", "https://h.example/x/***/mcp"),
    ("https://h.example/api/v2/streamable-http/mcp", "https://h.example/api/v2/streamable-http/mcp"),
    ("https://server.smithery.ai/@foo/github-mcp/mcp", "https://server.smithery.ai/@foo/github-mcp/mcp"),
])
def test_keys_in_a_url_path_are_redacted(url, shown):
    from retrieval.catalog.mcp_harvest import redact, redact_url

    assert redact_url(url) == shown
    assert redact(f"server at {url} failed") == f"server at {shown} failed"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the process tree is read from /proc")
def test_recursion_is_seen_up_the_process_tree_when_the_environment_was_cleared(tmp_path):
    """`exec env -i PATH=... toolrank mcp --mcp-config SAME` loses TOOLRANK_MCP_PARENTS; the parent process
    running toolrank on the same configuration still shows in the process tree."""
    from serve.mcp_server import _ancestor_runs

    cfg = tmp_path / "mcp.json"
    cfg.write_text("{}")
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "toolrank", "mcp",
                               "--mcp-config", "mcp.json"], cwd=tmp_path)
    try:
        import time

        cmdline = Path(f"/proc/{parent.pid}/cmdline")
        deadline = time.monotonic() + 10   # until the child has exec'd (under load the fork shows pytest's first)
        while b"toolrank" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _ancestor_runs(str(cfg.resolve()), pid=parent.pid)
        assert not _ancestor_runs(str((tmp_path / "other.json").resolve()), pid=parent.pid)
    finally:
        parent.kill()
        parent.wait()


def test_a_failing_servers_stderr_never_shows_its_env_values():
    from retrieval.catalog.mcp_harvest import ServerSpec, describe_error

    spec = ServerSpec(name="db", command="db-server", env={"DB_PASSWORD": "hunter2-very-secret", "MODE": "ro"},
                      headers=None)
    why = describe_error(RuntimeError("boom"), spec, 10.0,
                         stderr_tail="connecting with password hunter2-very-secret failed (mode ro)")
    assert "hunter2-very-secret" not in why and "***" in why


def test_a_masked_stderr_ends_its_thread_and_pipe_when_closed():
    import io

    from retrieval.catalog.mcp_harvest import MaskedStderr, ServerSpec

    sink = io.StringIO()
    spec = ServerSpec(name="s", command="x", env={"API_KEY": "supersecretvalue"})
    masked = MaskedStderr(spec, sink=sink)
    masked.file.write("token is supersecretvalue\n")
    masked.close()
    masked.thread.join(5)
    assert not masked.thread.is_alive() and masked._reader.closed
    assert "supersecretvalue" not in sink.getvalue() and "token is" in sink.getvalue()
