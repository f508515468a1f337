"""Ranks 11-100 read against a judged sample (benchmarks/tail_sample.py): the draw's chances sum to the budget
and never fall under the floor, each judged fit counts 1/pi, and the reading refuses an unjudged draw."""

import json

import numpy as np
import pytest

from benchmarks import tail_sample as ts


def test_the_chances_sum_to_the_budget_and_keep_the_floor():
    rng = np.random.default_rng(0)
    scores = [rng.beta(0.3, 8, size=90) for _ in range(50)]
    tau = ts.tau_for(scores, 400, 0.02)
    pi = ts.inclusion(np.concatenate(scores), tau, 0.02)
    assert abs(pi.sum() - 400) < 0.5
    assert pi.min() >= 0.02 and pi.max() <= 1.0
    high = np.concatenate(scores) >= tau
    assert np.all(pi[high] == 1.0)                       # what the student likes most is always judged
    with pytest.raises(ValueError, match="under the floor"):
        ts.tau_for(scores, 50, 0.02)                     # 0.02 x 4,500 candidates is 90 already
    with pytest.raises(ValueError, match="no candidates"):
        ts.tau_for([], 10, 0.02)


def test_the_draw_is_stable_and_differs_by_key():
    assert ts.uniform("0", "q1", "S", "t") == ts.uniform("0", "q1", "S", "t")
    draws = [ts.uniform("0", "q1", "S", f"t{i}") for i in range(2000)]
    assert 0.45 < np.mean(draws) < 0.55 and min(draws) >= 0 and max(draws) < 1
    assert ts.uniform("1", "q1", "S", "t") != ts.uniform("0", "q1", "S", "t")


def _request(rid, kind, pi, judged_at, tail_p=0.01, n=90):
    return {"id": rid, "catalog": kind, "n_eligible": 200, "head_p": [0.5] + [0.01] * 9, "tail_p": [tail_p] * n,
            "tail_r": [0.01] * n, "pi": [pi] * n, "judged_at": judged_at,
            "judged_ids": [["S", f"{rid}_{i}"] for i in judged_at], "labelled_at": []}


def _write_design(folder, reqs):
    """A drawn report design and its items file, as ``draw`` writes them."""
    (folder / "design.json").write_text(json.dumps({"set": "report", "tau": 0.05, "floor": 0.02, "requests": reqs}))
    (folder / "items.jsonl").write_text("".join(
        json.dumps({"id": r["id"], "catalog": r["catalog"], "query": "x",
                    "candidates": [{"server": s, "tool": t} for s, t in r["judged_ids"]]}) + "\n" for r in reqs))


def test_each_judged_fit_counts_one_over_its_chance():
    reqs = [_request("a", "k", 0.5, [0, 30, 60]), _request("b", "k", 1.0, [5])]
    judged = {"a": {("S", "a_0"): 0.9, ("S", "a_30"): 0.1, ("S", "a_60"): 0.6}, "b": {("S", "b_5"): 1.0}}
    every = ts.estimate(reqs, judged, 11, 100)
    assert every["found"] == 3 and every["sampled"] == 4
    assert every["observed"] == pytest.approx(2 + 2 + 1)            # two at pi 0.5, one at pi 1
    assert every["predicted"] == pytest.approx(2 * 90 * 0.01)
    assert every["se"] == pytest.approx((2 * (0.5 / 0.25)) ** 0.5)  # the pi=1 fit adds no variance
    first = ts.estimate(reqs, judged, 11, 20)                         # index 0 is rank 11, index 5 rank 16
    assert first["found"] == 2 and first["observed"] == pytest.approx(3) and first["candidates"] == 20
    assert ts.estimate(reqs, judged, 51, 100)["found"] == 1           # index 60 is rank 71


