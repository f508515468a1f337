"""Catalog loading: the three formats, optional descriptions, all-or-nothing errors, examples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from retrieval.catalog.formats import load_catalog, load_default_catalog, load_examples
from retrieval.catalog.model import Catalog, CatalogError, Tool, ToolId


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


MCP_ZERO = [
    {"name": "Weather", "description": "Weather data", "tools": [
        {"name": "get_forecast", "description": "Forecast for a city",
         "parameter": {"city": "(str) City name", "days": "(int) How many days"}},
        {"name": "get_alerts"},                                   # no description at all
    ]},
    {"name": "Slack", "tools": [                                  # no server description
        {"name": "post_message", "description": None, "parameter": {}},
    ]},
]


# ---------------------------------------------------------------- formats


def test_mcp_zero_list_loads(tmp_path):
    cat = load_catalog(write_json(tmp_path / "c.json", MCP_ZERO))
    assert [t.id for t in cat] == [ToolId("Weather", "get_forecast"), ToolId("Weather", "get_alerts"),
                                   ToolId("Slack", "post_message")]
    assert cat.servers == ["Weather", "Slack"]
    assert cat.server_descriptions == {"Weather": "Weather data", "Slack": ""}
    forecast = cat[ToolId("Weather", "get_forecast")]
    assert forecast.server_description == "Weather data"
    assert forecast.input_schema == {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "description": "How many days"},
    }}


def test_missing_or_null_description_is_empty(tmp_path):
    cat = load_catalog(write_json(tmp_path / "c.json", MCP_ZERO))
    assert cat[ToolId("Weather", "get_alerts")].description == ""
    assert cat[ToolId("Slack", "post_message")].description == ""
    assert cat[ToolId("Slack", "post_message")].server_description == ""


def wrapped(name="GitHub", description="Code hosting", tools=None):
    return {"server": {"name": name, "description": description},
            "tools": tools if tools is not None else [
                {"name": "create_issue", "description": "Create an issue",
                 "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
                {"name": "list_prs", "description": None},
            ]}


def test_wrapped_tools_list_one(tmp_path):
    cat = load_catalog(write_json(tmp_path / "one.json", wrapped()))
    assert [t.id for t in cat] == [ToolId("GitHub", "create_issue"), ToolId("GitHub", "list_prs")]
    assert cat[ToolId("GitHub", "create_issue")].input_schema["properties"] == {"title": {"type": "string"}}
    assert cat[ToolId("GitHub", "list_prs")].description == ""
    assert cat[ToolId("GitHub", "list_prs")].server_description == "Code hosting"


def test_wrapped_tools_list_many(tmp_path):
    data = [wrapped(), wrapped("Slack", None, [{"name": "post_message", "description": "Post"}])]
    cat = load_catalog(write_json(tmp_path / "many.json", data))
    assert cat.servers == ["GitHub", "Slack"]
    assert len(cat) == 3
    assert cat.server_descriptions["Slack"] == ""


def test_jsonl_loads(tmp_path):
    rows = [
        {"server": "Weather", "name": "get_forecast", "description": "Forecast", "server_description": "Weather data",
         "inputSchema": {"type": "object"}},
        {"server": "Weather", "name": "get_alerts"},            # inherits the server description
        {"server": "Slack", "name": "post_message", "description": None},
    ]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with open(path, "a") as fh:
        fh.write("\n   \n")                                     # blank lines are skipped
    cat = load_catalog(path)
    assert [t.id for t in cat] == [ToolId("Weather", "get_forecast"), ToolId("Weather", "get_alerts"),
                                   ToolId("Slack", "post_message")]
    assert cat[ToolId("Weather", "get_alerts")].server_description == "Weather data"
    assert cat[ToolId("Weather", "get_alerts")].description == ""
    assert cat[ToolId("Slack", "post_message")].description == ""
    assert cat[ToolId("Weather", "get_forecast")].input_schema == {"type": "object"}


# ---------------------------------------------------------------- errors


def test_missing_tool_name_names_file_server_and_field(tmp_path):
    data = [{"name": "Weather", "tools": [{"name": "ok"}, {"description": "no name"}]}]
    path = write_json(tmp_path / "c.json", data)
    with pytest.raises(CatalogError, match=r"c\.json, server 'Weather', tools\[1\]: missing required field 'name'"):
        load_catalog(path)


def test_missing_server_name(tmp_path):
    path = write_json(tmp_path / "c.json", [{"description": "x", "tools": []}])
    with pytest.raises(CatalogError, match=r"c\.json, servers\[0\]: missing required field 'name'"):
        load_catalog(path)


def test_missing_tool_name_in_wrapped_format(tmp_path):
    path = write_json(tmp_path / "w.json", wrapped(tools=[{"description": "nameless"}]))
    with pytest.raises(CatalogError, match=r"w\.json, server 'GitHub', tools\[0\]: missing required field 'name'"):
        load_catalog(path)


def test_missing_name_in_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"server": "A", "name": "t"}, {"server": "A", "description": "x"}])
    with pytest.raises(CatalogError, match=r"c\.jsonl, line 2, server 'A': missing required field 'name'"):
        load_catalog(path)


def test_empty_name_is_rejected(tmp_path):
    path = write_json(tmp_path / "c.json", [{"name": "A", "tools": [{"name": "  "}]}])
    with pytest.raises(CatalogError, match=r"server 'A', tools\[0\]: field 'name' is empty"):
        load_catalog(path)


@pytest.mark.parametrize("fmt", ["mcp_zero", "wrapped", "jsonl"])
def test_non_string_description(tmp_path, fmt):
    if fmt == "mcp_zero":
        path = write_json(tmp_path / "c.json", [{"name": "A", "tools": [{"name": "t", "description": 42}]}])
    elif fmt == "wrapped":
        path = write_json(tmp_path / "c.json", wrapped("A", "d", [{"name": "t", "description": 42}]))
    else:
        path = write_jsonl(tmp_path / "c.jsonl", [{"server": "A", "name": "t", "description": 42}])
    with pytest.raises(CatalogError, match=r"server 'A', tool 't': field 'description' must be a string, got int"):
        load_catalog(path)


def test_non_string_server_description(tmp_path):
    path = write_json(tmp_path / "c.json", [{"name": "A", "description": ["x"], "tools": []}])
    with pytest.raises(CatalogError, match=r"server 'A': field 'description' must be a string, got list"):
        load_catalog(path)


@pytest.mark.parametrize("fmt", ["mcp_zero", "wrapped", "jsonl"])
def test_duplicate_server_tool_pair(tmp_path, fmt):
    if fmt == "mcp_zero":
        path = write_json(tmp_path / "c.json", [{"name": "A", "tools": [{"name": "t"}, {"name": "t"}]}])
    elif fmt == "wrapped":
        path = write_json(tmp_path / "c.json", [wrapped("A", "", [{"name": "t"}]), wrapped("A", "", [{"name": "t"}])])
    else:
        path = write_jsonl(tmp_path / "c.jsonl", [{"server": "A", "name": "t"}, {"server": "A", "name": "t"}])
    with pytest.raises(CatalogError, match=r"server 'A', tool 't': duplicate \(server, tool\) pair"):
        load_catalog(path)


def test_same_tool_name_on_two_servers_is_fine(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"server": "A", "name": "search"}, {"server": "B", "name": "search"}])
    assert len(load_catalog(path)) == 2


def test_duplicate_server_in_mcp_zero(tmp_path):
    path = write_json(tmp_path / "c.json", [{"name": "A", "tools": []}, {"name": "A", "tools": []}])
    with pytest.raises(CatalogError, match=r"server 'A': duplicate server name"):
        load_catalog(path)


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('[\n {"name": "A",\n  "tools": [}\n]\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"c\.json: invalid JSON at line 3"):
        load_catalog(path)


def test_invalid_jsonl_names_the_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"server": "A", "name": "t"}\n\n{"server": "A", "name": \n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"c\.jsonl, line 3: invalid JSON"):
        load_catalog(path)


def test_bare_tools_list_needs_a_server(tmp_path):
    path = write_json(tmp_path / "bare.json", {"tools": [{"name": "t", "description": "d"}]})
    with pytest.raises(CatalogError, match=r"bare\.json: a bare tools/list result has no server name; wrap it"):
        load_catalog(path)


def test_unrecognised_format(tmp_path):
    path = write_json(tmp_path / "c.json", {"hello": 1})
    with pytest.raises(CatalogError, match="unrecognised catalog format"):
        load_catalog(path)


def test_missing_file(tmp_path):
    with pytest.raises(CatalogError, match=r"nope\.json: file not found"):
        load_catalog(tmp_path / "nope.json")


def test_not_utf8(tmp_path):
    path = tmp_path / "c.json"
    path.write_bytes(b'[{"name": "\xff"}]')
    with pytest.raises(CatalogError, match="not UTF-8"):
        load_catalog(path)


def test_bad_input_schema(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"server": "A", "name": "t", "inputSchema": "object"}])
    with pytest.raises(CatalogError, match=r"tool 't': field 'inputSchema' must be an object"):
        load_catalog(path)


def test_tools_must_be_a_list(tmp_path):
    path = write_json(tmp_path / "c.json", [{"name": "A", "tools": {"t": {}}}])
    with pytest.raises(CatalogError, match=r"server 'A': field 'tools' must be a list"):
        load_catalog(path)


def test_catalog_error_is_a_value_error():
    assert issubclass(CatalogError, ValueError)


def test_nothing_half_loaded(tmp_path):
    """An error in the last record fails the whole load; a good file loads fully."""
    good = [{"server": "A", "name": f"t{i}"} for i in range(5)]
    path = write_jsonl(tmp_path / "c.jsonl", good + [{"server": "A", "name": 7}])
    result = None
    with pytest.raises(CatalogError, match=r"line 6.*field 'name' must be a string"):
        result = load_catalog(path)
    assert result is None
    assert len(load_catalog(write_jsonl(tmp_path / "ok.jsonl", good))) == 5


def test_catalog_rejects_duplicate_tools():
    with pytest.raises(CatalogError, match=r"duplicate tool A / t"):
        Catalog([Tool("A", "t"), Tool("A", "t", "other")])


# ---------------------------------------------------------------- examples


def test_examples_load_and_attach(tmp_path):
    cat = load_catalog(write_json(tmp_path / "c.json", MCP_ZERO))
    ex = load_examples(write_jsonl(tmp_path / "ex.jsonl", [
        {"server": "Weather", "tool": "get_forecast", "examples": ["rain tomorrow in Oslo?", "forecast for Rome"]},
    ]))
    assert ex == {ToolId("Weather", "get_forecast"): ["rain tomorrow in Oslo?", "forecast for Rome"]}
    with_ex = cat.with_examples(ex)
    assert with_ex[ToolId("Weather", "get_forecast")].examples == ("rain tomorrow in Oslo?", "forecast for Rome")
    assert with_ex[ToolId("Weather", "get_alerts")].examples == ()
    assert cat[ToolId("Weather", "get_forecast")].examples == ()             # the original is untouched
    assert with_ex.without_examples()[ToolId("Weather", "get_forecast")].examples == ()


def test_examples_must_be_a_list_of_strings(tmp_path):
    path = write_jsonl(tmp_path / "ex.jsonl", [{"server": "A", "tool": "t", "examples": ["ok", 3]}])
    with pytest.raises(CatalogError, match=r"ex\.jsonl, line 1, server 'A', tool 't': 'examples' must be a list of strings"):
        load_examples(path)


def test_examples_missing_tool_field(tmp_path):
    path = write_jsonl(tmp_path / "ex.jsonl", [{"server": "A", "examples": []}])
    with pytest.raises(CatalogError, match=r"line 1: missing required field 'tool'"):
        load_examples(path)


def test_examples_duplicate(tmp_path):
    row = {"server": "A", "tool": "t", "examples": ["x"]}
    path = write_jsonl(tmp_path / "ex.jsonl", [row, row])
    with pytest.raises(CatalogError, match=r"line 2: duplicate examples for A / t"):
        load_examples(path)


def test_examples_invalid_json(tmp_path):
    path = tmp_path / "ex.jsonl"
    path.write_text('{"server": "A", "tool": "t", "examples": []}\n{oops\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"ex\.jsonl, line 2: invalid JSON"):
        load_examples(path)


def test_examples_for_unknown_tool(tmp_path):
    cat = load_catalog(write_json(tmp_path / "c.json", MCP_ZERO))
    with pytest.raises(CatalogError, match=r"1 example entries name tools not in the catalog, e.g. Weather / nope"):
        cat.with_examples({ToolId("Weather", "nope"): ["x"]})
    lenient = cat.with_examples({ToolId("Weather", "nope"): ["x"]}, strict=False)
    assert len(lenient) == len(cat)


# ---------------------------------------------------------------- tool records


def test_tool_round_trip_and_hash():
    tool = Tool("A", "t", "desc", {"type": "object"}, "server desc", ("ex one",))
    again = Tool.from_dict(json.loads(json.dumps(tool.to_dict())))
    assert again == tool
    assert again.input_schema == tool.input_schema
    assert again.content_hash() == tool.content_hash()
    assert Tool("A", "t", "desc 2", {"type": "object"}, "server desc", ("ex one",)).content_hash() != tool.content_hash()
    assert tool.with_examples(["ex two"]).content_hash() != tool.content_hash()


# ---------------------------------------------------------------- shipped data


def test_default_catalog():
    cat = load_default_catalog()
    assert len(cat.servers) == 308
    assert len(cat) == 2797
    assert all(len(t.examples) == 5 for t in cat)
    assert all(isinstance(t.description, str) for t in cat)
    assert len(load_default_catalog(with_examples=False)) == 2797


# ---------------------------------------------------------------- content rules (issue #14)


def test_jsonl_with_line_separators_inside_strings_loads(tmp_path):
    """str.splitlines() cut these records in two; JSON Lines split on "\\n" only."""
    rows = [{"server": "Docs", "name": "read", "description": "Read\u2028a\u2029page\u0085now",
             "inputSchema": {"type": "object", "description": "x\u2028y"}},
            {"server": "Docs", "name": "write", "description": "Write"}]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    cat = load_catalog(path)
    assert [t.description for t in cat] == ["Read\u2028a\u2029page\u0085now", "Write"]
    assert cat[ToolId("Docs", "read")].input_schema["description"] == "x\u2028y"
    ex = tmp_path / "e.jsonl"
    ex.write_text(json.dumps({"server": "Docs", "tool": "read", "examples": ["a\u2028b"]}, ensure_ascii=False) + "\n",
                  encoding="utf-8")
    assert load_examples(ex) == {ToolId("Docs", "read"): ["a\u2028b"]}


@pytest.mark.parametrize("server, tool, words", [
    ("Git\u202eHub", "t", "U+202E"),
    ("a\x00b", "t", "U+0000"),
    ("G\u0456tHub", "t", "mixes letters of the Cyrillic and Latin scripts"),
    ("GitHub", "line\nbreak", "U+000A"),
    ("GitHub", "\uff41pi", "compatibility form"),
])
def test_loaders_refuse_bad_names(tmp_path, server, tool, words):
    path = write_json(tmp_path / "c.json", {"server": {"name": server}, "tools": [{"name": tool}]})
    with pytest.raises(CatalogError, match=re.escape(words)):
        load_catalog(path)


def test_loaders_normalise_names_to_nfc(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"server": "Cafe\u0301", "name": "re\u0301sume\u0301"}) + "\n", encoding="utf-8")
    ex = tmp_path / "e.jsonl"
    ex.write_text(json.dumps({"server": "Cafe\u0301", "tool": "re\u0301sume\u0301", "examples": ["x"]}) + "\n")
    cat = load_catalog(path).with_examples(load_examples(ex))
    assert [t.id for t in cat] == [ToolId("Caf\u00e9", "r\u00e9sum\u00e9")] and cat.tools[0].examples == ("x",)
    assert cat.servers == ["Caf\u00e9"] and "Caf\u00e9" in cat.server_descriptions


@pytest.mark.parametrize("schema, words", [
    ({"a": float("nan")}, "not a JSON number"),
    ({"a": 2 ** 64}, "64 bits"),
    ({"\udc00": 1}, "lone surrogate"),
])
def test_loaders_refuse_schemas_that_cannot_round_trip(tmp_path, schema, words):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"server": "S", "name": "t", "inputSchema": schema}) + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=words):
        load_catalog(path)


def test_deep_catalog_files_are_a_catalog_error(tmp_path):
    from retrieval.catalog.rules import MAX_SCHEMA_DEPTH

    deep = '{"x": ' * (MAX_SCHEMA_DEPTH + 5) + "1" + "}" * (MAX_SCHEMA_DEPTH + 5)
    path = tmp_path / "c.jsonl"
    path.write_text('{"server": "S", "name": "t", "inputSchema": ' + deep + "}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=f"nested more than {MAX_SCHEMA_DEPTH} levels"):
        load_catalog(path)
    path = tmp_path / "c.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(CatalogError, match="nested too deeply"):
        load_catalog(path)


def test_lone_surrogates_in_texts_are_refused(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"server": "S", "name": "t", "description": "bad \\ud800"}\n', encoding="utf-8")
    with pytest.raises(CatalogError, match="lone surrogate"):
        load_catalog(path)


def test_a_catalog_file_without_tools_is_refused(tmp_path):
    from retrieval.catalog.formats import CatalogError, load_catalog, read_catalog

    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n\n"), ("empty.json", "[]")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(CatalogError, match="no tools in this file"):
            load_catalog(path)
        with pytest.raises(CatalogError, match="no tools in this file"):
            read_catalog(path)
        assert len(load_catalog(path, allow_empty=True)) == 0   # the service may start from no tools


def test_an_index_s_own_tools_file_loads_back_with_its_examples(tmp_path, caplog):
    import json as _json
    import logging

    from retrieval.catalog.formats import CatalogError, load_catalog

    path = tmp_path / "tools.jsonl"
    path.write_text(_json.dumps({"server": "a", "name": "t1", "description": "x", "examples": ["do x", " "]}) + "\n"
                    + _json.dumps({"server": "a", "name": "t2", "description": "y", "examples": []}) + "\n")
    with caplog.at_level(logging.WARNING, logger="retrieval.catalog.formats"):
        cat = load_catalog(path)
    assert [t.examples for t in cat.tools] == [("do x",), ()] and "fields not read" not in caplog.text
    for bad in ("do x", "", {}, 0, False, [1]):
        path.write_text(_json.dumps({"server": "a", "name": "t1", "examples": bad}) + "\n")
        with pytest.raises(CatalogError, match="'examples' must be a list of strings"):
            load_catalog(path)
    path.write_text('{"server": "a", "name": "t1", "examples": ["ok \\ud800"]}\n')   # a lone surrogate
    with pytest.raises(CatalogError, match=r"tool 't1', examples\[0\]"):
        load_catalog(path)


def test_a_field_the_jsonl_format_does_not_read_is_said(tmp_path, caplog):
    import json as _json
    import logging

    from retrieval.catalog.formats import load_catalog

    path = tmp_path / "t.jsonl"
    path.write_text(_json.dumps({"server": "a", "name": "t1", "desc": "the text"}) + "\n"
                    + _json.dumps({"server": "a", "name": "t2", "description": "ok"}) + "\n")
    with caplog.at_level(logging.WARNING, logger="retrieval.catalog.formats"):
        cat = load_catalog(path)
    assert len(cat) == 2
    assert "fields not read: 'desc' (line 1)" in caplog.text
    caplog.clear()
    path.write_text(_json.dumps({"server": "a", "name": "t2", "description": "ok"}) + "\n")
    with caplog.at_level(logging.WARNING, logger="retrieval.catalog.formats"):
        load_catalog(path)
    assert "fields not read" not in caplog.text
