"""Harvesting real MCP servers (SDK servers under tests/mcp/servers, run as subprocesses):
pagination, failures reported by name with the reason, the bounded timeout, streamable HTTP,
and index updates that embed only what changed and never leave a half-written index."""

from __future__ import annotations

import anyio
import pytest

from fakes import HashEncoder
from retrieval.catalog.mcp_harvest import HarvestError, McpConfig, ServerSpec, harvest, load_mcp_config
from retrieval.index.embedded import ToolIndex
from retrieval.index.mcp import index_mcp_config

from mcp_helpers import PY, SERVERS, free_port, server, start, stop, write_config

PAGED = ["read_file", "write_file", "list_directory", "move_file", "delete_file", "file_info", "search_files"]


def test_every_page_every_schema_and_each_failure_by_name(tmp_path):
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {
        "files": server("paged"),
        "weather": server("weather"),
        "no_name": server("malformed", "--mode", "empty-name"),
        "twice": server("malformed", "--mode", "duplicate"),
        "bad_schema": server("malformed", "--mode", "bad-schema"),
        "dies": server("crashy", "--fail-at-start"),
        "missing": {"command": "toolrank-test-no-such-command"},
    }))
    results = {h.name: h for h in anyio.run(lambda: harvest(cfg, timeout_s=10))}
    assert list(results) == list(cfg.servers)                       # configuration order
    files = results["files"]
    assert files.ok and [t.name for t in files.tools] == PAGED      # 3 + 3 + 1, in order
    assert files.description == "Local file-system access: read, write, list and search files."
    assert files.tools[0].input_schema["required"] == ["path"]
    weather = {t.name: t for t in results["weather"].tools}
    assert weather["get_forecast"].input_schema["properties"]["city"]["type"] == "string"
    assert weather["get_forecast"].server == "weather"              # the configuration's name, not serverInfo's

    reasons = {n: h.error for n, h in results.items() if not h.ok}
    assert set(reasons) == {"twice", "bad_schema", "dies", "missing"}
    # One bad tool no longer costs the server its valid ones: they are kept and the bad one reported.
    assert [t.name for t in results["no_name"].tools] == ["fine"]
    assert results["no_name"].problems == ("tool #2: field 'name' is empty",)
    assert "none of its 2 tools is valid (tool 'same': listed 2 times" in reasons["twice"]
    assert "tool 'broken': field 'inputSchema' must be an object" in reasons["bad_schema"]
    assert "exited or closed the connection" in reasons["dies"]
    assert "cannot open the database" in reasons["dies"]            # the server's own stderr, quoted
    assert reasons["missing"] == "cannot start 'toolrank-test-no-such-command': command not found " \
                                 "(is it installed and on PATH?)"


def test_a_slow_server_times_out_within_its_bound(tmp_path):
    mark = tmp_path / "slow.mark"
    cfg = McpConfig(tmp_path / "mcp.json", {"slow": ServerSpec(
        name="slow", command=PY, args=(str(SERVERS / "slow.py"), "--delay", "30", "--mark", str(mark)), timeout_s=1.0)})
    [h] = anyio.run(lambda: harvest(cfg, timeout_s=60))             # the server's own timeout wins
    assert not h.ok and h.error.startswith("timed out after 1 s")
    assert not mark.exists()                                        # stopped, not waited for: it never answered


def test_streamable_http_server(tmp_path):
    port = free_port()
    proc = start([str(SERVERS / "weather.py"), "--http", str(port)], tmp_path, port)
    try:
        cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {
            "weather": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer t"}},
            "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp"}}))
        results = {h.name: h for h in anyio.run(lambda: harvest(cfg, timeout_s=10))}
    finally:
        stop(proc)
    assert sorted(t.name for t in results["weather"].tools) == ["get_alerts", "get_forecast"]
    assert results["gone"].error.startswith(f"cannot reach http://127.0.0.1:")


def test_index_updates_embed_only_what_changed(tmp_path):
    encoder = HashEncoder()
    path = write_config(tmp_path / "mcp.json", {"weather": server("weather"), "files": server("paged"),
                                                 "dies": server("crashy", "--fail-at-start")})
    out = tmp_path / "index"
    first = index_mcp_config(path, out, timeout_s=10, encoder=encoder)
    assert {s.name: (s.status, s.tools, s.re_embedded) for s in first.servers} == {
        "weather": ("added", 2, 2), "files": ("added", 7, 7), "dies": ("failed", 0, 0)}
    assert first.changed and first.tools == 9 and [s.name for s in first.failed] == ["dies"]
    index = ToolIndex.load(out, encoder=encoder)
    assert not index.with_examples and sorted(index.catalog.servers) == ["files", "weather"]
    assert index.catalog[("files", "search_files")].description.startswith("Find files")
    assert "dies" in first.format() and "cannot open the database" in first.format()

    calls = encoder.calls
    again = index_mcp_config(path, out, timeout_s=10, encoder=encoder)
    assert encoder.calls == calls                                   # nothing re-embedded
    assert {s.name: s.status for s in again.servers} == {"weather": "unchanged", "files": "unchanged",
                                                         "dies": "failed"}
    assert not again.changed

    # A server removed from the configuration leaves the index; a server failing keeps its tools.
    write_config(path, {"weather": server("crashy", "--fail-at-start")})
    third = index_mcp_config(path, out, timeout_s=10, encoder=encoder)
    by_name = {s.name: s for s in third.servers}
    assert by_name["files"].status == "removed"
    assert by_name["weather"].status == "failed" and by_name["weather"].tools == 2
    assert "kept its 2 tools" in by_name["weather"].reason
    assert ToolIndex.load(out, encoder=encoder).catalog.servers == ["weather"]
    assert encoder.calls == calls


def test_nothing_is_written_when_no_server_can_be_indexed(tmp_path):
    path = write_config(tmp_path / "mcp.json", {"dies": server("crashy", "--fail-at-start"),
                                                "missing": {"command": "toolrank-test-no-such-command"}})
    with pytest.raises(HarvestError, match=r"no server could be indexed \(dies: .*; missing: cannot start"):
        index_mcp_config(path, tmp_path / "index", timeout_s=10, encoder=HashEncoder())
    assert not (tmp_path / "index").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mcp.json"]     # no temporary folder left either


def test_valid_tools_are_kept_and_each_bad_one_reported(tmp_path):
    """A server listing two valid tools among a duplicate, a non-object schema and a schema nested too
    deep is indexed with its two valid tools; `toolrank index` names each one left out."""
    from serve.commands import main as toolrank

    cfg = write_config(tmp_path / "mcp.json", {"mixed": server("malformed", "--mode", "mixed")})
    [h] = anyio.run(lambda: harvest(load_mcp_config(cfg), timeout_s=10))
    assert h.ok and [t.name for t in h.tools] == ["good_one", "good_two"]
    assert len(h.problems) == 3
    assert h.problems[0] == "tool 'same': listed 2 times; tool names must be unique"
    assert "tool 'broken'" in h.problems[1] and "tool 'deep'" in h.problems[2] and "deep" in h.problems[2]
    report = index_mcp_config(cfg, tmp_path / "index", encoder=HashEncoder())
    [r] = report.servers
    assert (r.status, r.tools) == ("added", 2) and "3 malformed tool(s) left out" in r.reason