def test_the_ratio_interval_brackets_the_ratio():
    rng = np.random.default_rng(1)
    pred = list(rng.uniform(0, 0.2, 300))
    obs = list((rng.uniform(size=300) < 0.1).astype(float))
    lo, hi = ts.ratio_interval(pred, obs)
    r = sum(pred) / sum(obs)
    assert lo < r < hi and hi / lo < 3
    assert ts.ratio_interval([0.1] * 5, [0.0] * 5) == (float("inf"), float("inf"))   # nothing observed anywhere


def test_read_reports_and_refuses_an_unjudged_draw(tmp_path, capsys):
    reqs = [_request(f"q{i}", "ab"[i % 2], 0.5, [i % 90]) for i in range(40)]
    _write_design(tmp_path, reqs)
    answers = tmp_path / "judged_01.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 1, "p": {"1": 0.9} if i < 4 else {}}) + "\n"
                               for i, r in enumerate(reqs)))
    out = tmp_path / "out.json"
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())["report"]
    assert rep["a"]["11-100"]["found"] == 2 and rep["a"]["11-100"]["observed"] == pytest.approx(4)
    assert rep["all but Gorilla"]["11-100"]["observed"] == pytest.approx(8)
    assert rep["a"]["11-100"]["ratio"] == pytest.approx(20 * 90 * 0.01 / 4)
    assert "| a | 11-100 |" in capsys.readouterr().out
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 1, "p": {}}) + "\n" for r in reqs[:-1]))
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out)]) == 2
    assert "no judgment" in capsys.readouterr().err


