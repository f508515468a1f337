"""Example requests written at index time (retrieval.index.examples, `toolrank index --write-examples`),
against the loopback fake endpoint of conftest.py."""

from __future__ import annotations

import json

import pytest

from retrieval.catalog.formats import load_catalog
from retrieval.catalog.model import Catalog, Tool
from retrieval.index.examples import load_cache, plan_examples, write_examples
from retrieval.writing.llm import ChatClient, LLMConfig


def client_of(llm, **kw):
    return ChatClient(LLMConfig(base_url=llm.url, model=llm.model, max_retries=0, backoff=0, **kw))


def test_writes_five_examples_per_tool_once_and_again_only_when_a_tool_changes(llm, tiny_catalog, tmp_path):
    cat = load_catalog(tiny_catalog)
    cache = tmp_path / "cache.jsonl"
    with client_of(llm) as client:
        out = write_examples(cat, client, cache)
    assert (out.written, out.cached, out.missing, out.error) == (4, 0, [], None)
    assert all(len(t.examples) == 5 for t in out.catalog)
    assert llm.arrivals == 4
    assert out.catalog[("Weather", "get_forecast")].examples[0] == "request 0 for get_forecast"

    with client_of(llm) as client:            # unchanged: nothing is asked again
        again = write_examples(cat, client, cache)
    assert llm.arrivals == 4 and (again.written, again.cached) == (0, 4)
    assert [t.examples for t in again.catalog] == [t.examples for t in out.catalog]

    changed = Catalog([Tool(t.server, t.name, t.description + (" (v2)" if t.name == "send_email" else ""),
                            t.input_schema, t.server_description) for t in cat])
    with client_of(llm) as client:
        third = write_examples(changed, client, cache)
    assert llm.arrivals == 5 and (third.written, third.cached) == (1, 3)
    assert len(load_cache(cache)) == 5     # the old version's row stays: switching back costs nothing


def test_tools_with_their_own_examples_are_left_alone(llm, tiny_catalog, tmp_path):
    cat = load_catalog(tiny_catalog)
    cat = cat.with_examples({("Mail", "send_email"): ["mail bob the report"]})
    plan = plan_examples(cat, tmp_path / "c.jsonl")
    assert (len(plan.todo), plan.own) == (3, 1)
    with client_of(llm) as client:
        out = write_examples(cat, client, tmp_path / "c.jsonl")
    assert out.catalog[("Mail", "send_email")].examples == ("mail bob the report",)
    assert llm.arrivals == 3


def test_a_failing_endpoint_leaves_the_tools_without_examples_and_says_so(llm, tiny_catalog, tmp_path):
    cat = load_catalog(tiny_catalog)
    llm.status = 401
    with client_of(llm) as client:
        out = write_examples(cat, client, tmp_path / "c.jsonl", concurrency=1)
    assert len(out.missing) == 4 and out.written == 0 and "401" in out.error
    assert all(not t.examples for t in out.catalog)
    assert "WITHOUT example requests" in out.format() and "rerun" in out.format()


def test_resumes_after_a_failure_half_way(llm, tiny_catalog, tmp_path):
    cat = load_catalog(tiny_catalog)
    cache = tmp_path / "c.jsonl"
    llm.bad_text = 100                      # every reply unusable: the run stops, nothing written
    with client_of(llm) as client:
        first = write_examples(cat, client, cache, concurrency=1, attempts=1)
    assert first.error and len(first.missing) == 4
    llm.bad_text = 0
    with client_of(llm) as client:
        second = write_examples(cat, client, cache, concurrency=1)
    assert second.missing == [] and second.written == 4


def test_dry_run_estimates_tokens_and_sends_nothing(llm, tiny_catalog, tmp_path, monkeypatch, capsys):
    from retrieval.cli import main

    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", llm.model)
    rc = main(["index", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "idx"), "--write-examples",
               "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and llm.arrivals == 0 and not (tmp_path / "idx").exists()
    assert "4 tool(s) need example requests" in out
    tokens = int(out.split("about ")[1].split(" prompt")[0].replace(",", ""))
    assert 4 * 100 < tokens < 4 * 5000


def test_cli_indexes_with_written_examples(llm, tiny_catalog, tmp_path, monkeypatch, capsys):
    from retrieval.cli import main
    from retrieval.index.embedded import ToolIndex

    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", llm.model)
    rc = main(["index", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "idx"), "--write-examples"])
    assert rc == 0, capsys.readouterr()
    index = ToolIndex.load(tmp_path / "idx")
    assert all(len(t.examples) == 5 for t in index.catalog)
    assert (tmp_path / "idx.examples.jsonl").exists()

    llm.status = 500                       # endpoint down, but everything is cached: still 0
    assert main(["index", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "idx"), "--write-examples"]) == 0


def test_cli_without_an_endpoint_says_what_to_set(tiny_catalog, tmp_path, monkeypatch, capsys):
    from retrieval.cli import main

    monkeypatch.delenv("TOOLRANK_LLM_BASE_URL", raising=False)
    rc = main(["index", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "idx"), "--write-examples"])
    assert rc == 2 and "TOOLRANK_LLM_BASE_URL" in capsys.readouterr().err
    assert main(["index", "--catalog", str(tiny_catalog), "--out", str(tmp_path / "i2"), "--dry-run"]) == 2
