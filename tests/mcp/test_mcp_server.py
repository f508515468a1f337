"""What toolrank lists and answers over MCP, without processes: the tool definitions (and their
token budget: they sit in every request's context), the find_tools answer, and the reasons."""

from __future__ import annotations

import json

import pytest

from retrieval.catalog.model import ToolId
from retrieval.pipeline.results import ScoredTool, SearchResult
from retrieval.pipeline.tokens import TokenCounter
from serve.mcp_server import (CALL_TOOL, DESCRIBE_TOOL, FIND_TOOLS, MAX_ANSWER_CHARS, MAX_DESCRIPTION_CHARS,
                              MAX_SCHEMA_CHARS, _check_find, _host_port, bound_schema, bound_tools, find_payload,
                              http_url, one_line_reason, tool_definitions)

# Tokens (cl100k) of each definition as the model sees it: name, description and inputSchema.
BUDGET = {FIND_TOOLS: 350, CALL_TOOL: 175, DESCRIBE_TOOL: 90}


@pytest.mark.parametrize("gateway", [True, False])
def test_definitions_stay_within_the_token_budget(gateway):
    counter = TokenCounter()
    defs = tool_definitions(gateway)
    assert [d["name"] for d in defs] == ([FIND_TOOLS, CALL_TOOL, DESCRIBE_TOOL] if gateway else
                                         [FIND_TOOLS, DESCRIBE_TOOL])
    for d in defs:
        n = counter.count_definition(d)
        assert 40 < n <= BUDGET[d["name"]], (d["name"], n)
    assert sum(counter.count_definition(d) for d in defs) <= 600


def test_find_description_says_when_and_how():
    gateway, direct = (tool_definitions(g)[0]["description"] for g in (True, False))
    for text in (gateway, direct):
        for word in ("`request`", "`need`", "proceed", "search_again", "choose", "attempt=2", "no_fit", "`connect`",
                     "probability", "never guess"):
            assert word in text, word
    assert "call_tool(server, tool, arguments)" in gateway and "call_tool" not in direct


class _Gateway:
    def __init__(self, unavailable=None, starting=()):
        self._unavailable = unavailable or {}
        self._starting = list(starting)

    def unavailable(self):
        return dict(self._unavailable)

    def starting(self):
        return list(self._starting)


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
    assert _host_port("::1:80") == ("::1", 80)
    assert http_url("::1", 80) == "http://[::1]:80/mcp"                 # a valid URL for an IPv6 host
    assert http_url("127.0.0.1", 8765) == "http://127.0.0.1:8765/mcp"
    for bad, match in (("8765", "HOST:PORT"), ("localhost:99999", "HOST:PORT"), ("10.0.0.1:80", "loopback only")):
        with pytest.raises(ValueError, match=match):
            _host_port(bad)


def _huge_schema(n_props: int = 200) -> dict:
    return {"type": "object", "required": ["text"], "properties": {
        f"p{i}": {"type": "string", "description": "a long parameter description " * 20,
                  "examples": ["x" * 100]} for i in range(n_props)} | {"text": {"type": "string"}}}


def test_a_huge_definition_is_bounded_and_says_where_it_was_cut():
    big = "Translate text between languages. " + "More detail about the tool. " * 4000     # ~110 KB
    tool = _tool("translator", "translate_text", 0.95)
    tool.definition.update(description=big, inputSchema=_huge_schema(120))
    others = [_tool("s", f"tool_{i}", 0.5) for i in range(9)]
    for t in others:
        t.definition.update(description="d " * 1500, inputSchema=_huge_schema(20))
    result = SearchResult("proceed", [tool, *others], 0.95, 1, message="proceed")
    out = find_payload(result, gateway=_Gateway())
    size = len(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    # Full definitions up to the answer's bound; past it, one short entry per further tool.
    assert size <= MAX_ANSWER_CHARS + 500 * len(out["tools"])
    assert size < 40_000                                         # the ~130 KB of definitions it was given
    first = out["tools"][0]
    assert first["description"].startswith("Translate text between languages.")
    assert len(first["description"]) <= MAX_DESCRIPTION_CHARS + 4
    assert first["truncated"]["description"] == f"cut at {len(first['description'])} of {len(big)} characters"
    assert len(json.dumps(first["inputSchema"])) <= MAX_SCHEMA_CHARS
    assert "inputSchema" in first["truncated"] and "text" in first["inputSchema"]["properties"]
    assert first["inputSchema"]["required"] == ["text"]
    assert "describe_tool(server, tool)" in out["note"]
    assert len(out["tools"]) == 10                                # later tools keep name, probability, reason
    last = out["tools"][-1]
    assert last["truncated"]["inputSchema"].startswith("left out") and last["reason"]


def test_small_definitions_are_left_alone():
    tools = [{"server": "s", "name": "t", "description": "short", "inputSchema": {"type": "object"}}]
    assert bound_tools(tools) is False and "truncated" not in tools[0]
    schema = {"type": "object", "properties": {"a": {"type": "string", "description": "x" * 500}}}
    assert bound_schema(schema, 10_000) == (schema, None)
    wide = _huge_schema(400)
    only_required, why_required = bound_schema(wide, MAX_SCHEMA_CHARS)
    assert only_required["properties"] == {"text": {"type": "string"}} and why_required.startswith("only the required")
    short, why = bound_schema(schema, 300)
    assert why.startswith("nested descriptions cut") and len(short["properties"]["a"]["description"]) < 200


def test_servers_still_starting_are_marked():
    proceed = SearchResult("proceed", [_tool("weather", "get_forecast", 0.9)], 0.9, 1, message="Proceed.")
    out = find_payload(proceed, gateway=_Gateway(starting=["slow"]))
    assert out["starting"] == ["slow"] and "Still starting: slow" in out["message"]


@pytest.mark.parametrize("header, ok", [(b"Bearer s3cret-token-0123456789", True),
                                        (b"bearer s3cret-token-0123456789", True),      # RFC 7235: any case
                                        (b"BEARER  s3cret-token-0123456789", True),
                                        (b"Basic s3cret-token-0123456789", False),
                                        (b"Bearer wrong", False), (b"", False)])
def test_bearer_scheme_is_case_insensitive(header, ok):
    import anyio

    from serve.mcp_server import BearerAuth

    seen = []

    async def app(scope, receive, send):
        seen.append(True)

    sent = []

    async def send(msg):
        sent.append(msg)

    auth = BearerAuth(app, "s3cret-token-0123456789")
    anyio.run(auth, {"type": "http", "headers": [(b"authorization", header)] if header else []}, None, send)
    assert bool(seen) == ok and (not ok) == bool(sent and sent[0].get("status") == 401)