def test_probe_read_sets_each_kinds_tail_level_and_reads_it(tmp_path, capsys):
    """A kind whose probes' tail candidates mostly fit moves its level up (and reads nearer what fits); a kind
    whose probes found none keeps the shipped tail; 0.16.0's reading maps the tail with the head's map."""
    reqs = [_request(f"{k}{i}", k, 1.0, [0], tail_p=0.001) for k in ("hub", "plain") for i in range(30)]
    _write_design(tmp_path, reqs)
    answers = tmp_path / "judged_01.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 1, "p": {"1": 0.9} if r["catalog"] == "hub" else {}})
                               + "\n" for r in reqs))
    probes = tmp_path / "probes"
    probes.mkdir()
    rows = [{"id": f"probe:{k}:{i}", "catalog": k, "mode": "need", "tool": ["S", f"{k}{i}"], "p": 0.001, "weight": 90.0}
            for k in ("hub", "plain") for i in range(40)]
    (probes / "probe_tails.json").write_text(json.dumps({"rows": rows}))
    (probes / "tail_items.jsonl").write_text("".join(json.dumps(
        {"id": r["id"], "catalog": r["catalog"], "query": "x", "candidates": [{"server": "S", "tool": r["tool"][1]}]}) + "\n"
        for r in rows))
    verdicts = probes / "tail_judged_01.jsonl"
    verdicts.write_text("".join(json.dumps({"id": r["id"], "n": 1, "p": {"1": 0.9} if r["catalog"] == "hub" and i % 2 else {}})
                                + "\n" for i, r in enumerate(rows)))
    maps = tmp_path / "maps.json"
    maps.write_text(json.dumps({"table": {"hub": {"need": {"params": {"pooled_platt": [0.5, 2.0]}}},
                                          "plain": {"need": {"params": {"pooled_platt": [0.5, 2.0]}}}}}))
    out = tmp_path / "out.json"
    assert ts.main(["probe-read", "--dir", str(tmp_path), "--judged", str(answers), "--probes", str(probes),
                    "--probe-judged", str(verdicts), "--maps", str(maps), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())["report"]
    assert rep["plain"]["shift"] == 0.0 and rep["plain"]["probes_level"]["predicted"] == pytest.approx(
        rep["plain"]["shipped"]["predicted"])
    assert rep["hub"]["shift"] > 3 and rep["hub"]["probes_level"]["predicted"] > 10 * rep["hub"]["shipped"]["predicted"]
    assert rep["plain"]["probes_map"]["predicted"] > 20 * rep["plain"]["shipped"]["predicted"]   # the head's map, on the tail
    assert "| hub |" in capsys.readouterr().out


def test_a_census_of_ranks_11_to_20_replaces_the_sample_there():
    reqs = [_request("a", "k", 0.5, [0, 30]), _request("b", "k", 0.5, [2])]
    judged = {"a": {("S", "a_0"): 0.9, ("S", "a_30"): 0.9}, "b": {("S", "b_2"): 0.9}}
    census = {"a": {("S", f"c{i}"): (0.9 if i < 2 else 0.0) for i in range(10)}}   # b was not in the census
    e = ts.estimate(reqs, judged, 11, 100, census=census)
    assert e["found"] == 2 + 1 + 1 and e["observed"] == pytest.approx(2 + 2 + 2)   # a: census 2, rank 41 at 0.5; b: sample
    assert e["sampled"] == 10 + 1 + 1 and e["se"] == pytest.approx((2 * 2.0) ** 0.5)
    first = ts.estimate(reqs, judged, 11, 20, census=census)
    assert first["observed"] == pytest.approx(2 + 2)                                   # the census counts as it is
    assert ts.estimate(reqs, judged, 21, 50, census=census)["observed"] == pytest.approx(2)


def test_answers_on_a_calibrated_index_keep_their_tools_at_the_shipped_tail_level():
    rows = [{"head_p": [0.6, 0.2, 0.04] + [0.01] * 7, "tail_p": [0.001] * 90} for _ in range(5)]
    same = ts.answers_moved(rows, 0.5, 1.5, 0.0)          # a map that raises the head a lot, the tail as shipped
    assert same["tools_shipped"] == same["tools_calibrated"] and same["with_a_tool_past_10"] == 0
    assert same["lost_a_scored_tool"] == 0 and same["decisions_changed"] == 0
    moved = ts.answers_moved(rows, 1.0, 0.0, 5.0)          # the tail's level x150: past the floor for extra tools
    assert moved["with_a_tool_past_10"] == 5 and moved["tools_calibrated"] == 10 and moved["decisions_changed"] == 0


def test_fits_agree_counts_the_second_judges_verdicts_per_source(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "q1", "catalog": "k", "query": "x", "candidates": [
        {"server": "S", "tool": "a"}, {"server": "S", "tool": "b"}]}) + "\n")
    first = tmp_path / "first_01.jsonl"
    first.write_text(json.dumps({"id": "q1", "n": 2, "p": {"1": 0.9}}) + "\n")
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps([{"check_id": "chk001", "source": "src", "id": "q1"}]))
    second = tmp_path / "second.jsonl"
    second.write_text(json.dumps({"id": "chk001", "n": 2, "p": {"1": 0.8, "2": 0.7}}) + "\n")
    out = tmp_path / "out.json"
    argv = ["fits-agree", "--mapping", str(mapping), "--second", str(second), "--out", str(out),
            "--source", f"src={items}:{tmp_path.relative_to(tmp_path.anchor)}/first_*.jsonl"]
    import os
    old = os.getcwd()
    os.chdir(tmp_path.anchor)
    try:
        assert ts.main(argv) == 0
    finally:
        os.chdir(old)
    assert json.loads(out.read_text())["rows"]["src"] == [1, 0, 1, 0]
    assert ts.main([*argv[:-1], "src=nothing"]) == 2 and "NAME=ITEMS:JUDGED_GLOB" in capsys.readouterr().err


def test_a_request_id_names_its_kind():
    assert ts._kind_of("api_bank:level-1/AddAgenda:turn0", "api_bank")
    assert not ts._kind_of("api_bank:level-1/AddAgenda:turn0", "mcpzero-org")
    assert ts._kind_of("q04436", "mcpzero-org") and ts._kind_of("ind0-26", "mcpzero-org")
    assert not ts._kind_of("q04436", "acebench")


