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

    def rows(p):
        return [{"searches": [{"best": float(b), "fits": bool(t)}]} for b, t in zip(p, y)]

    under = fit_probes(rows(1 / (1 + np.exp(-(z - 1.0)))), "m")     # reads one logit under the truth
    assert under.b == pytest.approx(1.0, abs=0.2) and under.a == pytest.approx(1.0, abs=0.15)
    fine = fit_probes(rows(1 / (1 + np.exp(-z))), "m")
    assert abs(fine.b) < 0.15 and abs(fine.a - 1) < 0.15
    assert fine.searches == 1000 and fine.fits == int(y.sum()) and fine.model == "m"


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
        for policy in (None, Policy(proceed_threshold=0.7, no_fit_below=0.15)):
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


def test_probes_are_written_searched_judged_and_fitted_once(llm, tmp_path):
    pipe = pipeline(probs={t: 0.5 for _, t, _ in TOOLS})
    cache = tmp_path / "probes.jsonl"
    with client_of(llm) as client:
        out = write_probes(pipe, client, cache, n=10, concurrency=2, min_searches=10)
    assert out.error is None and (out.written, out.cached) == (10, 0)
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(rows) == 10 and {(r["server"], r["tool"]) for r in rows} == {(t.server, t.name) for t in
                                                                            plan_probes(catalog(), 10)}
    assert all(len(r["searches"]) == 2 and r["model"] == pipe.model_key for r in rows)
    assert all(r["need"] and "please" not in r["need"] for r in rows)            # the need came from the request
    judged = [s for r in rows for s in r["searches"] if s["first"] != [r["server"], r["tool"]]]
    assert len(llm.judged) == len(judged)                                          # only other first tools
    cal = out.calibration
    assert cal is not None and cal.searches == 20 and cal.model == pipe.model_key
    assert cal.fits == sum(s["fits"] for r in rows for s in r["searches"])
    assert cal.apply(0.5) > 0.5   # the fake scorer reads 0.5 where its first tools mostly fit
    assert "decisions unchanged" in out.format()

    arrivals = llm.arrivals
    with client_of(llm) as client:                  # the same catalog: nothing is asked again
        again = write_probes(pipe, client, cache, n=10, min_searches=10)
    assert llm.arrivals == arrivals and (again.written, again.cached) == (0, 10)
    assert again.calibration == cal


def test_a_failing_endpoint_or_too_few_probes_saves_no_calibration(llm, tmp_path):
    pipe = pipeline()
    llm.status = 401
    with client_of(llm) as client:
        out = write_probes(pipe, client, tmp_path / "p.jsonl", n=10, concurrency=1)
    assert out.calibration is None and "401" in out.error and "no calibration saved" in out.format()
    llm.status = None
    with client_of(llm) as client:
        few = write_probes(pipe, client, tmp_path / "p.jsonl", n=3)   # 6 searches, under the minimum
    assert few.error is None and few.calibration is None
    assert fit_probes([{"searches": [{"best": 0.5, "fits": True}] * 25}], "m").searches == 25
    (tmp_path / "bad.jsonl").write_text('{"server": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl, line 1"):
        write_probes(pipe, None, tmp_path / "bad.jsonl", n=3)


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
    assert cal.searches == 2 * len(TOOLS) and "calibration probes: 12 written" in out
    assert (tmp_path / "idx.probes.jsonl").exists()
    # the calibration is read back by the search command's pipeline
    assert main(["search", "weather forecast for paris", "--index", str(tmp_path / "idx"), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["decision"] in ("proceed", "search_again")
