"""`toolrank mcp` as a gateway, over stdio: a real subprocess (through the `toolrank` dispatcher)
driven by the SDK's own client, forwarding to real SDK servers it starts itself. The fake models
(gateway_fakes.py) make every decision known in advance: a tool fits when the request contains
every word of its name."""

from __future__ import annotations

import re

import anyio
import pytest

from mcp_helpers import payload, run, server, stdio_gateway, text, wait_for, write_config
from testkit import tenants_toml


@run
async def test_find_then_call_returns_the_servers_result_unchanged(tmp_path):
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather"), "files": server("paged")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg)) as gw:
        listed = {t.name: t for t in (await gw.list_tools()).tools}
        assert set(listed) == {"find_tools", "call_tool", "describe_tool"}
        assert listed["find_tools"].inputSchema["required"] == ["request", "need"]   # the need is asked for

        # an old caller that sends no need still gets its answer
        found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Paris"}))
        assert found["decision"] == "proceed"
        best = found["tools"][0]
        assert (best["server"], best["name"], best["probability"]) == ("weather", "get_forecast", 0.95)
        assert best["inputSchema"]["properties"]["city"]["type"] == "string"     # the server's real schema
        assert best["description"].startswith("Weather forecast for a city")
        assert "forecast" in best["reason"]
        assert all(t["probability"] < 0.5 for t in found["tools"][1:])

        # A tool from the last page of a paginated tools/list was harvested too.
        found = payload(await gw.call_tool("find_tools", {"request": "search files named *.py",
                                                          "need": "search files"}))
        assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("files", "search_files")

        # describe_tool: the whole definition of a tool the caller may see; anything else refused.
        whole = payload(await gw.call_tool("describe_tool", {"server": "weather", "tool": "get_forecast"}))
        assert (whole["server"], whole["name"]) == ("weather", "get_forecast")
        assert whole["inputSchema"] == best["inputSchema"] and whole["description"] == best["description"]
        nope = await gw.call_tool("describe_tool", {"server": "github", "tool": "create_issue"})
        assert nope.isError and "refused" in text(nope)

        # Forwarded results: text, structured content and the server's own errors, as they came.
        result = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                  "arguments": {"city": "Paris", "days": 2}})
        assert not result.isError and text(result) == "Paris: sunny, 21 C, no rain for the next 2 days"
        result = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_alerts",
                                                  "arguments": {"region": "Provence"}})
        assert result.structuredContent == {"region": "Provence", "alerts": ["heat wave warning for Provence"]}
        result = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                  "arguments": {"city": "Atlantis"}})
        assert result.isError and "unknown city 'Atlantis'" in text(result)
        result = await gw.call_tool("call_tool", {"server": "files", "tool": "search_files",
                                                  "arguments": {"path": "/tmp"}})
        assert text(result) == "search_files /tmp"


@run
async def test_search_again_then_no_fit_names_servers_to_connect(tmp_path):
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather")})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg)) as gw:
        request = {"request": "post a message to the team channel"}
        first = payload(await gw.call_tool("find_tools", request))
        assert first["decision"] == "search_again" and "attempt=2" in first["message"]
        second = payload(await gw.call_tool("find_tools", {**request, "need": "post message", "attempt": 2}))
        assert second["decision"] == "no_fit" and second["tools"] == []
        assert "Slack" in second["connect"]                  # from the public registry (the fakes' tiny catalog)
        bad = await gw.call_tool("find_tools", {"request": "  "})
        assert bad.isError and "non-empty string" in text(bad)
        bad = await gw.call_tool("find_tools", {"request": "x", "attempt": 3})
        assert bad.isError and "`attempt` is 1, or 2" in text(bad)
        with pytest.raises(Exception, match="unknown tool 'nope'"):
            await gw.call_tool("nope", {})


