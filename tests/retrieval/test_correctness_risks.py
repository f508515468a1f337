"""Issue 22's correctness risks, each with a test that failed before the fix."""

from __future__ import annotations

import builtins
import json
import logging
import sys

import pytest

from retrieval.catalog.formats import load_catalog, read_catalog
from retrieval.catalog.model import CatalogError, Tool, ToolId
from retrieval.index import default as default_index
from retrieval.index.embedded import ToolIndex
from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.flow import Pipeline, load_pipeline
from retrieval.pipeline.tokens import TokenCounter

from fakes import FakeScorer, tiny_catalog

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit): the scorer is read
POLICY = Policy(proceed_threshold=0.5)
FORECAST = ToolId("Weather", "get_forecast")


class RacingIndex(ToolIndex):
    """Runs ``during_retrieve`` (a concurrent catalog update) just before or after retrieving."""

    during_retrieve = None
    after = True

    def retrieve(self, *args, **kwargs):
        hook, self.during_retrieve = self.during_retrieve, None
        if hook is not None and not self.after:
            hook()
        hits = super().retrieve(*args, **kwargs)
        if hook is not None and self.after:
            hook()
        return hits


@pytest.fixture
def racing(encoder):
    return RacingIndex.build(tiny_catalog(), encoder=encoder)


def pipeline(index, **kwargs):
    return Pipeline(index, FakeScorer({"get_forecast": 0.9}, 0.01), confidence=LOGIT, policy=POLICY, **kwargs)


# ------------------------------------------------------------------ one catalog snapshot per search


def test_a_server_removed_while_a_search_runs_does_not_break_it(racing):
    pipe = pipeline(racing)
    racing.during_retrieve = lambda: racing.remove_server("Weather")
    r = pipe.search("weather forecast for a city")       # before: KeyError reading the newer catalog
    assert r.tools[0].tool_id == FORECAST and r.decision == "proceed"
    assert pipe.search("weather forecast for a city").tools[0].tool_id.server != "Weather"


def test_a_server_added_while_a_search_runs_is_not_half_seen(racing):
    pipe = pipeline(racing)
    racing.after = False      # the update lands after the search took its snapshot, before retrieval
    racing.during_retrieve = lambda: racing.upsert_server("Forecasts", "Weather", [
        Tool("Forecasts", "get_forecast", "Weather forecast for a city, hourly")])
    r = pipe.search("weather forecast for a city")       # before: KeyError for a tool the snapshot lacks
    assert all(t.tool_id.server != "Forecasts" for t in r.tools)
    assert r.tokens.catalog == TokenCounter().total(tiny_catalog().tools)


# ------------------------------------------------------------------ the token cache knows the version


class UpdatingCounter(TokenCounter):
    """On its first catalog total, lets an update and another search happen (a slow request)."""

    hook = None

    def total(self, tools, fmt="mcp"):
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().total(tools, fmt)


def test_a_slow_request_does_not_leave_an_old_total_for_the_new_version(index):
    counter = UpdatingCounter()
    pipe = pipeline(index, token_counter=counter)
    note = Tool("Notes", "add_note", "Add a note with a title and body")

    def update_then_search():
        index.upsert_server("Notes", "Note taking", [note])
        pipe.search("post a message")                    # sees the new version, caches its total

    counter.hook = update_then_search
    pipe.search("post a message")                        # computed the old total, stored it last
    now = pipe.search("post a message").tokens.catalog
    assert now == TokenCounter().total(index.catalog.tools)   # before: the old version's total


# ------------------------------------------------------------------ no silent retrieval-only


def test_a_scorer_that_cannot_be_imported_is_an_error_not_a_silent_fallback(index, monkeypatch):
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "scorer":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.raises(ImportError, match=r"scorer cannot be imported \(No module named 'onnxruntime'\).*model_dir=False"):
        load_pipeline(index, public_suggestions=False)
    assert load_pipeline(index, model_dir=False, public_suggestions=False).scorer is None


# ------------------------------------------------------------------ the default index's cache key


