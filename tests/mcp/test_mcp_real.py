"""The real shipped pipeline end to end: `toolrank index --mcp-config` with the shipped encoder,
then `toolrank mcp` with the shipped scorer, driven over stdio by the SDK's client."""

from __future__ import annotations

import json
import shutil
import sys

import anyio
import pytest

from serve.commands import main as toolrank

from mcp_helpers import HERE, payload, stdio_gateway, text


@pytest.fixture
def example(tmp_path):
    """The shipped example configuration, next to copies of its servers."""
    shutil.copytree(HERE / "servers", tmp_path / "servers")
    path = tmp_path / "example_mcp.json"
    path.write_text((HERE / "example_mcp.json").read_text().replace('"python"', json.dumps(sys.executable)))
    return path


def test_index_then_find_and_call_with_the_shipped_models(tmp_path, example, capsys):
    pytest.importorskip("scorer")
    index = tmp_path / "index"
    assert toolrank(["index", "--mcp-config", str(example), "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert "12 tools from 3 servers" in out and '"toolrank": {"command": ' in out and '"args": ["mcp", "--mcp-config"' in out

    async def session() -> None:
        async with stdio_gateway(tmp_path, "--mcp-config", str(example), "--index", str(index),
                                 "--no-suggestions", fakes=False) as gw:
            found = payload(await gw.call_tool("find_tools", {
                "request": "will it rain in Lisbon over the next few days?"}))
            # The decision is the threshold's (policy): a harvested catalog has no example requests, and the
            # 0.4.0 day-one model puts the right tool first at a probability under 0.85, so it may search again.
            assert found["decision"] in ("proceed", "search_again")
            assert (found["tools"][0]["server"], found["tools"][0]["name"]) == ("weather", "get_forecast")
            assert 0.5 < found["tools"][0]["probability"] <= 1.0
            assert all(0.0 <= t["probability"] <= 1.0 for t in found["tools"])
            result = await gw.call_tool("call_tool", {"server": "weather", "tool": "get_forecast",
                                                      "arguments": {"city": "Lisbon"}})
            assert text(result).startswith("Lisbon: sunny")
            found = payload(await gw.call_tool("find_tools", {"request": "jot down a note: buy milk"}))
            assert found["tools"][0]["name"] == "create_note"
    anyio.run(session)