TENANTS = tenants_toml({"name": "acme", "key": "k", "servers": ["weather", "notes"],
                        "tools": [["weather", "get_forecast"], ["notes", "create_note"], ["notes", "search_notes"]],
                        "policy": {"proceed_threshold": 0.99}})


@run
async def test_refusals_and_hidden_servers(tmp_path):
    """Only configured, eligible servers and tools run; a hidden server is refused exactly like an
    unknown one and never appears in results, errors or suggestions."""
    from fakes import HashEncoder
    from retrieval.index.mcp import index_mcp_config

    (tmp_path / "tenants.toml").write_text(TENANTS)
    cfg = write_config(tmp_path / "mcp.json", {"weather": server("weather"), "notes": server("notes"),
                                               "secretcrm": server("paged"),
                                               "secretdies": server("crashy", "--fail-at-start")})
    # Indexed with every server first: the hidden one's tools are in the index the gateway loads.
    report = await anyio.to_thread.run_sync(lambda: index_mcp_config(cfg, tmp_path / "index", encoder=HashEncoder()))
    assert report.tools == 12 and "secretcrm" in {s.name for s in report.servers if s.status == "added"}
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "--index", str(tmp_path / "index"),
                             "--tenants", str(tmp_path / "tenants.toml"), "--tenant", "acme") as gw:
        answers = []
        for req in ("get the weather forecast for Paris", "read file /etc/hosts", "search files named x"):
            for attempt in (1, 2):
                answers.append(await gw.call_tool("find_tools", {"request": req, "attempt": attempt}))
        found = payload(answers[0])
        assert found["decision"] == "search_again"           # the tenant's proceed threshold (0.99) applies
        assert found["tools"][0]["name"] == "get_forecast"
        assert payload(answers[2])["tools"]                  # read_file would fit, were it visible
        for r in answers:
            assert "secret" not in str(r.structuredContent)
            assert "get_alerts" not in str(r.structuredContent) and "delete_note" not in str(r.structuredContent)

        unknown = await gw.call_tool("call_tool", {"server": "github", "tool": "create_issue", "arguments": {}})
        hidden = await gw.call_tool("call_tool", {"server": "secretcrm", "tool": "read_file",
                                                  "arguments": {"path": "/etc/hosts"}})
        assert unknown.isError and hidden.isError
        assert text(hidden) == text(unknown).replace("'github'", "'secretcrm'")
        assert "secretcrm" not in text(unknown) and "Nothing was run" in text(hidden)
        assert "('weather', 'notes')" in text(unknown)
        for tool in ("get_alerts", "no_such_tool"):          # hidden by the tenant, or not there at all
            refused = await gw.call_tool("call_tool", {"server": "weather", "tool": tool, "arguments": {}})
            assert refused.isError and f"has no tool '{tool}' that you may call" in text(refused)
        ok = await gw.call_tool("call_tool", {"server": "notes", "tool": "create_note",
                                              "arguments": {"title": "t", "body": "b"}})
        assert not ok.isError and text(ok) == "note 1 created"
    log = (tmp_path / "gateway.log").read_text()
    assert "cannot open the database" not in log and "secret" not in log   # hidden servers are never started