def test_default_index_key_follows_the_encoder_files_and_the_bm25_libraries(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLRANK_CACHE", str(tmp_path))
    files, libraries = default_index._cache_key_inputs()
    assert {"model.onnx", "tokenizer.json", "config.json"} <= {p.name for p in files}
    assert [lib.split("==")[0] for lib in libraries] == ["bm25s", "PyStemmer"]
    before = default_index.default_index_path()
    real = default_index.metadata.version
    monkeypatch.setattr(default_index.metadata, "version",
                        lambda name: "0.0.1" if name == "PyStemmer" else real(name))
    assert default_index.default_index_path() != before

    encoder_dir = tmp_path / "enc"
    encoder_dir.mkdir()
    for p in files:
        if p.parent.name == "toolrank-encoder":
            (encoder_dir / p.name).write_bytes(p.read_bytes())
    monkeypatch.setattr(default_index.metadata, "version", real)
    monkeypatch.setattr(default_index, "default_encoder_path", lambda: encoder_dir)
    assert default_index.default_index_path() == before
    cfg = json.loads((encoder_dir / "config.json").read_text())
    (encoder_dir / "config.json").write_text(json.dumps({**cfg, "max_length": 7}))
    assert default_index.default_index_path() != before


# ------------------------------------------------------------------ catalog files written by others


def write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_surrounding_spaces_in_names_are_removed_when_loading_files(tmp_path):
    mcp_zero = write(tmp_path / "c.json", [{"name": "Morpheus Predictions ", "description": "d",
                                            "tools": [{"name": " predict ", "description": "x"}]}])
    wrapped = write(tmp_path / "w.json", {"server": {"name": " Notes"}, "tools": [{"name": "add_note "}]})
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"server": "Docs ", "name": " read"}) + "\n", encoding="utf-8")
    assert [t.id for t in load_catalog(mcp_zero)] == [ToolId("Morpheus Predictions", "predict")]
    assert load_catalog(mcp_zero).server_descriptions == {"Morpheus Predictions": "d"}
    assert [t.id for t in load_catalog(wrapped)] == [ToolId("Notes", "add_note")]
    assert [t.id for t in load_catalog(jsonl)] == [ToolId("Docs", "read")]


def test_read_catalog_leaves_out_bad_servers_and_says_why(tmp_path, caplog):
    path = write(tmp_path / "c.json", [
        {"name": "Good", "tools": [{"name": "ok", "description": "fine"}]},
        {"name": "Git\u202eHub", "tools": [{"name": "t"}]},
        {"name": "Broken", "tools": [{"name": "fine"}, {"description": "no name"}]},
        {"name": "Twice", "tools": [{"name": "t"}, {"name": "t"}]},
        {"name": "Also good", "tools": [{"name": "ok2"}]},
    ])
    with pytest.raises(CatalogError, match="server 'Broken', tools\\[1\\]: missing required field 'name'"):
        load_catalog(path)                                  # all or nothing stays available
    with caplog.at_level(logging.WARNING, logger="retrieval.catalog"):
        cat, skipped = read_catalog(path)
    assert cat.servers == ["Good", "Also good"] and len(cat) == 2
    reasons = dict(skipped)
    assert set(reasons) == {"Git\u202eHub", "Broken", "Twice"}
    assert "U+202E" in reasons["Git\u202eHub"]
    assert "missing required field 'name'" in reasons["Broken"]
    assert "duplicate (server, tool) pair" in reasons["Twice"]
    assert sum("left out" in r.message for r in caplog.records) == 3


def test_read_catalog_jsonl_skips_a_server_whose_line_is_bad(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"server": "A", "name": "one"}, {"server": "B", "name": "x"}, {"server": "A", "name": 5},
            {"server": "B", "name": "y"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cat, skipped = read_catalog(path)
    assert [t.id for t in cat] == [ToolId("B", "x"), ToolId("B", "y")]
    assert [s.server for s in skipped] == ["A"] and "line 3" in skipped[0].reason


def test_read_catalog_still_refuses_an_unreadable_file_or_nothing_loadable(tmp_path):
    with pytest.raises(CatalogError, match="file not found"):
        read_catalog(tmp_path / "nope.json")
    bad = write(tmp_path / "bad.json", [{"name": "A", "tools": "none"}])
    with pytest.raises(CatalogError, match="no server could be loaded.*'tools' must be a list"):
        read_catalog(bad)
