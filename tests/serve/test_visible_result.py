"""The service's last filter (defence in depth): a tool the tenant may not see never leaves, and the best
probability is then the first remaining tool's, as the pipeline's order decides it."""

from __future__ import annotations

from types import SimpleNamespace

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import ToolId
from retrieval.pipeline.results import ScoredTool, SearchResult
from serve.routes.ranking import _visible_result
from serve.tenants import Tenant


def _snapshot():
    catalog = SimpleNamespace(servers=["A", "B"])
    return SimpleNamespace(catalog=catalog, pipeline=SimpleNamespace(public_index=None))


def test_a_hidden_tool_is_removed_and_the_first_visible_tool_decides():
    tools = [ScoredTool(ToolId("B", "hidden"), 0.9, 1), ScoredTool(ToolId("A", "read"), 0.4, 2),
             ScoredTool(ToolId("A", "tail"), 0.6, 3)]   # a tail tool after a read one may show more
    result = SearchResult("search_again", tools, 0.9, 1, message="names B")
    seen = _visible_result(result, Tenant("t", Eligibility.of(servers=["A"])), _snapshot())
    assert [t.tool_id.tool for t in seen.tools] == ["read", "tail"]
    assert seen.best_probability == 0.4 and "B" not in seen.message


def test_nothing_hidden_leaves_the_result_as_it_is():
    result = SearchResult("proceed", [ScoredTool(ToolId("A", "x"), 0.95, 1)], 0.95, 1)
    assert _visible_result(result, Tenant("t", Eligibility.of(servers=["A"])), _snapshot()) is result