def test_an_extension_refuses_another_sets_design_or_none(tmp_path, capsys):
    (tmp_path / "design.json").write_text(json.dumps({"set": "report", "tau": 0.05, "floor": 0.02, "requests": []}))
    (tmp_path / "items.jsonl").write_text("")
    out = tmp_path / "out"
    assert ts.main(["draw", "--set", "fit", "--extend", str(tmp_path), "--out", str(out)]) == 2
    assert "is a report design, not fit" in capsys.readouterr().err
    assert ts.main(["draw", "--set", "fit", "--extend", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "--extend" in capsys.readouterr().err
    assert ts.main(["need-batches", "--extend", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert ts.main(["need-batches", "--extend", str(tmp_path), "--out", str(out)]) == 2   # a report design
    assert "is a report design" in capsys.readouterr().err
    assert ts.main(["draw", "--set", "report", "--extend", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "another folder than --extend" in capsys.readouterr().err
    (tmp_path / "design.json").write_text(json.dumps({"set": "report", "n": 400, "tau": 0.05, "floor": 0.02,
                                                      "requests": []}))
    assert ts.main(["draw", "--set", "report", "--extend", str(tmp_path), "--out", str(out)]) == 2
    assert "adds nothing" in capsys.readouterr().err
    (tmp_path / "design.json").write_text(json.dumps({"set": "report", "requests": []}))
    assert ts.main(["draw", "--set", "report", "--extend", str(tmp_path), "--out", str(out)]) == 2
    assert "not a design file" in capsys.readouterr().err
    assert not out.exists()


def test_read_can_leave_out_a_kind_whose_draw_was_not_judged(tmp_path, capsys):
    reqs = [_request(f"q{i}", "ab"[i % 2], 0.5, [i % 90]) for i in range(10)]
    _write_design(tmp_path, reqs)
    answers = tmp_path / "judged_01.jsonl"   # only kind "a" judged
    answers.write_text("".join(json.dumps({"id": r["id"], "n": 1, "p": {"1": 0.9}}) + "\n"
                               for r in reqs if r["catalog"] == "a"))
    out = tmp_path / "out.json"
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out)]) == 2
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out), "--kinds", "a"]) == 0
    data = json.loads(out.read_text())
    rep = data["report"]
    assert set(rep) == {"a", "all but Gorilla"} and rep["a"]["11-100"]["found"] == 5 and data["kinds"] == ["a"]
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out),
                    "--kinds", "a", "zz"]) == 2                      # a misspelt kind is refused, not dropped
    assert ts.main(["read", "--dir", str(tmp_path), "--judged", str(answers), "--out", str(out), "--kinds", "z"]) == 2
    assert "no drawn request of z" in capsys.readouterr().err


