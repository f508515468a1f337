"""The MCP gateway built in-process: ``serve.mcp_server.build_server`` over a ``Gateway`` with the fake
models (gateway_fakes.py), driven by the SDK's own client over in-memory streams. No toolrank
subprocess: the gateway's answers are checked in the process that runs its code (forwarded calls
still go to real SDK servers, run as subprocesses)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.shared.memory import create_connected_server_and_client_session

from fakes import HashEncoder, tiny_catalog
from gateway_fakes import components
from mcp_helpers import payload, run, server, text, write_config
from retrieval.catalog.mcp_harvest import load_mcp_config
from retrieval.catalog.model import ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.version import package_version
from serve.mcp_gateway import Gateway, gateway_eligibility
from serve.mcp_server import CALL_TOOL, DESCRIBE_TOOL, FIND_TOOLS, build_server


@asynccontextmanager
async def in_process(**gateway: Any) -> AsyncIterator[tuple[Gateway, ClientSession]]:
    """A running gateway and an initialized client session with its MCP server, in this process."""
    gw = Gateway(components=components(), **gateway)
    mcp_server = build_server(gw)
    assert mcp_server.create_initialization_options().server_version == package_version()   # toolrank's own
    async with gw.running():
        async with create_connected_server_and_client_session(mcp_server) as client:
            yield gw, client


@run
async def test_find_only_over_an_index_in_process():
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    eligible = gateway_eligibility(None, ["Weather", "Slack"])
    async with in_process(index=index, eligible=eligible) as (gw, client):
        assert {t.name for t in (await client.list_tools()).tools} == {FIND_TOOLS, DESCRIBE_TOOL}
        assert not gw.forwarding and gw.tool_count() == 4               # the two servers' tools only

        found = payload(await client.call_tool(FIND_TOOLS, {"request": "list channels of a workspace"}))
        assert found["decision"] == "proceed"
        assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("Slack", "list_channels")
        assert {t["server"] for t in found["tools"]} <= {"Weather", "Slack"}

        whole = payload(await client.call_tool(DESCRIBE_TOOL, {"server": "Weather", "tool": "get_alerts"}))
        assert (whole["server"], whole["name"]) == ("Weather", "get_alerts")
        hidden = await client.call_tool(DESCRIBE_TOOL, {"server": "GitHub", "tool": "create_issue"})
        missing = await client.call_tool(DESCRIBE_TOOL, {"server": "Nowhere", "tool": "create_issue"})
        assert hidden.isError and text(hidden) == text(missing).replace("'Nowhere'", "'GitHub'")

        bad = await client.call_tool(FIND_TOOLS, {"request": "x", "attempt": 3})
        assert bad.isError and "`attempt` is 1, or 2" in text(bad)
        with pytest.raises(McpError, match=f"unknown tool '{CALL_TOOL}'"):
            await client.call_tool(CALL_TOOL, {"server": "Slack", "tool": "list_channels"})


@run
async def test_find_then_call_forwarded_in_process(tmp_path):
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {"weather": server("weather"),
                                                               "notes": server("notes")}))
    eligible = gateway_eligibility(list(cfg.servers), ["weather"])
    async with in_process(config=cfg, eligible=eligible) as (gw, client):
        assert {t.name for t in (await client.list_tools()).tools} == {FIND_TOOLS, CALL_TOOL, DESCRIBE_TOOL}
        found = payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris"}))
        assert gw.harvests >= 1 and gw.unavailable() == {} and list(gw.backends) == ["weather"]
        assert (found["decision"], found["tools"][0]["name"]) == ("proceed", "get_forecast")
        assert found["tools"][0]["inputSchema"]["properties"]["city"]["type"] == "string"   # the server's schema

        result = await client.call_tool(CALL_TOOL, {"server": "weather", "tool": "get_forecast",
                                                    "arguments": {"city": "Paris", "days": 2}})
        assert not result.isError and text(result) == "Paris: sunny, 21 C, no rain for the next 2 days"

        hidden = await client.call_tool(CALL_TOOL, {"server": "notes", "tool": "create_note", "arguments": {}})
        unknown = await client.call_tool(CALL_TOOL, {"server": "nowhere", "tool": "create_note", "arguments": {}})
        assert hidden.isError and "Nothing was run" in text(hidden)
        assert text(hidden) == text(unknown).replace("'nowhere'", "'notes'")     # hidden reads like unknown
        bad = await client.call_tool(CALL_TOOL, {"server": "weather", "tool": "get_forecast", "arguments": [1]})
        assert bad.isError and "`arguments` must be an object" in text(bad)


@run
async def test_when_every_server_fails_find_says_so_in_process(tmp_path):
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {"dies": server("crashy", "--fail-at-start")}))
    async with in_process(config=cfg) as (gw, client):
        found = payload(await client.call_tool(FIND_TOOLS, {"request": "echo this text back"}))
        assert found["decision"] == "no_fit" and found["tools"] == []
        assert "every server failed (dies:" in found["message"]
        assert set(gw.unavailable()) == {"dies"}
        down = await client.call_tool(CALL_TOOL, {"server": "dies", "tool": "echo", "arguments": {"text": "x"}})
        assert down.isError and "server 'dies' is not available" in text(down)


@run
async def test_a_tool_switched_off_in_the_configuration_is_never_indexed_or_called(tmp_path):
    """Windsurf's ``disabledTools``: the tool is not indexed, not found, and a call to it runs nothing."""
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {
        "weather": server("weather", disabledTools=["get_forecast"])}))
    assert cfg.servers["weather"].disabled_tools == ("get_forecast",)
    async with in_process(config=cfg) as (gw, client):
        found = payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris",
                                                            "need": "weather forecast for a city"}))
        assert all(t["name"] != "get_forecast" for t in found["tools"])
        assert gw.tool_count() >= 1 and ToolId("weather", "get_forecast") not in gw.index.catalog
        call = await client.call_tool(CALL_TOOL, {"server": "weather", "tool": "get_forecast",
                                                  "arguments": {"city": "Paris"}})
        assert call.isError and "Nothing was run" in text(call)


