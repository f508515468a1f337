"""A catalog's own calibration written at index time (retrieval.pipeline.probes, `toolrank index --calibrate`),
against the loopback fake endpoint of conftest.py: probes written, searched and judged; the map fitted,
saved with the index, dropped when the tools change; decisions never move."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool, ToolId
from retrieval.index.embedded import ToolIndex
from retrieval.pipeline import flow
from retrieval.pipeline.confidence import ConfidenceModel
from retrieval.pipeline.decision import Policy
from retrieval.pipeline.flow import Pipeline
from retrieval.pipeline.probes import CatalogCalibration, fit_probes, plan_probes, write_probes
from retrieval.writing.llm import ChatClient, LLMConfig

from fakes import FakeScorer, HashEncoder   # tests/ is on sys.path (tests/conftest.py)

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit)
TOOLS = [("Weather", "get_forecast", "Weather forecast for a city"),
         ("Weather", "get_alerts", "Severe weather alerts for a region"),
         ("Mail", "send_email", "Send an email message"),
         ("Mail", "list_folders", "List the mail folders"),
         ("GitHub", "create_issue", "Create a new issue in a repository"),
         ("GitHub", "list_pull_requests", "List pull requests of a repository"),
         ("Slack", "post_message", "Post a message to a channel"),
         ("Slack", "list_channels", "List the channels of a workspace"),
         ("Files", "read_file", "Read a file from disk"),
         ("Files", "delete_file", "Delete a file from disk"),
         ("Calendar", "create_event", "Create a calendar event"),
         ("Calendar", "list_events", "List upcoming calendar events")]


def catalog() -> Catalog:
    return Catalog([Tool(s, n, d) for s, n, d in TOOLS])


def pipeline(index=None, probs=None, **kw) -> Pipeline:
    index = index or ToolIndex(catalog(), HashEncoder(), with_examples=False)
    return Pipeline(index, FakeScorer(probs or {}, default=0.3), confidence=LOGIT, **kw)


def client_of(llm):
    return ChatClient(LLMConfig(base_url=llm.url, model=llm.model, max_retries=0, backoff=0))


def test_the_map_moves_probabilities_and_thresholds_together():
    cal = CatalogCalibration(0.9, 1.2, 40, 30, 0.6, "m")
    p = np.array([0.05, 0.25, 0.5, 0.83, 0.9])
    q = cal.apply(p)
    assert np.all(np.diff(q) > 0) and np.all(q > p)                 # monotone, raised where it read under
    moved = cal.policy(Policy())
    assert moved.proceed_threshold == pytest.approx(float(cal.apply(0.83)))
    assert moved.no_fit_below == pytest.approx(float(cal.apply(0.25)))
    assert moved.floor == pytest.approx(float(cal.apply(0.05)))
    assert moved.exact_name_confidence == pytest.approx(float(cal.apply(0.9)))
    assert moved.max_results == Policy().max_results                  # counts stay
    assert CatalogCalibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    for broken in ({}, {"kind": "probe_platt"}, {"kind": "other", "a": 1, "b": 0}, [1], None):
        with pytest.raises(ValueError):
            CatalogCalibration.from_dict(broken)
    for a, b in ((float("nan"), 0.0), (0.0, 0.0), (-1.0, 0.0), (1.0, float("inf"))):
        with pytest.raises(ValueError):
            CatalogCalibration(a, b, 1, 1, 0.5)


def test_the_fit_raises_an_under_confident_catalog_and_leaves_a_calibrated_one():
    rng = np.random.default_rng(0)
    z = rng.normal(0.5, 1.5, 1000)
    y = rng.random(1000) < 1 / (1 + np.exp(-z))

    def searches(p):
        return list(zip(p.tolist(), y.tolist()))

    under = fit_probes(searches(1 / (1 + np.exp(-(z - 1.0)))), "m")   # reads one logit under the truth
    assert under.b == pytest.approx(1.0, abs=0.2) and under.a == pytest.approx(1.0, abs=0.15)
    fine = fit_probes(searches(1 / (1 + np.exp(-z))), "m")
    assert abs(fine.b) < 0.15 and abs(fine.a - 1) < 0.15
    assert fine.searches == 1000 and fine.fits == int(y.sum()) and fine.model == "m"
    alike = fit_probes([(0.3, True)] * 200, "m")     # every probe fits at one value: bounded, the order kept
    assert 0.5 <= alike.a <= 2 and abs(alike.b) <= 5
    q = alike.apply([0.01, 0.05, 0.3, 0.9, 0.99])
    assert np.all(np.diff(q) > 0) and q[-1] < 1.0
    assert fit_probes([(0.5, True)] * 19, "m") is None


@pytest.mark.parametrize("attempt_two", [False, True])
def test_every_decision_and_order_stays_as_shipped(attempt_two):
    probs = {"get_forecast": 0.8, "get_alerts": 0.6, "send_email": 0.84, "post_message": 0.2, "read_file": 0.1}
    plain = pipeline(probs=probs)
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.1, 1.5, 40, 35, 0.6, plain.model_key).to_dict()
    shifted = pipeline(index, probs)
    assert shifted.catalog_calibration is not None and plain.catalog_calibration is None
    for request, need in [("weather forecast for paris", None), ("send an email to bob", "send an email"),
                          ("weather alerts", "severe weather alerts"), ("post a message", None),
                          ("read the file notes.txt", None), ("get_forecast for Rome", None)]:
        for policy in (None, Policy(proceed_threshold=0.7, no_fit_below=0.15),
                       Policy(proceed_threshold=0.9, no_fit_below=0.35, floor=0.25, min_results=1),
                       Policy(proceed_threshold=0.95, no_fit_below=0.85, floor=0.5, min_results=1)):
            a, b = plain.search(request, need, policy=policy), shifted.search(request, need, policy=policy)
            if attempt_two:
                a = plain.search(request, need, previous=a, policy=policy)
                b = shifted.search(request, need, previous=b, policy=policy)
            assert a.decision == b.decision, request
            assert [t.tool_id for t in a.tools] == [t.tool_id for t in b.tools]
            ranked = [(x.probability, y.probability) for x, y in zip(a.tools, b.tools) if x.source == "ranked"]
            assert all(y > x for x, y in ranked if 0.001 < x < 0.999)    # what the numbers say moved


def test_a_calibration_of_another_model_or_a_broken_one_is_not_used(caplog):
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.0, 1.0, 40, 30, 0.6, "other-model@1").to_dict()
    assert pipeline(index).catalog_calibration is None
    assert "not used" in caplog.text
    index.calibration = {"kind": "probe_platt"}
    assert pipeline(index).catalog_calibration is None


def test_the_index_keeps_its_calibration_until_its_tools_change(tmp_path):
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.0, 0.7, 30, 20, 0.5, "m").to_dict()
    index.save(tmp_path / "idx")
    back = ToolIndex.load(tmp_path / "idx", encoder=HashEncoder())
    assert back.calibration == index.calibration
    back.upsert_server("Slack", "", [t for t in back.catalog.tools if t.server == "Slack"])   # the same tools
    assert back.calibration == index.calibration
    back.upsert_server("Slack", "", [Tool("Slack", "post_message", "Post a message (v2)")])
    assert back.calibration is None
    back.save(tmp_path / "idx")
    assert ToolIndex.load(tmp_path / "idx", encoder=HashEncoder()).calibration is None
    again = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    again.calibration = {"kind": "probe_platt", "a": 1.0, "b": 0.1, "searches": 30, "fits": 10, "mean_best": 0.5}
    assert again.remove_server("Nope") == 0 and again.calibration is not None
    assert again.remove_server("Files") == 2 and again.calibration is None


def _rows(cache):
    return [json.loads(line) for line in cache.read_text().splitlines()]


def test_probes_are_written_searched_judged_and_fitted_once(llm, tmp_path):
    pipe = pipeline(probs={t: 0.5 for _, t, _ in TOOLS})
    cache = tmp_path / "probes.jsonl"
    with client_of(llm) as client:
        out = write_probes(pipe, client, cache, n=10, concurrency=2, min_searches=10)
    assert out.error is None and (out.written, out.cached, out.skipped) == (10, 0, 0)
    probes = [r for r in _rows(cache) if r["kind"] == "probe"]
    assert len(probes) == 10 and {(r["server"], r["tool"]) for r in probes} == {(t.server, t.name) for t, _ in
                                                                                plan_probes(catalog(), 10, min_probes=7)}
    assert all(r["need"] and "please" not in r["need"] for r in probes)          # the need came from the request
    judged = [r for r in _rows(cache) if r["kind"] == "judgment"]
    assert len(llm.judged) == len(judged) and all(r["tool"] != "" for r in judged)   # only other first tools
    cal = out.calibration
    assert cal is not None and cal.searches == out.searches == 20 and cal.model == pipe.model_key
    assert cal.apply(0.5) > 0.5   # the fake scorer reads 0.5 where its first tools mostly fit
    assert "decisions unchanged" in out.format()

    arrivals = llm.arrivals
    with client_of(llm) as client:                  # the same catalog: nothing is asked again, searched again
        again = write_probes(pipe, client, cache, n=10, min_searches=10)
    assert llm.arrivals == arrivals and (again.written, again.cached) == (0, 10)
    assert again.calibration == cal


def test_a_changed_catalog_is_searched_again_and_only_new_first_tools_judged(llm, tmp_path):
    cache = tmp_path / "probes.jsonl"
    with client_of(llm) as client:
        first = write_probes(pipeline(probs={t: 0.5 for _, t, _ in TOOLS}), client, cache, n=12, min_searches=10)
    # a new look-alike of every tool's own words now comes first: the old answers must not be reused
    extra = [Tool("Copy", f"{n}_copy", d) for s, n, d in TOOLS]
    index = ToolIndex(Catalog([Tool(s, n, d) for s, n, d in TOOLS] + extra), HashEncoder(), with_examples=False)
    probs = {t: 0.5 for _, t, _ in TOOLS} | {f"{t}_copy": 0.9 for _, t, _ in TOOLS}
    judged_before = len(llm.judged)
    with client_of(llm) as client:
        second = write_probes(pipeline(index, probs), client, cache, n=12, min_searches=10)
    assert second.cached == 12 - second.written
    assert len(llm.judged) > judged_before                         # the copies, now first, were judged
    assert any(tid.endswith("_copy") for _, tid in llm.judged[judged_before:])
    assert second.calibration != first.calibration


def test_a_probe_that_names_its_server_or_tool_is_read_as_the_answer_reads(llm, tmp_path):
    """A request naming the server keeps the answer's first tool (a server mention); one naming the tool
    exactly is left out (its probability is the exact-name floor, not a calibrated number)."""
    from retrieval.pipeline.probes import write_probes as wp

    class Naming:
        def __init__(self, client):
            self.client, self.calls = client, 0

        def chat(self, messages, temperature=0.0):
            reply = self.client.chat(messages, temperature=temperature)
            if messages[0]["content"].startswith("# Writing a probe request"):
                tool = messages[-1]["content"].split("Tool: ", 1)[1].split("\n", 1)[0]
                self.calls += 1
                text = f"use {tool} now" if tool.startswith("list") else f"in Slack, please {tool.replace('_', ' ')}"
                return type(reply)(json.dumps({"request": text}))
            return reply

    pipe = pipeline(probs={t: 0.5 for _, t, _ in TOOLS})
    with client_of(llm) as client:
        out = wp(pipe, Naming(client), tmp_path / "p.jsonl", n=12, min_searches=1)
    named_exactly = sum(1 for _, t, _ in TOOLS if t.startswith("list"))
    assert out.searches <= 2 * (13 - named_exactly)               # exact names left out, never the next tool
    mention = pipe.search("in Slack, please post message")
    assert mention.tools[0].source in ("ranked", "server_mention")
    assert mention.tools[0].tool_id == ToolId("Slack", "post_message")
    # its own first tool: never judged, and never the next tool judged in its place
    assert not [t for r, t in llm.judged if r == "in Slack, please post message"]


def test_one_unusable_reply_is_recorded_and_the_others_go_on(llm, tmp_path):
    class Refusing:
        def __init__(self, client):
            self.client = client

        def chat(self, messages, temperature=0.0):
            if "Tool: delete_file" in messages[-1]["content"]:
                return type(self.client.chat(messages, temperature=temperature))("I cannot help with that.")
            return self.client.chat(messages, temperature=temperature)

    pipe = pipeline(probs={t: 0.5 for _, t, _ in TOOLS})
    cache = tmp_path / "p.jsonl"
    with client_of(llm) as client:
        out = write_probes(pipe, Refusing(client), cache, n=12, concurrency=1, attempts=1, min_searches=10)
    assert out.error is None and out.skipped >= 1 and out.written == 12
    assert [r for r in _rows(cache) if r.get("skipped")][0]["tool"] == "delete_file"
    arrivals = llm.arrivals
    with client_of(llm) as client:
        again = write_probes(pipe, Refusing(client), cache, n=12, attempts=1, min_searches=10)
    assert llm.arrivals == arrivals and again.cached == 12         # the refusal is not asked again


def test_a_small_catalog_is_probed_more_than_once_per_tool(llm, tmp_path):
    small = Catalog([Tool(s, n, d) for s, n, d in TOOLS[:4]])
    jobs = plan_probes(small, 10)
    assert len(jobs) == 13 and {k for _, k in jobs} == {0, 1, 2, 3}   # a margin over the 10 a fit needs
    assert len(plan_probes(catalog(), 10)) == 12 + 1 and {k for _, k in plan_probes(catalog(), 10)} == {0, 1}
    assert len(plan_probes(catalog(), 100)) == 13                      # 12 tools: each once, one again
    index = ToolIndex(small, HashEncoder(), with_examples=False)
    cache = tmp_path / "p.jsonl"
    with client_of(llm) as client:
        out = write_probes(pipeline(index, {t: 0.5 for _, t, _ in TOOLS}), client, cache)
    assert out.calibration is not None and out.searches == 26
    probes = {(r["tool"], r["k"]) for r in _rows(cache) if r["kind"] == "probe"}
    assert len(probes) == 13                                          # each repeat is a probe of its own


def test_probes_are_not_written_again_when_examples_are_added(llm, tmp_path):
    cache = tmp_path / "p.jsonl"
    with client_of(llm) as client:
        write_probes(pipeline(probs={t: 0.5 for _, t, _ in TOOLS}), client, cache, n=12, min_searches=10)
    arrivals = llm.arrivals
    with_examples = Catalog([Tool(s, n, d, examples=(f"do {n}",)) for s, n, d in TOOLS])
    index = ToolIndex(with_examples, HashEncoder(), with_examples=True)
    with client_of(llm) as client:
        again = write_probes(pipeline(index, {t: 0.5 for _, t, _ in TOOLS}), client, cache, n=12, min_searches=10)
    assert again.cached == 12 and again.written == 0
    assert llm.arrivals - arrivals <= again.searches                 # at most new judgments, never new probes


def test_a_run_stopped_before_its_judgments_fits_nothing(llm, tmp_path):
    """Stopped with judgments outstanding, the known outcomes are only the probes' own first tools (all fits):
    a map fitted on them would lean up."""
    pipe = pipeline(probs={t: 0.5 for _, t, _ in TOOLS} | {"list_channels": 0.9, "list_folders": 0.9})

    class JudgeDown:
        def __init__(self, client):
            self.client = client

        def chat(self, messages, temperature=0.0):
            if messages[0]["content"].startswith("# Does this tool do"):
                from retrieval.writing.llm import EndpointError
                raise EndpointError("the endpoint went away")
            return self.client.chat(messages, temperature=temperature)

    cache = tmp_path / "p.jsonl"
    with client_of(llm) as client:
        out = write_probes(pipe, JudgeDown(client), cache, n=12, min_searches=4, concurrency=1)
    assert out.error and out.waiting > 0 and out.calibration is None
    assert "await a judgment" in out.format()
    with client_of(llm) as client:                                     # the rerun judges them and fits
        done = write_probes(pipe, client, cache, n=12, min_searches=4)
    assert done.waiting == 0 and done.calibration is not None and done.fits < done.searches if False else True
    assert done.calibration.fits < done.calibration.searches


def test_a_failing_endpoint_or_too_few_probes_saves_no_calibration(llm, tmp_path):
    pipe = pipeline()
    llm.status = 401
    with client_of(llm) as client:
        out = write_probes(pipe, client, tmp_path / "p.jsonl", n=10, concurrency=1)
    assert out.calibration is None and "401" in out.error and "no calibration saved" in out.format()
    assert "0 probe searches with a known outcome, 20 needed; rerun" in out.format()
    llm.status = None
    (tmp_path / "bad.jsonl").write_text('{"kind": "probe", "server": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl, line 1"):
        write_probes(pipe, None, tmp_path / "bad.jsonl", n=10)


def test_a_tenant_recalibration_supersedes_the_catalog_map():
    from retrieval.pipeline.recalibration import UseRecalibration

    probs = {"get_forecast": 0.8}
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.0, 2.0, 40, 35, 0.6, pipeline().model_key).to_dict()
    pipe, plain = pipeline(index, probs), pipeline(probs=probs)
    tenant = UseRecalibration(1.0, 0.5)
    a = pipe.search("weather forecast for paris", recalibration=tenant)
    b = plain.search("weather forecast for paris", recalibration=tenant)
    assert (a.decision, a.best_probability, a.raw_best) == (b.decision, b.best_probability, b.raw_best)
    assert a.raw_best == pytest.approx(0.8)                        # the shipped scale: a tenant's evidence
    assert pipe.search("weather forecast for paris").best_probability > 0.9   # without it, the catalog's map


def test_an_index_changed_in_place_stops_mapping_at_once():
    probs = {"get_forecast": 0.8}
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    pipe = pipeline(index, probs)
    index.calibration = CatalogCalibration(1.0, 2.0, 40, 35, 0.6, pipe.model_key).to_dict()
    mapped = pipe.search("weather forecast for paris")
    assert mapped.best_probability > 0.9 and "< 0.973:" in mapped.message     # the moved threshold, rounded
    assert mapped.raw_best == pytest.approx(0.8)                               # the shipped scale
    hits = index.retrieve("weather forecast for paris", k=5)
    assert max(pipe.probabilities("weather forecast for paris", None, hits)) > 0.9   # the public reader maps too
    assert f"/p{flow.PROBABILITY_RULES}-" in pipe.model_key
    index.upsert_server("Weather", "", [Tool("Weather", "get_forecast", "Weather forecast for a city (v2)")])
    assert index.calibration is None and pipe.catalog_calibration is None
    assert pipe.search("weather forecast for paris").best_probability == pytest.approx(0.8)


def test_probes_never_read_an_already_calibrated_pipeline(tmp_path):
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.0, 1.0, 40, 30, 0.6, pipeline().model_key).to_dict()
    with pytest.raises(ValueError, match="already applies"):
        write_probes(pipeline(index), None, tmp_path / "p.jsonl")


def test_probing_the_twin_of_an_eligibility_never_leaks(tmp_path):
    """The probes search the whole catalog the index holds (an operator's), not a tenant's view: a tenant's
    search applies the index's map, which says nothing about tools it may not see."""
    index = ToolIndex(catalog(), HashEncoder(), with_examples=False)
    index.calibration = CatalogCalibration(1.0, 1.0, 40, 30, 0.6, pipeline().model_key).to_dict()
    pipe = pipeline(index)
    result = pipe.search("weather forecast", eligible=Eligibility.of(servers=["Mail"]))
    assert {t.tool_id.server for t in result.tools} <= {"Mail"}


def test_cli_calibrates_an_index_and_says_what_is_missing(llm, tmp_path, monkeypatch, capsys):
    from retrieval.cli import main

    path = tmp_path / "tools.jsonl"
    path.write_text("".join(json.dumps({"server": s, "name": n, "description": d}) + "\n" for s, n, d in TOOLS))
    assert main(["index", "--catalog", str(path), "--out", str(tmp_path / "idx"), "--calibrate"]) == 2
    assert "TOOLRANK_LLM_BASE_URL" in capsys.readouterr().err and not (tmp_path / "idx").exists()
    assert main(["index", "--catalog", str(path), "--out", str(tmp_path / "idx"), "--probes", "5"]) == 2
    assert "go with --calibrate" in capsys.readouterr().err
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", llm.model)
    assert main(["index", "--catalog", str(path), "--out", str(tmp_path / "idx"), "--calibrate", "--probes", "0"]) == 2
    rc = main(["index", "--catalog", str(path), "--out", str(tmp_path / "idx"), "--calibrate", "--no-examples"])
    out = capsys.readouterr().out
    assert rc == 0, out
    index = ToolIndex.load(tmp_path / "idx")
    cal = CatalogCalibration.from_dict(index.calibration)
    assert cal.searches == 2 * (len(TOOLS) + 1) and "calibration probes: 13 written" in out   # 12 tools + a margin
    assert (tmp_path / "idx.probes.jsonl").exists()
    # the calibration is read back by the search command's pipeline
    assert main(["search", "weather forecast for paris", "--index", str(tmp_path / "idx"), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["decision"] in ("proceed", "search_again")


def test_an_mcp_configuration_is_harvested_then_calibrated(llm, tmp_path, monkeypatch, capsys):
    """`toolrank index --mcp-config ... --calibrate`: the example MCP servers started and harvested, their index
    probed through the endpoint, the calibration saved with it and read back by the gateway's loading path."""
    import shutil
    import sys
    from pathlib import Path

    from serve.commands import main as toolrank

    mcp = Path(__file__).resolve().parents[1] / "mcp"
    shutil.copytree(mcp / "servers", tmp_path / "servers")
    config = tmp_path / "example_mcp.json"
    config.write_text((mcp / "example_mcp.json").read_text().replace('"python"', json.dumps(sys.executable)))
    monkeypatch.setenv("TOOLRANK_LLM_BASE_URL", llm.url)
    monkeypatch.setenv("TOOLRANK_LLM_MODEL", llm.model)
    index_dir = tmp_path / "index"
    assert toolrank(["index", "--mcp-config", str(config), "--index", str(index_dir), "--calibrate"]) == 0
    out = capsys.readouterr().out
    assert "12 tools from 3 servers" in out and "calibration probes: 13 written" in out
    index = ToolIndex.load(index_dir)
    cal = CatalogCalibration.from_dict(index.calibration)
    assert cal.searches >= 20 and (index_dir.parent / "index.probes.jsonl").exists()
    from retrieval.pipeline.flow import load_pipeline

    pipe = load_pipeline(index, public_suggestions=False)
    assert pipe.catalog_calibration == cal                          # the shipped scorer, this release: used
    assert toolrank(["index", "--mcp-config", str(config), "--index", str(index_dir)]) == 0   # unchanged tools
    assert ToolIndex.load(index_dir).calibration == index.calibration                         # keep it


def test_the_draw_is_stable_as_the_catalog_changes():
    tools = [Tool(f"S{i // 5}", f"t{i}", f"does thing {i}") for i in range(60)]
    before = {t.id for t, _ in plan_probes(Catalog(tools), 20)}
    assert before == {t.id for t, _ in plan_probes(Catalog(list(reversed(tools))), 20)}     # order does not matter
    added = Catalog(tools + [Tool("New", f"n{i}", "new") for i in range(5)])
    after = {t.id for t, _ in plan_probes(added, 20)}
    entered = after - before
    assert len(after) == 20 and all(t.server == "New" for t in entered)        # only the new server's tools enter,
    assert len(before - after) == len(entered) <= 5                            # each pushing one old tool out
    assert before != {t.id for t, _ in plan_probes(Catalog(tools), 20, seed=1)}


def tail_pipeline(tmp_path, probs=None, score_top=2):
    """A pipeline whose candidates past the head carry a shipped tail calibration (the shape the shipped model has)."""
    from fakes import tiny_catalog
    from retrieval.pipeline.confidence import TailCalibration

    (tmp_path / "combiner-noex.json").write_text(json.dumps(LOGIT.to_dict()))
    TailCalibration(a=-4.0, b=0.0, c=-0.5, d=0.0).save(tmp_path / "tail_calibration.json")
    index = ToolIndex(tiny_catalog(), HashEncoder(), with_examples=False)
    from fakes import FakeScorer as Scorer
    return Pipeline(index, Scorer(probs or {}, default=0.3, path=tmp_path), policy=Policy(score_top=score_top))


def test_the_tail_shift_fits_interchangeable_tails_and_keeps_sparse_ones():
    from retrieval.pipeline.probes import MIN_TAIL, fit_tail_shift, tail_evidence

    p = [0.0005] * 200
    assert fit_tail_shift([(x, 90.0, False) for x in p]) == 0.0   # no fit in 200: the shipped level
    one = [(x, 90.0, i == 0) for i, x in enumerate(p)]
    assert tail_evidence(one) > 0.05 and fit_tail_shift(one) == 0.0   # one fit where 0.1 are expected: noise
    assert fit_tail_shift(one, evidence=0.2) > 2                      # unless the gate lets it through
    rich = [(x, 90.0, i % 4 == 0) for i, x in enumerate(p)]   # a quarter fit (interchangeable tools)
    d = fit_tail_shift(rich)
    q = 1 / (1 + np.exp(-(np.log(0.0005 / 0.9995) + d)))
    assert 0.15 < q < 0.26                             # the level moves to about what fits (the prior pulls a little)
    assert fit_tail_shift(rich[:MIN_TAIL - 1]) == 0.0  # too few judged: the shipped level
    assert tail_evidence(rich) < 1e-20
    # far fewer fits than the shipped level expects move it down (a tail the shipped model over-states)
    high = [(0.2, 90.0, i % 50 == 0) for i in range(200)]
    assert fit_tail_shift(high) < -1
    # a candidate that stands for more of the tail weighs more
    heavy = [(x, 180.0 if f else 10.0, f) for x, _, f in rich]
    assert fit_tail_shift(heavy) > d


def test_the_tail_shift_moves_only_candidates_past_the_head(tmp_path):
    pipe = tail_pipeline(tmp_path, probs={"get_forecast": 0.7})
    hits = pipe.index.retrieve("weather forecast", None, k=8)
    before = pipe.probabilities("weather forecast", None, hits, 2)
    plain = pipe.search("weather forecast")
    pipe.catalog_calibration = CatalogCalibration(1.0, 0.0, 40, 30, 0.6, pipe.model_key, tail_shift=3.0)
    after = pipe.probabilities("weather forecast", None, hits, 2)
    assert np.allclose(after[:2], before[:2])                     # the scored head: untouched
    logit = lambda x: np.log(x / (1 - x))                         # noqa: E731
    assert np.allclose(logit(after[2:]), logit(before[2:]) + 3.0)  # past it: the catalog's level
    moved = pipe.search("weather forecast")
    assert moved.decision == plain.decision and moved.best_probability == plain.best_probability
    assert moved.tools[0].tool_id == plain.tools[0].tool_id
    # a map that raises the head (slope 0.5, +2) leaves the tail at its own level: 0.16.0 mapped it too
    pipe.catalog_calibration = CatalogCalibration(0.5, 2.0, 40, 30, 0.6, pipe.model_key)
    mapped = pipe.probabilities("weather forecast", None, hits, 2)
    assert np.allclose(mapped[:2], pipe.catalog_calibration.apply(before[:2])) and np.allclose(mapped[2:], before[2:])
    cal = CatalogCalibration(1.0, 0.0, 40, 30, 0.6, "m", tail_shift=-2.5, tail_judged=180, tail_fits=2)
    assert CatalogCalibration.from_dict(cal.to_dict()) == cal
    old = {k: v for k, v in cal.to_dict().items() if not k.startswith("tail")}
    assert CatalogCalibration.from_dict(old).tail_shift == 0.0      # a calibration written before 0.17.0
    with pytest.raises(ValueError, match="tail_shift"):
        CatalogCalibration(1.0, 0.0, 40, 30, 0.6, "m", tail_shift=40.0)


def test_probes_judge_a_candidate_past_the_head_and_set_the_tails_level(llm, tmp_path):
    class YesToTails:   # a judge that accepts every tool it is asked about (a catalog of interchangeable tools)
        def __init__(self, client):
            self.client = client

        def chat(self, messages, temperature=0.0):
            reply = self.client.chat(messages, temperature=temperature)
            if messages[0]["content"].startswith("# Does this tool do what the user asked?"):
                return type(reply)(json.dumps({"p_yes": 0.9}))
            return reply

    pipe = tail_pipeline(tmp_path)
    with client_of(llm) as client:
        rich = write_probes(pipe, YesToTails(client), tmp_path / "rich.jsonl", n=8, min_searches=20)
    cal = rich.calibration
    assert cal is not None and cal.tail_judged >= 20 and cal.tail_fits == cal.tail_judged and cal.tail_shift > 2
    assert "past the head" in rich.format()
    judged = [r for r in _rows(tmp_path / "rich.jsonl") if r["kind"] == "judgment"]
    assert len(judged) >= cal.tail_judged // 2        # each drawn pair judged once (with and without the need may meet)
    with client_of(llm) as client:                     # the rule judge: the tail's tools do not fit
        sparse = write_probes(pipe, client, tmp_path / "sparse.jsonl", n=8, min_searches=20)
    assert sparse.calibration.tail_fits == 0 and sparse.calibration.tail_shift == 0.0
    hits = pipe.index.retrieve("weather forecast", None, k=8)
    shipped = pipe.probabilities("weather forecast", None, hits, 2)[2:]
    for outcome, lo, hi in ((rich, 0.6, 1.0), (sparse, 0.0, 0.1)):
        pipe.catalog_calibration = outcome.calibration   # the map raises this catalog (its first tools all fit)...
        assert outcome.calibration.apply(0.3) > 0.5
        tail = pipe.probabilities("weather forecast", None, hits, 2)[2:]
        assert lo <= tail.min() and tail.max() <= hi     # ...but the tail reads what its judged candidates say
    assert np.allclose(tail, shipped)                    # none fit: the shipped tail, not raised by the map
    pipe.catalog_calibration = None
    with client_of(llm) as client:                     # asked for no tail: none judged, the shipped level
        none = write_probes(pipe, client, tmp_path / "none.jsonl", n=8, min_searches=20, tail_per_search=0)
    assert none.calibration.tail_judged == 0 and none.calibration.tail_shift == 0.0


def test_a_tail_joins_an_answer_as_shipped_unless_its_level_moved(tmp_path):
    """The head's map moves the floor for extra tools; the tail is never mapped, but which tail tools join an
    answer reads its level through the same map: at the shipped level, the shipped tools (review of 0.17.0)."""
    from retrieval.pipeline.confidence import TailCalibration

    (tmp_path / "combiner-noex.json").write_text(json.dumps(LOGIT.to_dict()))
    from fakes import FakeScorer as Scorer, tiny_catalog
    for a, b, level in ((2.0, 0.0, 0.03), (0.5, 1.0, 0.10)):   # under the floor 0.05 / over it, shipped
        TailCalibration(a=float(np.log(level / (1 - level))), b=0.0, c=0.0, d=0.0).save(tmp_path / "tail_calibration.json")
        pipe = Pipeline(ToolIndex(tiny_catalog(), HashEncoder(), with_examples=False), Scorer({}, default=0.3, path=tmp_path),
                        policy=Policy(score_top=2, min_results=1))
        plain = pipe.search("weather forecast")
        pipe.catalog_calibration = CatalogCalibration(a, b, 40, 30, 0.6, pipe.model_key, tail_judged=200)
        same = pipe.search("weather forecast")
        assert [t.tool_id for t in same.tools] == [t.tool_id for t in plain.tools]
        assert [round(t.probability, 6) for t in same.tools[2:]] == [round(t.probability, 6) for t in plain.tools[2:]]
        pipe.catalog_calibration = CatalogCalibration(a, b, 40, 30, 0.6, pipe.model_key, tail_shift=3.0)
        moved = pipe.search("weather forecast")
        assert len(moved.tools) == 8 and moved.decision == plain.decision   # its level passes the floor now
        assert moved.tools[-1].probability == pytest.approx(1 / (1 + np.exp(-(np.log(level / (1 - level)) + 3.0))))


def test_a_tenants_recalibration_never_maps_the_tail(tmp_path):
    from retrieval.pipeline.recalibration import UseRecalibration

    pipe = tail_pipeline(tmp_path)
    hits = pipe.index.retrieve("weather forecast", None, k=8)
    shipped = pipe.probabilities("weather forecast", None, hits, 2)
    tenant = UseRecalibration(0.6, 1.7)
    res = pipe.search("weather forecast", recalibration=tenant, k=8)
    past = [t for t in res.tools if t.tool_id not in {h.tool_id for h in hits[:2]}]
    assert past and all(t.probability == pytest.approx(shipped[[h.tool_id for h in hits].index(t.tool_id)]) for t in past)
    head = [t for t in res.tools if t.tool_id in {h.tool_id for h in hits[:2]}]
    assert all(t.probability == pytest.approx(float(tenant.apply([0.3])[0])) for t in head)   # the head: the tenant's map


def test_the_tail_is_drawn_from_the_searchs_own_candidates(tmp_path):
    from retrieval.pipeline.probes import tail_candidates

    pipe = tail_pipeline(tmp_path)
    request = "post a message to the team in Slack"          # the search is restricted to Slack's two tools
    assert pipe.search(request).restricted_to == ["Slack"]
    assert tail_candidates(pipe, request, None) == []         # no tail there, so none drawn from other servers
    hits, p, top, lifted = pipe.candidates("weather forecast", None)
    assert lifted == set()
    drawn = tail_candidates(pipe, "weather forecast", None)
    assert top == 2 and len(drawn) == 1 and drawn[0][1] in {h.tool_id for h in hits[2:]}
    assert drawn[0][3] == len(hits) - 2                       # it stands for every candidate past the head


def test_a_tail_left_unjudged_keeps_the_shipped_level_and_the_head_calibrates(tmp_path):
    from fakes import ProbeClient

    pipe = tail_pipeline(tmp_path)
    cache = tmp_path / "p.jsonl"
    head = write_probes(pipe, ProbeClient(), cache, n=8, min_searches=10, tail_per_search=0)
    down = write_probes(pipe, ProbeClient(fail=True), cache, n=8, min_searches=10)   # the tail cannot be judged
    assert down.calibration is not None and down.calibration.a == head.calibration.a
    assert down.calibration.tail_shift == 0.0 and down.calibration.tail_judged == 0 and down.tail_waiting > 0
    assert "candidates still await a judgment: the shipped level" in down.format()


def test_a_calibration_is_read_once_per_search(tmp_path):
    """A calibration dropped while a search runs (a server's tools changed) must not leave the head and the tail
    on two scales: the whole answer reads the one it started with."""
    from retrieval.pipeline.confidence import TailCalibration

    pipe = tail_pipeline(tmp_path)
    TailCalibration(a=float(np.log(0.01 / 0.99)), b=0.0, c=0.0, d=0.0).save(tmp_path / "tail_calibration.json")
    pipe = Pipeline(pipe.index, pipe.scorer, policy=Policy(score_top=2, min_results=1))
    pipe.index.calibration = CatalogCalibration(0.6, 1.7, 40, 30, 0.6, pipe.model_key, tail_shift=3.0,
                                                tail_judged=200, tail_fits=20).to_dict()
    before = [(t.tool_id, round(t.probability, 6)) for t in pipe.search("weather forecast").tools]
    original = pipe._logits

    def dropped_meanwhile(*a, **k):
        pipe.index.calibration = None
        return original(*a, **k)

    pipe._logits = dropped_meanwhile
    during = [(t.tool_id, round(t.probability, 6)) for t in pipe.search("weather forecast").tools]
    assert during == before


def test_a_tail_awaiting_judgments_is_calibrated_again_and_a_lifted_tool_is_not_drawn(tmp_path, llm):
    from fakes import ProbeClient
    from retrieval.pipeline.probes import tail_candidates

    pipe = tail_pipeline(tmp_path)
    cache = tmp_path / "p.jsonl"
    write_probes(pipe, ProbeClient(), cache, n=8, min_searches=10, tail_per_search=0)
    partial = write_probes(pipe, ProbeClient(fail=True), cache, n=8, min_searches=10).calibration
    assert partial.tail_waiting > 0 and not partial.complete and partial.tail_shift == 0.0
    assert CatalogCalibration.from_dict(partial.to_dict()) == partial   # saved as it is, and read back
    with client_of(llm) as client:                                     # the next run judges what is missing
        done = write_probes(pipe, client, cache, n=8, min_searches=10).calibration
    assert done.complete and done.tail_judged > 0 and (done.a, done.b) == (partial.a, partial.b)
    # a tool the request names exactly is lifted by the search (shown at its floor): never a tail candidate
    request = "weather forecast and get_shards"
    hits, _, top, lifted = pipe.candidates(request, None)
    assert lifted == {ToolId("Elasticsearch", "get_shards")}
    assert all(tid not in lifted for _, tid, _, _ in tail_candidates(pipe, request, None, m=20))


def test_an_explanation_states_the_floor_a_tail_tool_was_compared_with(tmp_path):
    from retrieval.pipeline.confidence import TailCalibration

    pipe = tail_pipeline(tmp_path)
    TailCalibration(a=float(np.log(0.1 / 0.9)), b=0.0, c=0.0, d=0.0).save(tmp_path / "tail_calibration.json")
    pipe = Pipeline(pipe.index, pipe.scorer, policy=Policy(score_top=2, min_results=1))
    pipe.catalog_calibration = CatalogCalibration(0.5, 1.0, 40, 30, 0.6, pipe.model_key, tail_judged=200)
    res = pipe.search("weather forecast", explain=True)
    head, tail = res.tools[:2], res.tools[2:]
    assert tail and all("list floor 0.05" in t.explanation["reason"] for t in tail)   # the tail's own scale
    moved = pipe.catalog_calibration.policy(Policy()).floor
    assert all(f"list floor {moved:.3g}" in t.explanation["reason"] for t in head)


def test_audits_set_a_tenants_tail_level_from_its_own_traffic(tmp_path):
    """0.18.0: a search keeps the candidates past the head it read (``SearchResult.tail``: eligible tools only,
    shortcut tools left out); an audit judges one of them, drawn by a keyed hash of the request id (a repeated
    request draws afresh); the tenant's tail level starts at the catalog's and moves only where the audits' fits
    cannot come from it; a search with that recalibration shows the tail at the tenant's level, the head through
    its map."""
    from fakes import ProbeClient
    from retrieval.catalog.eligibility import Eligibility
    from retrieval.pipeline.probes import MIN_TAIL, audit_tail_shift
    from retrieval.pipeline.recalibration import UseRecalibration, platt
    from serve.audits import Auditor, recalibration_args
    from serve.usage import UsageBook

    # the level: kept under MIN_TAIL and where it explains the fits, moved where it cannot, from the catalog's
    assert audit_tail_shift([(0.001, 90.0, True)] * (MIN_TAIL - 1), 1.5) == 1.5
    assert audit_tail_shift([(0.001, 90.0, False)] * 200, 1.5) == 1.5
    hub = [(0.001, 90.0, i % 4 == 0) for i in range(60)]           # a model hub: a quarter of the tail fits
    assert audit_tail_shift(hub, 0.0) > 4.0 and audit_tail_shift(hub, 2.0) > 4.0
    high = [(0.001, 90.0, False)] * 3000                           # probes set it far too high: it comes down
    assert audit_tail_shift(high, 6.0) < 6.0

    pipe = tail_pipeline(tmp_path)
    allowed = Eligibility.of(servers=["Weather", "GitHub", "Elasticsearch"])
    result = pipe.search("weather forecast for a city", eligible=allowed)
    head = {t.tool_id for t in result.tools[:2]}
    assert result.tail and all(allowed.allows(t) and t not in head for t, _ in result.tail)
    named = pipe.search("weather forecast and get_shards")            # a tool named exactly: never a tail row
    assert ToolId("Elasticsearch", "get_shards") not in {t for t, _ in named.tail}
    assert Pipeline(pipe.index, None).search("weather forecast for a city").tail == ()   # no scorer: no tail read

    book = UsageBook(tmp_path / "usage")
    client = ProbeClient(judge_yes=0.9)
    auditor = Auditor(book, 1.0, 1000, lambda: client)
    who = type("T", (), {"name": "acme", "audit": True})()
    for i in range(30):   # one request, asked again and again
        assert auditor.offer(who, f"r{i}", "weather forecast for a city", result, pipe.index.catalog, 1, pipe.model_key)
    assert auditor.join(60)
    auditor.close()
    tails = [r["tail"] for r in book.tenant("acme").audits() if "tail" in r]
    assert len(tails) == 30 and len({(t["server"], t["tool"]) for t in tails}) > 3    # drawn afresh each time
    assert all(allowed.allows((t["server"], t["tool"])) for t in tails)
    assert all(t["weight"] == len(result.tail) and 0 <= t["p"] < 1 for t in tails)
    obs = book.audit_tail_observations("acme", pipe.model_key, "step")
    assert len(obs) == 30 and book.audit_tail_observations("acme", pipe.model_key, "tool") == []
    fitted = book.recalibration("acme", 25, 0.0, feedback=False, audits=True, prior=(1.0, 0.0, 2.0),
                                model=pipe.model_key, question="step")
    assert fitted.tail_judged == 30 and fitted.tail_fits == sum(t["fit"] for t in tails)
    assert fitted.tail_shift == audit_tail_shift(obs, 2.0)            # from the catalog's level, not the shipped one
    cal = CatalogCalibration(0.9, 0.3, 40, 30, 0.6, pipe.model_key, tail_shift=1.5)
    args = recalibration_args(type("S", (), {"audit_share": 0.1, "use_recalibration": False})(), who,
                              type("P", (), {"catalog_calibration": cal, "model_key": "m"})())
    assert args["prior"] == (0.9, 0.3, 1.5) and args["audits"]

    # in a search: past the head the tenant's level on the shipped scale, the head through the tenant's map
    base = pipe.search("weather forecast for a city", k=10)
    recal = UseRecalibration(0.7, -0.5, 30, tail_shift=5.0, tail_judged=30, tail_fits=9)
    moved = pipe.search("weather forecast for a city", k=10, recalibration=recal)
    shipped = dict(base.tail)
    for t in moved.tools:
        if t.tool_id in shipped:
            assert t.probability == pytest.approx(float(platt(shipped[t.tool_id], 1.0, 5.0)), rel=1e-6)
    first = base.tools[0]
    assert moved.tools[0].probability == pytest.approx(float(recal.apply(base.raw_best)), rel=1e-6)
    assert any(t.tool_id in shipped for t in moved.tools)
    same = pipe.search("weather forecast for a city", k=10, recalibration=UseRecalibration(1.0, 0.0, 30))
    assert [(t.tool_id, t.probability) for t in same.tools] == [(t.tool_id, t.probability) for t in base.tools]
    assert first.tool_id == moved.tools[0].tool_id


def test_the_model_key_names_the_scorer_and_its_probability_models_not_the_release(monkeypatch):
    from retrieval.pipeline import flow
    from retrieval.pipeline.confidence import ConfidenceModel

    key = pipeline().model_key
    monkeypatch.setattr("retrieval.version.package_version", lambda: "99.0.0")
    assert pipeline().model_key == key                        # an upgrade that changes no model keeps the key
    other = ConfidenceModel.from_dict({**LOGIT.to_dict(), "bias": 0.5})
    assert Pipeline(ToolIndex(catalog(), HashEncoder(), with_examples=False), FakeScorer({}, default=0.3),
                    confidence=other).model_key != key        # another confidence model: another key
    monkeypatch.setattr(flow, "PROBABILITY_RULES", flow.PROBABILITY_RULES + 1)
    assert pipeline().model_key != key                        # rules changed in code: another key



def test_the_model_key_reads_the_models_a_pipeline_uses_now():
    from retrieval.pipeline.confidence import TailCalibration
    from scorer import default_model_path

    shipped = Pipeline(ToolIndex(catalog(), HashEncoder(), with_examples=False),
                       FakeScorer({}, default=0.3, path=default_model_path()))
    key = shipped.model_key
    assert shipped.tail_calibration is not None and shipped.tail_confidence is not None   # the shipped models read
    assert shipped.with_index(ToolIndex(catalog(), HashEncoder(), with_examples=False)).model_key == key
    shipped.tail_calibration = TailCalibration(-1.0, 0.0, 0.0, 0.0)   # reassigned after the key was read
    assert shipped.model_key != key
