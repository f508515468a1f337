from __future__ import annotations

import json

import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from retrieval.shortcuts.always_available import AlwaysAvailable, AlwaysAvailableConfigError, AlwaysAvailableRule

WEB = ToolId("Brave Search", "brave_web_search")
DOCS = ToolId("Glean", "search")
CONFIG = [
    {"server": "Brave Search", "tool": "brave_web_search", "keywords": ["web search", "google it", "on the web"]},
    {"server": "Glean", "tool": "search", "keywords": ["workspace docs", "company wiki", "C++"]},
]


@pytest.fixture()
def aa() -> AlwaysAvailable:
    return AlwaysAvailable.from_json(CONFIG)


@pytest.mark.parametrize(("request_text", "expected"), [
    ("do a web search for the release date", [WEB]),
    ("Do a WEB   SEARCH for it", [WEB]),                    # case and whitespace
    ("just google it", [WEB]),
    ("find the policy in the company wiki", [DOCS]),
    ("check the workspace docs, then do a web search", [WEB, DOCS]),   # config order
    ("our C++ style guide", [DOCS]),                        # keywords with symbols
    ("the websearch module", []),                          # word boundaries
    ("a web searcher", []),
    ("nothing to see here", []),
])
def test_match(aa, request_text, expected):
    assert aa.match(request_text) == expected


def test_eligibility(aa):
    assert aa.match("web search and company wiki", Eligibility.of(servers=["Glean"])) == [DOCS]
    assert aa.match("web search", Eligibility.of(tools=[("Glean", "search")])) == []
    assert aa.match("web search", Eligibility()) == [WEB]


def test_rule_is_frozen_and_normalised():
    rule = AlwaysAvailableRule(("Glean", "search"), ["company  wiki"])  # type: ignore[arg-type]
    assert rule.tool_id == DOCS and isinstance(rule.tool_id, ToolId)
    assert rule.keywords == ("company wiki",)
    with pytest.raises(AttributeError):
        rule.keywords = ()  # type: ignore[misc]


def test_from_json_file(tmp_path):
    path = tmp_path / "aa.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    loaded = AlwaysAvailable.from_json(path)
    assert loaded.tool_ids == [WEB, DOCS]
    assert AlwaysAvailable.from_json(str(path)).tool_ids == [WEB, DOCS]


@pytest.mark.parametrize(("config", "message"), [
    ({"server": "x"}, "expected a JSON list"),
    (["nope"], "entry 0: each entry must be an object"),
    ([{"server": "", "tool": "t", "keywords": ["k"]}], "entry 0: field 'server' must be a non-empty string"),
    ([{"server": "s", "keywords": ["k"]}], "field 'tool' must be a non-empty string"),
    ([{"server": "s", "tool": "t", "keywords": "web"}], "field 'keywords' must be a list"),
    ([{"server": "s", "tool": "t", "keywords": []}], "give at least one word or phrase"),
    ([{"server": "s", "tool": "t", "keywords": ["ok", "  "]}], "must be non-empty strings"),
    ([{"server": "s", "tool": "t", "keywords": ["k"], "kw": 1}], "unknown field\\(s\\) \\['kw'\\]"),
    ([{"server": "s", "tool": "t", "keywords": ["a"]}, {"server": "s", "tool": "t", "keywords": ["b"]}],
     "configured twice: merge its keywords"),
])
def test_bad_config(config, message):
    with pytest.raises(AlwaysAvailableConfigError, match=message):
        AlwaysAvailable.from_json(config)


def test_bad_files(tmp_path):
    with pytest.raises(AlwaysAvailableConfigError, match="file not found"):
        AlwaysAvailable.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    with pytest.raises(AlwaysAvailableConfigError, match="invalid JSON at line 1"):
        AlwaysAvailable.from_json(bad)
    assert issubclass(AlwaysAvailableConfigError, ValueError)


def test_unknown_tools_and_empty(aa):
    assert aa.unknown_tools({WEB}) == [DOCS]
    assert AlwaysAvailable().match("web search") == []
    with pytest.raises(ValueError, match="request must be a string"):
        aa.match(None)  # type: ignore[arg-type]