def test_the_first_search_never_waits_for_the_public_index(monkeypatch):
    """The shipped catalog's index for no_fit suggestions is built in the background: a pipeline is ready at
    once (no suggestions yet) and gets the public index when it is there."""
    import threading

    import retrieval.index.default as default
    import retrieval.pipeline.flow as flow
    from serve.mcp_gateway import default_components

    release = threading.Event()
    public = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())

    def slow_public():
        release.wait(10)
        return public

    made = []

    def fake_load_pipeline(index, model, *, threads, public_suggestions):
        assert public_suggestions is False            # never built on the first search's path
        p = flow.Pipeline(index, None)
        made.append(p)
        return p

    monkeypatch.setattr(default, "public_index", slow_public)
    monkeypatch.setattr(flow, "load_pipeline", fake_load_pipeline)
    components = default_components(no_model=True)
    pipe = components.make_pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder()))
    assert pipe.public_index is None                   # answered now, without suggestions
    release.set()
    for _ in range(100):
        if pipe.public_index is not None:
            break
        threading.Event().wait(0.05)
    assert pipe.public_index is public
    later = components.make_pipeline(ToolIndex.build(tiny_catalog(), encoder=HashEncoder()))
    assert later.public_index is public


@run
async def test_without_a_saved_index_the_first_search_does_not_wait_for_the_slowest_server(tmp_path, monkeypatch):
    import time

    import serve.mcp_gateway as gateway_module

    monkeypatch.setattr(gateway_module, "EARLY_READY_S", 0.5)
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {"weather": server("weather"),
                                                               "slow": server("slow", "--delay", "20")}))
    t0 = time.monotonic()
    async with in_process(config=cfg, timeout_s=30) as (gw, client):
        found = payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris",
                                                            "need": "weather forecast for a city"}))
        waited = time.monotonic() - t0
        assert found["tools"][0]["name"] == "get_forecast"
        assert found.get("starting") == ["slow"]
        assert waited < 15, waited                       # not the slow server's 20 s


@run
async def test_the_gateway_calibrates_its_servers_tools_and_keeps_the_map_with_its_index(tmp_path, monkeypatch):
    import retrieval.index.examples as ix
    from fakes import ProbeClient

    import threading

    gate = threading.Event()   # the probes wait until the first answer was read on the shipped scale
    fake = ProbeClient(gate)
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: fake)
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {"weather": server("weather"), "notes": server("notes")}))
    async with in_process(config=cfg, index_dir=tmp_path / "idx", calibrate_probes=10) as (gw, client):
        before = payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris"}))
        assert gw.calibration_runs == 0
        gate.set()
        with anyio.fail_after(30):
            while gw.calibration_runs < 1:
                await anyio.sleep(0.05)
        assert gw.index.calibration["kind"] == "probe_platt" and "searches" in gw.calibration_note
        after = payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris"}))
        assert after["decision"] == before["decision"] == "proceed"          # the thresholds moved with it
        assert [t["name"] for t in after["tools"]] == [t["name"] for t in before["tools"]]
        assert after["tools"][0]["probability"] != before["tools"][0]["probability"]
        calls = fake.calls
    saved = ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())
    assert saved.calibration == gw.index.calibration                        # saved: the next start reads it
    async with in_process(config=cfg, index=saved, index_dir=tmp_path / "idx", calibrate_probes=10) as (gw2, client):
        payload(await client.call_tool(FIND_TOOLS, {"request": "get the weather forecast for Paris"}))
        with anyio.fail_after(30):
            while gw2.harvests < 1:                                           # the harvest that would trigger it
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)
        assert gw2.calibration_runs == 0 and fake.calls == calls               # calibrated already: nothing asked
        assert gw2.index.calibration == saved.calibration


