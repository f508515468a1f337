"""What toolrank lists and answers over MCP, without processes: the tool definitions (and their
token budget: they sit in every request's context), the find_tools answer, and the reasons."""

from __future__ import annotations

import json

import pytest

from retrieval.catalog import ToolId
from retrieval.results import ScoredTool, SearchResult
from retrieval.tokens import TokenCounter
from serve.mcp_server import (CALL_TOOL, FIND_TOOLS, _check_find, _host_port, find_payload, one_line_reason,
                              tool_definitions)

# Tokens (cl100k) of each definition as the model sees it: name, description and inputSchema.
BUDGET = {FIND_TOOLS: 350, CALL_TOOL: 175}


@pytest.mark.parametrize("gateway", [True, False])
def test_definitions_stay_within_the_token_budget(gateway):
    counter = TokenCounter()
    defs = tool_definitions(gateway)
    assert [d["name"] for d in defs] == ([FIND_TOOLS, CALL_TOOL] if gateway else [FIND_TOOLS])
    for d in defs:
        n = counter.count_definition(d)
        assert 100 < n <= BUDGET[d["name"]], (d["name"], n)
    assert sum(counter.count_definition(d) for d in defs) <= 500


def test_find_description_says_when_and_how():
    gateway, direct = (tool_definitions(g)[0]["description"] for g in (True, False))
    for text in (gateway, direct):
        for word in ("`request`", "`need`", "proceed", "search_again", "attempt=2", "no_fit", "`connect`",
                     "probability", "never guess"):
            assert word in text, word
    assert "call_tool(server, tool, arguments)" in gateway and "call_tool" not in direct


class _Gateway:
    def __init__(self, unavailable=None):
        self._unavailable = unavailable or {}

    def unavailable(self):
        return dict(self._unavailable)


def _tool(server, name, p, source="ranked", explanation=None):
    definition = {"name": name, "description": f"{name} does it", "inputSchema": {"type": "object", "properties": {}}}
    return ScoredTool(ToolId(server, name), p, 1, source, definition, explanation)


def test_payload_per_decision():
    expl = {"matched_terms": ["forecast", "weather"], "bm25_rank": 1, "dense_rank": 3,
            "reason": "ranked by calibrated probability; decision proceed; lowered: the request names Slack, "
                      "not this tool's server"}
    proceed = SearchResult("proceed", [_tool("weather", "get_forecast", 0.91234, explanation=expl)], 0.91234, 1,
                           message="Best match 0.91 >= 0.8: proceed with these tools.")
    out = find_payload(proceed, gateway=_Gateway())
    assert out == {"decision": "proceed", "message": "Best match 0.91 >= 0.8: proceed with these tools.",
                   "tools": [{"server": "weather", "name": "get_forecast", "description": "get_forecast does it",
                              "inputSchema": {"type": "object", "properties": {}}, "probability": 0.912,
                              "reason": "matches forecast, weather; retrieved keywords #1, meaning #3; lowered: "
                                        "the request names Slack, not this tool's server"}]}
    json.dumps(out)                                                  # plain JSON

    again = SearchResult("search_again", [], 0.3, 1, message="... passing this result as `previous`.")
    out = find_payload(again, gateway=_Gateway({"db": "timed out"}))
    assert "attempt=2" in out["message"] and "previous" not in out["message"]
    assert out["unavailable"] == [{"server": "db", "reason": "timed out"}]

    no_fit = SearchResult("no_fit", [], 0.1, 2, message="No connected tool fits.", suggestions=["Slack", "Discord"])
    assert find_payload(no_fit, gateway=_Gateway())["connect"] == ["Slack", "Discord"]

    nothing = find_payload(None, gateway=_Gateway({"a": "command not found"}))
    assert nothing["decision"] == "no_fit" and "every server failed (a: command not found)" in nothing["message"]


def test_reasons_for_shortcuts():
    assert one_line_reason(_tool("GitHub", "x", 0.95, "server_mention")) == \
        "the best tool of GitHub, which the request names"
    assert one_line_reason(_tool("s", "x", 0.9, "exact_name")) == "the request names this tool"
    assert one_line_reason(_tool("s", "x", 1.0, "always_available")).startswith("always available")
    assert one_line_reason(_tool("s", "x", 0.2, explanation={})) == "ranked by calibrated probability"


@pytest.mark.parametrize("args, error", [
    ({}, "non-empty string"), ({"request": 3}, "non-empty string"), ({"request": "x" * 4001}, "at most 4000"),
    ({"request": "x", "need": "y" * 501}, "at most 500"), ({"request": "x", "attempt": True}, "`attempt` is 1"),
    ({"request": "x", "k": 3}, "unknown k"),
])
def test_find_arguments_are_checked(args, error):
    assert error in _check_find(args)


def test_find_arguments_pass():
    assert _check_find({"request": "hi", "need": "", "attempt": 2}) == ("hi", None, 2)


def test_http_address():
    assert _host_port("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert _host_port("[::1]:80") == ("::1", 80)
    for bad, match in (("8765", "HOST:PORT"), ("localhost:99999", "HOST:PORT"), ("10.0.0.1:80", "loopback only")):
        with pytest.raises(ValueError, match=match):
            _host_port(bad)