def test_similarity_reads_each_judged_candidate_against_its_first_tool(tmp_path, capsys):
    """A near-twin of the first tool (another forge's create_issue) judged to fit, an unrelated tool judged not to:
    the cosine ranks them, and each fit lands in its band with its weight (one over its chance)."""
    req = {"id": "q1", "catalog": "mcpzero-org", "n_eligible": 100, "head_p": [0.9] + [0.01] * 9,
           "tail_p": [0.001] * 90, "tail_r": [0.01] * 90, "pi": [0.5] + [1.0] * 89, "judged_at": [0, 1],
           "judged_ids": [["GitLab", "create_issue"], ["Telegram", "send_message"]], "labelled_at": []}
    (tmp_path / "design.json").write_text(json.dumps({"set": "report", "tau": 0.05, "floor": 0.02, "requests": [req]}))
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "q1", "catalog": "mcpzero-org", "query": "x", "candidates": [
        {"server": "GitLab", "tool": "create_issue"}, {"server": "Telegram", "tool": "send_message"}]}) + "\n")
    answers = tmp_path / "judged_01.jsonl"
    answers.write_text(json.dumps({"id": "q1", "n": 2, "p": {"1": 0.9}}) + "\n")
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps({"rows": [{"id": "q1", "mode": "need", "answerable": True,
                                          "tools1": [["GitHub", "create_issue"]]}]}))
    out = tmp_path / "sim.json"
    assert ts.main(["similarity", "--dir", str(tmp_path), "--judged", str(answers), "--flow", str(flow),
                    "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["pairs"] == 2 and res["fits"] == 1 and res["auroc"] == 1.0
    fit_band = next(b for b in res["bands"] if b["fits"])
    assert fit_band["fits_estimated"] == pytest.approx(2.0) and fit_band["from"] >= 0.5
    assert "AUROC of the cosine" in capsys.readouterr().out
    flow.write_text(json.dumps({"rows": []}))
    assert ts.main(["similarity", "--dir", str(tmp_path), "--judged", str(answers), "--flow", str(flow),
                    "--out", str(out)]) == 2


def test_an_extension_draws_new_requests_with_the_earlier_chances_and_keeps_the_earlier_sample(tmp_path, monkeypatch):
    """``draw --extend``: the earlier design's tau and floor are reused (not refitted to a budget), its requests and
    items come first and unchanged, and only the added requests are drawn — each candidate judged with chance
    ``max(floor, s / tau)`` of the student's probability ``s``."""
    import types

    import benchmarks.judged_flow as jf
    import retrieval.evaluation.agent_flow as af
    import retrieval.pipeline.flow as pf
    import scorer as scorer_pkg
    from retrieval.catalog.model import ToolId

    earlier_dir = tmp_path / "earlier"
    earlier_dir.mkdir()
    old = _request("acebench:old", "acebench", 0.5, [0])
    _write_design(earlier_dir, [old])
    design = json.loads((earlier_dir / "design.json").read_text())
    (earlier_dir / "design.json").write_text(json.dumps({**design, "set": "fit", "n": 1, "tau": 0.2, "floor": 0.05}))
    old_items = (earlier_dir / "items.jsonl").read_text()

    tools = [ToolId("acebench", f"t{i}") for i in range(100)]
    hits = [types.SimpleNamespace(tool_id=t) for t in tools]
    index = types.SimpleNamespace(catalog={t: t for t in tools},
                                  retrieve=lambda *a, **k: hits)
    case = types.SimpleNamespace(id="acebench:new", request="r", need="n", eligible=None, targets={tools[12]})
    monkeypatch.setattr(ts, "_more_cases", lambda set_name, n, seed, skip: iter([("acebench", index, [case])])
                        if skip == {"acebench:old"} and n == 400 else iter([]))
    scores = [0.9 if i == 0 else 0.0 for i in range(90)]   # rank 11 certain, the others at the floor
    monkeypatch.setattr(scorer_pkg.Scorer, "load", classmethod(lambda cls, *a, **k: types.SimpleNamespace(
        score=lambda request, need, cands: scores[:len(cands)])))
    monkeypatch.setattr(pf, "Pipeline", lambda index, scorer, policy: types.SimpleNamespace(index=index))
    monkeypatch.setattr(af, "run_case", lambda pipe, c, mode, first_only: {
        "n_eligible": 100, "head_p": [0.5] * 10, "tail_p": [0.001] * 90, "tail_r": [0.01] * 90})
    monkeypatch.setattr(jf, "_queries", lambda flow, ids: {i: "the request" for i in ids})
    out = tmp_path / "more"
    assert ts.main(["draw", "--set", "fit", "--extend", str(earlier_dir), "--out", str(out)]) == 0
    drawn = json.loads((out / "design.json").read_text())
    assert (drawn["tau"], drawn["floor"], drawn["n"]) == (0.2, 0.05, 400) and drawn["earlier"]["n"] == 1
    assert [d["id"] for d in drawn["requests"]] == ["acebench:old", "acebench:new"]
    assert drawn["requests"][0] == old
    new = drawn["requests"][1]
    assert new["pi"][0] == 1.0 and set(new["pi"][1:]) == {0.05} and new["labelled_at"] == [2]
    assert 0 in new["judged_at"]                                         # chance 1: always judged
    items = (out / "items.jsonl").read_text()
    assert items.startswith(old_items) and items.count("\n") == 2
    assert json.loads(items.splitlines()[1])["query"] == "the request"
