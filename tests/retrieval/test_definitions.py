from __future__ import annotations

import pytest

from retrieval.catalog.formats import load_default_catalog
from retrieval.catalog.model import Tool, ToolId
from retrieval.pipeline.definitions import (NAME_RE, DefinitionSet, build_definitions, definition, function_name,
                                            to_anthropic, to_mcp, to_openai)

SCHEMA = {"type": "object", "properties": {"dag_id": {"type": "string"}}, "required": ["dag_id"]}
DAGS = Tool("Airflow", "List DAGs", "List all DAGs.", SCHEMA)
BARE = Tool("Time", "get_current_time", "Current time.", None)


def test_mcp_shape():
    assert to_mcp(DAGS) == {"name": "List DAGs", "description": "List all DAGs.", "inputSchema": SCHEMA}
    assert to_mcp(BARE)["inputSchema"] == {"type": "object", "properties": {}}


def test_openai_and_anthropic_shapes():
    assert to_openai(DAGS) == {"type": "function", "function": {
        "name": "Airflow__List_DAGs", "description": "List all DAGs.", "parameters": SCHEMA}}
    assert to_anthropic(BARE) == {"name": "Time__get_current_time", "description": "Current time.",
                                  "input_schema": {"type": "object", "properties": {}}}


def test_definition_dispatch_and_unknown_format():
    assert definition(DAGS, "mcp") == to_mcp(DAGS)
    assert definition(DAGS, "openai") == to_openai(DAGS)
    assert definition(DAGS, "anthropic") == to_anthropic(DAGS)
    with pytest.raises(ValueError, match="unknown definition format 'gemini': use one of mcp, openai, anthropic"):
        definition(DAGS, "gemini")  # type: ignore[arg-type]


def test_schema_is_a_copy():
    d = to_mcp(DAGS)
    d["inputSchema"]["properties"]["x"] = {}
    assert "x" not in DAGS.input_schema["properties"]


def test_schema_without_type_gets_object():
    tool = Tool("S", "t", "", {"properties": {"a": {"type": "string"}}})
    assert to_openai(tool)["function"]["parameters"]["type"] == "object"


@pytest.mark.parametrize(("tool_id", "expected"), [
    (("Airflow", "List DAGs"), "Airflow__List_DAGs"),
    (("Slack - nourl", "slack_list_channels"), "Slack-nourl__slack_list_channels"),
    (("Arize Phoenix", "@arizeai/phoenix-client"), "Arize_Phoenix__arizeai_phoenix-client"),
    (("Azure", "List, create, and get keys"), "Azure__List_create_and_get_keys"),
])
def test_function_name(tool_id, expected):
    assert function_name(tool_id) == expected


def test_long_names_are_cut_with_a_hash():
    long_id = ("Open Strategy Partners Marketing Tools", "Support for template discovery, template initialization")
    other = ("Open Strategy Partners Marketing Tools", "Support for template discovery, template initialization 2")
    a, b = function_name(long_id), function_name(other)
    assert len(a) == 64 and NAME_RE.match(a) and a != b
    assert a == function_name(long_id)                   # deterministic
    assert function_name(("日本", "検索")) != function_name(("中国", "検索"))   # nothing usable left


def test_build_definitions_unique_names_and_mapping():
    # two tools whose sanitised names collide
    t1 = Tool("My Server", "do it", "one")
    t2 = Tool("My_Server", "do_it", "two")
    for fmt in ("openai", "anthropic"):
        ds = build_definitions([t1, t2, DAGS], fmt)
        assert len(set(ds.names)) == 3 and all(NAME_RE.match(n) for n in ds.names)
        assert ds.tool_id(ds.names[0]) == t1.id and ds.tool_id(ds.names[1]) == t2.id
        assert ds.names[2] == "Airflow__List_DAGs"
        # order does not change anyone's name
        assert build_definitions([t2, t1, DAGS], fmt).by_name() == ds.by_name()
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        ds.tool_id("nope")


def test_build_definitions_mcp_keeps_tool_names():
    ds = build_definitions([DAGS, BARE], "mcp")
    assert isinstance(ds, DefinitionSet) and len(ds) == 2
    assert ds.names == ("List DAGs", "get_current_time")
    assert list(ds) == [(DAGS.id, to_mcp(DAGS)), (BARE.id, to_mcp(BARE))]
    assert ds.tool_ids == (ToolId("Airflow", "List DAGs"), ToolId("Time", "get_current_time"))


def test_build_definitions_errors_and_empty():
    with pytest.raises(ValueError, match="appears twice"):
        build_definitions([DAGS, DAGS], "openai")
    with pytest.raises(ValueError, match="unknown definition format"):
        build_definitions([DAGS], "xml")  # type: ignore[arg-type]
    assert len(build_definitions([], "openai")) == 0


def test_whole_catalog_is_valid_for_openai():
    catalog = load_default_catalog(with_examples=False)
    ds = build_definitions(catalog.tools, "openai")
    assert len(set(ds.names)) == len(catalog)
    assert all(NAME_RE.match(n) for n in ds.names)
    assert all(d["function"]["parameters"]["type"] == "object" for d in ds.definitions)