@run
async def test_a_backend_crash_mid_call_is_a_clear_error_and_the_gateway_stays_up(tmp_path):
    mark = tmp_path / "slow.mark"
    cfg = write_config(tmp_path / "mcp.json", {"crashy": server("crashy"), "weather": server("weather"),
                                               "dies": server("crashy", "--fail-at-start"),
                                               "slow": server("slow", "--mark", str(mark))})
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "--call-timeout", "1") as gw:
        before = await gw.call_tool("call_tool", {"server": "crashy", "tool": "echo", "arguments": {"text": "hi"}})
        pid = re.search(r"pid (\d+)", text(before)).group(1)
        crashed = await gw.call_tool("call_tool", {"server": "crashy", "tool": "crash", "arguments": {}})
        assert crashed.isError
        assert "closed the connection during the call to 'crash'" in text(crashed)
        assert "may or may not have taken effect" in text(crashed)

        found = payload(await gw.call_tool("find_tools", {"request": "get the weather forecast for Oslo"}))
        assert found["tools"][0]["name"] == "get_forecast"                 # still answering
        assert found["unavailable"][0]["server"] == "dies"                 # the server that never started, and why
        assert "exited or closed the connection" in found["unavailable"][0]["reason"]
        down = await gw.call_tool("call_tool", {"server": "dies", "tool": "echo", "arguments": {"text": "x"}})
        assert down.isError and "server 'dies' is not available" in text(down)

        late = await gw.call_tool("call_tool", {"server": "slow", "tool": "wait", "arguments": {"seconds": 30}})
        assert late.isError and "did not answer the call to 'wait' within 1 s" in text(late)
        assert "answered" not in (mark.read_text() if mark.exists() else "")  # returned before the server answered

        after = await gw.call_tool("call_tool", {"server": "crashy", "tool": "echo", "arguments": {"text": "again"}})
        assert not after.isError and text(after).startswith("again (pid ")   # started again on the next call
        assert re.search(r"pid (\d+)", text(after)).group(1) != pid


@run
async def test_a_tool_list_change_is_picked_up(tmp_path):
    cfg = write_config(tmp_path / "mcp.json", {"changing": server("changing"), "weather": server("weather")})
    index = tmp_path / "index"
    async with stdio_gateway(tmp_path, "--mcp-config", str(cfg), "--index", str(index)) as gw:
        request = {"request": "translate text to french"}
        assert payload(await gw.call_tool("find_tools", request))["tools"][0]["name"] != "translate_text"
        refused = await gw.call_tool("call_tool", {"server": "changing", "tool": "translate_text", "arguments": {}})
        assert refused.isError and "no tool 'translate_text'" in text(refused)

        added = await gw.call_tool("call_tool", {"server": "changing", "tool": "add_tool", "arguments": {
            "name": "translate_text", "description": "Translate text into another language"}})
        assert text(added) == "added translate_text"

        async def listed():
            found = payload(await gw.call_tool("find_tools", request))
            return found["tools"] and found["tools"][0]["name"] == "translate_text" and found
        found = await wait_for(listed)
        assert found, "the new tool never appeared in find_tools"
        assert (found["decision"], found["tools"][0]["server"]) == ("proceed", "changing")
        ran = await gw.call_tool("call_tool", {"server": "changing", "tool": "translate_text", "arguments": {}})
        assert not ran.isError and text(ran) == "translate_text ran"
    from fakes import HashEncoder
    from retrieval.index.embedded import ToolIndex
    saved = ToolIndex.load(index, encoder=HashEncoder())                  # the update was saved too
    assert ("changing", "translate_text") in saved.catalog


@run
async def test_find_only_mode_without_a_configuration(tmp_path):
    """Without --mcp-config: find_tools over an index, no call_tool; --server narrows what is seen."""
    from fakes import HashEncoder, tiny_catalog
    from retrieval.index.embedded import ToolIndex

    ToolIndex.build(tiny_catalog(), encoder=HashEncoder()).save(tmp_path / "index")
    async with stdio_gateway(tmp_path, "--index", str(tmp_path / "index"), "--server", "Weather",
                             "--server", "Slack") as gw:
        listed = {t.name: t for t in (await gw.list_tools()).tools}
        assert set(listed) == {"find_tools", "describe_tool"}
        assert "call_tool" not in listed["find_tools"].description
        found = payload(await gw.call_tool("find_tools", {"request": "list channels of a workspace"}))
        assert (found["decision"], found["tools"][0]["server"]) == ("proceed", "Slack")
        assert {t["server"] for t in found["tools"]} <= {"Weather", "Slack"}
        with pytest.raises(Exception, match="unknown tool 'call_tool'"):
            await gw.call_tool("call_tool", {"server": "Slack", "tool": "list_channels"})