def test_calibrate_without_an_endpoint_or_a_configuration_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    from serve.mcp_server import main

    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather")})
    assert main(["--calibrate", "--mcp-config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toolrank mcp: --calibrate: ") and "TOOLRANK_LLM_BASE_URL" in err and err.count("\n") == 1
    assert main(["--calibrate"]) == 2 and "goes with --mcp-config" in capsys.readouterr().err
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["--calibrate", "--calibrate-probes", "5", "--mcp-config", str(cfg)]) == 2
    assert "at least 10" in capsys.readouterr().err


@run
async def test_tools_that_change_while_probed_get_a_map_of_their_own(tmp_path, monkeypatch):
    import json
    import threading

    import retrieval.index.examples as ix
    from fakes import ProbeClient

    gate = threading.Event()
    fake = ProbeClient(gate)
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: fake)
    cfg = load_mcp_config(write_config(tmp_path / "mcp.json", {"changing": server("changing")}))
    async with in_process(config=cfg, index_dir=tmp_path / "idx", calibrate_probes=10) as (gw, client):
        with anyio.fail_after(30):
            while fake.calls == 0:                                             # the first run, held at the gate
                await anyio.sleep(0.02)
        added = await client.call_tool(CALL_TOOL, {"server": "changing", "tool": "add_tool", "arguments": {
            "name": "translate_text", "description": "Translate a text into another language"}})
        assert not added.isError, text(added)
        with anyio.fail_after(30):
            while gw.tool_count() < 4:                                          # harvested again, mid-run
                await anyio.sleep(0.05)
        gate.set()
        with anyio.fail_after(30):
            while gw.calibration_runs < 1 or gw._calibrating:
                await anyio.sleep(0.05)
        assert gw.calibration_runs == 1 and gw.index.calibration is not None
    probed = {json.loads(line).get("tool") for line in (tmp_path / "idx.probes.jsonl").read_text().splitlines()}
    assert "translate_text" in probed                                           # the map is the new tools'


def test_one_gateway_at_a_time_probes_a_configuration(tmp_path):
    from serve.mcp_gateway import _probe_lock

    cache = tmp_path / "idx.probes.jsonl"
    with _probe_lock(cache) as first:
        with _probe_lock(cache) as second:          # another process's open file: the same flock conflict
            assert first is True and second is False
    with _probe_lock(cache) as again:
        assert again is True                         # released with the run


@run
async def test_the_gateway_audits_its_own_find_tools_within_its_servers(tmp_path, monkeypatch):
    """TOOLRANK_AUDIT_SHARE on the gateway: find_tools answers are audited in the background (the first tool of
    the gateway's own eligible servers, no request text kept), and its recalibration reads them."""
    import retrieval.index.examples as ix
    from fakes import ProbeClient

    monkeypatch.setenv("TOOLRANK_AUDIT_SHARE", "1")
    monkeypatch.setenv("TOOLRANK_USE_RECALIBRATION_MIN", "5")
    monkeypatch.setenv("TOOLRANK_USE_RECALIBRATION_REFIT_S", "0")
    judge = ProbeClient(judge_yes=0.9)
    monkeypatch.setattr(ix, "llm_client", lambda concurrency=4: judge)
    index = ToolIndex.build(tiny_catalog(), encoder=HashEncoder())
    eligible = gateway_eligibility(None, ["Weather", "Slack"])
    async with in_process(index=index, eligible=eligible, index_dir=tmp_path / "idx") as (gw, client):
        for i in range(6):
            found = payload(await client.call_tool(FIND_TOOLS, {"request": f"list channels of a workspace {i}"}))
            assert found["decision"] == "proceed"
        assert gw.usage is not None and gw.usage.auditor.join(30)
        rows = gw.usage.book.tenant(gw.usage.tenant).audits()
        assert len(rows) == 6 and all(r["server"] in ("Weather", "Slack") for r in rows)
        assert all(r["model"] == gw.pipeline.model_key and r["question"] == "step" for r in rows)
        folder = gw.usage.book.root
        assert not any("workspace" in p.read_text(errors="ignore") for p in folder.rglob("audits.jsonl"))
        fitted = gw.usage.recalibration(gw.pipeline)
        assert fitted is not None and fitted.observations == 6
    assert judge.closed
