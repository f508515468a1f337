"""The Smithery registry adapter: naming, skipped servers and tools, errors."""

from __future__ import annotations

import json

import pytest

from retrieval.catalog.model import CatalogError, ToolId
from retrieval.catalog.smithery import load_smithery, read_smithery


def server(qualified, display, tools, description="A server"):
    return {"qualifiedName": qualified, "displayName": display, "description": description, "iconUrl": None,
            "tools": tools}


@pytest.fixture
def folder(tmp_path):
    files = {
        "a.json": server("@x/linear", "Linear", [
            {"name": "create_issue", "description": "Create an issue", "inputSchema": {"type": "object"}},
            {"name": "create_issue", "description": "a repeat", "inputSchema": {"type": "object"}},
            {"name": "search", "inputSchema": {"type": "object"}},                 # no description
        ]),
        "b.json": server("@y/linear", "Linear", [{"name": "list", "description": "List", "inputSchema": {}}]),
        "c.json": server("@z/empty", "Empty", []),
        "d.json": server("@w/nameless", None, [{"name": "ping", "description": "Ping",
                                                "input_schema": {"type": "object", "properties": {}}}],
                         description=None),
        "e.json": server("@v/slack", "Slack", [{"name": "post", "description": "Post", "inputSchema": {}}]),
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def test_read_smithery(folder):
    res = read_smithery(folder, reserved=["Slack"])
    cat = res.catalog
    assert cat.servers == ["Linear", "Linear (@y/linear)", "@w/nameless", "Slack (@v/slack)"]
    assert (res.files, res.skipped_without_tools, res.skipped_duplicate_tools) == (5, 1, 1)
    assert res.renamed == {"@y/linear": "Linear (@y/linear)", "@v/slack": "Slack (@v/slack)"}
    assert cat[ToolId("Linear", "create_issue")].description == "Create an issue"     # the first one is kept
    assert cat[ToolId("Linear", "search")].description == ""
    assert cat[ToolId("Linear", "search")].server_description == "A server"
    ping = cat[ToolId("@w/nameless", "ping")]
    assert ping.input_schema == {"type": "object", "properties": {}} and ping.server_description == ""
    assert len(cat) == 5


def test_load_smithery_reserves_the_shipped_names_by_default(folder):
    cat = load_smithery(folder)
    assert "Slack (@v/slack)" in cat.servers                 # MCP-Zero has a "Slack" server


def test_errors(tmp_path):
    with pytest.raises(CatalogError, match="Smithery folder not found"):
        read_smithery(tmp_path / "nope", reserved=())
    with pytest.raises(CatalogError, match=r"no \*\.json server files"):
        read_smithery(tmp_path, reserved=())
    (tmp_path / "bad.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"bad\.json: invalid JSON at line 1"):
        read_smithery(tmp_path, reserved=())
    (tmp_path / "bad.json").write_text(json.dumps(server("@a/b", "B", [{"description": "no name"}])))
    with pytest.raises(CatalogError, match=r"bad\.json, server 'B', tools\[0\]: missing required field 'name'"):
        read_smithery(tmp_path, reserved=())
